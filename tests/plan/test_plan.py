"""The planner (docs/planner.md): hand-computed cases for every rule, and the kernels against the plain
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
from tests.fixtures import PLAN_DRAFTER as DRAFTER
from tests.fixtures import PLAN_TABLE_KEY as KEY
from tests.fixtures import calibrations, table, tables
from tests.reference import ref_goodput_depth, ref_propose_depth, ref_sequence_depths


def cal(priors, edges=(0.0,), p_accept=(0.5,)):
    return AcceptanceCalibration(DRAFTER, list(edges), list(p_accept), list(priors))


# --- propose_depth: one depth before drafting ---------------------------------------------------

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
    for bad in ("0.2", b"0.2", False, True, np.True_):  # a real number only: "0.2" and False were taken
        with pytest.raises(PlanError, match="is not a number"):
            Planner(TIE, cal([0.5]), slack=bad)
    with pytest.raises(PlanError, match="outside"):
        Planner(TIE, cal([0.5]), slack=10**400)


def test_goodput_ignores_energy():
    t = table({1: [(10.0, 0.1, 0.0, 0.0), (10.0, 9.0, 1.0, 5.0)]})
    assert goodput_depth(t, cal([0.5]), 1) == 1
    assert propose_depth(t, cal([0.5]), 1, 0.5, 8) == 0


# --- sequence_depths: per-sequence depths after drafting -----------------------------------------

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

# Log-probabilities: at most 0, and up to LOGPROB_SLACK above it as rounding (the planner refuses
# larger ones; tests/whole/test_messages.py checks that refusal).
LP = st.one_of(
    st.sampled_from([-np.inf, -8.0, -1.0, -0.5, -0.1, -0.05, 0.0, 2.0 ** -10, float("nan")]),
    st.floats(-10.0, 2.0 ** -10, allow_nan=False, width=32),
)


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
    # The invariants: caps, budget.
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


# --- loading for a serve -------------------------------------------------------------------------

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


@pytest.mark.parametrize("ragged", [False, True])
def test_the_kernels_confidence_check_refuses_exactly_what_the_python_check_does(ragged):
    # The kernel tests float32 confidences against the least float32 above LOGPROB_SLACK (one
    # vector pass over every confidence when all rows are full): the float32 nearest the slack
    # lies above it and is refused, the one below it passes, as in logprob_problem's float64.
    from specsim._checks import LOGPROB_SLACK, logprob_problem

    t = table({n: [(1.0 + k, 1.0 + k, 0.1 * k, 0.1 * k) for k in range(4)] for n in (1, 64)})
    planner = Planner(t, cal([0.8, 0.7, 0.6], [-1.0, 0.0], [0.3, 0.9]))
    near = np.float32(LOGPROB_SLACK)
    for value in (near, np.nextafter(near, np.float32(-1)), np.nextafter(near, np.float32(1)), np.float32(0.0),
                  np.float32(np.nan), np.float32(np.inf)):
        refused = logprob_problem([value]) is not None
        conf = np.full((40, 3), -0.5, dtype=np.float32)
        conf[17, 2] = value
        n_conf = np.full(40, 3, dtype=np.int64)
        if ragged:
            n_conf[5] = 1
        if refused:
            with pytest.raises(PlanError, match="log-probabilit"):
                planner.depths(conf, n_conf, n_conf.copy(), 3, 120)
        else:
            planner.depths(conf, n_conf, n_conf.copy(), 3, 120)
        conf[17, 2] = -0.5
        conf[5, 2] = value  # past row 5's real confidences when ragged: never read
        if refused and not ragged:
            with pytest.raises(PlanError, match="log-probabilit"):
                planner.depths(conf, n_conf, n_conf.copy(), 3, 120)
        else:
            planner.depths(conf, n_conf, n_conf.copy(), 3, 120)


@pytest.mark.parametrize("kind", ["uniform", "few values", "crowded", "skewed", "zeros", "tiny", "signed zeros"])
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
        elif kind == "signed zeros":  # -0.0 is a probability a calibration may hold; it sorts as 0.0
            g = rng.choice([-0.0, 0.0, 0.5, 0.25, 1e-300], count)
        else:
            g = rng.uniform(0, 1e-300, count)
        gains = np.empty(2 * count + 1)
        gains[:count] = g
        ordered = np.empty(count + 1)
        lo, hi = (float(g.min()), float(g.max())) if count else (0.0, 0.0)
        sort_gains_desc_nb(gains, count, ordered, np.empty(4096, dtype=np.int64), np.empty(count + 1, dtype=np.int64),
                           lo, hi)
        assert ordered[:count].tolist() == sorted(g.tolist(), reverse=True)


@pytest.mark.parametrize("kind", ["uniform", "few values", "crowded", "products"])
def test_gain_buckets_sorted_only_as_far_as_asked(kind):
    # The scan sorts the buckets as it reaches them: after bucketing, sorting through any index
    # in steps leaves everything up to it as the full sort would, and every gain still there.
    from specsim.plan._sort import bucket_gains_desc_nb, sort_buckets_nb

    rng = np.random.default_rng(len(kind) + 7)
    for count in (0, 1, 32, 33, 300, 1793):
        if kind == "uniform":
            g = rng.uniform(0, 1, count)
        elif kind == "few values":
            g = rng.choice([0.0, 0.5, 0.25, 1.0, 1e-300], count)
        elif kind == "crowded":
            g = np.concatenate([rng.uniform(0.5, 0.50001, count - count // 4), rng.uniform(0, 1e-200, count // 4)])
        else:  # running products of probabilities, as the planner's gains are
            g = np.cumprod(rng.choice([0.18, 0.27, 0.37, 0.47, 0.56, 0.66, 0.76, 0.85, 0.95], (count, 7)), axis=1)
            g = g.ravel()[:count]
        want = sorted(g.tolist(), reverse=True)
        for steps in ([count - 1], [0, count // 3, count // 3, count - 1], sorted(rng.integers(0, count + 1, 5))):
            ordered, counts = np.empty(count + 1), np.empty(4096, dtype=np.int64)
            lo, hi = (float(g.min()), float(g.max())) if count else (0.0, 0.0)
            buckets = bucket_gains_desc_nb(g.copy(), count, ordered, counts, np.empty(count + 1, dtype=np.int64),
                                           lo, hi)
            first = 0
            for through in steps:
                first = sort_buckets_nb(ordered, counts, buckets, first, int(through))
                assert ordered[:min(int(through) + 1, count)].tolist() == want[:int(through) + 1]
                assert sorted(ordered[:count].tolist(), reverse=True) == want
            assert first <= max(buckets, 0)


def test_a_probability_of_minus_zero_plans_as_zero():
    # p_accept = -0.0 passes the calibration's [0, 1] check and makes gains of -0.0, whose bit
    # pattern is no non-negative double's: the gain sort once indexed its buckets with it, far
    # out of range.
    t = table({n: [(8.0 + 0.01 * n * (k + 1), 1.5 + 0.012 * n * (1 + 0.02 * k), 0.9 * k, 0.08 * k) for k in range(5)]
               for n in (1, 64)})
    c = AcceptanceCalibration(DRAFTER, [-1.0, 0.0], [-0.0, 0.9], [0.9, 0.8])
    assert np.signbit(c.p_accept[0])
    conf = np.random.default_rng(0).uniform(-2.0, 0.0, (40, 4)).astype(np.float32)
    counts = np.full(40, 4, dtype=np.int64)
    got = Planner(t, c, slack=0.5).depths(conf, counts, counts, 4, 160).tolist()
    assert got == ref_sequence_depths(t.widths.tolist(), t.costs.tolist(), c.edges.tolist(), c.p_accept.tolist(),
                                      c.priors.tolist(), conf.tolist(), counts.tolist(), 4, 160, 0.5)
    assert sum(got) > 40  # extra rows were sorted and taken


# --- bad input at the boundary: a specsim error naming the argument, never a crash ----------------

# Each case runs in one child process (a crash there fails these tests, not the run). A case is
# "name": expression over `planner` (a Planner over a width-4 table of depth 3), `np`, `conf`
# (float32 [4, 3]), `wide` (float32 [4, 8]), `counts` (int64 [4] of 3s) and the planner functions.
BAD_CASES = {
    # counts out of range, including the one that used to crash the process
    "n_conf -2**63": ("planner.depths(conf, np.array([0, -2**63, 0, 0]), counts, 3, 9)",
                      r"n_conf\[1\] = -9223372036854775808 is negative"),
    "n_conf negative": ("planner.depths(conf, np.array([-1, 0, 0, 0]), counts, 3, 9)", r"n_conf\[0\] = -1 is negative"),
    "n_conf above m": ("planner.depths(conf, np.array([0, 0, 4, 0]), counts, 3, 9)",
                       r"n_conf\[2\] = 4 is more than the 3 columns"),
    "known negative": ("planner.depths(conf, counts, np.array([3, 3, 3, -5]), 3, 9)", r"known_drafts\[3\] = -5 is negative"),
    "known -2**63": ("planner.depths(conf, counts, np.array([-2**63, 3, 3, 3]), 3, 9)", r"known_drafts\[0\] = -9223"),
    "k_max negative": ("planner.depths(conf, counts, counts, -1, 9)", r"k_max must be >= 0, got -1"),
    "row_budget negative": ("planner.depths(conf, counts, counts, 3, -7)", r"row_budget must be >= 0, got -7"),
    "k_max float": ("planner.depths(conf, counts, counts, 2.5, 9)", r"k_max must be a non-negative integer, got 2.5"),
    "k_max bool": ("planner.depths(conf, counts, counts, True, 9)", r"k_max must be a non-negative integer, got True"),
    "row_budget None": ("planner.depths(conf, counts, counts, 3, None)", r"row_budget must be a non-negative integer"),
    "row_budget text": ("planner.depths(conf, counts, counts, 3, '9')", r"row_budget must be a non-negative integer"),
    # dtypes and shapes
    "conf 1-D": ("planner.depths(conf[0], counts[:1], counts[:1], 3, 9)", r"confidences must be a 2-D array"),
    "conf 3-D": ("planner.depths(conf[None], counts, counts, 3, 9)", r"confidences must be a 2-D array"),
    "conf complex": ("planner.depths(conf.astype(complex), counts, counts, 3, 9)", r"confidences must hold real numbers"),
    "conf text": ("planner.depths(np.array([['a']]), counts[:1], counts[:1], 3, 9)", r"confidences must hold"),
    "conf ragged": ("planner.depths([[1.0], [1.0, 2.0]], counts[:2], counts[:2], 3, 9)", r"confidences"),
    "n_conf float": ("planner.depths(conf, counts.astype(float), counts, 3, 9)", r"n_conf must hold integers"),
    "n_conf bool": ("planner.depths(conf, counts > 0, counts, 3, 9)", r"n_conf must hold integers"),
    "n_conf 2-D": ("planner.depths(conf, counts[:, None], counts, 3, 9)", r"n_conf must be a 1-D array"),
    "known short": ("planner.depths(conf, counts, counts[:3], 3, 9)", r"known_drafts must be a 1-D array with one entry per sequence \(4\)"),
    "known huge object": ("planner.depths(conf, counts, np.array([2**70, 'x', 1, 1], dtype=object), 3, 9)",
                          r"known_drafts\[1\] = 'x' is not an integer"),
    # out
    "out float": ("planner.depths(conf, counts, counts, 3, 9, out=np.zeros(4))", r"out must be a 1-D int64 array"),
    "out bool": ("planner.depths(conf, counts, counts, 3, 9, out=np.zeros(4, bool))", r"out must be a 1-D int64 array"),
    "out 2-D": ("planner.depths(conf, counts, counts, 3, 9, out=np.zeros((4, 1), np.int64))", r"out must be a 1-D int64"),
    "out short": ("planner.depths(conf, counts, counts, 3, 9, out=np.zeros(3, np.int64))", r"out has 3 entries for 4"),
    "out list": ("planner.depths(conf, counts, counts, 3, 9, out=[0, 0, 0, 0])", r"out must be a numpy int64 array"),
    "out is n_conf": ("planner.depths(conf, counts, counts.copy(), 3, 9, out=counts)", r"out shares memory with n_conf"),
    "out is known": ("planner.depths(conf, counts.copy(), counts, 3, 9, out=counts)", r"out shares memory with known_drafts"),
    "out inside conf": ("planner.depths(wide, counts, counts, 3, 9, out=wide.view(np.int64)[0])",
                        r"out shares memory with confidences"),
    "out read-only": ("planner.depths(conf, counts, counts, 3, 9, out=readonly)", r"out is read-only"),
    "out strided": ("planner.depths(conf, counts, counts, 3, 9, out=np.zeros(8, np.int64)[::2])", r"out must be contiguous"),
    # widths
    "propose 10**30": ("planner.propose(10**30)", r"n = 10{30} is beyond the planner's range|n = 1000000000000000000000000000000 is beyond"),
    "propose negative": ("planner.propose(-1)", r"n must be a non-negative integer, got -1"),
    "propose float": ("planner.propose(2.0)", r"n must be a non-negative integer, got 2.0"),
    "propose bool": ("planner.propose(True)", r"n must be a non-negative integer, got True"),
    "goodput 2**64": ("planner.goodput(2**64)", r"n = 18446744073709551616 is beyond"),
    "explain negative": ("planner.explain(-3)", r"n must be a non-negative integer, got -3"),
    "propose_many 2-D": ("planner.propose_many(np.zeros((2, 2), np.int64))", r"widths must be a 1-D array"),
    "propose_many negative": ("planner.propose_many(np.array([3, -1]))", r"widths\[1\] = -1 is negative"),
    "propose_many float": ("planner.propose_many(np.array([1.5]))", r"widths must hold integers"),
    "propose_many out float": ("planner.propose_many(np.array([1]), out=np.zeros(1))", r"out must be a 1-D int64 array"),
    # batches
    "depths_many offsets": ("planner.depths_many(conf, counts, counts, np.array([0, 5]), 3, 9)", r"offsets must rise from 0 to 4"),
    "depths_many k_max": ("planner.depths_many(conf, counts, counts, np.array([0, 2, 4]), np.array([1, -1]), 9)",
                          r"k_max\[1\] = -1 is negative"),
    "depths_many k_max float": ("planner.depths_many(conf, counts, counts, np.array([0, 4]), 1.5, 9)", r"k_max must be a non"),
    # one-shot functions and construction
    "sequence_depths known": ("sequence_depths(table, cal, [[-0.1]], [-1], 3, 9, 0.0)", r"known_drafts\[0\] = -1 is negative"),
    "sequence_depths conf": ("sequence_depths(table, cal, [['x']], [1], 3, 9, 0.0)", r"confidences must be a list of lists"),
    "sequence_depths k_max": ("sequence_depths(table, cal, [[-0.1]], [1], -3, 9, 0.0)", r"k_max must be >= 0, got -3"),
    "propose_depth huge": ("propose_depth(table, cal, 10**30, 0.0, 8)", r"n = 1000000000000000000000000000000 is beyond"),
    "slack 1": ("Planner(table, cal, slack=1.0)", r"slack 1.0 is outside \[0, 1\)"),
    "slack nan": ("Planner(table, cal, slack=float('nan'))", r"slack nan is outside"),
    "max_seqs negative": ("Planner(table, cal, max_seqs=-1)", r"max_seqs must be >= 0, got -1"),
    "table type": ("Planner('t.toml', cal)", r"table must be a CostTable"),
    "update other drafter": ("planner.update_calibration(other_drafter)", r"fitted on another drafter"),
    "update not a calibration": ("planner.update_calibration(table)", r"needs an AcceptanceCalibration"),
}

_CHILD = r'''
import json, re, sys
import numpy as np
from specsim import AcceptanceCalibration, Cell, CostTable, DrafterKey, Planner, TableKey
from specsim.errors import SpecsimError
from specsim.plan import propose_depth, sequence_depths
key = TableKey(1, "box", "recipe", {"verify": "v", "draft": "d"})
table = CostTable.from_cells(key, [Cell(4, k, 10.0 + k, 1.0 + 0.1 * k, 0.5 * k, 0.05 * k) for k in range(4)])
cal = AcceptanceCalibration(DrafterKey("sha", 32000, "bf16", True), [-1.0, 0.0], [0.3, 0.9], [0.8, 0.6])
other_drafter = AcceptanceCalibration(DrafterKey("sha", 151936, "bf16", True), [-1.0, 0.0], [0.3, 0.9], [0.8])
planner = Planner(table, cal, slack=0.1, max_seqs=64)
conf = np.array([[-0.1, -2.0, -0.5]] * 4, dtype=np.float32)
counts = np.full(4, 3, dtype=np.int64)
readonly = np.zeros(4, np.int64)
readonly.flags.writeable = False
wide = np.zeros((4, 8), np.float32)
cases = json.loads(sys.argv[1])
results = {}
for name, expr in cases.items():
    try:
        eval(expr)
        results[name] = "no error"
    except SpecsimError as e:
        results[name] = "specsim: " + str(e)
    except Exception as e:
        results[name] = "other: " + type(e).__name__ + ": " + str(e)[:300]
print(json.dumps(results))
'''


def _run_child(cases: dict) -> dict:
    import json
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-c", _CHILD, json.dumps(cases)], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, f"child exited {proc.returncode}: {proc.stderr[-2000:]}"
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def bad_input_results():
    return _run_child({name: expr for name, (expr, _) in BAD_CASES.items()})


@pytest.mark.parametrize("name", list(BAD_CASES))
def test_bad_input_is_a_specsim_error_naming_it(bad_input_results, name):
    import re

    got = bad_input_results[name]
    assert got.startswith("specsim: "), got
    assert re.search(BAD_CASES[name][1], got), got
    assert len(got) < 600, "a message, not a dump"


def test_other_layouts_and_dtypes_are_converted():
    c = cal([0.8, 0.6], [-1.0, 0.0], [0.3, 0.9])
    planner = Planner(WIDE, c, slack=0.1)
    rng = np.random.default_rng(4)
    conf, n_conf, known = _batch(rng, 4, 3)
    want = planner.depths(conf, n_conf, known, 3, 12).tolist()
    ro = [a.copy() for a in (conf, n_conf, known)]
    for a in ro:
        a.flags.writeable = False
    assert planner.depths(*ro, 3, 12).tolist() == want
    assert planner.depths(np.asfortranarray(conf), n_conf.astype(np.int32), known.astype(np.uint8), np.int32(3),
                          np.uint64(12)).tolist() == want
    wide = np.full((4, 6), np.nan, np.float32)
    wide[:, ::2] = conf
    assert planner.depths(wide[:, ::2], n_conf, known, 3, 12).tolist() == want
    assert planner.depths(conf.tolist(), n_conf.tolist(), known.tolist(), 3, 12).tolist() == want


def test_unchecked_fast_path_never_crashes_on_bad_counts():
    # check=False skips the per-sequence range check: out-of-range counts are clamped, not read.
    got = _run_child({
        "min": "print(planner.depths(conf, np.array([-2**63, 2**63 - 1, -1, 99]), np.array([-2**63, 2**63 - 1, 3, -1]),"
               " 3, 9, check=False).tolist(), file=sys.stderr)",
        "shapes still checked": "planner.depths(conf, counts[:2], counts, 3, 9, check=False)",
    })
    assert got["min"] == "no error"
    assert got["shapes still checked"].startswith("specsim: n_conf must be a 1-D array")


# --- huge budgets: clamped, never wrapped ---------------------------------------------------------

WIDE = table({4: [(10.0, 2.0, 0.0, 0.0), (10.5, 1.0, 0.5, 0.1), (11.0, 1.1, 1.0, 0.2), (11.5, 1.15, 1.5, 0.3)]})


def test_a_budget_past_int64_is_no_budget():
    c = cal([0.9, 0.8], [-1.0, 0.0], [0.2, 0.95])
    planner = Planner(WIDE, c, slack=0.5)
    conf = np.array([[-0.01, -0.02, -0.03], [-0.01, -0.01, -0.01], [-3.0, -3.0, -3.0], [0.0, 0.0, 0.0]], np.float32)
    n_conf = np.array([3, 3, 1, 0])
    known = np.array([3, 3, 1, 0])
    unbounded = planner.depths(conf, n_conf, known, 3, 12).tolist()
    for budget in (2**63 - 1, 2**63, 2**64 - 1, 2**64, 10**30):
        assert planner.depths(conf, n_conf, known, 3, budget).tolist() == unbounded
        assert planner.depths(conf, n_conf, known, budget, budget).tolist() == unbounded
    assert unbounded == [3, 3, 1, 0]


def test_known_drafts_summing_past_int64_give_the_unbounded_answer():
    c = cal([0.9, 0.8], [-1.0, 0.0], [0.2, 0.95])
    ragged = [[-0.01, -0.02, -0.03], [-0.01, -0.01, -0.01], [-3.0], []]
    huge = [2**62, 2**62, 2**62, 0]  # sums past 2**63: the CLI's default budget
    want = ref_sequence_depths(WIDE.widths.tolist(), WIDE.costs.tolist(), c.edges.tolist(), c.p_accept.tolist(),
                               c.priors.tolist(), ragged, huge, 3, sum(huge), 0.5)
    assert want == [3, 3, 3, 0]  # the third sequence's later drafts take the position priors
    assert sequence_depths(WIDE, c, ragged, huge, 3, sum(huge), 0.5) == want
    assert sequence_depths(WIDE, c, ragged, [2**64, 2**63, 3, 0], 2**64, 2**65, 0.5) == want
    # ... the same as a budget that is no limit in practice
    assert sequence_depths(WIDE, c, ragged, [3, 3, 3, 0], 3, 12, 0.5) == want


def test_cli_large_budgets_plan_as_no_budget(tmp_path):
    import json
    import subprocess
    import sys

    c = cal([0.9, 0.8], [-1.0, 0.0], [0.2, 0.95])
    (tmp_path / "t.toml").write_text(CostTable.render(KEY, WIDE.cells))
    (tmp_path / "c.toml").write_text(c.render())
    (tmp_path / "conf.json").write_text(json.dumps([[-0.01, -0.02, -0.03], [-0.01, -0.01, -0.01], [-3.0], []]))
    (tmp_path / "known.json").write_text(json.dumps([3, 3, 3, 0]))
    (tmp_path / "huge.json").write_text(json.dumps([2**62, 2**62, 2**62, 0]))
    base = [sys.executable, "-m", "specsim", "plan", str(tmp_path / "t.toml"), str(tmp_path / "c.toml"),
            "--confidences", str(tmp_path / "conf.json"), "--slack", "0.5", "--json"]
    for extra in (["--known-drafts", str(tmp_path / "known.json")],
                  ["--known-drafts", str(tmp_path / "known.json"), "--row-budget", str(2**62)]):
        proc = subprocess.run(base + extra, capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr
        assert json.loads(proc.stdout)["depths"] == [3, 3, 3, 0]
    # Known drafts past any batch the planner plans are refused by the reader, with a message.
    proc = subprocess.run(base + ["--known-drafts", str(tmp_path / "huge.json")], capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 2 and "error" in proc.stderr and "Traceback" not in proc.stderr


# --- one Planner, many threads ---------------------------------------------------------------------

def _cases(rng, t, c, count, widest=70):
    out = []
    for _ in range(count):
        n = int(rng.integers(0, widest))
        conf, n_conf, known = _batch(rng, n, t.max_k + 1, nan_share=0.2)
        k_max, budget = int(rng.integers(0, t.max_k + 2)), int(rng.integers(0, 3 * n + 2))
        ragged = [[float(v) for v in conf[i, : n_conf[i]]] for i in range(n)]
        want = ref_sequence_depths(t.widths.tolist(), t.costs.tolist(), c.edges.tolist(), c.p_accept.tolist(),
                                   c.priors.tolist(), ragged, known.tolist(), k_max, budget, 0.15)
        out.append((conf, n_conf, known, k_max, budget, want))
    return out


THREAD_TABLE = table({n: [(8.0 + 0.3 * n, 1.0 + n / 20, 0.0, 0.0)] + [
    (8.0 + 0.3 * n * (1 + 0.25 * k) + (3.0 if k == 3 else 0.0), 1.0 + n / 20 * (1 + 0.2 * k), 0.6 * k, 0.05 * k)
    for k in range(1, 6)] for n in (1, 8, 32, 64)})


def _on_four_threads(hammer):
    """Run ``hammer(seed)`` for seeds 0-3 on four threads at once and wait for them."""
    import threading

    threads = [threading.Thread(target=hammer, args=(s,)) for s in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()


def test_one_planner_from_four_threads_matches_the_reference():
    c = cal([0.8, 0.7, 0.6], [-2.0, -0.5, 0.0], [0.25, 0.6, 0.92])
    planner = Planner(THREAD_TABLE, c, slack=0.15, max_seqs=64)
    cases = _cases(np.random.default_rng(11), THREAD_TABLE, c, 40)
    errors = []

    def hammer(seed):
        rng = np.random.default_rng(seed)
        try:
            for _ in range(400):
                conf, n_conf, known, k_max, budget, want = cases[int(rng.integers(len(cases)))]
                out = np.empty(conf.shape[0], dtype=np.int64) if rng.random() < 0.5 else None
                got = planner.depths(conf, n_conf, known, k_max, budget, out=out).tolist()
                if got != want:
                    errors.append((got, want))
                w = int(rng.integers(0, 100))
                if planner.propose(w) != ref_propose_depth(THREAD_TABLE.widths.tolist(), THREAD_TABLE.costs.tolist(),
                                                          c.priors.tolist(), w, 0.15, 64):
                    errors.append(("propose", w))
        except Exception as e:  # noqa: BLE001 - reported below, with the thread's failure
            errors.append(repr(e))

    _on_four_threads(hammer)
    assert errors == []


def test_update_calibration_under_concurrent_calls():
    import threading

    a = cal([0.8, 0.7, 0.6], [-2.0, -0.5, 0.0], [0.25, 0.6, 0.92])
    b = cal([0.5, 0.3], [-2.0, -0.5, 0.0], [0.1, 0.3, 0.99])
    planner = Planner(THREAD_TABLE, a, slack=0.15, max_seqs=64)
    rng = np.random.default_rng(5)
    cases_a = _cases(rng, THREAD_TABLE, a, 20)
    both = []
    for conf, n_conf, known, k_max, budget, want_a in cases_a:
        ragged = [[float(v) for v in conf[i, : n_conf[i]]] for i in range(conf.shape[0])]
        want_b = ref_sequence_depths(THREAD_TABLE.widths.tolist(), THREAD_TABLE.costs.tolist(), b.edges.tolist(),
                                     b.p_accept.tolist(), b.priors.tolist(), ragged, known.tolist(), k_max, budget, 0.15)
        both.append((conf, n_conf, known, k_max, budget, (want_a, want_b)))
    stop = threading.Event()
    errors = []

    def flip():
        while not stop.is_set():
            planner.update_calibration(b)
            planner.update_calibration(a)

    def call(seed):
        r = np.random.default_rng(seed)
        for _ in range(300):
            conf, n_conf, known, k_max, budget, wants = both[int(r.integers(len(both)))]
            got = planner.depths(conf, n_conf, known, k_max, budget).tolist()
            if got not in wants:
                errors.append(got)

    flipper = threading.Thread(target=flip)
    callers = [threading.Thread(target=call, args=(s,)) for s in range(3)]
    flipper.start()
    for th in callers:
        th.start()
    for th in callers:
        th.join()
    stop.set()
    flipper.join()
    assert errors == []


def test_update_calibration_replaces_everything_that_depends_on_it():
    a = cal([0.8, 0.7, 0.6], [-2.0, -0.5, 0.0], [0.25, 0.6, 0.92])
    b = cal([0.5, 0.3], [-1.0, 0.0], [0.1, 0.99])
    planner = Planner(THREAD_TABLE, a, slack=0.15, max_seqs=64)
    fresh = Planner(THREAD_TABLE, b, slack=0.15, max_seqs=64)
    planner.update_calibration(b)
    assert planner.calibration is b
    assert planner.cum_priors.tolist() == fresh.cum_priors.tolist()
    ns = np.arange(0, 200, dtype=np.int64)
    assert planner.propose_many(ns).tolist() == fresh.propose_many(ns).tolist()
    assert [planner.propose(int(n)) for n in ns] == [fresh.propose(int(n)) for n in ns]
    assert [planner.goodput(int(n)) for n in ns[:70]] == [fresh.goodput(int(n)) for n in ns[:70]]
    assert planner.explain(9) == fresh.explain(9)
    rng = np.random.default_rng(2)
    for _ in range(20):
        conf, n_conf, known = _batch(rng, int(rng.integers(0, 70)), 6)
        assert planner.depths(conf, n_conf, known, 5, 200).tolist() == fresh.depths(conf, n_conf, known, 5, 200).tolist()
    with pytest.raises(KeyMismatchError, match="another drafter") as err:
        planner.update_calibration(AcceptanceCalibration(DrafterKey("other", 32000, "bf16", True), [0.0], [0.5], [0.5]))
    assert "weights_sha256" in str(err.value)
    assert planner.calibration is b


# --- explain -------------------------------------------------------------------------------------

@settings(max_examples=60, deadline=None)
@given(tables(), calibrations(), st.integers(0, 80), st.one_of(st.just(0.0), st.floats(0.0, 0.99)), st.integers(0, 80))
def test_explain_matches_the_reference(t, c, n, slack, max_seqs):
    from tests.reference import ref_explain

    ex = Planner(t, c, slack=slack, max_seqs=max_seqs).explain(n)
    rows, depth = ref_explain(t.widths.tolist(), t.costs.tolist(), c.priors.tolist(), n, slack, max_seqs)
    assert ex.depth == depth
    assert ex.capped == (n > max_seqs)
    assert [(d.k, d.tokens, d.step_ms, d.step_j, d.feasible) for d in ex.depths] == rows
    assert [d.k for d in ex.depths if d.chosen] == ([] if n > max_seqs else [depth])
    for d in ex.depths:
        assert d.tokens_per_s == d.tokens / d.step_ms * 1000.0 and d.tokens_per_j == d.tokens / d.step_j


def test_cli_prints_the_explained_table(tmp_path, capsys):
    from specsim.cli import main

    c = cal([0.9, 0.8], [-1.0, 0.0], [0.2, 0.95])
    (tmp_path / "t.toml").write_text(CostTable.render(KEY, WIDE.cells))
    (tmp_path / "c.toml").write_text(c.render())
    assert main(["plan", str(tmp_path / "t.toml"), str(tmp_path / "c.toml"), "--n", "4", "--slack", "0.3"]) == 0
    text = capsys.readouterr().out
    ex = Planner(WIDE, c, slack=0.3).explain(4)
    for d in ex.depths:
        line = next(row for row in text.splitlines() if row.split()[:1] == [str(d.k)])
        assert f"{d.tokens_per_j:.3f}" in line and (("<-" in line) == d.chosen)
    assert f"depth {ex.depth}:" in text
    import json

    assert main(["plan", str(tmp_path / "t.toml"), str(tmp_path / "c.toml"), "--n", "4", "--slack", "0.3", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["depth"] == ex.depth and [d["feasible"] for d in doc["depths"]] == [d.feasible for d in ex.depths]


# --- exactness on many random batches -------------------------------------------------------------

def _random_table(rng):
    widths = sorted(set(int(w) for w in rng.integers(1, 96, int(rng.integers(1, 5)))))
    max_k = int(rng.integers(0, 8))
    cells = []
    for n in widths:
        for k in range(max_k + 1):
            base = rng.choice([1.0, 2.0, 4.0, 10.0]) if rng.random() < 0.3 else float(rng.uniform(0.01, 100.0))
            d_ms, d_j = (0.0, 0.0) if k == 0 else (float(rng.uniform(0.01, 10.0)), float(rng.uniform(0.01, 2.0)))
            cells.append(Cell(n, k, base, float(rng.uniform(0.01, 50.0)), d_ms, d_j))
    return CostTable.from_cells(KEY, cells)


def _random_cal(rng):
    inner = sorted(set(rng.choice([-8.0, -4.0, -2.0, -1.0, -0.5, -0.1, -0.05, -0.02], int(rng.integers(0, 6)))))
    edges = inner + [0.0]
    rounded = [0.0, 0.25, 0.5, 0.75, 0.9, 1.0]
    prob = lambda: float(rng.choice(rounded)) if rng.random() < 0.4 else float(rng.uniform(0, 1))  # noqa: E731
    return AcceptanceCalibration(DRAFTER, edges, [prob() for _ in edges], [prob() for _ in range(int(rng.integers(1, 6)))])


def test_two_thousand_random_batches_match_the_reference_exactly():
    rng = np.random.default_rng(20261201)
    done = 0
    while done < 2000:
        t, c = _random_table(rng), _random_cal(rng)
        slack = 0.0 if rng.random() < 0.3 else float(rng.uniform(0, 0.99))
        planner = Planner(t, c, slack=slack)
        for _ in range(10):
            n = int(rng.integers(0, 48))
            m = int(rng.integers(0, t.max_k + 2))
            conf = rng.choice([-9.0, -1.0, -0.5, -0.1, 0.0, np.nan], (n, m)) if rng.random() < 0.3 else \
                rng.uniform(-6.0, 0.0, (n, m))
            conf = conf.astype(np.float32)
            conf[rng.random((n, m)) < 0.1] = np.nan
            n_conf = rng.integers(0, m + 1, n).astype(np.int64)
            known = rng.integers(0, t.max_k + 3, n).astype(np.int64)
            k_max = int(rng.integers(0, t.max_k + 2))
            budget = int(rng.integers(0, (t.max_k + 1) * n + 2)) if rng.random() < 0.8 else 2**64 - 1
            ragged = [[float(v) for v in conf[i, : n_conf[i]]] for i in range(n)]
            want = ref_sequence_depths(t.widths.tolist(), t.costs.tolist(), c.edges.tolist(), c.p_accept.tolist(),
                                       c.priors.tolist(), ragged, known.tolist(), k_max, budget, slack)
            assert planner.depths(conf, n_conf, known, k_max, budget).tolist() == want, (done, n, m)
            done += 1


def test_the_no_better_prefix_bound_is_never_wrong_and_often_decides():
    # Where the bound says no prefix of extra rows beats the first drafts, the reference takes
    # none; and on these batches it decides often enough to matter. Both bounds: the first one,
    # from each sequence's first extra row alone (before the deeper gains are looked up), and the
    # one from the sum of every gain.
    from specsim.calibration.calibration import cell_probabilities
    from specsim.plan._kernels import (BOUND_SLACK, _first_gains_nb, _gains_nb, _no_prefix_reaches, row_cost_nb,
                                       width_costs_nb)

    rng = np.random.default_rng(77)
    proven = [0, 0]
    for _ in range(300):
        t, c = _random_table(rng), _random_cal(rng)
        if t.max_k < 2:
            continue
        slack = float(rng.uniform(0, 0.9))
        n, m = int(rng.integers(1, 40)), t.max_k
        conf = rng.uniform(-6.0, 0.3, (n, m)).astype(np.float32)
        caps = np.full(n, m, dtype=np.int64)
        strided, compact = np.empty(n * m), np.empty(n * m)
        arrays = Planner(t, c)._state.arrays
        # Through the one-load cell table and without it (the engine's lookups): the same gains.
        cell_p = cell_probabilities(c.edges, c.p_accept)
        firsts, lasts, strideds = [], [], []
        for table_p in (cell_p, cell_p[:0]):
            firsts.append(_first_gains_nb(arrays, table_p, conf, caps, caps.copy(), strided, m))
            lasts.append(_gains_nb(arrays, table_p, conf, caps, caps.copy(), strided, m, compact))
            strideds.append(strided.reshape(n, m)[:, :m - 1].copy())  # row i's gains of drafts 2..m
        assert firsts[0] == firsts[1] and lasts[0] == lasts[1] and np.array_equal(*strideds)
        (base_tokens, extras, highest, bound), (_, total) = firsts[0], lasts[0]
        assert extras == n * (m - 1) and highest == strided.reshape(n, m)[:, 0].max()
        assert total <= bound * (1.0 + BOUND_SLACK)
        wc = np.empty((t.max_k + 1, 4))
        width_costs_nb(t.widths, t.costs, n, wc)
        base_eff = base_tokens / row_cost_nb(wc[:, 1], n, n, t.max_k, wc[m, 3])
        decided = [_no_prefix_reaches(wc, n, t.max_k, m, base_tokens, n, extras, highest,
                                      rest * (1.0 + BOUND_SLACK) + 1e-300, base_eff) for rest in (bound, total)]
        assert decided[1] or not decided[0]  # the sum of the gains is the tighter bound
        if not decided[1]:
            continue
        proven = [p + d for p, d in zip(proven, decided)]
        want = ref_sequence_depths(t.widths.tolist(), t.costs.tolist(), c.edges.tolist(), c.p_accept.tolist(),
                                   c.priors.tolist(), conf.tolist(), caps.tolist(), m, n * m, slack)
        assert want == [1] * n
    assert min(proven) >= 20, proven


# -- with a context (a table with a context axis) ----------------------------------------------------

@st.composite
def context_tables(draw):
    """A table with 1-3 contexts: tables() at the first, every cost scaled up at the later ones."""
    from specsim.table import Cell as C

    base = draw(tables())
    contexts = sorted(draw(st.sets(st.integers(1, 20000), min_size=1, max_size=3)))
    grids = {}
    for i, ctx in enumerate(contexts):
        scale = [1.0] + [draw(st.floats(1.0, 4.0)) for _ in range(3)]
        grids[ctx] = CostTable.from_cells(KEY, [C(x.n, x.k, x.verify_ms * scale[i], x.verify_j * scale[i],
                                                  x.draft_ms, x.draft_j) for x in base.cells])
    table = CostTable.from_contexts(grids, reference=draw(st.sampled_from(contexts)))
    context = draw(st.one_of(st.sampled_from(contexts), st.floats(0.5, 30000.0)))
    return table, grids, context


def ref_grid_at(table, grids, context):
    """The reference grid at ``context`` (tests/reference.py), per measured width and depth."""
    from tests.reference import ref_context_cell

    contexts = sorted(grids)
    rows = [[tuple(c) for c in grids[x].cells] for x in contexts]
    return [[list(ref_context_cell(contexts, rows, int(w), k, context)) for k in range(table.max_k + 1)]
            for w in table.widths]


@settings(max_examples=100, deadline=None)
@given(context_tables(), calibrations(), st.integers(0, 80), st.one_of(st.just(0.0), st.floats(0.0, 0.99)),
       st.integers(0, 80))
def test_propose_with_a_context_matches_reference(tc, c, n, slack, max_seqs):
    table, grids, context = tc
    widths = table.widths.tolist()
    want = ref_propose_depth(widths, ref_grid_at(table, grids, context), c.priors.tolist(), n, slack, max_seqs)
    planner = Planner(table, c, slack=slack, max_seqs=max_seqs)
    assert planner.propose(n, context=context) == want
    assert planner.propose(n, context=context) == want  # the cached inputs answer alike
    assert planner.propose_many(np.array([n, n], dtype=np.int64), context=context).tolist() == [want, want]
    assert planner.explain(n, context=context).depth == want
    assert planner.goodput(n, context=context) == ref_goodput_depth(
        widths, ref_grid_at(table, grids, context), c.priors.tolist(), n, max_seqs)
    # Without a context: the reference grid, as before.
    ref = ref_propose_depth(widths, table.costs.tolist(), c.priors.tolist(), n, slack, max_seqs)
    assert planner.propose(n) == ref == Planner(CostTable(KEY, table.widths, table.costs), c, slack=slack,
                                                max_seqs=max_seqs).propose(n)


@settings(max_examples=100, deadline=None)
@given(context_tables(), calibrations(), st.data(), st.one_of(st.just(0.0), st.floats(0.0, 0.99)))
def test_sequence_depths_with_a_context_match_reference(tc, c, data, slack):
    table, grids, context = tc
    n = data.draw(st.integers(0, 30))
    conf = [data.draw(st.lists(LP, max_size=7)) for _ in range(n)]
    known = [data.draw(st.integers(0, 8)) for _ in range(n)]
    k_max = data.draw(st.integers(0, 8))
    budget = data.draw(st.integers(0, 120))
    want = ref_sequence_depths(table.widths.tolist(), ref_grid_at(table, grids, context), c.edges.tolist(),
                               c.p_accept.tolist(), c.priors.tolist(), conf, known, k_max, budget, slack)
    planner = Planner(table, c, slack=slack)
    from specsim.plan.planner import ragged_confidences

    arr, n_conf = ragged_confidences(conf)
    known_a = np.array(known, dtype=np.int64)
    assert planner.depths(arr, n_conf, known_a, k_max, budget, context=context).tolist() == want
    offsets = np.array([0, n], dtype=np.int64)
    assert planner.depths_many(arr, n_conf, known_a, offsets, k_max, budget, context=context).tolist() == want
    without = ref_sequence_depths(table.widths.tolist(), table.costs.tolist(), c.edges.tolist(), c.p_accept.tolist(),
                                  c.priors.tolist(), conf, known, k_max, budget, slack)
    assert planner.depths(arr, n_conf, known_a, k_max, budget).tolist() == without


@pytest.mark.parametrize("bad", [0, -1.0, -0.0, float("nan"), float("inf"), 10**400, "x", "8", b"8", True, np.True_,
                                 __import__("decimal").Decimal(8)])
def test_planner_refuses_a_context_of_zero_or_less(bad):
    from specsim.errors import PlanError

    table = CostTable.from_contexts({10: TIE, 20: TIE})
    for t in (table, TIE):
        planner = Planner(t, cal([0.9]))
        with pytest.raises(PlanError, match="context must be"):
            planner.propose(1, context=bad)
        with pytest.raises(PlanError, match="context must be"):
            planner.explain(1, context=bad)


def test_a_context_on_a_table_without_an_axis_changes_nothing():
    planner = Planner(TIE, cal([0.9]))
    assert planner.propose(3, context=12345.0) == planner.propose(3)
    assert planner.explain(3, context=7) == planner.explain(3)


def test_moving_contexts_from_four_threads_match_planning_on_the_grid_there():
    """A serve's context moves every step: propose (planned on the grid there in one call) and
    depths (inputs derived from the reference grid's) at contexts never asked for before,
    contexts asked for again, and equal ints and floats, interleaved from four threads, each
    answer what a planner built on ``table.at_context(c)`` gives."""

    c = cal([0.8, 0.7, 0.6], [-2.0, -0.5, 0.0], [0.25, 0.6, 0.92])
    deeper = 1.0 + np.arange(THREAD_TABLE.max_k + 1)[None, :, None]  # deep steps dearer at long contexts
    grids = {512: THREAD_TABLE, 4096: CostTable(THREAD_TABLE.key, THREAD_TABLE.widths, THREAD_TABLE.costs * deeper),
             16384: CostTable(THREAD_TABLE.key, THREAD_TABLE.widths, THREAD_TABLE.costs * deeper ** 2)}
    table = CostTable.from_contexts(grids)
    planner = Planner(table, c, slack=0.15, max_seqs=64)
    contexts = [100.0, 512, 700.5, 2000.0, 4096.0, 9000.25, 16384, 40000.0]
    cases = _cases(np.random.default_rng(3), THREAD_TABLE, c, 12)
    at = {x: Planner(table.at_context(x), c, slack=0.15, max_seqs=64) for x in contexts}
    want_propose = {x: [at[x].propose(w) for w in range(100)] for x in contexts}
    want_depths = {x: [at[x].depths(*case[:5]).tolist() for case in cases] for x in contexts}
    errors = []

    def hammer(seed):
        rng = np.random.default_rng(seed)
        try:
            for step in range(600):
                x = contexts[int(rng.integers(len(contexts)))]
                asked = float(x) if rng.random() < 0.3 else x  # an equal value as another object or type
                if rng.random() < 0.2:  # a context never seen before: a fresh slot every call
                    fresh = 600.0 + seed + step / 1000.0
                    w = int(rng.integers(0, 100))
                    if planner.propose(w, context=fresh) != Planner(table.at_context(fresh), c, slack=0.15,
                                                                    max_seqs=64).propose(w):
                        errors.append(("fresh", fresh, w))
                    continue
                if rng.random() < 0.5:
                    w = int(rng.integers(0, 100))
                    if planner.propose(w, context=asked) != want_propose[x][w]:
                        errors.append(("propose", x, w))
                else:
                    i = int(rng.integers(len(cases)))
                    if planner.depths(*cases[i][:5], context=asked).tolist() != want_depths[x][i]:
                        errors.append(("depths", x, i))
        except Exception as e:  # noqa: BLE001 - reported below, with the thread's failure
            errors.append(repr(e))

    _on_four_threads(hammer)
    assert errors == []
    assert len({tuple(v) for v in want_propose.values()}) > 1  # the contexts plan differently


def test_the_last_context_is_forgotten_with_its_calibration():
    """propose at the context asked just before update_calibration answers with the new one,
    whether the context comes back as the same object, an equal float or an equal int."""
    a = cal([0.95, 0.9, 0.85], [-2.0, -0.5, 0.0], [0.5, 0.9, 0.99])
    b = cal([0.2], [-1.0, 0.0], [0.05, 0.1])
    grids = {512: THREAD_TABLE, 4096: CostTable(THREAD_TABLE.key, THREAD_TABLE.widths, THREAD_TABLE.costs * 3.0)}
    table = CostTable.from_contexts(grids)
    planner = Planner(table, a, slack=0.15, max_seqs=64)
    fresh = Planner(table, b, slack=0.15, max_seqs=64)
    context = 3000.0
    before = [planner.propose(n, context=context) for n in range(1, 40)]
    assert before == [Planner(table, a, slack=0.15, max_seqs=64).propose(n, context=3000) for n in range(1, 40)]
    planner.update_calibration(b)
    want = [fresh.propose(n, context=3000.0) for n in range(1, 40)]
    assert want != before  # the two calibrations plan differently here, so a stale slot would show
    for again in (context, float("3000"), 3000):
        assert [planner.propose(n, context=again) for n in range(1, 40)] == want


# --- the table's end and the calibration's fitted positions -----------------------------------------

# Deeper is always better per joule here: every depth costs nearly the same step, so the best depth is
# the table's deepest (3).
DEEP = table({4: [(10.0, 2.0, 0.0, 0.0)] + [(10.0, 2.0, 0.01 * k, 0.001 * k) for k in (1, 2, 3)]})


def test_depth_reach_says_where_the_table_ends_and_what_is_extrapolated():
    from specsim.plan import TABLE_ENDS, depth_reach, reach_lines

    assert depth_reach(3, 3, 1) == {"table_ends": True, "extrapolated": True, "max_k": 3, "fitted_positions": 1}
    assert depth_reach(2, 3, 2) == {"table_ends": False, "extrapolated": False, "max_k": 3, "fitted_positions": 2}
    assert depth_reach(0, 0, 1)["table_ends"] is False  # plain decoding: no depth to measure deeper
    assert reach_lines(2, 3, 2) == []
    lines = reach_lines(3, 3, 1, "the chosen depth")
    assert TABLE_ENDS in lines[0] and "the chosen depth (3)" in lines[0]
    assert "extrapolated" in lines[1] and "position(s) 2..3 reuse position 1's prior" in lines[1]


def test_cli_plan_names_the_table_end_and_extrapolated_depths_in_text_and_json(tmp_path, capsys):
    import json

    from specsim.cli import main
    from specsim.plan import TABLE_ENDS

    (tmp_path / "t.toml").write_text(CostTable.render(KEY, DEEP.cells))
    (tmp_path / "c.toml").write_text(cal([0.9]).render())
    argv = ["plan", str(tmp_path / "t.toml"), str(tmp_path / "c.toml"), "--n", "4"]
    assert Planner(DEEP, cal([0.9])).propose(4) == DEEP.max_k == 3
    assert main(argv) == 0
    text = capsys.readouterr().out
    assert TABLE_ENDS in text and "is extrapolated: the calibration fits 1 draft position(s)" in text
    marks = {row.split()[0]: row.split()[7] for row in text.splitlines()[2:6]}
    assert marks == {"0": "fitted", "1": "fitted", "2": "extrapolated", "3": "extrapolated"}
    assert main(argv + ["--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["reach"] == {"table_ends": True, "extrapolated": True, "max_k": 3, "fitted_positions": 1}
    assert [d["extrapolated"] for d in doc["depths"]] == [False, False, True, True]
    # Three fitted positions and a cheaper shallow depth: neither note.
    (tmp_path / "c.toml").write_text(cal([0.9, 0.2, 0.1]).render())
    assert main(argv) == 0
    text = capsys.readouterr().out
    assert Planner(DEEP, cal([0.9, 0.2, 0.1])).propose(4) == 3 and TABLE_ENDS in text and "extrapolated:" not in text
