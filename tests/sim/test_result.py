"""The one percentile function and the one tokens/s and J/token rule every summary, fleet row,
capacity probe and tuning score uses."""

import math

import numpy as np
import pytest

from specsim.sim.figures import PERCENTILES, percentile, percentiles, run_rates


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


def test_run_rates_divide_by_the_makespan_and_the_tokens_and_are_none_where_those_are_zero():
    assert run_rates(100, 4.0, 50.0) == (25.0, 0.5)
    assert run_rates(0, 0.0, 0.0) == (None, None)
    assert run_rates(10, 0.0, 3.0) == (None, 0.3)
    assert run_rates(0, 2.0, 3.0) == (0.0, None)


def test_a_summary_and_a_fleet_row_take_their_rates_from_run_rates():
    from specsim import Fleet, simulate, simulate_fleet
    from specsim.demo_inputs import demo_calibration, demo_table
    from specsim.traces import synthetic_trace

    table, cal = demo_table(), demo_calibration()
    reqs = synthetic_trace(40, 20.0, seed=3).requests
    s = simulate(reqs, table, cal, "fixed:2").summary()
    assert (s["tokens_per_s"], s["j_per_token"]) == run_rates(s["output_tokens"], s["makespan_s"], s["energy_j"])
    fleet = simulate_fleet(reqs, Fleet.uniform(table, cal, 1), "fixed:2")
    row = fleet.replica_rows()[0]
    assert (row["tokens_per_s"], row["j_per_token"]) == run_rates(row["output_tokens"], fleet.makespan_s,
                                                                  row["energy_j"])
