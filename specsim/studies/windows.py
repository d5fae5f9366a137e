"""Time windows of a request trace: cut it into contiguous windows of equal request counts
(:func:`window_bounds`; ``tune``'s noise windows), and build resampled traces from them for
``capacity``'s window resampling (:func:`resample_windows`, :func:`widened`; docs/fleets.md,
"Window resampling").

Draft-outcome seeds measure one source of noise; the trace is another: an hour like this one but
not this one would give another attainment. With ``window_resamples=N, windows=W`` the trace is
cut into ``W`` contiguous time windows holding equal numbers of requests (one more in the first
``n mod W``), and ``N`` resampled traces are built by drawing ``W`` windows with replacement
(a generator seeded by the fleet's first draft-outcome seed, so the same call builds the same
traces) and laying them back to back: each window keeps its arrivals' gaps, and the next one
starts where this one's span (to the first arrival of the window after it in the trace; for
the last window, its last arrival plus the trace's mean gap) ends. Every probe then runs on the
trace and on each resample, under every seed. Its attainment stays the trace's own (pooled over
seeds), and its interval is widened: with ``a_1..a_N`` the per-resample attainments (each
pooled over seeds), ``h = t95(N - 1) * sd(a_1..a_N)`` (the spread one trace's attainment has
across traces like it), and Wilson's interval over seeds ``[lo, hi]`` around the point ``p``,
the interval is ``[p - sqrt((p - lo)^2 + h^2), p + sqrt((hi - p)^2 + h^2)]``, clipped to
``[0, 1]``: never narrower than Wilson's interval over seeds.
"""

from __future__ import annotations

import math

import numpy as np

from specsim._stats import t95
from specsim.sim.engine import request_columns
from specsim.traces._types import REQUEST_DT


def widened(point, interval, shares) -> tuple:
    """``(h, (low, high))``: Wilson's interval over seeds ``interval`` around ``point`` widened by the spread of
    the per-resample attainments ``shares`` (two or more), ``h = t95(N - 1) * sd(shares)``, added
    in quadrature to each side and clipped to ``[0, 1]`` (module docstring)."""
    a = np.asarray(shares, dtype=np.float64)
    h = float(t95(a.shape[0] - 1) * a.std(ddof=1))
    lo, hi = (point, point) if interval[0] is None else interval
    if h == 0.0:
        return h, (lo, hi)
    low = point - math.sqrt((point - lo) ** 2 + h * h)
    high = point + math.sqrt((hi - point) ** 2 + h * h)
    return h, (max(0.0, min(lo, low)), min(1.0, max(hi, high)))


def resample_windows(requests, resamples: int, windows: int, seed: int) -> tuple:
    """``resamples`` traces built from ``requests`` by drawing ``windows`` of its contiguous time
    windows with replacement and laying them back to back (module docstring); deterministic for
    a ``seed``. Each keeps the trace's first arrival time."""
    arrival, prompt, output = request_columns(requests)
    n = arrival.shape[0]
    reqs = np.zeros(n, dtype=REQUEST_DT)
    reqs["arrival_s"], reqs["prompt_tokens"], reqs["output_tokens"] = arrival, prompt, output
    t = reqs["arrival_s"]
    bounds = window_bounds(n, windows)
    mean_gap = float(t[-1] - t[0]) / (n - 1) if n > 1 else 0.0
    starts = [float(t[bounds[j]]) for j in range(windows)]
    ends = starts[1:] + [float(t[-1]) + mean_gap]
    rng = np.random.default_rng([int(seed) % (1 << 64), windows, resamples])
    out = []
    for _ in range(resamples):
        parts, at = [], float(t[0])
        for j in rng.integers(0, windows, size=windows):
            part = reqs[bounds[j]:bounds[j + 1]].copy()
            part["arrival_s"] = at + (part["arrival_s"] - starts[j])
            parts.append(part)
            at += ends[j] - starts[j]
        out.append(np.ascontiguousarray(np.concatenate(parts)))
    return tuple(out)


def window_bounds(n: int, windows: int) -> list:
    """Where ``windows`` contiguous windows of ``n`` time-sorted requests start, and ``n`` last:
    equal numbers of requests, one more in each of the first ``n mod windows``."""
    return [i * (n // windows) + min(i, n % windows) for i in range(windows + 1)]
