"""The serving simulation: run a request trace through a server whose step costs come from a
cost table and whose draft outcomes come from a calibration (docs/simulation.md).

:func:`simulate` is a pure function of its inputs: the same requests, table, calibration, policy
and options give bit-identical results, whichever process or machine runs it.

Server model (docs/simulation.md, "Scheduling", has the rules and the price of a step)
---------------------------------------------------------------------------------------------
- Each step has a token budget (``max_num_batched_tokens``) and at most ``max_num_seqs``
  running requests. Running requests are scheduled first, in admission order: a decoding
  sequence takes ``1 + drafts`` tokens, its drafts cut to what the budget has left; a partly
  prefilled request takes its next chunk. Waiting requests are then admitted first come first
  served with chunks of their prompts (chunked prefill), while KV blocks for the chunk are free
  and nothing was preempted in the step. With ``chunked_prefill=False`` a step that admits
  requests prefills their whole prompts alone and decodes wait (the first engine).
- KV cache: a capacity in tokens held in blocks; a running request holds blocks for its prompt,
  its emitted tokens and this step's drafts. When blocks run out, the most recently admitted
  running request is preempted and later recomputes its prompt and emitted tokens as prefill.
- Draft depth: the policy's depth at the decoding width ``n``, clamped to ``k_max`` and the
  table's ``max_k``; above ``max_seqs`` sequences every policy plain-decodes. Uniform policies
  verify ``k`` drafts per sequence within ``row_budget``; ``sequence`` drafts ``min(k, left - 1)``
  per sequence and the planner picks how many of each to verify.
- A decoding sequence emits ``1 + accepted`` tokens, never more than it has left; a request
  whose prefill finishes emits a token at the end of that step.
- With nothing running or waiting, time jumps to the next arrival and ``idle_w`` accrues.

Draft outcomes: :mod:`specsim.sim.outcomes`.
"""

from __future__ import annotations

import os
import threading
import warnings
from dataclasses import replace
from typing import NamedTuple

import numpy as np

from specsim.errors import PolicyError, SimulationError, TraceWarning
from specsim.sim.options import ResolvedOptions, ServerOptions, check_option_names, prefill_fixed_part
from specsim.sim.outcomes import confidence_values, occupancy_cdf
from specsim.plan.depth_table import cumulative_priors, depth_by_width, engine_table
from specsim.policy.policy import Policy
from specsim.interop import read_policy
from specsim._checks import MAX_DEPTH, NO_CAP, arrival_problem, callback_problem, request_size_problem
from specsim._executor import Executor, MAX_WORKERS
from specsim.calibration.calibration import AcceptanceCalibration
from specsim.interop.sglang import slot_by_width
from specsim.plan._types import plan_workspace
from specsim.sim._draw_kernels import request_shifts_nb
from specsim.sim._engine_kernels import run_nb
from specsim.sim.bundles import (
    CalArrays, MAX_ADAPTIVE_SLOTS, SERVER_DT, Server, TableArrays, new_log, new_requests, new_state, new_workspace,
)
from specsim.sim.result import SimResult
from specsim.sim.replay import AcceptanceTrace
from specsim.sim.trees import tree_policy_arrays, tree_refusal
from specsim.table import CostTable
from specsim.table._types import DRAFT_J, DRAFT_MS, VERIFY_J, VERIFY_MS
from specsim.traces._types import TraceRead

# The engine's semantics version: what a result means for given inputs. Raise it with any change
# that alters some result for the same requests, table, calibration, policy and options (a
# scheduling rule, a price, a policy's rule, the draft-outcome hashes), so that results kept on
# disk by earlier versions (a sweep's results file) are recomputed rather than reused.
# 2: a calibration's [request_spread] table moves each request's acceptance (earlier versions read
# the same file and ignored it).
# 3: a prefill curve whose fixed part is above the table's plain step at its narrowest width is
# capped there (the decodes of a mixed step rode free before).
# 4: tree:auto on a table with a context axis plans each step at the batch's mean context (it
# planned on the reference grid before).
ENGINE_SEMANTICS = 4

# Steps per kernel call (with or without a progress callback): small enough that Ctrl-C, which
# acts between calls, stops even wide sequence-planner runs well within a second.
PROGRESS_CHUNK = 1 << 10


# -- preparing a run ------------------------------------------------------------------------------

class RequestColumns(NamedTuple):
    """The requests as the engine reads them: validated contiguous columns, made once by
    :func:`request_columns` and shared by many runs on the same requests (the policies of
    :func:`simulate_runs`, a verdict's reruns), whose results then hold the same arrays instead
    of a copy each. The engine only reads them."""

    arrival_s: np.ndarray
    prompt_tokens: np.ndarray
    output_tokens: np.ndarray


def request_columns(requests) -> RequestColumns:
    """``requests`` (a REQUEST_DT array, a TraceRead or RequestColumns) as :class:`RequestColumns`."""
    return requests if isinstance(requests, RequestColumns) else RequestColumns(*_request_arrays(requests))


def _request_arrays(requests):
    if isinstance(requests, RequestColumns):
        return tuple(requests)
    if isinstance(requests, TraceRead):
        requests = requests.requests
    r = np.asarray(requests)
    if r.dtype.names is None or not {"arrival_s", "prompt_tokens", "output_tokens"} <= set(r.dtype.names):
        raise SimulationError(
            "requests must be a record array with arrival_s, prompt_tokens and output_tokens "
            f"(specsim.REQUEST_DT, as the trace readers return); got dtype {r.dtype}"
        )
    r = r.reshape(-1)
    arrival = np.ascontiguousarray(r["arrival_s"], dtype=np.float64)
    prompt = np.ascontiguousarray(r["prompt_tokens"], dtype=np.int64)
    output = np.ascontiguousarray(r["output_tokens"], dtype=np.int64)
    if arrival.shape[0]:
        problem = arrival_problem(arrival - arrival[0] if np.isfinite(arrival[0]) else arrival)
        if problem:
            raise SimulationError(problem)
        if (np.diff(arrival) < 0).any():
            i = int(np.argmax(np.diff(arrival) < 0)) + 1
            raise SimulationError(f"request {i}: arrivals must be sorted ascending (trace readers sort them)")
        if (output < 1).any():
            raise SimulationError(f"request {int(np.argmax(output < 1))}: output_tokens must be >= 1")
        if (prompt < 0).any():
            raise SimulationError(f"request {int(np.argmax(prompt < 0))}: prompt_tokens must be >= 0")

        problem = request_size_problem(prompt, output)
        if problem:
            raise SimulationError(problem)
    return arrival, prompt, output


def _acceptance_digits(trace, k_cap):
    """A trace's entries as int64, clamped to ``k_logged`` (with a warning where one is above it),
    and the depth cap lowered to ``k_logged``."""
    if not isinstance(trace, AcceptanceTrace):
        raise SimulationError(f"acceptance must be an AcceptanceTrace (specsim.load_acceptance_file(...).trace(NAME)), "
                              f"got {type(trace).__name__}")
    if trace.accepted.shape[0] == 0:
        raise SimulationError(f"acceptance trace {trace.name!r} has no entries")
    above = trace.above_k_logged
    if above:
        warnings.warn(f"acceptance trace {trace.name!r} ({trace.source}): {above} entries exceed k_logged = "
                      f"{trace.k_logged}; they count as {trace.k_logged}", TraceWarning, stacklevel=3)
    digits = np.minimum(trace.accepted.astype(np.int64), trace.k_logged)
    return np.ascontiguousarray(digits), min(k_cap, trace.k_logged)


def _policy_for(pol: Policy, table, k_cap: int) -> Policy:
    """The policy as the server runs it: a named depth beyond what the table prices is refused;
    one beyond the server's own cap (``k_max``, an acceptance trace's ``k_logged``) is lowered to
    it, and the label says so."""
    top = pol.max_depth
    if top is not None and top > table.max_k:
        raise PolicyError(f"policy {pol} asks for {top} drafts per step but the cost table prices depths up to "
                          f"{table.max_k} only: use depths <= {table.max_k} or a table measured deeper")
    return pol.clamped(k_cap)


class Prepared(NamedTuple):
    """Everything one replica's run needs, built by :func:`prepare`: the kernels' bundles
    (``req``, ``tab``, ``cal``, ``srv``, ``st``, ``log``, ``ws``; ``plan``: :func:`plan_workspace_for`),
    the policy as run and the resolved options."""

    req: tuple
    tab: tuple
    cal: tuple
    srv: tuple
    st: tuple
    log: tuple
    ws: tuple
    plan: object  # PlanWorkspace or None
    policy: Policy
    options: ResolvedOptions
    tree: object = None  # TreeArrays of a tree policy (specsim.sim.trees), else None


_sequence_engine = [False]  # this process runs the engine with the per-sequence planner


def _policy_value(policy) -> Policy:
    """``policy`` itself: the engine takes a :class:`Policy`, read once where a user typed it
    (:func:`specsim.interop.read_policy`); text (or anything else) is refused here."""
    if not isinstance(policy, Policy):
        raise PolicyError(f"the engine takes a Policy (specsim.read_policy(text) reads one where users type it), "
                          f"got {type(policy).__name__} {policy!r}")
    return policy


def use_sequence_engine(policies=None) -> bool:
    """From now on run this process's simulations on the engine with the per-sequence planner if one of
    ``policies`` (:class:`Policy` values; None: regardless) plans per sequence: one compiled engine for
    them all. Whether it does."""
    if policies is None or any(_policy_value(p).per_sequence for p in policies):
        _sequence_engine[0] = True
    return _sequence_engine[0]


def plan_workspace_for(per_sequence: bool, max_num_seqs: int, max_k: int):
    """The per-sequence planner's workspace for a run's engine, or None: Numba then drops that planner
    (a fifth of the first compile). Once the process ran it (:func:`use_sequence_engine`), every run does."""
    if per_sequence or _sequence_engine[0]:
        _sequence_engine[0] = True
        return plan_workspace(max_num_seqs, max_k)
    return None


def _check_above_idle(table, idle_w: float) -> None:
    """Refuse ``load-aware`` on a table where some step draws no more than idle power: energy
    above idle would be zero or negative there, and tokens per joule of it meaningless."""
    c = table.costs
    above = (c[..., VERIFY_J] + c[..., DRAFT_J]) - idle_w * (c[..., VERIFY_MS] + c[..., DRAFT_MS]) / 1000.0
    if not (above > 0).all():
        w, k = np.argwhere(~(above > 0))[0]
        ms = c[w, k, VERIFY_MS] + c[w, k, DRAFT_MS]
        j = c[w, k, VERIFY_J] + c[w, k, DRAFT_J]
        raise SimulationError(f"policy load-aware: the table's step at width {int(table.widths[w])}, depth {int(k)} "
                              f"draws {1000.0 * j / ms:.1f} W, not above idle_w = {idle_w:g} W: its energy above idle "
                              "is not positive; lower idle_w or fix the table's joules (they include idle draw)")


def _server(opts: ResolvedOptions, pol: Policy, depth_memo, idle_memo, kv_blocks: int, cum_priors, table):
    max_num_seqs = opts.max_num_seqs
    rec = np.zeros(1, dtype=SERVER_DT)
    r = rec[0]
    budget = opts.max_num_batched_tokens
    r["max_num_seqs"] = max_num_seqs
    r["max_num_batched_tokens"] = NO_CAP if budget is None else budget
    r["k_cap"] = opts.k_max
    r["row_budget"] = NO_CAP if opts.row_budget is None else opts.row_budget
    r["per_sequence"] = pol.per_sequence
    r["chunked"] = opts.chunked_prefill
    r["block_size"] = opts.kv_block_size
    r["kv_blocks"] = kv_blocks
    r["seed"] = np.uint64(opts.seed)
    r["slack"] = opts.slack
    for name in ("prefill_ms_per_step", "prefill_j_per_step", "prefill_ms_per_token", "prefill_j_per_token", "idle_w"):
        r[name] = getattr(opts, name)
    curve = opts.prefill_curve
    r["prefill_curve"] = curve is not None
    r["one_pass"] = opts.mixed_step_pricing == "one-pass"
    r["live_depth"] = 0 if not pol.needs_planner else 2 if pol.maximises_goodput else 3 if pol.counts_idle else 1
    r["spec_cap"] = NO_CAP if opts.max_seqs is None else opts.max_seqs
    r["prefill_fixed_ms"], r["prefill_fixed_j"] = prefill_fixed_part(opts, table)
    if opts.acceptance_window is not None:
        r["acceptance_window"] = max(opts.acceptance_window, 0)
        r["acceptance_threshold"] = opts.acceptance_length_threshold
    arrays = [np.ascontiguousarray(c, dtype=np.float64) for c in (curve or ((), (), ()))]
    return Server(rec, depth_memo, idle_memo, *arrays, np.ascontiguousarray(cum_priors, dtype=np.float64),
                  *_adaptive_arrays(rec[0], pol, max_num_seqs))


def _adaptive_arrays(r, pol: Policy, max_num_seqs: int):
    """``(slot_of, cand, n_cand)`` of SGLang's adaptive controller (the one place they are sized),
    its settings written into the server record ``r``; empty for every other policy."""
    if pol.kind != "sglang-adaptive":
        return np.full(max_num_seqs + 1, -1, np.int64), np.zeros((0, 1), np.int64), np.zeros(0, np.int64)
    cfg = pol.adaptive
    if len(cfg.slots) > MAX_ADAPTIVE_SLOTS:
        raise SimulationError(f"policy {pol}: {len(cfg.slots)} batch-size slots; the simulated controller keeps at "
                              f"most {MAX_ADAPTIVE_SLOTS}")
    width = max(len(c) for _, c in cfg.slots)
    cand = np.zeros((len(cfg.slots), width), np.int64)
    for m, (_, c) in enumerate(cfg.slots):
        cand[m, :len(c)] = c
    r["adaptive"] = 1
    r["initial_steps"] = cfg.deepest
    for name in ("ema_alpha", "update_interval", "warmup_batches", "down_hysteresis", "up_hysteresis"):
        r[name] = getattr(cfg, name)
    slot_of = np.asarray(slot_by_width(cfg, max_num_seqs, pol.graphs), np.int64)
    return slot_of, cand, np.asarray([len(c) for _, c in cfg.slots], np.int64)


def _kv_blocks(opts: ResolvedOptions, prompt, output, k_cap: int) -> int:
    """The KV capacity in blocks, after checking that every request fits alone."""
    cap = opts.kv_capacity_tokens
    if cap is None:
        return NO_CAP
    bs = opts.kv_block_size
    blocks = cap // bs
    if prompt.shape[0]:
        need = -(-(prompt + output - 1 + k_cap) // bs)
        worst = int(np.argmax(need))
        if need[worst] > blocks:
            raise SimulationError(
                f"request {worst} ({int(prompt[worst])} prompt + {int(output[worst])} output tokens, plus {k_cap} "
                f"drafts) needs {int(need[worst])} KV blocks of {bs} tokens but the cache holds {blocks}: raise "
                "kv_capacity_tokens or drop such requests from the trace")
    return blocks


def _check_inputs(table, calibration) -> None:
    for name, value, cls in (("table", table, CostTable), ("calibration", calibration, AcceptanceCalibration)):
        if not isinstance(value, cls):
            article = "an" if cls.__name__[0] in "AEIOU" else "a"
            raise SimulationError(f"{name} must be {article} {cls.__name__} ({cls.__name__}.load(path)), "
                                  f"got {type(value).__name__}")


def _depth_memos(pol: Policy, table, calibration, opts: ResolvedOptions, contexts, replayed: bool):
    """``(depth_memo, idle_memo, tree)``: the policy's depth at every width, its depth there while
    no request waits (the same array but for ``load-aware``) and a tree policy's
    :class:`~specsim.sim.bundles.TreeArrays` (else None)."""
    seqs, k_cap = opts.max_num_seqs, opts.k_max
    tree = None
    if pol.kind == "tree":
        tree_refusal(pol, calibration, k_cap, opts.max_num_batched_tokens, replayed)
        depth_memo, tree = tree_policy_arrays(pol, table, calibration, opts, contexts)
    else:
        depth_memo = depth_by_width(pol, table, calibration, opts, seqs, k_cap)
    idle_memo = depth_memo
    if pol.counts_idle:
        _check_above_idle(table, opts.idle_w)
        idle_memo = depth_by_width(pol, table, calibration, opts, seqs, k_cap, idle_w=opts.idle_w)
    return depth_memo, idle_memo, tree


def outcome_arrays(calibration, opts: ResolvedOptions, digits, n_requests: int) -> CalArrays:
    """The draft-outcome model's bundle: the calibration's arrays (its
    :meth:`~specsim.calibration.AcceptanceCalibration.engine_arrays`), the bucket occupancy and
    confidences drawn from (:mod:`specsim.sim.outcomes`), a replayed trace's ``digits`` (empty:
    draws from the calibration) and each request's log-odds shift under the request spread (the
    one place it is sized). Centres and shifts are both empty without a spread, with a zero one,
    or with a replayed trace (whose outcomes are the trace's), so the draws take the plain path."""
    arrays = calibration.engine_arrays()
    centre, shift = arrays.centre, np.zeros(0, np.float64)
    if digits.shape[0] or not centre.shape[0]:
        centre = np.zeros(0, np.float64)
    else:
        shift = np.empty(n_requests, np.float64)
        request_shifts_nb(np.uint64(opts.seed), float(calibration.spread.logit_sd), shift)
    return CalArrays(arrays.edges, arrays.cells, arrays.cell_p, arrays.p_accept, arrays.priors,
                     occupancy_cdf(calibration, opts.k_max, opts.occupancy), confidence_values(calibration), digits,
                     centre, shift)


def prepare(requests, table, calibration, policy: Policy, opts: ServerOptions, acceptance=None) -> Prepared:
    """Build one replica's bundles for a run (validates the requests, the policy and the options):
    the options resolved once, the table's arrays from :func:`~specsim.plan.depth_table.engine_table`,
    the calibration's from :func:`outcome_arrays`, the rest sized in :mod:`specsim.sim.bundles`."""
    _check_inputs(table, calibration)
    pol = _policy_value(policy)
    if pol.slack is not None:  # propose@0.1: the policy's own slack wins
        opts = replace(opts, slack=pol.slack)
    arrival, prompt, output = _request_arrays(requests)
    resolved = opts.resolve(table)
    digits = np.zeros(0, dtype=np.int64)
    if acceptance is not None:
        digits, k_cap = _acceptance_digits(acceptance, resolved.k_max)
        resolved = replace(resolved, k_max=k_cap, acceptance_trace=acceptance.name)
    pol = _policy_for(pol, table, resolved.k_max)
    if resolved.acceptance_window is None and pol.gate:
        # The speculation gate a trtllm:FILE policy's config sets (the options' own win).
        resolved = replace(resolved, acceptance_window=pol.gate[0], acceptance_length_threshold=pol.gate[1])
    seqs, k_cap = resolved.max_num_seqs, resolved.k_max
    if k_cap > MAX_DEPTH:
        raise SimulationError(f"draft depth up to {k_cap}: the engine draws at most {MAX_DEPTH} drafts per "
                              f"sequence per step; set k_max <= {MAX_DEPTH}")
    kv_blocks = _kv_blocks(resolved, prompt, output, k_cap)
    widths, costs, wcs, contexts, cwcs = engine_table(table, seqs, resolved.context_pricing)
    # Without context pricing the engine is handed None for the context axis, and Numba compiles
    # none of its code into the run's engine (docs/simulation.md, "What a run does not use").
    tab = TableArrays(widths, costs, wcs, *((contexts, cwcs) if contexts.shape[0] else (None, None)))
    depth_memo, idle_memo, tree = _depth_memos(pol, table, calibration, resolved, contexts, digits.shape[0] > 0)
    return Prepared(
        req=new_requests(arrival, prompt, output), tab=tab,
        cal=outcome_arrays(calibration, resolved, digits, arrival.shape[0]),
        srv=_server(resolved, pol, depth_memo, idle_memo, kv_blocks, cumulative_priors(calibration, table.max_k), table),
        st=new_state(arrival.shape[0], seqs, table.max_k, arrival[0] if arrival.shape[0] else 0.0),
        log=new_log(resolved.log_size), ws=new_workspace(seqs, table.max_k),
        plan=plan_workspace_for(pol.per_sequence, seqs, table.max_k), policy=pol, options=resolved, tree=tree,
    )


def collect(p: Prepared, req=None) -> SimResult:
    """The :class:`SimResult` of a finished run (``req``: the requests bundle, if shared)."""
    req = p.req if req is None else req
    s = p.st.rec[0]
    n = req.arrival_s.shape[0]
    if n and int(req.emitted.sum()) != int(req.output.sum()):
        raise SimulationError("internal: emitted tokens differ from the trace's output tokens")  # broken invariant
    names = {"decode_steps": "decode_steps", "prefill_steps": "prefill_steps", "mixed_steps": "mixed_steps",
             "speculative_steps": "spec_steps", "sequence_steps": "seq_steps", "emitted_tokens": "emitted",
             "accepted_drafts": "accepted", "drafted": "drafted", "verified_rows": "rows", "drafts_cut": "drafts_cut",
             "preemptions": "preemptions", "resumed": "resumed", "prefill_tokens": "prefill_tokens"}
    counters = {k: int(s[v]) for k, v in names.items()}
    counters["recomputed_tokens"] = counters["prefill_tokens"] - int(req.prompt.sum())
    energy = {k: float(s[k]) for k in ("decode_j", "prefill_j", "idle_j", "decode_s", "prefill_s", "idle_s")}
    kv_blocks = int(p.srv.rec[0]["kv_blocks"])
    kv = {"block_size": int(p.srv.rec[0]["block_size"]), "capacity_blocks": None if kv_blocks == NO_CAP else kv_blocks,
          "peak_blocks": int(s["kv_peak"]), "block_s": float(s["kv_block_s"]),
          "mean_decode_context": float(s["ctx_priced"]) / int(s["decode_steps"]) if s["decode_steps"] else 0.0}
    c = int(s["log_count"])
    lg = p.log
    return SimResult(
        policy=p.policy.label, options=p.options.to_dict(), policy_spec=p.policy, arrival_s=req.arrival_s,
        prompt_tokens=req.prompt, output_tokens=req.output, first_token_s=req.first_s, finish_s=req.finish_s,
        scheduled_s=req.sched_s, depth_histogram=p.st.depth_hist, counters=counters, energy=energy, kv=kv,
        end_s=float(s["t_s"]), step_t_s=lg.t_s[:c].copy(), step_width=lg.width[:c].copy(),
        step_mean_depth=lg.depth[:c].copy(), step_tokens=lg.tokens[:c].copy(),
        step_kv_blocks=lg.kv_blocks[:c].copy(), step_prefill_tokens=lg.prefill_tokens[:c].copy(),
        step_log_stride=int(s["log_stride"]),
    )


def simulate(requests, table, calibration, policy, *, options=None, acceptance=None, progress=None,
             **server_options) -> SimResult:
    """Simulate serving ``requests`` with one draft-depth policy (docs/simulation.md).

    Parameters
    ----------
    requests : ndarray(REQUEST_DT, ndim=1), TraceRead or RequestColumns
        Sorted by arrival.
    table : CostTable
    calibration : AcceptanceCalibration
    policy : str or Policy
        ``fixed:K``, ``schedule:...``, ``propose``, ``sequence``, ``goodput`` or ``load-aware``. A named depth
        beyond the table's ``max_k`` raises :class:`~specsim.errors.PolicyError`; one beyond
        ``k_max`` (or an acceptance trace's ``k_logged``) runs at that cap, and the result's
        ``policy`` label names the depth run (``fixed:5`` under ``k_max=3`` is ``fixed:3``).
    options : ServerOptions, optional
        The server options as one value (instead of keywords).
    acceptance : AcceptanceTrace, optional
        Draw draft outcomes from a logged acceptance trace instead of the calibration: each
        (request, token index) step state takes the trace entry its hash picks, and draft ``j``
        is accepted when ``j <=`` that entry (drafts are prefix-stable, so a deeper policy in the
        same state accepts the shallower one's run, extended). Depths are clamped to the trace's
        ``k_logged``; the planner sees no confidences (it uses the calibration's priors), and
        entries above ``k_logged`` warn and count as ``k_logged``.
    progress : callable, optional
        Called as ``progress(finished_requests)`` between chunks of steps (a long run is cut
        into chunks only when this is given; the result is the same either way). An exception
        it raises stops the run and propagates.
    **server_options
        Fields of :class:`ServerOptions`.

    Returns
    -------
    SimResult
    """
    if options is None:
        check_option_names(server_options)
        opts = ServerOptions(**server_options)
    elif server_options:
        raise SimulationError("give the server options either as options=ServerOptions(...) or as keywords, not both")
    elif not isinstance(options, ServerOptions):
        raise SimulationError(f"options must be a ServerOptions, got {type(options).__name__}")
    else:
        opts = options
    problem = callback_problem(progress, "progress", "progress(finished_requests)")
    if problem:
        raise SimulationError(problem)
    p = prepare(requests, table, calibration, read_policy(policy), opts, acceptance)
    # Always in chunks, with or without a progress callback: the interpreter only acts on a
    # Ctrl-C between kernel calls, so one call for the whole run would hold it to the end.
    while True:
        done = run_nb(p.req, p.tab, p.cal, p.srv, p.st, p.log, p.ws, p.plan, p.tree, PROGRESS_CHUNK)
        if progress is not None:
            progress(int(p.st.rec[0]["finished"]))
        if done:
            break
    return collect(p)


def simulate_runs(requests, table, calibration, runs, options, *, progress=None, acceptance=None) -> list:
    """Simulate every ``(policy, slack)`` of ``runs`` on the same requests, in parallel threads
    (the engine kernel releases the GIL), and return the results in ``runs`` order.

    ``runs`` pairs a :class:`Policy` (read where the user typed it) with a slack; ``options`` is
    the shared :class:`ServerOptions` (its slack is replaced per run); ``progress``,
    if given, has ``update(n)`` and counts finished requests over all runs.

    Ctrl-C (or any error) in the calling thread stops every run at its next chunk of steps
    (well within a second) and is raised again; no partial result is returned.
    """
    use_sequence_engine(pol for pol, _ in runs)  # one compiled engine for every run
    requests = request_columns(requests)  # validated once, one copy for every run
    lock = threading.Lock()
    workers = max(1, min(len(runs), os.cpu_count() or 1, MAX_WORKERS))
    ex = Executor("threads" if workers > 1 else "serial", workers if workers > 1 else None)

    def one(pol, s):
        seen = [0]

        def tick(finished):
            if ex.stop.is_set():
                raise _Stopped
            if progress is not None:
                with lock:
                    progress.update(finished - seen[0])
            seen[0] = finished

        return simulate(requests, table, calibration, pol, options=replace(options, slack=s), acceptance=acceptance,
                        progress=tick)

    # The per-sequence planners' runs are the longest: started first, the threads finish together.
    order = sorted(range(len(runs)), key=lambda i: not runs[i][0].per_sequence)
    with ex:
        done = ex.map(one, [runs[i] for i in order])
    out = [None] * len(runs)
    for i, r in zip(order, done):
        out[i] = r
    return out


class _Stopped(Exception):
    """Raised in a worker's progress callback to end its run when the caller stopped."""
