"""Numba kernels of draft trees (docs/planner.md#draft-trees): the greedy order of path products
(every best tree is a prefix of it), path products of a given tree, and a tree's step price.

Inputs are ``rank_acceptance float64[D, R]`` (checked rows: each cell in [0, 1]), trees as
``parents int64[N]`` / ``ranks int64[N]`` (1-based) and a table's ``widths int64[W]`` and
``costs float64[W, K + 1, 4]``. Each kernel makes its own workspace, so any number of threads
may call them at once.
"""

from __future__ import annotations

import numpy as np

from specsim._jit import jit
from specsim.table._kernels import cell_into_nb
from specsim.table._types import DRAFT_J as DJ, DRAFT_MS as DMS, VERIFY_J as VJ, VERIFY_MS as VMS
from specsim.tree._types import order_workspace_sizes


@jit(inline="always")
def _path_into_nb(parent, rank, parents, ranks, depths, path):
    """The rank path (root first) of a candidate with ``rank`` under node ``parent`` (-1 = the
    root), written into ``path``; returns its length."""
    d = 1 if parent < 0 else depths[parent] + 1
    path[d - 1] = rank
    i = d - 2
    p = parent
    while p >= 0:
        path[i] = ranks[p]
        i -= 1
        p = parents[p]
    return d


@jit(inline="always")
def _before_nb(i, j, hp, hpar, hrank, parents, ranks, depths, pa, pb):
    """Candidate ``i`` comes before candidate ``j`` in the best-tree order: the larger path product
    first; equal products by rank path from the root (the first differing rank, lower first;
    a path before its extensions)."""
    if hp[i] != hp[j]:
        return hp[i] > hp[j]
    la = _path_into_nb(hpar[i], hrank[i], parents, ranks, depths, pa)
    lb = _path_into_nb(hpar[j], hrank[j], parents, ranks, depths, pb)
    m = la if la < lb else lb
    for t in range(m):
        if pa[t] != pb[t]:
            return pa[t] < pb[t]
    return la < lb


@jit(inline="always")
def _sort_row_nb(a, d, prod, row):
    """Insertion sort of ``row`` (0-based ranks of row ``d`` of ``a``) into best-tree order for a
    parent of path product ``prod``: products ``prod * a[d, r]`` descending, equal products by
    rank ascending. Linear on a row already in that order up to ties."""
    for i in range(1, row.shape[0]):
        r = row[i]
        v = prod * a[d, r]
        j = i - 1
        while j >= 0:
            w = prod * a[d, row[j]]
            if w > v or (w == v and row[j] < r):
                break
            row[j + 1] = row[j]
            j -= 1
        row[j + 1] = r


@jit(inline="always")
def _child_order_nb(a, d, prod, by_depth, row):
    """``row`` := the ranks (0-based) of a node's children at depth ``d + 1``, in best-tree order
    for a parent of path product ``prod``. ``by_depth`` is that row's order by acceptance
    (``prod = 1``); multiplying by ``prod`` keeps it, except where products round equal, which
    the sort's pass over it puts back in rank order."""
    for i in range(row.shape[0]):
        row[i] = by_depth[i]
    if prod != 1.0:
        _sort_row_nb(a, d, prod, row)


@jit(inline="always")
def _sift_down_nb(heap, size, e, ep, epar, erank, parents, ranks, depths, pa, pb):
    """Place candidate ``e`` at the top of ``heap[:size]`` and sift it down (entries move up
    into the hole; ``e`` is written once)."""
    i = 0
    while True:
        c = 2 * i + 1
        if c >= size:
            break
        if c + 1 < size and _before_nb(heap[c + 1], heap[c], ep, epar, erank, parents, ranks, depths, pa, pb):
            c += 1
        if not _before_nb(heap[c], e, ep, epar, erank, parents, ranks, depths, pa, pb):
            break
        heap[i] = heap[c]
        i = c
    heap[i] = e


@jit(inline="always")
def _sift_up_nb(heap, size, e, ep, epar, erank, parents, ranks, depths, pa, pb):
    """Add candidate ``e`` at ``heap[size]`` and sift it up."""
    i = size
    while i > 0:
        up = (i - 1) >> 1
        if not _before_nb(e, heap[up], ep, epar, erank, parents, ranks, depths, pa, pb):
            break
        heap[i] = heap[up]
        i = up
    heap[i] = e


@jit
def greedy_order_nb(a, nodes, max_depth, parents, ranks, products, depths_out):
    """The first ``nodes`` paths of depth <= ``max_depth`` (and <= ``a``'s rows) in best-tree
    order, written into ``parents``, ``ranks`` (1-based), ``products`` and ``depths_out`` (each
    of length >= ``nodes``); returns how many were written (fewer where fewer paths exist).

    A binary heap of candidates holds, for the root and each node taken, its best child not yet
    taken; taking a node makes two candidates, its next sibling and its first child: the first
    replaces it at the top of the heap, the second is pushed. The heap never holds more than
    ``nodes + 1`` candidates and the work is O(nodes (R + log nodes)).
    """
    depth_limit = a.shape[0] if a.shape[0] < max_depth else max_depth
    r_n = a.shape[1]
    if nodes <= 0 or depth_limit <= 0 or r_n <= 0:
        return 0
    n_int, n_float = order_workspace_sizes(nodes, depth_limit, r_n)
    iw = np.empty(n_int, dtype=np.int64)
    ep = np.empty(n_float)  # each candidate's path product
    cands = n_float
    depths = iw[:nodes]  # copied to depths_out at the end (read from an argument array, the kernel ran 3x slower)
    o = nodes
    child = iw[o:o + (nodes + 1) * r_n]  # slot s: the child order of node s - 1 (slot 0: the root)
    o += (nodes + 1) * r_n
    heap = iw[o:o + nodes + 1]
    o += nodes + 1
    epar = iw[o:o + cands]
    edep = iw[o + cands:o + 2 * cands]
    epos = iw[o + 2 * cands:o + 3 * cands]
    erank = iw[o + 3 * cands:o + 4 * cands]  # 1-based, for ties
    o += 4 * cands
    pa = iw[o:o + depth_limit]
    pb = iw[o + depth_limit:o + 2 * depth_limit]
    o += 2 * depth_limit
    by_depth = iw[o:o + depth_limit * r_n]  # row d: the ranks of depth d + 1 by acceptance
    for d in range(depth_limit):
        row = by_depth[d * r_n:(d + 1) * r_n]
        for r in range(r_n):
            row[r] = r
        _sort_row_nb(a, d, 1.0, row)

    _child_order_nb(a, 0, 1.0, by_depth[0:r_n], child[0:r_n])
    ep[0] = a[0, child[0]]
    epar[0] = -1
    edep[0] = 1
    epos[0] = 0
    erank[0] = child[0] + 1
    heap[0] = 0
    size = 1
    made = 1
    count = 0
    while count < nodes and size > 0:
        top = heap[0]
        prod = ep[top]
        par = epar[top]
        d = edep[top]
        pos = epos[top]
        node = count
        parents[node] = par
        ranks[node] = erank[top]
        products[node] = prod
        depths[node] = d
        count += 1
        # the new candidates: the next sibling, then the first child
        first = -1
        if pos + 1 < r_n:
            r0 = child[(par + 1) * r_n + pos + 1]
            ep[made] = a[0, r0] if par < 0 else products[par] * a[d - 1, r0]
            epar[made] = par
            edep[made] = d
            epos[made] = pos + 1
            erank[made] = r0 + 1
            first = made
            made += 1
        second = -1
        if d < depth_limit and count < nodes:
            slot = (node + 1) * r_n
            _child_order_nb(a, d, prod, by_depth[d * r_n:(d + 1) * r_n], child[slot:slot + r_n])
            r0 = child[slot]
            ep[made] = prod * a[d, r0]
            epar[made] = node
            edep[made] = d + 1
            epos[made] = 0
            erank[made] = r0 + 1
            if first < 0:
                first = made
            else:
                second = made
            made += 1
        if first < 0:  # nothing new: the last candidate takes the top
            size -= 1
            if size > 0:
                _sift_down_nb(heap, size, heap[size], ep, epar, erank, parents, ranks, depths, pa, pb)
        else:
            _sift_down_nb(heap, size, first, ep, epar, erank, parents, ranks, depths, pa, pb)
        if second >= 0:
            _sift_up_nb(heap, size, second, ep, epar, erank, parents, ranks, depths, pa, pb)
            size += 1
    for i in range(count):
        depths_out[i] = depths[i]
    return count


@jit
def path_products_nb(a, parents, ranks, out):
    """``out[i]`` := the product of ``a[depth - 1, rank - 1]`` along node ``i``'s path (a
    checked tree: parents before children, ranks and depths inside ``a``); returns
    ``1 + sum(out)``, summed in node order."""
    n = parents.shape[0]
    depths = np.empty(n, dtype=np.int64)
    total = 0.0
    for i in range(n):
        p = parents[i]
        if p < 0:
            depths[i] = 1
            out[i] = a[0, ranks[i] - 1]
        else:
            depths[i] = depths[p] + 1
            out[i] = out[p] * a[depths[i] - 1, ranks[i] - 1]
        total += out[i]
    return 1.0 + total


@jit
def tree_price_nb(widths, costs, n, nodes, depth, passes, chain, factor, out):
    """The step cost of a tree at width ``n`` into ``out float64[4]`` (verify_ms, verify_j,
    draft_ms, draft_j; docs/planner.md#pricing): ``nodes <= max_k`` and ``depth <= max_k``
    (checked by the caller).

    A chain (``chain`` true) costs the table's cell ``(n, nodes)`` exactly. A branching tree
    verifies as that cell's verify times ``factor``, and drafts one pass per level ``l`` at
    ``n * passes[l - 1]`` rows, each the cell ``(n * passes[l - 1], depth)``'s draft cost over
    ``depth``; passes of equal rows are priced together, ``draft * (count / depth)``, so a
    level structure of single passes costs the cell's draft exactly.
    """
    cell = np.empty(4)
    cell_into_nb(widths, costs, n, nodes, cell)
    if chain:
        for f in range(4):
            out[f] = cell[f]
        return
    out[VMS] = cell[VMS] * factor
    out[VJ] = cell[VJ] * factor
    # Any width at or past the widest measured takes the widest's costs: clamping n first keeps
    # n * rows inside int64 for every width the planner takes.
    top = widths[widths.shape[0] - 1]
    base = n if n < top else top
    draft_ms = 0.0
    draft_j = 0.0
    done = 0
    low = 0  # rows already priced: passes are priced in ascending rows, each count once
    while done < passes.shape[0]:
        rows = -1
        for i in range(passes.shape[0]):
            if passes[i] > low and (rows < 0 or passes[i] < rows):
                rows = passes[i]
        if rows < 0:  # a level of no rows: not a tree the callers build
            break
        count = 0
        for i in range(passes.shape[0]):
            if passes[i] == rows:
                count += 1
        cell_into_nb(widths, costs, base * rows, depth, cell)
        share = count / depth
        draft_ms += cell[DMS] * share
        draft_j += cell[DJ] * share
        done += count
        low = rows
    out[DMS] = draft_ms
    out[DJ] = draft_j
