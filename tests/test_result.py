"""The one percentile function every summary, fleet row, capacity probe and tuning score uses."""

import math

import numpy as np
import pytest

from specsim.sim.result import PERCENTILES, percentile, percentiles


def test_percentiles_leave_nan_out_and_interpolate_linearly():
    v = [4.0, math.nan, 1.0, 2.0, 3.0]
    got = percentiles(v)
    assert set(got) == {f"p{q}" for q in PERCENTILES} | {"mean"}
    assert got["p50"] == 2.5 and got["mean"] == 2.5
    assert got["p99"] == pytest.approx(3.97)
    assert percentile(v, 99) == got["p99"]


@pytest.mark.parametrize("values", [[], [math.nan], [math.nan, math.nan]])
def test_no_value_gives_none_not_a_number(values):
    assert percentiles(values) == {"p50": None, "p90": None, "p99": None, "mean": None}
    assert percentile(values, 99) is None


def test_one_value_is_every_percentile():
    assert percentiles([0.25]) == {"p50": 0.25, "p90": 0.25, "p99": 0.25, "mean": 0.25}


def test_a_single_percentile_is_the_same_number_as_in_the_summary():
    rng = np.random.default_rng(3)
    for n in (2, 3, 17, 1000):
        v = rng.lognormal(size=n)
        assert percentile(v, 99) == percentiles(v)["p99"] == float(np.percentile(v, 99))
