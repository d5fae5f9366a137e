"""Draft trees as values: :class:`Tree` (one tree, frozen) and :class:`TreeOrder` (the greedy
order every best tree is a prefix of), and the sizes of the best-tree kernel's workspace."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from specsim._checks import is_int, is_number, number_float, number_problem, show
from specsim._jit import jit
from specsim.errors import TreeError


def _whole_numbers(values, name) -> tuple:
    """``values`` (a sequence of whole numbers, one per node) as a tuple of ints, or TreeError
    naming the node."""
    if isinstance(values, (str, bytes)) or not hasattr(values, "__len__"):
        raise TreeError(f"{name}s must be a list of whole numbers, one per node, got {show(values)}")
    items = tuple(values.tolist() if isinstance(values, np.ndarray) else values)
    if all(type(v) is int for v in items):
        return items
    for i, v in enumerate(items):
        if not is_int(v):
            raise TreeError(f"{name} of node {i} = {show(v)} must be a whole number")
    return tuple(int(v) for v in items)


@dataclass(frozen=True)
class Tree:
    """A draft tree: nodes listed parents first, each a path of draft ranks from the root (the
    last accepted token).

    Attributes
    ----------
    parents : tuple of int
        Each node's parent: the index of an earlier node, or -1 for the root.
    ranks : tuple of int
        Each node's draft rank under its parent, 1-based (1 = the draft's top candidate).
    expected_tokens : float
        Tokens one verify step of this tree emits per sequence: 1 + the sum over nodes of the
        product of ``rank_acceptance[depth - 1, rank - 1]`` along the node's path; NaN for a
        tree built without a rank-acceptance table.
    depth : int
        The deepest node's depth (0 for the empty tree: plain decoding).
    nodes : int
        How many draft nodes (the verify step reads ``nodes + 1`` rows per sequence).
    level_sizes : tuple of int
        Nodes at depths 1..depth.
    is_chain : bool
        Every node rank 1, one per level (the empty tree too): a chain of ``nodes`` drafts.
    """

    parents: tuple
    ranks: tuple
    expected_tokens: float = math.nan
    depth: int = field(init=False)
    nodes: int = field(init=False)
    level_sizes: tuple = field(init=False)
    is_chain: bool = field(init=False)

    def __post_init__(self):
        parents = _whole_numbers(self.parents, "parent")
        ranks = _whole_numbers(self.ranks, "rank")
        if not (is_number(self.expected_tokens) or self.expected_tokens is None):
            raise TreeError(f"expected_tokens = {show(self.expected_tokens)} must be a number (NaN: not known)")
        if len(parents) != len(ranks):
            raise TreeError(f"a tree needs one rank per node: {len(parents)} parents, {len(ranks)} ranks")
        if self.expected_tokens is not None and not math.isnan(number_float(self.expected_tokens)):
            # 1 + a sum of one path product (a probability) per node
            problem = number_problem(self.expected_tokens, "expected_tokens", 1.0, len(parents) + 1.0)
            if problem:
                raise TreeError(f"{problem}: a tree of {len(parents)} nodes emits 1 + one probability per node "
                                "(NaN: not known)")
        if ranks and min(ranks) < 1:
            i = next(i for i, r in enumerate(ranks) if r < 1)
            raise TreeError(f"node {i}: rank {ranks[i]} is not a draft rank (ranks are 1-based)")
        depths = []
        add = depths.append
        for i, p in enumerate(parents):
            if p < 0:
                if p != -1:
                    raise TreeError(f"node {i}: parent {p} is not an earlier node or -1 (the root): list parents "
                                    "before their children")
                add(1)
            elif p < i:
                add(depths[p] + 1)
            else:
                raise TreeError(f"node {i}: parent {p} is not an earlier node or -1 (the root): list parents "
                                "before their children")
        depth = max(depths, default=0)
        sizes = [0] * depth
        for d in depths:
            sizes[d - 1] += 1
        object.__setattr__(self, "parents", parents)
        object.__setattr__(self, "ranks", ranks)
        object.__setattr__(self, "expected_tokens",
                           math.nan if self.expected_tokens is None else float(self.expected_tokens))
        object.__setattr__(self, "depth", depth)
        object.__setattr__(self, "nodes", len(parents))
        object.__setattr__(self, "level_sizes", tuple(sizes))
        object.__setattr__(self, "is_chain", depth == len(parents) and (not ranks or max(ranks) == 1))

    @classmethod
    def _trusted(cls, parents, ranks, expected_tokens, depth, level_sizes, is_chain) -> "Tree":
        """A tree whose structure a kernel built (parents first, ranks >= 1), with its figures:
        no check, no recount."""
        tree = object.__new__(cls)
        for name, value in (("parents", parents), ("ranks", ranks), ("expected_tokens", float(expected_tokens)),
                            ("depth", depth), ("nodes", len(parents)), ("level_sizes", level_sizes),
                            ("is_chain", is_chain)):
            object.__setattr__(tree, name, value)
        return tree

    @classmethod
    def chain(cls, k: int, expected_tokens: float = math.nan) -> "Tree":
        """The chain of ``k`` drafts (``k = 0``: the empty tree, plain decoding)."""
        return cls(tuple(range(-1, k - 1)), (1,) * k, expected_tokens)

    def node_depths(self) -> tuple:
        """Each node's depth (1 = a child of the root)."""
        out = []
        for p in self.parents:
            out.append(1 if p < 0 else out[p] + 1)
        return tuple(out)

    def level_parents(self) -> tuple:
        """For levels 1..depth, how many nodes one level up have children there (the root for
        level 1): the rows per sequence of each drafting pass."""
        if not self.nodes:
            return ()
        depths = self.node_depths()
        with_children = set(self.parents)
        counts = [0] * self.depth
        counts[0] = 1
        for i, d in enumerate(depths):
            if i in with_children:
                counts[d] += 1  # node i at depth d feeds level d + 1 (index d)
        return tuple(counts)

    def to_dict(self) -> dict:
        """A JSON-ready dict."""
        return {"parents": list(self.parents), "ranks": list(self.ranks),
                "expected_tokens": None if math.isnan(self.expected_tokens) else self.expected_tokens,
                "depth": self.depth, "nodes": self.nodes, "level_sizes": list(self.level_sizes),
                "is_chain": self.is_chain}


@dataclass(frozen=True)
class TreeOrder:
    """The greedy order of a rank-acceptance table's paths (``greedy_order``): every best tree of
    ``N`` nodes is its first ``N`` nodes, so a planner computes it once for all ``N``.

    Attributes
    ----------
    parents, ranks : ndarray(int64, ndim=1), shape (M,)
        Node ``i``'s parent (an earlier index, or -1) and 1-based rank, in the order.
    products : ndarray(float64, ndim=1), shape (M,)
        Node ``i``'s path product, non-increasing along the order.
    depths : ndarray(int64, ndim=1), shape (M,)
        Node ``i``'s depth.
    max_depth : int
        The depth bound the order was built under (already limited to the table's depths).
    """

    parents: np.ndarray
    ranks: np.ndarray
    products: np.ndarray
    depths: np.ndarray
    max_depth: int

    def __len__(self) -> int:
        return int(self.parents.shape[0])

    def tree(self, nodes: int) -> Tree:
        """The best tree of ``nodes`` nodes (at most ``len(self)``): the first ``nodes`` of the
        order, its expected tokens ``1 + sum(products[:nodes])`` summed in order."""
        if not is_int(nodes) or nodes < 0:
            raise TreeError(f"nodes = {show(nodes)} must be a whole number >= 0")
        n = min(int(nodes), len(self))
        if n == 0:
            return Tree((), (), 1.0)
        depths = self.depths[:n]
        ranks = self.ranks[:n]
        depth = int(depths.max())
        sizes = np.bincount(depths, minlength=depth + 1)[1:]
        # np.cumsum adds left to right, as expected_tokens sums (np.sum pairs)
        total = float(np.cumsum(self.products[:n])[-1])
        return Tree._trusted(tuple(self.parents[:n].tolist()), tuple(ranks.tolist()), 1.0 + total, depth,
                             tuple(sizes.tolist()), bool(depth == n and ranks.max() == 1))


@jit(forceinline=True)
def order_workspace_sizes(nodes, depth, ranks):
    """``(int64 entries, float64 entries)`` of the best-tree kernel's workspace for ``nodes``
    nodes over a table of ``depth`` rows and ``ranks`` columns: the only place it is sized.

    Candidates: the first child of the root, then at most two per node taken (``2 nodes + 1``).
    int64: each node's depth (``nodes``); the child order of the root and of each node
    (``(nodes + 1) ranks``); the heap of candidate ids (``nodes + 1``: each node taken adds at
    most one to it); each candidate's parent, depth, position and rank; two rank paths for ties
    (``depth`` each); each depth's ranks by acceptance (``depth ranks``). float64: each
    candidate's path product."""
    cands = 2 * nodes + 1
    return nodes + (nodes + 1) * ranks + (nodes + 1) + 4 * cands + 2 * depth + depth * ranks, cands
