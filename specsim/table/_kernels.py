"""Numba kernels over a cost table's flat arrays (docs/tables.md#lookup).

A table is ``widths int64[W]`` (ascending, distinct, >= 1) and
``costs float64[W, max_k + 1, 4]`` in the order (verify_ms, verify_j, draft_ms, draft_j). A
table with a context axis also has ``contexts int64[C]`` (ascending, distinct, >= 1) and
``context_costs float64[C, W, max_k + 1, 4]``, the grid at each measured context.
The scalar helpers are inlined into the batch loop: as calls they cost more than their work.
"""

from __future__ import annotations

import numpy as np

from specsim._jit import jit


@jit(inline="always")
def bracket_nb(widths, n):
    """Indices of the largest width <= n and the smallest width >= n (-1 where none)."""
    w = widths.shape[0]
    # First index whose width is >= n.
    lo_i, hi_i = 0, w
    while lo_i < hi_i:
        mid = (lo_i + hi_i) >> 1
        if widths[mid] < n:
            lo_i = mid + 1
        else:
            hi_i = mid
    above = lo_i if lo_i < w else -1
    if above >= 0 and widths[above] == n:
        return above, above
    below = lo_i - 1
    return below, above


@jit(inline="always")
def cell_into_nb(widths, costs, n, k, out):
    """Write the four costs of cell (n, k) into ``out[:4]``; False (out untouched) when k > max_k.

    Between two measured widths ``a < n < b`` every cost is ``p + (q - p) * t`` with
    ``t = (n - a) / (b - a)``; outside the measured range the nearest width's costs.
    """
    if k < 0 or k >= costs.shape[1]:
        return False
    a, b = bracket_nb(widths, n)
    if a == b or b < 0:
        src = a
    elif a < 0:
        src = b
    else:
        t = (n - widths[a]) / (widths[b] - widths[a])
        for f in range(4):
            p = costs[a, k, f]
            out[f] = p + (costs[b, k, f] - p) * t
        return True
    for f in range(4):
        out[f] = costs[src, k, f]
    return True


@jit
def lookup_nb(widths, costs, ns, ks, out):
    """Cells for arrays of widths and depths.

    Parameters
    ----------
    widths : ndarray(int64, ndim=1), shape (W,)
    costs : ndarray(float64, ndim=3), shape (W, K + 1, 4)
    ns, ks : ndarray(int64, ndim=1), shape (N,)
    out : ndarray(float64, ndim=2), shape (N, 4)
        Modified in place; a row is NaN where ``k`` is outside ``0..=max_k``.
    """
    for i in range(ns.shape[0]):
        if not cell_into_nb(widths, costs, ns[i], ks[i], out[i]):
            for f in range(4):
                out[i, f] = np.nan


@jit(inline="always")
def _context_value_nb(contexts, context_costs, lo, hi, t, w, k, f):
    """Cost ``f`` of measured width index ``w`` at depth ``k``, between contexts ``lo`` and ``hi``."""
    p = context_costs[lo, w, k, f]
    if lo == hi:
        return p
    return p + (context_costs[hi, w, k, f] - p) * t


@jit(inline="always")
def context_bracket_nb(contexts, c):
    """``(lo, hi, t)``: the measured contexts around ``c`` and the fraction between them; the
    nearest context (``lo == hi``) outside the measured range or at a measured context."""
    a, b = bracket_nb(contexts, c)
    if a == b or b < 0:
        return a, a, 0.0
    if a < 0:
        return b, b, 0.0
    return a, b, (c - contexts[a]) / (contexts[b] - contexts[a])


@jit
def context_slice_nb(contexts, context_costs, c, out):
    """The grid at context ``c`` into ``out`` (float64[W, K + 1, 4]): every cost linear in context
    between the two measured contexts around ``c``, the nearest one's outside them."""
    lo, hi, t = context_bracket_nb(contexts, c)
    for w in range(out.shape[0]):
        for k in range(out.shape[1]):
            for f in range(4):
                out[w, k, f] = _context_value_nb(contexts, context_costs, lo, hi, t, w, k, f)


@jit(forceinline=True)
def context_row_nb(widths, contexts, context_costs, c, n, out):
    """Every depth's four costs at width ``n`` and context ``c`` into ``out`` (float64[K + 1, 4]):
    the grid at ``c`` (:func:`context_slice_nb`) interpolated in width at ``n`` as the planner's
    ``width_costs_nb`` does, the same arithmetic, with only the measured widths around ``n``
    interpolated in context."""
    lo, hi, t = context_bracket_nb(contexts, c)
    a, b = bracket_nb(widths, n)
    if a == b or b < 0 or a < 0:
        src = b if a < 0 else a
        for k in range(out.shape[0]):
            for f in range(4):
                out[k, f] = _context_value_nb(contexts, context_costs, lo, hi, t, src, k, f)
        return
    tw = (n - widths[a]) / (widths[b] - widths[a])
    for k in range(out.shape[0]):
        for f in range(4):
            p = _context_value_nb(contexts, context_costs, lo, hi, t, a, k, f)
            out[k, f] = p + (_context_value_nb(contexts, context_costs, lo, hi, t, b, k, f) - p) * tw


@jit
def context_lookup_nb(widths, contexts, context_costs, ns, ks, cs, out):
    """Cells for arrays of widths, depths and contexts: in context first (at the measured widths
    around ``n``), then in width, as :func:`cell_into_nb`. NaN rows where ``k`` is outside
    ``0..=max_k``."""
    max_k = context_costs.shape[2] - 1
    for i in range(ns.shape[0]):
        k = ks[i]
        if k < 0 or k > max_k:
            for f in range(4):
                out[i, f] = np.nan
            continue
        lo, hi, t = context_bracket_nb(contexts, cs[i])
        a, b = bracket_nb(widths, ns[i])
        if a == b or b < 0 or a < 0:
            src = b if a < 0 else a
            for f in range(4):
                out[i, f] = _context_value_nb(contexts, context_costs, lo, hi, t, src, k, f)
            continue
        tw = (ns[i] - widths[a]) / (widths[b] - widths[a])
        for f in range(4):
            p = _context_value_nb(contexts, context_costs, lo, hi, t, a, k, f)
            q = _context_value_nb(contexts, context_costs, lo, hi, t, b, k, f)
            out[i, f] = p + (q - p) * tw
