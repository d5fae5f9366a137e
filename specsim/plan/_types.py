"""The planner kernels' bundles: the constant arrays of a table and a calibration
(:class:`PlanArrays`) and the scratch buffers a call writes (:class:`PlanWorkspace`). Each has
one constructor, the only place its arrays are built and sized."""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from specsim._jit import jit
from specsim.plan._sort import SORT_BUCKETS
from specsim.calibration.calibration import bucket_cells
from specsim.table.cost_table import table_arrays


class PlanWorkspace(NamedTuple):
    """Scratch arrays for ``sequence_depths_nb``, for batches of up to ``rows`` sequences of a
    table whose deepest depth is ``max_k`` (K = max(max_k, 1) below). Build with
    :func:`plan_workspace`, never by hand. One call uses it at a time: give each thread its own.

    gains : ndarray(float64, ndim=1), shape (rows * (3 * K + 1),)
        Per batch of n: every row's gain by (sequence, depth), the same compacted, sorted, and
        each sequence's running product.
    owner : ndarray(int64, ndim=1), shape (rows * (K + 2),)
        Per batch of n: the sort's bucket of each gain, each sequence's cap and real positions.
    counts : ndarray(int64, ndim=1), shape (SORT_BUCKETS,)
        The sort's bucket counters.
    wc : ndarray(float64, ndim=2), shape (max_k + 1, 4)
        One width's interpolated costs.
    """

    gains: np.ndarray
    owner: np.ndarray
    counts: np.ndarray
    wc: np.ndarray

    @property
    def rows(self) -> int:
        """Sequences a batch may have with this workspace."""
        k = max(self.wc.shape[0] - 1, 1)
        return self.owner.shape[0] // (k + 2)


@jit(forceinline=True)
def _workspace_parts(rows, max_k):
    """Sizes of (gains, owner, counts, wc) for ``rows`` sequences and depths ``0..max_k``: the
    only place the planner's scratch is sized."""
    k = max_k if max_k > 1 else 1
    return rows * 3 * k, rows * (k + 2), SORT_BUCKETS, (max_k + 1) * 4


@jit(forceinline=True)
def workspace_views_nb(work, max_k):
    """The :class:`PlanWorkspace` inside ``work`` (a buffer from :func:`workspace_buffer`):
    views, no copy. Its ``rows`` follow from the buffer's length."""
    f_g, f_o, f_c, f_w = _workspace_parts(np.int64(0), max_k)  # int64, not literals: one compile
    p_g, p_o, p_c, p_w = _workspace_parts(np.int64(1), max_k)
    fixed = f_g + f_o + f_c + f_w
    rows = (work.shape[0] - fixed) // (p_g + p_o + p_c + p_w - fixed)
    n_g, n_o, n_c, n_w = _workspace_parts(rows, max_k)
    a = n_g
    b = a + n_o
    c = b + n_c
    return PlanWorkspace(work[:a], work[a:b].view(np.int64), work[b:c].view(np.int64),
                         work[c:c + n_w].reshape((max_k + 1, 4)))


def workspace_buffer(rows: int, max_k: int) -> np.ndarray:
    """One float64 buffer holding a workspace for ``rows`` sequences (see :func:`plan_workspace`)."""
    return np.empty(sum(_workspace_parts(max(int(rows), 1), int(max_k))))


def plan_workspace(rows: int, max_k: int) -> PlanWorkspace:
    """The workspace for batches of up to ``rows`` sequences of a table with depths ``0..max_k``.

    For a batch of n sequences the kernels use ``gains[:n * 3K]``, ``owner[:n * (K + 2)]``
    and ``counts[:SORT_BUCKETS]`` (K = max(max_k, 1)); the four arrays are views into one buffer
    (:func:`workspace_buffer`), so a kernel called from Python can take the buffer alone.
    """
    return workspace_views_nb(workspace_buffer(rows, max_k), int(max_k))


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
    widths, costs = table_arrays(table)
    return PlanArrays(
        widths=widths,
        costs=costs,
        edges=np.ascontiguousarray(cal.edges, dtype=np.float32),
        cells=np.ascontiguousarray(bucket_cells(cal.edges), dtype=np.int64),
        p_accept=np.ascontiguousarray(cal.p_accept, dtype=np.float64),
        priors=np.ascontiguousarray(cal.priors, dtype=np.float64),
    )


# Size of the header of a packed PlanArrays: W, max_k + 1, B, BUCKET_CELLS, P.
PACK_HEADER = 5


def pack_plan_arrays(arrays: PlanArrays, cell_p) -> np.ndarray:
    """``arrays`` and ``cell_p`` (``calibration.cell_probabilities`` of its calibration) laid end
    to end in one int64 array (floats as their bit patterns), which ``_entry_kernels.unpack_plan_nb``
    turns back into the same arrays without copying.

    A Python-facing kernel then takes one argument instead of six: every array argument costs
    Numba's dispatcher a type lookup and an unboxing on each call.

    Returns
    -------
    ndarray(int64, ndim=1)
        ``[W, max_k + 1, B, C, P, widths, costs (as float64 bits), edges (float32 bits, two
        per entry, zero-padded), cells, cell_p (float64 bits), p_accept (float64 bits), priors
        (float64 bits)]``.
    """
    w, kp1 = arrays.costs.shape[0], arrays.costs.shape[1]
    b, c, p = arrays.edges.shape[0], arrays.cells.shape[0], arrays.priors.shape[0]
    edges = np.zeros(2 * ((b + 1) // 2), dtype=np.float32)
    edges[:b] = arrays.edges
    parts = [
        np.array([w, kp1, b, c, p], dtype=np.int64),
        arrays.widths,
        arrays.costs.reshape(-1).view(np.int64),
        edges.view(np.int64),
        arrays.cells,
        np.ascontiguousarray(cell_p, dtype=np.float64).view(np.int64),
        arrays.p_accept.view(np.int64),
        arrays.priors.view(np.int64),
    ]
    return np.ascontiguousarray(np.concatenate(parts))


class TreePlan(NamedTuple):
    """``Planner.propose_tree(n)``: what to draft at one width (docs/planner.md#draft-trees).

    Attributes
    ----------
    kind : str
        ``"plain"`` (no drafts), ``"chain"`` or ``"tree"`` (a branching tree).
    nodes, depth : int
        The tree's draft nodes and depth (a chain's: its depth both).
    tree : specsim.tree.Tree
        The tree: the empty tree for plain decoding, the chain for a chain.
    expected_tokens : float
        Tokens per sequence per step: a chain's from the calibration's position priors (as
        ``propose`` counts them), a tree's from its rank-acceptance table.
    step_ms, step_j : float
        One step at this width (verify and drafting).
    tokens_per_j : float
        ``n * expected_tokens / step_j``.
    note : str
        What limited the candidates (no ``[tree]`` table, nodes past the table's depth, a width
        above ``max_seqs``), ``""`` when nothing did.
    """

    kind: str
    nodes: int
    depth: int
    tree: object
    expected_tokens: float
    step_ms: float
    step_j: float
    tokens_per_j: float
    note: str
