"""Speed of fleets and capacity planning, warm JIT cache.

Run: ``pytest benchmarks/test_capacity.py --benchmark-only`` (from the repository root, with the
shared data beside it). Figures recorded in ``extra_info``:

- a capacity search for the Azure 2023 conversation hour at 10x its rate (19,366 requests in six
  minutes) on a modelled H200 serving Llama-3.1-8B with an EAGLE-3 drafter, across four policies
  (plain decoding, ``fixed:2``, ``propose``, ``sequence``), serially, on two threads and on two
  Dask workers (target <= 60 s on a 2-core machine), with the answers, the number of probes and
  the CPU seconds of the process;
- fleet cost against requests (the first 2,500 to 19,366 requests on 8 replicas) and against
  replicas (1 to 64 on the same 5,000 requests), as seconds per request and per unit of work
  (sequence-steps plus steps): both should stay flat;
- the fleet kernel against the plain reference fleet on the same small trace (a ratio that holds
  on a noisy machine), and round robin over R replicas against R single-server runs of the split.
"""

from __future__ import annotations

import time

import pytest

from benchmarks.conftest import record_ratio
from specsim.sim import ServerOptions, simulate
from specsim.sim.fleet import Fleet, simulate_fleet
from specsim.sim.slo import SLO
from specsim._executor import Executor, ExecutorChoice
from tests.conftest import shared_data  # noqa: F401  (the fixture)
from tests.fixtures import capacity_on as capacity

CONV = ("traces", "azure2023", "AzureLLMInferenceTrace_conv.csv")
POLICIES = ["fixed:2", "propose", "sequence"]  # and plain decoding, always sized
SLO_KW = dict(slo=SLO(ttft_s=2.0, tpot_s=0.05, attainment=0.99))


@pytest.fixture(scope="module")
def h200():
    from specsim.costmodel import model_table
    from specsim.demo_inputs import demo_calibration

    return model_table("h200", "llama-3.1-8b", "eagle3-1l", max_k=4), demo_calibration()


@pytest.fixture
def conv10(shared_data, h200):  # noqa: F811
    from specsim.traces import read_trace

    reqs = read_trace(shared_data.joinpath(*CONV), rate_scale=10.0).requests
    simulate_fleet(reqs[:200], Fleet.uniform(*h200, 2), "sequence")  # compile / load the cache
    return reqs


def _record_answers(benchmark, res, seconds):
    benchmark.extra_info["wall_s"] = round(seconds, 2)
    benchmark.extra_info["target_s"] = 60
    benchmark.extra_info["probes"] = sum(len(p.probes) for p in res.policies)
    for p in res.policies:
        benchmark.extra_info[f"replicas[{p.label}]"] = p.replicas
        benchmark.extra_info[f"gpu_saving[{p.label}]"] = round(p.gpu_saving, 3)


def test_capacity_search_conv_10x_serial(benchmark, conv10, h200):
    table, cal = h200
    start, cpu = time.perf_counter(), time.process_time()
    res = benchmark.pedantic(capacity, args=(conv10, table, cal, POLICIES), kwargs=SLO_KW, rounds=1, iterations=1)
    _record_answers(benchmark, res, time.perf_counter() - start)
    # CPU seconds of the one process: what a 2-core machine divides between two workers.
    benchmark.extra_info["cpu_s"] = round(time.process_time() - cpu, 1)
    assert all(p.attainment >= 0.99 for p in res.policies)


def test_capacity_intervals_against_one_seed_conv_10x(benchmark, conv10, h200):
    """The interval search (three draft-outcome seeds per probe, the check below the bracket, the
    idle-replica check) against the one-seed search, in the same run on two threads: the ratio of
    wall times (target <= 3)."""
    table, cal = h200
    start = time.perf_counter()
    one = capacity(conv10, table, cal, POLICIES, executor=ExecutorChoice("threads", 2), seeds=1, **SLO_KW)
    one_s = time.perf_counter() - start
    start = time.perf_counter()
    res = benchmark.pedantic(capacity, args=(conv10, table, cal, POLICIES),
                             kwargs=dict(SLO_KW, executor=ExecutorChoice("threads", 2)), rounds=1, iterations=1)
    three_s = time.perf_counter() - start
    _record_answers(benchmark, res, three_s)
    benchmark.extra_info["one_seed_s"] = round(one_s, 2)
    benchmark.extra_info["one_seed_probes"] = sum(len(p.probes) for p in one.policies)
    benchmark.extra_info["ratio_vs_one_seed"] = round(three_s / one_s, 2)
    benchmark.extra_info["target_ratio"] = 3.0
    for a, b in zip(one.policies, res.policies):
        benchmark.extra_info[f"one_seed_replicas[{a.label}]"] = a.replicas
    print(f"\ncapacity, 4 policies, Azure conv 10x: one seed {one_s:.1f} s "
          f"({benchmark.extra_info['one_seed_probes']} probes), three seeds with intervals {three_s:.1f} s "
          f"({benchmark.extra_info['probes']} probes): {three_s / one_s:.2f}x; answers "
          + ", ".join(f"{a.label} {a.replicas} -> {b.replicas}" for a, b in zip(one.policies, res.policies)))


def test_capacity_search_conv_10x_two_threads(benchmark, conv10, h200):
    table, cal = h200
    start, cpu = time.perf_counter(), time.process_time()
    res = benchmark.pedantic(capacity, args=(conv10, table, cal, POLICIES),
                             kwargs=dict(SLO_KW, executor=ExecutorChoice("threads", 2)), rounds=1, iterations=1)
    _record_answers(benchmark, res, time.perf_counter() - start)
    benchmark.extra_info["cpu_s"] = round(time.process_time() - cpu, 1)


def test_capacity_search_conv_10x_two_dask_workers(benchmark, conv10, h200):
    pytest.importorskip("dask.distributed")
    table, cal = h200
    start = time.perf_counter()
    with Executor("dask", 2) as ex:
        res = benchmark.pedantic(capacity, args=(conv10, table, cal, POLICIES), kwargs=dict(SLO_KW, executor=ex),
                                 rounds=1, iterations=1)
    _record_answers(benchmark, res, time.perf_counter() - start)


def _work(res):
    """Units of work a fleet run did: sequence-steps (each decoding sequence in each step) plus
    steps (each step's fixed part)."""
    c = res.fleet.counters
    return c["sequence_steps"] + c["decode_steps"] + c["prefill_steps"] - c["mixed_steps"]


@pytest.mark.parametrize("requests", [2500, 5000, 10000, 19366])
def test_fleet_cost_against_requests(benchmark, conv10, h200, requests):
    """The first N requests of the 10x trace on 8 replicas: seconds per request and per unit of
    work should not grow with N."""
    fleet = Fleet.uniform(*h200, 8)
    res = benchmark.pedantic(simulate_fleet, args=(conv10[:requests], fleet, "propose"),
                             kwargs=dict(router="least_outstanding"), rounds=2, iterations=1)
    if benchmark.stats is not None:
        benchmark.extra_info["us_per_request"] = round(benchmark.stats.stats.mean / requests * 1e6, 2)
        benchmark.extra_info["us_per_work"] = round(benchmark.stats.stats.mean / _work(res) * 1e6, 3)


@pytest.mark.parametrize("replicas", [1, 4, 16, 64])
def test_fleet_cost_against_replicas(benchmark, conv10, h200, replicas):
    """The first 5,000 requests of the 10x trace on 1 to 64 replicas: more replicas run more,
    narrower steps; the seconds per unit of work should stay flat (the next replica to step
    comes from a tournament tree, O(log R); routing a request is O(R))."""
    fleet = Fleet.uniform(*h200, replicas)
    res = benchmark.pedantic(simulate_fleet, args=(conv10[:5000], fleet, "propose"),
                             kwargs=dict(router="least_outstanding"), rounds=2, iterations=1)
    benchmark.extra_info["work"] = _work(res)
    if benchmark.stats is not None:
        benchmark.extra_info["us_per_work"] = round(benchmark.stats.stats.mean / _work(res) * 1e6, 3)


def test_round_robin_against_independent_servers(benchmark, conv10, h200):
    """Round robin over 8 replicas against 8 single-server runs of the split (the same work)."""
    reqs = conv10[:5000]
    fleet = Fleet.uniform(*h200, 8)
    t0 = time.perf_counter()
    for r in range(8):
        simulate(reqs[r::8], *h200, "propose")
    split_s = time.perf_counter() - t0
    benchmark.pedantic(simulate_fleet, args=(reqs, fleet, "propose"), rounds=3, iterations=1)
    record_ratio(benchmark, "independent_servers", split_s)


def test_fleet_against_plain_reference(benchmark):
    import numpy as np

    from specsim.sim.outcomes import occupancy_cdf
    from tests import reference as ref
    from tests.fixtures import random_requests, small_calibration, small_table

    reqs = random_requests(300, 1, rate=20.0)
    table, cal = small_table(), small_calibration()
    opts = ServerOptions(max_num_seqs=4, prefill_ms_per_token=0.2, chunked_prefill=False, max_num_batched_tokens=None)
    fleet = Fleet.uniform(table, cal, 4, opts)
    rows = [(float(r["arrival_s"]), int(r["prompt_tokens"]), int(r["output_tokens"])) for r in reqs]
    t0 = time.perf_counter()
    _, _, finish = ref.ref_fleet(rows, 4, "least_outstanding", table.widths.tolist(), table.costs.tolist(),
                                 cal.p_accept.tolist(), occupancy_cdf(cal, 2).tolist(), 2, max_batch=4,
                                 prefill_ms=0.2)
    ref_s = time.perf_counter() - t0
    res = benchmark.pedantic(simulate_fleet, args=(reqs, fleet, "fixed:2"), kwargs=dict(router="least_outstanding"),
                             rounds=5, iterations=1)
    assert np.array_equal(res.fleet.finish_s, np.array(finish))
    record_ratio(benchmark, "reference", ref_s)
