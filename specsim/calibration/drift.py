"""Drift alarm: are a serve's live outcomes still those of the calibration it plans with?

Every pool of buckets (buckets of equal probability in the calibration) and every fitted draft
position is a stream of Bernoulli outcomes (a reached draft accepted or not) with a known
in-control rate ``p0``. Each stream runs a two-sided CUSUM (Page's cumulative sum of
log-likelihood ratios against ``p0`` moved by ``shift`` in log-odds, down and up). A CUSUM
restarts from 0 whenever the evidence turns against a change, so it reacts to a change however
late it comes, and the step its last excursion above 0 began estimates when the change started.
Why CUSUM rather than a windowed binomial test, the false-alarm rate and the detection delay
measured: ``docs/telemetry.md``, "Drift alarm".

Real traffic varies more than binomial chance from one logging interval to the next (the mix of
prompts moves). A calibration imported from interval telemetry records that spread per position
(:func:`estimate_dispersion`, Pearson's over-dispersion factor ``phi`` over the fitting data's
intervals, in its ``[meta]`` ``interval_dispersion``), and each position's log-likelihood ratios
are divided by its ``phi`` (the quasi-likelihood), which keeps the CUSUM's false-alarm rate at
the binomial one on traffic with that spread.
"""

from __future__ import annotations

import io
import math
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from specsim.errors import CalibrationError
from specsim import _toml
from specsim._checks import number_problem
from specsim._io import atomic_write_bytes

# The largest change in log-odds a drift monitor may be tuned to (see DriftSettings).
MAX_SHIFT_LOGODDS = 20.0
# Fewest intervals with outcomes at a position for its over-dispersion to be estimated.
MIN_DISPERSION_INTERVALS = 5
# The one-sided confidence of the recorded factor: the estimate's upper 90% bound, so a factor
# read low from few intervals does not bring the binomial monitor's false alarms back.
_Z90 = 1.2815515655446004
# Largest over-dispersion factor a calibration may record (variance 1,000 x binomial).
MAX_DISPERSION = 1000.0
# The calibration [meta] keys that carry the fitting data's between-interval over-dispersion.
DISPERSION_KEY, DISPERSION_INTERVALS_KEY = "interval_dispersion", "interval_dispersion_intervals"


@dataclass(frozen=True)
class DriftSettings:
    """Tuning of the drift monitor.

    Attributes
    ----------
    shift : float
        The change each CUSUM is tuned to detect fastest, in log-odds (0.4 moves 0.60 to 0.50
        or 0.69). Smaller changes are caught too, later.
    threshold : float
        Alarm when a statistic exceeds this (nats). Each one-sided CUSUM raises a false alarm
        within ``n`` in-control outcomes with probability at most ``n * exp(-threshold)``
        (Ville's inequality per start); the rate measured by simulation is far lower.
    min_rate, max_rate : float
        In-control rates are clamped to this range so a fitted 0 or 1 gives finite ratios.
    dispersion : float or None
        Between-interval over-dispersion factor (variance over the binomial's, >= 1) every
        stream's log-likelihood ratios are divided by. None (the default): each position's
        factor the calibration records (``[meta] interval_dispersion``, 1 where it records
        none); 1: the plain binomial CUSUM.
    """

    shift: float = 0.4
    threshold: float = 10.0
    min_rate: float = 1e-3
    max_rate: float = 1.0 - 1e-3
    dispersion: float = None

    def __post_init__(self):
        # Past 20 log-odds the alternative rate is 1 or 0 to double precision and its
        # log-likelihood ratios are infinite: no drift that large needs a tuned detector.
        if not (math.isfinite(self.shift) and 0 < self.shift <= MAX_SHIFT_LOGODDS):
            raise CalibrationError(f"drift shift {self.shift!r}: give a log-odds change > 0 and at most "
                                   f"{MAX_SHIFT_LOGODDS:g}")
        if not (math.isfinite(self.threshold) and self.threshold > 0):
            raise CalibrationError(f"drift threshold {self.threshold!r}: give a number > 0")
        if self.dispersion is not None:
            p = number_problem(self.dispersion, "drift dispersion", 1.0, MAX_DISPERSION)
            if p:
                raise CalibrationError(f"{p} (variance over the binomial's; 1 = none)")


class Stream(NamedTuple):
    """One monitored stream: ``kind`` "pool" (buckets ``first..=last``) or "position" (``first``
    = the 1-based position), and its in-control rate."""

    kind: str
    first: int
    last: int
    rate: float

    @property
    def label(self) -> str:
        if self.kind == "position":
            return f"position {self.first}"
        return f"pool of buckets {self.first}..{self.last}" if self.last > self.first else f"bucket {self.first}"


class DriftAlarm(NamedTuple):
    """A stream whose outcomes moved.

    Attributes
    ----------
    stream : Stream
    direction : {"down", "up"}
    since_step : int
        The step where the run of evidence that raised the alarm began (the change's estimate).
    alarm_step : int
        The step the alarm was raised.
    observed_rate : float
        Acceptances over outcomes of the stream from ``since_step`` to the alarm: above the
        calibrated rate for an ``up`` alarm, below it for a ``down`` one.
    outcomes : int
        Outcomes from ``since_step`` to the alarm.
    """

    stream: Stream
    direction: str
    since_step: int
    alarm_step: int
    observed_rate: float
    outcomes: int

    @property
    def change(self) -> float:
        """Observed minus calibrated rate."""
        return self.observed_rate - self.stream.rate

    def describe(self) -> str:
        """Which way the rate moved and by how much, in words."""
        verb = "fell" if self.direction == "down" else "rose"
        rel = f", {100 * self.change / self.stream.rate:+.0f}%" if self.stream.rate > 0 else ""
        return (f"{self.stream.label}: {self.direction}: acceptance {verb} from the calibrated {self.stream.rate:.3f} to "
                f"{self.observed_rate:.3f} ({self.change:+.3f}{rel}) over {self.outcomes} outcomes from step "
                f"{self.since_step} to the alarm at step {self.alarm_step}")


@dataclass(frozen=True)
class DriftReport:
    """What :meth:`OnlineCalibration.drift` returns.

    Attributes
    ----------
    steps : int
        Steps monitored.
    alarms : tuple of DriftAlarm
        In the order they were raised.
    streams : tuple of Stream
    statistics : ndarray(float64, ndim=2), shape (streams, 2)
        Current CUSUM statistics [down, up].
    settings : DriftSettings
    dispersion : tuple of float
        The over-dispersion factor each stream's ratios were divided by (1: none).
    """

    steps: int
    alarms: tuple
    streams: tuple
    statistics: np.ndarray
    settings: DriftSettings
    dispersion: tuple = ()

    @property
    def drifted(self) -> bool:
        return bool(self.alarms)

    def dispersion_note(self) -> str:
        """Which streams' ratios were divided by an over-dispersion factor, or ''."""
        wide = [f"{s.label} x{d:.2f}" for s, d in zip(self.streams, self.dispersion) if d > 1.0]
        if not wide:
            return ""
        return f"between-interval over-dispersion of the fitting data allowed for: {', '.join(wide)}\n"

    def format(self) -> str:
        """The verdict as text, one line per alarm."""
        note = self.dispersion_note()
        if not self.alarms:
            worst = float(self.statistics.max()) if self.statistics.size else 0.0
            return (f"no drift in {self.steps} steps over {len(self.streams)} streams (largest statistic {worst:.2f} "
                    f"of threshold {self.settings.threshold:g})\n" + note)
        lines = [f"DRIFT in {len(self.alarms)} of {2 * len(self.streams)} one-sided tests over {self.steps} steps:"]
        for a in self.alarms:
            lines.append(f"  {a.describe()}")
        return "\n".join(lines) + "\n" + note

    def to_dict(self) -> dict:
        return {
            "steps": self.steps, "drifted": self.drifted, "threshold": self.settings.threshold,
            "shift": self.settings.shift,
            "dispersion": {s.label: d for s, d in zip(self.streams, self.dispersion)},
            "alarms": [{"stream": a.stream.label, "kind": a.stream.kind, "direction": a.direction,
                        "calibrated_rate": a.stream.rate, "observed_rate": a.observed_rate, "change": a.change,
                        "relative_change": a.change / a.stream.rate if a.stream.rate > 0 else None,
                        "outcomes": a.outcomes, "since_step": a.since_step, "alarm_step": a.alarm_step,
                        "message": a.describe()}
                       for a in self.alarms],
        }


def reference_streams(calibration, settings: DriftSettings):
    """The monitored streams of a calibration: its pools (runs of adjacent buckets with equal
    probability, lowest first), then its positions. Returns ``(streams, pool_of_bucket, llr,
    dispersion)``: each stream's log-likelihood ratios are divided by its over-dispersion factor
    (:func:`stream_dispersion`).
    """
    p = calibration.p_accept
    pool_of_bucket = np.zeros(p.shape[0], dtype=np.int64)
    streams = []
    first = 0
    for b in range(1, p.shape[0] + 1):
        if b == p.shape[0] or p[b] != p[first]:
            pool_of_bucket[first:b] = len(streams)
            streams.append(Stream("pool", first, b - 1, float(p[first])))
            first = b
    for j, prior in enumerate(calibration.priors, 1):
        streams.append(Stream("position", j, j, float(prior)))
    dispersion = stream_dispersion(calibration, streams, settings)
    llr = np.empty((len(streams), 2, 2))
    for m, s in enumerate(streams):
        p0 = min(max(s.rate, settings.min_rate), settings.max_rate)
        lo = math.log(p0 / (1.0 - p0))
        for dr, sign in ((0, -1.0), (1, 1.0)):
            p1 = 1.0 / (1.0 + math.exp(-(lo + sign * settings.shift)))
            llr[m, dr, 1] = math.log(p1 / p0) / dispersion[m]
            llr[m, dr, 0] = math.log((1.0 - p1) / (1.0 - p0)) / dispersion[m]
    return tuple(streams), pool_of_bucket, llr, dispersion


def stream_dispersion(calibration, streams, settings: DriftSettings) -> tuple:
    """Each stream's over-dispersion factor: ``settings.dispersion`` when set, else the
    calibration's recorded factor for a position stream (1 for pools and unrecorded positions)."""
    if settings.dispersion is not None:
        return tuple(float(settings.dispersion) for _ in streams)
    recorded = recorded_dispersion(calibration)
    return tuple(recorded[s.first - 1] if s.kind == "position" and s.first <= len(recorded) else 1.0
                 for s in streams)


def recorded_dispersion(calibration) -> tuple:
    """The per-position factors a calibration's ``[meta]`` records (empty when none)."""
    problems = dispersion_problems(calibration.meta, int(calibration.priors.shape[0]))
    if problems:
        raise CalibrationError("the calibration's recorded over-dispersion is refused", problems)
    return tuple(float(v) for v in calibration.meta.get(DISPERSION_KEY, ()))


def dispersion_problems(meta: dict, positions: int) -> list:
    """What is wrong with the over-dispersion a calibration's ``[meta]`` records (none: ``[]``)."""
    raw = meta.get(DISPERSION_KEY)
    if raw is None:
        return []
    where = f"[meta] {DISPERSION_KEY}"
    if not isinstance(raw, list) or not raw:
        return [f"{where} = {_toml.show(raw)}: give a list of over-dispersion factors, one per position (numbers in "
                f"1..{MAX_DISPERSION:g}: variance over the binomial's, 1 = none), or remove it"]
    problems = [f"{where}: position {j} = {_toml.show(v)} must be a number in 1..{MAX_DISPERSION:g}"
                for j, v in enumerate(raw, 1) if number_problem(v, "x", 1.0, MAX_DISPERSION)]
    if len(raw) > positions:
        problems.append(f"{where}: {len(raw)} factors for {positions} fitted position(s)")
    return problems


def position_outcomes(batches, positions: int) -> np.ndarray:
    """Per interval (a batch: ``(drafts, accepted run) -> chains``) and position ``1..positions``
    the reached drafts and the accepted ones, ``int64[intervals, positions, 2]`` (as the monitor
    counts them: position ``j`` is reached by a chain with ``d >= j`` and ``a >= j - 1``)."""
    out = np.zeros((len(batches), positions, 2), dtype=np.int64)
    for i, b in enumerate(batches):
        for (d, a), c in b.items():
            for j in range(1, min(d, a + 1, positions) + 1):
                out[i, j - 1, 0] += c
                out[i, j - 1, 1] += c * (a >= j)
    return out


def estimate_dispersion(batches, positions: int) -> tuple:
    """Pearson's over-dispersion factor per position over the fitting data's intervals, at its
    upper 90% bound: ``X2 = sum_i (k_i - n_i p)^2 / (n_i p (1 - p))`` over the ``I`` intervals
    that reached it, with ``p`` the pooled rate, and ``phi = X2 / chi2_0.10(I - 1)`` (the
    chi-square quantile by Wilson and Hilferty's approximation; ``X2 / (I - 1)`` is the plain
    estimate, which a factor read from few intervals undershoots often enough to bring false
    alarms back), floored at 1 (no spread beyond binomial chance) and capped at
    :data:`MAX_DISPERSION`. A position reached in fewer than
    :data:`MIN_DISPERSION_INTERVALS` intervals, or at a pooled rate of 0 or 1, gets 1.

    Returns
    -------
    (tuple of float, int)
        The factors (one per position) and the number of intervals.
    """
    counts = position_outcomes(batches, positions)
    out = []
    for j in range(positions):
        n, k = counts[:, j, 0].astype(np.float64), counts[:, j, 1].astype(np.float64)
        keep = n > 0
        n, k = n[keep], k[keep]
        p = k.sum() / n.sum() if n.size else 0.0
        if n.size < MIN_DISPERSION_INTERVALS or not 0.0 < p < 1.0:
            out.append(1.0)
            continue
        chi2 = float((((k - n * p) ** 2) / (n * p * (1.0 - p))).sum())
        nu = n.size - 1
        low = nu * (1.0 - 2.0 / (9.0 * nu) - _Z90 * math.sqrt(2.0 / (9.0 * nu))) ** 3
        out.append(float(min(max(chi2 / low, 1.0), MAX_DISPERSION)))
    return tuple(out), len(batches)


def with_dispersion(calibration, batches):
    """``calibration`` with the fitting data's per-position over-dispersion (``batches``: its
    intervals, as :func:`specsim.calibration.from_telemetry.record_batches` gives them) in its
    ``[meta]``; unchanged when there are too few intervals to tell."""
    phi, intervals = estimate_dispersion(batches, int(calibration.priors.shape[0]))
    if intervals < MIN_DISPERSION_INTERVALS:
        return calibration
    meta = dict(calibration.meta)
    meta[DISPERSION_KEY] = [round(v, 6) for v in phi]
    meta[DISPERSION_INTERVALS_KEY] = intervals
    return type(calibration)(calibration.drafter, calibration.edges, calibration.p_accept, calibration.priors,
                             meta=meta, spread=calibration.spread)


def report(streams, mon_f, mon_i, steps, settings, dispersion=()) -> DriftReport:
    """A :class:`DriftReport` from a monitor's state (see ``OnlineBuffers``)."""
    # lazy: Numba loads with the first kernel call
    from specsim.calibration._online_kernels import ALARM, K_SINCE, N_SINCE, START, STAT

    alarms = []
    for m, s in enumerate(streams):
        for dr, name in ((0, "down"), (1, "up")):
            at = int(mon_i[m, dr, ALARM])
            if at >= 0:
                n = int(mon_f[m, dr, N_SINCE])
                rate = float(mon_f[m, dr, K_SINCE]) / n if n else float("nan")
                # The evidence that raised it puts the rate on the alarm's side of the (clamped)
                # calibrated one; at a calibrated 0 or 1 it cannot have moved further that way.
                if (rate > s.rate) if name == "up" else (rate < s.rate):
                    alarms.append(DriftAlarm(s, name, int(mon_i[m, dr, START]), at, rate, n))
    alarms.sort(key=lambda a: (a.alarm_step, a.stream.kind, a.stream.first))
    return DriftReport(steps, tuple(alarms), tuple(streams), mon_f[:, :, STAT].copy(), settings,
                       tuple(dispersion))


def plot_drift(rep: DriftReport, history, path, title="") -> None:
    """Write a PNG of every stream's CUSUM statistic (the larger of down and up) over the steps,
    with the alarm threshold and the alarms marked."""
    # optional (the plot extra): loaded only when a figure is drawn
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(9, 4.2))
    FigureCanvasAgg(fig)
    ax = fig.subplots()
    x = np.arange(history.shape[0])
    for m, s in enumerate(rep.streams):
        ax.plot(x, history[:, m], lw=1.2, label=s.label)
    ax.axhline(rep.settings.threshold, color="k", ls="--", lw=1, label=f"threshold {rep.settings.threshold:g}")
    for a in rep.alarms:
        ax.axvline(a.alarm_step, color="C3", lw=0.8, alpha=0.6)
        ax.axvspan(a.since_step, a.alarm_step, color="C3", alpha=0.08)
    ax.set(xlabel="step", ylabel="CUSUM statistic (nats)",
           title=title or ("drift: " + ("alarm" if rep.drifted else "none")))
    ax.legend(loc="upper left", fontsize=7, ncol=2)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110)
    atomic_write_bytes(path, buf.getvalue())
