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

Why one module of this size: the starts, the moves, the scoring and the held-out verdict share
the search's state and its evaluation; the schedule file it writes is
:mod:`specsim.studies.schedule_file`.
"""

from __future__ import annotations

import math
import sys
import threading
import time
from dataclasses import dataclass, field, replace

import numpy as np

from specsim.errors import ScheduleError
from specsim.sim.metrics import overload
from specsim.sim.figures import percentile, run_rates
from specsim.sim.slo import as_slo
from specsim._checks import COUNT_MAX, MAX_SEEDS, MAX_WINDOWS, MIN_WINDOW_REQUESTS, int_problem, is_int, show
from specsim._executor import ExecutorError, choose
from specsim._stats import paired_noise
from specsim._text import format_grid
from specsim.interop import export_schedule, per_batch_cost, read_policy
from specsim.plan import depth_reach, reach_lines
from specsim.plan._trees import NO_TREE_TABLE
from specsim.plan.depth_table import depth_by_width
from specsim.policy.policy import parse_policy
from specsim.policy.schedule import canonical, policy_text, ranges_from_depths
from specsim.sim.engine import simulate, use_sequence_engine
from specsim.sim.options import ServerOptions
from specsim.studies.windows import window_bounds
from specsim.studies.schedule_file import per_batch_verdict, render_schedule, text_digest, trace_digest

OBJECTIVES = ("energy", "throughput")
EXECUTORS = ("auto", "dask", "threads", "serial")
DEFAULT_SEEDS = 2
DEFAULT_HOLDOUT = 0.25
DEFAULT_ATTAINMENT = 0.99
# Candidates that beat the incumbent on the first seed and go on to the others, per round.
BEAM = 4
MAX_ROUNDS = 40
MIN_GAIN = 1e-4
# Up to this many grid cells, the search tries a new depth in every cell each round.
SMALL_SPACE_CELLS = 16
WIDTH_QUANTILES = (0.1, 0.25, 0.5, 0.75, 0.9)
# Per-step log of a tuning run: only its widths are read (the widest, and where batches often are).
_LOG_SIZE = 1 << 16


@dataclass(frozen=True)
class Score:
    """One policy on one part of the trace, over seeds.

    Attributes
    ----------
    policy : str
    values : tuple of float
        The objective per seed, in its natural unit (J/token or tokens/s).
    attainment : tuple of float or None
        SLO attainment per seed (None without SLO targets).
    j_per_token, tokens_per_s, tpot_p99_s : float
        Means over seeds.
    """

    policy: str
    values: tuple
    attainment: tuple
    j_per_token: float
    tokens_per_s: float
    tpot_p99_s: float

    @property
    def mean(self) -> float:
        return float(np.mean(self.values))

    @property
    def spread(self) -> float:
        """Half the range of the per-seed values (0 with one seed)."""
        return 0.5 * (max(self.values) - min(self.values))

    @property
    def mean_attainment(self):
        return None if self.attainment is None else float(np.mean(self.attainment))


@dataclass(frozen=True)
class TuneResult:
    """What :func:`tune` found.

    Attributes
    ----------
    ranges : tuple of (int, int or None, int)
        The winning schedule, canonical (contiguous from width 1, the last range open).
    objective : str
    train : Score
        The winner on the training window and the search's seeds.
    holdout : tuple of Score
        The winner first, then the built-in policies (and any ``compare=``), on the held-out
        window and seeds.
    best_fixed : str
        The best ``fixed:K`` on the held-out window.
    gain, gain_noise : float
        Mean paired gain of the winner over ``best_fixed`` per seed on the held-out window (in
        the objective's unit, positive = better), and twice its standard error (NaN with one seed).
    starts : dict
        Name -> (ranges, training Score) of every start.
    evaluations : int
        Simulations run (search and final comparison).
    seconds : float
    executor : str
        Where the evaluations ran (``dask``, ``threads`` or ``serial``).
    inputs : dict
        Digests and settings, as written into the schedule file.
    noise_windows : int
        Time windows of the training part a move's gain was checked over (0: off).
    rejected_moves : tuple of dict
        With ``noise_windows``: every move that beat the incumbent on the training window but not
        by more than the noise over the (seed, window) pairs: ``round``, ``policy``, ``gain`` (mean
        per pair, in the objective's unit, positive = better), ``noise`` (t95 x its standard
        error), ``pairs`` and ``zigzag`` (whether it made the depth change direction across widths).
    overloaded : dict or None
        Set only when the search ran with ``allow_overload`` and the tuned schedule overloaded
        the server on the training window (see :meth:`_Search.load`): ``policy``, ``seeds``
        (overloaded of all), ``served_fraction``, ``offered_rate`` and ``served_rate``
        (requests/s).
    trees : dict or None
        Set only by ``tune(trees=True)`` (docs/schedules.md#trees): the static trees an engine can
        serve weighed against the chain schedule. ``candidates`` (``tree:N`` -> training mean),
        ``best`` (the static tree with the lowest objective on the training window), ``chain``
        (the chain policy served: the tuned schedule or the best fixed depth), ``gain`` and
        ``noise`` (the best tree's mean paired gain over the chain per held-out seed, positive =
        better, and twice its standard error; NaN with one seed), ``winner`` (``"chain"``,
        ``"tree"`` or ``"tie"``), and what a static tree costs against ``tree:auto`` (the tree
        changing with width): ``static_cost`` and ``static_cost_noise`` (``tree:auto``'s gain
        over ``best`` on the held-out window, the same way).
    """

    ranges: tuple
    objective: str
    train: Score
    holdout: tuple
    best_fixed: str
    gain: float
    gain_noise: float
    starts: dict
    evaluations: int
    seconds: float
    executor: str
    inputs: dict = field(default_factory=dict)
    noise_windows: int = 0
    rejected_moves: tuple = ()
    overloaded: dict = None
    trees: dict = None

    @property
    def within_noise_moves(self) -> int:
        """How many moves were turned back for a gain inside the noise over (seed, window) pairs."""
        return len(self.rejected_moves)

    @property
    def policy(self) -> str:
        return policy_text(self.ranges)

    @property
    def serves_tuned(self) -> bool:
        """Whether the tuned schedule earned its place: better than the best fixed depth on the
        held-out window by more than the noise (or by anything, with one seed)."""
        if not self.gain > 0:
            return False
        return self.within_noise is not True

    @property
    def recommended(self) -> tuple:
        """The ranges to serve: the tuned ones when :attr:`serves_tuned`, else the best fixed
        depth as one range. The schedule file and the exports carry these."""
        if self.serves_tuned:
            return self.ranges

        return ((1, None, parse_policy(self.best_fixed).fixed_depth),)

    @property
    def within_noise(self):
        """Whether the gain over the best fixed depth is no larger than the noise between seeds (None with
        one seed: the noise is not measured)."""
        if self.gain_noise != self.gain_noise:
            return None
        return abs(self.gain) <= self.gain_noise

    @property
    def evaluations_per_s(self) -> float:
        return self.evaluations / self.seconds if self.seconds > 0 else float("inf")

    def unit(self) -> str:
        return "J/token" if self.objective == "energy" else "tok/s"

    @property
    def deepest(self) -> int:
        """The deepest depth the recommended schedule serves."""
        return max(depth for _, _, depth in self.recommended)

    def reach(self) -> dict:
        """:func:`specsim.plan.depth_reach` of :attr:`deepest`: whether it is the table's deepest
        depth (the table ends there: measure deeper) and whether it is past the calibration's
        fitted positions (extrapolated)."""
        return depth_reach(self.deepest, self.inputs.get("table_max_k", -1), self.inputs.get("fitted_positions", 0))

    def reach_lines(self) -> list:
        """:meth:`reach` in words (none when neither applies)."""
        if "table_max_k" not in self.inputs:
            return []
        return reach_lines(self.deepest, self.inputs["table_max_k"], self.inputs["fitted_positions"],
                           "the recommended schedule's deepest depth")

    @property
    def compared_on(self) -> str:
        """Where the final comparison ran: the held-out window, or with holdout 0 the whole trace
        again (its unseen seeds are then all that is new)."""
        return "the whole trace (no holdout)" if self.inputs.get("holdout", 1) == 0 else "the held-out window"

    def verdict(self) -> str:
        """One plain sentence on the gain over the best fixed depth."""
        base = next(s for s in self.holdout if s.policy == self.best_fixed)
        rel = 100.0 * self.gain / abs(base.mean) if base.mean else float("nan")
        noise = "" if self.gain_noise != self.gain_noise else f" +- {100.0 * self.gain_noise / abs(base.mean):.2f}%"
        head = f"on {self.compared_on} the tuned schedule is {rel:+.2f}%{noise} against {self.best_fixed}"
        lost = ("what won on the training window did not carry over" if self.inputs.get("holdout", 1) != 0
                else "what won on the search's seeds did not carry over to unseen ones")

        if self.policy == f"schedule:1-={parse_policy(self.best_fixed).fixed_depth}":
            return head + f": the best schedule is the fixed depth itself; serve {self.best_fixed}"
        if self.within_noise is None:
            return head + ": one seed, so the noise is not measured (use 2 or more seeds)"
        if self.within_noise:
            return head + f": inside the noise, so {self.best_fixed} serves as well"
        if self.gain < 0:
            return head + f": worse, so serve {self.best_fixed} ({lost})"
        return head + ": outside the noise"

    def table(self) -> str:
        """The held-out comparison, side by side: the objective with its spread over seeds, the
        other figure, p99 TPOT, SLO attainment when there are targets, and which row is which.
        No column repeats another or is empty throughout."""
        energy = self.objective == "energy"
        slo = any(s.mean_attainment is not None for s in self.holdout)
        rows = []
        for s in self.holdout:
            att = s.mean_attainment
            mark = "tuned" if s is self.holdout[0] else ("best fixed" if s.policy == self.best_fixed else "")
            row = [s.policy, f"{s.mean:.5g}", f"{s.spread:.2g}",
                   f"{s.tokens_per_s:.1f}" if energy else f"{s.j_per_token:.4f}", f"{s.tpot_p99_s * 1000:.1f}"]
            if slo:
                row.append("-" if att is None else f"{100 * att:.1f}%")
            rows.append(row + [mark])
        header = ["policy", self.unit(), "+-", "tok/s" if energy else "J/tok", "TPOT p99 ms"]
        return format_grid(header + (["SLO"] if slo else []) + ["row"], rows)

    def result_section(self) -> dict:
        """The schedule file's ``[result]``."""
        base = next(s for s in self.holdout if s.policy == self.best_fixed)
        result = {
            "train_mean": self.train.mean, "train_spread": self.train.spread,
            "holdout_mean": self.holdout[0].mean, "holdout_spread": self.holdout[0].spread,
            "best_fixed": self.best_fixed, "best_fixed_holdout_mean": base.mean,
            "gain": self.gain, "gain_noise": None if self.gain_noise != self.gain_noise else self.gain_noise,
            "within_noise": self.within_noise, "unit": self.unit(),
            "evaluations": self.evaluations, "seconds": round(self.seconds, 3),
            "tuned": self.policy, "served": "tuned" if self.serves_tuned else "best fixed",
        }
        if self.noise_windows:
            result["noise_windows"] = self.noise_windows
            result["within_noise_moves"] = self.within_noise_moves
            result["within_noise_zigzags"] = sum(bool(m["zigzag"]) for m in self.rejected_moves)
        if "table_max_k" in self.inputs:
            reach = self.reach()
            result["table_ends"], result["extrapolated"] = reach["table_ends"], reach["extrapolated"]
        if self.overloaded:
            result["overloaded"] = True
            result["served_rate"] = self.overloaded["served_rate"]
        return result

    def to_toml(self) -> str:
        """The schedule file (docs/schedules.md#the-schedule-file)."""
        compared = {s.policy: s.mean for s in self.holdout[1:]}
        sections = {"inputs": self.inputs, "result": self.result_section(), "holdout": compared}
        if self.trees is not None:
            sections["trees"] = self.trees_section()
        return render_schedule(self.recommended, objective=self.objective, max_num_seqs=self.inputs.get("max_num_seqs"),
                               sections=sections)

    def trees_section(self) -> dict:
        """The schedule file's ``[trees]``: :attr:`trees` as scalars (a noise not measured left out)."""
        t = self.trees
        out = {"best": t["best"], "chain": t["chain"], "winner": t["winner"], "gain": t["gain"],
               "auto": "tree:auto", "static_cost": t["static_cost"], "unit": self.unit()}
        for name in ("noise", "static_cost_noise"):
            if t[name] == t[name]:
                out[name] = t[name]
        return out

    def tree_lines(self) -> list:
        """:attr:`trees` in words: which wins, and what a static tree costs against ``tree:auto``."""
        if self.trees is None:
            return []
        t, unit = self.trees, self.unit()
        held = {s.policy: s for s in self.holdout}

        def pm(noise):
            return "" if noise != noise else f" +- {noise:.3g}"

        said = {"tree": f"the static tree {t['best']} wins", "chain": f"the chain {t['chain']} wins",
                "tie": "a tie: the difference is inside the noise"}[t["winner"]]
        return [
            f"trees: the best static tree on the training window of {len(t['candidates'])} tried is {t['best']}; "
            f"on {self.compared_on} it gains {t['gain']:+.4g}{pm(t['noise'])} {unit} over {t['chain']} "
            f"({held[t['best']].mean:.5g} against {held[t['chain']].mean:.5g}): {said}",
            f"static tree's cost: tree:auto (the tree changing with width, which no engine serves) gains "
            f"{t['static_cost']:+.4g}{pm(t['static_cost_noise'])} {unit} over {t['best']} on {self.compared_on} "
            f"({held['tree:auto'].mean:.5g} against {held[t['best']].mean:.5g}): {self.static_cost_words()}",
        ]

    def static_cost_words(self) -> str:
        """What serving the best static tree instead of ``tree:auto`` costs, in words."""
        t = self.trees
        cost, noise = t["static_cost"], t["static_cost_noise"]
        if noise == noise and abs(cost) <= noise:
            return f"inside the noise, so the static {t['best']} loses nothing measurable"
        if cost <= 0:
            return f"the static {t['best']} serves as well or better"
        return f"the static {t['best']} costs that much for not changing with width"

    def recommended_for(self, engine: str, cost=None) -> tuple:
        """``(ranges, why)``: what to serve on ``engine``. The tuned per-batch schedule only when
        its held-out gain clears the noise and what the per-batch form costs that engine
        (``cost``, a share; default :func:`specsim.interop.per_batch_cost`); otherwise the best
        fixed depth, its plain static setting. ``why`` says how the gain compared ('' when
        nothing needed saying)."""
        ranges = self.recommended
        if len(ranges) == 1:
            return ranges, ""
        worth, why = per_batch_verdict(self.result_section(), per_batch_cost(engine) if cost is None else cost)
        if worth:
            return ranges, why
        return ((1, None, parse_policy(self.best_fixed).fixed_depth),), why

    def export(self, engine: str, cost=None, **kw):
        """The schedule in an engine's format (:func:`specsim.interop.export_schedule`), as
        :meth:`recommended_for` decides; the notes say when the per-batch form was not worth it."""
        kw.setdefault("max_num_seqs", self.inputs.get("max_num_seqs"))
        ranges, why = self.recommended_for(engine, cost)
        cfg = export_schedule(engine, ranges, **kw)
        return replace(cfg, notes=cfg.notes + ((why,) if why else ())) if why else cfg


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
    makespan = float(np.nanmax(res.finish_s)) - float(res.arrival_s[0])
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
        """``tasks``: list of (part name, policy text, seed). Returns their dicts in order."""
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

def grid_widths(widest: int, table_widths) -> np.ndarray:
    """Where a range may start (besides width 1): every width up to 8, then steps of a quarter
    octave, and the width after each measured one (costs are interpolated between them).

    Returns
    -------
    ndarray(int64, ndim=1)
        Sorted, in ``2..widest``.
    """
    points = set(range(2, 9))
    x = 8.0
    while x < widest:
        x *= 2 ** 0.25
        points.add(int(round(x)))
    points.update(int(w) + 1 for w in table_widths)
    return np.array(sorted(p for p in points if 2 <= p <= widest), dtype=np.int64)


def _runs(d):
    """Maximal runs of equal depth in ``d`` (depth at widths 1..W): list of [start, end, depth], 1-based."""
    starts = [0] + [i for i in range(1, d.shape[0]) if d[i] != d[i - 1]]
    ends = starts[1:] + [d.shape[0]]
    return [(s + 1, e, int(d[s])) for s, e in zip(starts, ends)]


def _moves(d, active, k_cap, grid, busy=()):
    """Candidate depth vectors one coordinate move from ``d`` over widths ``1..active``.

    ``busy``: widths where the incumbent's batches often are; a range is split at the grid
    widths nearest to them as well as at its middle grid width, and the grid cells holding them
    try a neighbouring depth.
    """
    head = d[:active]
    runs = _runs(head)
    out = []

    def emit(lo, hi, k):
        c = d.copy()
        c[lo - 1:hi] = k
        if hi == active:
            c[active:] = k  # widths never reached follow the widest one reached
        out.append(c)

    for lo, hi, k in runs:
        for k2 in (k - 2, k - 1, k + 1, k + 2, 0, k_cap):
            if 0 <= k2 <= k_cap and k2 != k:
                emit(lo, hi, k2)
    for (lo1, hi1, k1), (lo2, hi2, k2) in zip(runs, runs[1:]):
        below = grid[(grid > lo1) & (grid < lo2)]
        above = grid[(grid > lo2) & (grid <= hi2)]
        if below.shape[0]:
            emit(int(below[-1]), lo2 - 1, k2)  # the boundary moves down: k2 takes more widths
        if above.shape[0]:
            emit(lo2, int(above[0]) - 1, k1)  # the boundary moves up
    # One grid cell to a neighbouring depth: every cell in a small space, else the cells where
    # the batches are (a range's middle can then change without touching its ends).
    starts = np.concatenate([[1], grid[grid <= active]])
    ends = np.concatenate([starts[1:] - 1, [active]])
    cells = range(starts.shape[0])
    if starts.shape[0] > SMALL_SPACE_CELLS:
        cells = sorted({int(np.searchsorted(starts, w, side="right")) - 1 for w in busy if 1 <= w <= active})
    for i in cells:
        lo, hi = int(starts[i]), int(ends[i])
        for k2 in {int(head[lo - 1]) - 1, int(head[lo - 1]) + 1, int(head[hi - 1]) - 1, int(head[hi - 1]) + 1}:
            if 0 <= k2 <= k_cap and not np.all(head[lo - 1:hi] == k2):
                emit(lo, hi, k2)
    for lo, hi, k in runs:
        inside = grid[(grid > lo) & (grid <= hi)]
        if not inside.shape[0]:
            continue
        cuts = {int(inside[inside.shape[0] // 2])}
        cuts.update(int(inside[np.argmin(np.abs(inside - w))]) for w in busy if lo < w <= hi)
        for cut in sorted(cuts):
            for k2 in (k - 1, k + 1):
                if 0 <= k2 <= k_cap:
                    emit(lo, cut - 1, k2)
                    emit(cut, hi, k2)
    return out


def reversals(depths) -> int:
    """How often the depth changes direction as width grows (up then down, or down then up)."""
    steps = np.sign(np.diff(np.asarray(depths, dtype=np.int64)))
    steps = steps[steps != 0]
    return int(np.count_nonzero(steps[1:] != steps[:-1]))


def _key(values, attainment, target, objective):
    """Sort key (smaller is better): misses of the SLO target last, then the objective."""
    mean = float(np.mean(values))
    obj = mean if objective == "energy" else -mean
    if target is None or attainment is None:
        return (0, 0.0, obj)
    att = float(np.mean(attainment))
    return (0, 0.0, obj) if att >= target else (1, -att, obj)


def _improves(new, old, min_gain) -> bool:
    """Whether sort key ``new`` beats ``old``: meets the SLO where ``old`` misses it, misses it
    less, or (both on the same side) has an objective better by more than ``min_gain`` of it."""
    if new[0] != old[0]:
        return new[0] < old[0]
    if new[1] != old[1]:
        return new[1] < old[1]
    return new[2] < old[2] - min_gain * abs(old[2])


def _split(requests, holdout):
    """Training and held-out windows: the held-out one is the last ``holdout`` share of the span."""
    if holdout == 0:
        return requests, requests
    t = requests["arrival_s"]
    cut = t[0] + (1.0 - holdout) * (t[-1] - t[0])
    train, held = requests[t < cut], requests[t >= cut]
    if min(train.shape[0], held.shape[0]) < MIN_WINDOW_REQUESTS:
        n = train.shape[0]
        # The holdout as given: ``:g`` would show 0.9999999 as 1, which the settings check refuses.
        raise ScheduleError(f"holdout {float(holdout)!r} leaves {n} request{'' if n == 1 else 's'} to train on and "
                            f"{held.shape[0]} held out; each window needs at least {MIN_WINDOW_REQUESTS} for a "
                            "verdict: use a holdout nearer 0.25, a longer trace, or holdout 0 (the comparison reruns "
                            "the whole trace on unseen seeds)")
    return np.ascontiguousarray(train), np.ascontiguousarray(held)


def _check(objective, seeds, holdout, slo, executor):
    if not isinstance(objective, str) or objective not in OBJECTIVES:
        raise ScheduleError(f"objective {show(objective)}: use one of {', '.join(OBJECTIVES)}")
    if not is_int(seeds) or not 1 <= seeds <= MAX_SEEDS:
        raise ScheduleError(f"seeds (--seeds) must be a whole number of draft-outcome seeds in 1..{MAX_SEEDS}, "
                            f"got {show(seeds)}")
    if not (isinstance(holdout, (int, float)) and 0 <= holdout < 1):
        raise ScheduleError(f"holdout must be a share of the trace's span in [0, 1), got {holdout!r}")
    if not isinstance(executor, str) or executor not in EXECUTORS:
        raise ScheduleError(f"executor {show(executor)}: use one of {', '.join(EXECUTORS)}")
    return slo.target(DEFAULT_ATTAINMENT) if slo.has_targets else None


def _executor(executor, scheduler, workers):
    """The executor ``tune`` runs on (``auto``: Dask when it is installed, else threads)."""
    try:
        return choose(executor, workers, scheduler, what="specsim tune", fallback="threads")
    except ExecutorError as e:
        raise ScheduleError(str(e)) from None


def _check_search(min_gain, max_rounds, widths_max) -> None:
    """Refuse a ``min_gain``, ``max_rounds`` or ``widths_max`` the search cannot take."""
    if isinstance(min_gain, bool) or not (isinstance(min_gain, (int, float)) and 0 <= min_gain < 1):
        raise ScheduleError(f"min_gain must be a share in [0, 1), got {min_gain!r}")

    problem = int_problem(max_rounds, "max_rounds", 0, COUNT_MAX)
    problem = problem or (widths_max is not None and int_problem(widths_max, "widths_max", 0, COUNT_MAX))
    if problem:
        raise ScheduleError(problem)


def _requests_and_options(requests, options, seeds) -> tuple:
    """``(requests, options)``: the request array (of a trace read, or given) and the server
    options the search runs (a log sized for it), refused when empty, not options, or when the
    ``2 * seeds`` draft-outcome seeds from ``options.seed`` on leave 64 bits."""
    requests = getattr(requests, "requests", requests)
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
    """The policies to compare on the held-out part, as text, each read once so a bad one is
    refused before any work."""
    compare = [str(p) for p in compare]
    for p in compare:
        read_policy(p)  # refuse a bad one before any work
    return compare


def tune(requests, table, calibration, *, objective="energy", slo=None, widths_max=None, seeds=DEFAULT_SEEDS, holdout=DEFAULT_HOLDOUT, options=None, compare=(),
         executor="auto", scheduler=None, workers=None, max_rounds=MAX_ROUNDS, min_gain=MIN_GAIN,
         progress=False, names=None, noise_windows="auto", allow_overload=False, trees=False) -> TuneResult:
    """Search for the width -> depth schedule that serves ``requests`` best (module docstring).

    Parameters
    ----------
    requests : ndarray(REQUEST_DT, ndim=1) or TraceRead
        Sorted by arrival.
    table : CostTable
    calibration : AcceptanceCalibration
    objective : {"energy", "throughput"}
        Minimise J/token, or maximise output tokens/s.
    slo : SLO, optional
        Latency targets a schedule must meet for ``slo.attainment`` of the requests (default
        0.99 when a target is given).
    widths_max : int, optional
        Widest width with its own depth (default: the server's batch cap); wider ones share it.
    seeds : int
        Draft-outcome seeds per evaluation in the search; the final comparison uses as many others.
    holdout : float
        Share of the trace's span, at its end, kept out of the search for the final comparison
        (0: compare on the whole trace, with unseen seeds only).
    options : ServerOptions, optional
        The simulated server (its ``seed`` is the first seed).
    compare : sequence of str
        More policies for the final comparison (e.g. ``vllm:current.json``).
    executor : {"auto", "dask", "threads", "serial"}
        ``auto``: Dask when it is installed (a local cluster, or ``scheduler``), else threads.
    scheduler : str, optional
        Address of a running Dask scheduler.
    workers : int, optional
        Local workers or threads (default: the CPU count).
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
    progress : bool
        Print a progress line on stderr.
    names : dict, optional
        ``trace``, ``table``, ``calibration`` file names to record in the schedule file.
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
    slo = as_slo(slo)
    target = _check(objective, seeds, holdout, slo, executor)
    _check_search(min_gain, max_rounds, widths_max)
    requests, opts = _requests_and_options(requests, options, seeds)
    resolved = opts.resolve(table)
    if widths_max is not None and (not is_int(widths_max) or widths_max < 1):
        raise ScheduleError(f"widths_max must be a whole number >= 1, got {widths_max!r}")
    tree_sizes = _tree_sizes(calibration, resolved) if trees else []
    widest = min(widths_max or resolved.max_num_seqs, resolved.max_num_seqs)
    train_part, held_part = _split(requests, float(holdout))
    windows = _noise_windows(noise_windows, train_part)
    compare = _compare_policies(compare)
    ex = _executor(executor, scheduler, workers)
    kind = ex.kind
    search = None
    try:
        pool = _Pool(ex, {"train": train_part, "held": held_part, **windows}, table, calibration, opts, slo)
        search = _Search(pool, _Line(progress), objective, target, opts.seed, seeds, min_gain, len(windows))
        starts = search.starts(table, calibration, opts, resolved, widest)
        incumbent = search.descend(starts, table, resolved.k_max, widest, max_rounds)
        search.check_met()
        overloaded = search.load(incumbent, offered_rate(train_part), allow_overload)
        reached = search.reached
        final = [incumbent] + [f"fixed:{k}" for k in range(resolved.k_max + 1)] + ["goodput", "propose", "sequence"]
        best_tree = None
        if tree_sizes:
            search.run([("train", f"tree:{n}", s) for n in tree_sizes for s in search.train_seeds])
            best_tree = min((f"tree:{n}" for n in tree_sizes), key=lambda t: search.key(t, search.train_seeds))
            final += [best_tree, "tree:auto"]
        final += [p for p in compare if p not in final]
        search.run([("held", p, s) for p in final for s in search.held_seeds])
    except BaseException:
        ex.close(abandoned=True)
        raise
    finally:
        if search is not None:
            search.line.close()
    ex.close()
    inputs = _inputs(requests, table, calibration, opts, names or {}, seeds=seeds, holdout=holdout,
                     max_num_seqs=resolved.max_num_seqs, widest=widest, k_cap=resolved.k_max,
                     reached=reached, min_gain=min_gain, slo=slo, target=target)
    inputs["train_rate"], inputs["holdout_rate"] = offered_rate(train_part), offered_rate(held_part)
    if windows:
        inputs["noise_windows"] = len(windows)
    result = replace(search.result(incumbent, final, starts, kind, inputs, time.monotonic() - started),
                     overloaded=overloaded)
    if best_tree is not None:
        result = replace(result, trees=search.trees(result, tree_sizes, best_tree))
    return result


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


# How many time windows ``noise_windows="auto"`` cuts the training part into: enough pairs with two
# seeds (8) for a t-interval, few enough that each window keeps a quarter of the trace's traffic.
AUTO_WINDOWS = 4


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


class _Search:
    """The search's state: evaluated results (cached by part, policy and seed), its seeds, the
    widest width any run reached, and the rounds of moves."""

    def __init__(self, pool, line, objective, target, base_seed, seeds, min_gain, windows=0):
        self.pool, self.line, self.objective, self.target = pool, line, objective, target
        self.windows = windows
        self.rejected = []
        self.field = "j_per_token" if objective == "energy" else "tokens_per_s"
        self.train_seeds = [base_seed + i for i in range(seeds)]
        self.held_seeds = [base_seed + seeds + i for i in range(seeds)]
        self.min_gain = min_gain
        self.cache = {}
        self.count = 0
        self.reached = 0

    def run(self, tasks):
        todo = [t for t in dict.fromkeys(tasks) if t not in self.cache]
        for t, r in zip(todo, self.pool.run(todo, self.line.tick)):
            self.cache[t] = r
            self.reached = max(self.reached, r["max_width"])
        self.count += len(todo)

    def check_met(self) -> None:
        """Refuse a search whose SLO no candidate met on the training window: there is no schedule
        to recommend, only the least bad, and the error names how far it fell short."""
        if self.target is None:
            return
        by_policy = {}
        for (part, pol, seed), r in self.cache.items():
            if part == "train" and seed in self.train_seeds and r["attainment"] is not None:
                by_policy.setdefault(pol, []).append(r["attainment"])
        means = {pol: float(np.mean(v)) for pol, v in by_policy.items() if len(v) == len(self.train_seeds)}
        if not means:
            return
        best = max(means, key=means.get)
        if means[best] < self.target:
            raise ScheduleError(
                f"no candidate meets the SLO for {self.target:.2%} of requests: the best of the {len(means)} tried "
                f"reached {means[best]:.2%} ({best}, mean over {len(self.train_seeds)} seeds on the training window); "
                "relax the SLO or the attainment target, or give the server more room (a wider batch, more KV)")

    def load(self, pol, rate, allow) -> dict:
        """Whether ``pol`` overloaded the server on the training window (queueing grew through the
        run on most seeds): refused with the rate the server kept up with unless ``allow``; returns
        what was found (None when it kept up)."""
        rs = [self.cache[("train", pol, s)] for s in self.train_seeds]
        over = sum(r["overloaded"] for r in rs)
        if 2 * over <= len(rs):
            return None
        frac = float(np.mean([r["served_fraction"] for r in rs if r["served_fraction"] is not None]))
        served = None if rate is None else rate * frac
        found = {"policy": pol, "seeds": f"{over} of {len(rs)}", "served_fraction": frac, "offered_rate": rate,
                 "served_rate": served}
        if allow:
            return found
        offered = "" if rate is None else f" {rate:.3g} requests/s, about {served:.3g} requests/s"
        raise ScheduleError(
            f"the server is overloaded: under the best schedule found ({pol}) queueing delay grew through the "
            f"training window on {over} of {len(rs)} seeds, so it kept up with about {100 * frac:.0f}% of the offered"
            f"{offered}; a schedule tuned on a backlog optimises the backlog, not the policy: tune at a rate the "
            "server can serve (a smaller --rate-scale), add replicas (specsim capacity), or pass --allow-overload "
            "to tune anyway")

    def key(self, pol, seed_list, part="train"):
        rs = [self.cache[(part, pol, s)] for s in seed_list]
        att = None if self.target is None else [r["attainment"] for r in rs]
        return _key([r[self.field] for r in rs], att, self.target, self.objective)

    def starts(self, table, cal, opts, resolved, widest) -> dict:
        """Every fixed depth, and the propose and goodput depth at every width: name -> (depths, policy)."""
        k_cap = resolved.k_max
        depths = {f"fixed:{k}": np.full(widest, k, dtype=np.int64) for k in range(k_cap + 1)}
        for name in ("propose", "goodput"):
            d = depth_by_width(parse_policy(name), table, cal, opts, resolved.max_num_seqs, k_cap)
            depths[name] = d[1:widest + 1]
        out = {name: (d, policy_text(ranges_from_depths(d))) for name, d in depths.items()}
        self.run([("train", t, s) for _, t in out.values() for s in self.train_seeds])
        return out

    def descend(self, starts, table, k_cap, widest, max_rounds) -> str:
        """Steepest descent over coordinate moves from the best start; returns the winner's policy."""
        seeds, first = self.train_seeds, self.train_seeds[:1]
        best = min(starts, key=lambda n: self.key(starts[n][1], seeds))
        d, incumbent = starts[best][0].copy(), starts[best][1]
        grid = grid_widths(widest, table.widths)
        self.line.say(f"best start {best}: {_fmt(self.key(incumbent, seeds), self.objective)}")
        for round_no in range(1, max_rounds + 1):
            active = max(1, min(widest, self.reached))
            busy = self.cache[("train", incumbent, seeds[0])]["width_quantiles"]
            cands = {}
            for c in _moves(d, active, k_cap, grid, busy):
                cands.setdefault(policy_text(ranges_from_depths(c)), c)
            cands.pop(incumbent, None)
            self.run([("train", t, seeds[0]) for t in cands])
            mine = self.key(incumbent, first)
            better = sorted((t for t in cands if _improves(self.key(t, first), mine, self.min_gain)),
                            key=lambda t: self.key(t, first))[:BEAM]
            self.run([("train", t, s) for t in better for s in seeds[1:]])
            # A move must gain on the mean and on every seed: one lucky draw does not move the schedule.
            better = [t for t in better if _improves(self.key(t, seeds), self.key(incumbent, seeds), self.min_gain)
                      and all(_improves(self.key(t, [s]), self.key(incumbent, [s]), 0.0) for s in seeds)]
            if self.windows and better:
                better = self.clear_noise(better, incumbent, d, cands, active, round_no)
            win = min(better, key=lambda t: self.key(t, seeds), default=None)
            if win is None:
                self.line.say(f"round {round_no}: no move improves; {incumbent}")
                break
            d, incumbent = cands[win], win
            self.line.say(f"round {round_no}: {_fmt(self.key(incumbent, seeds), self.objective)} with {incumbent}")
        return incumbent

    def clear_noise(self, better, incumbent, d, cands, active, round_no) -> list:
        """The moves of ``better`` whose mean gain over the (seed, window) pairs clears its noise
        and ``min_gain``; the others are recorded in ``rejected``."""
        parts = [f"train#{w}" for w in range(self.windows)]
        self.run([(p, t, s) for t in [incumbent] + better for p in parts for s in self.train_seeds])
        kept = []
        for t in better:
            if self.key(t, self.train_seeds)[:2] != self.key(incumbent, self.train_seeds)[:2]:
                kept.append(t)  # a move on the SLO: judged on attainment
                continue
            gain, noise, base = self.pair_gain(t, incumbent, parts)
            if gain > noise and gain > self.min_gain * abs(base):
                kept.append(t)
            else:
                self.rejected.append({"round": round_no, "policy": t, "gain": gain, "noise": noise,
                                      "pairs": len(parts) * len(self.train_seeds),
                                      "zigzag": reversals(cands[t][:active]) > reversals(d[:active])})
        return kept

    def pair_gain(self, pol, incumbent, parts) -> tuple:
        """``(mean gain, t95 x its standard error, incumbent's mean)`` over the (seed, window) pairs."""
        sign = 1.0 if self.objective == "energy" else -1.0
        mine = np.array([self.cache[(p, incumbent, s)][self.field] for p in parts for s in self.train_seeds])
        theirs = np.array([self.cache[(p, pol, s)][self.field] for p in parts for s in self.train_seeds])
        gain, noise = paired_noise(sign * (mine - theirs))
        return gain, noise, float(mine.mean())

    def score(self, pol, part, seed_list) -> Score:
        rs = [self.cache[(part, pol, s)] for s in seed_list]
        att = None if rs[0]["attainment"] is None else tuple(r["attainment"] for r in rs)
        return Score(pol, tuple(r[self.field] for r in rs), att, float(np.mean([r["j_per_token"] for r in rs])),
                     float(np.mean([r["tokens_per_s"] for r in rs])), float(np.mean([r["tpot_p99_s"] for r in rs])))

    def held_gain(self, pol, base) -> tuple:
        """``(mean, twice its standard error)`` of ``pol``'s paired gain over ``base`` per held-out
        seed (positive = better; the error NaN with one seed)."""
        sign = 1.0 if self.objective == "energy" else -1.0
        mine = np.array([self.cache[("held", base, s)][self.field] for s in self.held_seeds])
        theirs = np.array([self.cache[("held", pol, s)][self.field] for s in self.held_seeds])
        diffs = sign * (mine - theirs)
        n = diffs.shape[0]
        return float(diffs.mean()), (2.0 * float(np.std(diffs, ddof=1)) / math.sqrt(n) if n > 1 else float("nan"))

    def trees(self, result, sizes, best) -> dict:
        """:attr:`TuneResult.trees`: the best static tree against the chain served, and
        ``tree:auto`` against the best static tree, on the held-out window and seeds."""
        chain = result.policy if result.serves_tuned else result.best_fixed
        gain, noise = self.held_gain(best, chain)
        mine, theirs = self.key(chain, self.held_seeds, "held"), self.key(best, self.held_seeds, "held")
        if mine[:2] != theirs[:2]:
            winner = "tree" if theirs < mine else "chain"  # on the SLO: attainment decides
        elif gain == 0 or abs(gain) <= noise:
            winner = "tie"
        else:
            winner = "tree" if gain > 0 else "chain"
        cost, cost_noise = self.held_gain("tree:auto", best)
        return {"candidates": {f"tree:{n}": self.score(f"tree:{n}", "train", self.train_seeds).mean for n in sizes},
                "best": best, "chain": chain, "gain": gain, "noise": noise, "winner": winner,
                "static_cost": cost, "static_cost_noise": cost_noise}

    def result(self, incumbent, final, starts, kind, inputs, seconds) -> TuneResult:
        held = tuple(self.score(p, "held", self.held_seeds) for p in final)
        fixed = [s for s in held if read_policy(s.policy).fixed_depth is not None]
        best_fixed = min(fixed, key=lambda s: self.key(s.policy, self.held_seeds, "held"))
        sign = 1.0 if self.objective == "energy" else -1.0
        diffs = sign * (np.array(best_fixed.values) - np.array(held[0].values))
        n = diffs.shape[0]
        noise = 2.0 * float(np.std(diffs, ddof=1)) / math.sqrt(n) if n > 1 else float("nan")
        return TuneResult(
            ranges=canonical(parse_policy(incumbent).ranges), objective=self.objective,
            train=self.score(incumbent, "train", self.train_seeds), holdout=held, best_fixed=best_fixed.policy,
            gain=float(diffs.mean()), gain_noise=noise,
            starts={name: (t, self.score(t, "train", self.train_seeds)) for name, (_, t) in starts.items()},
            evaluations=self.count, seconds=seconds, executor=kind, inputs=inputs,
            noise_windows=self.windows, rejected_moves=tuple(self.rejected),
        )


def _inputs(requests, table, cal, opts, names, *, seeds, holdout, max_num_seqs, widest, k_cap, reached, min_gain,
            slo, target) -> dict:
    """What the schedule file records about how it was tuned."""
    return {
        "trace": names.get("trace"), "requests": int(requests.shape[0]), "trace_sha256": trace_digest(requests),
        "table": names.get("table"), "table_sha256": text_digest(table.to_text()),
        "calibration": names.get("calibration"), "calibration_sha256": text_digest(cal.render()),
        "seeds": int(seeds), "first_seed": int(opts.seed), "holdout": float(holdout), "max_num_seqs": int(max_num_seqs),
        "widths_max": int(widest), "k_max": int(k_cap), "table_max_k": int(table.max_k),
        "fitted_positions": int(cal.priors.shape[0]), "widest_reached": int(reached), "slack": opts.slack,
        "max_seqs": opts.max_seqs, "row_budget": opts.row_budget, "min_gain": float(min_gain),
        "prefill_ms_per_token": opts.prefill_ms_per_token, "prefill_j_per_token": opts.prefill_j_per_token,
        "idle_w": opts.idle_w, "slo_ttft_s": slo.ttft_s, "slo_tpot_s": slo.tpot_s, "attainment": target,
    }


def _fmt(k, objective):
    value = k[2] if objective == "energy" else -k[2]
    unit = "J/token" if objective == "energy" else "tok/s"
    miss = f" (misses the SLO: {100 * -k[1]:.1f}%)" if k[0] else ""
    return f"{value:.5g} {unit}{miss}"
