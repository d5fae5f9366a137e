"""Fleets: replicas behind a router in one time-ordered simulation. Each replica equals the
single-server engine on the requests routed to it; one replica under any router is the
single-server engine; the kernel matches the plain reference; fleet files are checked."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from specsim.calibration import AcceptanceCalibration, DrafterKey
from specsim.calibration.spread import centres
from specsim.sim import ServerOptions, simulate
from specsim.sim.outcomes import occupancy_cdf
from specsim.sim.fleet import ROUTERS, Fleet, FleetError, ReplicaGroup, load_fleet, parse_fleet, simulate_fleet
from specsim.sim.slo import SLO
from specsim.table import Cell, CostTable, TableKey
from tests import reference as ref
from tests.fixtures import random_requests, requests, small_calibration, small_table, with_spread

pytestmark = pytest.mark.kernels  # drives the fleet kernel: CI reruns it with bounds checks

POLICIES = ("fixed:0", "fixed:2", "propose", "goodput", "sequence", "load-aware")


def other_table():
    """A second box: slower steps, widths up to 8."""
    cells = [Cell(n, k, 14.0 + 0.9 * n + 2.0 * k * n ** 0.5, 3.0 + 0.2 * n + 0.5 * k * n, 1.1 * k, 0.2 * k)
             for n in (1, 2, 4, 8) for k in range(3)]
    return CostTable.from_cells(TableKey(1, "other", "test", {}), cells)


def same(a, b):
    """Bit-for-bit equality of two engine results (per request, counters, energy, step log)."""
    for name in ("arrival_s", "prompt_tokens", "output_tokens", "first_token_s", "finish_s", "scheduled_s",
                 "depth_histogram", "step_t_s", "step_width", "step_mean_depth", "step_tokens", "step_kv_blocks",
                 "step_prefill_tokens"):
        assert np.array_equal(getattr(a, name), getattr(b, name), equal_nan=True), name
    assert a.counters == b.counters
    assert a.energy == b.energy and a.kv == b.kv
    assert a.policy == b.policy and a.options == b.options
    assert a.end_s == b.end_s and a.step_log_stride == b.step_log_stride


@pytest.mark.parametrize("router", ROUTERS)
@pytest.mark.parametrize("policy", POLICIES)
def test_one_replica_is_the_single_server_engine(router, policy):
    reqs = random_requests(60, 5, rate=3.0)
    opts = ServerOptions(max_num_seqs=4, seed=3, slack=0.2, idle_w=7.0)
    res = simulate_fleet(reqs, Fleet.uniform(small_table(), small_calibration(), 1, opts), policy, router=router)
    one = simulate(reqs, small_table(), small_calibration(), policy, options=opts)
    same(res.replicas[0], one)
    assert np.array_equal(res.fleet.finish_s, one.finish_s) and res.fleet.counters == one.counters
    assert res.fleet.energy_j == one.energy_j and res.standby_j == (0.0,)
    assert (res.assignment == 0).all()


@settings(max_examples=25, deadline=None)
@given(n=st.integers(0, 50), replicas=st.integers(1, 5), seed=st.integers(0, 2 ** 32),
       policy=st.sampled_from(POLICIES), rate=st.floats(0.5, 20.0))
def test_round_robin_equals_independent_servers_of_the_split(n, replicas, seed, policy, rate):
    reqs = random_requests(n, seed, rate=rate) if n else requests([])
    opts = ServerOptions(max_num_seqs=3, seed=seed, log_size=16)
    res = simulate_fleet(reqs, Fleet.uniform(small_table(), small_calibration(), replicas, opts), policy)
    assert res.router == "round_robin"
    for r in range(replicas):
        same(res.replicas[r], simulate(reqs[r::replicas], small_table(), small_calibration(), policy, options=opts))
    assert np.array_equal(res.assignment, np.arange(n) % replicas)


@pytest.mark.parametrize("router", ROUTERS)
def test_every_replica_is_the_single_server_on_its_share(router):
    """Whatever the router, a replica is the engine on the requests routed to it; here with two
    groups of different boxes and options."""
    reqs = random_requests(120, 9, rate=12.0)
    cal = small_calibration()
    # Group b schedules as vLLM does: chunked prefill under a token budget, a KV cache small
    # enough to preempt.
    fleet = Fleet((ReplicaGroup("a", 2, small_table(), cal, ServerOptions(max_num_seqs=2, seed=1)),
                   ReplicaGroup("b", 1, other_table(), cal,
                                ServerOptions(max_num_seqs=8, seed=1, prefill_ms_per_token=0.3, chunked_prefill=True,
                                              max_num_batched_tokens=96, kv_capacity_tokens=800))))
    res = simulate_fleet(reqs, fleet, "sequence", router=router)
    assert res.groups == ("a", "a", "b") and res.gpus == 3
    for r, g in enumerate(fleet.groups[i] for i in (0, 0, 1)):
        mine = reqs[res.assignment == r]
        same(res.replicas[r], simulate(mine, g.table, cal, "sequence", options=g.options))
    assert res.fleet.counters["emitted_tokens"] == int(reqs["output_tokens"].sum())
    if router == "least_kv":
        # Group b's small cache always has the least free KV next to unlimited ones.
        assert 2 not in res.assignment.tolist() and len(set(res.assignment.tolist())) == 2
    else:
        assert res.replicas[2].counters["mixed_steps"] > 0 and len(set(res.assignment.tolist())) == 3


@settings(max_examples=40, deadline=None)
@given(n=st.integers(0, 45), replicas=st.integers(1, 5), seed=st.integers(0, 1000), k=st.integers(0, 3),
       router=st.sampled_from(ROUTERS), rate=st.floats(0.5, 40.0), max_batch=st.integers(1, 4),
       spread=st.sampled_from([None, 1.3]))
def test_kernel_matches_plain_reference(n, replicas, seed, k, router, rate, max_batch, spread):
    reqs = random_requests(n, seed, rate=rate) if n else requests([])
    table, cal = small_table(), with_spread(small_calibration(), spread)
    # The reference models separate prefill steps without a token budget or KV limit.
    opts = ServerOptions(max_num_seqs=max_batch, seed=seed, prefill_ms_per_token=0.2, chunked_prefill=False,
                         max_num_batched_tokens=None, kv_capacity_tokens=None)
    res = simulate_fleet(reqs, Fleet.uniform(table, cal, replicas, opts), f"fixed:{k}", router=router)
    rows = [(float(r["arrival_s"]), int(r["prompt_tokens"]), int(r["output_tokens"])) for r in reqs]
    occ = occupancy_cdf(cal, k).tolist()
    assignment, first, finish = ref.ref_fleet(rows, replicas, router, table.widths.tolist(), table.costs.tolist(),
                                              cal.p_accept.tolist(), occ, k, max_batch=max_batch, prefill_ms=0.2,
                                              seed=seed, spread_sd=spread or 0.0,
                                              centre=centres(cal.p_accept, spread or 0.0).tolist())
    assert res.assignment.tolist() == assignment
    assert res.fleet.first_token_s.tolist() == first
    assert res.fleet.finish_s.tolist() == finish


@pytest.mark.parametrize("router", ROUTERS)
@pytest.mark.parametrize("replicas, n", [(1, 1), (37, 120), (3, 300)])
def test_kernel_matches_plain_reference_wide_and_long(router, replicas, n):
    """More replicas than requests arrive at once (wide), and long queues on few (deep)."""
    reqs = random_requests(n, replicas, rate=60.0)
    table, cal = small_table(), small_calibration()
    opts = ServerOptions(max_num_seqs=2, seed=5, prefill_ms_per_token=0.2, chunked_prefill=False,
                         max_num_batched_tokens=None, kv_capacity_tokens=None)
    res = simulate_fleet(reqs, Fleet.uniform(table, cal, replicas, opts), "fixed:3", router=router)
    rows = [(float(r["arrival_s"]), int(r["prompt_tokens"]), int(r["output_tokens"])) for r in reqs]
    assignment, first, finish = ref.ref_fleet(rows, replicas, router, table.widths.tolist(), table.costs.tolist(),
                                              cal.p_accept.tolist(), occupancy_cdf(cal, 3).tolist(), 3, max_batch=2,
                                              prefill_ms=0.2, seed=5)
    assert res.assignment.tolist() == assignment
    assert res.fleet.first_token_s.tolist() == first and res.fleet.finish_s.tolist() == finish


def test_rows_grow_when_one_replica_takes_most_requests():
    # Seven slow replicas keep their first request outstanding for minutes, so least_outstanding
    # sends the rest to the fast one, far past the rows first sized for it.
    reqs = random_requests(300, 2, rate=0.5)
    cal = small_calibration()
    fleet = Fleet((ReplicaGroup("fast", 1, small_table(), cal),
                   ReplicaGroup("slow", 7, small_table(), cal, ServerOptions(prefill_ms_per_token=5000.0))))
    res = simulate_fleet(reqs, fleet, "fixed:1", router="least_outstanding")
    assert np.bincount(res.assignment)[0] > 2 * (300 // 8 + 16)
    same(res.replicas[0], simulate(reqs[res.assignment == 0], small_table(), cal, "fixed:1"))


def test_progress_chunks_do_not_change_the_result(monkeypatch):
    import specsim.sim.engine as engine

    reqs = random_requests(80, 4, rate=6.0)
    fleet = Fleet.uniform(small_table(), small_calibration(), 3)
    whole = simulate_fleet(reqs, fleet, "sequence", router="least_kv")
    import specsim.sim.fleet.fleet as fleet_module

    monkeypatch.setattr(engine, "PROGRESS_CHUNK", 7)
    monkeypatch.setattr(fleet_module, "PROGRESS_CHUNK", 7)  # the fleet's own binding of the engine's chunk
    seen = []
    cut = simulate_fleet(reqs, fleet, "sequence", router="least_kv", progress=seen.append)
    assert len(seen) > 3 and seen[-1] == 80 and seen == sorted(seen)
    assert np.array_equal(whole.assignment, cut.assignment)
    for a, b in zip(whole.replicas, cut.replicas):
        same(a, b)


def test_standby_energy_and_summary():
    reqs = requests([(0.0, 10, 5), (0.0, 10, 5), (30.0, 10, 5)])
    opts = ServerOptions(idle_w=10.0)
    res = simulate_fleet(reqs, Fleet.uniform(small_table(), small_calibration(), 3, opts), "fixed:1")
    end = res.fleet.end_s
    # Replica 2 is powered from the first arrival to the fleet's end, and serves one request late.
    r2 = res.replicas[2]
    assert res.standby_s[2] == pytest.approx(end - 0.0 - (r2.end_s - 30.0))
    assert res.standby_s[1] == pytest.approx(end - res.replicas[1].end_s)
    total = sum(r.energy_j for r in res.replicas) + sum(res.standby_j)
    assert res.fleet.energy_j == pytest.approx(total)
    assert res.fleet.energy["standby_j"] == pytest.approx(10.0 * sum(res.standby_s))
    s = res.summary(SLO(ttft_s=1.0))
    assert s["replicas"] == 3 and s["gpus"] == 3 and s["router"] == "round_robin"
    assert s["tokens_per_s_per_gpu"] == pytest.approx(s["tokens_per_s"] / 3)
    rows = s["per_replica"]
    assert [r["requests"] for r in rows] == [1, 1, 1]
    assert sum(r["tokens_per_s"] for r in rows) == pytest.approx(s["tokens_per_s"])
    assert all(0 < r["utilisation"] <= 1 for r in rows)


def test_to_frame():
    pytest.importorskip("pandas")
    reqs = random_requests(30, 1, rate=5.0)
    res = simulate_fleet(reqs, Fleet.uniform(small_table(), small_calibration(), 2), "propose")
    df = res.to_frame()
    assert len(df) == 30 and list(df["replica"]) == res.assignment.tolist()
    assert np.array_equal(df["ttft_s"].to_numpy(), res.fleet.ttft_s)
    assert set(df["group"]) == {"replica"}
    assert len(res.replica_frame()) == 2


def test_least_outstanding_beats_round_robin_on_bursty_real_traffic(shared_data):
    """The Azure conversation trace at six times its rate on four modelled H200 boxes, near
    saturation: joining the shortest queue cuts the p99 TTFT that round robin's blind spreading
    leaves in the bursts (about 0.42 s against 0.62 s)."""
    from specsim.costmodel import model_table
    from specsim.demo_inputs import demo_calibration
    from specsim.traces import read_trace

    table = model_table("h200", "llama-3.1-8b", "eagle3-1l", max_k=3, widths=(1, 2, 4, 8, 16, 32, 64))
    reqs = read_trace(shared_data / "traces" / "azure2023" / "AzureLLMInferenceTrace_conv.csv", rate_scale=6.0,
                      limit=4000).requests
    opts = ServerOptions(prefill_ms_per_token=0.05, prefill_j_per_token=0.03, max_num_seqs=16)
    p99 = {}
    for router in ("round_robin", "least_outstanding"):
        res = simulate_fleet(reqs, Fleet.uniform(table, demo_calibration(), 4, opts), "propose", router=router)
        p99[router] = res.summary()["ttft_s"]["p99"]
    assert p99["least_outstanding"] < 0.8 * p99["round_robin"]


# -- fleet files ---------------------------------------------------------------------------------------

KEY2 = DrafterKey(weights_sha256="other", vocab=100, quantization="bf16", context=True)


def write_inputs(tmp_path):
    (tmp_path / "a.toml").write_text(small_table().to_text())
    (tmp_path / "b.toml").write_text(other_table().to_text())
    (tmp_path / "cal.toml").write_text(small_calibration().render())
    c = small_calibration()
    (tmp_path / "cal2.toml").write_text(AcceptanceCalibration(KEY2, c.edges, c.p_accept, c.priors).render())


GOOD = """
router = "least_outstanding"

[[group]]
name = "small"
count = 4
table = "a.toml"
calibration = "cal.toml"
box_class = "test"

[[group]]
name = "big"
count = 2
gpus_per_replica = 2
table = "b.toml"
calibration = "cal.toml"
[group.server]
max_batch = 8
prefill_ms_per_token = 0.2
"""


def test_fleet_file(tmp_path):
    write_inputs(tmp_path)
    (tmp_path / "fleet.toml").write_text(GOOD)
    fleet = load_fleet(tmp_path / "fleet.toml", {"idle_w": 5.0})
    assert fleet.replicas == 6 and fleet.gpus == 8 and fleet.router == "least_outstanding"
    small, big = fleet.groups
    assert small.table == small_table() and big.table == other_table()
    assert big.options.max_num_seqs == 8 and big.options.prefill_ms_per_token == 0.2 and big.options.idle_w == 5.0
    assert small.options.max_num_seqs is None and small.options.idle_w == 5.0
    assert fleet.scaled(3).replicas == 18 and fleet.scaled(3).gpus == 24
    res = simulate_fleet(random_requests(50, 3, rate=10.0), fleet, "sequence")
    assert res.router == "least_outstanding" and len(res.replicas) == 6


@pytest.mark.parametrize("text, message", [
    (GOOD.replace("count = 4", "count = 0"), "count = 0"),
    (GOOD.replace("count = 4", "count = 4\ncolor = 'red'"), "unknown field `color`"),
    (GOOD.replace('router = "least_outstanding"', 'routr = "x"'), "unknown field `routr`"),
    (GOOD.replace('"least_outstanding"', '"random"'), "router = 'random'"),
    (GOOD.replace('"a.toml"', '"missing.toml"'), "no file at"),
    (GOOD.replace("max_batch = 8", "max_batchh = 8"), "server.max_batchh is not a server option"),
    (GOOD.replace("max_batch = 8", "max_batch = 0"), "server options"),
    (GOOD.replace("max_batch = 8", "max_batch = 8\nmax_num_seqs = 4"), "name the same option"),
    (GOOD.replace('box_class = "test"', 'box_class = "h200"'), "box_class = 'h200'"),
    (GOOD.replace('name = "big"', 'name = "small"'), "used twice"),
    (GOOD.replace('calibration = "cal.toml"\n[group.server]', 'calibration = "cal2.toml"\n[group.server]'),
     "drafter weights_sha256"),
    ("router = 'round_robin'\n", "no [[group]] tables"),
    ("[[group\n", "not valid TOML"),
])
def test_bad_fleet_files(tmp_path, text, message):
    write_inputs(tmp_path)
    path = tmp_path / "fleet.toml"
    path.write_text(text)
    with pytest.raises(FleetError) as info:
        load_fleet(path)
    assert message in str(info.value) and str(path) in str(info.value)


def test_bad_fleet_arguments():
    table, cal = small_table(), small_calibration()
    with pytest.raises(FleetError, match="count must be an integer"):
        Fleet.uniform(table, cal, 0)
    with pytest.raises(FleetError, match="unknown router"):
        simulate_fleet(requests([(0.0, 1, 1)]), Fleet.uniform(table, cal, 2), "fixed:0", router="fastest")
    with pytest.raises(FleetError, match="must be a Fleet"):
        simulate_fleet(requests([(0.0, 1, 1)]), table, "fixed:0")
    with pytest.raises(FleetError, match="at least one"):
        Fleet(())
    with pytest.raises(FleetError, match="not valid TOML"):
        parse_fleet("x = [", ".")


def tp_table(tp):
    """small_table() as a table that records its tensor parallelism in ``[meta]``."""
    t = small_table()
    return CostTable(t.key, t.widths, t.costs, {"tp": tp})


def test_a_replica_counts_the_gpus_its_table_says():
    cal = small_calibration()
    assert Fleet.uniform(tp_table(2), cal, 3).gpus == 6
    assert Fleet.uniform(small_table(), cal, 3).gpus == 3  # a table naming no tp: one GPU
    assert Fleet.uniform(tp_table(2), cal, 3, gpus_per_replica=1).gpus == 3  # the caller overrides it
    assert ReplicaGroup("a", 2, tp_table(4), cal).gpus_per_replica == 4
    res = simulate_fleet(random_requests(20, 3, rate=5.0), Fleet.uniform(tp_table(2), cal, 2), "fixed:1")
    s = res.summary()
    assert s["gpus"] == 4 and s["tokens_per_s_per_gpu"] == pytest.approx(s["tokens_per_s"] / 4)
    assert [r["gpus"] for r in s["per_replica"]] == [2, 2]


@pytest.mark.parametrize("tp", [0, -1, "two", 2.5, True])
def test_a_table_tp_that_is_not_a_gpu_count_is_refused(tp):
    with pytest.raises(FleetError, match=r"\[meta\] tp") as info:
        Fleet.uniform(tp_table(tp), small_calibration(), 1)
    assert "--gpus-per-replica" in str(info.value)
    assert Fleet.uniform(tp_table(tp), small_calibration(), 1, gpus_per_replica=2).gpus == 2


def test_fleet_file_gpus_default_to_the_table_tp(tmp_path):
    write_inputs(tmp_path)
    (tmp_path / "a.toml").write_text(tp_table(2).to_text())
    (tmp_path / "fleet.toml").write_text(GOOD)
    fleet = load_fleet(tmp_path / "fleet.toml")
    assert [g.gpus_per_replica for g in fleet.groups] == [2, 2] and fleet.gpus == 4 * 2 + 2 * 2
    (tmp_path / "fleet.toml").write_text(GOOD.replace('box_class = "test"', 'box_class = "test"\ngpus_per_replica = 1'))
    assert load_fleet(tmp_path / "fleet.toml").gpus == 4 * 1 + 2 * 2  # the file's figure overrides the table's
    (tmp_path / "a.toml").write_text(tp_table(0).to_text())
    (tmp_path / "fleet.toml").write_text(GOOD)
    with pytest.raises(FleetError, match=r"\[\[group\]\] 1 \('small'\).*\[meta\] tp = 0"):
        load_fleet(tmp_path / "fleet.toml")


def test_cli_refuses_a_bad_fleet_file_and_writes_nothing(tmp_path):
    write_inputs(tmp_path)
    (tmp_path / "fleet.toml").write_text(GOOD.replace("count = 4", "count = 0"))
    trace = tmp_path / "t.csv"
    trace.write_text("arrival_s,prompt_tokens,output_tokens\n0,10,5\n1,10,5\n")
    out = tmp_path / "out.json"
    run = subprocess.run([sys.executable, "-m", "specsim", "capacity", "--trace", str(trace), "--format", "csv",
                          "--columns", "arrival=arrival_s,prompt=prompt_tokens,output=output_tokens",
                          "--fleet", str(tmp_path / "fleet.toml"), "--policy", "propose", "--slo-ttft-s", "1",
                          "--serial", "--json", str(out)], capture_output=True, text=True)
    assert run.returncode == 2 and "Traceback" not in run.stderr
    assert "count = 0" in run.stderr and "fleet.toml" in run.stderr
    assert not out.exists()


# -- sweeps and frames -----------------------------------------------------------------------------------

# A rank-acceptance table for the tree policies: rank 1 is small_calibration's priors.
RANKS = np.array([[0.75, 0.15, 0.05], [0.6, 0.2, 0.08], [0.55, 0.2, 0.1]])


@pytest.mark.parametrize("policy", ["propose", "tree:3", "tree:auto"])
def test_replicas_and_router_as_sweep_axes(tmp_path, policy):
    from specsim.studies.sweep import load_grid, read_results, run_sweep

    write_inputs(tmp_path)
    cal = small_calibration().with_rank_acceptance(RANKS)
    (tmp_path / "cal.toml").write_text(cal.render())
    reqs = random_requests(60, 8, rate=6.0)
    rows = "\n".join(f"{float(r['arrival_s'])!r},{r['prompt_tokens']},{r['output_tokens']}" for r in reqs)
    (tmp_path / "t.csv").write_text("arrival_s,prompt_tokens,output_tokens\n" + rows + "\n")
    (tmp_path / "grid.toml").write_text("""
[traces]
t = { path = "t.csv", format = "csv", columns = "arrival=arrival_s,prompt=prompt_tokens,output=output_tokens" }
[tables]
a = "a.toml"
[calibrations]
c = "cal.toml"
[server]
max_batch = 2
[slo]
ttft_s = 0.5
[axes]
policy = ["%s"]
replicas = [1, 3]
router = ["round_robin", "least_outstanding"]
""" % policy)
    grid = load_grid(tmp_path / "grid.toml")
    report = run_sweep(grid, tmp_path / "out.csv", serial=True, progress=False)
    got = {(r["replicas"], r["router"]): r for r in read_results(tmp_path / "out.csv")}
    assert len(got) == 4
    opts = ServerOptions(max_num_seqs=2)
    for (replicas, router), row in got.items():
        want = simulate_fleet(reqs, Fleet.uniform(small_table(), cal, replicas, opts), policy,
                              router=router).summary(SLO(ttft_s=0.5))
        assert row["ttft_s_p99"] == want["ttft_s"]["p99"] and row["energy_j"] == want["energy_j"]
        assert row["slo_attainment"] == want["slo"]["attainment"] and row["gpus"] == replicas
    single = simulate(reqs, small_table(), cal, policy, options=opts).summary(SLO(ttft_s=0.5))
    assert got[(1, "round_robin")]["tokens_per_s"] == single["tokens_per_s"]
    pytest.importorskip("pandas")
    frame = report.to_frame()
    assert len(frame) == 4 and set(frame["router"]) == {"round_robin", "least_outstanding"}


@pytest.mark.parametrize("axes, message", [
    ('policy = ["propose"]\nreplicas = [0]', "replicas 0"),
    ('policy = ["propose"]\nrouter = ["fastest"]', "router 'fastest'"),
])
def test_bad_fleet_axes(tmp_path, axes, message):
    from specsim.studies.sweep import GridError, load_grid

    write_inputs(tmp_path)
    (tmp_path / "t.csv").write_text("arrival_s,prompt_tokens,output_tokens\n0,1,1\n")
    (tmp_path / "grid.toml").write_text(f"""
[traces]
t = "t.csv"
[tables]
a = "a.toml"
[calibrations]
c = "cal.toml"
[axes]
{axes}
""")
    with pytest.raises(GridError, match=message):
        load_grid(tmp_path / "grid.toml")


def test_sim_result_to_frame():
    pytest.importorskip("pandas")
    reqs = random_requests(25, 6, rate=4.0)
    res = simulate(reqs, small_table(), small_calibration(), "sequence")
    df = res.to_frame()
    assert len(df) == 25 and (df["policy"] == res.policy).all()
    assert np.array_equal(df["finish_s"].to_numpy(), res.finish_s)
    assert np.array_equal(df["tpot_s"].to_numpy(), res.tpot_s, equal_nan=True)
    assert np.array_equal(df["queue_s"].to_numpy(), res.queue_s)


def test_fleet_file_with_a_broken_table(tmp_path):
    write_inputs(tmp_path)
    (tmp_path / "a.toml").write_text("[key]\nschema = 1\n")
    (tmp_path / "fleet.toml").write_text(GOOD)
    with pytest.raises(FleetError) as info:
        load_fleet(tmp_path / "fleet.toml")
    assert "[[group]] 1 ('small')" in str(info.value) and "a.toml" in str(info.value)


@settings(max_examples=15, deadline=None)
@given(n=st.integers(0, 60), a=st.integers(1, 3), b=st.integers(1, 3), seed=st.integers(0, 1000),
       router=st.sampled_from(ROUTERS), rate=st.floats(1.0, 40.0), policy=st.sampled_from(POLICIES),
       chunked=st.booleans(), budget=st.sampled_from([None, 40, 400]), kv=st.sampled_from([None, 700, 5000]))
def test_every_replica_is_the_engine_on_random_mixed_fleets(n, a, b, seed, router, rate, policy, chunked, budget, kv):
    reqs = random_requests(n, seed, rate=rate) if n else requests([])
    cal = small_calibration()
    opts_b = ServerOptions(max_num_seqs=4, seed=seed, chunked_prefill=chunked, max_num_batched_tokens=budget,
                           kv_capacity_tokens=kv, idle_w=2.0)
    fleet = Fleet((ReplicaGroup("a", a, small_table(), cal, ServerOptions(max_num_seqs=2, seed=seed, log_size=8)),
                   ReplicaGroup("b", b, other_table(), cal, opts_b)))
    res = simulate_fleet(reqs, fleet, policy, router=router)
    assert sorted(set(res.assignment.tolist())) <= list(range(a + b)) and (res.assignment >= 0).all()
    for r in range(a + b):
        g = fleet.groups[0 if r < a else 1]
        same(res.replicas[r], simulate(reqs[res.assignment == r], g.table, cal, policy, options=g.options))
    assert res.fleet.counters["emitted_tokens"] == int(reqs["output_tokens"].sum())
    assert np.array_equal(res.fleet.arrival_s, reqs["arrival_s"])


# -- the command ---------------------------------------------------------------------------------------

def fleet_cli(tmp_path, *extra):
    reqs = random_requests(80, 12, rate=10.0)
    rows = "\n".join(f"{float(r['arrival_s'])!r},{r['prompt_tokens']},{r['output_tokens']}" for r in reqs)
    (tmp_path / "trace.csv").write_text("arrival_s,prompt_tokens,output_tokens\n" + rows + "\n")
    argv = [sys.executable, "-m", "specsim", "fleet", "--trace", str(tmp_path / "trace.csv"), "--format", "csv",
            "--columns", "arrival=arrival_s,prompt=prompt_tokens,output=output_tokens", *extra]
    return reqs, subprocess.run(argv, capture_output=True, text=True, cwd=tmp_path)


def test_fleet_command(tmp_path):
    import json

    write_inputs(tmp_path)
    reqs, run = fleet_cli(tmp_path, "--table", "a.toml", "--calibration", "cal.toml", "--replicas", "3",
                          "--router", "least_outstanding", "--policy", "fixed:1", "--policy", "sequence",
                          "--max-batch", "2", "--no-chunked-prefill", "--max-num-batched-tokens", "none",
                          "--slo-ttft-s", "0.5", "--json", "f.json", "--requests-csv", "r.csv")
    assert run.returncode == 0, run.stderr
    assert "sequence@0: per replica" in run.stdout and "least_outstanding" in run.stdout
    doc = json.loads((tmp_path / "f.json").read_text())
    opts = ServerOptions(max_num_seqs=2, chunked_prefill=False, max_num_batched_tokens=None)
    want = simulate_fleet(reqs, Fleet.uniform(small_table(), small_calibration(), 3, opts), "sequence",
                          router="least_outstanding").summary(SLO(ttft_s=0.5))
    got = doc["policies"][1]
    assert got["ttft_s"] == want["ttft_s"] and got["energy_j"] == want["energy_j"]
    assert [r["requests"] for r in got["per_replica"]] == [r["requests"] for r in want["per_replica"]]
    lines = (tmp_path / "r.csv").read_text().splitlines()
    assert lines[0].endswith(",replica") and len(lines) == 1 + 2 * 80


def test_fleet_command_with_a_fleet_file_and_refusals(tmp_path):
    write_inputs(tmp_path)
    (tmp_path / "fleet.toml").write_text(GOOD)
    _, run = fleet_cli(tmp_path, "--fleet", "fleet.toml", "--policy", "propose")
    assert run.returncode == 0, run.stderr
    assert "6 replica(s), 8 GPU(s); router least_outstanding" in run.stdout and "big" in run.stdout
    _, run = fleet_cli(tmp_path, "--fleet", "fleet.toml", "--replicas", "2", "--policy", "propose")
    assert run.returncode == 2 and "leave out" in run.stderr
    _, run = fleet_cli(tmp_path, "--table", "a.toml", "--calibration", "cal.toml", "--policy", "propose",
                       "--json", "a.toml")
    assert run.returncode == 2 and "is also the input" in run.stderr
