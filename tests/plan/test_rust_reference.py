"""The compiled Rust reference in benchmarks/rust_reference/ (the yardstick of the planner's speed,
benchmarks/rust_reference.py) chooses the same depths as specsim, bit for bit, on small random
batches: NaN and missing confidences, fewer known drafts than k_max, tight and unbounded budgets,
one-width and depth-0 tables. Skipped where cargo is not installed."""

from __future__ import annotations

import shutil

import numpy as np
import pytest

from benchmarks.rust_reference import build, run_bench, write_inputs
from specsim import AcceptanceCalibration, Cell, CostTable, Planner, sequence_depths
from tests.fixtures import PLAN_DRAFTER as DRAFTER
from tests.fixtures import PLAN_TABLE_KEY as KEY
from tests.reference import ref_sequence_depths

pytestmark = pytest.mark.skipif(shutil.which("cargo") is None,
                                reason="cargo is not installed: the Rust reference cannot be built")


@pytest.fixture(scope="module")
def bench(tmp_path_factory):
    return build(tmp_path_factory.mktemp("rust-target"))


def _table(rng):
    widths = sorted(set(int(w) for w in rng.integers(1, 96, int(rng.integers(1, 5)))))
    max_k = int(rng.integers(0, 8))
    cells = []
    for n in widths:
        for k in range(max_k + 1):
            d_ms, d_j = (0.0, 0.0) if k == 0 else (float(rng.uniform(0.01, 10.0)), float(rng.uniform(0.01, 2.0)))
            cells.append(Cell(n, k, float(rng.uniform(0.01, 100.0)), float(rng.uniform(0.01, 50.0)), d_ms, d_j))
    return CostTable.from_cells(KEY, cells)


def _calibration(rng):
    edges = sorted(set(rng.choice([-8.0, -4.0, -2.0, -1.0, -0.5, -0.1, -0.05, -0.02], int(rng.integers(0, 6))))) + [0.0]
    prob = lambda: float(rng.choice([0.0, 0.5, 1.0])) if rng.random() < 0.3 else float(rng.uniform(0, 1))  # noqa: E731
    priors = [prob() for _ in range(int(rng.integers(1, 6)))]
    return AcceptanceCalibration(DRAFTER, edges, [prob() for _ in edges], priors)


def test_the_rust_reference_chooses_specsims_depths(bench, tmp_path):
    rng = np.random.default_rng(20261206)
    extra_rows = 0
    for case in range(40):
        t, c = _table(rng), _calibration(rng)
        slack = 0.0 if case % 3 == 0 else float(rng.uniform(0, 0.99))
        planner = Planner(t, c, slack=slack)
        n = 0 if case == 0 else int(rng.integers(1, 64))
        m = int(rng.integers(0, t.max_k + 2))
        conf = rng.uniform(-6.0, 0.0, (n, m)).astype(np.float32)
        conf[rng.random((n, m)) < 0.1] = np.nan
        n_conf = rng.integers(0, m + 1, n).astype(np.int64)
        known = rng.integers(0, t.max_k + 3, n).astype(np.int64)
        k_max = int(rng.integers(0, t.max_k + 2))
        budget = int(rng.integers(0, (t.max_k + 1) * n + 2)) if case % 4 else 2**64 - 1
        mine = planner.depths(conf, n_conf, known, k_max, budget).tolist()
        ragged = [[float(v) for v in conf[i, :n_conf[i]]] for i in range(n)]
        assert sequence_depths(t, c, ragged, known.tolist(), k_max, budget, slack) == mine
        assert ref_sequence_depths(t.widths.tolist(), t.costs.tolist(), c.edges.tolist(), c.p_accept.tolist(),
                                   c.priors.tolist(), ragged, known.tolist(), k_max, budget, slack) == mine
        theirs, ns = run_bench(bench, write_inputs(tmp_path, t, c, conf, n_conf, known, k_max, budget, slack), 0)
        assert ns is None
        assert theirs == mine, case
        extra_rows += sum(mine) - sum(d > 0 for d in mine)
    assert extra_rows > 0  # some batches verified past their first drafts: the sort and the scan ran


def test_the_bench_times_a_call_and_reads_back_exact_floats(bench, tmp_path):
    # Costs and confidences that differ in their last bits: written and read back exactly, or
    # the two sides would plan on different numbers.
    rng = np.random.default_rng(7)
    cells = [Cell(n, k, 10.0 + n * (k + 1) * 0.1 + 1e-13 * k, 2.0 + n * (1 + 0.02 * k), 0.5 * k, 0.05 * k)
             for n in (1, 8, 64) for k in range(5)]
    t = CostTable.from_cells(KEY, cells)
    c = AcceptanceCalibration(DRAFTER, [-1.0, -0.1, 0.0], [0.3, 0.7, 0.9], [0.8, 0.7, 0.6])
    planner = Planner(t, c, slack=0.5)
    conf = (rng.uniform(-2.0, 0.0, (40, 4)) + 1e-7).astype(np.float32)
    conf = np.minimum(conf, 0.0)
    n_conf, known = np.full(40, 4, dtype=np.int64), np.full(40, 4, dtype=np.int64)
    theirs, ns = run_bench(bench, write_inputs(tmp_path, t, c, conf, n_conf, known, 4, 160, 0.5), 3)
    assert theirs == planner.depths(conf, n_conf, known, 4, 160).tolist()
    assert ns > 0


def test_the_rust_reference_keeps_fewer_rows_on_an_exact_tie(bench, tmp_path):
    # Rows that add no tokens on a table whose cost is flat in depth tie exactly with the first
    # drafts alone: only a strictly better prefix replaces, so neither side takes them.
    t = CostTable.from_cells(KEY, [Cell(n, k, 10.0, 3.0, 0.0 if k == 0 else 1.0, 0.0 if k == 0 else 0.1)
                                   for n in (1, 16) for k in range(4)])
    c = AcceptanceCalibration(DRAFTER, [-1.0, 0.0], [0.0, 0.9], [0.9, 0.0])
    conf = np.full((12, 3), -0.5, dtype=np.float32)
    conf[:, 1:] = -2.0
    n_conf, known = np.full(12, 3, dtype=np.int64), np.full(12, 3, dtype=np.int64)
    mine = Planner(t, c).depths(conf, n_conf, known, 3, 36).tolist()
    assert mine == [1] * 12
    assert run_bench(bench, write_inputs(tmp_path, t, c, conf, n_conf, known, 3, 36, 0.0), 0)[0] == mine
