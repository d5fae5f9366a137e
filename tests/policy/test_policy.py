"""Draft-depth policies with no file I/O (specsim/policy): the policy strings users type, and
width -> depth schedules in their canonical form."""

from __future__ import annotations

import pytest
from hypothesis import given

from specsim.errors import PolicyError, ScheduleError
from specsim.policy import Policy, canonical, depth_at, parse_policy, ranges_from_depths
from tests.fixtures import schedules


# -- policies -------------------------------------------------------------------------------------

def test_parse_policies():
    assert parse_policy("fixed:3") == Policy("fixed", depth=3)
    assert parse_policy(" Propose ") == Policy("propose")
    s = parse_policy("schedule:17-64=2,1-16=3,65-=0")
    assert s.ranges == ((1, 16, 3), (17, 64, 2), (65, None, 0))
    assert str(s) == "schedule:1-16=3,17-64=2,65-=0" and parse_policy(str(s)) == s
    assert [s.depth_for_width(n) for n in (1, 16, 17, 64, 65, 10_000)] == [3, 3, 2, 2, 0, 0]
    gap = parse_policy("schedule:2-4=3,8=5")
    assert [gap.depth_for_width(n) for n in (1, 2, 4, 5, 8, 9)] == [0, 3, 3, 0, 5, 0]  # uncovered -> 0
    assert parse_policy("sequence").needs_planner and not parse_policy("fixed:0").needs_planner
    with pytest.raises(PolicyError, match="planner"):
        parse_policy("propose").depth_for_width(3)


@pytest.mark.parametrize("text, why", [
    ("", "unknown policy"), ("fixed", "needs an argument"), ("fixed:", "needs an argument"),
    ("fixed:-1", "not a non-negative integer"), ("fixed:two", "not a non-negative integer"),
    ("propose:0.2", "takes no argument"), ("schedule:1-16", "WIDTHS=DEPTH"), ("schedule:0-4=1", "start at 1"),
    ("schedule:5-4=1", "ends before"), ("schedule:1-8=2,8-=1", "overlap"), ("schedule:1-=2,100=1", "overlap"),
    ("schedule:,", "no WIDTHS=DEPTH"), ("schedule:1-4=x", "depth"), ("beam:3", "unknown policy"),
])
def test_bad_policies(text, why):
    with pytest.raises(PolicyError, match=why):
        parse_policy(text)


# -- canonical form -----------------------------------------------------------------------------------

def test_canonical_fills_gaps_merges_and_opens_the_last_range():
    assert canonical([(5, 8, 2), (1, 2, 3)]) == ((1, 2, 3), (3, 4, 0), (5, 8, 2), (9, None, 0))
    assert canonical([(1, 4, 2), (5, None, 2)]) == ((1, None, 2),)
    assert canonical([(1, 1, 0)]) == ((1, None, 0),)


@given(schedules())
def test_canonical_keeps_every_width_depth(ranges):
    shuffled = list(reversed(ranges))
    c = canonical(shuffled)
    assert all(depth_at(c, w) == depth_at(ranges, w) for w in range(1, 320))
    assert c[0][0] == 1 and c[-1][1] is None
    assert all(a[2] != b[2] for a, b in zip(c, c[1:]))


def test_check_refuses_overlap_and_bad_values():
    for bad in ([(1, 4, 2), (4, 8, 1)], [(0, 4, 1)], [(3, 2, 1)], [(1, None, -1)], [(1, None, 1), (5, 6, 1)],
                [(1, 2.5, 1)], []):
        with pytest.raises(ScheduleError):
            canonical(bad)


def test_ranges_from_depths_collapse():
    assert ranges_from_depths([4, 4, 3, 3, 3, 0]) == ((1, 2, 4), (3, 5, 3), (6, None, 0))
    assert ranges_from_depths([2]) == ((1, None, 2),)
