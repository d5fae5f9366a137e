"""Fitting an acceptance calibration from a serve's counts (docs/calibration.md#fitting).

The fit itself runs on a handful of integers (per-bucket counts and a step histogram), so it is
plain Python on Python ints: totals never overflow and every probability is the correctly rounded
float64 quotient of two exact integer totals. Binning raw logs into those counts is the part that
sees millions of rows; it lives in :mod:`specsim.calibration.logs` and runs in Numba.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass
from pathlib import Path

from specsim import _toml
from specsim._checks import COUNT_MAX, MAX_DEPTH, is_number, show
from specsim._io import loads_json, read_input
from specsim.calibration._types import DrafterKey, FitCounts, PositionPrior, Pool
from specsim.calibration.calibration import AcceptanceCalibration, conditional_priors
from specsim.errors import CalibrationError

MIN_OUTCOMES = 100
"""Reached drafts a pool (and reached steps a position prior) needs: 100 observations bound a
fitted probability's binomial standard error by 0.05 at any rate (docs/calibration.md#fitting)."""

DEFAULT_EDGES = (-4.0, -2.0, -1.0, -0.5, -0.25, -0.1, -0.05, -0.02, -0.005, 0.0)
"""Bucket edges used when raw logs are binned and none are given (docs/calibration.md#fitting)."""

_MAX_LISTED = 12  # problems listed individually before "... and N more"


@dataclass(frozen=True)
class CalibrationFit:
    """A fitted calibration with everything a reliability report needs.

    Attributes
    ----------
    calibration : AcceptanceCalibration
    counts : FitCounts
        The counts it was fitted from.
    pools : tuple of Pool
        From the most confident pool down; together they cover every bucket once.
    positions : tuple of PositionPrior
        One per fitted prior, position 1 first.
    stop : PositionPrior or None
        The first position with fewer than ``MIN_OUTCOMES`` reached steps, where priors stop
        (None when every position up to the deepest step was fitted).
    """

    calibration: AcceptanceCalibration
    counts: FitCounts
    pools: tuple
    positions: tuple
    stop: PositionPrior | None


def fit_calibration(drafter: DrafterKey, edges, accepted, rejected, steps) -> AcceptanceCalibration:
    """Fit an acceptance calibration from a serve's counts, exactly as docs/calibration.md#fitting says.

    Parameters
    ----------
    drafter : DrafterKey
        The drafter the counts were observed on.
    edges : sequence of float, length B
        Ascending log-probability upper bounds; the last >= 0.
    accepted, rejected : sequence of int, length B
        Reached drafts per bucket that were accepted / rejected.
    steps : mapping
        ``(drafts d, accepted a) -> count`` of verify steps, ``0 <= a <= d``.

    Returns
    -------
    AcceptanceCalibration

    Raises
    ------
    CalibrationError
        Counts of the wrong shape or value (listing each), no pool reaching ``MIN_OUTCOMES``
        reached drafts, or no position with ``MIN_OUTCOMES`` reached steps.
    """
    return fit_counts(drafter, make_counts(edges, accepted, rejected, steps)).calibration


def make_counts(edges, accepted, rejected, steps, nonfinite=0, unreached=0, source="<counts>") -> FitCounts:
    """Validate raw counts into a :class:`FitCounts`, listing every problem.

    Counts must be non-negative integers (an integral float such as ``3.0`` is taken as 3);
    ``edges``, ``accepted`` and ``rejected`` must have one entry per bucket, at least one.
    """
    problems = []
    edges = _sequence(edges, "edges", problems)
    accepted = _sequence(accepted, "accepted", problems)
    rejected = _sequence(rejected, "rejected", problems)
    if edges is not None and not edges:
        problems.append("there are no edges: give at least one bucket edge (the last >= 0)")
    if None not in (edges, accepted, rejected) and not len(edges) == len(accepted) == len(rejected):
        problems.append(
            f"edges, accepted and rejected have different lengths ({len(edges)}, {len(accepted)} and "
            f"{len(rejected)}): give one entry per bucket"
        )
    if edges is not None:
        bad = [i for i, e in enumerate(edges)
               if not is_number(e) or math.isnan(float(e))]
        problems += [f"edges[{i}] = {edges[i]!r} is not a number" for i in bad]
        edges = None if bad else tuple(float(e) for e in edges)
    accepted = _counts(accepted, "accepted", problems)
    rejected = _counts(rejected, "rejected", problems)
    steps = _steps(steps, problems)
    for name, value in (("nonfinite", nonfinite), ("unreached", unreached)):
        if _count(value) is None:
            problems.append(f"{name} = {value!r} is not a non-negative integer count")
    if problems:
        raise CalibrationError(f"{source}: the counts cannot be fitted", _capped(problems))
    return FitCounts(edges, accepted, rejected, steps, _count(nonfinite), _count(unreached), source)


def fit_counts(drafter: DrafterKey, counts: FitCounts) -> CalibrationFit:
    """Fit validated counts (docs/calibration.md#fitting) and keep the pools and positions for a report.

    Raises
    ------
    CalibrationError
        When no pool closes (naming the reached drafts there were) or no prior can be fitted
        (naming position 1's reached steps); both are listed when both fail.
    """
    problems = []
    pools = pool_buckets(counts.accepted, counts.rejected)
    if not pools:
        problems.append(
            f"no pool of buckets reaches {MIN_OUTCOMES} reached drafts: there are {counts.reached} reached "
            f"drafts in all {len(counts.edges)} buckets together (accepted + rejected); log more steps"
        )
    positions, stop = position_priors(counts.steps)
    if not positions:
        reached = 0 if stop is None else stop.reached
        problems.append(
            f"no position prior can be fitted: position 1 has {reached} reached steps (steps with at least "
            f"one draft), fewer than {MIN_OUTCOMES}; log more steps"
        )
    if problems:
        raise CalibrationError(f"{counts.source}: cannot fit an acceptance calibration (docs/calibration.md#fitting)", problems)
    p_accept = [0.0] * len(counts.edges)
    for pool in pools:
        for i in range(pool.first, pool.last + 1):
            p_accept[i] = pool.rate
    meta = {
        "fitted_by": "specsim",
        "reached_drafts": counts.reached,
        "steps": counts.step_count,
        "pools": len(pools),
    }
    cal = AcceptanceCalibration(
        drafter, counts.edges, p_accept, [p.prior for p in positions], meta=meta, source=counts.source
    )
    return CalibrationFit(cal, counts, tuple(pools), tuple(positions), stop)


def pool_buckets(accepted, rejected):
    """Pools of buckets per docs/calibration.md#fitting, the most confident first.

    Walk from the last bucket down, adding each to an open pool that closes once it holds at
    least ``MIN_OUTCOMES`` reached drafts; a low-end remainder that never gets there joins the
    last pool closed. Returns an empty list when no pool closes.
    """
    pools = []
    acc = reached = 0
    last = len(accepted) - 1
    for i in range(len(accepted) - 1, -1, -1):
        acc += accepted[i]
        reached += accepted[i] + rejected[i]
        if reached >= MIN_OUTCOMES:
            pools.append(Pool(i, last, acc, reached))
            acc = reached = 0
            last = i - 1
    if pools and last >= 0:
        low = pools[-1]
        pools[-1] = Pool(0, low.last, low.accepted + acc, low.reached + reached)
    return pools


def position_counts(steps):
    """``(j, accepted, reached)`` for every position ``j`` up to the deepest step's drafts:
    ``reached = #steps with d >= j and a >= j - 1``, ``accepted`` those with ``a >= j``."""
    depth = max((d for (d, _), c in steps.items() if c > 0), default=0)
    for j in range(1, depth + 1):
        reached = accepted = 0
        for (d, a), c in steps.items():
            if d >= j and a >= j - 1:
                reached += c
                if a >= j:
                    accepted += c
        yield j, accepted, reached


def position_priors(steps):
    """Per-position priors per docs/calibration.md#fitting and the position where they stop.

    For ``j = 1, 2, ..``: ``reached = #steps with d >= j and a >= j - 1``; the first ``j`` with
    fewer than ``MIN_OUTCOMES`` stops the walk; ``prior(j) = #steps with d >= j and a >= j /
    reached``. Returns ``(positions, stop)``; ``stop`` is None when every position up to the
    deepest step was fitted.
    """
    positions = []
    for j, accepted, reached in position_counts(steps):
        if reached < MIN_OUTCOMES:
            return positions, PositionPrior(j, accepted, reached)
        positions.append(PositionPrior(j, accepted, reached))
    if not positions:  # no step drafted anything: position 1 was reached by none
        return positions, PositionPrior(1, 0, 0)
    return positions, None


# -- other sources of counts ----------------------------------------------------------------
def steps_from_windows(windows, source="<windows>"):
    """A step histogram from accept-run histograms such as a serve's windowed counters.

    Parameters
    ----------
    windows : sequence of sequence of int
        Each row counts steps at ``k = len(row) - 1`` drafts by accepted run, from ``k``
        accepted down to 0 (rejected at the first draft): ``[accepted k, .., accepted 1,
        rejected]``. All rows must have the same length; rows are summed.

    Returns
    -------
    dict
        ``(k, a) -> count``.
    """
    rows = list(windows) if isinstance(windows, (list, tuple)) else None
    if not rows:
        raise CalibrationError(f"{source}: there are no windows (rows of step counts by accepted run)")
    problems = []
    width = None
    for r, row in enumerate(rows):
        if not isinstance(row, (list, tuple)) or len(row) < 2:
            problems.append(f"window {r} is {show(row)}, not a list of at least 2 counts [accepted k, .., rejected]")
            continue
        if len(row) > MAX_DEPTH + 1:
            problems.append(f"window {r} has {len(row):,} counts: depth {len(row) - 1:,} is beyond the deepest draft "
                            f"depth, {MAX_DEPTH:,} (docs/limits.md)")
            continue
        if width is None:
            width = len(row)
        elif len(row) != width:
            problems.append(f"window {r} has {len(row)} counts, window 0 has {width}: every window needs k + 1")
        for i, c in enumerate(row):
            if _count(c) is None:
                problems.append(f"window {r} count {i} = {show(c)} is not a non-negative integer count")
    if problems:
        raise CalibrationError(f"{source}: the windows cannot be read", _capped(problems))
    k = width - 1
    steps = {}
    for row in rows:
        for i, c in enumerate(row):
            steps[(k, k - i)] = steps.get((k, k - i), 0) + _count(c)
    return steps


def counts_from_steps(steps, edge: float = 0.0, nonfinite=0, source="<steps>") -> FitCounts:
    """One-bucket counts from a step histogram alone, for a calibration that ignores confidence.

    A step ``(d, a)`` reached ``a`` accepted drafts plus, when ``a < d``, the one rejected draft
    that ended its chain; the single bucket (upper edge ``edge``, so every log-probability lands
    in it) takes all of them.
    """
    steps = make_counts([edge], [0], [0], steps, source=source).steps
    accepted = sum(a * c for (_, a), c in steps.items())
    rejected = sum(c for (d, a), c in steps.items() if a < d)
    return FitCounts((float(edge),), (accepted,), (rejected,), steps, nonfinite, 0, source)


def calibration_from_rates(drafter: DrafterKey, rates, form: str = "marginal", edge: float = 0.0):
    """A one-bucket calibration from per-position acceptance rates a serve reports (docs/calibration.md#queries).

    Parameters
    ----------
    rates : sequence of float, length K
        Marginal (``P(draft j accepted)``, as vLLM reports) or conditional rates, position 1 first.
    form : {"marginal", "conditional"}

    Returns
    -------
    AcceptanceCalibration
        Priors are the conditional rates. The one bucket's probability is the rate per reached
        draft of a chain of ``K`` drafts, ``sum_j M_j / sum_j M_(j-1)`` with ``M_j`` the product
        of the first ``j`` conditional rates and ``M_0 = 1``: what a one-bucket fit of steps at
        depth ``K`` with these rates would give.
    """
    priors = conditional_priors(rates, form)
    run, accepted, reached = 1.0, 0.0, 0.0
    for c in priors:
        reached += run
        run *= c
        accepted += run
    meta = {"fitted_by": "specsim", "rates_form": form, "rates": [float(r) for r in rates]}
    return AcceptanceCalibration(drafter, [edge], [accepted / reached], priors, meta=meta, source="<rates>")


# -- the counts file ------------------------------------------------------------------------
COUNTS_FORMAT = """\
A counts file (TOML, or JSON when it ends in .json) holds what a calibration is fitted from:
  edges = [-1.0, -0.1, 0.0]          # ascending bucket upper bounds (log-prob), the last >= 0
  accepted = [12, 80, 400]           # reached drafts per bucket the target accepted
  rejected = [40, 60, 50]            # reached drafts per bucket the target rejected
  steps = [[3, 3, 160], [3, 0, 40]]  # [drafts d, accepted run a, count] per verify step kind
  nonfinite = 0                      # optional: reached drafts with NaN/inf confidence (not binned)
  unreached = 0                      # optional: logged drafts after a rejection (not reached)
Each (d, a) pair appears once, 0 <= a <= d; counts are non-negative integers."""


def load_counts(path) -> FitCounts:
    """Read a counts file (format: :data:`COUNTS_FORMAT`) into validated :class:`FitCounts`."""
    path = Path(path)
    raw = read_input(path, "the counts file", CalibrationError)
    return parse_counts(raw, str(path), json_format=path.suffix.lower() == ".json")


def parse_counts(text, source="<counts>", json_format=False) -> FitCounts:
    """Parse counts text (TOML, or JSON with ``json_format``), listing every problem."""
    if json_format:
        doc = loads_json(text, "the counts file", source, CalibrationError)
    else:
        doc = _toml.loads(text, "the counts file", source, CalibrationError)
    if not isinstance(doc, dict):
        raise CalibrationError(f"{source}: the counts file is a {_toml.type_name(doc)}, not a table\n{COUNTS_FORMAT}")
    missing = [k for k in ("edges", "accepted", "rejected", "steps") if k not in doc]
    if missing:
        raise CalibrationError(f"{source}: the counts file has no {', '.join(missing)}\n{COUNTS_FORMAT}")
    problems = []
    steps = {}
    if not isinstance(doc["steps"], list):
        problems.append(f"steps is a {_toml.type_name(doc['steps'])}, not an array of [drafts, accepted, count]")
    else:
        for i, item in enumerate(doc["steps"]):
            if not isinstance(item, list) or len(item) != 3:
                problems.append(f"steps[{i}] = {item!r} is not [drafts, accepted, count]")
                continue
            d, a, c = item
            if _count(d) is None or _count(a) is None:
                problems.append(f"steps[{i}] = {item!r}: drafts and accepted must be non-negative integers")
                continue
            if (_count(d), _count(a)) in steps:
                problems.append(f"steps[{i}] repeats (drafts {d}, accepted {a}): give each pair once")
                continue
            steps[(_count(d), _count(a))] = c
    if problems:
        raise CalibrationError(f"{source}: the counts file cannot be read", _capped(problems))
    return make_counts(
        doc["edges"], doc["accepted"], doc["rejected"], steps,
        doc.get("nonfinite", 0), doc.get("unreached", 0), source,
    )


def check_count_sizes(counts: FitCounts) -> FitCounts:
    """Refuse counts whose sums pass 2**62 (docs/limits.md): no log holds that many, and the
    calibration file, whose integers are 64-bit, could not record them. The fit itself is exact
    on any Python int; this is the check for counts read from files."""
    totals = {"accepted and rejected drafts": sum(counts.accepted) + sum(counts.rejected),
              "verify steps": sum(counts.steps.values()),
              "drafts the verify steps reached": sum((a + (a < d)) * c for (d, a), c in counts.steps.items())}
    problems = [f"the {name} add up to {total:.3g}, beyond 2**62: no log holds that many (docs/limits.md)"
                for name, total in totals.items() if total > COUNT_MAX]
    if problems:
        raise CalibrationError(f"{counts.source}: the counts cannot be fitted", problems)
    return counts


def render_counts(counts: FitCounts) -> str:
    """Counts as a TOML counts file that :func:`parse_counts` reads back equal."""
    steps = ", ".join(f"[{d}, {a}, {c}]" for (d, a), c in sorted(counts.steps.items()))
    return "\n".join([
        "# specsim calibration counts (docs/calibration.md#fitting): reached drafts per bucket, verify steps by (drafts, accepted)",
        "edges = [" + ", ".join(_toml.number(float(e)) for e in counts.edges) + "]",
        "accepted = [" + ", ".join(str(c) for c in counts.accepted) + "]",
        "rejected = [" + ", ".join(str(c) for c in counts.rejected) + "]",
        f"steps = [{steps}]",
        f"nonfinite = {counts.nonfinite}",
        f"unreached = {counts.unreached}",
    ]) + "\n"


# -- validation helpers -------------------------------------------------------------------
def _count(value):
    """``value`` as a non-negative Python int, or None when it is not one."""
    if isinstance(value, bool):
        return None
    if isinstance(value, numbers.Integral):
        return int(value) if value >= 0 else None
    if isinstance(value, numbers.Real):
        v = float(value)
        return int(v) if math.isfinite(v) and v.is_integer() and v >= 0 else None
    return None


def _sequence(value, name, problems):
    if isinstance(value, (str, bytes, dict)) or value is None:
        problems.append(f"{name} is {value!r}, not a sequence with one entry per bucket")
        return None
    try:
        return list(value)
    except TypeError:
        problems.append(f"{name} is a {type(value).__name__}, not a sequence with one entry per bucket")
        return None


def _counts(values, name, problems):
    if values is None:
        return None
    out = []
    for i, v in enumerate(values):
        c = _count(v)
        if c is None:
            problems.append(f"{name}[{i}] = {v!r} is not a non-negative integer count")
        out.append(c)
    return tuple(out)


def _steps(steps, problems):
    if not hasattr(steps, "items"):
        problems.append(f"steps is a {type(steps).__name__}, not a mapping (drafts, accepted) -> count")
        return {}
    out = {}
    for key, c in steps.items():
        if not isinstance(key, tuple) or len(key) != 2 or _count(key[0]) is None or _count(key[1]) is None:
            problems.append(f"steps key {key!r} is not a pair (drafts, accepted) of non-negative integers")
            continue
        d, a = _count(key[0]), _count(key[1])
        if d > MAX_DEPTH:
            problems.append(f"steps ({d}, {a}): {d:,} drafts is beyond the deepest draft depth, {MAX_DEPTH:,} "
                            "(docs/limits.md)")
            continue
        if a > d:
            problems.append(f"steps ({d}, {a}) -> {c!r}: accepted {a} > drafts {d}")
        if _count(c) is None:
            problems.append(f"steps ({d}, {a}) -> {c!r}: the count is not a non-negative integer")
            continue
        if (d, a) in out:
            problems.append(f"steps ({d}, {a}) appears twice")
            continue
        out[(d, a)] = _count(c)
    return out


def _capped(problems):
    if len(problems) <= _MAX_LISTED:
        return problems
    return problems[:_MAX_LISTED] + [f"... and {len(problems) - _MAX_LISTED} more"]
