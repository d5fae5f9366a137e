"""Fitting calibrations (docs/calibration.md#fitting), binning logs, importing rates, the report and `calib fit`."""

import json
import math
import re
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import specsim
from specsim.calibration import AcceptanceCalibration, DrafterKey, conditional_priors
from specsim.calibration.fit import (
    DEFAULT_EDGES,
    MIN_OUTCOMES,
    calibration_from_rates,
    counts_from_steps,
    fit_calibration,
    fit_counts,
    make_counts,
    parse_counts,
    render_counts,
    steps_from_windows,
)
from specsim.calibration.logs import bin_drafts, bin_steps, load_drafts_log, load_steps_log
from specsim._stats import wilson
from specsim.calibration.report import brier, build_report, format_report
from specsim.cli import main
from specsim.errors import CalibrationError, SpecsimError

from tests.reference import (
    RefRefused,
    ref_bin_drafts,
    ref_conditional,
    ref_fit,
    ref_one_bucket_counts,
    ref_rate_per_reached,
    ref_steps_from_windows,
    ref_wilson,
)
from tests.fixtures import ROOT

DK = DrafterKey("ab" * 32, 32000, "bf16", True)
DRAFTER_FLAGS = ["--drafter-sha256", "ab" * 32, "--vocab", "32000", "--quantization", "bf16", "--context", "true"]


def fit_both(edges, accepted, rejected, steps):
    """(reference result or RefRefused, specsim result or CalibrationError)."""
    try:
        ref = ref_fit(edges, accepted, rejected, steps)
    except RefRefused as e:
        ref = e
    try:
        cal = fit_calibration(DK, edges, accepted, rejected, steps)
        got = (cal.p_accept.tolist(), cal.priors.tolist())
    except CalibrationError as e:
        got = e
    return ref, got


def assert_agree(edges, accepted, rejected, steps):
    ref, got = fit_both(edges, accepted, rejected, steps)
    if isinstance(ref, RefRefused):
        assert isinstance(got, CalibrationError), f"reference refused ({ref}) but specsim fitted {got}"
    else:
        assert not isinstance(got, Exception), f"specsim refused what the reference fits: {got}"
        assert got == ref  # exact float equality
    return got


# -- the fit: hand cases ----------------------------------------------------------------------
STEPS_OK = {(3, 3): 60, (3, 2): 30, (3, 1): 20, (3, 0): 40}  # 150 steps: position 1 reached by all


def test_one_pool_when_only_all_buckets_together_reach_100():
    got = assert_agree([-1.0, -0.1, 0.0], [10, 20, 30], [15, 15, 20], STEPS_OK)
    assert got[0] == [60 / 110] * 3


def test_many_pools_each_closing_at_100():
    edges = [-2.0, -1.0, -0.5, -0.1, 0.0]
    acc, rej = [5, 40, 60, 30, 90], [95, 60, 50, 80, 10]
    fit = fit_counts(DK, make_counts(edges, acc, rej, STEPS_OK))
    assert [(p.first, p.last) for p in fit.pools] == [(4, 4), (3, 3), (2, 2), (1, 1), (0, 0)]
    assert assert_agree(edges, acc, rej, STEPS_OK)[0] == [0.05, 0.4, 60 / 110, 30 / 110, 0.9]


def test_exactly_100_closes_a_pool_and_99_does_not():
    edges = [-1.0, -0.5, 0.0]
    fit = fit_counts(DK, make_counts(edges, [50, 10, 60], [50, 80, 40], STEPS_OK))
    assert [(p.first, p.last, p.reached) for p in fit.pools] == [(2, 2, 100), (0, 1, 190)]
    fit = fit_counts(DK, make_counts(edges, [50, 10, 60], [50, 80, 39], STEPS_OK))
    assert [(p.first, p.last, p.reached) for p in fit.pools] == [(1, 2, 189), (0, 0, 100)]
    assert_agree(edges, [50, 10, 60], [50, 80, 39], STEPS_OK)


def test_low_end_remainder_joins_the_last_closed_pool():
    edges = [-4.0, -2.0, -1.0, -0.1, 0.0]
    acc, rej = [1, 2, 30, 30, 80], [10, 20, 70, 40, 20]
    fit = fit_counts(DK, make_counts(edges, acc, rej, STEPS_OK))
    # bucket 4 closes alone (100); 3 + 2 close at 170; 1 + 0 (33) never reach 100 and join 2..3.
    assert [(p.first, p.last, p.accepted, p.reached) for p in fit.pools] == [(4, 4, 80, 100), (0, 3, 63, 203)]
    got = assert_agree(edges, acc, rej, STEPS_OK)
    assert got[0] == [63 / 203] * 4 + [0.8]


def test_empty_buckets_take_their_pool_rate():
    got = assert_agree([-1.0, -0.5, 0.0], [0, 0, 70], [0, 0, 30], STEPS_OK)
    assert got[0] == [0.7, 0.7, 0.7]


def test_priors_stop_at_the_first_position_under_100():
    steps = {(4, 4): 60, (4, 3): 30, (4, 1): 20, (4, 0): 40, (2, 2): 5}
    fit = fit_counts(DK, make_counts([0.0], [100], [50], steps))
    # j=1: 155 reached, 115 accepted; j=2: d>=2 & a>=1: 115 reached, 95 acc; j=3: d>=3 & a>=2: 90.
    assert [(p.position, p.accepted, p.reached) for p in fit.positions] == [(1, 115, 155), (2, 95, 115)]
    assert (fit.stop.position, fit.stop.reached) == (3, 90)
    assert assert_agree([0.0], [100], [50], steps)[1] == [115 / 155, 95 / 115]


def test_priors_cover_every_position_when_all_have_100():
    fit = fit_counts(DK, make_counts([0.0], [100], [50], {(2, 2): 100, (2, 0): 5}))
    assert fit.calibration.priors.tolist() == [100 / 105, 1.0]
    assert fit.stop is None


@pytest.mark.parametrize(
    "edges, accepted, rejected, steps, needle",
    [
        ([], [], [], STEPS_OK, "no edges"),
        ([-1.0, 0.0], [100], [100, 100], STEPS_OK, "(2, 1 and 2)"),
        ([-1.0, 0.0], [100, 100], [100], STEPS_OK, "(2, 2 and 1)"),
        ([0.0], [-1], [200], STEPS_OK, "accepted[0] = -1"),
        ([0.0], [100], [1.5], STEPS_OK, "rejected[0] = 1.5"),
        ([0.0], [100], [float("nan")], STEPS_OK, "rejected[0] = nan"),
        ([0.0], [True], [100], STEPS_OK, "accepted[0] = True"),
        ([0.0], [100], [100], {(2, 3): 100, (3, 3): 200}, "accepted 3 > drafts 2"),
        ([0.0], [100], [100], {(3, 3): -5, (3, 0): 200}, "-5"),
        ([0.0], [100], [100], {(3, 3): 2.5, (3, 0): 200}, "2.5"),
        ([0.0], [100], [100], {(3,): 200}, "not a pair"),
        ([0.0], [60], [39], STEPS_OK, "there are 99 reached drafts"),
        ([-1.0, 0.0], [0, 0], [0, 0], STEPS_OK, "there are 0 reached drafts"),
        ([0.0], [100], [100], {(3, 3): 50, (3, 0): 49}, "position 1 has 99 reached steps"),
        ([0.0], [100], [100], {}, "position 1 has 0 reached steps"),
        ([0.0], [100], [100], {(0, 0): 500}, "position 1 has 0 reached steps"),
        ([0.0, -1.0], [100, 100], [0, 0], STEPS_OK, "not strictly ascending"),
        ([-0.5], [100], [0], STEPS_OK, "< 0"),
        ([float("nan")], [100], [0], STEPS_OK, "not a number"),
        (["x"], [100], [0], STEPS_OK, "not a number"),
    ],
)
def test_every_refusal_names_the_counts(edges, accepted, rejected, steps, needle):
    with pytest.raises(CalibrationError) as info:
        fit_calibration(DK, edges, accepted, rejected, steps)
    assert needle in str(info.value)
    assert_agree(edges, accepted, rejected, steps)


def test_no_pool_and_no_prior_are_both_listed():
    with pytest.raises(CalibrationError) as info:
        fit_calibration(DK, [0.0], [10], [10], {(1, 1): 10})
    assert "20 reached drafts" in str(info.value) and "position 1 has 10 reached steps" in str(info.value)


def test_integral_floats_and_numpy_counts_are_counts():
    a = fit_calibration(DK, np.array([-1.0, 0.0]), np.array([50, 60]), [50.0, 40.0], {(np.int64(2), 1): 150.0})
    b = fit_calibration(DK, [-1.0, 0.0], [50, 60], [50, 40], {(2, 1): 150})
    assert a == b
    assert_agree([-1.0, 0.0], [50, 60], [50.0, 40.0], {(2, 1): 150.0})


def test_round_trip_through_the_file():
    fit = fit_counts(DK, make_counts([-1.0, -0.1, 0.0], [33, 57, 91], [70, 44, 13], STEPS_OK))
    text = fit.calibration.render()
    assert AcceptanceCalibration.parse(text) == fit.calibration


def test_huge_counts_are_exact():
    big = 3 * 10**20 + 7
    cal = fit_calibration(DK, [0.0], [big], [big + 1], {(1, 1): big, (1, 0): 1})
    assert cal.p_accept[0] == big / (2 * big + 1)
    assert cal.priors[0] == big / (big + 1)


# -- the fit: Hypothesis against the reference ------------------------------------------------
# Boundary values make pools and priors close at exactly MIN_OUTCOMES (or one short) often.
counts_st = st.one_of(st.integers(0, 70), st.sampled_from([0, 1, 25, 33, 49, 50, 51, 99, 100, 101]))
step_key = st.integers(0, 5).flatmap(lambda d: st.tuples(st.just(d), st.integers(0, d)))


@st.composite
def fit_inputs(draw):
    b = draw(st.integers(1, 6))
    edges = sorted(draw(st.lists(st.floats(-8, 0, width=32), min_size=b, max_size=b, unique=True)))
    edges[-1] = draw(st.sampled_from([0.0, edges[-1], 0.5]))
    accepted = draw(st.lists(counts_st, min_size=b, max_size=b))
    rejected = draw(st.lists(counts_st, min_size=b, max_size=b))
    steps = draw(st.dictionaries(step_key, st.one_of(st.integers(0, 120), st.sampled_from([50, 99, 100])),
                                 max_size=10))
    mutation = draw(st.integers(0, 9))
    if mutation == 0:  # a bad count
        which = draw(st.sampled_from([accepted, rejected]))
        which[draw(st.integers(0, b - 1))] = draw(st.sampled_from([-1, 0.5, -3.0]))
    elif mutation == 1:  # lengths differ
        draw(st.sampled_from([accepted, rejected, edges])).append(5)
    elif mutation == 2:  # accepted > drafts
        d = draw(st.integers(0, 4))
        steps[(d, d + 1)] = draw(st.integers(0, 50))
    elif mutation == 3:  # big counts: pools and priors close early
        accepted = [c * 40 for c in accepted]
        steps = {k: c * 40 for k, c in steps.items()}
    return edges, accepted, rejected, steps


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(fit_inputs())
def test_fit_matches_the_reference_exactly(inputs):
    assert_agree(*inputs)


@settings(max_examples=60, deadline=None)
@given(fit_inputs())
def test_every_fit_round_trips(inputs):
    try:
        cal = fit_calibration(DK, *inputs)
    except CalibrationError:
        return
    assert AcceptanceCalibration.parse(cal.render()) == cal


# -- binning per-draft logs -------------------------------------------------------------------
EDGES = [-1.0, -0.1, 0.0]


def as_columns(rows):
    cols = list(zip(*rows)) if rows else [[]] * 5
    return (np.array(cols[0], dtype=np.int64), np.array(cols[1], dtype=np.int64),
            np.array(cols[2], dtype=np.int64), np.array(cols[3], dtype=np.float64), np.array(cols[4], dtype=np.int64))


def assert_bins_like_reference(rows, edges=EDGES, holdout=0.0):
    held_ids = set()
    if holdout:
        ids = sorted({r[0] for r in rows})
        held = max(1, round(holdout * len(ids)))
        held_ids = set(ids[len(ids) - held:])
    ref = ref_bin_drafts(edges, rows, held_ids)
    fit, held_counts = bin_drafts(*as_columns(rows), edges=edges, holdout=holdout)
    for counts, group in ((fit, "fit"), (held_counts, "held")):
        if counts is None:
            assert not held_ids
            continue
        acc, rej, steps, nonfinite, unreached = ref[group]
        assert list(counts.accepted) == acc
        assert list(counts.rejected) == rej
        assert counts.steps == steps
        assert (counts.nonfinite, counts.unreached) == (nonfinite, unreached)
    return fit, held_counts


def test_binning_a_hand_log():
    rows = [
        (1, 0, 1, -0.05, 1), (1, 0, 2, -0.5, 1), (1, 0, 3, -2.0, 0),   # all reached; run 2
        (1, 1, 1, -0.01, 0), (1, 1, 2, -0.02, 1), (1, 1, 3, -3.0, 1),  # rejected first: 2 unreached
        (2, 0, 1, float("nan"), 1), (2, 0, 2, -0.1, 0),                # NaN counted apart, still in run
        (3, 7, 1, -1.0, 1),                                            # edge value: bucket 0
    ]
    fit, _ = assert_bins_like_reference(rows)
    assert fit.accepted == (1, 1, 1) and fit.rejected == (1, 1, 1)
    assert fit.steps == {(3, 2): 1, (3, 0): 1, (2, 1): 1, (1, 1): 1}
    assert (fit.nonfinite, fit.unreached) == (1, 2)


def test_unsorted_log_bins_like_sorted():
    rows = [(s, q, p, -0.3 * p, (s + q + p) % 3 != 0) for s in range(5) for q in range(3) for p in range(1, 4)]
    shuffled = [rows[i] for i in np.random.default_rng(1).permutation(len(rows))]
    a, _ = assert_bins_like_reference(rows)
    b, _ = assert_bins_like_reference(shuffled)
    assert a == b


def test_float32_edge_comparison_and_out_of_range_confidences():
    # Compared in float32: -0.1 lands on the edge -0.1 (bucket 1), the next float32 up does not;
    # -1e300 is finite but -inf in float32 (bucket 0); 0.5 is above every edge (the last bucket).
    rows = [(1, 0, 1, -0.1, 1), (2, 0, 1, np.nextafter(np.float32(-0.1), 0).item(), 1),
            (3, 0, 1, -1e300, 1), (4, 0, 1, float("-inf"), 1), (5, 0, 1, 0.5, 1)]
    fit, _ = assert_bins_like_reference(rows)
    assert fit.accepted == (1, 1, 2) and fit.nonfinite == 1


@pytest.mark.parametrize(
    "rows, needle",
    [
        ([(1, 0, 2, -0.1, 1)], "once each"),
        ([(1, 0, 1, -0.1, 1), (1, 0, 3, -0.1, 1)], "once each"),
        ([(1, 0, 1, -0.1, 1), (1, 0, 1, -0.2, 1)], "once each"),
        ([(1, 0, 0, -0.1, 1)], "once each"),
        ([(1, 0, 1, -0.1, 2)], "accepted = 2"),
    ],
)
@pytest.mark.parametrize("arrange", ["sorted", "unsorted", "unsorted sparse ids"])
def test_broken_logs_are_refused(rows, needle, arrange):
    # Unsorted logs are ordered by a counting sort (dense ids) or a comparison sort (sparse ids):
    # every path must refuse the same logs.
    rows = [(2, 5, 1, -0.3, 1)] + rows if arrange != "sorted" else rows
    if arrange == "unsorted sparse ids":
        rows = [(s * 10**15, q, p, c, a) for s, q, p, c, a in rows]
    with pytest.raises(CalibrationError, match=needle):
        bin_drafts(*as_columns(rows), edges=EDGES)
    if "accepted" not in needle:
        with pytest.raises(RefRefused):
            ref_bin_drafts(EDGES, rows)


def test_empty_log_bins_to_nothing_and_fit_refuses():
    fit, _ = bin_drafts(*as_columns([]), edges=EDGES)
    assert fit.reached == 0 and fit.steps == {}
    with pytest.raises(CalibrationError, match="there are 0 reached drafts"):
        fit_counts(DK, fit)


def test_holdout_splits_the_latest_steps():
    rows = [(s, 0, p, -0.2 * p, (s * p) % 4 != 1) for s in range(20) for p in range(1, 3)]
    fit, held = assert_bins_like_reference(rows, holdout=0.25)
    assert held.step_count == 5 and fit.step_count == 15
    with pytest.raises(CalibrationError, match="leaves none to fit"):
        bin_drafts(*as_columns(rows[:2]), edges=EDGES, holdout=0.9)


confidence_st = st.one_of(st.floats(-5, 0.2), st.sampled_from([float("nan"), float("inf"), -0.1, -1.0, 0.0]))
chain_st = st.integers(1, 4).flatmap(
    lambda d: st.tuples(st.lists(confidence_st, min_size=d, max_size=d), st.lists(st.booleans(), min_size=d, max_size=d))
)


@settings(max_examples=120, deadline=None)
@given(st.dictionaries(st.tuples(st.integers(0, 6), st.integers(0, 2)), chain_st, max_size=12),
       st.sampled_from([0.0, 0.3]), st.randoms(use_true_random=False), st.sampled_from([1, -3, 10**15]))
def test_binning_matches_the_reference(chains, holdout, rnd, spread):
    # spread 10**15 makes step ids sparse (comparison sort); 1 and -3 keep them dense (counting sort).
    rows = [(s * spread, q, p, conf[p - 1], acc[p - 1]) for (s, q), (conf, acc) in chains.items() for p in range(1, len(conf) + 1)]
    if rnd.random() < 0.7:  # most logs come unsorted
        rnd.shuffle(rows)
    if holdout and len({r[0] for r in rows}) < 2:
        return
    assert_bins_like_reference(rows, DEFAULT_EDGES, holdout)


# -- log files --------------------------------------------------------------------------------
LOG_ROWS = [(s, q, p, -0.07 * p * (q + 1), int((s + p) % 3 != 0)) for s in range(100) for q in range(2) for p in (1, 2, 3)]


def write_csv(path, rows, accepted_text=str):
    lines = ["extra,position,sequence,step,accepted,confidence"]
    lines += [f"x,{p},{q},{s},{accepted_text(a)},{c!r}" for s, q, p, c, a in rows]
    path.write_text("\n".join(lines) + "\n")


def test_csv_and_jsonl_logs_bin_alike(tmp_path):
    write_csv(tmp_path / "d.csv", LOG_ROWS)
    write_csv(tmp_path / "b.csv", LOG_ROWS, accepted_text=lambda a: "true" if a else "False")
    with open(tmp_path / "d.jsonl", "w") as f:
        for s, q, p, c, a in LOG_ROWS:
            f.write(json.dumps({"step": s, "sequence": q, "position": p, "confidence": c, "accepted": bool(a)}) + "\n")
    a = load_drafts_log(tmp_path / "d.csv", EDGES)[0]
    b = load_drafts_log(tmp_path / "b.csv", EDGES)[0]
    c = load_drafts_log(tmp_path / "d.jsonl", EDGES)[0]
    ref = ref_bin_drafts(EDGES, LOG_ROWS)["fit"]
    for counts in (a, b, c):
        assert (list(counts.accepted), list(counts.rejected), counts.steps) == ref[:3]


def test_jsonl_null_confidence_is_counted_apart(tmp_path):
    path = tmp_path / "d.jsonl"
    path.write_text('{"step": 1, "sequence": 0, "position": 1, "confidence": null, "accepted": 1}\n\n'
                    '{"step": 1, "sequence": 0, "position": 2, "confidence": -0.5, "accepted": 0}\n')
    fit, _ = load_drafts_log(path, EDGES)
    assert fit.nonfinite == 1 and fit.rejected == (0, 1, 0)


@pytest.mark.parametrize(
    "text, needle",
    [
        ("step,sequence,position,confidence\n1,0,1,-0.1\n", "lacks the column(s) accepted"),
        ("step,sequence,position,confidence,accepted\n1,0,1,-0.1,maybe\n", "maybe"),
        ("step,sequence,position,confidence,accepted\n1.5,0,1,-0.1,1\n", "1.5"),
    ],
)
def test_bad_csv_logs_are_refused(tmp_path, text, needle):
    path = tmp_path / "bad.csv"
    path.write_text(text)
    with pytest.raises(CalibrationError, match=re.escape(needle)) as info:
        load_drafts_log(path)
    assert str(path) in str(info.value)


ROW = '{"step": 1, "sequence": 0, "position": 1, "confidence": -1, "accepted": 1}'


@pytest.mark.parametrize(
    "second, needle",
    [
        ('{"step": 1', "line 3 is not JSON"),
        (ROW.replace("1}", "1}, " + ROW.replace('"step": 1', '"step": 2')), "line 3 is not JSON"),
        ("[" * 1000 + "]" * 1000, "line 3 nests lists or objects 1000 deep"),
        (ROW.replace('"step": 1', '"step": ' + "9" * 30), "the step column holds an integer past 64 bits"),
        ("[1, 2]", "line 3 is a JSON list"),
        (ROW.replace('"sequence": 0, ', ""), "line 3 has no 'sequence'"),
        (ROW.replace('"step": 1', '"step": 1.0'), "line 3: step 1.0 is not an integer"),
        (ROW.replace('"confidence": -1', '"confidence": "-1"'), "line 3: confidence '-1'"),
        (ROW.replace('"accepted": 1', '"accepted": "yes"'), "line 3: accepted 'yes'"),
    ],
)
def test_bad_jsonl_lines_are_named(tmp_path, second, needle):
    path = tmp_path / "bad.jsonl"
    path.write_text(ROW + "\n\n" + second + "\n")
    with pytest.raises(CalibrationError, match=re.escape(needle)):
        load_drafts_log(path)


def test_steps_log_gives_one_bucket_counts(tmp_path):
    rows = [(3, a) for a in (3, 3, 2, 0, 1)] * 40 + [(2, 2)] * 7
    path = tmp_path / "s.csv"
    path.write_text("drafts,accepted\n" + "".join(f"{d},{a}\n" for d, a in rows))
    counts = load_steps_log(path)
    steps = {}
    for d, a in rows:
        steps[(d, a)] = steps.get((d, a), 0) + 1
    assert counts.steps == steps
    assert (counts.accepted[0], counts.rejected[0]) == ref_one_bucket_counts(steps)
    with pytest.raises(CalibrationError, match="accepted 4"):
        bin_steps([3, 3], [1, 4])


# -- rates and step histograms ----------------------------------------------------------------
@pytest.mark.parametrize(
    "marginal",
    [
        [0.8, 0.6, 0.45],
        [0.8, 0.0, 0.3, 0.2],   # a zero marginal: everything after is 0
        [0.0, 0.5],
        [0.5, 0.7, 0.9],        # rising marginals: clamped to 1
        [1.0, 1.0],
    ],
)
def test_marginal_rates_to_priors(marginal):
    assert conditional_priors(marginal, "marginal") == ref_conditional(marginal)
    cal = calibration_from_rates(DK, marginal, "marginal")
    assert cal.priors.tolist() == ref_conditional(marginal)
    assert cal.p_accept.tolist() == [ref_rate_per_reached(ref_conditional(marginal))]
    assert AcceptanceCalibration.parse(cal.render()) == cal


def test_conditional_rates_are_taken_as_they_are():
    cal = calibration_from_rates(DK, [0.9, 0.5], "conditional")
    assert cal.priors.tolist() == [0.9, 0.5]
    assert cal.p_accept[0] == (0.9 + 0.45) / (1 + 0.9)
    with pytest.raises(CalibrationError, match="position 2"):
        calibration_from_rates(DK, [0.9, 1.5], "conditional")


def test_rates_match_a_one_bucket_fit_of_their_steps():
    # Steps at depth 3 whose runs follow conditional rates 0.8, 0.5, 0.25 exactly.
    steps = {(3, 0): 200, (3, 1): 400, (3, 2): 300, (3, 3): 100}
    fit = fit_counts(DK, counts_from_steps(steps))
    rates = calibration_from_rates(DK, fit.calibration.priors.tolist(), "conditional")
    assert fit.calibration.priors.tolist() == [0.8, 0.5, 0.25]
    assert math.isclose(fit.calibration.p_accept[0], rates.p_accept[0], rel_tol=1e-15)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.floats(0, 1), min_size=1, max_size=6))
def test_marginal_conversion_matches_the_reference(marginal):
    assert conditional_priors(marginal, "marginal") == ref_conditional(marginal)


def test_windows_to_steps():
    rows = [[16, 22, 38, 24], [15, 23, 36, 26]]
    assert steps_from_windows(rows) == ref_steps_from_windows(rows)
    with pytest.raises(CalibrationError, match="window 1 has 3 counts"):
        steps_from_windows([[1, 2, 3, 4], [1, 2, 3]])
    with pytest.raises(CalibrationError, match="-1"):
        steps_from_windows([[1, 2, -1, 4]])


def test_real_gb10_windows_fit_and_report(shared_data, capsys):
    import tomllib

    doc = tomllib.loads((shared_data / "metrale" / "qwen38_27b_mtp_gb10.toml").read_text())
    rows = [w for run in doc["run"] for w in run["windows"]]
    steps = ref_steps_from_windows(rows)
    counts = counts_from_steps(steps_from_windows(rows), source="qwen38_27b_mtp_gb10 windows")
    fit = fit_counts(DK, counts)
    ref_p, ref_priors = ref_fit([0.0], *[[c] for c in ref_one_bucket_counts(steps)], steps)
    assert fit.calibration.p_accept.tolist() == ref_p
    assert fit.calibration.priors.tolist() == ref_priors
    assert len(ref_priors) == doc["k_logged"] and counts.step_count == 100 * len(rows)
    assert AcceptanceCalibration.parse(fit.calibration.render()) == fit.calibration
    text = format_report(build_report(fit.calibration, fit))
    print(text)
    assert "position priors" in text and f"{counts.reached}" in text
    assert "GB10" not in capsys.readouterr().err


# -- the report ---------------------------------------------------------------------------------
def test_report_intervals_and_brier():
    edges = [-1.0, -0.1, 0.0]
    counts = make_counts(edges, [20, 60, 90], [80, 50, 10], STEPS_OK)
    fit = fit_counts(DK, counts)
    report = build_report(fit.calibration, fit)
    for pool in report["pools"]:
        lo, hi = ref_wilson(pool["accepted"], pool["reached"])
        assert pool["wilson95"] == pytest.approx([lo, hi], abs=1e-12)
        p = pool["accepted"] / pool["reached"]
        assert pool["stderr"] == pytest.approx(math.sqrt(p * (1 - p) / pool["reached"]))
        assert lo <= p <= hi
    # Brier by enumerating every reached draft.
    outcomes = [(fit.calibration.p_accept[b], y) for b in range(3)
                for y, n in ((1, counts.accepted[b]), (0, counts.rejected[b])) for _ in range(n)]
    assert report["brier"]["buckets"] == pytest.approx(sum((p - y) ** 2 for p, y in outcomes) / len(outcomes))
    per_position = []
    for (d, a), c in STEPS_OK.items():
        for j in range(1, min(a + 1, d) + 1):
            per_position += [(fit.calibration.prior(j), int(j <= a))] * c
    assert report["brier"]["priors"] == pytest.approx(sum((p - y) ** 2 for p, y in per_position) / len(per_position))
    json.dumps(report, allow_nan=False)
    text = format_report(report)
    assert "(-inf, -1]" in text and "95% Wilson" in text


def test_wilson_edges():
    assert wilson(0, 0) is None
    lo, hi = wilson(0, 100)
    assert lo == 0.0 and 0 < hi < 0.05
    lo, hi = wilson(100, 100)
    assert hi == 1.0 and lo > 0.95


def test_brier_on_held_out_counts():
    rows = [(s, 0, p, -0.3 * p, (s + p) % 4 != 0) for s in range(400) for p in (1, 2)]
    fit_c, held = bin_drafts(*as_columns(rows), edges=EDGES, holdout=0.2)
    fit = fit_counts(DK, fit_c)
    report = build_report(fit.calibration, fit, held)
    assert report["holdout"]["brier"] == brier(fit.calibration, held)
    assert report["holdout"]["steps"] == 80
    assert "held out" in format_report(report)


# -- counts files ---------------------------------------------------------------------------------
def test_counts_file_round_trip_toml_and_json(tmp_path):
    counts = make_counts([-1.0, -0.1, 0.0], [20, 60, 90], [80, 50, 10], STEPS_OK, nonfinite=3, unreached=7)
    text = render_counts(counts)
    back = parse_counts(text, "<counts>")
    assert back == counts
    doc = {"edges": list(counts.edges), "accepted": list(counts.accepted), "rejected": list(counts.rejected),
           "steps": [[d, a, c] for (d, a), c in counts.steps.items()], "nonfinite": 3, "unreached": 7}
    assert parse_counts(json.dumps(doc), json_format=True) == counts


@pytest.mark.parametrize(
    "text, needle",
    [
        ("edges = [0.0]\naccepted = [1]\nrejected = [1]\n", "has no steps"),
        ("edges = [0.0]\naccepted = [1]\nrejected = [1]\nsteps = [[3, 1]]\n", "not [drafts, accepted, count]"),
        ("edges = [0.0]\naccepted = [1]\nrejected = [1]\nsteps = [[3, 1, 4], [3, 1, 5]]\n", "repeats"),
        ("edges = [0.0]\naccepted = [1]\nrejected = [1]\nsteps = [[3, 4, 5]]\n", "accepted 4 > drafts 3"),
        ("edges = [0.0\n", "not valid TOML"),
    ],
)
def test_bad_counts_files_are_refused(text, needle):
    with pytest.raises(CalibrationError, match=re.escape(needle)):
        parse_counts(text, "c.toml")


# -- the command line ---------------------------------------------------------------------------
def good_counts_file(tmp_path):
    path = tmp_path / "counts.toml"
    path.write_text(render_counts(make_counts([-1.0, -0.1, 0.0], [20, 60, 90], [80, 50, 10], STEPS_OK)))
    return path


def test_cli_fit_counts_writes_a_calibration(tmp_path, capsys):
    out = tmp_path / "cal.toml"
    rc = main(["calib", "fit", "--counts", str(good_counts_file(tmp_path)), *DRAFTER_FLAGS, "-o", str(out), "--report"])
    assert rc == 0
    cal = AcceptanceCalibration.load(out)
    assert cal.drafter == DrafterKey("ab" * 32, 32000, "bf16", True)
    assert "pools" in capsys.readouterr().out


def test_cli_fit_drafts_log_with_holdout_json_and_plot(tmp_path, capsys):
    log = tmp_path / "d.csv"
    write_csv(log, LOG_ROWS)
    out, png, counts = tmp_path / "cal.toml", tmp_path / "r.png", tmp_path / "c.toml"
    rc = main(["calib", "fit", "--drafts-log", str(log), "--edges=-1,-0.1,0", *DRAFTER_FLAGS, "-o", str(out),
               "--json", "--holdout", "0.25", "--plot", str(png), "--counts-out", str(counts)])
    assert rc == 0
    report = json.loads(capsys.readouterr().out)
    assert report["holdout"]["steps"] == 50 and report["totals"]["steps"] == 150
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert AcceptanceCalibration.load(out).edges.tolist() == [-1.0, np.float32(-0.1), 0.0]
    assert parse_counts(counts.read_text()).reached == report["totals"]["reached_drafts"]


def test_cli_fit_rates_steps_log_and_windows(tmp_path):
    out = tmp_path / "cal.toml"
    assert main(["calib", "fit", "--rates", "0.8,0.5,0.3", *DRAFTER_FLAGS, "-o", str(out), "--report"]) == 0
    assert AcceptanceCalibration.load(out).priors.tolist() == ref_conditional([0.8, 0.5, 0.3])
    steps = tmp_path / "s.jsonl"
    steps.write_text("".join(json.dumps({"drafts": 2, "accepted": a}) + "\n" for a in [2, 1, 0, 2] * 40))
    assert main(["calib", "fit", "--steps-log", str(steps), *DRAFTER_FLAGS, "-o", str(out)]) == 0
    assert AcceptanceCalibration.load(out).priors.tolist() == [120 / 160, 80 / 120]
    win = tmp_path / "w.toml"
    win.write_text("k_logged = 2\n[[run]]\nname = 'a'\nwindows = [[30, 40, 50]]\n[[run]]\nname = 'b'\n"
                   "windows = [[300, 400, 500]]\n")
    assert main(["calib", "fit", "--windows", str(win), "--run", "b", *DRAFTER_FLAGS, "-o", str(out)]) == 0
    assert AcceptanceCalibration.load(out).priors.tolist() == [700 / 1200, 300 / 700]


def test_cli_fit_real_windows(shared_data, tmp_path):
    out = tmp_path / "cal.toml"
    rc = main(["calib", "fit", "--windows", str(shared_data / "metrale" / "qwen38_27b_mtp_gb10.toml"),
               *DRAFTER_FLAGS, "-o", str(out)])
    assert rc == 0 and len(AcceptanceCalibration.load(out).priors) == 3


@pytest.mark.parametrize(
    "args, needle",
    [
        (["--counts", "{counts_bad}"], "there are 30 reached drafts"),
        (["--counts", "{missing}"], "cannot read the counts file"),
        (["--rates", "0.8,1.2"], "[0, 1]"),
        (["--steps-log", "{counts_good}", "--holdout", "0.2"], "--holdout needs --drafts-log"),
        (["--windows", "{win_bad}"], "k_logged = 3"),
        (["--drafts-log", "{log_bad}"], "once each"),
    ],
)
def test_cli_refusals_exit_2_and_write_nothing(tmp_path, capsys, args, needle):
    bad = tmp_path / "bad.toml"
    bad.write_text("edges = [0.0]\naccepted = [10]\nrejected = [20]\nsteps = [[1, 1, 500]]\n")
    win = tmp_path / "w.toml"
    win.write_text("k_logged = 3\nwindows = [[30, 40, 50]]\n")
    log = tmp_path / "l.csv"
    log.write_text("step,sequence,position,confidence,accepted\n1,0,1,-0.1,1\n1,0,1,-0.1,1\n")
    names = {"counts_bad": bad, "missing": tmp_path / "nope.toml", "counts_good": good_counts_file(tmp_path),
             "win_bad": win, "log_bad": log}
    args = [a.format(**{k: str(v) for k, v in names.items()}) for a in args]
    out = tmp_path / "cal.toml"
    rc = main(["calib", "fit", *args, *DRAFTER_FLAGS, "-o", str(out)])
    err = capsys.readouterr().err
    assert rc == 2 and needle in err and "Traceback" not in err
    assert not out.exists() and not list(tmp_path.glob(".cal.toml.*"))


def test_cli_plot_without_matplotlib_refuses_before_writing(tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    out = tmp_path / "cal.toml"
    rc = main(["calib", "fit", "--counts", str(good_counts_file(tmp_path)), *DRAFTER_FLAGS, "-o", str(out),
               "--plot", str(tmp_path / "r.png")])
    assert rc == 2 and "needs matplotlib" in capsys.readouterr().err
    assert not out.exists()


def test_cli_usage_errors_exit_2(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "specsim", "calib", "fit", *DRAFTER_FLAGS, "-o", str(tmp_path / "x")],
                          capture_output=True, text=True, cwd=ROOT, env={"PYTHONPATH": str(ROOT), "PATH": ""})
    assert proc.returncode == 2 and "one of the arguments" in proc.stderr and "Traceback" not in proc.stderr


def test_public_names():
    assert specsim.MIN_OUTCOMES == MIN_OUTCOMES == 100
    assert specsim.fit_calibration is fit_calibration
    assert isinstance(CalibrationError("x"), SpecsimError)
