"""Planner speed (targets: propose <= 1 us/call, batched propose <= 20 ns/decision, depths at
n = 256, K = 8 <= 10 us/call), each against the plain reference in the same run.

Run: ``pytest benchmarks/test_plan.py --benchmark-only`` (add ``--benchmark-autosave`` to keep a
baseline; see README).
"""

from __future__ import annotations

import numpy as np
import pytest

from benchmarks.conftest import record_ratio, time_per_call
from specsim import AcceptanceCalibration, Cell, CostTable, DrafterKey, Planner, TableKey
from tests.reference import ref_propose_depth, ref_sequence_depths

K = 8
WIDTHS = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512]
EDGES = [-4.0, -2.0, -1.0, -0.5, -0.25, -0.1, -0.05, -0.02, -0.005, 0.0]


def _setup():
    rng = np.random.default_rng(0)
    cells = []
    for n in WIDTHS:
        for k in range(K + 1):
            verify_ms = 8.0 + 0.04 * n * (k + 1) + rng.uniform(0.0, 0.5)
            verify_j = 1.5 + 0.012 * n * (k + 1) + rng.uniform(0.0, 0.1)
            cells.append(Cell(n, k, verify_ms, verify_j, 0.9 * k, 0.08 * k))
    table = CostTable.from_cells(TableKey(1, "bench", "bench", {"verify": "v", "draft": "d"}), cells)
    cal = AcceptanceCalibration(DrafterKey("bench", 32000, "bf16", True), EDGES, np.linspace(0.08, 0.95, len(EDGES)),
                                [0.8, 0.72, 0.66, 0.62, 0.6, 0.58, 0.56, 0.55])
    return table, cal


TABLE, CAL = _setup()
PLANNER = Planner(TABLE, CAL, slack=0.2, max_seqs=1024)


@pytest.mark.parametrize("n", [1, 8, 64, 256])
def test_propose(benchmark, n):
    PLANNER.propose(n)
    benchmark.group = "propose"
    result = benchmark(PLANNER.propose, n)
    widths, costs, priors = TABLE.widths.tolist(), TABLE.costs.tolist(), CAL.priors.tolist()
    assert result == ref_propose_depth(widths, costs, priors, n, 0.2, 1024)
    record_ratio(benchmark, "reference", time_per_call(lambda: ref_propose_depth(widths, costs, priors, n, 0.2, 1024)))


def test_propose_many(benchmark):
    ns = np.random.default_rng(1).integers(0, 1024, 100_000).astype(np.int64)
    out = np.empty_like(ns)
    PLANNER.propose_many(ns, out)
    benchmark.group = "propose_many (100k widths)"
    benchmark(PLANNER.propose_many, ns, out)
    if benchmark.stats is not None:
        benchmark.extra_info["ns_per_decision"] = benchmark.stats.stats.mean / ns.shape[0] * 1e9
    sample = ns[:200]
    widths, costs, priors = TABLE.widths.tolist(), TABLE.costs.tolist(), CAL.priors.tolist()
    assert out[:200].tolist() == [ref_propose_depth(widths, costs, priors, int(n), 0.2, 1024) for n in sample]
    ref = time_per_call(lambda: [ref_propose_depth(widths, costs, priors, int(n), 0.2, 1024) for n in sample[:20]])
    record_ratio(benchmark, "reference", ref / 20 * ns.shape[0])


@pytest.mark.parametrize("n", [1, 8, 64, 256])
def test_depths(benchmark, n):
    rng = np.random.default_rng(n)
    conf = rng.uniform(-3.0, 0.0, (n, K)).astype(np.float32)
    n_conf = np.full(n, K, dtype=np.int64)
    known = np.full(n, K, dtype=np.int64)
    out = np.empty(n, dtype=np.int64)
    budget = n * K  # every row reachable
    PLANNER.depths(conf, n_conf, known, K, budget, out)
    benchmark.group = "depths (K = 8, all rows reachable)"
    benchmark(PLANNER.depths, conf, n_conf, known, K, budget, out)
    ragged = conf.tolist()
    args = (TABLE.widths.tolist(), TABLE.costs.tolist(), CAL.edges.tolist(), CAL.p_accept.tolist(),
            CAL.priors.tolist(), ragged, known.tolist(), K, budget, 0.2)
    assert out.tolist() == ref_sequence_depths(*args)
    record_ratio(benchmark, "reference", time_per_call(lambda: ref_sequence_depths(*args), min_time=0.1, max_calls=20))
