"""Capacity planning (``specsim.capacity``, ``specsim capacity``): per policy, the fewest replicas
whose SLO attainment meets a target, and what a token then costs in GPU-hours, joules and
dollars (see docs/fleets.md).

The search
----------
For each policy, fleets of ``m`` units are probed (a unit is one replica of a table and
calibration, or one copy of a fleet file's groups): galloping ``m = 1, 2, 4, ...`` until one meets
the target (or the cap is passed: the cap itself is probed last), then bisection between the
last size that missed and the first that met it. It assumes attainment does not fall as
replicas are added. That holds in expectation for a load-aware router, but not exactly: every
fleet size routes differently, and a replica's draft outcomes follow its own request stream.
So the answer is checked at its boundary: ``m - 1`` must miss (the search always probes it) and
``m + 1`` must meet the target too; when it does not, the result says so
(``monotone_at_boundary = False``) and the answer should be read with care.

Probes of all policies in one round of the search run together on an executor
(:mod:`specsim._executor`): serially in this process, on threads, or on a Dask cluster.

Why one module of this size: the search, the probe it sends sizes to and the answer's costs share
the probe's fields and the search's state; the trace's time windows and their resamples live in
:mod:`specsim.studies.windows`.

Window resampling
-----------------
With ``window_resamples=N`` every probe also runs on ``N`` traces resampled from the trace's
time windows (:mod:`specsim.studies.windows`), and its interval is widened by the spread of
their attainments (:func:`specsim.studies.windows.widened`).
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass, field, replace
from typing import NamedTuple

from specsim.errors import SimulationError
from specsim.sim.figures import percentile, run_rates
from specsim.sim.slo import SLO, as_slo, slo_attainment
from specsim._checks import (MAX_RESAMPLES, MAX_SEEDS, MAX_WINDOWS, MIN_WINDOW_REQUESTS, callback_problem, is_int,
                             number_problem, policy_list_problem, show)
from specsim._executor import Executor, ExecutorChoice, ExecutorError
from specsim._stats import wilson
from specsim.frames import rows_frame
from specsim.interop import read_policy
from specsim.plan.planner import check_slack
from specsim.sim.engine import request_columns, use_sequence_engine
from specsim.sim.fleet import Fleet, check_router, simulate_fleet
from specsim.sim.metrics import overload
from specsim.studies.inputs import inputs_problem
from specsim.studies.windows import resample_windows, widened
from specsim.traces._types import REQUEST_DT

PLAIN = "fixed:0"
DEFAULT_MAX_REPLICAS = 1024
# The dearest GPU-hour priced (dollars): far past any GPU's, near enough that dollars per million
# tokens stay finite for any run (a price of 1e308 made them infinite, which JSON cannot hold).
MAX_GPU_HOUR_USD = 1e6
DEFAULT_ROUTER = "least_outstanding"
# Draft-outcome seeds each probe runs (its attainment interval pools requests over them).
DEFAULT_SEEDS = 3
# Fewest requests a trace should allow to miss before a capacity answer rests on more than a
# handful of them.
FEW_MISSES = 10
# The share of requests that must meet the SLO where the SLO names none.
DEFAULT_ATTAINMENT = 0.99
# Time windows a trace is cut into for window resampling, where none is given.
DEFAULT_WINDOWS = 8


class CapacityError(SimulationError):
    """A capacity search that cannot run, or whose target no fleet size up to the cap meets."""


@dataclass(frozen=True)
class Probe:
    """One fleet size simulated for one policy (JSON-ready fields)."""

    label: str
    units: int
    replicas: int
    gpus: int
    attainment: float
    output_tokens: int
    makespan_s: float
    energy_j: float
    ttft_p99_s: float
    tpot_p99_s: float
    overloaded: bool = None
    queue_growth: float = None
    attainment_low: float = None
    attainment_high: float = None
    seeds: int = 1
    trials: int = 0
    window_resamples: int = 0
    window_half_width: float = None
    resample_attainments: tuple = ()

    @property
    def interval(self) -> tuple:
        """The attainment's 95% interval (the point value twice when none was measured); with
        window resampling, widened by the spread over resampled traces (module docstring)."""
        if self.attainment_low is None:
            return (self.attainment, self.attainment)
        return (self.attainment_low, self.attainment_high)

    def to_dict(self) -> dict:
        out = dict(self.__dict__)
        if not self.window_resamples:
            for k in ("window_resamples", "window_half_width", "resample_attainments"):
                del out[k]
        else:
            out["resample_attainments"] = list(self.resample_attainments)
        return out


@dataclass(frozen=True)
class PolicyCapacity:
    """The answer for one policy: the fewest replicas meeting the target, and its costs.

    Attributes
    ----------
    label : str
        ``policy`` or ``policy@slack``.
    replicas, gpus, units : int
        The answer (``units`` copies of the fleet's unit).
    attainment : float
        Its SLO attainment (fraction of requests meeting both targets).
    tokens_per_s_per_gpu, j_per_token, gpu_hours_per_mtok : float
        Output tokens per second per GPU over the trace; fleet energy (standby included) per
        output token; GPU-hours the fleet is provisioned for, per million output tokens.
    usd_per_mtok : float or None
        ``gpu_hours_per_mtok`` times the GPU-hour price, when one is given.
    gpu_saving, energy_saving : float or None
        ``1 - this / plain decoding's`` for GPUs (= GPU-hours = dollars) and J/token.
    monotone_at_boundary : bool or None
        Whether one unit more also met the target (None when that is past the cap).
    attainment_low, attainment_high : float
        The answer's attainment 95% interval (Wilson over requests x draft-outcome seeds, widened
        by the spread over resampled traces with window resampling); its low end clears the target.
    interval_includes : str or None
        With window resampling: what the interval covers (``"draft-outcome seeds and N window
        resamples"``); None without.
    window_half_width : float or None
        With window resampling: ``t95(N - 1)`` times the sd of the answer's attainment over the
        resampled traces, the widening's share.
    probes : tuple of Probe
        Every size simulated, ascending.
    """

    label: str
    replicas: int
    gpus: int
    units: int
    attainment: float
    tokens_per_s_per_gpu: float
    j_per_token: float
    gpu_hours_per_mtok: float
    usd_per_mtok: float = None
    gpu_saving: float = None
    energy_saving: float = None
    monotone_at_boundary: bool = None
    attainment_low: float = None
    attainment_high: float = None
    interval_includes: str = None
    window_half_width: float = None
    probes: tuple = ()

    def to_dict(self) -> dict:
        out = {k: v for k, v in self.__dict__.items() if k != "probes"
               and not (k in ("interval_includes", "window_half_width") and self.interval_includes is None)}
        out["probes"] = [p.to_dict() for p in self.probes]
        return out


@dataclass(frozen=True)
class CapacityResult:
    """:func:`capacity`'s answer: one :class:`PolicyCapacity` per policy, plain decoding first."""

    policies: tuple
    target: float
    slo_ttft_s: float
    slo_tpot_s: float
    router: str
    unit_replicas: int
    unit_gpus: int
    max_units: int
    gpu_hour_usd: float = None
    fleet: list = field(default_factory=list)
    seeds: int = 1
    warnings: tuple = ()
    window_resamples: int = 0
    windows: int = 0

    @property
    def interval_includes(self) -> str:
        """What the attainment intervals cover: the draft-outcome seeds, and the window resamples when on."""
        return _includes(self.seeds, self.window_resamples, self.windows)

    def policy(self, label) -> PolicyCapacity:
        for p in self.policies:
            if p.label == label:
                return p
        raise KeyError(label)

    def to_dict(self) -> dict:
        out = {
            "target_attainment": self.target, "slo": {"ttft_s": self.slo_ttft_s, "tpot_s": self.slo_tpot_s},
            "router": self.router, "unit": {"replicas": self.unit_replicas, "gpus": self.unit_gpus,
                                            "groups": self.fleet},
            "max_units": self.max_units, "gpu_hour_usd": self.gpu_hour_usd, "seeds": self.seeds,
            "warnings": list(self.warnings), "policies": [p.to_dict() for p in self.policies],
        }
        if self.window_resamples:
            out["window_resampling"] = {"resamples": self.window_resamples, "windows": self.windows,
                                        "interval_includes": self.interval_includes}
        return out

    def to_frame(self):
        """One row per policy (pandas): the answer and its costs."""
        return rows_frame([{k: v for k, v in p.to_dict().items() if k != "probes"} for p in self.policies])

    def probes_frame(self):
        """One row per probe (pandas): policy, fleet size, attainment and costs."""
        return rows_frame([p.to_dict() for pc in self.policies for p in pc.probes])


# -- one probe ---------------------------------------------------------------------------------------

class ProbeSetup(NamedTuple):
    """What every probe of a search shares: the fleet's unit, the router, the SLO and the
    draft-outcome seeds (empty: the fleet's own)."""

    fleet: Fleet
    router: str
    slo: SLO
    seeds: tuple = ()


class Resampling(NamedTuple):
    """Window resampling (module docstring): ``resamples`` resampled traces per probe, cut from
    ``windows`` time windows (None: :data:`DEFAULT_WINDOWS`, or as many as the trace allows)."""

    resamples: int
    windows: int = None


def run_probe(requests, setup, run, units, resamples=()) -> Probe:
    """Simulate ``units`` copies of ``setup.fleet`` with one policy, ``run`` = ``(label, Policy,
    slack)``, under each draft-outcome seed of ``setup.seeds`` (default: the fleet's own); a plain
    function, so that a Dask worker can run it.

    Attainment pools requests over seeds; its 95% interval is Wilson's over those
    requests x seeds trials (docs/fleets.md, "Intervals"). Tokens, energy and times are the
    first seed's run; the p99 latencies are the worst over seeds. ``resamples``: resampled
    traces (:func:`specsim.studies.windows.resample_windows`) the probe also runs under every
    seed; the interval is then widened by the spread of their attainments
    (:func:`specsim.studies.windows.widened`)."""
    label, policy, slack = run
    fleet, router, seeds = setup.fleet, setup.router, setup.seeds
    sized = fleet.scaled(units).with_options(slack=slack)
    seeds = (None,) if not seeds else tuple(seeds)
    slo = SLO(setup.slo.ttft_s, setup.slo.tpot_s)
    met = trials = 0
    first = None
    ttft99 = tpot99 = None
    growth, over = None, None
    for seed in seeds:
        run = sized if seed is None else sized.with_options(seed=int(seed))
        res = simulate_fleet(requests, run, policy, router=router)
        f = res.fleet
        att = slo_attainment(f, slo)["attainment"]
        met += round((1.0 if att is None else att) * f.requests)
        trials += f.requests
        t, q = percentile(f.ttft_s, 99), percentile(f.tpot_s, 99)
        ttft99 = t if ttft99 is None or (t is not None and t > ttft99) else ttft99
        tpot99 = q if tpot99 is None or (q is not None and q > tpot99) else tpot99
        o = overload(f)
        if o["growth"] is not None and (growth is None or o["growth"] > growth):
            growth, over = o["growth"], o["flag"]
        if first is None:
            first = (res, f)
    res, f = first
    point = met / trials if trials else 1.0
    interval = wilson(met, trials) or (None, None)
    spread = None
    shares = tuple(_pooled_attainment(r, sized, seeds, policy, router, slo) for r in resamples)
    if shares:
        spread, interval = widened(point, interval, shares)
    return Probe(label, units, sized.replicas, sized.gpus, point,
                 int(f.output_tokens.sum()), res.makespan_s, float(f.energy_j), ttft99, tpot99, over, growth,
                 interval[0], interval[1], len(seeds), trials, len(shares), spread, shares)


def _pooled_attainment(requests, sized, seeds, policy, router, slo) -> float:
    """One trace's attainment under ``sized``, pooled over ``seeds``."""
    met = trials = 0
    for seed in seeds:
        run = sized if seed is None else sized.with_options(seed=int(seed))
        f = simulate_fleet(requests, run, policy, router=router).fleet
        att = slo_attainment(f, slo)["attainment"]
        met += round((1.0 if att is None else att) * f.requests)
        trials += f.requests
    return met / trials if trials else 1.0


def _includes(seeds, resamples, windows) -> str:
    head = f"{seeds} draft-outcome seed{'s' if seeds != 1 else ''}"
    if not resamples:
        return head
    return f"{head} and {resamples} window resamples ({windows} windows)"


# -- the search ---------------------------------------------------------------------------------------

def search_sizes(target, max_units):
    """The search as a generator: it yields a fleet size to probe and is sent that size's
    attainment, a number or a ``(low, high)`` 95% interval; a size *meets* the target when the
    interval's low end does. It returns ``(answer or None, probed {size: sent value})``.

    Galloping ``1, 2, 4, ...`` to the first size that meets, bisection down to the last that
    misses, then a check below the bracket: every smaller size whose interval does not rule the
    target out (its high end reaches it) is probed, walking down until one does, and the smallest
    that meets is the answer (noise can make one size miss while a smaller one meets). Finally
    ``answer + 1`` (within the cap) is probed once, for the boundary check.
    """
    seen = {}

    def low(m):
        v = seen[m]
        return v[0] if isinstance(v, tuple) else v

    def high(m):
        v = seen[m]
        return v[1] if isinstance(v, tuple) else v

    lo, hi, m = 0, None, 1
    while hi is None:
        seen[m] = yield m
        if low(m) >= target:
            hi = m
        elif m >= max_units:
            return None, seen
        else:
            lo = m
            m = min(2 * m, max_units)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        seen[mid] = yield mid
        if low(mid) >= target:
            hi = mid
        else:
            lo = mid
    below = hi - 1
    while below >= 1:
        if below not in seen:
            seen[below] = yield below
        if low(below) >= target:
            hi = below
        elif high(below) < target:
            break
        below -= 1
    if hi + 1 <= max_units and hi + 1 not in seen:
        seen[hi + 1] = yield hi + 1
    return hi, seen


def _unit_fleet(inputs):
    """The unit the search adds: ``inputs.fleet``, or one replica of its table and calibration."""
    problem = inputs_problem(inputs, "capacity")
    if problem:
        raise CapacityError(problem)
    table, calibration, fleet = inputs.table, inputs.calibration, inputs.fleet
    if fleet is None:
        if table is None or calibration is None:
            raise CapacityError("give a table and a calibration, or a fleet")
        fleet = Fleet.uniform(table, calibration, 1, inputs.options)
    elif table is not None or calibration is not None:
        raise CapacityError("give either a table and calibration or a fleet, not both")
    return fleet


def _slo_and_attainment(slo) -> tuple:
    """``(SLO, attainment target)``; an SLO without a target is refused."""
    slo = as_slo(slo)
    if not slo.has_targets:
        raise CapacityError("give an SLO: a TTFT target, a TPOT target, or both (seconds)")
    attainment = slo.target(DEFAULT_ATTAINMENT)
    return slo, attainment


def _refuse_unmet(found, probes, most_replicas, attainment, notes) -> None:
    """Refuse when a policy met the target at no fleet size, naming each one's best attainment."""
    failed = [label for label, m in found.items() if m is None]
    if failed:
        problems = [f"{label}: best attainment {max(p.attainment for p in probes[label].values()):.4f} "
                    f"(at {max(probes[label].values(), key=lambda p: (p.attainment, -p.units)).replicas} replicas)"
                    for label in failed]
        raise CapacityError(f"no fleet of up to {most_replicas} replicas meets {attainment:g} SLO "
                            f"attainment for {', '.join(failed)}; raise the cap, relax the SLO or the target",
                            problems + notes)


def capacity(inputs, policies=("fixed:0", "propose", "sequence"), *, slack=0.0, router=DEFAULT_ROUTER,
             max_replicas=DEFAULT_MAX_REPLICAS, gpu_hour_usd=None, executor="serial", progress=None,
             resampling=None) -> CapacityResult:
    """The fewest replicas per policy whose SLO attainment meets ``slo.attainment``.

    A pure function of its inputs (the search and every probe are deterministic).

    Parameters
    ----------
    inputs : StudyInputs
        The trace (``requests``: ndarray(REQUEST_DT) or TraceRead); one replica's ``table``,
        ``calibration`` and ``options``, or a ``fleet`` whose groups form the unit the search
        multiplies (``4 x H200 + 2 x B200`` -> 6, 12, 18, ... replicas); ``slo``, the targets (at
        least one) and the fraction of requests that must meet both (default
        :data:`DEFAULT_ATTAINMENT`, 0.99); ``seeds``, the draft-outcome seeds per probe (the
        fleet's seed and the next ``seeds - 1``, default :data:`DEFAULT_SEEDS`): a size meets the
        target when the low end of its attainment's 95% interval (Wilson over requests x seeds)
        does.
    policies : sequence of str or Policy
        Policies to size; plain decoding (``fixed:0``) is always sized too, as the baseline of
        the savings.
    slack : float
        Planner slack of ``propose`` and ``sequence``.
    router : str
    max_replicas : int
        Cap on replicas (units times the unit's replicas).
    gpu_hour_usd : float, optional
        Price of a GPU-hour, for dollars per million tokens.
    executor : Executor, ExecutorChoice or {"serial", "threads", "dask", "auto"}
        Where a round's probes run side by side: a running :class:`specsim._executor.Executor`
        (left open; on Dask the trace and the fleet travel to each worker once), or one started
        for the search and closed after it (default ``"serial"``: in this process).
    progress : callable, optional
        Called as ``progress(done_probes, searching)`` after every round, where ``searching`` maps
        each unfinished label to its current ``(missed, met)`` bracket.
    resampling : Resampling, optional
        Window resampling (default None: off): ``resamples`` resampled traces per probe (2 ..
        :data:`MAX_RESAMPLES`) cut from ``windows`` contiguous time windows (default
        :data:`DEFAULT_WINDOWS`; 2 .. :data:`MAX_WINDOWS`, at most requests /
        :data:`MIN_WINDOW_REQUESTS`). Each probe also runs on them, and its interval is widened by
        the spread of their attainments: with ``h = t95(N - 1) * sd`` of the ``N`` per-resample
        attainments and Wilson's seed interval ``[lo, hi]`` around the point ``p``, it is ``[p -
        sqrt((p - lo)^2 + h^2), p + sqrt((hi - p)^2 + h^2)]`` within ``[0, 1]``
        (:mod:`specsim.studies.windows`).

    Returns
    -------
    CapacityResult

    Raises
    ------
    CapacityError
        When no fleet up to the cap meets the target for some policy (with its best attainment).
    """
    requests, seeds, fleet = inputs.requests, inputs.seeds_or(DEFAULT_SEEDS), _unit_fleet(inputs)
    _check_arguments(policies, max_replicas, gpu_hour_usd, progress, resampling)
    window_resamples, windows = (None, None) if resampling is None else resampling
    check_router(router)

    if request_columns(requests).arrival_s.shape[0] == 0:
        raise CapacityError("the trace holds no requests: every fleet meets any target on it, so there is "
                            "nothing to size; give a trace with requests")
    slo, attainment = _slo_and_attainment(inputs.slo)
    max_units = int(max_replicas) // fleet.replicas
    if max_units < 1:
        raise CapacityError(f"max_replicas = {max_replicas} is below one unit of the fleet ({fleet.replicas} "
                            "replicas); raise the cap")
    if not is_int(seeds) or not 1 <= seeds <= MAX_SEEDS:
        raise CapacityError(f"seeds = {show(seeds)} must be a whole number of draft-outcome seeds in 1..{MAX_SEEDS}")
    seeds = int(seeds)
    if not isinstance(executor, (Executor, ExecutorChoice, str)):
        raise CapacityError(f"executor {show(executor)}: use an Executor, an ExecutorChoice or one of serial, "
                            "threads, dask, auto")
    n = request_columns(requests).arrival_s.shape[0]
    window_resamples, windows = check_resampling(window_resamples, windows, n,
                                                 ("resampling.resamples", "resampling.windows"))
    base = int(fleet.groups[0].options.seed)
    seed_list = tuple((base + i) % (1 << 64) for i in range(seeds))
    runs = _runs(policies, slack, read_policy)
    use_sequence_engine(pol for _, pol, _ in runs)  # the probes of every policy: one compiled engine here
    notes = _resolution_warnings(n, seeds, attainment)
    notes += _idle_warnings(requests, fleet, runs, slo, attainment)
    resampled = resample_windows(requests, window_resamples, windows, base) if window_resamples else ()
    found, probes = _search_all(executor, requests, ProbeSetup(fleet, router, slo, seed_list), runs,
                                (attainment, max_units), progress, resampled)
    _refuse_unmet(found, probes, max_units * fleet.replicas, attainment, notes)
    includes = _includes(seeds, window_resamples, windows) if window_resamples else None
    answers = [_answer(label, found[label], probes[label], attainment, gpu_hour_usd, includes)
               for label, _, _ in runs]
    plain = answers[0]
    answers = [_with_saving(a, plain) for a in answers]
    return CapacityResult(tuple(answers), float(attainment), slo.ttft_s, slo.tpot_s, router, fleet.replicas,
                          fleet.gpus, max_units, gpu_hour_usd, fleet.describe(), seeds, tuple(notes),
                          window_resamples or 0, windows or 0)


def _check_arguments(policies, max_replicas, gpu_hour_usd, progress, resampling) -> None:
    """Refuse, before any work, a ``policies`` that is not a list, a ``max_replicas`` that is not a
    whole number, a ``gpu_hour_usd`` that is not a finite price >= 0, a ``progress`` that cannot be
    called and a ``resampling`` that is not a :class:`Resampling`."""
    problem = policy_list_problem(policies, "policies")
    if not problem and not is_int(max_replicas):
        problem = f"max_replicas = {show(max_replicas)} must be a whole number of replicas"
    if not problem and gpu_hour_usd is not None:
        problem = number_problem(gpu_hour_usd, "gpu_hour_usd", 0.0, MAX_GPU_HOUR_USD, unit="dollars per GPU-hour")
    problem = problem or callback_problem(progress, "progress", "progress(done_probes, searching)")
    if not problem and resampling is not None and not isinstance(resampling, Resampling):
        problem = f"resampling {show(resampling)}: give a Resampling(resamples, windows) or None (off)"
    if problem:
        raise CapacityError(problem)


def check_resampling(resamples, windows, n: int, names=("window_resamples", "windows")) -> tuple:
    """``(resamples, windows)`` checked against a trace of ``n`` requests: ``(0, 0)`` when off,
    else whole numbers with ``2 <= resamples <= MAX_RESAMPLES`` and ``2 <= windows <=
    min(MAX_WINDOWS, n // MIN_WINDOW_REQUESTS)`` (``windows`` defaults to :data:`DEFAULT_WINDOWS`, or the most the trace
    allows when that is fewer). ``names``: what the caller calls the two, for the messages."""
    rname, wname = names
    if resamples is None:
        if windows is not None:
            raise CapacityError(f"{wname} = {windows!r} cuts the trace for window resampling, which is off: give "
                                f"{rname} N (2 or more) as well, or leave {wname} out")
        return 0, 0
    if not is_int(resamples) or not 2 <= resamples <= MAX_RESAMPLES:
        raise CapacityError(f"{rname} = {show(resamples)} must be a whole number of resampled traces in "
                            f"2..{MAX_RESAMPLES} (two or more measure a spread); leave it out to turn window "
                            "resampling off")
    most = min(MAX_WINDOWS, n // MIN_WINDOW_REQUESTS)
    if most < 2:
        raise CapacityError(f"the trace has {n} requests: window resampling needs at least "
                            f"{2 * MIN_WINDOW_REQUESTS} (two windows of {MIN_WINDOW_REQUESTS}); use a longer trace "
                            f"or leave {rname} out")
    if windows is None:
        windows = min(DEFAULT_WINDOWS, most)
    if not is_int(windows) or not 2 <= windows <= most:
        raise CapacityError(f"{wname} = {show(windows)} must be a whole number in 2..{most}: the trace's {n} requests "
                            f"allow windows of at least {MIN_WINDOW_REQUESTS} requests each; give fewer windows or "
                            "a longer trace")
    return int(resamples), int(windows)


def _resolution_warnings(n: int, seeds: int, target: float) -> list:
    """What the trace's size allows: how many requests may miss (a warning when few), and a
    refusal when even a probe where every request meets the SLO cannot clear the target at 95%."""
    out = []
    allowed = math.floor(n * (1.0 - target) + 1e-9)
    if allowed < FEW_MISSES:
        out.append(f"the trace has {n} requests: {target:.2%} attainment allows {allowed} to miss, so a handful "
                   "of requests decides each answer; use a longer trace for a firmer one")
    best_low = wilson(n * seeds, n * seeds)[0]
    if best_low < target:
        raise CapacityError(f"{n} requests x {seeds} draft-outcome seeds cannot resolve {target:.2%} attainment: even "
                            f"a fleet where every request meets the SLO has a 95% interval reaching down to "
                            f"{best_low:.2%}, so no size can clear it; use a longer trace, more seeds or a lower target")
    return out


def _idle_warnings(requests, fleet, runs, slo, target) -> list:
    """Requests that miss the SLO even alone on an idle replica, per policy: no fleet size helps
    them, so they use up the target's allowance. Each request is served alone by spreading the
    arrivals until no two requests overlap."""
    import numpy as np

    arrival, prompt, output = request_columns(requests)
    n = arrival.shape[0]
    alone = np.zeros(n, dtype=REQUEST_DT)
    alone["prompt_tokens"], alone["output_tokens"] = prompt, output
    one = fleet.scaled(1)
    out = []
    for label, pol, slack in runs:
        gap = 60.0
        while True:
            alone["arrival_s"] = np.arange(n, dtype=np.float64) * gap
            f = simulate_fleet(alone, one.with_options(slack=slack), pol, router=DEFAULT_ROUTER).fleet
            if n < 2 or (f.finish_s[:-1] <= alone["arrival_s"][1:]).all():
                break
            gap *= 4.0
        att = slo_attainment(f, slo)["attainment"]
        missed = int(round((1.0 - att) * n))
        if missed:
            allowed = math.floor(n * (1.0 - target) + 1e-9)
            out.append(f"{label}: {missed} of {n} requests miss the SLO even alone on an idle replica (the target "
                       f"allows {allowed}); no fleet size serves them in time")
    return out


def _executor(executor) -> tuple:
    """``(executor, owned)``: the caller's running :class:`Executor` (not ``owned``: left open), or
    the one a kind or an :class:`ExecutorChoice` asks for, started here and closed by the search."""
    if isinstance(executor, Executor):
        return executor, False
    choice = executor if isinstance(executor, ExecutorChoice) else ExecutorChoice(executor)
    try:
        return choice.start("specsim capacity"), True
    except ExecutorError as e:
        raise CapacityError(str(e)) from None


def _search_all(executor, requests, setup, runs, bounds, progress, resamples=()):
    """Every policy's search, advanced round by round on ``executor`` (:func:`_executor`'s, closed
    after when it started it here): each round runs the next probe of every unfinished search
    together. ``bounds``: ``(attainment target, most units)``. Returns ``({label: answer or None},
    {label: {units: Probe}})``."""
    ex, owned = _executor(executor)
    try:
        out = _rounds(ex, requests, setup, runs, bounds, progress, resamples)
    except BaseException:
        if owned:
            ex.close(abandoned=True)
        raise
    if owned:
        ex.close()
    return out


def _rounds(ex, requests, setup, runs, bounds, progress, resamples):
    """:func:`_search_all` on a running executor ``ex``."""
    target, max_units = bounds
    searches = {label: search_sizes(target, max_units) for label, _, _ in runs}
    pending = {label: next(gen) for label, gen in searches.items()}
    found, probes = {}, {label: {} for label, _, _ in runs}
    by_label = {run[0]: run for run in runs}
    # On Dask the trace, the setup (with the fleet) and the resampled traces travel once each.
    shared = (ex.share(requests), ex.share(setup), tuple(ex.share(r) for r in resamples))
    done = 0
    while pending:
        results = ex.map(run_probe, [(shared[0], shared[1], by_label[label], m, shared[2])
                                     for label, m in pending.items()])
        done += len(results)
        nxt = {}
        for probe in results:
            probes[probe.label][probe.units] = probe
            try:
                nxt[probe.label] = searches[probe.label].send(probe.interval)
            except StopIteration as stop:
                found[probe.label] = stop.value[0]
        pending = nxt
        if progress is not None:
            progress(done, {k: _bracket(probes[k], target, setup.fleet.replicas) for k in pending})
    return found, probes


def _bracket(probes, target, unit):
    """``(replicas that missed, replicas that met)``: the tightest pair probed so far."""
    met = [m for m, p in probes.items() if p.interval[0] >= target]
    hi = min(met) if met else None
    lo = max([m for m, p in probes.items() if p.interval[0] < target and (hi is None or m < hi)] or [0])
    return lo * unit, None if hi is None else hi * unit


def _runs(policies, slack, read_policy):
    """``(label, policy, slack)`` per policy, plain decoding first and once."""
    try:
        slack = check_slack(slack)
    except Exception as e:
        raise CapacityError(str(e)) from None
    out = []
    for text in [PLAIN] + [p for p in policies]:
        pol = read_policy(text)
        label = pol.at_slack(slack)
        if label not in [r[0] for r in out]:
            out.append((label, pol, slack if pol.slack is None else pol.slack))
    return out


def _answer(label, units, probes, target, price, includes=None) -> PolicyCapacity:
    p = probes[units]
    tokens = max(p.output_tokens, 1)
    gpu_hours = p.gpus * p.makespan_s / 3600.0 / tokens * 1e6
    above = probes.get(units + 1)
    tokens_per_s, j_per_token = run_rates(p.output_tokens, p.makespan_s, p.energy_j)
    return PolicyCapacity(
        label=label, replicas=p.replicas, gpus=p.gpus, units=units, attainment=p.attainment,
        tokens_per_s_per_gpu=None if tokens_per_s is None else tokens_per_s / p.gpus,
        j_per_token=j_per_token, gpu_hours_per_mtok=gpu_hours,
        usd_per_mtok=None if price is None else gpu_hours * price,
        monotone_at_boundary=None if above is None else above.interval[0] >= target,
        attainment_low=p.interval[0], attainment_high=p.interval[1],
        interval_includes=includes, window_half_width=p.window_half_width if includes else None,
        probes=tuple(probes[m] for m in sorted(probes)),
    )


def _with_saving(a: PolicyCapacity, plain: PolicyCapacity) -> PolicyCapacity:
    return replace(a, gpu_saving=1.0 - a.gpus / plain.gpus,
                   energy_saving=1.0 - a.j_per_token / plain.j_per_token if plain.j_per_token else None)


def progress_line(stream=None, enabled=True):
    """A ``progress`` callback for :func:`capacity` that prints one line per search round."""
    stream = stream or sys.stderr

    def show(done, searching):
        if not enabled:
            return
        parts = [f"{k} {lo}<R<={'?' if hi is None else hi}" for k, (lo, hi) in searching.items()]
        stream.write(f"capacity: {done} probes; searching: {', '.join(parts) or 'done'}\n")
        stream.flush()

    return show
