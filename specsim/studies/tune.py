"""Tune a batch-width -> draft-depth schedule on a request trace (docs/schedules.md#tuning).

The search space is contiguous width ranges, each with a depth ``0..k_max``; widths above
``widths_max`` keep the last range's depth. The search:

1. evaluates the starts -- every ``fixed:K``, the planner's ``propose(n)`` at every width and the
   ``goodput`` depth at every width, each collapsed into ranges -- and keeps the best;
2. improves it by steepest descent over coordinate moves: another depth for one range, one range
   boundary moved to the neighbouring grid width, one range split in two with the depth of one
   half changed, one grid cell a step deeper or shallower; until no move improves (or the round
   limit);
3. scores every candidate as the mean over several draft-outcome seeds on the training part of
   the trace (common random numbers make the comparison paired); a move is first tried on one
   seed and only the few that beat the incumbent there are run on the others (early pruning);
4. compares the winner with the built-in policies on a held-out time window (the last
   ``holdout`` share of the trace) and on seeds the search never saw, and says whether its gain
   over the best fixed depth is larger than the noise between seeds.

A move must also beat the noise across seeds *and* stretches of the trace (``noise_windows``,
by default ``"auto"``: :data:`AUTO_WINDOWS` windows, fewer where the training part is too short
for them, none below two; ``None`` turns the check off): the training part is cut into ``W``
contiguous time windows (equal numbers of requests),
and each move that passes step 3 is run on every (seed, window) pair, as is the incumbent. Its
gain per pair is the incumbent's objective minus its own (J/token; the other way round for
tokens/s); it is accepted only when the mean gain exceeds both ``t95(pairs - 1)`` times its
standard error over the pairs and ``min_gain`` of the incumbent's mean. So a move that makes the
depth change direction across widths (up then down, or down then up, as width grows: a zig-zag)
survives only when its gain clears that noise. Moves turned back this way are counted as
within-noise moves (``TuneResult.within_noise_moves``; each one is in ``rejected_moves``, marked
when it was a zig-zag). Moves that win on the SLO (meeting it where the incumbent misses, or
missing it less) are judged on attainment as without windows.

Objectives: ``energy`` minimises joules per output token, ``throughput`` maximises output tokens
per second. With SLO targets, a candidate whose mean attainment is below the target loses to
every one that meets it (among those that miss, the higher attainment wins).

Evaluations run on Dask (a local cluster, or ``scheduler=`` a running one), in threads, or in
this process; the result does not depend on which. :func:`tune` keeps all its state in the call,
so several threads may tune at once.

This module holds the entry point, its checks and the evaluation; the search's moves and state are
:mod:`specsim.studies.tune_search`, what it returns :mod:`specsim.studies.tune_result`, and the
schedule file it writes :mod:`specsim.studies.schedule_file`.
"""

from __future__ import annotations

import sys
import threading
import time
from dataclasses import dataclass, replace

import numpy as np

from specsim.errors import ScheduleError, SimulationError
from specsim.sim.metrics import overload
from specsim.sim.figures import percentile, run_rates
from specsim.sim.slo import as_slo
from specsim._checks import (COUNT_MAX, MAX_SEEDS, MAX_WINDOWS, MIN_WINDOW_REQUESTS, flag_problem, int_problem, is_int,
                             is_number, policy_list_problem, show)
from specsim._executor import Executor, ExecutorChoice, ExecutorError
from specsim.interop import read_policy
from specsim.plan._trees import NO_TREE_TABLE
from specsim.policy.policy import Policy
from specsim.sim.engine import request_columns, simulate, use_sequence_engine
from specsim.sim.options import ServerOptions
from specsim.studies.inputs import StudyInputs, inputs_problem
from specsim.studies.tune_result import Score, TuneResult
from specsim.studies.tune_search import _Search
from specsim.studies.windows import window_bounds
from specsim.studies.schedule_file import text_digest, trace_digest

__all__ = ["StudyInputs", "TuneResult", "TuneSettings", "Score", "tune"]

OBJECTIVES = ("energy", "throughput")
EXECUTORS = ("auto", "dask", "threads", "serial")
DEFAULT_SEEDS = 2
DEFAULT_HOLDOUT = 0.25
DEFAULT_ATTAINMENT = 0.99
MAX_ROUNDS = 40
MIN_GAIN = 1e-4
WIDTH_QUANTILES = (0.1, 0.25, 0.5, 0.75, 0.9)
# Per-step log of a tuning run: only its widths are read (the widest, and where batches often are).
_LOG_SIZE = 1 << 16
# How many time windows ``noise_windows="auto"`` cuts the training part into: enough pairs with two
# seeds (8) for a t-interval, few enough that each window keeps a quarter of the trace's traffic.
AUTO_WINDOWS = 4


@dataclass(frozen=True)
class TuneSettings:
    """How :func:`tune` searches.

    Attributes
    ----------
    widths_max : int, optional
        Widest width with its own depth (default: the server's batch cap); wider ones share it.
    holdout : float
        Share of the trace's span, at its end, kept out of the search for the final comparison
        (0: compare on the whole trace, with unseen seeds only).
    max_rounds : int
        Most rounds of coordinate moves.
    min_gain : float
        Smallest relative gain on the objective a move must bring (default 1e-4, 0.01%): moves
        that gain less are inside what one trace can tell apart.
    noise_windows : int, "auto" or None
        Cut the training part into this many time windows (2 .. :data:`MAX_WINDOWS`, each
        of at least :data:`MIN_WINDOW_REQUESTS` requests) and accept a move only when its mean
        gain over the (seed, window) pairs exceeds ``t95`` times its standard error as well as
        ``min_gain`` (module docstring). ``"auto"`` (the default): :data:`AUTO_WINDOWS`, or as
        many as the training part holds when fewer, and off below two. None: off (the search
        without the check).
    """

    widths_max: int = None
    holdout: float = DEFAULT_HOLDOUT
    max_rounds: int = MAX_ROUNDS
    min_gain: float = MIN_GAIN
    noise_windows: object = "auto"


# -- evaluation -------------------------------------------------------------------------------------

def evaluate(requests, table, calibration, policy, options, seed, slo):
    """One simulation, reduced to what the search compares (a module-level function, so Dask
    workers can run it).

    Returns
    -------
    dict
        j_per_token, tokens_per_s, attainment (or None), tpot_p99_s, max_width, width_quantiles,
        overloaded (queueing grew through the run: :func:`specsim.sim.metrics.overload`) and
        served_fraction (the share of the offered rate it kept up with; None when not measured).
    """
    # The held-out round always runs sequence: every run of the search takes the engine with
    # the per-sequence planner, one compiled engine in each process.
    use_sequence_engine()
    res = simulate(requests, table, calibration, policy, options=replace(options, seed=int(seed)))
    tokens = int(res.output_tokens.sum())
    makespan = res.makespan_s
    tpot_p99 = percentile(res.tpot_s, 99)
    att = slo.met(res)["attainment"] if slo.has_targets else None
    tokens_per_s, j_per_token = run_rates(tokens, makespan, res.energy_j)
    over = overload(res)
    return {
        "j_per_token": j_per_token,
        "tokens_per_s": float("inf") if tokens_per_s is None else tokens_per_s,
        "attainment": att,
        "tpot_p99_s": 0.0 if tpot_p99 is None else tpot_p99,
        "max_width": int(res.step_width.max()) if res.step_width.shape[0] else 0,
        # Where the batch widths fall: the search tries range splits there.
        "width_quantiles": (np.quantile(res.step_width, WIDTH_QUANTILES).round().astype(int).tolist()
                            if res.step_width.shape[0] else []),
        "overloaded": bool(over["flag"]),
        "served_fraction": over["served_fraction"],
    }


class _Pool:
    """Runs ``evaluate`` tasks on an :class:`specsim._executor.Executor`; results come back in
    task order. The trace's parts, the table and the calibration travel to each worker once."""

    def __init__(self, ex, parts, table, cal, options, slo):
        self.ex, self.options, self.slo = ex, options, slo
        self.parts = {name: ex.share(part) for name, part in parts.items()}
        self.table, self.cal = ex.share(table), ex.share(cal)

    def run(self, tasks, tick=None):
        """``tasks``: list of (part name, Policy, seed). Returns their dicts in order."""
        calls = [(self.parts[p], self.table, self.cal, pol, self.options, s, self.slo) for p, pol, s in tasks]
        return self.ex.map(evaluate, calls, on_result=None if tick is None else (lambda i, r: tick()))


class _Line:
    """The progress line: redrawn in place on a terminal, one line per round elsewhere."""

    def __init__(self, enabled, stream=None):
        # Ticks come from the evaluation threads.
        self.lock = threading.Lock()
        self.enabled = enabled
        self.stream = stream or sys.stderr
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.done = 0
        self.start = time.monotonic()
        self.head = ""
        self._last = 0.0

    def tick(self):
        with self.lock:
            self.done += 1
            now = time.monotonic()
            if self.enabled and self.tty and now - self._last >= 0.2:
                self._last = now
                self.stream.write(f"\r{self._text(now)}")
                self.stream.flush()

    def _text(self, now):
        return f"tune: {self.done} evaluations, {now - self.start:.1f} s; {self.head}"

    def say(self, head):
        self.head = head
        if self.enabled:
            self.stream.write(("\r" if self.tty else "") + self._text(time.monotonic()) + ("" if self.tty else "\n"))
            self.stream.flush()

    def close(self):
        if self.enabled and self.tty:
            self.stream.write("\n")
            self.stream.flush()


# -- the search -------------------------------------------------------------------------------------

def _split(requests, holdout):
    """Training and held-out windows: the held-out one is the last ``holdout`` share of the span."""
    if holdout == 0:
        return requests, requests
    t = requests["arrival_s"]
    cut = t[0] + (1.0 - holdout) * (t[-1] - t[0])
    train, held = requests[t < cut], requests[t >= cut]
    if min(train.shape[0], held.shape[0]) < MIN_WINDOW_REQUESTS:
        n = train.shape[0]
        # A quarter held out balances the two windows best; at it, only a longer trace or none held out helps.
        nearer = "" if float(holdout) == 0.25 else "a holdout nearer 0.25, "
        # The holdout as given: ``:g`` would show 0.9999999 as 1, which the settings check refuses.
        raise ScheduleError(f"holdout {float(holdout)!r} leaves {n} request{'' if n == 1 else 's'} to train on and "
                            f"{held.shape[0]} held out; each window needs at least {MIN_WINDOW_REQUESTS} for a "
                            f"verdict: use {nearer}a longer trace, or holdout 0 (the comparison reruns "
                            "the whole trace on unseen seeds)")
    return np.ascontiguousarray(train), np.ascontiguousarray(held)


def _check(objective, seeds, holdout, slo, executor):
    if not isinstance(objective, str) or objective not in OBJECTIVES:
        raise ScheduleError(f"objective {show(objective)}: use one of {', '.join(OBJECTIVES)}")
    if not is_int(seeds) or not 1 <= seeds <= MAX_SEEDS:
        raise ScheduleError(f"seeds (--seeds) must be a whole number of draft-outcome seeds in 1..{MAX_SEEDS}, "
                            f"got {show(seeds)}")
    if not (is_number(holdout) and 0 <= holdout < 1):  # NumPy scalars too; not a bool
        raise ScheduleError(f"holdout must be a share of the trace's span in [0, 1), got {holdout!r}")
    if not isinstance(executor, (Executor, ExecutorChoice)) and (not isinstance(executor, str)
                                                                  or executor not in EXECUTORS):
        raise ScheduleError(f"executor {show(executor)}: use an Executor, an ExecutorChoice or one of "
                            f"{', '.join(EXECUTORS)}")
    return slo.target(DEFAULT_ATTAINMENT) if slo.has_targets else None


def _check_values(inputs, settings) -> TuneSettings:
    """Refuse ``inputs`` that are not a :class:`StudyInputs` of one server, and ``settings`` that
    are not :class:`TuneSettings`; returns the settings (the defaults for None)."""
    problem = inputs_problem(inputs, "tune")
    if problem:
        raise ScheduleError(problem)
    if inputs.fleet is not None or inputs.table is None or inputs.calibration is None:
        raise ScheduleError("tune simulates one server: give the StudyInputs a table and a calibration (no fleet)")
    settings = TuneSettings() if settings is None else settings
    if not isinstance(settings, TuneSettings):
        raise ScheduleError(f"settings must be a TuneSettings, got {type(settings).__name__}")
    return settings


def _executor(executor) -> tuple:
    """``(executor, owned)``: the caller's running :class:`Executor` (not ``owned``: tune leaves it
    open), or the one a kind or an :class:`ExecutorChoice` asks for, started here (``auto``: Dask
    when it is installed, else threads) and closed by tune."""
    if isinstance(executor, Executor):
        return executor, False
    choice = executor if isinstance(executor, ExecutorChoice) else ExecutorChoice(executor)
    try:
        return choice.start("specsim tune", fallback="threads"), True
    except ExecutorError as e:
        raise ScheduleError(str(e)) from None


def _check_search(settings) -> None:
    """Refuse a ``min_gain``, ``max_rounds`` or ``widths_max`` the search cannot take."""
    min_gain, max_rounds, widths_max = settings.min_gain, settings.max_rounds, settings.widths_max
    if not (is_number(min_gain) and 0 <= min_gain < 1):
        raise ScheduleError(f"min_gain must be a share in [0, 1), got {min_gain!r}")

    problem = int_problem(max_rounds, "max_rounds", 0, COUNT_MAX)
    problem = problem or (widths_max is not None and int_problem(widths_max, "widths_max", 0, COUNT_MAX))
    if problem:
        raise ScheduleError(problem)
    if widths_max is not None and (not is_int(widths_max) or widths_max < 1):
        raise ScheduleError(f"widths_max must be a whole number >= 1, got {widths_max!r}")


def _requests_and_options(requests, options, seeds) -> tuple:
    """``(requests, options)``: the request array (of a trace read, or given) and the server
    options the search runs (a log sized for it), refused when empty, not options, or when the
    ``2 * seeds`` draft-outcome seeds from ``options.seed`` on leave 64 bits."""
    try:
        request_columns(requests)  # refuses what is not a trace's record array, by name
    except SimulationError as e:
        raise ScheduleError(str(e)) from None
    requests = np.asarray(getattr(requests, "requests", requests)).reshape(-1)
    if requests.shape[0] == 0:
        raise ScheduleError("the trace has no requests")
    opts = options if options is not None else ServerOptions()
    if not isinstance(opts, ServerOptions):
        raise ScheduleError(f"options must be a ServerOptions, got {type(opts).__name__}")
    opts = replace(opts, log_size=_LOG_SIZE)
    if opts.seed + 2 * seeds > 1 << 64:
        raise ScheduleError(f"seeds {opts.seed} .. {opts.seed + 2 * seeds - 1} do not fit in 64 bits: "
                            "use a smaller first seed")
    return requests, opts


def _compare_policies(compare) -> list:
    """The policies to compare on the held-out part, ``(label, Policy)`` each: read once where the
    user gave them (text or a Policy), so a bad one is refused before any work."""
    problem = policy_list_problem(compare, "compare")
    if problem:
        raise ScheduleError(problem)
    return [(str(p), read_policy(p)) for p in compare]


def tune(inputs, objective="energy", *, settings=None, compare=(), executor="auto", progress=False,
         allow_overload=False, trees=False) -> TuneResult:
    """Search for the width -> depth schedule that serves ``inputs.requests`` best (module docstring).

    Parameters
    ----------
    inputs : StudyInputs
        The trace (sorted by arrival), the table and the calibration; ``options`` the simulated
        server (its ``seed`` the first seed); ``slo`` latency targets a schedule must meet for
        ``slo.attainment`` of the requests (default 0.99 when a target is given); ``seeds`` the
        draft-outcome seeds per evaluation in the search (default 2; the final comparison uses as
        many others); ``names`` the ``trace``, ``table`` and ``calibration`` file names to record
        in the schedule file.
    objective : {"energy", "throughput"}
        Minimise J/token, or maximise output tokens/s.
    settings : TuneSettings, optional
        How the search runs: ``widths_max``, ``holdout``, ``max_rounds``, ``min_gain`` and
        ``noise_windows`` (default ``TuneSettings()``).
    compare : sequence of str or Policy
        More policies for the final comparison (e.g. ``vllm:current.json``).
    executor : Executor, ExecutorChoice or {"auto", "dask", "threads", "serial"}
        Where the evaluations run: a running :class:`specsim._executor.Executor` (left open), or
        one started for the search and closed after it (``auto``: Dask when it is installed, a
        local cluster or the choice's ``scheduler``, else threads).
    progress : bool
        Print a progress line on stderr.
    allow_overload : bool
        Recommend even when the tuned schedule overloads the server on the training window
        (queueing grows through it, as ``specsim simulate`` reports); by default that is refused
        with the rate the server keeps up with, since a schedule tuned on a backlog optimises
        the backlog. Allowed, the result records it (:attr:`TuneResult.overloaded`).
    trees : bool
        Also weigh the static trees an engine can serve (``tree:N`` for N in 2 .. the most nodes
        the server and the calibration's ``[tree]`` table allow, at most :data:`MAX_TREE_NODES`)
        against the chain schedule: the best of them on the training window and seeds, then on
        the held-out window with ``tree:auto`` beside it (:attr:`TuneResult.trees`). Refused
        without a ``[tree]`` table. The schedule itself stays chain depths: no engine serves a
        per-width mix of trees and chains.

    Returns
    -------
    TuneResult
    """
    started = time.monotonic()
    settings = _check_values(inputs, settings)
    for name, value in (("progress", progress), ("allow_overload", allow_overload), ("trees", trees)):
        problem = flag_problem(value, name)
        if problem:
            raise ScheduleError(problem)
    slo = as_slo(inputs.slo)
    seeds = inputs.seeds_or(DEFAULT_SEEDS)
    target = _check(objective, seeds, settings.holdout, slo, executor)
    _check_search(settings)
    requests, opts = _requests_and_options(inputs.requests, inputs.options, seeds)
    table, calibration = inputs.table, inputs.calibration
    resolved = opts.resolve(table)
    tree_sizes = _tree_sizes(calibration, resolved) if trees else []
    widest = min(settings.widths_max or resolved.max_num_seqs, resolved.max_num_seqs)
    train_part, held_part = _split(requests, float(settings.holdout))
    windows = _noise_windows(settings.noise_windows, train_part)
    compare = _compare_policies(compare)
    ex, owned = _executor(executor)
    search = None
    try:
        pool = _Pool(ex, {"train": train_part, "held": held_part, **windows}, table, calibration, opts, slo)
        search = _Search(pool, _Line(progress), objective, target, opts.seed, seeds, settings.min_gain, len(windows))
        starts = search.starts(table, calibration, opts, resolved, widest)
        incumbent = search.descend(starts, table, resolved.k_max, widest, settings.max_rounds)
        search.check_met()
        overloaded = search.load(incumbent, offered_rate(train_part), allow_overload)
        final, best_tree = _final(search, incumbent, resolved.k_max, tree_sizes, compare)
    except BaseException:
        if owned:
            ex.close(abandoned=True)
        raise
    finally:
        if search is not None:
            search.line.close()
    if owned:
        ex.close()
    found = {"seeds": seeds, "slo": slo, "target": target, "max_num_seqs": resolved.max_num_seqs,
             "widest": widest, "k_cap": resolved.k_max, "reached": search.reached}
    record = _record(inputs, requests, opts, settings, found)
    record["train_rate"], record["holdout_rate"] = offered_rate(train_part), offered_rate(held_part)
    if windows:
        record["noise_windows"] = len(windows)
    result = replace(search.result(incumbent, final, starts, ex.kind, record, time.monotonic() - started),
                     overloaded=overloaded)
    if best_tree is not None:
        result = replace(result, trees=search.trees(result, tree_sizes, best_tree))
    return result


def _final(search, incumbent, k_max, tree_sizes, compare) -> tuple:
    """``(labels, best tree label or None)``: the policies of the held-out comparison (the winner,
    every fixed depth, the built-in planners, the best static tree with ``tree:auto`` when trees
    are weighed, then ``compare``), all run on the held-out window and seeds."""
    final = [incumbent] + [search.add(Policy("fixed", depth=k)) for k in range(k_max + 1)]
    final += [search.add(Policy(name)) for name in ("goodput", "propose", "sequence")]
    best_tree = None
    if tree_sizes:
        sizes = [search.add(Policy("tree", nodes=n, tree_depth=n)) for n in tree_sizes]
        search.run([("train", t, s) for t in sizes for s in search.train_seeds])
        best_tree = min(sizes, key=lambda t: search.key(t, search.train_seeds))
        final += [best_tree, search.add(Policy("tree"))]
    final += [search.add(pol, label) for label, pol in compare if label not in final]
    search.run([("held", p, s) for p in final for s in search.held_seeds])
    return final, best_tree


# tune(trees=True): the largest static tree weighed (an engine's tree settings rarely go past it).
MAX_TREE_NODES = 16


def _tree_sizes(cal, resolved) -> list:
    """The static tree sizes ``tune(trees=True)`` weighs: 2 .. the most nodes the server drafts
    (``k_max``), its token budget holds, the ``[tree]`` table's depths x ranks hold, and
    :data:`MAX_TREE_NODES`; refused by name without a ``[tree]`` table or room for two nodes."""
    a = cal.rank_acceptance
    if a is None:
        raise ScheduleError(f"trees (--trees): {NO_TREE_TABLE}; fit one with calib fit --drafts-log or --rank-rates "
                            "(docs/calibration.md#draft-trees), or tune chains without --trees")
    budget = resolved.max_num_batched_tokens
    most = min(MAX_TREE_NODES, resolved.k_max, int(np.asarray(a).size),
               MAX_TREE_NODES if budget is None else budget - 1)
    if most < 2:
        raise ScheduleError(f"trees (--trees): the server drafts at most k_max = {resolved.k_max} token(s), so no "
                            "tree of 2 or more nodes fits; raise k_max (a deeper table) or tune chains without --trees")
    return list(range(2, most + 1))


def offered_rate(requests):
    """Requests per second offered over a part of the trace (its requests over its span of
    arrivals); None when the span is 0."""
    t = requests["arrival_s"]
    span = float(t[-1] - t[0]) if t.shape[0] else 0.0
    return t.shape[0] / span if span > 0 else None


def _noise_windows(windows, train) -> dict:
    """The training part's time windows for the noise of a move, ``{"train#i": requests}`` (empty when off)."""
    if windows is None:
        return {}
    n = train.shape[0]
    most = min(MAX_WINDOWS, n // MIN_WINDOW_REQUESTS)
    if isinstance(windows, str) and windows == "auto":
        windows = min(AUTO_WINDOWS, most)
        if windows < 2:
            return {}  # too short a training part to cut: the search without the check
    if not is_int(windows) or not 2 <= windows <= MAX_WINDOWS:
        raise ScheduleError(f"noise_windows (--noise-windows) must be a whole number in 2..{MAX_WINDOWS}, 'auto' or "
                            f"None (off), got {windows!r}")
    if windows > most:
        raise ScheduleError(f"noise_windows (--noise-windows) {windows}: the training part holds {n} requests and each "
                            f"window needs at least {MIN_WINDOW_REQUESTS}, so at most {most} fit; use fewer windows, a "
                            "longer trace or a smaller holdout, or turn the check off")
    b = window_bounds(n, int(windows))
    return {f"train#{i}": np.ascontiguousarray(train[b[i]:b[i + 1]]) for i in range(int(windows))}



def _record(inputs, requests, opts, settings, found) -> dict:
    """What the schedule file records about how it was tuned; ``found``: the seeds, the SLO and
    its target, and the widths and depths the search ran (``max_num_seqs``, ``widest``, ``k_cap``,
    ``reached``)."""
    names, table, cal, slo = inputs.names or {}, inputs.table, inputs.calibration, found["slo"]
    return {
        "trace": names.get("trace"), "requests": int(requests.shape[0]), "trace_sha256": trace_digest(requests),
        "table": names.get("table"), "table_sha256": text_digest(table.to_text()),
        "calibration": names.get("calibration"), "calibration_sha256": text_digest(cal.render()),
        "seeds": int(found["seeds"]), "first_seed": int(opts.seed), "holdout": float(settings.holdout),
        "max_num_seqs": int(found["max_num_seqs"]), "widths_max": int(found["widest"]), "k_max": int(found["k_cap"]),
        "table_max_k": int(table.max_k), "fitted_positions": int(cal.priors.shape[0]),
        "widest_reached": int(found["reached"]), "slack": opts.slack, "max_seqs": opts.max_seqs,
        "row_budget": opts.row_budget, "min_gain": float(settings.min_gain),
        "prefill_ms_per_token": opts.prefill_ms_per_token, "prefill_j_per_token": opts.prefill_j_per_token,
        "idle_w": opts.idle_w, "slo_ttft_s": slo.ttft_s, "slo_tpot_s": slo.tpot_s, "attainment": found["target"],
    }
