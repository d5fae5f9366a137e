"""The engine's occupancy draw (``bucket_of_nb``) against its plain reference: a count of the
cumulative weights a draw reaches, equal to the reference's scan on every nondecreasing row."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from specsim._jit import jit
from specsim.sim._draw_kernels import bucket_of_nb
from tests.reference import ref_occupancy_bucket


@jit
def _bucket_nb(occ_cdf, u, position):
    """``bucket_of_nb`` from Python (it has no CPython wrapper of its own)."""
    return bucket_of_nb(occ_cdf, u, position)


def cdf(weights):
    """Rows of cumulative weights, each rising to exactly 1, as the engine builds them
    (``specsim.sim.outcomes.occupancy_cdf``)."""
    c = np.cumsum(np.asarray(weights, dtype=np.float64), axis=1)
    return np.ascontiguousarray(c / c[:, -1:])


def same_as_reference(occ, u, position):
    got = _bucket_nb(occ, float(u), np.int64(position))
    assert got == ref_occupancy_bucket(occ.tolist(), float(u), position), (occ, u, position)
    return got


@pytest.mark.kernels
def test_edge_rows_and_draws():
    one = cdf([[1.0]])  # one bucket: every draw is in it
    for u in (0.0, 0.5, np.nextafter(1.0, 0.0)):
        assert same_as_reference(one, u, 1) == 0
    gaps = cdf([[0.0, 1.0, 0.0, 0.0, 3.0, 0.0, 0.0]])  # empty buckets, repeated and trailing entries
    row = gaps[0]
    draws = (0.0, *row[:-1], *np.nextafter(row[:-1], 0.0), np.nextafter(1.0, 0.0))
    for u in (x for x in draws if x < 1.0):  # a draw is below 1
        b = same_as_reference(gaps, u, 1)
        assert row[b] > u and (b == 0 or row[b - 1] <= u)  # the first whose weight passes u
    assert same_as_reference(gaps, 0.0, 1) == 1  # the empty first bucket is never drawn
    wide = cdf(np.random.default_rng(3).random((1, 64)))
    deep = cdf(np.random.default_rng(4).random((32, 5)))
    for occ in (wide, deep):
        for u in np.random.default_rng(5).random(200):
            for position in (1, 2, occ.shape[0], occ.shape[0] + 3):  # past the last row: the last row
                same_as_reference(occ, u, position)


@pytest.mark.kernels
@given(weights=st.lists(st.lists(st.floats(0.0, 1e6), min_size=1, max_size=12).filter(lambda w: sum(w) > 0),
                        min_size=1, max_size=4).filter(lambda rows: len({len(r) for r in rows}) == 1),
       u=st.floats(0.0, 1.0, exclude_max=True), position=st.integers(1, 6))
@settings(max_examples=300, deadline=None)
def test_random_rows_and_draws(weights, u, position):
    same_as_reference(cdf(weights), u, position)
