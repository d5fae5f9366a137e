"""``Planner.propose_tree``'s choice at one width (docs/planner.md#draft-trees): plain decoding,
chains priced and counted as ``propose`` counts them, and the branching best trees of the
calibration's rank-acceptance table, by the propose rule (the most tokens per joule among the
candidates at least ``(1 - slack)`` times as fast as the depth-1 chain)."""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from specsim._checks import MAX_TREE_NODES
from specsim.plan._kernels import DJ, DMS, VJ, VMS, width_costs_nb
from specsim.plan._types import TreePlan
from specsim.tree._kernels import tree_price_nb
from specsim.tree._types import Tree
from specsim.tree.best import greedy_order
from specsim.tree.pricing import level_passes

NO_TREE_TABLE = "this calibration has no [tree] table: chains only"


class TreeShape(NamedTuple):
    """One branching best tree, with what pricing it needs (``passes``: rows per sequence of
    each drafting pass)."""

    tree: Tree
    passes: np.ndarray


def tree_shapes(rank_acceptance, max_k: int, max_depth: int) -> tuple:
    """The branching best trees of 2..min(max_k, 256) nodes and depth <= ``max_depth`` (a best
    tree that is a chain is left out: chains are priced from the calibration's priors), in
    nodes order. They depend on the calibration alone: a Planner builds them once per
    ``max_depth``."""
    limit = min(max_k, MAX_TREE_NODES)
    if rank_acceptance is None or limit < 2:
        return ()
    order = greedy_order(rank_acceptance, limit, max_depth)
    out = []
    for nodes in range(2, len(order) + 1):
        tree = order.tree(nodes)
        if not tree.is_chain:
            out.append(TreeShape(tree, level_passes(tree)))
    return tuple(out)


def choose_tree(arrays, cum_priors, n, slack, max_seqs, bounds, shapes, factor, notes) -> TreePlan:
    """The plan at width ``n`` over a table's ``arrays`` (its ``widths`` and its ``costs`` at the
    context asked for), in candidate order: plain (k = 0), chains k = 1..min(max_k, max_depth),
    then ``shapes`` of at most ``max_nodes`` nodes (``bounds`` = ``(max_nodes, max_depth)``); a
    later candidate replaces the kept one only with strictly more tokens per joule. The chains'
    arithmetic is ``propose``'s (``plan._kernels._choose_nb``), so without trees the answer is
    its depth."""
    widths, costs = arrays.widths, arrays.costs
    max_nodes, max_depth = bounds
    max_k = costs.shape[1] - 1
    wc = np.empty((max_k + 1, 4))
    width_costs_nb(widths, costs, n, wc)
    note = "; ".join(notes)
    if n > max_seqs:
        return _plan("plain", Tree.chain(0, 1.0), 1.0, n, wc[0, VMS] + wc[0, DMS], wc[0, VJ] + wc[0, DJ],
                     "; ".join(notes + ["the width is above max_seqs: plain decoding"]))
    r = 1 if max_k >= 1 else 0
    nf = float(n)
    reference = nf * (1.0 + cum_priors[r]) / (wc[r, VMS] + wc[r, DMS])
    floor_rate = (1.0 - slack) * reference
    best = None  # (tokens per J, kind, tree, expected tokens, ms, J)
    for k in range(min(max_k, max_depth) + 1):
        expected = 1.0 + cum_priors[k]
        tokens = nf * expected
        ms = wc[k, VMS] + wc[k, DMS]
        if tokens / ms < floor_rate:
            continue
        j = wc[k, VJ] + wc[k, DJ]
        eff = tokens / j
        if best is None or eff > best[0]:
            best = (eff, k, None, expected, ms, j)
    if best is None:  # only where no depth keeps the floor, as propose falls back to depth r
        best = (0.0, r, None, 1.0 + cum_priors[r], wc[r, VMS] + wc[r, DMS], wc[r, VJ] + wc[r, DJ])
    out = np.empty(4)
    top = widths[widths.shape[0] - 1]
    at = n if n < top else top
    for shape in shapes:
        tree = shape.tree
        if tree.nodes > max_nodes:
            break
        tree_price_nb(widths, costs, at, tree.nodes, tree.depth, shape.passes, False, factor, out)
        tokens = nf * tree.expected_tokens
        ms = out[VMS] + out[DMS]
        if tokens / ms < floor_rate:
            continue
        j = out[VJ] + out[DJ]
        eff = tokens / j
        if eff > best[0]:
            best = (eff, tree.nodes, tree, tree.expected_tokens, ms, j)
    _, k, tree, expected, ms, j = best
    if tree is None:
        return _plan("plain" if k == 0 else "chain", Tree.chain(k, expected), expected, n, ms, j, note)
    return _plan("tree", tree, expected, n, ms, j, note)


def _plan(kind, tree, expected, n, ms, j, note) -> TreePlan:
    return TreePlan(kind=kind, nodes=tree.nodes, depth=tree.depth, tree=tree, expected_tokens=float(expected),
                    step_ms=float(ms), step_j=float(j), tokens_per_j=float(n * expected / j), note=note)
