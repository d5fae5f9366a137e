"""The planner kernels' workspace: one constructor sizes every buffer they write."""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

# Buckets of the counting sort of gains (see ``_kernels.sort_gains_desc_nb``).
SORT_BUCKETS = 2048


class PlanWorkspace(NamedTuple):
    """Scratch arrays for ``sequence_depths_nb`` and friends, for batches of up to ``rows``
    sequences at depth up to ``max_k``. Build with :func:`plan_workspace`, never by hand.

    gains : ndarray(float64, ndim=1), shape (2 * rows * K,)
        Marginal gains of every (sequence, depth), then the same sorted.
    owner : ndarray(int64, ndim=1), shape (rows * K,)
        The sequence of each gain.
    counts : ndarray(int64, ndim=1), shape (2 * SORT_BUCKETS + 1,)
        The counting sort's bucket counters.
    wc : ndarray(float64, ndim=2), shape (max_k + 1, 4)
        One width's interpolated costs.
    """

    gains: np.ndarray
    owner: np.ndarray
    counts: np.ndarray
    wc: np.ndarray

    @property
    def rows(self) -> int:
        """Sequences a batch may have with this workspace (at the depth it was made for)."""
        k = max(self.wc.shape[0] - 1, 1)
        return self.owner.shape[0] // k


def plan_workspace(rows: int, max_k: int) -> PlanWorkspace:
    """The workspace for batches of up to ``rows`` sequences of a table with depths ``0..max_k``.

    The only place the planner's buffers are sized: the kernels index ``gains`` up to
    ``2 * rows * K``, ``owner`` up to ``rows * K`` and ``counts`` up to ``2 * SORT_BUCKETS``
    (K = max(max_k, 1)).
    """
    k = max(int(max_k), 1)
    rows = max(int(rows), 1)
    return PlanWorkspace(
        gains=np.empty(2 * rows * k),
        owner=np.empty(rows * k, dtype=np.int64),
        counts=np.empty(2 * SORT_BUCKETS + 1, dtype=np.int64),
        wc=np.empty((int(max_k) + 1, 4)),
    )


class PlanArrays(NamedTuple):
    """The constant inputs of the planner kernels: one table and one calibration as flat arrays.
    Build with :func:`plan_arrays`.

    widths : ndarray(int64, ndim=1), shape (W,)
        Measured batch widths, ascending.
    costs : ndarray(float64, ndim=3), shape (W, max_k + 1, 4)
        (verify_ms, verify_j, draft_ms, draft_j) per width and depth.
    edges : ndarray(float32, ndim=1), shape (B,)
        Bucket upper bounds of the calibration (log-probabilities).
    cells : ndarray(int64, ndim=1), shape (BUCKET_CELLS,)
        The coarse bucket index over float32 values (``calibration.bucket_cells(edges)``).
    p_accept : ndarray(float64, ndim=1), shape (B,)
        Acceptance probability per bucket.
    priors : ndarray(float64, ndim=1), shape (P,)
        Conditional acceptance prior per draft position (1-based position j at index j - 1).
    """

    widths: np.ndarray
    costs: np.ndarray
    edges: np.ndarray
    cells: np.ndarray
    p_accept: np.ndarray
    priors: np.ndarray


def plan_arrays(table, cal) -> PlanArrays:
    """The kernel bundle of a :class:`~specsim.table.CostTable` and an
    :class:`~specsim.calibration.AcceptanceCalibration` (contiguous, fixed dtypes)."""
    from specsim.calibration.calibration import bucket_cells

    return PlanArrays(
        widths=np.ascontiguousarray(table.widths, dtype=np.int64),
        costs=np.ascontiguousarray(table.costs, dtype=np.float64),
        edges=np.ascontiguousarray(cal.edges, dtype=np.float32),
        cells=np.ascontiguousarray(bucket_cells(cal.edges), dtype=np.int64),
        p_accept=np.ascontiguousarray(cal.p_accept, dtype=np.float64),
        priors=np.ascontiguousarray(cal.priors, dtype=np.float64),
    )
