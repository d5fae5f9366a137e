"""Where ``step_nb``'s time goes: a per-verb profile of the engine on one run.

Run (from the repository root)::

    python -m benchmarks.step_profile --trace TRACE --table TABLE --calibration CAL \\
        [--policy fixed:0 ...] [--rules on|off]

A copy of the single-replica driver (:func:`specsim.sim._engine_kernels.run_nb`) steps the run
with the engine's own verbs, in the order ``step_nb`` calls them, and reads the CPU's cycle
counter between them (LLVM's ``readcyclecounter``: a few cycles a read). It prints each verb's
share of the run's cycles, the cycles per step and per sequence-step, and checks that the run
ended as ``simulate`` ends it (the same finish times), so the profile is of the real work.
The figures are shares, not absolute times. The cycle counter runs on while the process waits
for a core, so on a loaded machine each figure is the least over ``--repeat`` runs (a wait
falls on some runs, not on all). Beside them, ``run_nb/copy``: the cycles of the engine's own
driver over the copy's on the same run (1.0 when the driver runs the step as the copy does,
its verbs inlined; a step called out of line costs a call with its bundles, hundreds of scalar
arguments, every step).
"""

from __future__ import annotations

import argparse

import numpy as np
from llvmlite import ir
from numba.core import cgutils, types
from numba.extending import intrinsic

from specsim._jit import jit
from specsim.sim import _depth_kernels as dk
from specsim.sim import _engine_kernels as ek
from specsim.sim import _outcome_kernels as ok
from specsim.sim import _schedule_kernels as sk
from specsim.sim._draw_kernels import seed_key_nb

VERBS = ("feed and idle", "plan depths", "schedule running", "admit", "price", "apply",
         "adapt, log, release")


@intrinsic
def _cycles(typingctx):
    """The CPU's cycle counter (``llvm.readcyclecounter``)."""
    def codegen(context, builder, signature, args):
        fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(ir.IntType(64), []),
                                            "llvm.readcyclecounter")
        return builder.call(fn, [])
    return types.uint64(), codegen


@jit(_nrt=False)
def _profiled_run_nb(req, tab, cal, srv, st, log, ws, plan, tree, spent):
    """``run_nb`` to the end of the run with ``step_nb`` unrolled into its verbs; ``spent[v]``
    gains the cycles of verb ``v`` (VERBS' order), ``spent[len(VERBS)]`` counts the steps."""
    s = st.rec[0]
    o = srv.rec[0]
    n_req = req.arrival_s.shape[0]
    key = seed_key_nb(o.seed)
    while True:
        c0 = _cycles()
        while s.fed < n_req and req.arrival_s[s.fed] <= s.t_s:
            sk.push_back_nb(st, s.fed)
            s.fed += 1
        if s.n_running == 0 and s.q_len == 0:
            if s.fed >= n_req:
                break
            ek.idle_until_nb(srv, st, req.arrival_s[s.fed])
            spent[0] += _cycles() - c0
            continue
        c2 = _cycles()
        spent[0] += c2 - c0
        n = s.ctx_seqs
        ek._clear_tally(ws)
        budget = o.max_num_batched_tokens
        separate = o.chunked == 0
        k = np.int64(0)
        admitted = False
        if separate:
            before = s.n_running
            sk.admit_nb(req, srv, st, ws, budget, separate)
            admitted = s.n_running > before
            c3 = _cycles()
            spent[3] += c3 - c2
            c2 = c3
        if admitted:
            n = np.int64(0)
        else:
            k = dk.plan_depths_nb(req, tab, cal, srv, st, ws, plan, tree, n, key)
            c3 = _cycles()
            spent[1] += c3 - c2
            budget, preempted = sk.schedule_running_nb(req, srv, st, ws, budget, k)
            c4 = _cycles()
            spent[2] += c4 - c3
            if not separate and not preempted:
                sk.admit_nb(req, srv, st, ws, budget, separate)
            spent[3] += _cycles() - c4
        c5 = _cycles()
        dms, dj = ek._decode_part_nb(tab, srv, st, ws, tree, n, k)
        ms, n_sched, rows, ptok = ek._price_nb(srv, st, ws, k, dms, dj)
        t = s.t_s + ms / 1000.0
        c6 = _cycles()
        spent[4] += c6 - c5
        tokens, accepted, done, first_done = ok.apply_nb(req, cal, srv, st, ws, tree, t, key)
        if s.kv_used > s.kv_peak:
            s.kv_peak = s.kv_used
        s.kv_block_s += s.kv_used * (ms / 1000.0)
        s.emitted += tokens
        s.accepted += accepted
        c7 = _cycles()
        spent[5] += c7 - c6
        if o.adaptive != 0 and n_sched > 0 and k > 0:
            dk.adapt_nb(srv, st, accepted / n_sched)
        if n_sched > 0:
            ek.log_step_nb(st, log, t, n_sched, rows / n_sched, tokens, ptok)
        if done > 0:
            ek._release_finished(req, st, first_done, done)
        s.t_s = t
        spent[6] += _cycles() - c7
        spent[7] += 1
    return s.finished == n_req


@jit(_nrt=False)
def _timed_run_nb(req, tab, cal, srv, st, log, ws, plan, tree):
    """The cycles of the engine's own driver, :func:`~specsim.sim._engine_kernels.run_nb`, to the
    end of the run."""
    c0 = _cycles()
    ek.run_nb(req, tab, cal, srv, st, log, ws, plan, tree, np.int64(1) << 62)
    return _cycles() - c0


def profile(requests, table, calibration, policy, repeat=1, **options):
    """``(shares, steps, cycles, sequence-steps, driver over copy)``: each verb's share of the
    run's cycles (VERBS' order; each verb's least over ``repeat`` runs), the steps run, the cycles
    in all, and the engine's driver's least cycles over the copy's; the run is checked against
    :func:`specsim.simulate`."""
    from specsim.interop import read_policy
    from specsim.sim import simulate
    from specsim.sim.engine import prepare
    from specsim.sim.options import ServerOptions

    want = simulate(requests, table, calibration, policy, **options)
    least = None
    driver = None
    for _ in range(repeat):
        p = prepare(requests, table, calibration, read_policy(policy), ServerOptions(**options))
        spent = np.zeros(len(VERBS) + 1, np.uint64)
        _profiled_run_nb(p.req, p.tab, p.cal, p.srv, p.st, p.log, p.ws, p.plan, p.tree, spent)
        rec = p.st.rec[0]
        if not (np.array_equal(p.req.finish_s, want.finish_s) and rec["kv_peak"] == want.kv["peak_blocks"]
                and rec["kv_block_s"] == want.kv["block_s"]):
            raise SystemExit("the profiled run differs from simulate's: the profile copy of step_nb is out of date")
        least = spent if least is None else np.minimum(least, spent)
        q = prepare(requests, table, calibration, read_policy(policy), ServerOptions(**options))
        c = int(_timed_run_nb(q.req, q.tab, q.cal, q.srv, q.st, q.log, q.ws, q.plan, q.tree))
        driver = c if driver is None else min(driver, c)
    total = float(least[:-1].sum())
    return least[:-1] / total, int(least[-1]), total, int(rec["seq_steps"]), driver / total


def main(argv=None) -> int:
    import specsim

    ap = argparse.ArgumentParser(prog="python -m benchmarks.step_profile", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trace", required=True)
    ap.add_argument("--table", required=True)
    ap.add_argument("--calibration", required=True)
    ap.add_argument("--policy", action="append", help="default: fixed:0, fixed:3, propose, sequence")
    ap.add_argument("--rules", choices=("on", "off"), default="off",
                    help="off: separate prefill steps, no token budget (the first engine); on: the defaults")
    ap.add_argument("--max-num-seqs", type=int, default=128)
    ap.add_argument("--k-max", type=int, default=4)
    ap.add_argument("--repeat", type=int, default=5, help="runs per policy; each figure is the least")
    args = ap.parse_args(argv)
    reqs = specsim.read_trace(args.trace).requests
    table = specsim.CostTable.load(args.table)
    cal = specsim.AcceptanceCalibration.load(args.calibration)
    opts = {"max_num_seqs": args.max_num_seqs, "k_max": args.k_max}
    if args.rules == "off":
        opts.update(chunked_prefill=False, max_num_batched_tokens=None)
    print(f"{'policy':10s} {'steps':>7s} {'cyc/step':>9s} {'cyc/seq':>8s}  " + "  ".join(v for v in VERBS)
          + "  run_nb/copy")
    for pol in args.policy or ("fixed:0", "fixed:3", "propose", "sequence"):
        profile(reqs[:200], table, cal, pol, **opts)  # compile
        shares, steps, cycles, seq_steps, driver = profile(reqs, table, cal, pol, args.repeat, **opts)
        cells = "  ".join(f"{100 * x:{len(v)}.1f}" for v, x in zip(VERBS, shares))
        print(f"{pol:10s} {steps:7d} {cycles / steps:9.0f} {cycles / max(seq_steps, 1):8.1f}  {cells}  {driver:11.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
