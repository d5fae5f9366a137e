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
from specsim.tree._types import order_workspace_sizes
from specsim.table._types import DRAFT_J as DJ, DRAFT_MS as DMS, VERIFY_J as VJ, VERIFY_MS as VMS


@jit(forceinline=True)
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


@jit(forceinline=True)
def _before_nb(i, j, hp, hpar, hrank, parents, ranks, depths, pa, pb):
    """Heap entry ``i`` comes before entry ``j`` in the best-tree order: the larger path product
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


@jit(forceinline=True)
def _swap_nb(i, j, hp, hpar, hdep, hpos, hrank):
    hp[i], hp[j] = hp[j], hp[i]
    hpar[i], hpar[j] = hpar[j], hpar[i]
    hdep[i], hdep[j] = hdep[j], hdep[i]
    hpos[i], hpos[j] = hpos[j], hpos[i]
    hrank[i], hrank[j] = hrank[j], hrank[i]


@jit(forceinline=True)
def _child_order_nb(a, d, prod, row):
    """``row`` := the ranks (0-based) of a node's children at depth ``d + 1`` (row ``d`` of
    ``a``), in best-tree order for a parent of path product ``prod``: products ``prod * a``
    descending, equal products by rank ascending (insertion sort)."""
    r_n = a.shape[1]
    for r in range(r_n):
        row[r] = r
    for i in range(1, r_n):
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


@jit
def greedy_order_nb(a, nodes, max_depth, parents, ranks, products):
    """The first ``nodes`` paths of depth <= ``max_depth`` (and <= ``a``'s rows) in best-tree
    order, written into ``parents``, ``ranks`` (1-based) and ``products`` (each of length >=
    ``nodes``); returns how many were written (fewer where fewer paths exist).

    A binary heap holds, for each node taken (and the root), its best child not yet taken; a
    node taken pushes its next sibling and its first child, so the heap never passes
    ``nodes + 1`` entries and the work is O(nodes (R + log nodes)).
    """
    depth_limit = a.shape[0] if a.shape[0] < max_depth else max_depth
    r_n = a.shape[1]
    if nodes <= 0 or depth_limit <= 0 or r_n <= 0:
        return 0
    heap = nodes + 1
    n_int, n_float = order_workspace_sizes(nodes, depth_limit, r_n)
    iw = np.empty(n_int, dtype=np.int64)
    hp = np.empty(n_float)
    depths = iw[:nodes]
    child = iw[nodes:nodes + heap * r_n]  # slot s: child order of node s - 1 (slot 0: the root)
    o = nodes + heap * r_n
    hpar = iw[o:o + heap]
    hdep = iw[o + heap:o + 2 * heap]
    hpos = iw[o + 2 * heap:o + 3 * heap]
    hrank = iw[o + 3 * heap:o + 4 * heap]  # the candidate's 1-based rank, for ties
    pa = iw[o + 4 * heap:o + 4 * heap + depth_limit]
    pb = iw[o + 4 * heap + depth_limit:o + 4 * heap + 2 * depth_limit]

    _child_order_nb(a, 0, 1.0, child[0:r_n])
    size = 1
    hp[0] = a[0, child[0]]
    hpar[0] = -1
    hdep[0] = 1
    hpos[0] = 0
    hrank[0] = child[0] + 1
    count = 0
    while count < nodes and size > 0:
        prod = hp[0]
        par = hpar[0]
        d = hdep[0]
        pos = hpos[0]
        rank = hrank[0]
        # pop: move the last entry to the top and sift it down
        size -= 1
        if size > 0:
            _swap_nb(0, size, hp, hpar, hdep, hpos, hrank)
            i = 0
            while True:
                left = 2 * i + 1
                if left >= size:
                    break
                best = left
                right = left + 1
                if right < size and _before_nb(right, left, hp, hpar, hrank, parents, ranks, depths, pa, pb):
                    best = right
                if _before_nb(best, i, hp, hpar, hrank, parents, ranks, depths, pa, pb):
                    _swap_nb(best, i, hp, hpar, hdep, hpos, hrank)
                    i = best
                else:
                    break
        node = count
        parents[node] = par
        ranks[node] = rank
        products[node] = prod
        depths[node] = d
        count += 1
        # push the next sibling, then the first child
        for push in range(2):
            if push == 0:
                if pos + 1 >= r_n:
                    continue
                slot = (par + 1) * r_n
                r0 = child[slot + pos + 1]
                base = 1.0 if par < 0 else products[par]
                v = a[0, r0] if par < 0 else base * a[d - 1, r0]
                e_par, e_dep, e_pos = par, d, pos + 1
            else:
                if d >= depth_limit or count >= nodes:
                    continue
                slot = (node + 1) * r_n
                _child_order_nb(a, d, prod, child[slot:slot + r_n])
                r0 = child[slot]
                v = prod * a[d, r0]
                e_par, e_dep, e_pos = node, d + 1, 0
            i = size
            hp[i] = v
            hpar[i] = e_par
            hdep[i] = e_dep
            hpos[i] = e_pos
            hrank[i] = r0 + 1
            size += 1
            while i > 0:
                up = (i - 1) >> 1
                if _before_nb(i, up, hp, hpar, hrank, parents, ranks, depths, pa, pb):
                    _swap_nb(i, up, hp, hpar, hdep, hpos, hrank)
                    i = up
                else:
                    break
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
