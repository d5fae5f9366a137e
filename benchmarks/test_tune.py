"""Speed of ``specsim tune`` (docs/schedules.md#tuning), warm JIT cache.

Run: ``pytest benchmarks/test_tune.py --benchmark-only`` (from the repository root, with the
shared data beside it). Figures recorded in ``extra_info``:

- tuning the Azure 2023 conversation hour (19,366 requests) on one modelled table with depths
  0-5, two seeds, a quarter held out, threads on the machine's cores (target <= 120 s on two
  cores); simulations run and simulations per second. At the trace's own rate plain decoding
  wins at once; at twice the rate the search runs its rounds. Each with ``noise_windows=4`` (what
  the default ``"auto"`` cuts this trace into: moves checked over the (seed, window) pairs; the
  within-noise moves are recorded) and with ``None`` (no time windows); figures in
  docs/schedules.md, "Speed";
- the same wall time as a multiple of one simulation of the whole hour with ``fixed:3``, timed
  in the same run, and the simulations per second against such simulations run back to back
  (ratios that hold on a noisy machine).
"""

from __future__ import annotations

import os
import time

import pytest

from specsim.sim.engine import simulate
from specsim.sim.options import ServerOptions
from tests.conftest import shared_data  # noqa: F401  (the fixture)

CONV = ("traces", "azure2023", "AzureLLMInferenceTrace_conv.csv")


@pytest.fixture
def conv(shared_data):  # noqa: F811
    from specsim.demo_inputs import DEMO_CONTEXT_TOKENS, DEMO_DRAFTER, DEMO_GPU, DEMO_MODEL, DEMO_WIDTHS
    from specsim.demo_inputs import demo_calibration
    from specsim.costmodel.roofline import model_table
    from specsim.demo import demo_server
    from specsim.traces import read_trace

    table = model_table(DEMO_GPU, DEMO_MODEL, DEMO_DRAFTER, context_tokens=DEMO_CONTEXT_TOKENS, widths=DEMO_WIDTHS,
                        max_k=5)
    return read_trace(shared_data.joinpath(*CONV)).requests, table, demo_calibration(), ServerOptions(**demo_server())


@pytest.mark.parametrize("noise_windows", [None, 4])
@pytest.mark.parametrize("rate_scale", [1.0, 2.0])
def test_tune_azure_conv_hour(benchmark, conv, rate_scale, noise_windows):
    from tests.fixtures import tune_on

    reqs, table, cal, opts = conv
    if rate_scale != 1.0:
        # The same division the trace reader applies for --rate-scale.
        reqs = reqs.copy()
        reqs["arrival_s"] = reqs["arrival_s"] / rate_scale
    simulate(reqs[:50], table, cal, "fixed:3", options=opts)  # compile / load the cache
    simulate(reqs[:50], table, cal, "propose", options=opts)
    t0 = time.perf_counter()
    simulate(reqs, table, cal, "fixed:3", options=opts)
    one_s = time.perf_counter() - t0

    def run():
        return tune_on(reqs, table, cal, options=opts, seeds=2, executor="threads", noise_windows=noise_windows)

    res = benchmark.pedantic(run, rounds=1, iterations=1)
    assert res.evaluations > 0
    benchmark.extra_info["cores"] = os.cpu_count()
    benchmark.extra_info["evaluations"] = res.evaluations
    benchmark.extra_info["evaluations_per_s"] = res.evaluations_per_s
    benchmark.extra_info["one_simulation_s"] = one_s
    benchmark.extra_info["tune_over_one_simulation"] = res.seconds / one_s
    # Simulations per second against whole-hour simulations run back to back in one thread (the
    # search's gain from threads and from the shorter training window); watched for regressions.
    benchmark.extra_info["speedup_vs_back_to_back_simulations"] = res.evaluations * one_s / res.seconds
    benchmark.extra_info["policy"] = res.policy
    benchmark.extra_info["within_noise_moves"] = res.within_noise_moves
    benchmark.extra_info["verdict"] = res.verdict()
    benchmark.extra_info["target_s"] = 120.0
