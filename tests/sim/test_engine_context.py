"""The engine prices each decode step at its batch's mean context on a table with a context
axis (docs/simulation.md, "The price of a step"): against the plain engine twin, by hand, and
with the pricing off."""

from __future__ import annotations

import numpy as np
import pytest

from specsim.sim import ServerOptions, simulate
from specsim.table import Cell, CostTable, TableKey
from tests.fixtures import random_requests, requests, small_calibration, small_table
from tests.sim.test_engine import POLICIES, assert_matches_reference, assert_serving_invariants, run_reference


def context_table(contexts=(20, 150, 400), reference=150):
    """small_table's grid, its verify costs growing with the context (attention reads)."""
    base = small_table()
    tables = {}
    for c in contexts:
        cells = [Cell(x.n, x.k, x.verify_ms * (1 + c / 200), x.verify_j * (1 + c / 300), x.draft_ms * (1 + c / 1000),
                      x.draft_j * (1 + c / 1000)) for x in base.cells]
        tables[c] = CostTable.from_cells(base.key, cells)
    return CostTable.from_contexts(tables, reference=reference)


def check(reqs, table, policy, **opts):
    res = simulate(reqs, table, small_calibration(), policy, **opts)
    assert_matches_reference(res, run_reference(reqs, table, small_calibration(), policy, **opts))
    assert_serving_invariants(res, reqs)
    return res


@pytest.mark.parametrize("policy", POLICIES)
def test_context_pricing_matches_the_plain_engine(policy):
    reqs = random_requests(50, 3, rate=8.0)
    res = check(reqs, context_table(), policy, max_num_batched_tokens=256, prefill_ms_per_token=0.01,
                prefill_ms_per_step=1.0)
    assert 1 <= res.kv["mean_decode_context"] <= 340


@pytest.mark.parametrize("policy", ["fixed:3", "sequence"])
def test_context_kept_through_preemptions_and_separate_prefill(policy):
    """Preempted requests leave the batch's context and rejoin it after recomputing."""
    reqs = random_requests(40, 5, rate=20.0, max_out=30)
    res = check(reqs, context_table(), policy, kv_capacity_tokens=500, kv_block_size=16,
                max_num_batched_tokens=64, max_num_seqs=4)
    assert res.counters["preemptions"] > 0
    check(reqs, context_table(), policy, chunked_prefill=False, max_num_batched_tokens=None)


def test_one_context_and_contexts_outside_take_the_nearest():
    reqs = random_requests(30, 7)
    one = context_table(contexts=(150,), reference=150)
    plain = CostTable(one.key, one.widths, one.costs)
    a = check(reqs, one, "fixed:1")
    b = simulate(reqs, plain, small_calibration(), "fixed:1")
    assert np.array_equal(a.finish_s, b.finish_s) and a.energy == b.energy
    # Every context beyond the largest measured one: that context's grid, as a plain table.
    far = context_table(contexts=(1, 2), reference=1)
    at_far = CostTable(far.key, far.widths, far.at_context(2).costs)
    c = check(reqs, far, "fixed:1")
    d = simulate(reqs, at_far, small_calibration(), "fixed:1")
    assert np.array_equal(c.finish_s, d.finish_s)


def test_context_pricing_off_is_the_reference_grid_exactly():
    reqs = random_requests(40, 2)
    table = context_table()
    plain = CostTable(table.key, table.widths, table.costs)
    for policy in ("fixed:2", "propose", "sequence"):
        off = check(reqs, table, policy, context_pricing=False)
        alone = simulate(reqs, plain, small_calibration(), policy)
        assert np.array_equal(off.finish_s, alone.finish_s) and off.energy == alone.energy
        assert off.kv["mean_decode_context"] == 0.0 == alone.kv["mean_decode_context"]


def test_a_table_without_an_axis_is_unchanged_by_context_pricing():
    reqs = random_requests(30, 4)
    on = simulate(reqs, small_table(), small_calibration(), "fixed:2")
    off = simulate(reqs, small_table(), small_calibration(), "fixed:2", context_pricing=False)
    assert np.array_equal(on.finish_s, off.finish_s) and on.energy == off.energy


def test_each_decode_step_is_priced_at_its_batch_mean_context_by_hand():
    """Plain decode steps cost 10 ms at context 10 and 20 ms at context 20 (whatever the width).
    A (prompt 10, 3 tokens) decodes at contexts 10 and 11: 10 then 11 ms. With B (prompt 14,
    2 tokens) decoding beside it the mean is (11 + 14) / 2 = 12.5: 12.5 ms."""
    key = TableKey(1, "t", "t", {})
    tables = {c: CostTable.from_cells(key, [Cell(n, 0, float(c), c / 10, 0.0, 0.0) for n in (1, 2)]) for c in (10, 20)}
    table = CostTable.from_contexts(tables)
    opts = dict(prefill_ms_per_token=0.0, prefill_j_per_token=0.0, max_num_batched_tokens=None, log_size=64)
    res = check(requests([(0.0, 10, 3)]), table, "fixed:0", **opts)
    # Prefill costs nothing: decodes at 0 -> 10 ms -> 21 ms.
    assert res.finish_s[0] == pytest.approx(0.021)
    assert res.kv["mean_decode_context"] == pytest.approx(10.5)
    res = check(requests([(0.0, 10, 3), (0.0, 14, 2)]), table, "fixed:0", **opts)
    # Step 1: both decode (A at 10, B at 14: mean 12, 12 ms); step 2: A at 11, B finished... B has
    # 2 tokens: its first at prefill, its second in step 1. Step 2: A alone at 11.
    assert res.finish_s[1] == pytest.approx(0.012)
    assert res.finish_s[0] == pytest.approx(0.012 + 0.011)
    assert res.energy["decode_j"] == pytest.approx(1.2 + 1.1)


def test_fleets_price_their_replicas_at_their_own_context():
    from specsim.sim.fleet import Fleet, ReplicaGroup, simulate_fleet

    reqs = random_requests(40, 9, rate=10.0)
    table = context_table()
    fleet = Fleet([ReplicaGroup("a", 2, table, small_calibration())])
    res = simulate_fleet(reqs, fleet, "fixed:2")
    plain = Fleet([ReplicaGroup("a", 2, CostTable(table.key, table.widths, table.costs), small_calibration())])
    flat = simulate_fleet(reqs, plain, "fixed:2")
    assert not np.array_equal(res.fleet.finish_s, flat.fleet.finish_s)
    for rep, alone in zip(res.replicas, flat.replicas):
        assert rep.kv["mean_decode_context"] > 0 == alone.kv["mean_decode_context"]


@pytest.mark.parametrize("policy", ["fixed:2", "propose", "sequence"])
def test_a_fleet_of_a_group_with_context_pricing_and_one_without_prices_each_as_alone(policy):
    """A group without context pricing (its engine bundle's context axis None) beside one with
    it: the fleet's groups share one type (the first holds an empty axis), and each replica is
    the single server on its share, priced without contexts and with them."""
    from specsim.sim.fleet import Fleet, ReplicaGroup, simulate_fleet

    reqs = random_requests(60, 4, rate=12.0)
    cal = small_calibration()
    opts = ServerOptions(max_num_seqs=4, seed=3)
    fleet = Fleet([ReplicaGroup("flat", 1, small_table(), cal, opts), ReplicaGroup("axis", 1, context_table(), cal, opts)])
    res = simulate_fleet(reqs, fleet, policy, router="round_robin")
    for r, g in enumerate(fleet.groups):
        alone = simulate(reqs[res.assignment == r], g.table, cal, policy, options=opts)
        assert np.array_equal(res.replicas[r].finish_s, alone.finish_s)
        assert res.replicas[r].energy == alone.energy and res.replicas[r].kv == alone.kv
    assert res.replicas[0].kv["mean_decode_context"] == 0 < res.replicas[1].kv["mean_decode_context"]


@pytest.mark.parametrize("table", [small_table(), context_table()], ids=["plain", "context axis"])
def test_the_planner_reads_the_table_and_the_context_grid_as_one_type(table):
    """The engine hands the per-sequence planner either the table's arrays or the context grid
    (docs/simulation.md, "Compile time"): with one Numba type for both, its kernel is compiled
    once, not twice. A read-only table array would be a second type."""
    numba = pytest.importorskip("numba")
    from specsim.sim import ServerOptions, parse_policy
    from specsim.sim.engine import prepare

    reqs = requests([(0.0, 8, 4), (0.1, 16, 6)])
    prep = prepare(reqs, table, small_calibration(), parse_policy("sequence"), ServerOptions())
    assert numba.typeof(prep.tab.widths) == numba.typeof(prep.ws.grid_width)
    assert numba.typeof(prep.tab.costs) == numba.typeof(prep.ws.grid)


def test_a_run_without_context_pricing_hands_the_engine_no_context_axis():
    """Without context pricing (a table without an axis, or the pricing off) the engine's table
    bundle holds None for the contexts and their costs, so the engine compiled for the run
    carries none of the context pricing's code (docs/simulation.md, "What a run does not use");
    with it, arrays. Each kind has one Numba type whatever the policy."""
    numba = pytest.importorskip("numba")
    from specsim.sim import ServerOptions, parse_policy
    from specsim.sim.engine import prepare

    reqs = requests([(0.0, 8, 4), (0.1, 16, 6)])

    def tabs(t, **opts):
        return [prepare(reqs, t, small_calibration(), parse_policy(policy), ServerOptions(**opts)).tab
                for policy in ("fixed:2", "sequence", "propose")]

    for tab in tabs(small_table()) + tabs(context_table(), context_pricing=False):
        assert tab.contexts is None and tab.cwcs is None
    axis = tabs(context_table())
    assert all(tab.contexts.shape == (3,) for tab in axis)
    assert len({numba.typeof(tab) for tab in tabs(small_table())}) == 1
    assert len({numba.typeof(tab) for tab in axis}) == 1


def test_the_table_hands_the_engine_its_costs_at_every_width_and_context():
    """``engine_table``: the table's costs at every width 0..S (its ``cell`` there) and, with
    context pricing, at every measured context (the contexts a writable int64 array, empty with
    the pricing off); ``prepare`` takes them as they are."""
    from specsim.plan.depth_table import engine_table
    from specsim.sim import ServerOptions, parse_policy
    from specsim.sim.engine import prepare

    table = context_table()
    widths, costs, wcs, contexts, cwcs = engine_table(table, 9, True)
    assert contexts.tolist() == [20, 150, 400] and contexts.dtype == np.int64 and contexts.flags.writeable
    assert wcs.shape == (10, table.max_k + 1, 4) and cwcs.shape == (3, 10, table.max_k + 1, 4)
    for n in range(1, 10):
        for k in range(table.max_k + 1):
            assert wcs[n, k].tolist() == list(table.cell(n, k))[2:]
            for c, tokens in enumerate(contexts.tolist()):
                np.testing.assert_allclose(cwcs[c, n, k], list(table.cell(n, k, context=tokens))[2:], rtol=1e-12)
    off = engine_table(table, 9, False)
    assert off[3].shape == (0,) and off[4].shape == (0, 10, table.max_k + 1, 4) and np.array_equal(off[2], wcs)
    prep = prepare(requests([(0.0, 8, 4)]), table, small_calibration(), parse_policy("fixed:2"),
                   ServerOptions(max_num_seqs=9))
    for got, want in zip(prep.tab, (widths, costs, wcs, contexts, cwcs)):
        assert np.array_equal(got, want)
    prep = prepare(requests([(0.0, 8, 4)]), table, small_calibration(), parse_policy("fixed:2"),
                   ServerOptions(max_num_seqs=9, context_pricing=False))
    assert prep.tab.contexts is None and prep.tab.cwcs is None and np.array_equal(prep.tab.wcs, wcs)
