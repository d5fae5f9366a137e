"""The engine (and the planner through it) at extreme shapes: widths 1-1024, depths 0-16,
one-width tables, row budgets 0 and huge, one-request traces, every policy, tight token budgets
and KV caches. These runs check what always holds; CI runs them again with Numba's bounds
checks on, where any out-of-bounds index fails the test (docs/simulation.md, "Memory safety")."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from specsim.calibration import AcceptanceCalibration
from specsim.sim import simulate
from specsim.table import Cell, CostTable, TableKey
from tests.fixtures import SIM_DRAFTER as KEY
from tests.fixtures import requests
from tests.sim.test_engine import assert_serving_invariants

WIDTHS = (1, 2, 3, 7, 16, 64, 255, 256, 257, 512, 1024)


def table_of(widths, max_k, slope):
    """Verify cost nearly flat in rows when ``slope`` is small (deep drafts pay at every width)."""
    cells = [Cell(n, k, 20.0 + slope * n * k, 5.0 + slope * 0.1 * n * k, 0.05 * k, 0.01 * k)
             for n in widths for k in range(max_k + 1)]
    return CostTable.from_cells(TableKey(1, "test", "test", {}), cells)


def calibration_of(max_k, accept):
    return AcceptanceCalibration(KEY, [-2.0, -0.5, 0.0], [0.2, 0.6, accept], [accept] * max(max_k, 1))


def policies(max_k):
    k = min(max_k, 3)
    return ("fixed:0", f"fixed:{max_k}", "propose", "goodput", "sequence", f"schedule:1-8={max_k},9-={k}")


@given(
    widths=st.lists(st.sampled_from(WIDTHS), min_size=1, max_size=4, unique=True).map(sorted),
    max_k=st.integers(0, 16), slope=st.sampled_from([1e-4, 0.5]), accept=st.sampled_from([0.5, 0.99]),
    n=st.integers(1, 1100), out=st.integers(1, 6), prompt=st.integers(0, 40),
    row_budget=st.sampled_from([None, 0, 1, 1 << 40]), chunked=st.booleans(),
    budget=st.sampled_from([None, 1, 64, 8192]), kv=st.sampled_from([None, 64, 1 << 20]),
    seed=st.integers(0, 2 ** 64 - 1),
)
@settings(max_examples=25, deadline=None)
def test_every_policy_at_extreme_shapes(widths, max_k, slope, accept, n, out, prompt, row_budget, chunked, budget,
                                        kv, seed):
    table, cal = table_of(widths, max_k, slope), calibration_of(max_k, accept)
    reqs = requests([(0.0, prompt, out)] * n)
    if kv is not None and kv < prompt + out - 1 + max_k:
        kv = prompt + out - 1 + max_k + 16
    for policy in policies(max_k):
        res = simulate(reqs, table, cal, policy, max_num_seqs=widths[-1], row_budget=row_budget,
                       chunked_prefill=chunked, max_num_batched_tokens=budget, kv_capacity_tokens=kv, seed=seed,
                       log_size=64)
        assert_serving_invariants(res, reqs)
        assert res.step_width.max(initial=0) <= widths[-1]
        if row_budget == 0:
            assert res.counters["verified_rows"] == 0


@pytest.mark.parametrize("policy", ["fixed:16", "sequence", "propose", "goodput", "schedule:1-=16"])
def test_one_request_one_width_deepest_table(policy):
    table, cal = table_of([1], 16, 1e-4), calibration_of(16, 0.99)
    for rows in ([(0.0, 0, 1)], [(0.0, 1, 200)], [(5.0, 3000, 2)]):
        reqs = requests(rows)
        res = simulate(reqs, table, cal, policy, max_num_batched_tokens=17, kv_capacity_tokens=4096, log_size=0)
        assert_serving_invariants(res, reqs)
        assert res.step_t_s.shape[0] == 0


def test_widest_sequence_steps_with_deep_drafts():
    """1,024 sequences drafting 16 deep: the planner sorts 16,384 gains a step."""
    table, cal = table_of([1, 1024], 16, 1e-5), calibration_of(16, 0.99)
    reqs = requests([(0.0, 8, 40)] * 1024)
    res = simulate(reqs, table, cal, "sequence", max_num_seqs=1024, max_num_batched_tokens=None)
    assert_serving_invariants(res, reqs)
    assert res.step_width.max() == 1024 and res.depth_histogram[9:].sum() > 0
    assert np.isfinite(res.energy_j)
