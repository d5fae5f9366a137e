"""Best draft trees and the expected tokens of any tree (docs/planner.md#draft-trees).

A tree's node is a path of draft ranks from the root; with ``a = rank_acceptance`` (shape
(D, R)), the node's *path product* is the product of ``a[depth - 1, rank - 1]`` along its path,
the probability that the verify step accepts it. The tree emits ``1 + sum of path products``
tokens per step. The best tree of ``N`` nodes and depth at most ``max_depth`` holds the ``N``
largest path products (a product never exceeds its parent's, so they form a tree), taken in
one total order: larger product first; equal products by rank path from the root, the first
differing rank lower first, and a path before its extensions. That order is greedy: the best
tree of ``N`` nodes is the first ``N`` nodes of the order (:func:`greedy_order`).
"""

from __future__ import annotations

import numpy as np

from specsim._checks import MAX_TREE_DEPTH, MAX_TREE_NODES, int_problem
from specsim.calibration import calibration
from specsim.errors import CalibrationError, TreeError
from specsim.tree._kernels import greedy_order_nb, path_products_nb
from specsim.tree._types import Tree, TreeOrder, _whole_numbers


def checked_rank_acceptance(value) -> np.ndarray:
    """``value`` (array_like, shape (D, R)) as the calibration checks it (a read-only
    C-contiguous float64 array: each cell a probability, each row summing to at most 1, 1..64
    depths, 1..16 ranks), its refusal as a TreeError naming every bad cell."""
    try:
        return calibration.checked_rank_acceptance(value, "rank_acceptance")
    except CalibrationError as e:
        raise TreeError(e.headline, e.problems) from None


def _count(value, name, low, high, why=""):
    problem = int_problem(value, name, low, high, why)
    if problem:
        raise TreeError(problem)
    return int(value)


def greedy_order(rank_acceptance, nodes: int = MAX_TREE_NODES, max_depth: int = MAX_TREE_DEPTH) -> TreeOrder:
    """The first ``nodes`` paths of depth at most ``max_depth`` in best-tree order (the module's
    docstring): ``greedy_order(a, M).tree(N) == best_tree(a, N, max_depth)`` for every N <= M.

    Parameters
    ----------
    rank_acceptance : array_like of float, shape (D, R)
    nodes : int
        1..256 (``MAX_TREE_NODES``).
    max_depth : int
        1..64 (``MAX_TREE_DEPTH``); depths past the table's D rows are never drafted.

    Returns
    -------
    TreeOrder
        Fewer than ``nodes`` entries only where fewer paths exist (``R = 1``: one per depth).
    """
    a = checked_rank_acceptance(rank_acceptance)
    nodes = _count(nodes, "nodes", 1, MAX_TREE_NODES, "the most nodes a tree may hold")
    max_depth = _count(max_depth, "max_depth", 1, MAX_TREE_DEPTH, "the deepest a tree may go")
    parents = np.empty(nodes, dtype=np.int64)
    ranks = np.empty(nodes, dtype=np.int64)
    products = np.empty(nodes)
    depths = np.empty(nodes, dtype=np.int64)
    m = greedy_order_nb(a, nodes, max_depth, parents, ranks, products, depths)
    return TreeOrder(parents[:m], ranks[:m], products[:m], depths[:m], min(max_depth, a.shape[0]))


def best_tree(rank_acceptance, nodes: int, max_depth: int) -> Tree:
    """The best draft tree of ``nodes`` nodes and depth at most ``max_depth``: the ``nodes``
    largest path products, in best-tree order (the module's docstring).

    Parameters
    ----------
    rank_acceptance : array_like of float, shape (D, R)
        ``[d - 1, r - 1]``: P(the target's token at depth d, the path to it accepted, is the
        draft's rank-r candidate); rows sum to at most 1.
    nodes : int
        1..256; fewer come back only where fewer paths exist (``R = 1`` and fewer depths).
    max_depth : int
        1..64; the table's D rows bound it too.

    Returns
    -------
    Tree
        With ``expected_tokens = 1 + sum of its path products``.

    Raises
    ------
    TreeError
        A bad table (naming the cell), or ``nodes`` / ``max_depth`` outside their ranges.
    """
    return greedy_order(rank_acceptance, nodes, max_depth).tree(nodes)


def tree_problem(parents, ranks, depths: int, max_ranks: int) -> str | None:
    """The first rule the tree ``(parents, ranks)`` breaks over a table of ``depths`` rows and
    ``max_ranks`` columns, naming the node (0-based, in the order given), or None."""
    if len(parents) != len(ranks):
        return f"a tree needs one rank per node: {len(parents)} parents, {len(ranks)} ranks"
    if len(parents) > MAX_TREE_NODES:
        return f"the tree has {len(parents)} nodes: at most {MAX_TREE_NODES} (see docs/limits.md)"
    node_depth = []
    seen = {}
    for i, (p, r) in enumerate(zip(parents, ranks)):
        if not -1 <= p < i:
            where = "itself or a later node" if p >= i else "no node"
            return (f"node {i}: parent {p} is {where}: list each node after its parent (-1 = the root), "
                    "with no cycles and no missing parents")
        if not 1 <= r <= max_ranks:
            return f"node {i}: rank {r} is outside 1..{max_ranks} (the rank-acceptance table's ranks; 1 = top)"
        d = 1 if p < 0 else node_depth[p] + 1
        if d > depths:
            return (f"node {i} is at depth {d}, deeper than the rank-acceptance table's {depths} depths: "
                    "fit or give deeper rows, or a shallower tree")
        if (p, r) in seen:
            return f"node {i} repeats node {seen[p, r]}: the same rank {r} under the same parent {p}"
        seen[p, r] = i
        node_depth.append(d)
    return None


def checked_tree(rank_acceptance, parents, ranks):
    """``(a, parents int64[N], ranks int64[N])`` checked, or TreeError naming the bad node."""
    a = checked_rank_acceptance(rank_acceptance)
    parents = _whole_numbers(parents, "parent")
    ranks = _whole_numbers(ranks, "rank")
    problem = tree_problem(parents, ranks, a.shape[0], a.shape[1])
    if problem:
        raise TreeError(problem)
    return a, np.array(parents, dtype=np.int64), np.array(ranks, dtype=np.int64)


def expected_tokens(rank_acceptance, parents, ranks) -> float:
    """Tokens one verify step of the tree ``(parents, ranks)`` emits per sequence: ``1 + the sum
    over nodes of the path product``, summed in node order.

    Parameters
    ----------
    rank_acceptance : array_like of float, shape (D, R)
    parents : sequence of int, length N
        Each node's parent: an earlier node's index or -1 (the root).
    ranks : sequence of int, length N
        Each node's 1-based rank, in 1..R.

    Raises
    ------
    TreeError
        Naming the bad node: a parent not listed before it, a rank outside 1..R, a node deeper
        than the table's D rows, a rank repeated under one parent, more than 256 nodes.
    """
    a, p, r = checked_tree(rank_acceptance, parents, ranks)
    return float(path_products_nb(a, p, r, np.empty(p.shape[0])))


def tree_with_tokens(tree: Tree, rank_acceptance) -> Tree:
    """``tree`` with its expected tokens under ``rank_acceptance`` (checked as
    :func:`expected_tokens` checks)."""
    return Tree(tree.parents, tree.ranks, expected_tokens(rank_acceptance, tree.parents, tree.ranks))
