"""Acceptance calibrations (docs/calibration.md): kernels against tests/reference.py, validation, rendering."""

import math
import struct

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests import reference as ref
from specsim import AcceptanceCalibration, CalibrationError, DrafterKey, conditional_priors
from specsim.calibration import _kernels
from tests.fixtures import CALIBRATION_TOML

SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
DRAFTER = DrafterKey("ab" * 32, 32000, "bf16", True)
EDGES = [-1.0, -0.1, 0.0]
P = [0.2, 0.6, 0.95]
PRIORS = [0.8, 0.6, 0.5]


def bits(x):
    return struct.unpack("<Q", struct.pack("<d", x))[0]


def f32_neighbours(e):
    e = np.float32(e)
    return [float(np.nextafter(e, np.float32(-np.inf))), float(e), float(np.nextafter(e, np.float32(np.inf)))]


def cal(edges=EDGES, p=P, priors=PRIORS):
    return AcceptanceCalibration(DRAFTER, edges, p, priors)


@st.composite
def calibrations(draw):
    raw = draw(st.lists(st.floats(-20, 0, width=32), min_size=1, max_size=6, unique=True))
    edges = sorted(set(raw))
    if edges[-1] < 0 or draw(st.booleans()):
        edges = sorted(set(edges[:-1] + [draw(st.sampled_from([0.0, 0.5, math.inf]))]))
    prob = st.floats(0, 1)
    return (edges, [draw(prob) for _ in edges], draw(st.lists(prob, min_size=1, max_size=5)))


confidence = st.one_of(st.floats(width=32), st.sampled_from([-math.inf, math.inf, math.nan, 0.0, -0.0, -0.1, -1.0]))


# ---------------------------------------------------------------- kernels vs reference
EDGE_LPS = [-math.inf, math.inf, math.nan, 0.0, -0.0, 5.0, -100.0] + [x for e in EDGES for x in f32_neighbours(e)]


def test_bucket_edge_cases():
    c = cal()
    assert c.bucket(-1.0) == 0 and c.bucket(-0.1) == 1 and c.bucket(0.0) == 2  # lp exactly on an edge
    assert c.bucket(float(np.nextafter(np.float32(-1.0), np.float32(0)))) == 1
    assert c.bucket(3.0) == 2 and c.bucket(math.inf) == 2  # above every edge: the last bucket
    assert c.bucket(-math.inf) == 0
    assert c.bucket(math.nan) == 2  # metrale's bucket of NaN; expected_accepted deviates (docs/calibration.md#queries)
    # compared in float32: -0.1 as a float64 lies below float32(-0.1), which is the edge
    assert c.bucket(-0.1) == c.bucket(float(np.float32(-0.1)))
    for lp in EDGE_LPS:
        assert c.bucket(lp) == ref.ref_bucket(EDGES, lp)
        assert c.p_given_lp(lp) == ref.ref_p_given_lp(EDGES, P, lp)


def test_one_bucket():
    c = cal([0.0], [0.7], [0.3])
    for lp in EDGE_LPS:
        assert c.p_given_lp(lp) == 0.7
    assert c.expected_accepted([], 2) == 0.3 + 0.3 * 0.3
    assert c.expected_accepted([math.nan, -5.0], 2) == 0.3 + 0.3 * 0.7


def test_prior_positions():
    c = cal()
    assert [c.prior(j) for j in (0, 1, 2, 3, 4, 100)] == [0.8, 0.8, 0.6, 0.5, 0.5, 0.5]
    for j in range(-2, 8):
        assert c.prior(j) == ref.ref_prior(PRIORS, j)
        assert _kernels.prior_nb(c.priors, j) == ref.ref_prior(PRIORS, j)


def test_expected_accepted_edge_cases():
    c = cal()
    assert c.expected_accepted([], 0) == 0.0
    assert c.expected_accepted([-0.05], 0) == 0.0
    assert c.expected_accepted([-0.05], 1) == 0.95
    assert c.expected_accepted([-0.05, -2.0], 2) == 0.95 + 0.95 * 0.2
    # past the confidences: priors by position
    assert c.expected_accepted([-0.05], 3) == 0.95 + 0.95 * 0.6 + 0.95 * 0.6 * 0.5
    # deviation: NaN is unmeasured and takes the position prior, not the last bucket
    assert c.expected_accepted([math.nan, -0.05], 2) == 0.8 + 0.8 * 0.95
    for lps in ([], [math.nan], [-math.inf, math.inf], [0.0, -1.0, -0.1, 7.0]):
        for k in range(6):
            assert bits(c.expected_accepted(lps, k)) == bits(ref.ref_expected_accepted(EDGES, P, PRIORS, lps, k))


@SETTINGS
@given(c=calibrations(), lps=st.lists(confidence, max_size=8), k=st.integers(0, 10))
def test_scalar_queries_match_reference(c, lps, k):
    edges, p, priors = c
    calib = AcceptanceCalibration(DRAFTER, edges, p, priors)
    for lp in lps + [x for e in edges for x in f32_neighbours(e)]:
        assert calib.p_given_lp(lp) == ref.ref_p_given_lp(edges, p, lp)
    assert bits(calib.expected_accepted(lps, k)) == bits(ref.ref_expected_accepted(edges, p, priors, lps, k))


@SETTINGS
@given(c=calibrations(), rows=st.lists(st.lists(confidence, max_size=6), min_size=1, max_size=8), data=st.data())
def test_batch_kernels_match_reference(c, rows, data):
    edges, p, priors = c
    calib = AcceptanceCalibration(DRAFTER, edges, p, priors)
    m = max(len(r) for r in rows)
    conf = np.full((len(rows), m), 99.0, dtype=np.float32)  # padding past n_conf must never be read
    for i, r in enumerate(rows):
        conf[i, :len(r)] = r
    n_conf = np.array([len(r) for r in rows], dtype=np.int64)
    depths = np.array(data.draw(st.lists(st.integers(0, 9), min_size=len(rows), max_size=len(rows))), dtype=np.int64)
    lps = [[float(x) for x in conf[i, :n_conf[i]]] for i in range(len(rows))]

    out = np.empty(len(rows))
    assert _kernels.expected_accepted_nb(calib.edges, calib.p_accept, calib.priors, conf, n_conf, depths, out) == 0
    want = [ref.ref_expected_accepted(edges, p, priors, lps[i], int(depths[i])) for i in range(len(rows))]
    assert [bits(x) for x in out] == [bits(x) for x in want]
    k = int(depths[0])
    assert _kernels.expected_accepted_k_nb(calib.edges, calib.p_accept, calib.priors, conf, n_conf, k, out) == 0
    assert [bits(x) for x in out] == [bits(ref.ref_expected_accepted(edges, p, priors, l, k)) for l in lps]
    assert [bits(x) for x in calib.expected_accepted_batch(conf, n_conf, depths)] == [bits(x) for x in want]
    same_k = calib.expected_accepted_batch(conf, n_conf, 3)
    assert [bits(x) for x in same_k] == [bits(ref.ref_expected_accepted(edges, p, priors, l, 3)) for l in lps]

    pm = calib.p_matrix(conf, n_conf, m_out=m + 2)
    for i in range(len(rows)):
        for j in range(1, m + 3):
            assert pm[i, j - 1] == ref.ref_p_position(edges, p, priors, lps[i], j)

    b = calib.buckets(conf)
    for i in range(len(rows)):
        for j in range(m):
            lp = float(conf[i, j])
            assert b[i, j] == (-1 if math.isnan(lp) else ref.ref_bucket(edges, lp))


def test_kernels_count_bad_rows_without_reading_outside():
    c = cal()
    conf = np.array([[-0.05, -2.0], [-0.05, -2.0], [-0.05, -2.0]], dtype=np.float32)
    out = np.empty(3)
    n_conf = np.array([2, 5, -1], dtype=np.int64)
    assert _kernels.expected_accepted_k_nb(c.edges, c.p_accept, c.priors, conf, n_conf, 3, out) == 2
    # a count past the row reads the row and then priors; a negative count reads nothing
    assert out[0] == out[1] == ref.ref_expected_accepted(EDGES, P, PRIORS, [-0.05, -2.0], 3)
    assert out[2] == ref.ref_expected_accepted(EDGES, P, PRIORS, [], 3)
    depths = np.array([1, -2, 0], dtype=np.int64)
    assert _kernels.expected_accepted_nb(c.edges, c.p_accept, c.priors, conf, n_conf, depths, out) == 3
    assert out.tolist() == [0.95, 0.0, 0.0]


def test_empty_batches():
    c = cal()
    assert c.expected_accepted_batch(np.zeros((0, 4), dtype=np.float32), np.zeros(0, dtype=np.int64), 3).shape == (0,)
    none = c.expected_accepted_batch(np.zeros((2, 0), dtype=np.float32), [0, 0], [2, 0])
    assert none.tolist() == [0.8 + 0.8 * 0.6, 0.0]


def test_batch_wrappers_check_shapes():
    c = cal()
    conf = np.zeros((2, 3), dtype=np.float32)
    with pytest.raises(CalibrationError):
        c.expected_accepted_batch(conf, [1], 2)
    with pytest.raises(CalibrationError):
        c.expected_accepted_batch(conf, [1, 4], 2)
    with pytest.raises(CalibrationError):
        c.expected_accepted_batch(conf, [1, 1], -1)
    with pytest.raises(CalibrationError):
        c.expected_accepted_batch(np.zeros(3, dtype=np.float32), [1], 2)
    with pytest.raises(CalibrationError):
        c.expected_accepted_batch(conf, [1, 1], 2, out=np.empty(3))
    with pytest.raises(CalibrationError):
        c.p_matrix(conf, [1, 1], out=np.empty((3, 3)))
    # lists and other dtypes are converted; the kernel sees the same values
    assert c.expected_accepted_batch(conf.tolist(), [1, 2], np.array([2, 3], dtype=np.int32)).tolist() == \
        c.expected_accepted_batch(conf, np.array([1, 2], dtype=np.int64), np.array([2, 3], dtype=np.int64)).tolist()
    out = np.empty(2)
    assert c.expected_accepted_batch(conf, [0, 3], [1, 2], out=out) is out


# ------------------------------------------ files and validation (docs/formats.md#acceptance-calibration)
TEXT = CALIBRATION_TOML


def test_parse_valid():
    c = AcceptanceCalibration.parse(TEXT)
    assert c.drafter == DrafterKey("abab", 32000, "bf16", True)
    assert c.edges.dtype == np.float32 and c.p_accept.dtype == np.float64 and c.priors.dtype == np.float64
    assert c.p_given_lp(-0.5) == 0.6


BROKEN = {
    "edges_empty": ("edges = [-1.0, -0.1, 0.0]", "edges = []"),
    "length": ("p_accept = [0.2, 0.6, 0.95]", "p_accept = [0.2, 0.6]"),
    "not_ascending": ("edges = [-1.0, -0.1, 0.0]", "edges = [-0.1, -1.0, 0.0]"),
    "equal_edges": ("edges = [-1.0, -0.1, 0.0]", "edges = [-1.0, -1.0, 0.0]"),
    "equal_in_float32": ("edges = [-1.0, -0.1, 0.0]", "edges = [-1.0, -0.99999999, 0.0]"),
    "last_negative": ("edges = [-1.0, -0.1, 0.0]", "edges = [-1.0, -0.1, -1e-30]"),
    "p_above_one": ("p_accept = [0.2, 0.6, 0.95]", "p_accept = [0.2, 0.6, 1.0000000000000002]"),
    "p_negative": ("p_accept = [0.2, 0.6, 0.95]", "p_accept = [-5e-324, 0.6, 0.95]"),
    "p_nan": ("p_accept = [0.2, 0.6, 0.95]", "p_accept = [0.2, nan, 0.95]"),
    "prior_out": ("prior_by_position = [0.8, 0.6, 0.5]", "prior_by_position = [0.8, 2, 0.5]"),
    "priors_empty": ("prior_by_position = [0.8, 0.6, 0.5]", "prior_by_position = []"),
    "nan_edge": ("edges = [-1.0, -0.1, 0.0]", "edges = [-1.0, nan, 0.0]"),
    "vocab_float": ("vocab = 32000", "vocab = 32000.0"),
    "vocab_negative": ("vocab = 32000", "vocab = -1"),
    "context_string": ("context = true", 'context = "true"'),
    "sha_missing": ('weights_sha256 = "abab"\n', ""),
    "bool_probability": ("p_accept = [0.2, 0.6, 0.95]", "p_accept = [0.2, true, 0.95]"),
    "edge_overflow": ("edges = [-1.0, -0.1, 0.0]", "edges = [-1.0, -0.1, 1e400]"),
    "no_acceptance": ("[acceptance]", "[other]"),
}


@pytest.mark.parametrize("rule", sorted(BROKEN))
def test_each_rule_broken_alone_is_refused(rule):
    old, new = BROKEN[rule]
    assert old in TEXT
    with pytest.raises(CalibrationError) as e:
        AcceptanceCalibration.parse(TEXT.replace(old, new), "cal.toml")
    assert str(e.value).startswith("cal.toml: ")


def test_every_problem_is_listed():
    text = TEXT.replace("edges = [-1.0, -0.1, 0.0]", "edges = [-0.1, -1.0, -0.5]").replace("0.95", "1.5")
    with pytest.raises(CalibrationError) as e:
        AcceptanceCalibration.parse(text, "cal.toml")
    msg = str(e.value)
    assert "not strictly ascending" in msg and "last edge" in msg and "p_accept[2] = 1.5" in msg


@SETTINGS
@given(c=calibrations(), rule=st.sampled_from(["none", "swap", "equal", "last", "p", "prior", "len", "empty_p", "nan"]))
def test_hypothesis_calibrations_refused_exactly_when_reference_says(c, rule):
    edges, p, priors = (list(x) for x in c)
    if rule == "swap" and len(edges) > 1:
        edges[0], edges[-1] = edges[-1], edges[0]
    elif rule == "equal" and len(edges) > 1:
        edges[1] = edges[0]
    elif rule == "last":
        edges[-1] = -1e-3 if len(edges) == 1 else edges[-1] - 1e6
    elif rule == "p":
        p[-1] = 1.5
    elif rule == "prior":
        priors[0] = -0.25
    elif rule == "len":
        p.append(0.5)
    elif rule == "empty_p":
        priors = []
    elif rule == "nan":
        p[0] = math.nan
    if ref.ref_calibration_rules(edges, p, priors):
        with pytest.raises(CalibrationError):
            AcceptanceCalibration(DRAFTER, edges, p, priors)
    else:
        calib = AcceptanceCalibration(DRAFTER, edges, p, priors)
        assert AcceptanceCalibration.parse(calib.render()) == calib


def test_integer_edges_round_once_to_float32():
    # 2**60 + 2**36 + 1 rounds up in one step to float32 but, through float64, lands on a tie
    # and rounds down: metrale reads integers straight into f32.
    x = (1 << 60) + (1 << 36) + 1
    c = AcceptanceCalibration.parse(TEXT.replace("edges = [-1.0, -0.1, 0.0]", f"edges = [-1.0, {x}, 1e30]"))
    assert float(c.edges[1]) == float((1 << 60) + (1 << 37))
    assert c.p_given_lp(float((1 << 60) + (1 << 37))) == 0.6


def test_float32_overflowing_edge_is_infinite_not_refused():
    c = AcceptanceCalibration.parse(TEXT.replace("edges = [-1.0, -0.1, 0.0]", "edges = [-1.0, -0.1, 1e39]"))
    assert c.edges[-1] == np.inf


@SETTINGS
@given(c=calibrations(), sha=st.text(st.characters(exclude_categories=("Cs",)), max_size=10),
       quant=st.text(st.characters(exclude_categories=("Cs",)), max_size=6), vocab=st.integers(0, 2**63 - 1),
       context=st.booleans())
def test_render_round_trips(c, sha, quant, vocab, context):
    calib = AcceptanceCalibration(DrafterKey(sha, vocab, quant, context), *c)
    back = AcceptanceCalibration.parse(calib.render())
    assert back == calib
    assert back.edges.tobytes() == calib.edges.tobytes()


def test_render_keeps_meta():
    c = AcceptanceCalibration.parse(TEXT + "\n[meta]\nfitted = 2026-10-04\nsteps = 1200\n")
    back = AcceptanceCalibration.parse(c.render())
    assert back.meta == c.meta


def test_load(tmp_path):
    with pytest.raises(CalibrationError, match="cannot read"):
        AcceptanceCalibration.load(tmp_path / "none.toml")
    (tmp_path / "c.toml").write_text(TEXT)
    assert AcceptanceCalibration.load(tmp_path / "c.toml") == AcceptanceCalibration.parse(TEXT)


# ---------------------------------------------------------------- drafter key, priors
def test_drafter_key_equality():
    a = DrafterKey("x", 1, "bf16", True)
    assert a == DrafterKey("x", 1, "bf16", True) and hash(a) == hash(DrafterKey("x", 1, "bf16", True))
    for other in (DrafterKey("y", 1, "bf16", True), DrafterKey("x", 2, "bf16", True),
                  DrafterKey("x", 1, "fp8", True), DrafterKey("x", 1, "bf16", False)):
        assert a != other
    with pytest.raises(AttributeError):
        a.vocab = 3


@pytest.mark.parametrize("marginals", [[0.8, 0.6, 0.3], [0.5], [0.5, 0.0, 0.3], [0.0, 0.4], [0.3, 0.6], [1.0, 1.0, 0.99]])
def test_conditional_priors_match_reference(marginals):
    assert conditional_priors(marginals) == ref.ref_conditional_priors(marginals)
    assert conditional_priors(marginals, "conditional") == marginals


def test_conditional_priors_values_and_refusals():
    assert conditional_priors([0.8, 0.4]) == [0.8, 0.5]
    assert conditional_priors([0.3, 0.6]) == [0.3, 1.0]  # clamped: a noisy rise is not > 1
    assert conditional_priors([0.5, 0.0, 0.3]) == [0.5, 0.0, 0.0]
    for bad in ([], [1.2], [math.nan], [-0.1]):
        with pytest.raises(CalibrationError):
            conditional_priors(bad)
    with pytest.raises(CalibrationError):
        conditional_priors([0.5], "joint")


@SETTINGS
@given(st.lists(st.floats(0, 1), min_size=1, max_size=8))
def test_conditional_priors_hypothesis(marginals):
    got = conditional_priors(marginals)
    assert got == ref.ref_conditional_priors(marginals)
    assert all(0.0 <= c <= 1.0 for c in got)
    AcceptanceCalibration(DRAFTER, [0.0], [0.5], got)  # usable as priors


@settings(max_examples=60, deadline=None)
@given(st.lists(st.floats(-50.0, 2.0, width=32), min_size=1, max_size=12, unique=True), st.data())
def test_coarse_bucket_index_agrees_with_the_plain_bucket(edges, data):
    # The planner's fast lookup (a float32 index plus a short walk) must be bucket_nb exactly,
    # on the edges themselves, their float32 neighbours, infinities and random values.
    from specsim.calibration._kernels import bucket_fast_nb
    from specsim.calibration.calibration import bucket_cells

    e = np.array(sorted(edges), dtype=np.float32)
    if e[-1] < 0:
        e[-1] = 0.0
    e = np.unique(e)
    cells = bucket_cells(e)
    probes = list(e) + list(np.nextafter(e, np.float32(np.inf))) + list(np.nextafter(e, np.float32(-np.inf)))
    probes += [np.float32(v) for v in (-np.inf, np.inf, 0.0, -0.0, 1e-45, -1e-45, 3e38, -3e38)]
    probes += [np.float32(data.draw(st.floats(-100.0, 10.0, width=32))) for _ in range(20)]
    for lp in probes:
        lp = np.float32(lp)
        assert bucket_fast_nb(e, cells, lp, lp.view(np.int32)) == _kernels.bucket_nb(e, lp) == ref.ref_bucket(e, lp)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.floats(-50.0, 2.0, width=32), min_size=1, max_size=12, unique=True), st.data())
def test_cell_probabilities_answer_every_value_of_a_cell_as_its_bucket(edges, data):
    # The planner's one-load lookup: where a coarse cell has a probability (>= 0), every float32
    # value in it (its two ends, the edges' float32 neighbours, random values) is in the bucket
    # with that probability; a cell an edge cuts, or one holding NaN, has -1.
    from specsim.calibration.calibration import cell_probabilities

    e = np.unique(np.array(sorted(edges), dtype=np.float32))
    p = np.array(data.draw(st.lists(st.floats(0.0, 1.0), min_size=len(e), max_size=len(e))))
    table = cell_probabilities(e, p)
    assert table.shape == (_kernels.BUCKET_CELLS,)

    def cell(v):
        b = int(np.float32(v).view(np.int32))
        return ((b ^ ((b >> 31) & 0x7FFFFFFF)) >> 20) + _kernels.BUCKET_CELLS // 2

    probes = list(e) + list(np.nextafter(e, np.float32(np.inf))) + list(np.nextafter(e, np.float32(-np.inf)))
    probes += [np.float32(v) for v in (-np.inf, np.inf, 0.0, -0.0, 1e-45, -1e-45, 3e38, -3e38)]
    probes += [np.float32(data.draw(st.floats(-100.0, 10.0, width=32))) for _ in range(20)]
    for c in {cell(v) for v in probes}:  # every probed cell at both ends
        for low in (True, False):
            key = np.int32(((c - _kernels.BUCKET_CELLS // 2) << 20) | (0 if low else 0xFFFFF))
            probes.append((key ^ ((key >> 31) & 0x7FFFFFFF)).view(np.float32))
    for lp in probes:
        lp = np.float32(lp)
        if table[cell(lp)] >= 0:
            assert not np.isnan(lp) and table[cell(lp)] == ref.ref_p_given_lp(e, p, lp)
        elif not np.isnan(lp):  # -1 only where the cell spans two buckets or holds NaN
            c = cell(lp)
            ends = [np.int32(((c - _kernels.BUCKET_CELLS // 2) << 20) | r) for r in (0, 0xFFFFF)]
            values = [(k ^ ((k >> 31) & 0x7FFFFFFF)).view(np.float32) for k in ends]
            assert np.isnan(values).any() or ref.ref_bucket(e, values[0]) != ref.ref_bucket(e, values[1])
    nan = np.float32(np.nan)
    assert table[cell(nan)] == table[cell(-nan)] == -1.0
