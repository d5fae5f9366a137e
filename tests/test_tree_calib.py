"""Draft trees in the calibration (docs/calibration.md#draft-trees): the [tree] table, its counts,
and where a[d][r] comes from."""

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from specsim import AcceptanceCalibration, CalibrationError, DrafterKey
from specsim.calibration._types import TreeCounts

SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
DRAFTER = DrafterKey("ab" * 32, 32000, "bf16", True)
BASE = AcceptanceCalibration(DRAFTER, [-1.0, 0.0], [0.3, 0.9], [0.8, 0.6])
TREE = """
[tree]
rank_acceptance = [[0.62, 0.12, 0.05], [0.55, 0.11, 0.04]]
reached = [5000, 3100]
matched = [[3100, 600, 250], [1705, 341, 124]]
source = "drafts log drafts.csv"
"""


def with_tree(body=TREE):
    return BASE.render() + body


def refusal(text):
    with pytest.raises(CalibrationError) as e:
        AcceptanceCalibration.parse(text, "cal.toml")
    return str(e.value)


# -- the [tree] table -------------------------------------------------------------------------
def test_tree_table_reads_and_renders_back():
    c = AcceptanceCalibration.parse(with_tree())
    assert c.rank_acceptance.tolist() == [[0.62, 0.12, 0.05], [0.55, 0.11, 0.04]]
    assert c.tree_counts == TreeCounts((5000, 3100), ((3100, 600, 250), (1705, 341, 124)), "drafts log drafts.csv")
    assert AcceptanceCalibration.parse(c.render()) == c
    assert "[tree]" in c.render()


def test_tree_without_counts_round_trips():
    c = AcceptanceCalibration.parse(with_tree("[tree]\nrank_acceptance = [[0.7, 0.1]]\n"))
    assert c.tree_counts is None
    assert AcceptanceCalibration.parse(c.render()) == c


def test_seed_format_renders_without_tree():
    assert "[tree]" not in BASE.render()
    assert AcceptanceCalibration.parse(BASE.render()).rank_acceptance is None


def test_equality_sees_rank_acceptance_and_counts():
    c = AcceptanceCalibration.parse(with_tree())
    assert c != BASE
    assert c != c.with_rank_acceptance(c.rank_acceptance)  # same table, counts dropped
    assert c.with_rank_acceptance(c.rank_acceptance, c.tree_counts) == c
    assert c.with_spread(None) == c  # with_spread carries the tree and its counts
    assert c.with_spread(None).tree_counts == c.tree_counts


@pytest.mark.parametrize("body, expected", [
    ("rank_acceptance = [[0.62, 1.5]]", "[tree] rank_acceptance depth 1 rank 2 = 1.5 is not a probability"),
    ("rank_acceptance = [[0.62, -0.1]]", "depth 1 rank 2 = -0.1 is not a probability"),
    ("rank_acceptance = [[0.62, nan]]", "depth 1 rank 2 = nan is not a probability"),
    ("rank_acceptance = [[0.62, 0.5]]", "depth 1 sums to 1.12"),
    ("rank_acceptance = [[0.62, 0.1], [0.5]]", "rank_acceptance depth 2 has 1 ranks, depth 1 has 2"),
    ("rank_acceptance = [[0.62, true]]", "depth 1 rank 2 = true is not a number"),
    ("rank_acceptance = [0.62, 0.1]", "rank_acceptance depth 1 is a float, not an array"),
    ("rank_acceptance = []", "rank_acceptance must be a non-empty array"),
    ("rank_acceptance = [[" + ", ".join(["0.01"] * 17) + "]]", "17 ranks (columns): give 1..16"),
    ("rank_acceptance = [" + ", ".join(["[0.5]"] * 65) + "]", "65 depths (rows): give 1..64"),
    ("reached = [10]", "no `rank_acceptance`"),
    ("rank_acceptance = [[0.5]]\nreached = [10]", "has `reached` without `matched`"),
    ("rank_acceptance = [[0.5]]\nreached = [10]\nmatched = [[6]]", "depth 1 rank 1 = 0.5 disagrees with its counts: "
     "matched 6 / reached 10 = 0.6"),
    ("rank_acceptance = [[0.5]]\nreached = [10]\nmatched = [[-5]]", "matched depth 1 rank 1 = -5 is not a count"),
    ("rank_acceptance = [[0.5]]\nreached = [-10]\nmatched = [[5]]", "reached depth 1 = -10 is not a count"),
    ("rank_acceptance = [[0.5]]\nreached = [10.0]\nmatched = [[5]]", "reached depth 1 = 10.0 is not a count"),
    ("rank_acceptance = [[0.5], [0.5]]\nreached = [10]\nmatched = [[5], [5]]", "reached has 1 entries for 2 depths"),
    ("rank_acceptance = [[0.5, 0.1]]\nreached = [10]\nmatched = [[5]]", "matched depth 1 has 1 ranks, "
     "rank_acceptance has 2"),
    ("rank_acceptance = [[0.0]]\nreached = [0]\nmatched = [[0]]", "reached depth 1 = 0: a depth no path reached"),
    ("rank_acceptance = [[0.5, 0.6]]\nreached = [10]\nmatched = [[5, 6]]", "sums to 1.1"),
    ("rank_acceptance = [[0.5]]\nsource = \"x\"", "source names where the counts came from"),
    ("rank_acceptance = [[0.5]]\nreached = [10]\nmatched = [[5]]\nsource = 3", "[tree] source = 3 is not a string"),
])
def test_bad_tree_tables_are_refused_by_field_row_and_cell(body, expected):
    msg = refusal(with_tree("[tree]\n" + body + "\n"))
    assert msg.startswith("cal.toml: the acceptance calibration cannot be read")
    assert expected in msg


def test_tree_that_is_not_a_table_is_refused():
    assert "`tree` is a integer, not a table" in refusal(BASE.render().replace("[drafter]", "tree = 3\n[drafter]"))


def test_tree_counts_in_the_api_are_checked():
    a = [[0.5, 0.25]]
    with pytest.raises(CalibrationError, match="need the rank acceptance"):
        AcceptanceCalibration(DRAFTER, [0.0], [0.5], [0.5], tree_counts=TreeCounts((4,), ((2, 1),)))
    with pytest.raises(CalibrationError, match="must be a TreeCounts"):
        BASE.with_rank_acceptance(a, {"reached": (4,)})
    with pytest.raises(CalibrationError, match="disagrees with its counts"):
        BASE.with_rank_acceptance(a, TreeCounts((4,), ((2, 2),)))
    with pytest.raises(CalibrationError, match="not a whole number"):
        BASE.with_rank_acceptance(a, TreeCounts((4.0,), ((2, 1),)))
    ok = BASE.with_rank_acceptance(a, TreeCounts(np.array([4]), [np.array([2, 1])], "s"))
    assert ok.tree_counts == TreeCounts((4,), ((2, 1),), "s") and type(ok.tree_counts.reached[0]) is int


@st.composite
def trees(draw):
    depths, ranks = draw(st.integers(1, 6)), draw(st.integers(1, 5))
    reached = [draw(st.integers(1, 10**6)) for _ in range(depths)]
    matched = []
    for n in reached:
        row, left = [], n
        for _ in range(ranks):
            m = draw(st.integers(0, left))
            row.append(m)
            left -= m
        matched.append(row)
    a = [[m / n for m in row] for n, row in zip(reached, matched)]
    counts = TreeCounts(tuple(reached), tuple(map(tuple, matched)), draw(st.text(max_size=8).filter(
        lambda s: not any(0xD800 <= ord(c) <= 0xDFFF for c in s))))
    return a, (counts if draw(st.booleans()) else None)


@SETTINGS
@given(t=trees())
def test_tree_render_round_trips(t):
    a, counts = t
    c = BASE.with_rank_acceptance(a, counts)
    back = AcceptanceCalibration.parse(c.render())
    assert back == c
    assert back.rank_acceptance.tobytes() == c.rank_acceptance.tobytes()
    assert math.isclose(float(back.rank_acceptance.sum()), float(np.sum(a)))
