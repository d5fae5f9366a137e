"""The figures of a run that every report, fleet and study reads: percentiles of per-request
times. One function computes them, so a p99 in a summary, a fleet row, a capacity probe and a
tuning score is the same number.
"""

from __future__ import annotations

import numpy as np

# The percentiles a summary reports for each per-request time.
PERCENTILES = (50, 90, 99)


def percentiles(values, qs=PERCENTILES) -> dict:
    """``{"p50": .., "p90": .., "p99": .., "mean": ..}`` of ``values`` with NaN left out (a
    one-token request has no TPOT), interpolating linearly; every figure None when none is left.

    Parameters
    ----------
    values : array_like of float, shape (n,)
        Seconds per request; NaN where the figure does not exist.
    qs : sequence of float
        Percentiles in [0, 100].
    """
    v = np.asarray(values, dtype=np.float64)
    v = v[~np.isnan(v)]
    if v.shape[0] == 0:
        return {f"p{q}": None for q in qs} | {"mean": None}
    ps = np.percentile(v, qs)
    return {f"p{q}": float(p) for q, p in zip(qs, ps)} | {"mean": float(v.mean())}


def run_rates(output_tokens, makespan_s, energy_j) -> tuple:
    """``(tokens_per_s, j_per_token)`` of a run (or a replica, or a fleet): output tokens over the
    makespan (first arrival to last finish), and energy over output tokens; each None where its
    divisor is not positive. Every summary, study and fleet row takes its two figures from here."""
    tokens_per_s = output_tokens / makespan_s if makespan_s > 0 else None
    j_per_token = energy_j / output_tokens if output_tokens > 0 else None
    return tokens_per_s, j_per_token


def percentile(values, q) -> float | None:
    """One percentile of :func:`percentiles` (None when every value is NaN)."""
    return percentiles(values, (q,))[f"p{q}"]
