"""OnlineCalibration: running counts against the plain reference, refits equal to
fit_calibration, the sliding window and the half-life, refusals."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from specsim import OnlineCalibration
from specsim.calibration import DEFAULT_EDGES, AcceptanceCalibration, DrafterKey, fit_calibration
from specsim.errors import CalibrationError
from tests.reference import ref_online_counts

DRAFTER = DrafterKey("ab" * 32, 32000, "bf16", True)
CAL = AcceptanceCalibration(DRAFTER, DEFAULT_EDGES, np.linspace(0.2, 0.95, 10), [0.8, 0.7, 0.6])


def batch(rng, n, m, nan_share=0.05):
    conf = (-rng.exponential(0.6, (n, m))).astype(np.float32)
    conf[rng.random((n, m)) < nan_share] = np.nan
    n_conf = rng.integers(0, m + 1, n).astype(np.int64)
    run = np.array([rng.integers(0, d + 1) for d in n_conf], dtype=np.int64)
    return conf, n_conf, run


def assert_counts(online, ref, exact=True):
    acc, rej, steps, nonfinite = ref
    c = online.counts()
    cmp = (lambda a, b: a == b) if exact else (lambda a, b: math.isclose(a, b, rel_tol=1e-12, abs_tol=1e-12))
    assert all(cmp(a, b) for a, b in zip(c.accepted, acc)), (c.accepted, acc)
    assert all(cmp(a, b) for a, b in zip(c.rejected, rej)), (c.rejected, rej)
    keys = {k for k, v in steps.items() if v} | set(c.steps)
    assert all(cmp(c.steps.get(k, 0), steps.get(k, 0)) for k in keys), (c.steps, steps)
    assert cmp(c.nonfinite, nonfinite)


@st.composite
def batches(draw):
    seed = draw(st.integers(0, 2**32 - 1))
    shapes = draw(st.lists(st.tuples(st.integers(0, 40), st.integers(1, 8)), min_size=1, max_size=12))
    rng = np.random.default_rng(seed)
    return [batch(rng, n, m) for n, m in shapes]


@settings(max_examples=60, deadline=None)
@given(batches())
def test_every_step_kept_matches_the_reference(bs):
    online = OnlineCalibration(CAL, max_depth=8)
    for b in bs:
        online.update(*b)
    assert_counts(online, ref_online_counts(CAL.edges, bs))
    assert online.steps_seen == len(bs)


@settings(max_examples=40, deadline=None)
@given(batches(), st.integers(1, 5))
def test_sliding_window_keeps_the_last_steps(bs, window):
    online = OnlineCalibration(CAL, window=window, max_depth=8)
    for b in bs:
        online.update(*b)
    assert_counts(online, ref_online_counts(CAL.edges, bs, window=window))


@settings(max_examples=40, deadline=None)
@given(batches(), st.floats(0.5, 20.0))
def test_half_life_weights_match_the_reference(bs, half_life):
    online = OnlineCalibration(CAL, half_life=half_life, max_depth=8)
    for b in bs:
        online.update(*b)
    assert_counts(online, ref_online_counts(CAL.edges, bs, half_life=half_life), exact=False)


def test_a_step_weighs_half_after_half_life_updates():
    rng = np.random.default_rng(3)
    online = OnlineCalibration(CAL, half_life=10.0, max_depth=8)
    first = batch(rng, 64, 8, nan_share=0.0)
    online.update(*first)
    before = sum(online.counts().accepted) + sum(online.counts().rejected)
    empty = (np.zeros((0, 8), dtype=np.float32), np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64))
    for _ in range(10):
        online.update(*empty)
    after = sum(online.counts().accepted) + sum(online.counts().rejected)
    assert before > 0
    assert after == pytest.approx(before / 2, rel=1e-12)


def test_refit_equals_fit_calibration_on_the_same_counts():
    rng = np.random.default_rng(7)
    online = OnlineCalibration(CAL, max_depth=8)
    for _ in range(40):
        online.update(*batch(rng, 64, 8))
    c = online.counts()
    assert all(isinstance(v, int) for v in c.accepted)
    expected = fit_calibration(DRAFTER, c.edges, c.accepted, c.rejected, c.steps)
    got = online.calibration()
    assert got == expected
    assert got.meta["reached_drafts"] == c.reached


def test_refit_with_few_outcomes_is_refused_like_a_fit():
    online = OnlineCalibration(CAL, max_depth=8)
    online.update(*batch(np.random.default_rng(1), 3, 2))
    with pytest.raises(CalibrationError, match="reached drafts"):
        online.calibration()


def test_refit_after_a_window_forgets_old_steps():
    rng = np.random.default_rng(11)
    online = OnlineCalibration(CAL, window=20, max_depth=8)
    fresh = OnlineCalibration(CAL, max_depth=8)
    for t in range(50):
        b = batch(rng, 64, 8)
        online.update(*b)
        if t >= 30:
            fresh.update(*b)
    assert online.calibration() == fresh.calibration()


@pytest.mark.parametrize("n, m", [(0, 1), (1, 1), (1, 8), (256, 8), (3, 64)])
def test_edge_shapes(n, m):
    rng = np.random.default_rng(n + m)
    b = batch(rng, n, m)
    online = OnlineCalibration(CAL, max_depth=64)
    online.update(*b)
    assert_counts(online, ref_online_counts(CAL.edges, [b]))


def test_bad_inputs_are_refused_and_change_nothing():
    online = OnlineCalibration(CAL, max_depth=4)
    conf = np.zeros((2, 4), dtype=np.float32)
    ok = np.array([2, 1], dtype=np.int64)
    with pytest.raises(CalibrationError, match="float32"):
        online.update(conf.astype(np.float64), ok, ok)
    with pytest.raises(CalibrationError, match="float32"):
        online.update(np.zeros((2, 8), dtype=np.float32)[:, ::2], ok, ok)  # not contiguous
    with pytest.raises(CalibrationError, match="int64"):
        online.update(conf, ok.astype(np.int32), ok)
    with pytest.raises(CalibrationError, match="one per row"):
        online.update(conf, ok[:1].copy(), ok[:1].copy())
    with pytest.raises(CalibrationError, match="float32"):
        online.update(conf.tolist(), ok, ok)
    with pytest.raises(CalibrationError, match="row 1"):
        online.update(conf, ok, np.array([1, 2], dtype=np.int64))  # run past its drafts
    with pytest.raises(CalibrationError, match="row 0"):
        online.update(np.zeros((2, 6), dtype=np.float32), np.array([5, 1], dtype=np.int64), ok)  # past max_depth
    assert online.steps_seen == 0
    assert sum(online.counts().accepted) == 0 and not online.counts().steps


@pytest.mark.parametrize("kwargs, match", [
    ({"window": 3, "half_life": 2.0}, "not both"),
    ({"window": 0}, "window"),
    ({"half_life": -1.0}, "half_life"),
    ({"half_life": float("nan")}, "half_life"),
    ({"max_depth": 0}, "max_depth"),
])
def test_bad_settings_are_refused(kwargs, match):
    with pytest.raises(CalibrationError, match=match):
        OnlineCalibration(CAL, **kwargs)


def test_a_refit_swapped_into_a_planner_plans_as_a_fresh_planner():
    from specsim import Cell, CostTable, Planner, TableKey

    rng = np.random.default_rng(5)
    cells = [Cell(n, k, 8.0 + 0.05 * n * (k + 1) + 0.3 * (k % 2), 1.5 + 0.01 * n * (k + 1), 0.9 * k, 0.08 * k)
             for n in (1, 4, 16, 64) for k in range(6)]
    table = CostTable.from_cells(TableKey(1, "box", "recipe", {"verify": "v"}), cells)
    online = OnlineCalibration(CAL, max_depth=8)
    for _ in range(30):
        online.update(*batch(rng, 64, 8))
    refit = online.calibration()
    assert refit != CAL
    swapped = Planner(table, CAL, slack=0.1)
    swapped.update_calibration(refit)
    fresh = Planner(table, refit, slack=0.1)
    stale = Planner(table, CAL, slack=0.1)
    widths = (1, 3, 16, 64, 100)
    assert [swapped.propose(n) for n in widths] == [fresh.propose(n) for n in widths]
    assert [stale.propose(n) for n in widths] != [fresh.propose(n) for n in widths]  # the swap mattered
    conf, n_conf, _ = batch(rng, 16, 5, nan_share=0.1)
    known = n_conf.copy()
    np.testing.assert_array_equal(swapped.depths(conf, n_conf, known, 5, 64), fresh.depths(conf, n_conf, known, 5, 64))


@settings(max_examples=30, deadline=None)
@given(batches())
def test_steps_without_confidences_count_as_nan_confidences(bs):
    by_rows = OnlineCalibration(CAL, max_depth=8, window=4)
    by_hist = OnlineCalibration(CAL, max_depth=8, window=4)
    for conf, n_conf, run in bs:
        by_rows.update(np.full_like(conf, np.nan), n_conf, run)
        hist = np.zeros((9, 9), dtype=np.int64)
        np.add.at(hist, (n_conf, run), 1)
        hist[0, 0] = 0  # a sequence without drafts is not a step
        by_hist.update_steps(hist)
    assert by_rows.counts() == by_hist.counts()
    np.testing.assert_array_equal(by_rows.statistics(), by_hist.statistics())


def test_update_steps_refuses_bad_histograms():
    online = OnlineCalibration(CAL, max_depth=2)
    with pytest.raises(CalibrationError, match="int64 matrix"):
        online.update_steps(np.zeros((2, 2), dtype=np.int64))
    bad = np.zeros((3, 3), dtype=np.int64)
    bad[1, 2] = 1
    with pytest.raises(CalibrationError, match=r"steps\[1, 2\]"):
        online.update_steps(bad)
    assert online.steps_seen == 0
