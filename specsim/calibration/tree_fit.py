"""Where a calibration's rank acceptance ``a[d][r]`` comes from (docs/calibration.md#draft-trees).

A per-draft log of tree drafts (one row per drafted node, with ``rank`` and, optionally,
``parent`` columns beside the chain columns) is binned into :class:`TreeCounts`: per depth ``d``,
``reached(d)``, the verify steps whose accepted path reached depth ``d - 1`` and that drafted
candidates under it, and ``matched(d, r)``, those where the target's token at depth ``d`` was the
rank-``r`` candidate. ``a[d][r] = matched(d, r) / reached(d)``. The chain part of the fit reads the
rank-1 path of each tree (the chain the drafter would have drafted alone).
"""

from __future__ import annotations

import numpy as np

from specsim._checks import MAX_TREE_DEPTH, MAX_TREE_NODES, MAX_TREE_RANKS, is_int, show
from specsim.calibration._types import TreeCounts
from specsim.calibration.tree_table import RANK_ROW_SLACK, checked_rank_acceptance
from specsim.errors import CalibrationError

# The columns a per-draft log of tree drafts adds to a chain log's (docs/formats.md#per-draft-log).
TREE_COLUMNS = ("rank", "parent")


def _check_ranks_and_positions(rank, position, refuse) -> None:
    """Refuse (``refuse(row, why)``) the first row whose rank or position a draft tree cannot have."""
    bad = np.flatnonzero((rank < 1) | (rank > MAX_TREE_RANKS))
    if bad.shape[0]:
        refuse(bad[0], f"rank {int(rank[bad[0]])} is outside 1..{MAX_TREE_RANKS}: a node's rank counts its parent's "
                       f"candidates from 1 (the most likely), at most {MAX_TREE_RANKS} (docs/limits.md)")
    bad = np.flatnonzero((position < 1) | (position > MAX_TREE_DEPTH))
    if bad.shape[0]:
        refuse(bad[0], f"position {int(position[bad[0]])} is outside 1..{MAX_TREE_DEPTH}, the depths a draft tree "
                       "may have (docs/limits.md)")


def bin_tree(step, sequence, position, rank, accepted, parent=None, fitted=None, source="<drafts>", where=None):
    """Check a per-draft log of tree drafts and count its reached and matched paths.

    A tree is the rows of one ``(step, sequence)``, its nodes numbered 0, 1, .. in the order they
    are listed. A node's parent is ``parent`` (the number of an earlier node of its tree, -1 for
    the root); without a ``parent`` column, the nearest earlier node of its tree one level up (the
    tree listed depth-first, each node followed by its subtree). A node is reached when every node
    on its path was accepted; ``accepted`` of a node that is not reached is not read, as in chains.

    Parameters
    ----------
    step, sequence, position, rank : ndarray(int64, ndim=1), shape (n,)
        ``position`` is the node's depth (1 under the root), ``rank`` its 1-based rank among its
        parent's candidates.
    accepted : ndarray(int8, ndim=1), shape (n,)
    parent : ndarray(int64, ndim=1), shape (n,), optional
    fitted : ndarray(bool, ndim=1), shape (n,), optional
        Rows whose tree is counted (default all): a held-out step's tree is checked, not counted.
    where : callable, optional
        ``where(row)`` -> how a refusal names a 0-based data row (default ``"data row N"``).

    Returns
    -------
    (TreeCounts or None, ndarray(bool, ndim=1))
        The counts (None when no tree drafted a node), and which rows lie on their tree's rank-1
        path: the chain part of the fit reads those rows only.
    """
    where = where or (lambda row: f"data row {row + 1}")
    n = step.shape[0]

    def refuse(row, why):
        raise CalibrationError(f"{source}: {where(int(row))}: {why}")

    _check_ranks_and_positions(rank, position, refuse)
    reached = [0] * (MAX_TREE_DEPTH + 1)
    matched = [[0] * (MAX_TREE_RANKS + 1) for _ in range(MAX_TREE_DEPTH + 1)]
    widest = 0
    on_chain = np.zeros(n, dtype=bool)
    order = np.lexsort((np.arange(n), sequence, step))  # each tree's rows together, in the order listed
    key = np.stack((step[order], sequence[order]), axis=1)
    starts = np.flatnonzero(np.r_[True, (key[1:] != key[:-1]).any(axis=1)]) if n else np.zeros(0, np.int64)
    bounds = np.r_[starts, n].tolist()
    pos, rk, acc = position.tolist(), rank.tolist(), accepted.tolist()
    par = None if parent is None else parent.tolist()
    for t in range(len(bounds) - 1):
        rows = order[bounds[t]:bounds[t + 1]].tolist()
        if len(rows) > MAX_TREE_NODES:
            refuse(rows[MAX_TREE_NODES], f"the tree of step {int(step[rows[0]])}, sequence {int(sequence[rows[0]])} "
                                         f"has more than {MAX_TREE_NODES} nodes (docs/limits.md)")
        depth, chain = [], []
        children = [[] for _ in range(len(rows) + 1)]  # children[p + 1]: node p's, the root's first
        path = []  # without parents: the latest node at each depth, the depth-first path
        for i, row in enumerate(rows):
            d = pos[row]
            if par is None:
                if d - 1 > len(path):
                    refuse(row, f"position {d} follows no node at position {d - 1} in its tree: depths run 1, 2, .. "
                                "down each path (without a parent column, list each tree depth-first: every node "
                                "followed by its subtree)")
                p = path[d - 2] if d > 1 else -1
                del path[d - 1:]
                path.append(i)
            else:
                p = par[row]
                if not -1 <= p < i:
                    refuse(row, f"parent {p} is not an earlier node of its tree: nodes count from 0 in the order "
                                "listed, parents before children, -1 for the root")
                if d != (depth[p] if p >= 0 else 0) + 1:
                    refuse(row, f"position {d} under a parent at position {depth[p] if p >= 0 else 0}: a node lies "
                                "one level below its parent (no depth gaps)")
            if any(rk[rows[c]] == rk[row] for c in children[p + 1]):
                refuse(row, f"a second rank-{rk[row]} candidate under one parent: each rank once per parent"
                            + ("" if par is not None else " (is the tree listed breadth-first? without a parent "
                                                          "column, list it depth-first)"))
            children[p + 1].append(i)
            depth.append(d)
            chain.append(rk[row] == 1 and (p < 0 or chain[p]))
        on_chain[rows] = chain
        if fitted is not None and not fitted[rows[0]]:
            continue
        node, d = -1, 1
        while children[node + 1]:
            kids = children[node + 1]
            reached[d] += 1
            widest = max(widest, max(rk[rows[c]] for c in kids))
            hits = [c for c in kids if acc[rows[c]]]
            if len(hits) > 1:
                refuse(rows[hits[1]], "a second accepted candidate under one reached node: the target's token is one "
                                      "of them at most")
            if not hits:
                break
            node = hits[0]
            matched[d][rk[rows[node]]] += 1
            d += 1
    depths = sum(1 for c in reached[1:] if c)
    if not depths:
        return None, on_chain
    counts = TreeCounts(tuple(reached[1:depths + 1]), tuple(tuple(m[1:widest + 1]) for m in matched[1:depths + 1]),
                        f"drafts log {source}")
    return counts, on_chain


def rank_acceptance_from_counts(counts: TreeCounts):
    """``a[d][r] = matched(d, r) / reached(d)``: ndarray(float64), shape (D, R)."""
    return checked_rank_acceptance([[m / n for m in row] for n, row in zip(counts.reached, counts.matched)],
                                   counts.source)


def rank_rates_table(rates, depths: int, source: str = "--rank-rates"):
    """A depth-independent rank acceptance (Sequoia's acceptance vector): ``depths`` equal rows of
    ``rates`` (rank 1 first), each rate a probability, 1..16 of them, summing to at most 1.

    Returns
    -------
    ndarray(float64, ndim=2), shape (depths, len(rates)), read-only
    """
    if not (is_int(depths) and 1 <= depths <= MAX_TREE_DEPTH):
        raise CalibrationError(f"{source}: {show(depths)} tree depths: give 1..{MAX_TREE_DEPTH} (docs/limits.md)")
    rates = [float(r) for r in rates]
    problems = [f"rank {r} = {v!r} is not a probability in [0, 1]" for r, v in enumerate(rates, 1) if not 0 <= v <= 1]
    if not 1 <= len(rates) <= MAX_TREE_RANKS:
        problems.append(f"{len(rates)} ranks: give 1..{MAX_TREE_RANKS} (docs/limits.md)")
    elif not problems and sum(rates) > 1.0 + RANK_ROW_SLACK:
        problems.append(f"the rates sum to {sum(rates)!r}: they share one draw of the target's token at each depth, "
                        "so they sum to at most 1")
    if problems:
        raise CalibrationError(f"{source}: the rank rates are refused", problems)
    return checked_rank_acceptance([rates] * int(depths), source)
