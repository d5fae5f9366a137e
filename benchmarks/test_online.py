"""Online calibration speed (targets: update <= 5 us for 256 sequences x 8 drafts, refit
<= 1 ms), each against the plain reference in the same run.

Run: ``pytest benchmarks/test_online.py --benchmark-only``. The reference folds a step draft by
draft in Python (``tests.reference.ref_online_step``) and refits with ``fit_calibration`` on
Python counts (``tests.reference.ref_fit``); the ratios are in each benchmark's extra info.
"""

from __future__ import annotations

import numpy as np
import pytest

from benchmarks.conftest import record_ratio, time_per_call
from specsim import AcceptanceCalibration, DrafterKey, OnlineCalibration, fit_calibration
from tests.reference import ref_fit, ref_online_step

EDGES = [-4.0, -2.0, -1.0, -0.5, -0.25, -0.1, -0.05, -0.02, -0.005, 0.0]
CAL = AcceptanceCalibration(DrafterKey("bench", 32000, "bf16", True), EDGES, np.linspace(0.08, 0.95, len(EDGES)),
                            [0.8, 0.72, 0.66, 0.62, 0.6, 0.58, 0.56, 0.55])
N, K = 256, 8


def _step(seed=0):
    """One scheduler step: 256 sequences with 8 drafts each, acceptance falling with confidence."""
    rng = np.random.default_rng(seed)
    conf = (-rng.exponential(0.4, (N, K))).astype(np.float32)
    ok = rng.random((N, K)) < np.exp(conf.astype(np.float64) * 0.8)
    run = np.cumprod(ok, axis=1).sum(axis=1).astype(np.int64)
    return conf, np.full(N, K, dtype=np.int64), run


STEP = _step()


@pytest.mark.parametrize("mode", [{}, {"window": 1000}, {"half_life": 500.0}, {"drift": False}],
                         ids=["every-step+drift", "window+drift", "half-life+drift", "no-drift"])
def test_update_256x8(benchmark, mode):
    online = OnlineCalibration(CAL, max_depth=K, **mode)
    online.update(*STEP)  # compile before timing
    benchmark.group = "update (256 x 8)"
    benchmark(online.update, *STEP)
    edges = [float(e) for e in CAL.edges]
    record_ratio(benchmark, "reference", time_per_call(lambda: ref_online_step(edges, *STEP), min_time=0.5))
    if benchmark.stats is not None:
        benchmark.extra_info["us_per_update"] = benchmark.stats.stats.mean * 1e6
        benchmark.extra_info["reached_drafts_per_step"] = int(np.minimum(STEP[2] + 1, K).sum())


def test_refit(benchmark):
    online = OnlineCalibration(CAL, max_depth=K)
    for seed in range(20):
        online.update(*_step(seed))
    expected = online.calibration()
    benchmark.group = "refit"
    got = benchmark(online.calibration)
    assert got == expected
    c = online.counts()

    def reference():
        return ref_fit(c.edges, list(c.accepted), list(c.rejected), dict(c.steps))

    p_accept, priors = reference()
    assert list(expected.p_accept) == p_accept and list(expected.priors) == priors
    assert fit_calibration(CAL.drafter, c.edges, c.accepted, c.rejected, c.steps) == expected
    record_ratio(benchmark, "reference", time_per_call(reference))
    if benchmark.stats is not None:
        benchmark.extra_info["ms_per_refit"] = benchmark.stats.stats.mean * 1e3
