"""What one step of a draft tree costs, read from a cost table (docs/planner.md#pricing): the one
home of tree pricing, used by the planner, the command line and the simulator.

At width ``n`` a tree of ``N`` nodes and depth ``D``:

* a chain (every node rank 1, one per level) costs exactly the table's cell ``(n, N)``, bit
  for bit as the chain planner prices it;
* a branching tree verifies as the chain of ``N`` drafts (``N + 1`` rows per sequence) times the
  tree-attention factor (default :data:`TREE_ATTENTION_FACTOR`), on both ms and J, and drafts one
  pass per level ``l = 1..D`` at ``n * p_l`` rows, where ``p_l`` is the number of nodes at level
  ``l - 1`` with children (the root for ``l = 1``); each pass costs the cell
  ``(n * p_l, D)``'s draft over ``D``: the table's per-pass draft cost at that many rows, read
  with its width interpolation (rows past the widest measured width take the widest's cost, the
  table's rule, which underprices such passes).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from specsim._checks import INT64_MAX, check_int, number_problem
from specsim.errors import TableError, TreeError
from specsim.table import CostTable
from specsim.table._kernels import context_slice_nb
from specsim.table.cost_table import check_context, table_arrays
from specsim.tree._kernels import tree_price_nb
from specsim.tree._types import Tree

# Widths a price takes: any the planner takes.
# vLLM PR #20401 measured its tree-attention kernel 7-12% slower than its chain kernel at equal
# query length (context 1024, 4 queries: 33.4 us against 29.9 us). The upper side, applied to
# the whole verify step (attention is only part of it), so the factor overstates the cost of a
# branching tree's verify: a tree that pays under it pays by at least as much in that kernel.
TREE_ATTENTION_FACTOR = 1.10
# The widest factor taken: a tree verify ten times the chain's is a kernel to measure, not model.
MAX_TREE_ATTENTION_FACTOR = 10.0


class TreeCost(NamedTuple):
    """One step of a tree at one width: verify and draft costs in ms and J."""

    verify_ms: float
    verify_j: float
    draft_ms: float
    draft_j: float

    @property
    def step_ms(self) -> float:
        return self.verify_ms + self.draft_ms

    @property
    def step_j(self) -> float:
        return self.verify_j + self.draft_j


def check_tree_attention_factor(value) -> float:
    """``value`` as a float in [1, 10], or TreeError."""
    problem = number_problem(value, "tree_attention_factor", 1.0, MAX_TREE_ATTENTION_FACTOR)
    if problem:
        raise TreeError(f"{problem}: it multiplies a branching tree's verify cost (1 = the chain kernel's; "
                        f"default {TREE_ATTENTION_FACTOR})")
    return float(value)


def depth_problem(nodes: int, depth: int, max_k: int) -> str | None:
    """Why a table whose deepest verify is ``max_k`` cannot price a tree of ``nodes`` nodes and
    depth ``depth``, or None."""
    if nodes > max_k:
        return (f"the table's deepest verify is k = {max_k}: a tree of {nodes} nodes needs {nodes + 1} rows per "
                "sequence; model or measure deeper")
    if depth > max_k:
        return (f"the table's deepest verify is k = {max_k}: a tree of depth {depth} drafts {depth} passes; "
                "model or measure deeper")
    return None


def level_passes(tree: Tree) -> np.ndarray:
    """``int64[D]``: the rows per sequence of each drafting pass (:meth:`Tree.level_parents`)."""
    return np.array(tree.level_parents(), dtype=np.int64)


def tree_step_cost(table: CostTable, tree: Tree, n: int, *, context=None,
                   tree_attention_factor: float = TREE_ATTENTION_FACTOR) -> TreeCost:
    """The cost of one step of ``tree`` at width ``n`` (the module's docstring).

    Parameters
    ----------
    table : CostTable
    tree : Tree
    n : int
        Batch width, >= 0.
    context : float, optional
        Mean KV tokens per sequence: on a table with a context axis, the grid there.
    tree_attention_factor : float
        In [1, 10]; multiplies a branching tree's verify.

    Raises
    ------
    TreeError
        A tree of more nodes, or deeper, than the table's deepest verify; a bad argument.
    """
    if not isinstance(table, CostTable):
        raise TreeError(f"table must be a CostTable, got {type(table).__name__}")
    if not isinstance(tree, Tree):
        raise TreeError(f"tree must be a Tree, got {type(tree).__name__}")
    n = check_int(n, "n", TreeError, 0, INT64_MAX)
    factor = check_tree_attention_factor(tree_attention_factor)
    problem = depth_problem(tree.nodes, tree.depth, table.max_k)
    if problem:
        raise TreeError(problem)
    widths, costs = table_arrays(table)  # writable copies: one compiled kernel for every caller
    if context is not None:
        try:
            c = check_context(context)
        except TableError as e:
            raise TreeError(str(e)) from None
        if table.contexts.size:
            context_slice_nb(table.contexts, table.context_costs, c, costs)
    out = np.empty(4)
    tree_price_nb(widths, costs, min(n, int(widths[-1])), tree.nodes, tree.depth, level_passes(tree),
                  tree.is_chain, factor, out)
    return TreeCost(*map(float, out))
