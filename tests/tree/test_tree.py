"""Draft trees (docs/planner.md#draft-trees): best trees against the plain greedy and the sort of
every path in tests/reference.py and against Sequoia's dynamic program (re-derived here), the
expected tokens of any tree, the engines' trees, and tree prices."""

from __future__ import annotations

import functools
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from specsim import Planner
from specsim.errors import PlanError, TreeError
from specsim.plan._trees import NO_TREE_TABLE
from specsim.tree import (Tree, best_tree, expected_tokens, greedy_order, tree_from_sglang, tree_from_trtllm,
                          tree_from_vllm, tree_step_cost)
from tests.reference import (ref_all_paths_order, ref_expected_tokens, ref_greedy_order, ref_propose_tree,
                             ref_tree_price)
from tests.fixtures import calibrations, table, tables


def assert_order_matches(a, nodes, max_depth):
    got = greedy_order(a, nodes, max_depth)
    parents, ranks, products = ref_greedy_order(np.asarray(a).tolist(), nodes, max_depth)
    assert got.parents.tolist() == parents
    assert got.ranks.tolist() == ranks
    assert got.products.tolist() == products  # the same products, multiplied in the same order
    tree = best_tree(a, nodes, max_depth)
    assert tree.parents == tuple(parents) and tree.ranks == tuple(ranks)
    assert tree.expected_tokens == pytest.approx(1.0 + math.fsum(products), rel=0, abs=1e-12)
    return tree


# --- best trees: edge cases -------------------------------------------------------------------------------

def test_one_node_is_the_best_first_draft():
    a = [[0.3, 0.5, 0.1], [0.9, 0.0, 0.0]]
    tree = assert_order_matches(a, 1, 8)
    assert (tree.parents, tree.ranks, tree.depth, tree.nodes) == ((-1,), (2,), 1, 1)
    assert tree.expected_tokens == 1.5 and not tree.is_chain


def test_one_rank_gives_the_chain_and_no_more_nodes_than_depths():
    a = [[0.8], [0.7], [0.6]]
    tree = assert_order_matches(a, 10, 8)
    assert tree.is_chain and tree.nodes == 3 and tree.level_sizes == (1, 1, 1)
    assert tree.expected_tokens == 1.0 + 0.8 + 0.8 * 0.7 + 0.8 * 0.7 * 0.6
    assert best_tree(a, 10, 2).nodes == 2


def test_depth_one_takes_the_best_ranks_of_the_first_row():
    a = [[0.1, 0.4, 0.2, 0.3], [1.0, 0.0, 0.0, 0.0]]
    tree = assert_order_matches(a, 3, 1)
    assert tree.ranks == (2, 4, 3) and tree.parents == (-1, -1, -1) and tree.depth == 1


def test_wide_and_deep_256_nodes_16_ranks():
    rng = np.random.default_rng(3)
    a = rng.dirichlet(np.ones(17), size=12)[:, :16]
    tree = assert_order_matches(a, 256, 12)
    assert tree.nodes == 256
    assert_order_matches(a, 256, 3)


def test_deep_tables_reach_depth_64():
    a = [[0.9, 0.1]] * 64
    tree = assert_order_matches(a, 256, 64)
    assert tree.nodes == 256 and tree.depth < 64  # branches near the root beat the deepest rank-1 paths
    chain = assert_order_matches([[1.0]] * 64, 256, 64)
    assert (chain.nodes, chain.depth, chain.is_chain) == (64, 64, True)


def test_the_package_exports_the_tree_names():
    import specsim
    from specsim.plan import TreePlan

    assert (specsim.Tree, specsim.best_tree, specsim.expected_tokens) == (Tree, best_tree, expected_tokens)
    assert (specsim.TreePlan, specsim.TreeError) == (TreePlan, TreeError)


def test_rows_summing_to_exactly_one_and_ties_go_to_lower_ranks_then_shallower():
    a = [[0.25, 0.25, 0.25, 0.25]] * 3
    tree = assert_order_matches(a, 6, 3)
    # 0.25 each at depth 1 (ranks 1..4), then 0.0625 paths: (1, 1) before (1, 2) before (2, 1)
    assert tree.ranks == (1, 2, 3, 4, 1, 2) and tree.parents == (-1, -1, -1, -1, 0, 0)
    one = [[1.0, 0.0], [1.0, 0.0]]
    tree = assert_order_matches(one, 3, 2)
    # equal products 1.0 down the chain (a path before its extensions), then products 0: (1, 2)
    # before (2,), the first rank deciding
    assert tree.parents == (-1, 0, 0) and tree.ranks == (1, 1, 2)


def test_zeros_are_nodes_of_product_zero_in_path_order():
    a = [[0.0, 0.0], [0.0, 0.0]]
    tree = assert_order_matches(a, 6, 2)
    assert tree.expected_tokens == 1.0 and tree.nodes == 6
    assert_order_matches([[0.5, 0.0, 0.0], [0.0, 0.3, 0.0]], 9, 2)


def test_products_that_round_equal_under_one_parent_go_by_rank():
    # 2**-1074 times anything below 1 rounds to 0 or to itself: siblings whose acceptances differ
    # get equal products, which the order breaks by rank, not by the acceptance.
    tiny = 5e-324
    a = [[tiny, 0.0], [0.3, 0.6]]
    assert_order_matches(a, 4, 2)


# --- best trees against independent computations -----------------------------------------------------

PROB = st.one_of(st.sampled_from([0.0, 0.5, 0.25, 1.0]), st.floats(0.0, 1.0))


@st.composite
def rank_tables(draw, max_depths=6, max_ranks=5, independent=None):
    """Depth x rank tables whose rows sum to at most 1 (the calibration's rule); with
    ``independent`` every row is the same (Sequoia's depth-independent vector)."""
    ranks = draw(st.integers(1, max_ranks))
    depths = draw(st.integers(1, max_depths))
    same = draw(st.booleans()) if independent is None else independent

    def row():
        raw = draw(st.lists(PROB, min_size=ranks, max_size=ranks))
        total = sum(raw)
        scale = draw(st.sampled_from([1.0, 0.9, 0.5])) / total if total > 1.0 else 1.0
        return [min(1.0, v * scale) for v in raw]

    first = row()
    return [first] * depths if same else [first] + [row() for _ in range(depths - 1)]


@settings(max_examples=200, deadline=None)
@given(rank_tables(), st.integers(1, 40), st.integers(1, 8))
def test_best_tree_matches_the_plain_greedy(a, nodes, max_depth):
    assert_order_matches(a, nodes, max_depth)


@settings(max_examples=200, deadline=None)
@given(rank_tables(max_depths=3, max_ranks=3), st.integers(1, 39), st.integers(1, 3))
def test_best_tree_is_the_first_paths_of_all_paths_sorted(a, nodes, max_depth):
    want = ref_all_paths_order(a, nodes, max_depth)
    tree = best_tree(a, nodes, max_depth)
    paths = []
    for p, r in zip(tree.parents, tree.ranks):
        paths.append((paths[p] if p >= 0 else ()) + (r,))
    assert paths == [p for p, _ in want]


def sequoia_best(p, nodes, depth):
    """Sequoia's dynamic program (Chen et al. 2024, "Sequoia: Scalable, robust, and
    hardware-aware speculative decoding", section 3.1), re-derived: with a depth-independent
    acceptance vector ``p`` (rank r accepted with ``p[r - 1]``), the most expected accepted
    tokens of a tree of ``nodes`` nodes under its root with depth at most ``depth``, the root
    counted as the bonus token: F(m, d) = best sum over a subtree of m nodes counting its root;
    F(1, d) = 1; F(m, d) = 1 + G(m - 1, 1, d - 1), where G(s, r, d) splits s nodes among the
    children of ranks r..R, G(s, r, d) = max_k p[r - 1] F(k, d) + G(s - k, r + 1, d)."""
    ranks = len(p)

    @functools.lru_cache(maxsize=None)
    def f(m, d):
        if m == 0:
            return 0.0
        if m == 1 or d == 0:
            return 1.0 if m == 1 else -math.inf
        return 1.0 + g(m - 1, 1, d - 1)

    @functools.lru_cache(maxsize=None)
    def g(s, r, d):
        if s == 0:
            return 0.0
        if r > ranks:
            return -math.inf
        best = -math.inf
        for k in range(s + 1):
            sub = f(k, d)
            if sub == -math.inf:
                continue
            best = max(best, (p[r - 1] * sub if k else 0.0) + g(s - k, r + 1, d))
        return best

    return f(nodes + 1, depth)


@settings(max_examples=120, deadline=None)
@given(rank_tables(max_depths=1, max_ranks=4, independent=True), st.integers(1, 14), st.integers(1, 5))
def test_best_tree_equals_sequoia_dynamic_program(row, nodes, depth):
    a = row * depth  # depth-independent: the same vector at every depth
    paths = sum(len(row[0]) ** d for d in range(1, depth + 1))
    want = sequoia_best(tuple(row[0]), min(nodes, paths), depth)
    assert best_tree(a, nodes, depth).expected_tokens == pytest.approx(want, rel=0, abs=1e-12)


@settings(max_examples=60, deadline=None)
@given(rank_tables(), st.integers(1, 64), st.integers(1, 8), st.data())
def test_best_trees_are_nested(a, most, max_depth, data):
    order = greedy_order(a, most, max_depth)
    n = data.draw(st.integers(1, most))
    assert order.tree(n) == best_tree(a, n, max_depth)


# --- any tree's expected tokens ------------------------------------------------------------------------

@settings(max_examples=150, deadline=None)
@given(rank_tables(), st.data())
def test_expected_tokens_of_any_tree_match_the_reference(a, data):
    size = data.draw(st.integers(0, 30))
    parents, ranks, depths = [], [], []
    for i in range(size):
        choices = [-1] + [j for j in range(i) if depths[j] < len(a)]
        p = data.draw(st.sampled_from(choices))
        depths.append(1 if p < 0 else depths[p] + 1)
        parents.append(p)
        ranks.append(data.draw(st.integers(1, len(a[0]))))
    # a rank repeated under one parent is refused; keep the first of each
    seen, keep = set(), {}
    for i, (p, r) in enumerate(zip(parents, ranks)):
        if (p, r) not in seen and (p < 0 or p in keep):
            seen.add((p, r))
            keep[i] = len(keep)
    parents = [keep[parents[i]] if parents[i] >= 0 else -1 for i in keep]
    ranks = [ranks[i] for i in keep]
    got = expected_tokens(a, parents, ranks)
    assert got == ref_expected_tokens(a, parents, ranks)


@pytest.mark.parametrize("parents, ranks, match", [
    ([-1, 2, 0], [1, 1, 1], r"node 1: parent 2 is itself or a later node"),
    ([0], [1], r"node 0: parent 0 is itself or a later node.*no cycles"),
    ([-1, -2], [1, 1], r"node 1: parent -2 is no node"),
    ([-1, 0], [1, 0], r"node 1: rank 0 is outside 1..3"),
    ([-1, 0], [1, 4], r"node 1: rank 4 is outside 1..3"),
    ([-1, 0, 1], [1, 1, 1], r"node 2 is at depth 3, deeper than the rank-acceptance table's 2 depths"),
    ([-1, -1], [2, 2], r"node 1 repeats node 0: the same rank 2 under the same parent -1"),
    ([-1, 0], [1], r"one rank per node: 2 parents, 1 ranks"),
    ([-1, 0.5], [1, 1], r"parent of node 1 = 0.5 must be a whole number"),
    ([-1], [True], r"rank of node 0 = True must be a whole number"),
    ("abc", [1], r"parents must be a list of whole numbers"),
    (np.array([-1, 0]), np.array([1, 2]), None),
])
def test_expected_tokens_refuses_a_bad_tree_naming_the_node(parents, ranks, match):
    a = [[0.5, 0.2, 0.1], [0.5, 0.2, 0.1]]
    if match is None:  # NumPy integers are whole numbers
        assert expected_tokens(a, parents, ranks) == 1.0 + 0.5 + 0.5 * 0.2
        return
    with pytest.raises(TreeError, match=match):
        expected_tokens(a, parents, ranks)


def test_more_than_256_nodes_are_refused():
    with pytest.raises(TreeError, match="257 nodes: at most 256"):
        expected_tokens([[0.5] * 2] * 2, [-1] * 257, [1] * 257)


@pytest.mark.parametrize("a, match", [
    ([[0.7, 0.4]], r"depth 1 sums to 1.1"),
    ([[0.5, -0.1]], r"depth 1 rank 2 = -0.1 is not a probability"),
    ([[0.5, float("nan")]], r"depth 1 rank 2 = nan is not a probability"),
    ([[0.5]] * 65, r"65 depths \(rows\): give 1..64"),
    ([[0.01] * 17], r"17 ranks \(columns\): give 1..16"),
    ("0.5", r"must be a table of numbers"),
    ([[0.5], [0.5, 0.2]], r"must be a table of numbers"),
])
def test_a_bad_rank_acceptance_is_refused_by_cell(a, match):
    with pytest.raises(TreeError, match=match):
        best_tree(a, 4, 2)


@pytest.mark.parametrize("nodes, max_depth, match", [
    (0, 2, r"nodes = 0 is outside 1..256"), (257, 2, r"nodes = 257 is outside 1..256"),
    (4, 0, r"max_depth = 0 is outside 1..64"), (4, 65, r"max_depth = 65 is outside 1..64"),
    (4.0, 2, r"nodes = 4.0 must be a whole number"), (4, True, r"max_depth = True must be a whole number"),
])
def test_best_tree_refuses_counts_out_of_range(nodes, max_depth, match):
    with pytest.raises(TreeError, match=match):
        best_tree([[0.5, 0.2]], nodes, max_depth)


def test_tree_errors_are_plan_errors():
    assert issubclass(TreeError, PlanError)


def test_tree_levels_and_chains():
    tree = Tree((-1, -1, 0, 1, 2), (1, 2, 1, 1, 1))
    assert tree.level_sizes == (2, 2, 1) and tree.depth == 3 and not tree.is_chain
    assert tree.level_parents() == (1, 2, 1)
    assert math.isnan(tree.expected_tokens)
    assert Tree.chain(3).is_chain and Tree.chain(3).level_parents() == (1, 1, 1)
    empty = Tree.chain(0)
    assert (empty.nodes, empty.depth, empty.level_sizes, empty.is_chain) == (0, 0, (), True)
    assert not Tree((-1, 0), (1, 2)).is_chain  # one per level, but rank 2
    with pytest.raises(TreeError, match="node 1: parent 1"):
        Tree((-1, 1), (1, 1))
    with pytest.raises(TreeError, match="parent of node 1 = 0.5 must be a whole number"):
        Tree((-1, 0.5), (1, 1))  # never rounded to a parent
    with pytest.raises(TreeError, match="rank of node 0 = False must be a whole number"):
        Tree((-1,), (False,))
    with pytest.raises(TreeError, match="node 0: rank 0 is not a draft rank"):
        Tree((-1,), (0,))
    with pytest.raises(TreeError, match="expected_tokens = '2' must be a number"):
        Tree((-1,), (1,), "2")
    with pytest.raises(TreeError, match="nodes = -1 must be a whole number >= 0"):
        greedy_order([[0.5]], 1, 1).tree(-1)
    assert greedy_order([[0.5]], 1, 1).tree(0) == Tree((), (), 1.0)


# --- the engines' trees --------------------------------------------------------------------------------

DECAY = [[0.6, 0.2, 0.1, 0.05]] * 5


def paths_of(tree):
    out = []
    for p, r in zip(tree.parents, tree.ranks):
        out.append((out[p] if p >= 0 else ()) + (r,))
    return out


def test_sglang_defaults_5_steps_topk_4_8_draft_tokens():
    tree = tree_from_sglang(4, 5, 8, DECAY)
    # the 7 best path products: 0.6, 0.36, 0.216, 0.2, 0.1296, then 0.12 twice ((1, 2) before (2, 1))
    assert paths_of(tree) == [(1,), (1, 1), (1, 1, 1), (2,), (1, 1, 1, 1), (1, 2), (2, 1)]
    assert tree.nodes == 7 and tree.depth == 4
    assert tree.expected_tokens == ref_expected_tokens(DECAY, tree.parents, tree.ranks)
    assert tree == best_tree(DECAY, 7, 5)  # on a decaying table the beam keeps the best paths


def test_sglang_uses_only_its_top_k_ranks_and_steps():
    a = [[0.3, 0.25, 0.2, 0.15]] * 3
    tree = tree_from_sglang(2, 2, 6, a)
    assert max(tree.ranks) <= 2 and tree.depth <= 2 and tree.nodes == 5
    assert tree != best_tree(a, 5, 2)  # ranks 3 and 4 would be better: SGLang never drafts them


def test_sglang_beam_drops_paths_the_best_tree_keeps():
    # every depth-2 path is worth 0.25; the beam of top-k 2 keeps (1, 1) and (1, 2) (ties by path),
    # so (2, 1, 1), as good as (1, 1, 1), is never drafted and (2, 2) takes its place
    a = [[0.5, 0.5], [0.5, 0.5], [1.0, 0.0]]
    tree = tree_from_sglang(2, 3, 9, a)
    assert paths_of(tree) == [(1,), (2,), (1, 1), (1, 1, 1), (1, 2), (1, 2, 1), (2, 1), (2, 2)]
    assert paths_of(best_tree(a, 8, 3))[-1] == (2, 1, 1)


def test_sglang_topk_one_is_the_chain_of_steps():
    tree = tree_from_sglang(1, 5, 8)  # SGLang sets draft tokens to steps + 1
    assert tree.is_chain and tree.nodes == 5 and math.isnan(tree.expected_tokens)
    with_a = tree_from_sglang(1, 3, 4, DECAY)
    assert with_a.expected_tokens == 1.0 + 0.6 + 0.6 * 0.6 + 0.6 * 0.6 * 0.6


@pytest.mark.parametrize("args, match", [
    ((0, 5, 8), r"topk \(--speculative-eagle-topk\) = 0 is outside 1..16"),
    ((17, 5, 8), r"topk \(--speculative-eagle-topk\) = 17 is outside 1..16"),
    ((4, 0, 8), r"steps \(--speculative-num-steps\) = 0 is outside 1..64"),
    ((4, 5, 1), r"draft_tokens \(--speculative-num-draft-tokens\) = 1 is outside 2..257"),
    ((2, 2, 8), r"draft_tokens \(--speculative-num-draft-tokens\) = 8 asks for 7 nodes, more than top-k 2 over "
                r"2 steps drafts \(6\): give at most 7"),
    ((4, 6, 8), r"steps \(--speculative-num-steps\) = 6 is deeper than the rank-acceptance table's 5 depths"),
    ((4, "5", 8), r"steps \(--speculative-num-steps\) = '5' must be a whole number"),
    ((1, 5, "8"), r"draft_tokens \(--speculative-num-draft-tokens\) = '8' must be a whole number"),
])
def test_sglang_refuses_bad_settings_by_flag(args, match):
    with pytest.raises(TreeError, match=match):
        tree_from_sglang(*args, DECAY)


def test_sglang_tree_needs_a_table_and_enough_ranks():
    with pytest.raises(TreeError, match=r"topk \(--speculative-eagle-topk\) = 4 builds its tree by draft scores"):
        tree_from_sglang(4, 5, 8)
    with pytest.raises(TreeError, match=r"topk \(--speculative-eagle-topk\) = 4 is more than the "
                                         r"rank-acceptance table's 2 ranks"):
        tree_from_sglang(4, 2, 8, [[0.5, 0.2]] * 2)


def test_vllm_tree_string():
    tree = tree_from_vllm("[(0,),(1,),(0,0),(1,0)]")
    assert tree.parents == (-1, -1, 0, 1) and tree.ranks == (1, 2, 1, 1)
    assert math.isnan(tree.expected_tokens)
    tree = tree_from_vllm("[(0, 0), (0,), (1,)]", DECAY)  # sorted breadth-first, as vLLM does
    assert paths_of(tree) == [(1,), (2,), (1, 1)]
    assert tree.expected_tokens == 1.0 + 0.6 + 0.2 + 0.36
    assert tree_from_vllm([(0,), (0, 0)]).is_chain


@pytest.mark.parametrize("text, match", [
    ("[(0,),(1,)", r"is not a Python list of rank tuples"),
    ("__import__('os').system('true')", r"is not a Python list of rank tuples"),
    ("[(0,),(1,1)]", r"node 1 = \(1, 1\) has no parent \(1,\) in the tree"),
    ("[(0,),(0,)]", r"node 1 = \(0,\) is listed twice"),
    ("[(-1,)]", r"rank -1 must be a whole number in 0..15"),
    ("[(16,)]", r"rank 16 must be a whole number in 0..15"),
    ("[(0.5,)]", r"rank 0.5 must be"),
    ("[()]", r"node 0 = \(\) must be a non-empty tuple"),
    ("[[0]]", r"node 0 = \[0\] must be a non-empty tuple"),
    ("[]", r"is empty"),
    ("5", r"must be a list of rank tuples"),
    (str([(0,) * d for d in range(1, 66)]), r"node 64 is at depth 65: at most 64"),
    (str([(i % 16,) * (1 + i // 16) for i in range(257)]), r"257 nodes: at most 256"),
])
def test_vllm_refuses_bad_trees(text, match):
    with pytest.raises(TreeError, match=match):
        tree_from_vllm(text)


def test_vllm_tree_deeper_than_the_table_is_refused_with_one():
    with pytest.raises(TreeError, match=r"node 1 is at depth 2, deeper than the rank-acceptance table's 1 depths"):
        tree_from_vllm("[(0,),(0,0)]", [[0.5]])


def test_trtllm_dynamic_tree():
    a = [[0.6, 0.2, 0.1]] * 3
    tree = tree_from_trtllm(3, 3, None, a)  # the default budget verifies all 9 drafted
    assert tree.nodes == 9 and tree.level_sizes == (3, 3, 3)
    smaller = tree_from_trtllm(3, 3, 4, a)
    assert paths_of(smaller) == [(1,), (1, 1), (1, 1, 1), (2,)]
    assert tree_from_trtllm(1, 4).is_chain and tree_from_trtllm(1, 4).nodes == 4


@pytest.mark.parametrize("args, match", [
    ((0, 3, None), r"max_topk \(dynamic_tree_max_topK\) = 0 is outside 1..16"),
    ((3, 0, None), r"max_draft_len \(max_draft_len\) = 0 is outside 1..64"),
    ((3, 3, 2), r"max_total_draft_tokens = 2 must be between max_draft_len \(3\) and dynamic_tree_max_topK x "
                r"max_draft_len \(9\)"),
    ((3, 3, 10), r"max_total_draft_tokens = 10 must be between"),
    ((16, 64, None), r"max_total_draft_tokens \(max_total_draft_tokens\) = 1024 is outside 1..256"),
])
def test_trtllm_refuses_bad_settings_by_field(args, match):
    with pytest.raises(TreeError, match=match):
        tree_from_trtllm(*args, [[0.6, 0.2, 0.1]] * 3)


# --- prices ------------------------------------------------------------------------------------------

def test_a_chain_costs_its_cell_bit_for_bit():
    from specsim.demo_inputs import demo_table

    t = demo_table()
    for n in (1, 3, 8, 100, 256, 1000):
        for k in range(0, t.max_k + 1):
            cost = tree_step_cost(t, Tree.chain(k), n)
            assert tuple(cost) == tuple(t.cell(n, k))[2:]


def test_a_branching_tree_of_single_passes_drafts_as_the_chain():
    from specsim.demo_inputs import demo_table

    t = demo_table()
    # root -> two leaves: one drafting pass at n rows, verify of 2 nodes x the factor
    cost = tree_step_cost(t, Tree((-1, -1), (1, 2)), 16, tree_attention_factor=1.25)
    cell = t.cell(16, 2)
    assert cost.verify_ms == cell.verify_ms * 1.25 and cost.verify_j == cell.verify_j * 1.25
    one = t.cell(16, 1)
    assert cost.draft_ms == one.draft_ms and cost.draft_j == one.draft_j


@settings(max_examples=150, deadline=None)
@given(tables(), st.integers(0, 300), st.data())
def test_tree_price_matches_the_reference(t, n, data):
    a = [[0.5, 0.3, 0.1]] * 6
    nodes = data.draw(st.integers(0, t.max_k))
    tree = best_tree(a, nodes, data.draw(st.integers(1, 6))) if nodes else Tree.chain(0)
    factor = data.draw(st.sampled_from([1.0, 1.1, 2.5]))
    got = tree_step_cost(t, tree, n, tree_attention_factor=factor)
    want = ref_tree_price(t.widths.tolist(), t.costs.tolist(), n, list(tree.parents), list(tree.ranks), factor)
    assert list(got) == want


def test_tree_price_at_a_context_is_the_price_on_the_table_there():
    from specsim import CostTable

    cells = {c: table({1: [(1.0 * c, 2.0, 0.0, 0.0), (2.0 * c, 3.0, 1.0, 1.0), (3.0 * c, 4.0, 2.0, 1.5)],
                       8: [(4.0 * c, 5.0, 0.0, 0.0), (5.0 * c, 6.0, 4.0, 3.0), (6.0 * c, 7.0, 6.0, 5.0)]})
             for c in (1, 3)}
    t = CostTable.from_contexts(cells, reference=1)
    tree = Tree((-1, -1), (1, 2))
    assert tree_step_cost(t, tree, 3, context=2.0) == tree_step_cost(t.at_context(2.0), tree, 3)
    assert tree_step_cost(t, tree, 3, context=2.0) != tree_step_cost(t, tree, 3)


@pytest.mark.parametrize("tree, kwargs, match", [
    (Tree.chain(3), {}, r"the table's deepest verify is k = 2: a tree of 3 nodes needs 4 rows per sequence; "
                        r"model or measure deeper"),
    (Tree((-1, -1), (1, 2)), {"tree_attention_factor": 0.9}, r"tree_attention_factor = 0.9 must be >= 1"),
    (Tree((-1, -1), (1, 2)), {"tree_attention_factor": float("nan")}, r"tree_attention_factor = nan must be finite"),
    (Tree((-1, -1), (1, 2)), {"context": -1.0}, r"context"),
])
def test_tree_price_refusals(tree, kwargs, match):
    t = table({1: [(1.0, 2.0, 0.0, 0.0), (2.0, 3.0, 1.0, 1.0), (3.0, 4.0, 2.0, 1.5)]})
    with pytest.raises(TreeError, match=match):
        tree_step_cost(t, tree, 4, **kwargs)


def test_tree_price_refuses_a_bad_width_and_table():
    t = table({1: [(1.0, 2.0, 0.0, 0.0), (2.0, 3.0, 1.0, 1.0)]})
    with pytest.raises(TreeError, match=r"n = -1 is outside 0..9,223,372,036,854,775,807"):
        tree_step_cost(t, Tree.chain(1), -1)
    with pytest.raises(TreeError, match="table must be a CostTable"):
        tree_step_cost("t.toml", Tree.chain(1), 1)
    with pytest.raises(TreeError, match="tree must be a Tree"):
        tree_step_cost(t, [(-1,), (1,)], 1)


# --- Planner.propose_tree ----------------------------------------------------------------------------------

@settings(max_examples=150, deadline=None)
@given(tables(), calibrations(), st.integers(0, 80), st.one_of(st.just(0.0), st.floats(0.0, 0.99)),
       st.integers(0, 80))
def test_a_chain_only_calibration_answers_as_propose(t, c, n, slack, max_seqs):
    planner = Planner(t, c, slack=slack, max_seqs=max_seqs)
    plan = planner.propose_tree(n, max_depth=8)
    depth = planner.propose(n)
    assert plan.depth == plan.nodes == depth and plan.tree.is_chain
    assert plan.kind == ("plain" if depth == 0 else "chain")
    assert plan.note.startswith(NO_TREE_TABLE)
    if n <= max_seqs:
        figures = planner.explain(n).depths[depth]
        assert (plan.step_ms, plan.step_j, plan.tokens_per_j) == (figures.step_ms, figures.step_j,
                                                                  figures.tokens_per_j)
        assert plan.expected_tokens * n == figures.tokens


@settings(max_examples=150, deadline=None)
@given(tables(), calibrations(), rank_tables(), st.integers(0, 80), st.one_of(st.just(0.0), st.floats(0.0, 0.99)),
       st.integers(0, 80), st.integers(1, 8), st.integers(1, 8), st.sampled_from([1.0, 1.1, 2.0]))
def test_propose_tree_matches_the_reference(t, c, a, n, slack, max_seqs, max_nodes, max_depth, factor):
    planner = Planner(t, c.with_rank_acceptance(a), slack=slack, max_seqs=max_seqs, tree_attention_factor=factor)
    plan = planner.propose_tree(n, max_nodes=max_nodes, max_depth=max_depth)
    kind, parents, ranks = ref_propose_tree(t.widths.tolist(), t.costs.tolist(), c.priors.tolist(), a, n, slack,
                                            max_seqs, max_nodes, max_depth, factor)
    assert (plan.kind, list(plan.tree.parents), list(plan.tree.ranks)) == (kind, parents, ranks)
    if kind == "tree":
        cost = tree_step_cost(t, plan.tree, n, tree_attention_factor=factor)
        assert (plan.step_ms, plan.step_j) == (cost.step_ms, cost.step_j)
        assert plan.expected_tokens == ref_expected_tokens(a, parents, ranks)


def modelled_h200():
    """An H200 / Llama-3.1-8B / EAGLE table as the demo builds it, verified up to 32 drafts, and
    the demo's calibration with a rank table whose rank-1 column is the demo's priors and whose
    ranks 2-4 take 0.10, 0.04 and 0.02 of the target's tokens at every depth."""
    from specsim.costmodel import model_table
    from specsim.demo_inputs import (DEMO_CONTEXT_TOKENS, DEMO_DRAFTER, DEMO_GPU, DEMO_MODEL, DEMO_WIDTHS,
                                            EAGLE_PRIORS, demo_calibration)

    t = model_table(DEMO_GPU, DEMO_MODEL, DEMO_DRAFTER, context_tokens=DEMO_CONTEXT_TOKENS, widths=DEMO_WIDTHS,
                    max_k=32)
    first = list(EAGLE_PRIORS) + [EAGLE_PRIORS[-1]] * 3
    return t, demo_calibration().with_rank_acceptance([[p, 0.10, 0.04, 0.02] for p in first])


def test_trees_pay_at_small_widths_and_not_at_wide_ones():
    t, cal = modelled_h200()
    planner = Planner(t, cal)
    chains = Planner(t, cal.with_rank_acceptance(None))
    kinds = {}
    for n in (1, 2, 4, 8, 16, 32, 64, 128, 256):
        plan = planner.propose_tree(n)
        kinds[n] = plan.kind
        chain = chains.propose_tree(n)
        if plan.kind == "tree":
            assert plan.tokens_per_j > chain.tokens_per_j
            cost = tree_step_cost(t, plan.tree, n)
            assert (plan.step_ms, plan.step_j) == (cost.step_ms, cost.step_j)
            assert plan.tokens_per_j == n * plan.tree.expected_tokens / cost.step_j
        else:
            assert plan == chain._replace(note=plan.note)
    assert kinds[1] == kinds[2] == "tree"
    assert kinds[256] == "chain"
    widths = list(kinds)
    last = max(i for i, n in enumerate(widths) if kinds[n] == "tree")
    assert all(kinds[n] == "tree" for n in widths[:last + 1])  # one crossover: trees stop paying once


def test_a_dearer_tree_verify_pays_at_fewer_widths():
    t, cal = modelled_h200()
    paying = []
    for factor in (1.0, 1.1, 1.25, 2.0):
        planner = Planner(t, cal, tree_attention_factor=factor)
        paying.append({n for n in (1, 2, 4, 8, 16, 32, 64, 128, 256) if planner.propose_tree(n).kind == "tree"})
    assert all(dear <= cheap for cheap, dear in zip(paying, paying[1:]))
    assert paying[0] != paying[-1]


def test_propose_tree_limits_and_notes():
    t, cal = modelled_h200()
    planner = Planner(t, cal, max_seqs=100)
    plan = planner.propose_tree(1, max_nodes=64)
    assert plan.note == "nodes limited to the table's deepest verify, k = 32"
    assert planner.propose_tree(1, max_nodes=32).note == ""
    assert planner.propose_tree(1, max_nodes=4, max_depth=2).nodes <= 4
    assert planner.propose_tree(1, max_nodes=4, max_depth=2).depth <= 2
    wide = planner.propose_tree(101)
    assert (wide.kind, wide.nodes, wide.expected_tokens) == ("plain", 0, 1.0)
    assert wide.note.endswith("the width is above max_seqs: plain decoding")
    one_rank = Planner(t, cal.with_rank_acceptance(np.asarray(cal.rank_acceptance)[:, :1]))
    assert one_rank.propose_tree(1).kind == "chain"  # every best tree of one rank is a chain


def test_propose_tree_is_remembered_per_width_and_context_and_follows_a_new_calibration():
    from specsim import CostTable

    grids = {c: table({1: [(1.0 * c, 2.0, 0.0, 0.0), (2.0 * c, 2.1, 0.2, 0.1), (3.0 * c, 2.2, 0.4, 0.2)],
                       8: [(4.0 * c, 5.0, 0.0, 0.0), (5.0 * c, 6.0, 1.0, 0.5), (6.0 * c, 7.0, 2.0, 1.0)]})
             for c in (1, 3)}
    t = CostTable.from_contexts(grids, reference=1)
    cal = calibration_for_tests([[0.5, 0.4], [0.5, 0.4]])
    planner = Planner(t, cal)
    first = planner.propose_tree(2, context=2.0)
    assert planner.propose_tree(2, context=2.0) is first
    assert planner.propose_tree(2, context=2) is first
    assert planner.propose_tree(np.int64(2), context=np.float64(2.0)) is first
    ref = Planner(t.at_context(2.0), cal).propose_tree(2)
    assert first == ref
    planner.update_calibration(cal.with_rank_acceptance(None))
    after = planner.propose_tree(2, context=2.0)
    assert after.note == NO_TREE_TABLE and after.kind != "tree"


def test_a_chain_only_calibration_answers_as_propose_at_every_context():
    from specsim import CostTable

    grids = {c: table({w: [(1.0 + 0.1 * w * c, 0.5 + 0.05 * w * k + 0.01 * c, 0.3 * k, 0.1 * k * (1 + w / 8))
                           for k in range(5)] for w in (1, 4, 16)}) for c in (256, 1024, 4096)}
    t = CostTable.from_contexts(grids, reference=1024)
    cal = calibration_for_tests([[0.5, 0.4]]).with_rank_acceptance(None)
    planner = Planner(t, cal, slack=0.3)
    depths = set()
    for c in (None, 100, 256, 700.5, 1024, 3000.0, 9000):
        for n in range(0, 20):
            plan = planner.propose_tree(n, context=c)
            assert plan.depth == planner.propose(n, context=c), (n, c)
            depths.add(plan.depth)
    assert len(depths) > 1  # the widths and contexts reach more than one answer


def calibration_for_tests(rows):
    from specsim import AcceptanceCalibration
    from tests.fixtures import PLAN_DRAFTER as DRAFTER

    return AcceptanceCalibration(DRAFTER, [0.0], [0.5], [0.6, 0.5], rank_acceptance=rows)


def test_propose_tree_from_many_threads_equals_a_serial_run():
    from concurrent.futures import ThreadPoolExecutor

    t, cal = modelled_h200()
    asks = [(n, c, m, d) for n in (1, 3, 8, 40, 256) for c in (None, 700.0, 1024) for m in (4, 64)
            for d in (2, 8)]
    serial = [Planner(t, cal).propose_tree(n, context=c, max_nodes=m, max_depth=d) for n, c, m, d in asks]
    shared = Planner(t, cal)

    def run(shift):
        order = asks[shift:] + asks[:shift]
        got = [shared.propose_tree(n, context=c, max_nodes=m, max_depth=d) for n, c, m, d in order]
        return got[len(asks) - shift:] + got[:len(asks) - shift]

    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(run, range(0, 8 * 5, 5)))
    for got in results:
        assert got == serial


@pytest.mark.parametrize("kwargs, match", [
    ({"n": -1}, r"n must be a non-negative integer, got -1"),
    ({"n": "3"}, r"n must be a non-negative integer, got '3'"),
    ({"n": True}, r"n must be a non-negative integer, got True"),
    ({"n": 2, "max_nodes": 0}, r"max_nodes = 0 is outside 1..256"),
    ({"n": 2, "max_nodes": 257}, r"max_nodes = 257 is outside 1..256"),
    ({"n": 2, "max_nodes": 2.0}, r"max_nodes = 2.0 must be a whole number"),
    ({"n": 2, "max_depth": 0}, r"max_depth = 0 is outside 1..64"),
    ({"n": 2, "max_depth": 65}, r"max_depth = 65 is outside 1..64"),
    ({"n": 2, "context": -5.0}, r"context"),
    ({"n": 2, "context": float("nan")}, r"context"),
    ({"n": 2, "context": "1024"}, r"context"),
])
def test_propose_tree_refuses_bad_input_by_name(kwargs, match):
    planner = Planner(table({1: [(1.0, 2.0, 0.0, 0.0), (2.0, 3.0, 1.0, 1.0)]}),
                      calibration_for_tests([[0.5, 0.4]]))
    n = kwargs.pop("n")
    with pytest.raises(PlanError, match=match):
        planner.propose_tree(n, **kwargs)
    with pytest.raises(PlanError, match=match):  # the same refusal the second time (nothing remembered)
        planner.propose_tree(n, **kwargs)


def test_planner_refuses_a_bad_tree_attention_factor():
    with pytest.raises(TreeError, match=r"tree_attention_factor = 0.5 must be >= 1 and <= 10"):
        Planner(table({1: [(1.0, 2.0, 0.0, 0.0)]}), calibration_for_tests([[0.5]]), tree_attention_factor=0.5)
