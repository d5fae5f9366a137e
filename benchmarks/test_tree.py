"""Draft-tree speed, each figure next to the plain reference timed in the same run.

Targets (docs/planner.md, "Draft trees"): ``best_tree``'s kernel <= 50 us at N = 256 nodes,
R = 16 ranks on a quiet machine; ``Planner.propose_tree`` at a width and context met before
<= 2 us. Every benchmark records ``us_per_call`` and ``speedup_vs_reference`` in its extra info.

Run: ``pytest benchmarks/test_tree.py --benchmark-only``.
"""

from __future__ import annotations

import numpy as np
import pytest

from benchmarks.conftest import record_ratio, time_per_call
from specsim import Planner
from specsim.costmodel import model_table
from specsim.demo_inputs import (DEMO_CONTEXT_TOKENS, DEMO_DRAFTER, DEMO_GPU, DEMO_MODEL, DEMO_WIDTHS,
                                        EAGLE_PRIORS, demo_calibration)
from specsim.tree import best_tree, greedy_order
from specsim.tree._kernels import greedy_order_nb
from tests.reference import ref_greedy_order, ref_propose_tree

WIDTHS = list(DEMO_WIDTHS)


def _rank_table(depths, ranks, seed=0):
    """Rows of a Dirichlet draw over ``ranks + 1`` outcomes (the last: no candidate matches)."""
    rng = np.random.default_rng(seed)
    return np.ascontiguousarray(rng.dirichlet(np.ones(ranks + 1), size=depths)[:, :ranks])


def _us(benchmark):
    if benchmark.stats is not None:
        benchmark.extra_info["us_per_call"] = benchmark.stats.stats.min * 1e6


@pytest.mark.parametrize("nodes, ranks", [(16, 4), (64, 8), (256, 16)])
def test_best_tree_kernel(benchmark, nodes, ranks):
    a = _rank_table(8, ranks)
    parents, rk, depths = (np.empty(nodes, dtype=np.int64) for _ in range(3))
    products = np.empty(nodes)
    greedy_order_nb(a, nodes, 8, parents, rk, products, depths)  # compiled before timing
    benchmark.group = "best_tree kernel"
    count = benchmark(greedy_order_nb, a, nodes, 8, parents, rk, products, depths)
    want = ref_greedy_order(a.tolist(), nodes, 8)
    assert count == nodes and (parents.tolist(), rk.tolist(), products.tolist()) == want
    _us(benchmark)
    rows = a.tolist()
    record_ratio(benchmark, "reference", time_per_call(lambda: ref_greedy_order(rows, nodes, 8), min_time=0.5))


def test_best_tree(benchmark):
    """The public call: the table checked, the kernel, a frozen Tree of 256 nodes."""
    a = _rank_table(8, 16)
    best_tree(a, 256, 8)
    benchmark.group = "best_tree"
    tree = benchmark(best_tree, a, 256, 8)
    assert tree.nodes == 256
    _us(benchmark)
    rows = a.tolist()
    record_ratio(benchmark, "reference", time_per_call(lambda: ref_greedy_order(rows, 256, 8), min_time=0.5))


def _planner():
    table = model_table(DEMO_GPU, DEMO_MODEL, DEMO_DRAFTER, context_tokens=DEMO_CONTEXT_TOKENS, widths=WIDTHS,
                        max_k=32)
    first = list(EAGLE_PRIORS) + [EAGLE_PRIORS[-1]] * 3
    cal = demo_calibration().with_rank_acceptance([[p, 0.10, 0.04, 0.02] for p in first])
    return table, cal


TABLE, CAL = _planner()


def _reference(n):
    a = CAL.rank_acceptance.tolist()
    return ref_propose_tree(TABLE.widths.tolist(), TABLE.costs.tolist(), CAL.priors.tolist(), a, n, 0.0,
                            1 << 62, 64, 8, 1.10)


@pytest.mark.parametrize("n", [1, 8, 64, 256])
def test_propose_tree_remembered(benchmark, n):
    planner = Planner(TABLE, CAL)
    plan = planner.propose_tree(n)
    benchmark.group = "propose_tree (a width met before)"
    assert benchmark(planner.propose_tree, n) is plan
    want = _reference(n)
    assert (plan.kind, list(plan.tree.parents), list(plan.tree.ranks)) == want
    _us(benchmark)
    record_ratio(benchmark, "reference", time_per_call(lambda: _reference(n), min_time=0.5))


def test_propose_tree_nine_widths_first_time(benchmark):
    """Every width of the demo's table asked for the first time, on a new Planner (its best trees
    built once, then one price per candidate per width)."""
    benchmark.group = "propose_tree (9 widths, new Planner)"

    def run():
        planner = Planner(TABLE, CAL, memo=False)
        return [planner.propose_tree(n) for n in WIDTHS]

    plans = benchmark(run)
    assert [(p.kind, list(p.tree.parents), list(p.tree.ranks)) for p in plans] == [_reference(n) for n in WIDTHS]
    _us(benchmark)
    record_ratio(benchmark, "reference", time_per_call(lambda: [_reference(n) for n in WIDTHS], min_time=0.5))


def test_greedy_order_once_for_every_size(benchmark):
    """The nested order of 256 nodes against 256 separate best trees: what a planner saves."""
    a = _rank_table(8, 16)
    greedy_order(a, 256, 8)
    benchmark.group = "greedy order (all sizes at once)"
    benchmark(greedy_order, a, 256, 8)
    _us(benchmark)
    record_ratio(benchmark, "separate_best_trees",
                 time_per_call(lambda: [best_tree(a, n, 8) for n in range(1, 257, 15)], min_time=0.5) * 256 / 18)
