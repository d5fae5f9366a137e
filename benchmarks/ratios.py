"""Speed ratios kept with the commit they were measured on, and a quick check against them.

Every figure is a ratio of two CPU times measured in the same run (``time.process_time``, best
of ``--rounds``, the two sides interleaved), so it holds on a shared, noisy machine where
absolute times move by 2x. Each is a cost ratio: lower is better.

- ``engine_over_reference``: ``sequence`` on the first 300 requests of the Azure 2023
  conversation hour, the engine over the plain-Python reference engine (tests/reference_engine.py);
- ``rules_on_over_off``: the four policies (fixed:0, fixed:3, propose, sequence) on the hour with
  the scheduling rules on (token budget, chunked prefill, a 300,000-token KV cache) over off;
- ``context_over_plain``: the four policies on the hour priced on a table with a context axis over
  the same table's reference grid as a plain table;
- ``length_10x``: ``fixed:3`` on 100,000 synthetic requests over 10,000 (linear: 10);
- ``fleet_rate_64x``: ``fixed:3`` on 64 replicas with the hour at 64x its rate over one replica
  on the plain hour (benchmarks/fleet_scale.py; target <= 64);
- ``planner_over_rust`` and ``planner_over_rust:rows_pay`` (where ``cargo`` is installed):
  ``Planner.depths`` at n = 256, K = 8 over the compiled Rust reference of the same rule
  (benchmarks/rust_reference.py; wall time, each side best of ``--rounds`` medians, at least 7; target
  <= 0.05, 20x faster), with no extra row paying and with 512 paying;
- ``verdicts_early_over_every_seed`` (``--write`` only): the two verdicts of the four policies
  on the hour, reruns stopped early over every seed rerun (specsim/sim/verdict.py);
- ``fleet_copies_64x`` (``--write`` only): 64 copies of the hour merged on 64 replicas over one
  replica on one hour (linear: 64);
- with ``--old CHECKOUT`` (a git worktree of an older commit, e.g. 5a34273, the first engine):
  ``vs_old:POLICY:off|on`` and ``vs_old:total:off|on``, this engine's CPU time per policy over
  the old one's (benchmarks/engine_vs_old.py).

Usage::

    python -m benchmarks.ratios --check            # quick: exit 1 if a ratio is > 1.5x its stored value
    python -m benchmarks.ratios --write [--old CHECKOUT]   # measure and store with this commit

``--write`` keeps a stored ratio it does not measure (the ``vs_old`` ones without ``--old``), with
the commit it was measured on under ``kept``.

The stored values live in benchmarks/ratios.json with the commit and machine they were measured
on. ``--check`` measures only the ratios that need no other checkout unless ``--old`` is given.
"""

from __future__ import annotations

import argparse
import json
import platform
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
STORED = Path(__file__).resolve().parent / "ratios.json"
CONV = ("traces", "azure2023", "AzureLLMInferenceTrace_conv.csv")
FOUR = ("fixed:0", "fixed:3", "propose", "sequence")
RULES_OFF = {"chunked_prefill": False, "max_num_batched_tokens": None}
RULES_ON = {"max_num_batched_tokens": 8192, "kv_capacity_tokens": 300_000}
COSTS = {"prefill_ms_per_token": 0.5, "prefill_j_per_token": 0.03}
# A ratio past this many times its stored value fails the check: loose enough for a noisy
# machine, tight enough to catch the next 3x.
TOLERANCE = 1.5


def _best_pair(a, b, rounds):
    """Best CPU seconds of ``a()`` and of ``b()`` over ``rounds`` interleaved calls of each."""
    best = [float("inf"), float("inf")]
    for _ in range(rounds):
        for i, fn in enumerate((a, b)):
            t0 = time.process_time()
            fn()
            best[i] = min(best[i], time.process_time() - t0)
    return best


def measure(rounds=3, old=None, full=False) -> dict:
    """``{name: ratio}`` (see the module's docstring); ``full``: the ``--write``-only ones too."""
    from benchmarks.context_pricing import context_table
    from specsim.demo_inputs import demo_calibration, demo_table
    from specsim.sim import simulate, synthetic_trace
    from specsim.table import CostTable
    from specsim.traces import read_trace
    from tests.conftest import TEST_DATA
    from tests.sim.test_engine import gb10, run_reference

    reqs = read_trace(TEST_DATA.joinpath(*CONV)).requests
    table, cal = gb10(TEST_DATA)
    out = {}

    part = reqs[:300]
    simulate(part[:50], table, cal, "sequence")
    engine_s, ref_s = _best_pair(lambda: simulate(part, table, cal, "sequence"),
                                 lambda: run_reference(part, table, cal, "sequence"), 1)
    out["engine_over_reference"] = engine_s / ref_s

    def four(t, c, extra):
        return lambda: [simulate(reqs, t, c, p, **COSTS, **extra) for p in FOUR]

    for p in FOUR:
        for extra in (RULES_ON, RULES_OFF):
            simulate(reqs[:200], table, cal, p, **COSTS, **extra)
    on_s, off_s = _best_pair(four(table, cal, RULES_ON), four(table, cal, RULES_OFF), rounds)
    out["rules_on_over_off"] = on_s / off_s

    ctx, dcal = context_table(), demo_calibration()
    plain = CostTable(ctx.key, ctx.widths, ctx.costs, ctx.meta)
    for t in (ctx, plain):
        for p in FOUR:
            simulate(reqs[:100], t, dcal, p)
    ctx_s, plain_s = _best_pair(four(ctx, dcal, {}), four(plain, dcal, {}), rounds)
    out["context_over_plain"] = ctx_s / plain_s

    dt, dc = demo_table(), demo_calibration()
    short = synthetic_trace(10_000, 20.0, seed=1).requests
    long = synthetic_trace(100_000, 20.0, seed=1).requests
    simulate(short[:100], dt, dc, "fixed:3", max_num_seqs=64)
    long_s, short_s = _best_pair(lambda: simulate(long, dt, dc, "fixed:3", max_num_seqs=64),
                                 lambda: simulate(short, dt, dc, "fixed:3", max_num_seqs=64), rounds)
    out["length_10x"] = long_s / short_s

    out.update(_fleet_and_verdicts(reqs, rounds, full))
    out.update(_planner_vs_rust(rounds))

    if old is not None:
        from benchmarks.engine_vs_old import POLICIES, inputs_from, measure as vs_old

        with inputs_from(old) as inputs:
            best = vs_old(old, TEST_DATA.joinpath(*CONV), inputs, rounds=max(rounds, 3))
        for mode in ("off", "on"):
            for p in POLICIES:
                out[f"vs_old:{p}:{mode}"] = best[(p, mode)] / best[(p, "old")]
            out[f"vs_old:total:{mode}"] = (sum(best[(p, mode)] for p in POLICIES)
                                           / sum(best[(p, "old")] for p in POLICIES))
    return out


def _fleet_and_verdicts(reqs, rounds, full) -> dict:
    """The fleet ratios and (``full``) the verdicts' early stop, on the hour, with the modelled
    H200 table and calibration the demo uses."""
    import numpy as np

    from specsim.demo_inputs import demo_calibration, demo_table
    from specsim.sim import simulate
    from specsim.sim.fleet import Fleet, simulate_fleet
    from specsim.sim.verdict import mark_same_runs, reruns, verdicts

    table, cal = demo_table(), demo_calibration()
    one, many = Fleet.uniform(table, cal, 1), Fleet.uniform(table, cal, 64)
    fast = reqs.copy()
    fast["arrival_s"] /= 64.0
    simulate_fleet(reqs[:200], one, "fixed:3")
    simulate_fleet(fast[:200], many, "fixed:3")
    out = {}
    fleet_s, one_s = _best_pair(lambda: simulate_fleet(fast, many, "fixed:3"),
                                lambda: simulate_fleet(reqs, one, "fixed:3"), rounds)
    out["fleet_rate_64x"] = fleet_s / one_s
    if not full:
        return out
    gap = float(reqs["arrival_s"][-1] - reqs["arrival_s"][0]) / max(reqs.shape[0] - 1, 1)
    tiled = np.concatenate([reqs.copy() for _ in range(64)])
    tiled["arrival_s"] += np.repeat(np.arange(64) * gap / 64.0, reqs.shape[0])
    tiled = tiled[np.argsort(tiled["arrival_s"], kind="stable")]
    copies_s, one_s = _best_pair(lambda: simulate_fleet(tiled, many, "fixed:3"),
                                 lambda: simulate_fleet(reqs, one, "fixed:3"), 1)
    out["fleet_copies_64x"] = copies_s / one_s

    results = [simulate(reqs, table, cal, p) for p in FOUR]
    summaries = [r.summary() for r in results]
    mark_same_runs(results, summaries)
    names = ("lowest energy", "lowest p99 TPOT")
    early_s, every_s = _best_pair(lambda: verdicts(names, summaries, reruns(reqs, table, cal, results, _options()), 0),
                                  lambda: verdicts(names, summaries, reruns(reqs, table, cal, results, _options()), 0,
                                                   early=False), rounds)
    out["verdicts_early_over_every_seed"] = early_s / every_s
    return out


def _planner_vs_rust(rounds) -> dict:
    """``planner_over_rust`` (no extra row pays) and ``planner_over_rust:rows_pay`` at n = 256,
    K = 8; nothing where ``cargo`` is not installed."""
    import tempfile

    from benchmarks.rust_reference import NoCargo, batch, build, compare
    from benchmarks.test_plan import SETUPS

    try:
        binary = build()
    except NoCargo:
        return {}
    out = {}
    conf, n_conf, known = batch(256, 8)
    with tempfile.TemporaryDirectory() as folder:
        for name, rows_pay in (("planner_over_rust", False), ("planner_over_rust:rows_pay", True)):
            planner = SETUPS[8, rows_pay][2]
            # A round is about a second; the best of at least 7 steadies a ratio of two short calls.
            runs = [compare(binary, folder, planner, conf, n_conf, known, 8, 256 * 8) for _ in range(max(rounds, 7))]
            if runs[0][0] != runs[0][1]:
                raise AssertionError(f"{name}: the Rust reference and the planner chose different depths")
            out[name] = min(r[3] for r in runs) / min(r[2] for r in runs)
    return out


def _options():
    from specsim.sim.options import ServerOptions

    return ServerOptions()


def check(measured: dict, stored: dict, tolerance=TOLERANCE) -> list:
    """``(name, stored, measured, failed)`` for every ratio measured that has a stored value."""
    rows = []
    for name, value in measured.items():
        if name in stored:
            rows.append((name, stored[name], value, value > tolerance * stored[name]))
    return rows


def stored_doc(measured: dict, previous, commit: str, machine: str) -> dict:
    """What ``--write`` stores: the ratios measured now with ``commit``, and every stored ratio
    this run did not measure (the ``vs_old`` ones without ``--old``, the planner's without
    ``cargo``) kept, with the commit it was measured on under ``kept``."""
    doc = {"commit": commit, "machine": machine, "tolerance": TOLERANCE, "ratios": dict(measured)}
    if previous:
        kept = {name: value for name, value in previous["ratios"].items() if name not in measured}
        doc["ratios"].update(kept)
        if kept:
            doc["kept"] = {name: previous.get("kept", {}).get(name, previous["commit"]) for name in kept}
    return doc


def _commit() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                              check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.ratios", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    mode = ap.add_mutually_exclusive_group(required=True)
    mode.add_argument("--check", action="store_true", help="measure and compare with the stored ratios")
    mode.add_argument("--write", action="store_true", help="measure and store the ratios with this commit")
    ap.add_argument("--old", help="a checkout of the older commit to compare the engine with")
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args(argv)
    measured = measure(args.rounds, args.old, full=args.write)
    if args.write:
        previous = json.loads(STORED.read_text()) if STORED.exists() else None
        doc = stored_doc(measured, previous, _commit(), f"{platform.machine()}, {platform.python_implementation()} "
                         f"{platform.python_version()}")
        STORED.write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
        for name, value in sorted(measured.items()):
            print(f"{name:28s} {value:7.3f}")
        return 0
    stored = json.loads(STORED.read_text())
    rows = check(measured, stored["ratios"])
    print(f"stored at {stored['commit'][:12]}; a ratio fails past {TOLERANCE}x its stored value")
    for name, old, new, failed in rows:
        print(f"{name:28s} {old:7.3f} -> {new:7.3f}  ({new / old:.2f}x){'  REGRESSION' if failed else ''}")
    return 1 if any(r[3] for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
