"""Draft trees in the simulated server (docs/simulation.md#draft-trees): what a ``tree`` policy
verifies at every width and the arrays the engine reads for it (:class:`~specsim.sim.bundles.TreeArrays`).

Every tree a run verifies is a prefix of one greedy order of the calibration's rank-acceptance
table (``specsim.tree.greedy_order``): ``tree:N,D`` verifies the best tree of N nodes and depth
at most D (the order's first N nodes), ``tree:auto`` what ``Planner.propose_tree`` chooses at
each width (its trees are prefixes of the order it builds; its chains are the calibration's).
Branching trees are priced by ``specsim.tree.pricing``'s rule at every width and measured
context, once per run. On a table with a context axis ``tree:auto`` plans each step at the
batch's mean context (the engine's ``plan_depths_nb``), as ``propose`` and the other chain
planner policies do; elsewhere its plan is the reference grid's, per width.
"""

from __future__ import annotations

import numpy as np

from specsim.calibration.spread import centres
from specsim.errors import PolicyError, TreeError
from specsim.plan._trees import NO_TREE_TABLE
from specsim.plan._types import table_arrays
from specsim.plan.depth_table import depth_by_width
from specsim.plan.planner import Planner
from specsim.sim.bundles import TreeArrays
from specsim.tree._kernels import tree_price_nb
from specsim.tree._types import TreeOrder
from specsim.tree.best import checked_tree, greedy_order
from specsim.tree.engines import tree_from_sglang, tree_from_trtllm
from specsim.tree.pricing import TREE_ATTENTION_FACTOR, level_passes

# tree:auto's bounds, Planner.propose_tree's defaults: the most nodes and the deepest tree.
AUTO_MAX_NODES = 64
AUTO_MAX_DEPTH = 8

BRANCHING = 1  # TreeArrays.kind_at: a branching tree
CHAIN_SHAPED = 2  # a tree whose prefix is a chain: ranks drawn, priced as the chain


def tree_refusal(pol, calibration, k_cap: int, budget, replayed: bool) -> None:
    """Refuse a tree policy the run cannot serve, naming why: no ``[tree]`` table, a replayed
    acceptance trace, more nodes than ``k_max`` or the token ``budget`` (None: no cap) holds."""
    if calibration.rank_acceptance is None:
        raise PolicyError(f"policy {pol}: {NO_TREE_TABLE} (fit one with calib fit --drafts-log or --rank-rates; "
                          "docs/calibration.md#draft-trees)")
    if replayed:
        raise PolicyError(f"policy {pol}: an acceptance trace replays chain outcomes; trees draw from the "
                          "calibration's [tree] table: drop the acceptance trace")
    nodes = pol.nodes
    if nodes and nodes > k_cap:
        raise PolicyError(f"policy {pol}: a tree of {nodes} nodes holds {nodes} KV slots per sequence but the server "
                          f"drafts at most k_max = {k_cap}: use tree:{k_cap} or raise k_max")
    if nodes and budget is not None and nodes + 1 > budget:
        raise PolicyError(f"policy {pol}: a tree of {nodes} nodes takes {nodes + 1} rows of the token budget per "
                          f"sequence, past max_num_batched_tokens = {budget}: use at most tree:{budget - 1}")


def _order(pol, a, table_max_k: int):
    """The greedy order every tree the policy verifies is a prefix of (a given tree: itself)."""
    if pol.shape is not None or pol.settings:
        try:
            build = tree_from_trtllm if pol.settings[:1] == ("trtllm",) else tree_from_sglang
            shape = pol.shape if pol.shape is not None else build(*pol.settings[1:], a)
            _, parents, ranks = checked_tree(a, shape.parents, shape.ranks)
        except TreeError as e:
            raise PolicyError(f"policy {pol}: {e} (against the calibration's [tree] table)") from None
        return TreeOrder(parents, ranks, np.zeros(parents.shape[0]), np.array(shape.node_depths(), np.int64),
                         shape.depth)
    if pol.nodes:
        order = greedy_order(a, pol.nodes, pol.tree_depth)
        if len(order) < pol.nodes:
            raise PolicyError(f"policy {pol}: the [tree] table's {a.shape[0]} depths x {a.shape[1]} ranks hold only "
                              f"{len(order)} nodes of depth <= {pol.tree_depth}: ask for fewer nodes")
        return order
    return greedy_order(a, min(table_max_k, 256), AUTO_MAX_DEPTH)  # propose_tree's shapes (plan._trees)


def _auto_max_nodes(k_cap: int, budget) -> int:
    """``tree:auto``'s most nodes: :data:`AUTO_MAX_NODES`, ``k_max`` and the token budget less one."""
    return min(AUTO_MAX_NODES, max(k_cap, 1), AUTO_MAX_NODES if budget is None else max(budget - 1, 1))


def _auto_memo(table, calibration, opts, seqs: int, k_cap: int, budget):
    """``tree:auto``'s nodes and whether each is a branching tree, at every width 0..seqs."""
    memo = np.zeros(seqs + 1, dtype=np.int64)
    branching = np.zeros(seqs + 1, dtype=np.bool_)
    max_nodes = _auto_max_nodes(k_cap, budget)
    planner = Planner(table, calibration, opts.slack, opts.max_seqs, memo=False)
    for n in range(1, seqs + 1):
        plan = planner.propose_tree(n, max_nodes=max_nodes, max_depth=AUTO_MAX_DEPTH)
        memo[n] = plan.nodes
        branching[n] = plan.kind == "tree"
    return memo, branching


def tree_policy_arrays(pol, table, calibration, opts, contexts):
    """``(depth_memo, TreeArrays)`` of a tree policy's run: its nodes per sequence at every width
    (clamped as the server clamps depths), and the engine's arrays. ``opts``: the run's
    :class:`~specsim.sim.options.ResolvedOptions` (its ``k_max`` the run's depth cap);
    ``contexts``: the measured contexts the run prices at, empty without context pricing."""
    seqs, k_cap, budget = opts.max_num_seqs, opts.k_max, opts.max_num_batched_tokens
    a = calibration.rank_acceptance
    order = _order(pol, a, table.max_k)
    if pol.nodes:
        memo = depth_by_width(pol, table, calibration, opts, seqs, k_cap)
        branching = np.ones(seqs + 1, dtype=np.bool_)
    else:
        memo, branching = _auto_memo(table, calibration, opts, seqs, k_cap, budget)
        # the server's clamps (depth_by_width's): k_max, the speculation cap, the row budget
        np.minimum(memo, k_cap, out=memo)
        widths = np.arange(seqs + 1)
        if opts.max_seqs is not None:
            memo[widths > opts.max_seqs] = 0
        if opts.row_budget is not None:
            np.minimum(memo, opts.row_budget // np.maximum(widths, 1), out=memo)
        memo[0] = 0
    trees = {}  # nodes -> the order's prefix
    kind_at = np.zeros(seqs + 1, dtype=np.int64)
    for n in range(1, seqs + 1):
        v = int(memo[n])
        if v == 0 or not branching[n]:
            continue
        tree = trees.get(v)
        if tree is None:
            tree = trees[v] = order.tree(v)
        kind_at[n] = CHAIN_SHAPED if tree.is_chain else BRANCHING
    live = not pol.nodes and not pol.settings and pol.shape is None and len(contexts) > 0
    auto = np.zeros(3, dtype=np.int64)
    shape_nodes, shape_expected = np.zeros(0, dtype=np.int64), np.zeros(0)
    kind_of = np.zeros(1, dtype=np.int64)
    if live:
        # tree:auto at the step's context (the engine plans each step, as propose's policies do):
        # every branching prefix is a candidate, priced at every width and context; the memo above
        # stays the reference grid's plan, which the run no longer reads.
        max_nodes = _auto_max_nodes(k_cap, budget)
        auto[:] = (1, max_nodes, AUTO_MAX_DEPTH)
        kind_of = np.zeros(len(order) + 1, dtype=np.int64)
        nodes, expected = [], []
        for v in range(1, len(order) + 1):
            tree = trees.get(v) or order.tree(v)
            kind_of[v] = CHAIN_SHAPED if tree.is_chain else BRANCHING
            if not tree.is_chain and v <= min(max_nodes, table.max_k):
                trees[v] = tree
                if v >= 2:
                    nodes.append(v)
                    expected.append(tree.expected_tokens)
        shape_nodes, shape_expected = np.array(nodes, dtype=np.int64), np.array(expected, dtype=np.float64)
    child = np.full((len(order) + 1, a.shape[1]), -1, dtype=np.int64)
    reach = _flattened_prefix(order.parents) if pol.settings[:1] == ("vllm-flattened",) else len(order)
    for i, (p, r) in enumerate(zip(order.parents.tolist()[:reach], order.ranks.tolist())):
        child[p + 1, r - 1] = i
    sp = calibration.spread
    centre = np.zeros((0, 0))
    if sp is not None and sp.logit_sd != 0.0:
        centre = np.ascontiguousarray(centres(a, sp.logit_sd))
    factor = TREE_ATTENTION_FACTOR
    prices = _prices(table, contexts, seqs, {v: t for v, t in trees.items() if not t.is_chain}, factor)
    return memo, TreeArrays(child, np.ascontiguousarray(a, dtype=np.float64), centre, kind_at, prices,
                            np.array([factor]), np.zeros(1, dtype=np.int64), auto, shape_nodes, shape_expected,
                            kind_of)


def _flattened_prefix(parents) -> int:
    """How many of a tree's first nodes form one path (each the child of the one before): all a
    verifier that reads the nodes as a chain in list order can accept."""
    m = 0
    while m < len(parents) and parents[m] == m - 1:
        m += 1
    return m


def _prices(table, contexts, seqs: int, trees: dict, factor: float) -> np.ndarray:
    """``float64[C', seqs + 1, K + 1, 4]``: each branching tree of ``trees`` (by nodes) priced at
    every width, on the reference grid (C' = 1) or at each measured context; NaN elsewhere."""
    widths, costs = table_arrays(table)
    grids = [costs] if not len(contexts) else [np.array(table.context_costs[c]) for c in range(len(contexts))]
    out = np.full((len(grids), seqs + 1, table.max_k + 1, 4), np.nan)
    top = int(widths[-1])
    cell = np.empty(4)
    for c, grid in enumerate(grids):
        grid = np.ascontiguousarray(grid, dtype=np.float64)
        for v, tree in trees.items():
            passes = level_passes(tree)
            for n in range(seqs + 1):
                tree_price_nb(widths, grid, min(n, top), tree.nodes, tree.depth, passes, False, factor, cell)
                out[c, n, v] = cell
    return out
