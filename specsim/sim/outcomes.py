"""The draft-outcome model (docs/simulation.md, "Draft outcomes").

Draft ``j`` of a sequence that has emitted ``e`` tokens would produce output token ``e + j - 1``.
Its confidence bucket is drawn from the position's bucket occupancy and it is accepted with that
bucket's ``p_accept``; the chain stops at the first rejection. The planner sees a confidence
inside the drawn bucket (one that maps back to it: ``confidence_values``). Both draws come from
one counter-based hash of (seed, request, token index, position) -- splitmix64's finaliser --
whose high 32 bits draw the bucket and low 32 bits the verdict (the two streams), so every
policy meets the same outcome for the same draft (common random numbers).

Default occupancy: for position ``j``, the maximum-entropy distribution over buckets whose mean
acceptance equals ``prior(j)``: ``w_b ∝ exp(theta_j * p_accept[b])`` with ``theta_j`` found by
bisection. It is the least-committal confidence mix consistent with the calibration's priors,
and makes the expected acceptance at each position the prior the planner assumes. A prior
outside ``[min p_accept, max p_accept]`` cannot be met: all weight goes to the nearest extreme
bucket(s) (a one-bucket calibration always draws its one bucket). ``occupancy=`` overrides it
with explicit weights.
"""

from __future__ import annotations

import numpy as np

from specsim.calibration.calibration import cell_buckets
from specsim.errors import SimulationError


def max_entropy_weights(p_accept, target) -> np.ndarray:
    """The maximum-entropy distribution over buckets whose mean acceptance is ``target``.

    ``w_b ∝ exp(theta * p_b)``; the mean rises with ``theta``, which is found by bisection.
    A target at or outside the range of ``p_accept`` puts all weight on the extreme bucket(s).

    Parameters
    ----------
    p_accept : ndarray(float64, ndim=1), shape (B,)
    target : float

    Returns
    -------
    ndarray(float64, ndim=1), shape (B,)
        Non-negative, summing to 1.
    """
    p = np.asarray(p_accept, dtype=np.float64)
    lo, hi = float(p.min()), float(p.max())
    if target <= lo or target >= hi:
        w = (p == (lo if target <= lo else hi)).astype(np.float64)
        return w / w.sum()

    # Solved on p rescaled to [0, 1]: the same exponential family (theta scaled by the span),
    # and well conditioned however narrow the span of p_accept is.
    q = (p - lo) / (hi - lo)
    goal = (target - lo) / (hi - lo)

    def weights(theta):
        # Shifted by the largest exponent so nothing overflows.
        x = theta * q
        w = np.exp(x - x.max())
        return w / w.sum()

    def mean(theta):
        return float(weights(theta) @ q)

    a, b = -1.0, 1.0
    while mean(a) > goal and a > -1e300:
        a *= 2.0
    while mean(b) < goal and b < 1e300:
        b *= 2.0
    for _ in range(200):
        mid = 0.5 * (a + b)
        if mid in (a, b):
            break
        if mean(mid) < goal:
            a = mid
        else:
            b = mid
    return weights(0.5 * (a + b))


def occupancy_cdf(cal, positions: int, occupancy=None) -> np.ndarray:
    """Cumulative bucket occupancy per draft position, as the engine draws from it.

    Parameters
    ----------
    cal : AcceptanceCalibration
    positions : int
        Rows to build (draft positions 1..positions; at least 1).
    occupancy : array_like, optional
        Explicit weights, shape (B,) or (J, B); default :func:`max_entropy_weights` of each
        position's prior.

    Returns
    -------
    ndarray(float64, ndim=2), shape (positions, B)
        Each row rises to exactly 1 at its last positive-weight bucket.
    """
    buckets = cal.p_accept.shape[0]
    positions = max(int(positions), 1)
    if occupancy is None:
        w = np.stack([max_entropy_weights(cal.p_accept, cal.prior(j)) for j in range(1, positions + 1)])
    else:
        w = np.asarray(occupancy, dtype=np.float64)
        if w.ndim == 1:
            w = w[None, :]
        if w.ndim != 2 or w.shape[1] != buckets or w.shape[0] < 1:
            raise SimulationError(
                f"occupancy must hold {buckets} weights (one per calibration bucket), or one such row per "
                f"draft position; got shape {w.shape}"
            )
        if not np.isfinite(w).all() or (w < 0).any() or (w.sum(axis=1) <= 0).any():
            raise SimulationError("occupancy weights must be finite, >= 0, with a positive sum in every row")
        rows = [w[min(j, w.shape[0] - 1)] for j in range(positions)]
        w = np.stack(rows)
    c = np.cumsum(w, axis=1)
    return np.ascontiguousarray(c / c[:, -1:])


def confidence_values(cal) -> np.ndarray:
    """The confidence shown to the planner for a draft drawn in each bucket: a value of that
    bucket, the highest of the highest coarse cell lying wholly in it (``cell_buckets``) where it
    has one, so that the planner answers it with one load of its cell table; else its upper edge.

    The planner reads a confidence only through its bucket, so any value of the bucket gives the
    same depths; ``bucket(edges[b]) == b`` because edges are strictly ascending (float32 compare),
    and a cell wholly in bucket ``b`` below its upper edge holds values of ``b`` alone.
    """
    edges = np.ascontiguousarray(cal.edges, dtype=np.float32)
    bucket, high = cell_buckets(edges)
    ok = np.flatnonzero((bucket >= 0) & (high <= edges[np.maximum(bucket, 0)]))[::-1]  # highest cell first
    found, first = np.unique(bucket[ok], return_index=True)
    out = edges.copy()
    out[found] = high[ok[first]]
    return out
