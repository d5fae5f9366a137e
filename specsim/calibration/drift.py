"""Drift alarm: are a serve's live outcomes still those of the calibration it plans with?

Every pool of buckets (buckets of equal probability in the calibration) and every fitted draft
position is a stream of Bernoulli outcomes (a reached draft accepted or not) with a known
in-control rate ``p0``. Each stream runs a two-sided CUSUM (Page's cumulative sum of
log-likelihood ratios against ``p0`` moved by ``shift`` in log-odds, down and up). A CUSUM
restarts from 0 whenever the evidence turns against a change, so it reacts to a change however
late it comes, and the step its last excursion above 0 began estimates when the change started.
Why CUSUM rather than a windowed binomial test, the false-alarm rate and the detection delay
measured: ``docs/telemetry.md``, "Drift alarm".
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from specsim.errors import CalibrationError
from specsim._io import atomic_write_bytes

# The largest change in log-odds a drift monitor may be tuned to (see DriftSettings).
MAX_SHIFT_LOGODDS = 20.0


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
    """

    shift: float = 0.4
    threshold: float = 10.0
    min_rate: float = 1e-3
    max_rate: float = 1.0 - 1e-3

    def __post_init__(self):
        # Past 20 log-odds the alternative rate is 1 or 0 to double precision and its
        # log-likelihood ratios are infinite: no drift that large needs a tuned detector.
        if not (math.isfinite(self.shift) and 0 < self.shift <= MAX_SHIFT_LOGODDS):
            raise CalibrationError(f"drift shift {self.shift!r}: give a log-odds change > 0 and at most "
                                   f"{MAX_SHIFT_LOGODDS:g}")
        if not (math.isfinite(self.threshold) and self.threshold > 0):
            raise CalibrationError(f"drift threshold {self.threshold!r}: give a number > 0")


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
        Acceptances over outcomes of the stream since ``since_step`` (up to now).
    outcomes : int
        Outcomes since ``since_step``.
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
    """

    steps: int
    alarms: tuple
    streams: tuple
    statistics: np.ndarray
    settings: DriftSettings

    @property
    def drifted(self) -> bool:
        return bool(self.alarms)

    def first_alarm_step(self):
        """The step of the earliest alarm, or None."""
        return min((a.alarm_step for a in self.alarms), default=None)

    def format(self) -> str:
        """The verdict as text, one line per alarm."""
        if not self.alarms:
            worst = float(self.statistics.max()) if self.statistics.size else 0.0
            return (f"no drift in {self.steps} steps over {len(self.streams)} streams (largest statistic {worst:.2f} "
                    f"of threshold {self.settings.threshold:g})\n")
        lines = [f"DRIFT in {len(self.alarms)} of {2 * len(self.streams)} one-sided tests over {self.steps} steps:"]
        for a in self.alarms:
            lines.append(f"  {a.stream.label}: {a.direction}, calibrated {a.stream.rate:.3f}, observed "
                         f"{a.observed_rate:.3f} ({a.change:+.3f}) over {a.outcomes} outcomes since step {a.since_step}, "
                         f"alarm at step {a.alarm_step}")
        return "\n".join(lines) + "\n"

    def to_dict(self) -> dict:
        return {
            "steps": self.steps, "drifted": self.drifted, "threshold": self.settings.threshold,
            "shift": self.settings.shift,
            "alarms": [{"stream": a.stream.label, "kind": a.stream.kind, "direction": a.direction,
                        "calibrated_rate": a.stream.rate, "observed_rate": a.observed_rate, "change": a.change,
                        "outcomes": a.outcomes, "since_step": a.since_step, "alarm_step": a.alarm_step}
                       for a in self.alarms],
        }


def reference_streams(calibration, settings: DriftSettings):
    """The monitored streams of a calibration: its pools (runs of adjacent buckets with equal
    probability, lowest first), then its positions. Returns ``(streams, pool_of_bucket, llr)``.
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
    llr = np.empty((len(streams), 2, 2))
    for m, s in enumerate(streams):
        p0 = min(max(s.rate, settings.min_rate), settings.max_rate)
        lo = math.log(p0 / (1.0 - p0))
        for dr, sign in ((0, -1.0), (1, 1.0)):
            p1 = 1.0 / (1.0 + math.exp(-(lo + sign * settings.shift)))
            llr[m, dr, 1] = math.log(p1 / p0)
            llr[m, dr, 0] = math.log((1.0 - p1) / (1.0 - p0))
    return tuple(streams), pool_of_bucket, llr


def report(streams, mon_f, mon_i, steps, settings) -> DriftReport:
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
                alarms.append(DriftAlarm(s, name, int(mon_i[m, dr, START]), at, rate, n))
    alarms.sort(key=lambda a: (a.alarm_step, a.stream.kind, a.stream.first))
    return DriftReport(steps, tuple(alarms), tuple(streams), mon_f[:, :, STAT].copy(), settings)


def plot_drift(rep: DriftReport, history, path, title="") -> None:
    """Write a PNG of every stream's CUSUM statistic (the larger of down and up) over the steps,
    with the alarm threshold and the alarms marked."""
    import io

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
