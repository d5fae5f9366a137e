"""The engine's vLLM-style scheduling on traces small enough to follow by hand: chunked prefill,
the token budget cutting drafts, mixed-step prices, KV blocks and preemption, the prefill cost
models (docs/simulation.md, "Scheduling" and "The price of a step")."""

from __future__ import annotations

import numpy as np
import pytest

from specsim.errors import SimulationError
from specsim.sim import simulate
from specsim.table import Cell, CostTable, TableKey
from tests.fixtures import random_requests, requests, small_calibration, small_table
from tests.sim.test_engine import (POLICIES, acceptance_trace, assert_matches_reference, assert_serving_invariants,
                                   run_reference)

MS = 10.0  # every whole decode step of the flat table costs 10 ms and 1 J, whatever its width and depth


def flat_cell(n, k):
    """Verify 10 ms / 1 J at depth 0; at depth >= 1 verify 8 ms / 0.75 J plus drafting 2 ms / 0.25 J."""
    return Cell(n, k, MS, 1.0, 0.0, 0.0) if k == 0 else Cell(n, k, MS - 2.0, 0.75, 2.0, 0.25)


def flat_table():
    cells = [flat_cell(n, k) for n in (1, 2, 4) for k in range(4)]
    return CostTable.from_cells(TableKey(1, "test", "test", {}), cells)


def run(rows, policy="fixed:0", **opts):
    affine = {} if "prefill_curve" in opts else {"prefill_ms_per_token": 1.0, "prefill_j_per_token": 0.5}
    opts = {**affine, "log_size": 1 << 10, **opts}
    reqs = requests(rows)
    res = simulate(reqs, flat_table(), small_calibration(), policy, **opts)
    assert_matches_reference(res, run_reference(reqs, flat_table(), small_calibration(), policy, **opts))
    assert_serving_invariants(res, reqs)
    return res


def test_chunked_prefill_splits_a_prompt_by_the_budget_and_emits_at_the_last_chunk():
    res = run([(0.0, 10, 3)], max_num_batched_tokens=4)
    # Chunks of 4, 4 and 2 tokens (1 ms each token), then two 10 ms decode steps.
    assert res.first_token_s[0] == pytest.approx(0.010)
    assert res.finish_s[0] == pytest.approx(0.030)
    c = res.counters
    assert (c["prefill_steps"], c["decode_steps"], c["mixed_steps"], c["prefill_tokens"]) == (3, 2, 0, 10)
    assert res.scheduled_s[0] == 0.0 and res.energy["prefill_j"] == pytest.approx(5.0)


def test_separate_prefill_takes_the_whole_prompt_in_one_step():
    res = run([(0.0, 10, 3)], max_num_batched_tokens=4, chunked_prefill=False)
    assert res.first_token_s[0] == pytest.approx(0.010) and res.counters["prefill_steps"] == 1


@pytest.mark.parametrize("pricing", ["additive", "one-pass"])
def test_decodes_go_first_and_a_prefill_chunk_takes_what_the_budget_leaves(pricing):
    """A (prompt 2, 9 tokens) and B (prompt 6, 2 tokens) arrive together; fixed:2 with every
    draft accepted; budget 4: A decodes 1 + 2 tokens a step and B prefills 1 token beside it."""
    digits = acceptance_trace([2], 2)
    opts = dict(max_num_batched_tokens=4, max_num_seqs=2, prefill_ms_per_step=5.0, prefill_j_per_step=2.0,
                prefill_ms_per_token=1.0, prefill_j_per_token=0.5, mixed_step_pricing=pricing)
    reqs = requests([(0.0, 2, 9), (0.0, 6, 2)])
    res = simulate(reqs, flat_table(), small_calibration(), "fixed:2", acceptance=digits, **opts)
    # Step 1: both admitted, chunks 2 + 2 (5 + 4 ms); A's prefill is done: its first token.
    assert res.first_token_s[0] == pytest.approx(0.009)
    # Steps 2-4 are mixed: A's decode (10 ms, 1 J) and B's 1-token chunk (5 + 1 ms, 2 + 0.5 J).
    # Added: 16 ms and 3.5 J. One pass: the chunk's fixed part is shared, at most the smaller
    # part: 10 + 6 - min(10, 6, 5) = 11 ms and 1 + 2.5 - min(1, 2.5, 2) = 2.5 J.
    mixed_ms, saved_j = (0.016, 0.0) if pricing == "additive" else (0.011, 1.0)
    assert res.finish_s[0] == pytest.approx(0.009 + 3 * mixed_ms)
    # Step 5: B's last chunk alone (6 ms) emits its first token; step 6 decodes its last.
    a_done = 0.009 + 3 * mixed_ms
    assert res.first_token_s[1] == pytest.approx(a_done + 0.006)
    assert res.finish_s[1] == pytest.approx(a_done + 0.006 + 0.010)
    c = res.counters
    assert (c["mixed_steps"], c["prefill_steps"], c["decode_steps"], c["drafts_cut"]) == (3, 5, 4, 0)
    assert res.energy["prefill_j"] == pytest.approx(5 * 2.0 + 8 * 0.5 - 3 * saved_j)
    assert res.energy["decode_j"] == pytest.approx(4 * 1.0)
    assert res.step_prefill_tokens.tolist() == [1, 1, 1, 0]
    assert res.step_width.tolist() == [1, 1, 1, 1]


def _first_mixed_step(**opts):
    """(ms, prefill J) of the first mixed step: A (prompt 2, 2 tokens) prefills alone, then decodes
    its last token (10 ms, 1 J) beside B's first 1-token chunk (budget 3), checked against the
    plain engine."""
    res = run([(0.0, 2, 2), (0.0, 3, 1)], max_num_batched_tokens=2, max_num_seqs=2, **opts)
    ms = (res.step_t_s[0] - res.first_token_s[0]) * 1000.0
    return ms, res


@pytest.mark.parametrize("prefill, one_pass_ms", [
    # (fixed ms, ms per token) -> the mixed step: decode d = 10 ms, prefill p of 1 token.
    ((5.0, 1.0), 10 + 6 - 5),       # p_fixed the smallest: the shared weight read
    ((20.0, 1.0), 21.0),            # d the smallest: the decode rides along, mixed = p = max(d, p)
    ((0.0, 1.0), 10 + 1),           # no fixed part: nothing shared, the parts add
    ((0.0, 0.0), 10.0),             # an empty prefill price: the decode price
])
def test_one_pass_rule_by_hand_affine(prefill, one_pass_ms):
    fixed, per_token = prefill
    opts = dict(prefill_ms_per_step=fixed, prefill_ms_per_token=per_token)
    one, _ = _first_mixed_step(**opts)
    added, _ = _first_mixed_step(mixed_step_pricing="additive", **opts)
    assert one == pytest.approx(one_pass_ms)
    assert added == pytest.approx(10 + fixed + per_token)
    assert max(10.0, fixed + per_token) - 1e-9 <= one <= added + 1e-9


@pytest.mark.parametrize("curve, one_pass_ms", [
    # 1 token priced at the curve's floor (its first point); p_fixed = the first segment at 0 tokens.
    ("tokens,ms,j\n1,4,1\n3,8,2\n", 10 + 4 - 2),      # intercept 4 - 2 * 1 = 2
    ("tokens,ms,j\n1,30,1\n101,130,2\n", 30.0),        # intercept 29 > d: mixed = p
    ("tokens,ms,j\n2,4,1\n3,20,2\n", 10 + 4 - 0),      # intercept 4 - 16 * 2 < 0: floored at 0
    ("tokens,ms,j\n2,7,1\n", 10 + 7 - 7),               # one point: flat, all of it fixed
])
def test_one_pass_rule_by_hand_curve(tmp_path, curve, one_pass_ms):
    path = tmp_path / "curve.csv"
    path.write_text(curve)
    one, _ = _first_mixed_step(prefill_curve=str(path))
    assert one == pytest.approx(one_pass_ms)


def test_a_mixed_step_costs_less_than_its_parts_priced_apart():
    """One forward pass: the mixed step's time and energy are below its decode step plus its
    prefill chunk priced alone, and at least the larger of the two."""
    opts = dict(prefill_ms_per_step=5.0, prefill_ms_per_token=1.0, prefill_j_per_step=2.0, prefill_j_per_token=0.5)
    one, res = _first_mixed_step(**opts)
    added, add_res = _first_mixed_step(mixed_step_pricing="additive", **opts)
    decode_alone, prefill_alone = 10.0, 5.0 + 1.0
    assert max(decode_alone, prefill_alone) <= one < decode_alone + prefill_alone == pytest.approx(added)
    assert res.counters["mixed_steps"] == add_res.counters["mixed_steps"] == 1
    assert res.energy["prefill_j"] < add_res.energy["prefill_j"]
    assert res.energy["decode_j"] == add_res.energy["decode_j"]


def test_mixed_step_pricing_is_checked():
    with pytest.raises(SimulationError, match="mixed_step_pricing must be one of one-pass, additive"):
        simulate(requests([(0.0, 2, 2)]), flat_table(), small_calibration(), "fixed:0", mixed_step_pricing="max")


def test_the_budget_cuts_drafts_not_sequences():
    digits = acceptance_trace([3], 3)
    res = run([(0.0, 1, 7)], "fixed:3", max_num_batched_tokens=2)
    assert res.counters["drafts_cut"] > 0
    cut = simulate(requests([(0.0, 1, 7)]), flat_table(), small_calibration(), "fixed:3", acceptance=digits,
                   max_num_batched_tokens=2, prefill_ms_per_token=1.0)
    # Each decode step verifies 1 draft (1 + 1 tokens of budget) and emits 2 tokens: 3 steps for 6.
    assert cut.counters["decode_steps"] == 3 and cut.counters["drafts_cut"] == 3 * 2
    assert cut.depth_histogram.tolist() == [0, 3, 0, 0]
    assert (cut.step_width * (1 + cut.step_mean_depth) <= 2).all()


def test_preemption_frees_the_latest_admitted_and_it_recomputes():
    """KV of 10 one-token blocks; A and B (prompt 4, 4 tokens each) arrive together. At the third
    step A needs a block and B, admitted last, is preempted; it comes back after A finishes and
    prefills its prompt and 2 emitted tokens again."""
    res = run([(0.0, 4, 4), (0.0, 4, 4)], kv_capacity_tokens=10, kv_block_size=1)
    c = res.counters
    assert (c["preemptions"], c["resumed"], c["recomputed_tokens"], c["prefill_tokens"]) == (1, 1, 6, 14)
    assert res.kv["peak_blocks"] == 10 and res.kv["capacity_blocks"] == 10
    assert res.first_token_s.tolist() == pytest.approx([0.008, 0.008])
    assert res.finish_s[0] == pytest.approx(0.038)
    assert res.finish_s[1] == pytest.approx(0.038 + 0.006 + 0.010)
    assert res.step_kv_blocks.tolist() == [10, 6, 7, 7]


def test_preempted_requests_all_finish_under_heavy_memory_pressure():
    reqs = random_requests(60, 5, rate=20.0, max_out=30)
    for policy in POLICIES:
        res = simulate(reqs, small_table(), small_calibration(), policy, kv_capacity_tokens=400, kv_block_size=16,
                       max_num_batched_tokens=64, max_num_seqs=4)
        assert_serving_invariants(res, reqs)
        assert res.counters["preemptions"] > 0


def test_common_random_numbers_hold_under_the_new_rules():
    """Every policy meets the same draft outcomes: at depth K, a one-request trace accepts the
    same leading run whatever the budget, chunking or KV limits."""
    reqs = requests([(0.0, 30, 40)])
    base = simulate(reqs, small_table(), small_calibration(), "fixed:3", chunked_prefill=False,
                    max_num_batched_tokens=None)
    for opts in (dict(max_num_batched_tokens=8), dict(kv_capacity_tokens=96, kv_block_size=16)):
        res = simulate(reqs, small_table(), small_calibration(), "fixed:3", **opts)
        assert res.depth_histogram.tolist() == base.depth_histogram.tolist()
        assert res.counters["accepted_drafts"] == base.counters["accepted_drafts"]


def test_prefill_curve_floor_interpolation_and_extrapolation(tmp_path):
    curve = tmp_path / "prefill.csv"
    curve.write_text("tokens,ms,j\n100,20,2\n1000,110,11\n")
    for prompt, want_ms in ((50, 20.0), (100, 20.0), (550, 65.0), (1900, 200.0)):
        res = run([(0.0, prompt, 1)], prefill_curve=str(curve), max_num_batched_tokens=None)
        assert res.first_token_s[0] == pytest.approx(want_ms / 1000.0)
        assert res.energy["prefill_j"] == pytest.approx(want_ms / 10.0)
        assert res.options["prefill_curve"] == [[100.0, 1000.0], [20.0, 110.0], [2.0, 11.0]]


@pytest.mark.parametrize("text, match", [
    ("tokens,ms\n1,2\n", "lacks j"),
    ("tokens,ms,j\n5,1,1\n5,2,2\n", "strictly ascending"),
    ("tokens,ms,j\n5,x,1\n", "line 2"),
    ("tokens,ms,j\n", "at least one point"),
])
def test_prefill_curve_refusals(tmp_path, text, match):
    path = tmp_path / "c.csv"
    path.write_text(text)
    with pytest.raises(SimulationError, match=match):
        simulate(requests([(0.0, 5, 2)]), flat_table(), small_calibration(), "fixed:0", prefill_curve=str(path))


def test_kv_refusals_and_aliases():
    with pytest.raises(SimulationError, match="needs 9 KV blocks"):
        simulate(requests([(0.0, 100, 40)]), flat_table(), small_calibration(), "fixed:3", kv_capacity_tokens=128)
    # The API has one name; max_batch, its earlier name, is refused there (files and flags keep it).
    with pytest.raises(SimulationError, match="unknown server option.*max_batch"):
        simulate(requests([(0.0, 1, 2)]), flat_table(), small_calibration(), "fixed:0", max_batch=3)
    res = simulate(requests([(0.0, 1, 2)]), flat_table(), small_calibration(), "fixed:0", max_num_seqs=2)
    assert res.options["max_num_seqs"] == res.options["max_batch"] == 2
    # A file's [server] table maps the earlier name onto the option, and refuses both at once.
    from specsim.sim.options import option_keywords, option_names

    assert option_keywords({"max_batch": 4, "seed": 1}) == {"max_num_seqs": 4, "seed": 1}
    assert "max_batch" in option_names() and "max_num_seqs" in option_names()
    with pytest.raises(SimulationError, match="name the same option"):
        option_keywords({"max_batch": 4, "max_num_seqs": 4})
    with pytest.raises(SimulationError, match="max_num_batched_tokens"):
        simulate(requests([(0.0, 1, 2)]), flat_table(), small_calibration(), "fixed:0", max_num_batched_tokens=0)


def test_table_meta_supplies_kv_and_prefill_costs_and_options_override_it():
    cells = [flat_cell(n, k) for n in (1, 2) for k in range(2)]
    meta = {"kv_capacity_tokens": 64, "prefill_ms_per_token": 2.0, "prefill_ms_per_step": 3.0, "idle_w": 7.0}
    table = CostTable.from_cells(TableKey(1, "test", "test", {}), cells, meta=meta)
    reqs = requests([(0.0, 10, 2), (1.0, 10, 2)])
    res = simulate(reqs, table, small_calibration(), "fixed:1")
    assert res.kv["capacity_blocks"] == 4 and res.first_token_s[0] == pytest.approx(0.023)
    assert res.options["idle_w"] == 7.0 and res.energy["idle_j"] > 0
    mine = simulate(reqs, table, small_calibration(), "fixed:1", kv_capacity_tokens=32, prefill_ms_per_step=0.0)
    assert mine.kv["capacity_blocks"] == 2 and mine.first_token_s[0] == pytest.approx(0.020)
    assert np.isnan(mine.tpot_s).sum() == 0


def test_modelled_tables_carry_what_the_engine_needs():
    """`specsim table model` writes KV capacity and prefill costs from the same specs as the steps:
    Llama-3.1-8B on one H200 keeps about 0.13 MB of KV per token beside 16 GB of weights."""
    from specsim.demo_inputs import demo_table
    from specsim.sim.options import META_COSTS, ServerOptions

    table = demo_table()
    meta = table.meta
    assert 600_000 < meta["kv_capacity_tokens"] < 1_000_000
    assert 0 < meta["prefill_ms_per_token"] < 0.1 and meta["prefill_ms_per_step"] > 0
    resolved = ServerOptions().resolve(table)
    assert all(getattr(resolved, name) == meta[name] for name in META_COSTS)
    assert resolved.kv_capacity_tokens == meta["kv_capacity_tokens"]
    # Rendered and read back, the table keeps them.
    from specsim.table import CostTable

    assert CostTable.parse(table.to_text(), "<demo>").meta["kv_capacity_tokens"] == meta["kv_capacity_tokens"]


def test_the_options_resolve_once_into_a_frozen_value_a_run_reports():
    """``ServerOptions.resolve(table)``: every default filled in once, a frozen value (no dict a
    caller could change under the run); a run's ``options`` are its JSON-ready form."""
    import dataclasses
    import json

    from specsim.sim.options import ResolvedOptions, ServerOptions

    table = sloped_table()
    resolved = ServerOptions(k_max=1, idle_w=3.0).resolve(table)
    assert isinstance(resolved, ResolvedOptions)
    assert (resolved.max_num_seqs, resolved.k_max, resolved.idle_w, resolved.acceptance_trace) == (4, 1, 3.0, None)
    with pytest.raises(dataclasses.FrozenInstanceError):
        resolved.k_max = 2
    res = simulate(requests([(0.0, 2, 3), (0.1, 1, 2)]), table, small_calibration(), "fixed:2", k_max=1, idle_w=3.0)
    assert res.options == resolved.to_dict() and res.options["max_batch"] == 4
    assert json.loads(json.dumps(res.options)) == res.options


def sloped_table():
    """Plain steps of 6 ms plus 2 ms per sequence (8 ms at width 1, 10 ms at width 2)."""
    cells = [Cell(n, k, 6.0 + 2.0 * n, 1.0, 0.0 if k == 0 else 1.0, 0.0 if k == 0 else 0.1)
             for n in (1, 2, 4) for k in range(3)]
    return CostTable.from_cells(TableKey(1, "test", "test", {}), cells)


# A profiled prefill curve whose low end falls (64.66 ms at 1 token, 58.19 ms at 128): read as it
# is, its fixed part (64.66 ms) is above every decode step, and the decodes of a mixed step ride free.
FALLING_CURVE = "tokens,ms,j\n1,64.66,5\n128,58.19,5\n"


def test_a_curves_fixed_part_above_the_tables_plain_step_gives_way_to_it(tmp_path):
    from specsim.sim.options import ServerOptions, prefill_fixed_note, prefill_fixed_part

    path = tmp_path / "curve.csv"
    path.write_text(FALLING_CURVE)
    opts = dict(prefill_curve=str(path), max_num_batched_tokens=3, max_num_seqs=3, log_size=1 << 10)
    reqs = requests([(0.0, 1, 4), (0.0, 1, 4), (0.0, 3, 1)])
    res = simulate(reqs, sloped_table(), small_calibration(), "fixed:0", **opts)
    assert_matches_reference(res, run_reference(reqs, sloped_table(), small_calibration(), "fixed:0", **opts))
    # Steps 2 and 3 decode A and B (10 ms at width 2) beside one token of C's prompt (64.66 ms): one
    # pass shares the table's plain step at width 1 (8 ms), not the curve's 64.66 ms.
    ends = np.concatenate([[res.first_token_s[0]], res.step_t_s])
    mixed = np.diff(ends)[:2] * 1000.0
    assert res.step_prefill_tokens[:2].tolist() == [1, 1] and res.step_width[:2].tolist() == [2, 2]
    np.testing.assert_allclose(mixed, 10.0 + 64.66 - 8.0)
    resolved = ServerOptions(prefill_curve=str(path)).resolve(sloped_table())
    assert prefill_fixed_part(resolved) == pytest.approx((64.66, 5.0))
    assert prefill_fixed_part(resolved, sloped_table()) == pytest.approx((8.0, 1.0))
    note = prefill_fixed_note(resolved, sloped_table())
    assert "64.66 ms and 5 J" in note and "plain step at width 1 (8 ms and 1 J)" in note
    # A curve whose fixed part is below the plain step is taken as it is, and says nothing.
    path.write_text("tokens,ms,j\n1,4,0.2\n3,8,0.4\n")
    resolved = ServerOptions(prefill_curve=str(path)).resolve(sloped_table())
    assert prefill_fixed_part(resolved, sloped_table()) == pytest.approx((2.0, 0.1))
    assert prefill_fixed_note(resolved, sloped_table()) is None
