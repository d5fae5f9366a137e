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

The module is named ``sizing`` so that ``specsim.capacity`` stays the function.

Probes of all policies in one round of the search run together: on a Dask cluster (local by
default when ``dask.distributed`` is installed) or serially in this process.
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass, field

from specsim.errors import SimulationError
from specsim.sim.result import percentile
from specsim.sim.slo import as_slo

PLAIN = "fixed:0"
DEFAULT_MAX_REPLICAS = 1024
DEFAULT_ROUTER = "least_outstanding"
# The share of requests that must meet the SLO where the SLO names none.
DEFAULT_ATTAINMENT = 0.99


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

    def to_dict(self) -> dict:
        return dict(self.__dict__)


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
    probes: tuple = ()

    def to_dict(self) -> dict:
        out = {k: v for k, v in self.__dict__.items() if k != "probes"}
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

    def policy(self, label) -> PolicyCapacity:
        for p in self.policies:
            if p.label == label:
                return p
        raise KeyError(label)

    def to_dict(self) -> dict:
        return {
            "target_attainment": self.target, "slo": {"ttft_s": self.slo_ttft_s, "tpot_s": self.slo_tpot_s},
            "router": self.router, "unit": {"replicas": self.unit_replicas, "gpus": self.unit_gpus,
                                            "groups": self.fleet},
            "max_units": self.max_units, "gpu_hour_usd": self.gpu_hour_usd,
            "policies": [p.to_dict() for p in self.policies],
        }

    def to_frame(self):
        """One row per policy (pandas): the answer and its costs."""
        from specsim.frames import rows_frame

        return rows_frame([{k: v for k, v in p.to_dict().items() if k != "probes"} for p in self.policies])

    def probes_frame(self):
        """One row per probe (pandas): policy, fleet size, attainment and costs."""
        from specsim.frames import rows_frame

        return rows_frame([p.to_dict() for pc in self.policies for p in pc.probes])


# -- one probe ---------------------------------------------------------------------------------------

def run_probe(requests, fleet, policy, slack, units, router, slo_ttft_s, slo_tpot_s, label) -> Probe:
    """Simulate ``units`` copies of ``fleet`` with one policy; a plain function, so that a Dask
    worker can run it."""
    from specsim.sim.fleet import simulate_fleet
    from specsim.sim.metrics import overload, slo_attainment

    sized = fleet.scaled(units).with_options(slack=slack)
    res = simulate_fleet(requests, sized, policy, router=router)
    f = res.fleet
    att = slo_attainment(f, slo_ttft_s, slo_tpot_s)["attainment"]
    over = overload(f)
    return Probe(label, units, sized.replicas, sized.gpus, float(att if att is not None else 1.0),
                 int(f.output_tokens.sum()), res.makespan_s, float(f.energy_j), percentile(f.ttft_s, 99),
                 percentile(f.tpot_s, 99), over["flag"], over["growth"])


# -- the search ---------------------------------------------------------------------------------------

def search_sizes(target, max_units):
    """The galloping-then-bisection search as a generator: it yields a fleet size to probe and is
    sent that size's attainment; it returns ``(answer or None, probed {size: attainment})``.

    After the answer ``m`` is found, ``m + 1`` (within the cap) is probed once more, for the
    boundary check.
    """
    seen = {}
    lo, hi, m = 0, None, 1
    while hi is None:
        seen[m] = yield m
        if seen[m] >= target:
            hi = m
        elif m >= max_units:
            return None, seen
        else:
            lo = m
            m = min(2 * m, max_units)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        seen[mid] = yield mid
        if seen[mid] >= target:
            hi = mid
        else:
            lo = mid
    if hi + 1 <= max_units and hi + 1 not in seen:
        seen[hi + 1] = yield hi + 1
    return hi, seen


def capacity(requests, table=None, calibration=None, policies=("fixed:0", "propose", "sequence"), *, fleet=None,
             slack=0.0, slo=None, router=DEFAULT_ROUTER,
             max_replicas=DEFAULT_MAX_REPLICAS, gpu_hour_usd=None, options=None, runner=None,
             progress=None) -> CapacityResult:
    """The fewest replicas per policy whose SLO attainment meets ``slo.attainment``.

    A pure function of its inputs (the search and every probe are deterministic).

    Parameters
    ----------
    requests : ndarray(REQUEST_DT, ndim=1) or TraceRead
    table, calibration : CostTable, AcceptanceCalibration
        One replica's; or give ``fleet``.
    policies : sequence of str
        Policies to size; plain decoding (``fixed:0``) is always sized too, as the baseline of
        the savings.
    fleet : Fleet, optional
        A fleet whose groups form the unit the search multiplies (``4 x H200 + 2 x B200`` ->
        6, 12, 18, ... replicas).
    slack : float
        Planner slack of ``propose`` and ``sequence``.
    slo : SLO
        The targets (at least one) and the fraction of requests that must meet both
        (default :data:`DEFAULT_ATTAINMENT`, 0.99).
    router : str
    max_replicas : int
        Cap on replicas (units times the unit's replicas).
    gpu_hour_usd : float, optional
        Price of a GPU-hour, for dollars per million tokens.
    options : ServerOptions, optional
        Server options of a table-and-calibration unit.
    runner : callable, optional
        ``runner(list of probe argument tuples) -> list of Probe``: how a round's probes run
        (default :func:`serial_runner`; :class:`ThreadRunner` and :class:`DaskRunner` run them
        side by side).
    progress : callable, optional
        Called as ``progress(done_probes, searching)`` after every round, where ``searching`` maps
        each unfinished label to its current ``(missed, met)`` bracket.

    Returns
    -------
    CapacityResult

    Raises
    ------
    CapacityError
        When no fleet up to the cap meets the target for some policy (with its best attainment).
    """
    from specsim.sim.fleet import Fleet, check_router
    from specsim.interop import read_policy

    if fleet is None:
        if table is None or calibration is None:
            raise CapacityError("give a table and a calibration, or a fleet")
        fleet = Fleet.uniform(table, calibration, 1, options)
    elif table is not None or calibration is not None:
        raise CapacityError("give either a table and calibration or a fleet, not both")
    check_router(router)
    from specsim.sim.engine import _request_arrays

    if _request_arrays(requests)[0].shape[0] == 0:
        raise CapacityError("the trace holds no requests: every fleet meets any target on it, so there is "
                            "nothing to size; give a trace with requests")
    slo = as_slo(slo)
    if not slo.has_targets:
        raise CapacityError("give an SLO: a TTFT target, a TPOT target, or both (seconds)")
    attainment = slo.target(DEFAULT_ATTAINMENT)
    if gpu_hour_usd is not None and not (math.isfinite(gpu_hour_usd) and gpu_hour_usd >= 0):
        raise CapacityError(f"gpu_hour_usd = {gpu_hour_usd!r} must be a finite price >= 0")
    max_units = int(max_replicas) // fleet.replicas
    if max_units < 1:
        raise CapacityError(f"max_replicas = {max_replicas} is below one unit of the fleet ({fleet.replicas} "
                            "replicas); raise the cap")
    runs = _runs(policies, slack, read_policy)
    found, probes = _search_all(requests, fleet, runs, router, slo, attainment, max_units,
                                runner or serial_runner, progress)
    failed = [label for label, m in found.items() if m is None]
    if failed:
        problems = [f"{label}: best attainment {max(p.attainment for p in probes[label].values()):.4f} "
                    f"(at {max(probes[label].values(), key=lambda p: (p.attainment, -p.units)).replicas} replicas)"
                    for label in failed]
        raise CapacityError(f"no fleet of up to {max_units * fleet.replicas} replicas meets {attainment:g} SLO "
                            f"attainment for {', '.join(failed)}; raise the cap, relax the SLO or the target",
                            problems)
    answers = [_answer(label, found[label], probes[label], attainment, gpu_hour_usd) for label, _, _ in runs]
    plain = answers[0]
    answers = [_with_saving(a, plain) for a in answers]
    return CapacityResult(tuple(answers), float(attainment), slo.ttft_s, slo.tpot_s, router, fleet.replicas,
                          fleet.gpus, max_units, gpu_hour_usd, fleet.describe())


def _search_all(requests, fleet, runs, router, slo, target, max_units, runner, progress):
    """Every policy's search, advanced round by round: each round runs the next probe of every
    unfinished search together. Returns ``({label: answer or None}, {label: {units: Probe}})``."""
    searches = {label: search_sizes(target, max_units) for label, _, _ in runs}
    pending = {label: next(gen) for label, gen in searches.items()}
    found, probes = {}, {label: {} for label, _, _ in runs}
    by_label = {label: (pol, s) for label, pol, s in runs}
    done = 0
    while pending:
        args = [(requests, fleet, by_label[label][0], by_label[label][1], m, router, slo.ttft_s, slo.tpot_s, label)
                for label, m in pending.items()]
        results = runner(args)
        if not (isinstance(results, (list, tuple)) and len(results) == len(args)
                and all(isinstance(p, Probe) and p.label == a[-1] for p, a in zip(results, args))):
            from specsim._checks import show

            raise CapacityError(f"the runner answered {show(results)} for {len(args)} probes: a runner returns "
                                "one Probe per argument tuple, in their order (as serial_runner does)")
        done += len(results)
        nxt = {}
        for probe in results:
            probes[probe.label][probe.units] = probe
            try:
                nxt[probe.label] = searches[probe.label].send(probe.attainment)
            except StopIteration as stop:
                found[probe.label] = stop.value[0]
        pending = nxt
        if progress is not None:
            progress(done, {k: _bracket(probes[k], target, fleet.replicas) for k in pending})
    return found, probes


def _bracket(probes, target, unit):
    """``(replicas that missed, replicas that met)``: the tightest pair probed so far."""
    met = [m for m, p in probes.items() if p.attainment >= target]
    hi = min(met) if met else None
    lo = max([m for m, p in probes.items() if p.attainment < target and (hi is None or m < hi)] or [0])
    return lo * unit, None if hi is None else hi * unit


def _runs(policies, slack, read_policy):
    """``(label, policy, slack)`` per policy, plain decoding first and once."""
    from specsim.plan.planner import check_slack

    try:
        slack = check_slack(slack)
    except Exception as e:
        raise CapacityError(str(e)) from None
    out = []
    for text in [PLAIN] + [p for p in policies]:
        pol = read_policy(text)
        label = f"{pol}@{slack:g}" if pol.reads_slack else str(pol)
        if label not in [r[0] for r in out]:
            out.append((label, pol, slack))
    return out


def _answer(label, units, probes, target, price) -> PolicyCapacity:
    p = probes[units]
    tokens = max(p.output_tokens, 1)
    gpu_hours = p.gpus * p.makespan_s / 3600.0 / tokens * 1e6
    above = probes.get(units + 1)
    return PolicyCapacity(
        label=label, replicas=p.replicas, gpus=p.gpus, units=units, attainment=p.attainment,
        tokens_per_s_per_gpu=p.output_tokens / p.makespan_s / p.gpus if p.makespan_s > 0 else None,
        j_per_token=p.energy_j / tokens, gpu_hours_per_mtok=gpu_hours,
        usd_per_mtok=None if price is None else gpu_hours * price,
        monotone_at_boundary=None if above is None else above.attainment >= target,
        probes=tuple(probes[m] for m in sorted(probes)),
    )


def _with_saving(a: PolicyCapacity, plain: PolicyCapacity) -> PolicyCapacity:
    from dataclasses import replace

    return replace(a, gpu_saving=1.0 - a.gpus / plain.gpus,
                   energy_saving=1.0 - a.j_per_token / plain.j_per_token if plain.j_per_token else None)


# -- runners --------------------------------------------------------------------------------------------

def serial_runner(args) -> list:
    """Run a round's probes one after another in this process."""
    return [run_probe(*a) for a in args]


class ThreadRunner:
    """Run each round's probes on ``workers`` threads of this process (default: the CPU count).

    The engine's kernels release the GIL, so probes run in parallel without starting processes
    or shipping the trace; every probe has its own state, so threads share nothing they write.
    """

    def __init__(self, workers=None):
        from specsim._executor import Executor

        self.ex = Executor("threads", workers)
        self.workers = self.ex.workers

    def __call__(self, args) -> list:
        return self.ex.map(run_probe, args)


class DaskRunner:
    """Run each round's probes on a Dask cluster: ``scheduler`` (an address) or a local cluster
    of ``workers`` processes. The trace and fleet travel to each worker once. Use as a context
    manager; not for use from several threads at once."""

    def __init__(self, scheduler=None, workers=None):
        from specsim._executor import Executor, ExecutorError

        try:
            self.ex = Executor("dask", workers, scheduler)
        except ExecutorError as e:
            raise CapacityError(str(e)) from None

    def __call__(self, args) -> list:
        return self.ex.map(run_probe, [(self.ex.share(a[0]), self.ex.share(a[1]), *a[2:]) for a in args])

    def close(self, abandoned=False):
        self.ex.close(abandoned)

    def __enter__(self):
        return self

    def __exit__(self, kind, exc, tb):
        self.close(abandoned=kind is not None)
        return False


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
