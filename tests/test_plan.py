"""The planner (SPEC §4): hand-computed cases for every rule, and the kernels against the plain
reference in tests/reference.py on Hypothesis-generated inputs."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import specsim
from specsim import AcceptanceCalibration, Cell, CostTable, DrafterKey, Planner, TableKey
from specsim.errors import KeyMismatchError, PlanError
from specsim.plan import goodput_depth, propose_depth, sequence_depths
from tests.reference import ref_goodput_depth, ref_propose_depth, ref_sequence_depths

KEY = TableKey(1, "box", "recipe", {"verify": "v", "draft": "d"})
DRAFTER = DrafterKey("sha", 32000, "bf16", True)


def table(rows):
    """``rows``: {n: [(verify_ms, verify_j, draft_ms, draft_j) per k]}."""
    return CostTable.from_cells(KEY, [Cell(n, k, *c) for n, per_k in rows.items() for k, c in enumerate(per_k)])


def cal(priors, edges=(0.0,), p_accept=(0.5,)):
    return AcceptanceCalibration(DRAFTER, list(edges), list(p_accept), list(priors))


# --- §4.1 propose_depth ------------------------------------------------------------------------

TIE = table({1: [(10.0, 2.0, 0.0, 0.0), (10.0, 1.0, 1.0, 0.5), (10.0, 1.25, 2.0, 0.5)]})


def test_propose_ties_keep_the_shallower_depth():
    # tokens: 1, 1.5, 1.75; step J: 2, 1.5, 1.75 -> tokens/J 0.5, 1.0, 1.0 (exact tie)
    assert propose_depth(TIE, cal([0.5]), 1, 0.0, 8) == 1


def test_propose_takes_a_strictly_better_deeper_depth():
    t = table({1: [(10.0, 2.0, 0.0, 0.0), (10.0, 1.0, 1.0, 0.5), (10.0, 1.2, 2.0, 0.5)]})
    assert propose_depth(t, cal([0.5]), 1, 0.0, 8) == 2


def test_propose_skips_depths_slower_than_the_slack_allows():
    # depth 0 is the most efficient (1 / 0.1) but slower than depth 1: rate 1/10 vs 1.5/11.
    t = table({1: [(10.0, 0.1, 0.0, 0.0), (10.0, 1.0, 1.0, 0.5)]})
    assert propose_depth(t, cal([0.5]), 1, 0.0, 8) == 1
    # With slack, a depth at >= (1 - slack) of depth 1's rate is allowed: 0.1 >= 0.5 * 0.136.
    assert propose_depth(t, cal([0.5]), 1, 0.5, 8) == 0


def test_propose_with_only_the_reference_depth_feasible_returns_it():
    # Depth 2 is far more efficient but too slow; depth 0 is slower still: only r = 1 is left.
    t = table({1: [(100.0, 0.1, 0.0, 0.0), (10.0, 5.0, 1.0, 0.5), (90.0, 0.2, 2.0, 0.1)]})
    assert propose_depth(t, cal([0.9]), 1, 0.0, 8) == 1


def test_propose_max_k_zero():
    t = table({1: [(10.0, 1.0, 0.0, 0.0)], 4: [(12.0, 1.5, 0.0, 0.0)]})
    for n in range(0, 8):
        assert propose_depth(t, cal([0.9]), n, 0.3, 8) == 0


def test_propose_speculation_cap_boundary():
    c = cal([0.9])
    assert propose_depth(TIE, c, 8, 0.0, 8) == ref_propose_depth([1], [TIE.costs[0].tolist()], [0.9], 8, 0.0, 8)
    assert propose_depth(TIE, c, 8, 0.0, 8) != 0
    assert propose_depth(TIE, c, 9, 0.0, 8) == 0
    assert propose_depth(TIE, c, 1, 0.0, 0) == 0


def test_propose_interpolates_between_widths():
    # At n = 2 (halfway between 1 and 3) the costs are the midpoints.
    t = table({1: [(10.0, 1.0, 0.0, 0.0), (12.0, 4.0, 1.0, 1.0)], 3: [(10.0, 3.0, 0.0, 0.0), (12.0, 2.0, 1.0, 1.0)]})
    # n = 2: J(0) = 2, J(1) = 3 + 1 = 4; tokens 2, 3.8: 1.0 vs 0.95 -> 0 (rates: 0.2 vs 0.29, slack 0.5 ok)
    assert propose_depth(t, cal([0.9]), 2, 0.5, 8) == 0
    assert propose_depth(t, cal([0.9]), 2, 0.5, 8) == ref_propose_depth([1, 3], t.costs.tolist(), [0.9], 2, 0.5, 8)


def test_propose_refuses_bad_slack_and_width():
    with pytest.raises(PlanError, match="outside"):
        propose_depth(TIE, cal([0.5]), 1, 1.0, 8)
    with pytest.raises(PlanError, match="outside"):
        propose_depth(TIE, cal([0.5]), 1, -0.1, 8)
    with pytest.raises(PlanError, match="non-negative"):
        propose_depth(TIE, cal([0.5]), -1, 0.0, 8)


def test_goodput_ignores_energy():
    t = table({1: [(10.0, 0.1, 0.0, 0.0), (10.0, 9.0, 1.0, 5.0)]})
    assert goodput_depth(t, cal([0.5]), 1) == 1
    assert propose_depth(t, cal([0.5]), 1, 0.5, 8) == 0


# --- §4.2 sequence_depths ----------------------------------------------------------------------

def test_empty_batch():
    assert sequence_depths(TIE, cal([0.9]), [], [], 2, 10, 0.0) == []


def test_budget_below_the_batch_is_a_plain_step():
    t = table({3: [(10.0, 1.0, 0.0, 0.0), (11.0, 1.1, 1.0, 0.1), (12.0, 1.2, 2.0, 0.2)]})
    assert sequence_depths(t, cal([0.9]), [[], [], []], [2, 2, 2], 2, 2, 0.0) == [0, 0, 0]
    # A budget of exactly the first drafts is enough for them.
    assert sequence_depths(t, cal([0.9]), [[], [], []], [2, 2, 2], 2, 3, 0.0) == [1, 1, 1]


def test_sequences_without_drafts_get_zero():
    t = table({2: [(10.0, 1.0, 0.0, 0.0), (11.0, 1.1, 1.0, 0.1)]})
    assert sequence_depths(t, cal([0.9]), [[], []], [0, 3], 5, 10, 0.0) == [0, 1]


def test_a_later_row_pays_off_where_the_first_does_not():
    # n = 1, three drafts, prior 0.9: base 1 row (tokens 1.9), gains 0.81, 0.729.
    # Verify J by depth 1, 1, 5, 1.1 (+ sunk draft 0.3): J(1 row) 1.3, J(2) 5.3, J(3) 1.4.
    # tokens/J: 1.46, 0.51, 2.456 -> the full scan keeps 3 rows; stopping early would keep 1.
    t = table({1: [(10.0, 1.0, 0.0, 0.0), (10.0, 1.0, 1.0, 0.1), (10.0, 5.0, 2.0, 0.2), (10.0, 1.1, 3.0, 0.3)]})
    assert sequence_depths(t, cal([0.9]), [[]], [3], 3, 10, 0.0) == [3]
    assert ref_sequence_depths([1], t.costs.tolist(), [0.0], [0.5], [0.9], [[]], [3], 3, 10, 0.0) == [3]


def test_equal_gains_go_in_sequence_order():
    # Two identical sequences, room for one extra row, which pays: the first sequence gets it.
    t = table({2: [(10.0, 2.0, 0.0, 0.0), (10.0, 2.0, 1.0, 0.1), (10.0, 0.5, 2.0, 0.2)]})
    got = sequence_depths(t, cal([0.5]), [[], []], [2, 2], 2, 3, 0.0)
    assert got == [2, 1]
    assert got == ref_sequence_depths([2], t.costs.tolist(), [0.0], [0.5], [0.5], [[], []], [2, 2], 2, 3, 0.0)


def test_confidences_pick_which_sequence_goes_deeper():
    edges, p = [-1.0, 0.0], [0.2, 0.9]
    t = table({2: [(10.0, 2.0, 0.0, 0.0), (10.0, 2.0, 1.0, 0.1), (10.0, 0.5, 2.0, 0.2)]})
    c = cal([0.5], edges, p)
    # Sequence 1 is confident, sequence 0 is not: the single extra row goes to sequence 1.
    assert sequence_depths(t, c, [[-3.0, -3.0], [-0.01, -0.01]], [2, 2], 2, 3, 0.0) == [1, 2]
    # NaN is unmeasured: it takes the prior (0.5), which beats a low-confidence 0.2.
    assert sequence_depths(t, c, [[-3.0, -3.0], [float("nan"), float("nan")]], [2, 2], 2, 3, 0.0) == [1, 2]


def test_k_max_and_known_drafts_cap_every_sequence():
    t = table({1: [(10.0, 1.0, 0.0, 0.0)] + [(10.0, 0.1, 1.0 * k, 0.01 * k) for k in range(1, 6)]})
    got = sequence_depths(t, cal([1.0]), [[]] * 3, [5, 2, 9], 3, 100, 0.0)
    assert got == [3, 2, 3]
    # k_max above the table's deepest depth is clamped to it.
    assert sequence_depths(t, cal([1.0]), [[]], [9], 50, 100, 0.0) == [5]


def test_slack_limits_slow_extra_rows():
    # Extra rows are cheap in energy but slow: with no slack they are skipped.
    t = table({1: [(10.0, 1.0, 0.0, 0.0), (10.0, 1.0, 1.0, 0.1), (100.0, 0.2, 2.0, 0.2)]})
    assert sequence_depths(t, cal([0.9]), [[]], [2], 2, 5, 0.0) == [1]
    assert sequence_depths(t, cal([0.9]), [[]], [2], 2, 5, 0.95) == [2]


# --- Hypothesis against the reference ----------------------------------------------------------

ROUND = st.sampled_from([0.0, 0.25, 0.5, 0.75, 0.9, 1.0])
PROB = st.one_of(ROUND, st.floats(0.0, 1.0))
LP = st.one_of(
    st.sampled_from([-np.inf, -8.0, -1.0, -0.5, -0.1, -0.05, 0.0, float("nan")]),
    st.floats(-10.0, 0.5, allow_nan=False, width=32),
)


@st.composite
def tables(draw):
    widths = sorted(draw(st.sets(st.integers(1, 64), min_size=1, max_size=4)))
    max_k = draw(st.integers(0, 6))
    cost = st.one_of(st.sampled_from([1.0, 2.0, 4.0, 10.0]), st.floats(0.01, 100.0))
    cells = []
    for n in widths:
        for k in range(max_k + 1):
            d_ms, d_j = (0.0, 0.0) if k == 0 else (draw(cost), draw(cost))
            cells.append(Cell(n, k, draw(cost), draw(cost), d_ms, d_j))
    return CostTable.from_cells(KEY, cells)


@st.composite
def calibrations(draw):
    inner = sorted(draw(st.sets(st.sampled_from([-8.0, -4.0, -2.0, -1.0, -0.5, -0.1, -0.05]), max_size=5)))
    edges = inner + [0.0]
    p_accept = draw(st.lists(PROB, min_size=len(edges), max_size=len(edges)))
    priors = draw(st.lists(PROB, min_size=1, max_size=5))
    return AcceptanceCalibration(DRAFTER, edges, p_accept, priors)


@settings(max_examples=150, deadline=None)
@given(tables(), calibrations(), st.integers(0, 80), st.one_of(st.just(0.0), st.floats(0.0, 0.99)),
       st.integers(0, 80))
def test_propose_matches_reference(t, c, n, slack, max_seqs):
    want = ref_propose_depth(t.widths.tolist(), t.costs.tolist(), c.priors.tolist(), n, slack, max_seqs)
    assert propose_depth(t, c, n, slack, max_seqs) == want
    planner = Planner(t, c, slack=slack, max_seqs=max_seqs)
    assert planner.propose(n) == want
    assert planner.propose_many(np.array([n, n], dtype=np.int64)).tolist() == [want, want]
    assert goodput_depth(t, c, n, max_seqs) == ref_goodput_depth(t.widths.tolist(), t.costs.tolist(),
                                                                c.priors.tolist(), n, max_seqs)


@settings(max_examples=150, deadline=None)
@given(tables(), calibrations(), st.data(), st.one_of(st.just(0.0), st.floats(0.0, 0.99)))
def test_sequence_depths_match_reference(t, c, data, slack):
    n = data.draw(st.integers(0, 40))
    conf = [data.draw(st.lists(LP, max_size=7)) for _ in range(n)]
    known = [data.draw(st.integers(0, 8)) for _ in range(n)]
    k_max = data.draw(st.integers(0, 8))
    budget = data.draw(st.integers(0, 120))
    want = ref_sequence_depths(t.widths.tolist(), t.costs.tolist(), c.edges.tolist(), c.p_accept.tolist(),
                               c.priors.tolist(), conf, known, k_max, budget, slack)
    got = sequence_depths(t, c, conf, known, k_max, budget, slack)
    assert got == want
    # Invariants of §4.2.
    cap = min(k_max, t.max_k)
    assert all(0 <= d <= min(kd, cap) for d, kd in zip(got, known))
    assert sum(got) <= budget or sum(got) == 0


@settings(max_examples=100, deadline=None)
@given(tables(), calibrations(), st.data())
def test_raising_a_confidence_never_shortens_a_sequence(t, c, data):
    # Monotone calibrations only: more confident buckets accept at least as often.
    c = AcceptanceCalibration(DRAFTER, c.edges, np.sort(c.p_accept), c.priors)
    n = data.draw(st.integers(1, 12))
    conf = [data.draw(st.lists(st.floats(-10.0, 0.0, width=32), min_size=6, max_size=6)) for _ in range(n)]
    known = [6] * n
    budget = data.draw(st.integers(n, 6 * n))
    slack = data.draw(st.floats(0.0, 0.9))
    before = sequence_depths(t, c, conf, known, 6, budget, slack)
    i = data.draw(st.integers(0, n - 1))
    j = data.draw(st.integers(0, 5))
    raised = [list(r) for r in conf]
    raised[i][j] = data.draw(st.floats(conf[i][j], 0.0, width=32))
    after = sequence_depths(t, c, raised, known, 6, budget, slack)
    assert after[i] >= before[i]


# --- the scheduler-loop Planner ----------------------------------------------------------------

def _batch(rng, n, m, nan_share=0.1):
    conf = rng.uniform(-5.0, 0.0, (n, m)).astype(np.float32)
    conf[rng.random((n, m)) < nan_share] = np.nan
    return conf, rng.integers(0, m + 1, n).astype(np.int64), rng.integers(0, m + 2, n).astype(np.int64)


def test_planner_depths_fill_out_in_place_and_match_the_function():
    rng = np.random.default_rng(7)
    t = table({n: [(10.0 + n, 1.0 + n / 10, 0.0, 0.0)] + [(10.0 + n + k, 1.0 + n / 10 + 0.1 * k, 0.5 * k, 0.05 * k)
                                                           for k in range(1, 6)] for n in (1, 4, 16, 64)})
    c = cal([0.8, 0.7, 0.6], [-2.0, -0.5, 0.0], [0.3, 0.6, 0.9])
    planner = Planner(t, c, slack=0.2, max_seqs=64)
    for n in (0, 1, 5, 37, 64):
        conf, n_conf, known = _batch(rng, n, 6)
        out = np.full(n, -1, dtype=np.int64)
        got = planner.depths(conf, n_conf, known, 5, 3 * n, out=out)
        assert got is out
        ragged = [[float(v) for v in conf[i, : n_conf[i]]] for i in range(n)]
        assert out.tolist() == sequence_depths(t, c, ragged, known.tolist(), 5, 3 * n, 0.2)


def test_planner_batched_forms_equal_single_calls():
    rng = np.random.default_rng(3)
    t = table({n: [(5.0 + n, 1.0 + n / 8, 0.0, 0.0)] + [(5.0 + n * (1 + 0.3 * k), 1.0 + n / 8 * (1 + 0.2 * k), 0.7 * k, 0.06 * k)
                                                          for k in range(1, 5)] for n in (1, 2, 8, 32)})
    c = cal([0.75, 0.6], [-1.0, 0.0], [0.4, 0.85])
    planner = Planner(t, c, slack=0.1, max_seqs=20)
    ns = np.array([0, 1, 2, 3, 19, 20, 21, 5000, 7], dtype=np.int64)
    assert planner.propose_many(ns).tolist() == [planner.propose(int(n)) for n in ns]
    sizes = [3, 0, 8, 1]
    batches = [_batch(rng, s, 4) for s in sizes]
    conf = np.concatenate([b[0] for b in batches])
    n_conf = np.concatenate([b[1] for b in batches])
    known = np.concatenate([b[2] for b in batches])
    offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    budgets = np.array([5, 0, 20, 1], dtype=np.int64)
    got = planner.depths_many(conf, n_conf, known, offsets, 4, budgets)
    for b, (s, e) in enumerate(zip(offsets[:-1], offsets[1:])):
        want = planner.depths(conf[s:e], n_conf[s:e], known[s:e], 4, int(budgets[b]))
        assert got[s:e].tolist() == want.tolist()


def test_planner_refuses_mismatched_shapes():
    planner = Planner(TIE, cal([0.5]))
    with pytest.raises(PlanError, match=r"n_conf must be a 1-D array with one entry per sequence \(3\)"):
        planner.depths(np.zeros((3, 2), np.float32), np.zeros(2, np.int64), np.zeros(3, np.int64), 2, 9)
    with pytest.raises(PlanError, match="out has"):
        planner.depths(np.zeros((3, 2), np.float32), np.zeros(3, np.int64), np.zeros(3, np.int64), 2, 9,
                       out=np.zeros(2, np.int64))
    with pytest.raises(PlanError, match="offsets"):
        planner.depths_many(np.zeros((3, 2), np.float32), np.zeros(3, np.int64), np.zeros(3, np.int64),
                            np.array([0, 2]), 2, 9)


def test_planner_accepts_float64_confidences_by_converting():
    planner = Planner(TIE, cal([0.5], [-1.0, 0.0], [0.1, 0.9]))
    conf = np.array([[-0.5, -2.0]])
    assert planner.depths(conf, np.array([2]), np.array([2]), 2, 4).tolist() == \
        sequence_depths(TIE, cal([0.5], [-1.0, 0.0], [0.1, 0.9]), [[-0.5, -2.0]], [2], 2, 4, 0.0)


# --- §4.4 loading for a serve --------------------------------------------------------------------

def test_spec_cost_state_load_lists_every_mismatch(tmp_path):
    tp, cp = tmp_path / "t.toml", tmp_path / "c.toml"
    tp.write_text(CostTable.render(KEY, TIE.cells))
    cp.write_text(cal([0.5]).render())
    state = specsim.SpecCostState.load(tp, cp, KEY, DRAFTER, 0.25)
    assert state.slack == 0.25 and state.table == TIE
    assert state.planner(max_seqs=4).propose(1) == propose_depth(TIE, cal([0.5]), 1, 0.25, 4)
    serve = TableKey(1, "other", "recipe", {"verify": "x"})
    drafter = DrafterKey("sha", 151936, "fp8", True)
    with pytest.raises(KeyMismatchError) as err:
        specsim.SpecCostState.load(tp, cp, serve, drafter, 1.0)
    text = str(err.value)
    for needle in ("box_class", "mode 'draft'", "mode 'verify'", "vocab", "quantization", "slack"):
        assert needle in text
    assert len(err.value.problems) == 6


def test_cum_priors_are_running_sums():
    c = cal([0.5, 0.4])
    planner = Planner(table({1: [(1.0, 1.0, 0.0, 0.0)] + [(1.0, 1.0, 1.0, 1.0)] * 3}), c)
    run, total, want = 1.0, 0.0, [0.0]
    for j in range(1, 4):
        run *= [0.5, 0.4, 0.4][j - 1]
        total += run
        want.append(total)
    assert planner.cum_priors.tolist() == want
    assert math.isclose(want[3], 0.5 + 0.2 + 0.08)


@pytest.mark.parametrize("kind", ["uniform", "few values", "crowded", "skewed", "zeros", "tiny"])
def test_gain_sort_is_a_descending_sort(kind):
    from specsim.plan._sort import sort_gains_desc_nb

    rng = np.random.default_rng(len(kind))
    for count in (0, 1, 5, 32, 33, 200, 1793):
        if kind == "uniform":
            g = rng.uniform(0, 1, count)
        elif kind == "few values":
            g = rng.choice([0.0, 0.5, 0.25, 1.0, 1e-300], count)
        elif kind == "crowded":  # one far outlier packs the rest into a single bucket
            g = np.concatenate([rng.uniform(0.5, 0.50001, count - count // 4), rng.uniform(0, 1e-200, count // 4)])
        elif kind == "skewed":
            g = rng.uniform(0, 1, count) ** 20
        elif kind == "zeros":
            g = np.zeros(count)
        else:
            g = rng.uniform(0, 1e-300, count)
        gains = np.empty(2 * count + 1)
        gains[:count] = g
        ordered = np.empty(count + 1)
        sort_gains_desc_nb(gains, count, ordered, np.empty(4096, dtype=np.int64), np.empty(count + 1, dtype=np.int64))
        assert ordered[:count].tolist() == sorted(g.tolist(), reverse=True)
