"""The serving simulation engine (docs/simulation.md): conservation, determinism, common random numbers,
the plain reference engine step for step, the outcome model, metrics, and the real GB10 table on
the Azure conversation hour."""

from __future__ import annotations

import csv
import io
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from specsim.calibration import AcceptanceCalibration
from specsim.calibration.spread import centres
from specsim.errors import PolicyError, SimulationError, TraceWarning
from specsim.sim import ServerOptions, simulate
from specsim.sim.outcomes import confidence_values, max_entropy_weights, occupancy_cdf
from specsim.sim.metrics import requests_csv, summarize
from specsim.sim.slo import SLO
from tests import reference_engine as ref
from tests.fixtures import SIM_DRAFTER as KEY
from tests.fixtures import gb10, random_requests, requests, small_calibration, small_table, with_spread
from tests.fixtures import flat_deep_table  # noqa: F401  (its old home: a subprocess below imports it from here)

POLICIES = ("fixed:0", "fixed:1", "fixed:3", "propose", "goodput", "sequence", "load-aware", "schedule:1-2=3,3-4=1,5-=0")


def ref_policy(text):
    from specsim.policy.policy import parse_policy

    p = parse_policy(text)
    if p.kind == "fixed":
        return ("fixed", p.depth)
    if p.kind == "schedule":
        return ("schedule", list(p.ranges))
    if p.kind == "sglang-adaptive":
        return ("sglang-adaptive", p.adaptive, p.graphs)
    if p.kind == "tree":
        return ("tree", p.nodes, p.tree_depth)
    return (p.kind,)


def run_reference(reqs, table, cal, policy, **opts):
    from specsim.sim.options import (
        DEFAULT_CHUNKED_PREFILL, DEFAULT_MAX_NUM_BATCHED_TOKENS, DEFAULT_PREFILL_J_PER_TOKEN,
        DEFAULT_MIXED_STEP_PRICING, DEFAULT_PREFILL_MS_PER_TOKEN,
    )

    opts = {"prefill_ms_per_token": DEFAULT_PREFILL_MS_PER_TOKEN, "prefill_j_per_token": DEFAULT_PREFILL_J_PER_TOKEN,
            "chunked_prefill": DEFAULT_CHUNKED_PREFILL, "max_num_batched_tokens": DEFAULT_MAX_NUM_BATCHED_TOKENS,
            "mixed_step_pricing": DEFAULT_MIXED_STEP_PRICING,
            **opts}
    if "max_num_seqs" in opts:
        opts["max_batch"] = opts.pop("max_num_seqs")
    opts.setdefault("max_batch", int(table.widths[-1]))
    opts.pop("log_size", None)
    if opts.pop("context_pricing", True) and table.contexts.size:
        opts["contexts"], opts["context_costs"] = table.contexts.tolist(), table.context_costs.tolist()
    if opts.get("prefill_curve") is not None:
        from specsim.sim.options import load_prefill_curve

        opts["prefill_curve"] = load_prefill_curve(opts["prefill_curve"])
    k_cap = min(opts.get("k_max") if opts.get("k_max") is not None else table.max_k, table.max_k)
    if opts.get("k_logged") is not None:
        k_cap = min(k_cap, opts["k_logged"])
    occ = occupancy_cdf(cal, k_cap, opts.pop("occupancy", None)).tolist()
    if cal.spread is not None and cal.spread.logit_sd > 0:
        opts["spread_sd"], opts["centre"] = cal.spread.logit_sd, centres(cal.p_accept, cal.spread.logit_sd).tolist()
    if cal.rank_acceptance is not None:
        opts["rank_acceptance"] = cal.rank_acceptance.tolist()
        if cal.spread is not None and cal.spread.logit_sd > 0:
            opts["tree_centre"] = centres(cal.rank_acceptance, cal.spread.logit_sd).tolist()
    widths = table.widths.tolist()
    costs = table.costs.tolist()
    rows = [(float(r["arrival_s"]), int(r["prompt_tokens"]), int(r["output_tokens"])) for r in reqs]
    return ref.ref_simulate(rows, widths, costs, cal.edges.tolist(), cal.p_accept.tolist(), cal.priors.tolist(),
                            occ, ref_policy(policy), **opts)


def assert_matches_reference(res, want):
    """Every figure equal, and the step log step for step when it holds every step."""
    assert np.array_equal(res.first_token_s, np.array(want["first"]), equal_nan=True)
    assert np.array_equal(res.finish_s, np.array(want["finish"]), equal_nan=True)
    assert np.array_equal(res.scheduled_s, np.array(want["sched"]), equal_nan=True)
    assert res.end_s == want["end_s"]
    assert res.energy["decode_j"] == want["decode_j"]
    assert res.energy["prefill_j"] == want["prefill_j"]
    assert res.energy["idle_j"] == want["idle_j"]
    assert res.depth_histogram.tolist() == want["depth_histogram"]
    c = res.counters
    names = ("decode_steps", "prefill_steps", "mixed_steps", "accepted_drafts", "verified_rows", "sequence_steps",
             "preemptions", "drafts_cut", "prefill_tokens", "resumed")
    ref_names = ("decode_steps", "prefill_steps", "mixed_steps", "accepted", "rows", "sequence_steps", "preemptions",
                 "drafts_cut", "prefill_tokens", "resumed")
    assert tuple(c[n] for n in names) == tuple(want[n] for n in ref_names)
    assert res.kv["peak_blocks"] == want["kv_peak"] and res.kv["block_s"] == want["kv_block_s"]
    assert res.kv["mean_decode_context"] == want["mean_decode_context"]
    if res.step_log_stride == 1 and res.step_t_s.shape[0] == len(want["steps"]):
        got = list(zip(res.step_t_s.tolist(), res.step_width.tolist(), res.step_mean_depth.tolist(),
                       res.step_tokens.tolist(), res.step_kv_blocks.tolist(), res.step_prefill_tokens.tolist()))
        assert got == [tuple(s) for s in want["steps"]]
    else:
        assert res.step_log_stride > 1 or res.step_t_s.shape[0] == 0


# -- conservation and special cases ----------------------------------------------------------------

@pytest.mark.parametrize("policy", POLICIES)
def test_conservation(policy):
    reqs = random_requests(120, 1)
    res = simulate(reqs, small_table(), small_calibration(), policy, max_num_seqs=4, prefill_ms_per_token=0.01)
    assert not np.isnan(res.finish_s).any()
    assert (res.first_token_s >= res.arrival_s).all() and (res.finish_s >= res.first_token_s).all()
    assert res.counters["emitted_tokens"] == int(reqs["output_tokens"].sum())
    # Every token is a first token, one per sequence-step, or an accepted draft.
    c = res.counters
    assert c["emitted_tokens"] == len(reqs) + c["sequence_steps"] + c["accepted_drafts"]
    assert res.depth_histogram.sum() == c["sequence_steps"]
    assert c["verified_rows"] == int((np.arange(res.depth_histogram.shape[0]) * res.depth_histogram).sum())


def test_fixed_zero_is_one_token_per_sequence_per_step():
    reqs = random_requests(80, 2)
    res = simulate(reqs, small_table(), small_calibration(), "fixed:0", max_num_seqs=3, log_size=1 << 16)
    c = res.counters
    assert c["accepted_drafts"] == 0 and c["verified_rows"] == 0 and c["speculative_steps"] == 0
    assert c["sequence_steps"] == int((reqs["output_tokens"] - 1).sum())
    assert res.step_log_stride == 1 and res.step_t_s.shape[0] == c["decode_steps"]
    assert np.array_equal(res.step_tokens, res.step_width)


def test_one_token_requests_finish_at_prefill_and_empty_trace():
    res = simulate(requests([(0.0, 10, 1), (0.5, 20, 1)]), small_table(), small_calibration(), "sequence",
                   prefill_ms_per_token=1.0, prefill_j_per_token=0.5, idle_w=3.0)
    assert res.finish_s.tolist() == pytest.approx([0.01, 0.52])
    assert res.counters["decode_steps"] == 0 and res.energy["prefill_j"] == 15.0
    assert res.energy["idle_j"] == pytest.approx(3.0 * 0.49)
    assert math.isnan(res.summary()["tpot_s"]["p50"] or math.nan)
    empty = simulate(requests([]), small_table(), small_calibration(), "propose")
    assert empty.requests == 0 and empty.summary()["tokens_per_s"] is None


def test_resumable_chunks_give_the_same_result(monkeypatch):
    from specsim.sim import engine

    reqs = random_requests(60, 3)
    whole = simulate(reqs, small_table(), small_calibration(), "sequence", max_num_seqs=4)
    monkeypatch.setattr(engine, "PROGRESS_CHUNK", 7)
    seen = []
    cut = simulate(reqs, small_table(), small_calibration(), "sequence", max_num_seqs=4, progress=seen.append)
    assert len(seen) > 10 and seen == sorted(seen) and seen[-1] == 60
    assert np.array_equal(whole.finish_s, cut.finish_s) and whole.energy == cut.energy


# -- determinism and common random numbers ---------------------------------------------------------

def test_same_seed_identical_different_seed_different():
    reqs = random_requests(100, 4)
    runs = [simulate(reqs, small_table(), small_calibration(), "sequence", max_num_seqs=4, seed=s) for s in (7, 7, 8)]
    a, b, c = runs
    assert np.array_equal(a.finish_s, b.finish_s) and a.energy == b.energy and a.counters == b.counters
    assert not np.array_equal(a.finish_s, c.finish_s)
    assert a.counters["accepted_drafts"] != c.counters["accepted_drafts"]


def test_uniform_draws_match_reference_and_look_uniform():
    from specsim.sim._draw_kernels import seed_key_nb, uniform_nb

    rng = np.random.default_rng(5)
    for _ in range(200):
        seed, req, tok, pos, stream = (int(rng.integers(0, 2 ** 63)), int(rng.integers(0, 10 ** 7)),
                                       int(rng.integers(0, 10 ** 5)), int(rng.integers(1, 9)), int(rng.integers(0, 2)))
        got = uniform_nb(np.uint64(seed_key_nb(np.uint64(seed))), req, tok, pos, stream)
        assert got == ref.ref_uniform(seed, req, tok, pos, stream)
    u = np.array([uniform_nb(np.uint64(seed_key_nb(np.uint64(1))), r, 3, 1, 0) for r in range(4000)])
    assert abs(u.mean() - 0.5) < 0.02 and u.min() >= 0.0 and u.max() < 1.0


def first_step_accepted(policy, kmax=3, count=60, seed=0):
    """Accepted drafts of each request's first decode step when it is served alone."""
    reqs = requests([(float(10 * i), 5, kmax + 2) for i in range(count)])
    res = simulate(reqs, small_table(), small_calibration(), policy, max_num_seqs=1, seed=seed, log_size=1 << 12)
    assert res.step_log_stride == 1
    out, i, left = [], 0, None
    for tok in res.step_tokens.tolist():
        if left is None:
            out.append(tok - 1)
            left = kmax + 1
        left -= tok
        if left == 0:
            left = None
            i += 1
    assert i == count
    return np.array(out)


def test_common_draws_across_policies():
    a = {k: first_step_accepted(f"fixed:{k}") for k in range(4)}
    assert (a[0] == 0).all()
    for k in range(1, 4):
        # A deeper policy meets the same drafts: its accepted run is the shallower one's, extended.
        assert np.array_equal(np.minimum(a[3], k), a[k])
    assert a[3].sum() > a[1].sum()
    seq = first_step_accepted("sequence")
    assert (seq <= a[3]).all()


@given(seed=st.integers(0, 2 ** 64 - 1), req=st.integers(0, 10 ** 6), tok=st.integers(0, 10 ** 4))
@settings(max_examples=50, deadline=None)
def test_accepted_run_is_prefix_monotone(seed, req, tok):
    cal = small_calibration()
    occ = occupancy_cdf(cal, 3).tolist()
    runs = []
    for depth in range(4):
        acc = 0
        for j in range(1, depth + 1):
            if not ref.ref_draft_accepted(occ, cal.p_accept.tolist(), seed, req, tok + j - 1, j):
                break
            acc += 1
        runs.append(acc)
    assert runs == sorted(runs)


# -- against the plain reference engine --------------------------------------------------------------

@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("opts", [
    dict(max_num_seqs=4),
    dict(max_num_seqs=3, max_seqs=2, k_max=2, prefill_ms_per_token=0.05, prefill_j_per_token=0.01, idle_w=7.5, seed=9),
    dict(max_num_seqs=6, row_budget=5, slack=0.3, prefill_ms_per_token=0.02, seed=3),
])
@pytest.mark.parametrize("spread", [None, 1.2])
def test_engine_matches_reference(policy, opts, spread):
    reqs = random_requests(40, 11, rate=1.0)
    table, cal = small_table(), with_spread(small_calibration(), spread)
    res = simulate(reqs, table, cal, policy, **opts)
    want = run_reference(reqs, table, cal, policy, **opts)
    assert_matches_reference(res, want)


@given(
    n=st.integers(1, 25), trace_seed=st.integers(0, 10 ** 6), seed=st.integers(0, 2 ** 64 - 1),
    policy=st.sampled_from(POLICIES), max_batch=st.integers(1, 9), slack=st.sampled_from([0.0, 0.2, 0.6]),
    row_budget=st.one_of(st.none(), st.integers(0, 12)), k_max=st.one_of(st.none(), st.integers(0, 4)),
    rate=st.sampled_from([0.3, 3.0, 30.0]), spread=st.sampled_from([None, 0.0, 0.7, 4.0]),
)
@settings(max_examples=30, deadline=None)
def test_engine_matches_reference_random(n, trace_seed, seed, policy, max_batch, slack, row_budget, k_max, rate,
                                         spread):
    reqs = random_requests(n, trace_seed, rate=rate, max_out=25)
    table, cal = small_table(), with_spread(small_calibration(), spread)
    opts = dict(max_num_seqs=max_batch, slack=slack, row_budget=row_budget, k_max=k_max, seed=seed,
                prefill_ms_per_token=0.03, prefill_j_per_token=0.02, idle_w=4.0)
    want = run_reference(reqs, table, cal, policy, **opts)
    assert_matches_reference(simulate(reqs, table, cal, policy, **opts), want)


@given(
    n=st.integers(1, 20), trace_seed=st.integers(0, 10 ** 6), seed=st.integers(0, 2 ** 32),
    policy=st.sampled_from(POLICIES), max_batch=st.integers(1, 6), chunked=st.booleans(),
    budget=st.one_of(st.none(), st.integers(1, 700)), kv_room=st.one_of(st.none(), st.integers(-48, 1200)),
    block=st.sampled_from([1, 7, 16, 32]), step_ms=st.sampled_from([0.0, 4.0]), rate=st.sampled_from([0.5, 5.0, 50.0]),
    curve=st.booleans(),
)
@settings(max_examples=60, deadline=None)
def test_scheduling_matches_reference_random(n, trace_seed, seed, policy, max_batch, chunked, budget, kv_room, block,
                                             step_ms, rate, curve):
    """Token budget, chunked or separate prefill, KV blocks and preemption, against the reference
    step for step; and the rules' invariants.

    The KV capacity is drawn relative to the least that holds the largest request alone (its
    prompt, output and a full set of drafts): a cache smaller than that is refused, as it must be,
    and a larger one runs, with preemption when the requests do not all fit at once."""
    reqs = random_requests(n, trace_seed, rate=rate, max_out=25)
    table, cal = small_table(), small_calibration()
    kv = None
    if kv_room is not None:
        # Blocks the largest request needs alone (k_max defaults to the table's deepest depth).
        need = int((-(-(reqs["prompt_tokens"] + reqs["output_tokens"] - 1 + table.max_k) // block)).max())
        kv = max(1, need * block + kv_room)
        if kv // block < need:
            with pytest.raises(SimulationError, match="KV blocks"):
                simulate(reqs, table, cal, policy, max_num_seqs=max_batch, kv_capacity_tokens=kv, kv_block_size=block)
            return
    opts = dict(max_num_seqs=max_batch, seed=seed, chunked_prefill=chunked, max_num_batched_tokens=budget,
                kv_capacity_tokens=kv, kv_block_size=block, prefill_ms_per_step=step_ms, prefill_j_per_step=step_ms / 2,
                prefill_ms_per_token=0.03, prefill_j_per_token=0.02, idle_w=4.0, log_size=1 << 14)
    if curve:  # a profiled curve replaces the affine prefill costs (giving both is refused)
        for name in ("prefill_ms_per_step", "prefill_j_per_step", "prefill_ms_per_token", "prefill_j_per_token"):
            del opts[name]
        opts["prefill_curve"] = ((16.0, 128.0, 1024.0), (5.0, 6.0, 20.0), (2.0, 2.5, 9.0))
    res = simulate(reqs, table, cal, policy, **opts)
    assert_matches_reference(res, run_reference(reqs, table, cal, policy, **opts))
    assert_serving_invariants(res, reqs)


@pytest.mark.kernels
@pytest.mark.parametrize("chunked", [False, True])
@pytest.mark.parametrize("policy", ["fixed:0", "fixed:3", "propose"])
@pytest.mark.parametrize("block", [1, 2, 3, 4, 5, 16])
def test_kv_blocks_of_uniform_decodes_match_the_reference(block, policy, chunked):
    """With an unlimited cache a uniform step of decodes settles its KV blocks in apply's pass: at
    most one block more per request where a step's 1 + k tokens fit one block (a block of 4 with 3
    drafts: exactly one block a step), the general rule where they do not (blocks of 1 to 3 tokens
    with 3 drafts); the peak, block-seconds and the logged blocks are the reference's."""
    reqs = random_requests(30, 11, rate=20.0, max_out=40)
    table, cal = small_table(), small_calibration()
    opts = dict(max_num_seqs=4, kv_block_size=block, chunked_prefill=chunked, prefill_ms_per_token=0.03,
                prefill_j_per_token=0.02, log_size=1 << 14)
    if not chunked:
        opts["max_num_batched_tokens"] = None
    res = simulate(reqs, table, cal, policy, **opts)
    assert res.counters["decode_steps"] > 0 and res.kv["peak_blocks"] > 0
    assert_matches_reference(res, run_reference(reqs, table, cal, policy, **opts))


def assert_serving_invariants(res, reqs):
    """Conservation, budget, KV capacity and every (preempted) request finishing."""
    c = res.counters
    assert not np.isnan(res.finish_s).any() and not np.isnan(res.scheduled_s).any()
    assert (res.scheduled_s >= res.arrival_s).all() and (res.first_token_s >= res.scheduled_s).all()
    assert (res.finish_s >= res.first_token_s).all()
    assert c["emitted_tokens"] == int(reqs["output_tokens"].sum())
    assert c["emitted_tokens"] == len(reqs) + c["resumed"] + c["sequence_steps"] + c["accepted_drafts"]
    assert c["recomputed_tokens"] >= 0 and (c["preemptions"] > 0 or c["recomputed_tokens"] == 0)
    assert c["resumed"] <= c["preemptions"]
    budget = res.options["max_num_batched_tokens"]
    if budget is not None and res.options["chunked_prefill"] and res.step_log_stride == 1:
        # Every decode token (1 + verified drafts) and prefill token of a step counts against it.
        used = res.step_width * (1 + res.step_mean_depth) + res.step_prefill_tokens
        assert (used <= budget + 1e-9).all()
    if res.kv["capacity_blocks"] is not None:
        assert res.kv["peak_blocks"] <= res.kv["capacity_blocks"]
        assert (res.step_kv_blocks <= res.kv["capacity_blocks"]).all()


def test_engine_matches_reference_with_explicit_occupancy():
    reqs = random_requests(30, 12)
    table, cal = small_table(), small_calibration()
    occ = [[0.0, 0.2, 0.3, 0.5], [0.4, 0.4, 0.2, 0.0]]
    res = simulate(reqs, table, cal, "sequence", max_num_seqs=4, occupancy=occ)
    assert_matches_reference(res, run_reference(reqs, table, cal, "sequence", max_num_seqs=4, occupancy=occ))


# -- the outcome model -----------------------------------------------------------------------------

@given(p=st.lists(st.floats(0.0, 1.0), min_size=1, max_size=12), target=st.floats(0.0, 1.0))
@settings(max_examples=80, deadline=None)
def test_max_entropy_weights_hit_the_prior(p, target):
    p = np.array(p)
    w = max_entropy_weights(p, target)
    assert w.shape == p.shape and (w >= 0).all() and w.sum() == pytest.approx(1.0)
    lo, hi = p.min(), p.max()
    assert float(w @ p) == pytest.approx(min(max(target, lo), hi), abs=1e-9)
    # Maximum entropy: buckets with equal p_accept get equal weight.
    for i in range(len(p)):
        for j in range(len(p)):
            if p[i] == p[j]:
                assert w[i] == pytest.approx(w[j], abs=1e-12)


def test_occupancy_rows_and_confidences_map_back():
    cal = small_calibration()
    cdf = occupancy_cdf(cal, 5)
    assert cdf.shape == (5, 4) and (cdf[:, -1] == 1.0).all() and (np.diff(cdf, axis=1) >= 0).all()
    weights = np.diff(np.concatenate([np.zeros((5, 1)), cdf], axis=1), axis=1)
    assert (weights @ cal.p_accept).tolist() == pytest.approx([0.75, 0.6, 0.55, 0.55, 0.55])
    assert [cal.bucket(v) for v in confidence_values(cal)] == [0, 1, 2, 3]
    one = AcceptanceCalibration(KEY, [0.0], [0.6], [0.8, 0.5])
    assert occupancy_cdf(one, 2).tolist() == [[1.0], [1.0]]
    with pytest.raises(SimulationError, match="one per calibration bucket"):
        occupancy_cdf(cal, 2, [1.0, 2.0])
    with pytest.raises(SimulationError, match="positive sum"):
        occupancy_cdf(cal, 2, [0.0, 0.0, 0.0, 0.0])


def _cell(v):
    """The coarse cell of float32 ``v`` (the planner's cell table's index)."""
    from specsim.calibration._kernels import BUCKET_CELLS

    b = int(np.float32(v).view(np.int32))
    return ((b ^ ((b >> 31) & 0x7FFFFFFF)) >> 20) + BUCKET_CELLS // 2


def _cell_ends(c):
    """The lowest and highest float32 values of coarse cell ``c``."""
    from specsim.calibration._kernels import BUCKET_CELLS

    keys = [np.int32(((c - BUCKET_CELLS // 2) << 20) | r) for r in (0, 0xFFFFF)]
    return [(k ^ ((k >> 31) & 0x7FFFFFFF)).view(np.float32) for k in keys]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.floats(-50.0, 2.0, width=32), min_size=1, max_size=40, unique=True))
def test_shown_confidences_map_back_and_take_one_load_where_their_bucket_holds_a_whole_cell(edges):
    # Each bucket's shown confidence lies in it; where a coarse cell lies wholly in the bucket at
    # or below its upper edge, the shown one is in such a cell, so the planner's cell table answers
    # it with one load (the upper edge itself, shown before, mostly sits in a cell an edge cuts).
    from types import SimpleNamespace

    from specsim.calibration.calibration import cell_probabilities
    from tests.reference import ref_bucket

    e = np.unique(np.array(edges, dtype=np.float32))
    p = np.linspace(0.01, 0.99, e.shape[0])
    shown = confidence_values(SimpleNamespace(edges=e))
    assert shown.dtype == np.float32 and shown.flags.c_contiguous
    assert [ref_bucket(e, v) for v in shown] == list(range(e.shape[0]))
    table = cell_probabilities(e, p)

    def whole(c, b):
        ends = _cell_ends(c)
        return not np.isnan(ends).any() and ends[1] <= e[b] and ref_bucket(e, ends[0]) == ref_bucket(e, ends[1]) == b

    for b in range(e.shape[0]):
        # Cells run in value order: the highest one wholly in bucket b at or below its edge is the
        # edge's own cell (the edge its top) or the one below it, if any is.
        c = _cell(e[b])
        if whole(c, b) or whole(c - 1, b):
            assert table[_cell(shown[b])] == p[b]
        else:
            assert shown[b] == e[b]


@pytest.mark.kernels
@pytest.mark.parametrize("outcomes", ["calibration", "spread", "trace"])
def test_the_engine_planner_answers_alike_with_and_without_the_cell_table(outcomes):
    # The engine's per-sequence planner looks the drafts' confidences up through the
    # calibration's cell table (the bundle's cell_p, built once); on a run with many confidences
    # (40 buckets, some edges alone in their cells, some not) its depths, step by step, are
    # those of the lookup without the table with the buckets' upper edges shown (the engine's
    # lookups before), under the plain draws, a request spread and a replayed acceptance trace
    # (whose drafts show the planner no confidence).
    from specsim.calibration.calibration import cell_probabilities
    from specsim.sim import parse_policy
    from specsim.sim._engine_kernels import run_nb
    from specsim.sim.engine import collect, prepare

    edges = sorted({round(-6.0 + 0.15 * i, 2) for i in range(40)} | {0.0})
    p = np.linspace(0.02, 0.99, len(edges))
    cal = AcceptanceCalibration(KEY, edges, p.tolist(), [0.8, 0.7, 0.6])
    cal = with_spread(cal, 0.8 if outcomes == "spread" else None)
    trace = acceptance_trace([0, 1, 3, 2, 3, 1, 0, 2, 3], 3) if outcomes == "trace" else None
    reqs = random_requests(200, 9, rate=8.0)
    runs = []
    for lookup in ("table", "edges"):
        pr = prepare(reqs, small_table(), cal, parse_policy("sequence"), ServerOptions(max_num_seqs=4, seed=5),
                     trace)
        assert np.array_equal(pr.cal.cell_p, cell_probabilities(cal.edges, cal.p_accept))
        if lookup == "edges":
            pr = pr._replace(cal=pr.cal._replace(cell_p=pr.cal.cell_p[:0],
                                                 conf_values=np.ascontiguousarray(cal.edges, dtype=np.float32)))
        else:
            hits = sum(pr.cal.cell_p[_cell(v)] >= 0 for v in pr.cal.conf_values)
            assert 0 < hits and sum(pr.cal.cell_p[_cell(v)] >= 0 for v in cal.edges) < hits
        while not run_nb(pr.req, pr.tab, pr.cal, pr.srv, pr.st, pr.log, pr.ws, pr.plan, pr.tree, 1 << 20):
            pass
        runs.append(collect(pr))
    a, b = runs
    assert a.counters == b.counters and a.counters["sequence_steps"] > 1000 and a.counters["verified_rows"] > 0
    for name in ("finish_s", "first_token_s", "depth_histogram", "step_width", "step_mean_depth", "step_tokens"):
        assert np.array_equal(getattr(a, name), getattr(b, name)), name


def test_draw_frequencies_follow_the_occupancy():
    cal = small_calibration()
    occ = occupancy_cdf(cal, 1).tolist()
    w = np.diff([0.0] + occ[0])
    hits = np.bincount([ref.ref_draft_bucket(occ, 2, r, 0, 1) for r in range(6000)], minlength=4) / 6000
    assert np.abs(hits - w).max() < 0.03


def test_refusals():
    reqs = random_requests(5, 1)
    t, c = small_table(), small_calibration()
    with pytest.raises(SimulationError, match="slack"):
        simulate(reqs, t, c, "propose", slack=1.0)
    with pytest.raises(SimulationError, match="max_num_seqs"):
        simulate(reqs, t, c, "propose", max_num_seqs=0)
    with pytest.raises(SimulationError, match="64 bits"):
        simulate(reqs, t, c, "propose", seed=2 ** 64)
    with pytest.raises(SimulationError, match="idle_w"):
        simulate(reqs, t, c, "propose", idle_w=-1.0)
    with pytest.raises(SimulationError, match="sorted"):
        simulate(reqs[::-1].copy(), t, c, "propose")
    with pytest.raises(SimulationError, match="record array"):
        simulate(np.zeros(3), t, c, "propose")
    with pytest.raises(SimulationError, match="not both"):
        simulate(reqs, t, c, "propose", options=ServerOptions(), seed=1)
    with pytest.raises(PolicyError):
        simulate(reqs, t, c, "fastest")


def test_default_max_num_seqs_is_the_widest_width_and_caps_hold():
    reqs = requests([(0.0, 1, 30)] * 10)
    res = simulate(reqs, small_table(), small_calibration(), "fixed:3", max_seqs=3, log_size=1 << 12)
    assert res.options["max_num_seqs"] == 4 and res.step_width.max() == 4
    # Above the speculation cap every step is plain.
    assert (res.step_mean_depth[res.step_width > 3] == 0).all()
    assert (res.step_mean_depth[res.step_width <= 3] == 3).all()
    capped = simulate(reqs, small_table(), small_calibration(), "sequence", row_budget=2, log_size=1 << 12)
    assert (capped.step_mean_depth * capped.step_width <= 2 + 1e-12).all()


def test_step_log_downsamples_to_its_capacity():
    reqs = random_requests(50, 13)
    full = simulate(reqs, small_table(), small_calibration(), "fixed:2", max_num_seqs=2, log_size=1 << 16)
    small = simulate(reqs, small_table(), small_calibration(), "fixed:2", max_num_seqs=2, log_size=16)
    s = small.step_log_stride
    assert s > 1 and 8 <= small.step_t_s.shape[0] <= 16
    assert np.array_equal(small.step_t_s, full.step_t_s[::s][:small.step_t_s.shape[0]])


# -- results -----------------------------------------------------------------------------------------

def test_summary_and_csv():
    reqs = random_requests(70, 14)
    res = simulate(reqs, small_table(), small_calibration(), "propose", max_num_seqs=4, slack=0.2, idle_w=5.0)
    s = summarize(res, SLO(0.05, 0.02))
    assert res.summary(SLO(0.05, 0.02)) == s and s["slo"]["ttft_target_s"] == 0.05
    # The SLO is one value: the two targets as bare numbers are refused, saying what to pass.
    with pytest.raises(SimulationError, match=r"slo must be an SLO \(specsim.SLO"):
        res.summary(0.05)
    with pytest.raises(SimulationError, match="slo must be an SLO"):
        res.summary((0.05, 0.02))
    assert s["policy"] == "propose" and s["slack"] == 0.2 and s["label"] == "propose@0.2"
    assert s["output_tokens"] == int(reqs["output_tokens"].sum()) and s["requests"] == 70
    assert s["makespan_s"] == pytest.approx(np.nanmax(res.finish_s) - reqs["arrival_s"][0])
    assert s["j_per_token"] == pytest.approx(s["energy_j"] / s["output_tokens"])
    assert s["mean_power_w"] == pytest.approx(s["energy_j"] / s["makespan_s"])
    assert s["tokens_per_s"] == pytest.approx(s["output_tokens"] / s["makespan_s"])
    assert s["ttft_s"]["p90"] == pytest.approx(np.percentile(res.ttft_s, 90))
    tpot = res.tpot_s[reqs["output_tokens"] > 1]
    assert s["tpot_s"]["p99"] == pytest.approx(np.percentile(tpot, 99))
    ok = (res.ttft_s <= 0.05) & (np.isnan(res.tpot_s) | (res.tpot_s <= 0.02))
    assert s["slo"]["attainment"] == pytest.approx(ok.mean())
    assert sum(s["depth_histogram"].values()) == res.counters["sequence_steps"]
    assert s["energy_j"] == pytest.approx(sum(res.energy[k] for k in ("decode_j", "prefill_j", "idle_j")))

    rows = list(csv.DictReader(io.StringIO(requests_csv([res, res]))))
    assert len(rows) == 140 and rows[0]["policy"] == "propose" and rows[0]["slack"] == "0.2"
    for i in (0, 33, 69):
        assert float(rows[i]["finish_s"]) == res.finish_s[i]
        assert int(rows[i]["output_tokens"]) == reqs["output_tokens"][i]
        assert (rows[i]["tpot_s"] == "") == (reqs["output_tokens"][i] == 1)


def test_simulate_is_exported():
    import specsim

    assert specsim.simulate is simulate and specsim.SimResult is not None


# -- real data ---------------------------------------------------------------------------------------

def test_real_gb10_table_on_azure_conv(shared_data):
    from specsim.traces import read_trace

    table, cal = gb10(shared_data)
    read = read_trace(shared_data / "traces" / "azure2023" / "AzureLLMInferenceTrace_conv.csv")
    reqs = read.requests
    assert reqs.shape[0] == 19366
    out = {}
    for policy in ("fixed:0", "fixed:3", "propose", "sequence"):
        res = simulate(reqs, table, cal, policy, prefill_ms_per_token=0.5, prefill_j_per_token=0.03)
        assert not np.isnan(res.finish_s).any()
        assert res.counters["emitted_tokens"] == int(reqs["output_tokens"].sum()) == 4088665
        out[policy] = res.summary(SLO(tpot_s=0.1))
    # The measured table rewards speculating at every width it holds: MTP drafts are cheap next to
    # an ~80-160 ms verify, so every speculating policy beats plain decoding on both axes.
    for p in ("fixed:3", "propose", "sequence"):
        assert out[p]["tokens_per_s"] > out["fixed:0"]["tokens_per_s"]
        assert out[p]["j_per_token"] < out["fixed:0"]["j_per_token"]
        assert out[p]["tpot_s"]["p99"] < out["fixed:0"]["tpot_s"]["p99"]
    # The planner never does worse on energy than its own depth-1 reference would allow.
    assert out["sequence"]["j_per_token"] <= out["propose"]["j_per_token"] * 1.001


# -- draft outcomes from a replayed acceptance trace --------------------------------------------

def acceptance_trace(digits, k_logged, name="t"):
    from specsim.sim import AcceptanceTrace

    return AcceptanceTrace(name, "", k_logged, np.array(digits, dtype=np.int8), "<test>")


@pytest.mark.parametrize("policy", POLICIES)
def test_acceptance_trace_matches_reference(policy):
    reqs = random_requests(35, 21, rate=1.5)
    table, cal = small_table(), small_calibration()
    digits = [0, 1, 2, 2, 0, 1, 1, 0, 2, 1, 0, 0, 2]
    trace = acceptance_trace(digits, 2)
    opts = dict(max_num_seqs=4, seed=4, slack=0.1)
    res = simulate(reqs, table, cal, policy, acceptance=trace, **opts)
    want = run_reference(reqs, table, cal, policy, digits=digits, k_logged=2, **opts)
    assert_matches_reference(res, want)
    assert res.options["acceptance_trace"] == "t" and res.options["k_max"] == 2
    assert res.depth_histogram[3] == 0


def test_acceptance_trace_common_draws_and_warning():
    reqs = requests([(float(10 * i), 5, 6) for i in range(40)])
    trace = acceptance_trace([3, 0, 1, 2, 3, 1, 0, 2], 3)
    res = {k: simulate(reqs, small_table(), small_calibration(), f"fixed:{k}", max_num_seqs=1, acceptance=trace)
           for k in (1, 2, 3)}
    # Every step's accepted run is min(entry, depth) of the same entry, so tokens per step grow with depth.
    assert res[1].counters["accepted_drafts"] < res[2].counters["accepted_drafts"] < res[3].counters["accepted_drafts"]
    with pytest.warns(TraceWarning, match="exceed k_logged"):
        simulate(reqs, small_table(), small_calibration(), "fixed:3", acceptance=acceptance_trace([5, 1], 3))
    with pytest.raises(SimulationError, match="AcceptanceTrace"):
        simulate(reqs, small_table(), small_calibration(), "fixed:3", acceptance=[1, 2])


def test_real_glm_acceptance_trace_on_azure_code(shared_data):
    from specsim.sim import load_acceptance_file, read_trace

    afile = load_acceptance_file(shared_data / "metrale" / "glm53_flash_dflash2_gb10x3.toml")
    reqs = read_trace(shared_data / "traces" / "azure2023" / "AzureLLMInferenceTrace_code.csv", limit=2000).requests
    name = next(n for n, t in afile.traces.items() if t.above_k_logged == 0)
    trace = afile.trace(name)
    res = simulate(reqs, small_table(), small_calibration(), "fixed:3", acceptance=trace)
    assert res.counters["emitted_tokens"] == int(reqs["output_tokens"].sum())
    # Over many steps the accepted run per step tends to the trace's mean run at depth min(3, k_logged).
    depth = min(3, trace.k_logged)
    want = np.minimum(trace.accepted, depth).mean()
    got = res.counters["accepted_drafts"] / res.counters["sequence_steps"]
    assert abs(got - want) < 0.15 * max(want, 0.1)


def test_sequence_policy_at_width_256_depth_8_does_not_corrupt_memory():
    """Regression: the engine once sized the sort workspace below what the planner kernel
    writes; at width 256 and depth 8 (2,048 gains a step) the process aborted."""
    import subprocess
    import sys
    import textwrap

    code = textwrap.dedent("""
        import numpy as np
        from tests.sim.test_engine import flat_deep_table, requests
        from specsim.calibration import AcceptanceCalibration
        from specsim.sim import simulate
        from tests.sim.test_engine import KEY
        cal = AcceptanceCalibration(KEY, [-1.0, 0.0], [0.9, 0.99], [0.95] * 8)
        reqs = requests([(0.0, 10, 60)] * 300)
        res = simulate(reqs, flat_deep_table(), cal, "sequence", max_num_seqs=256)
        assert res.counters["emitted_tokens"] == 300 * 60, res.counters
        print("ok", res.depth_histogram.tolist())
    """)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.startswith("ok")


# -- the policy object ------------------------------------------------------------------------------

def test_policy_properties_and_depth_labels():
    from specsim.policy.policy import parse_policy

    seq, fix, sch = parse_policy("sequence"), parse_policy("fixed:2"), parse_policy("schedule:1-16=4,17-=1")
    assert (seq.needs_planner, seq.reads_slack, seq.per_sequence) == (True, True, True)
    assert (fix.needs_planner, fix.reads_slack, fix.params, fix.max_depth) == (False, False, (2,), 2)
    assert parse_policy("goodput").needs_planner and not parse_policy("goodput").reads_slack
    assert sch.label == "schedule:1-16=4,17-=1" and sch.max_depth == 4
    reqs = random_requests(10, 3)
    table, cal = small_table(), small_calibration()  # max_k = 3
    with pytest.raises(PolicyError, match="prices depths up to 3"):
        simulate(reqs, table, cal, "fixed:99")
    with pytest.raises(PolicyError, match="prices depths up to 3"):
        simulate(reqs, table, cal, "schedule:1-2=4,3-=1")
    # Under a lower k_max the label names the depth actually run, and the run is that depth's.
    capped = simulate(reqs, table, cal, "fixed:3", k_max=2)
    assert capped.policy == "fixed:2" and capped.policy_spec == parse_policy("fixed:2")
    plain = simulate(reqs, table, cal, "fixed:2")
    assert np.array_equal(capped.finish_s, plain.finish_s)
    assert simulate(reqs, table, cal, "schedule:1-2=3,3-=1", k_max=1).policy == "schedule:1-2=1,3-=1"
    assert summarize(simulate(reqs, table, cal, "propose", slack=0.2))["label"] == "propose@0.2"
    assert summarize(capped)["slack"] is None


# -- continuity with the first engine -----------------------------------------------------------------

def test_separate_prefill_mode_equals_the_first_engine_bit_for_bit(shared_data):
    """Separate prefill steps, no token budget, unlimited KV: every figure equals the pinned
    digests of the first engine on the demo trace and on the Azure conversation hour."""
    import json

    from tests.sim.engine_continuity import PINNED, compute

    got = compute(shared_data, {"chunked_prefill": False, "max_num_batched_tokens": None})
    assert got == json.loads(PINNED.read_text())


# -- load-aware: propose while requests wait, tokens per joule above idle power while none do ---------

def test_load_aware_depths_are_the_plain_rule_with_and_without_idle_power():
    """Both of load-aware's plans equal the plain-Python rule: propose's while requests wait, and
    propose's with every step's energy counted above idle power while none do."""
    from specsim.plan.depth_table import depth_by_width
    from specsim.policy.policy import parse_policy
    from tests.reference import ref_propose_depth

    table, cal = small_table(), small_calibration()
    widths, costs, priors = table.widths.tolist(), table.costs.tolist(), cal.priors.tolist()
    pol = parse_policy("load-aware")
    differs = False
    for idle_w in (0.0, 60.0, 150.0, 200.0):
        for slack in (0.0, 0.3, 0.6):
            opts = ServerOptions(idle_w=idle_w, slack=slack)
            busy = depth_by_width(pol, table, cal, opts, 9, table.max_k).tolist()
            idle = depth_by_width(pol, table, cal, opts, 9, table.max_k, idle_w=idle_w).tolist()
            assert busy == [0] + [ref_propose_depth(widths, costs, priors, n, slack, 99) for n in range(1, 10)]
            assert idle == [0] + [ref_propose_depth(widths, costs, priors, n, slack, 99, idle_w) for n in range(1, 10)]
            differs |= busy != idle
            if idle_w == 0.0:
                assert idle == busy
    assert differs  # the two plans do part somewhere on this table


@pytest.mark.parametrize("idle_w,slack", [(150.0, 0.3), (200.0, 0.6), (100.0, 0.0)])
@pytest.mark.parametrize("rate", [0.3, 30.0])
def test_load_aware_engine_matches_reference(idle_w, slack, rate):
    reqs = random_requests(40, 5, rate=rate, max_out=30)
    table, cal = small_table(), small_calibration()
    opts = dict(max_num_seqs=6, slack=slack, idle_w=idle_w, prefill_ms_per_token=0.02, seed=4)
    res = simulate(reqs, table, cal, "load-aware", **opts)
    assert_matches_reference(res, run_reference(reqs, table, cal, "load-aware", **opts))
    assert res.policy == "load-aware" and res.summary()["label"] == f"load-aware@{slack:g}"


def test_load_aware_switches_plans_with_the_queue():
    """Under a backlog load-aware is propose step for step; with an idle server and widths where
    the plans part, it runs its above-idle plan and spends less energy per token than propose."""
    table, cal = small_table(), small_calibration()
    opts = dict(max_num_seqs=6, slack=0.3, idle_w=150.0, prefill_ms_per_token=0.02)
    light = random_requests(60, 3, rate=0.5, max_out=30)
    la, pr = (simulate(light, table, cal, p, **opts) for p in ("load-aware", "propose"))
    assert la.depth_histogram.tolist() != pr.depth_histogram.tolist()
    assert la.energy_j / la.output_tokens.sum() < pr.energy_j / pr.output_tokens.sum()


@given(n=st.integers(1, 25), trace_seed=st.integers(0, 10 ** 6), idle_w=st.floats(0.0, 210.0),
       slack=st.sampled_from([0.0, 0.2, 0.6]), max_batch=st.integers(1, 9), rate=st.sampled_from([0.3, 3.0, 30.0]),
       chunked=st.booleans())
@settings(max_examples=30, deadline=None)
def test_load_aware_matches_reference_random(n, trace_seed, idle_w, slack, max_batch, rate, chunked):
    reqs = random_requests(n, trace_seed, rate=rate, max_out=25)
    table, cal = small_table(), small_calibration()
    opts = dict(max_num_seqs=max_batch, slack=slack, idle_w=idle_w, chunked_prefill=chunked,
                prefill_ms_per_token=0.03, prefill_j_per_token=0.02)
    assert_matches_reference(simulate(reqs, table, cal, "load-aware", **opts),
                             run_reference(reqs, table, cal, "load-aware", **opts))


def test_load_aware_refuses_a_table_drawing_no_more_than_idle_power():
    with pytest.raises(SimulationError, match="load-aware.*not above idle_w = 400"):
        simulate(random_requests(5, 1), small_table(), small_calibration(), "load-aware", idle_w=400.0)
    # Other policies do not plan by energy above idle, and run.
    simulate(random_requests(5, 1), small_table(), small_calibration(), "propose", idle_w=400.0)


@pytest.mark.kernels
def test_runs_on_the_same_requests_share_one_copy_of_their_columns():
    """``simulate_runs`` (and a verdict's reruns) validate the requests once and hand every run
    the same columns: the results hold one copy, not one each, and equal runs of the array."""
    from specsim.policy.policy import policy_runs
    from specsim.sim.engine import RequestColumns, request_columns, simulate_runs
    from specsim.sim.verdict import reruns

    reqs = random_requests(70, 6, rate=4.0)
    table, cal = small_table(), small_calibration()
    opts = ServerOptions(max_num_seqs=4)
    runs = simulate_runs(reqs, table, cal, policy_runs(["fixed:0", "fixed:2"], [0.0]), opts)
    assert np.shares_memory(runs[0].arrival_s, runs[1].arrival_s)
    assert np.shares_memory(runs[0].output_tokens, runs[1].output_tokens)
    for r, p in zip(runs, ("fixed:0", "fixed:2")):
        alone = simulate(reqs, table, cal, p, options=opts)
        assert np.array_equal(r.finish_s, alone.finish_s) and r.energy_j == alone.energy_j
        assert not np.shares_memory(alone.arrival_s, r.arrival_s)
    cols = request_columns(reqs)
    assert isinstance(cols, RequestColumns) and request_columns(cols) is cols
    assert np.array_equal(simulate(cols, table, cal, "fixed:2", options=opts).finish_s, runs[1].finish_s)
    rerun = reruns(reqs, table, cal, runs, opts)
    assert rerun(1, 0)["j_per_token"] == runs[1].summary()["j_per_token"]
    # A per-sequence planner's run starts first (the longest); the results stay in the runs' order.
    mixed = simulate_runs(reqs, table, cal, policy_runs(["fixed:2", "sequence", "fixed:0"], [0.0]), opts)
    assert [r.policy for r in mixed] == ["fixed:2", "sequence", "fixed:0"]
    assert np.array_equal(mixed[1].finish_s, simulate(reqs, table, cal, "sequence", options=opts).finish_s)


@pytest.mark.kernels
def test_the_engines_core_takes_a_policy_and_the_public_entry_reads_text_once(monkeypatch):
    """Policy text is read where users type it: ``simulate`` (the public entry) reads it once at
    its top; ``prepare``, ``simulate_runs`` and ``use_sequence_engine`` take :class:`Policy`
    values and refuse text instead of reading it again."""
    from specsim.policy.policy import parse_policy
    from specsim.sim import engine

    reqs = random_requests(12, 2)
    table, cal = small_table(), small_calibration()
    opts = ServerOptions(max_num_seqs=4)
    for call in (lambda: engine.prepare(reqs, table, cal, "fixed:1", opts),
                 lambda: engine.simulate_runs(reqs, table, cal, [("fixed:1", 0.0)], opts),
                 lambda: engine.use_sequence_engine(["sequence"])):
        with pytest.raises(PolicyError, match="the engine takes a Policy"):
            call()
    real, reads = engine.read_policy, []
    monkeypatch.setattr(engine, "read_policy", lambda text: reads.append(text) or real(text))
    typed = simulate(reqs, table, cal, "fixed:1", options=opts)
    assert reads == ["fixed:1"]
    value = simulate(reqs, table, cal, parse_policy("fixed:1"), options=opts)
    assert np.array_equal(typed.finish_s, value.finish_s) and typed.policy == value.policy == "fixed:1"
