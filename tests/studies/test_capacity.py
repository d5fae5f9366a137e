"""Capacity planning: the search finds the fewest replicas where the answer is known by
construction, checks its boundary, refuses what no fleet up to the cap can meet, and the
command writes all of its outputs or none."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from specsim.sim import ServerOptions
from specsim.errors import SimulationError
from specsim.sim.fleet import Fleet, ReplicaGroup
from specsim.sim.slo import SLO
from specsim.table import CostTable
from specsim._executor import Executor
from specsim.interop import read_policy
from specsim.studies.capacity import CapacityError, Probe, ProbeSetup, run_probe, search_sizes
from tests.fixtures import capacity_on, requests, small_calibration, small_table
from tests.fixtures import ROOT

K = 5  # replicas that are exactly enough for the burst traffic below


def bursts(k=K, periods=30):
    """``k`` one-token requests of 100 prompt tokens every second: with one request per replica
    at a time and 1 ms of prefill per token, ``k`` replicas serve every burst at once (TTFT
    0.1 s); with ``k - 1`` one request per burst waits a turn (TTFT 0.2 s)."""
    return requests([(float(t), 100, 1) for t in range(periods) for _ in range(k)])


OPTS = ServerOptions(max_num_seqs=1, prefill_ms_per_token=1.0, prefill_j_per_token=0.5, idle_w=3.0)


@pytest.mark.parametrize("router", ["round_robin", "least_outstanding", "least_kv"])
def test_answer_known_by_construction(router):
    res = capacity_on(bursts(), small_table(), small_calibration(), ["fixed:2", "sequence"], slo=SLO(ttft_s=0.15, attainment=0.99),
                   options=OPTS, router=router, max_replicas=64)
    assert [p.label for p in res.policies] == ["fixed:0", "fixed:2", "sequence@0"]
    for p in res.policies:
        assert p.replicas == K and p.gpus == K and p.attainment == 1.0
        below = {q.units: q for q in p.probes}[K - 1]
        assert below.attainment == pytest.approx((K - 1) / K)  # one request of every burst waits
        assert p.monotone_at_boundary is True and {q.units for q in p.probes} >= {K - 1, K, K + 1}
        # One-token requests never decode: every policy costs the same, so nothing is saved.
        assert p.gpu_saving == 0.0 and p.energy_saving == 0.0


def test_tree_policies_are_sized():
    """Capacity sizes tree policies as it sizes chains: one-token requests never decode, so a tree
    costs what plain decoding does and needs the same K replicas."""
    cal = small_calibration().with_rank_acceptance(np.array([[0.75, 0.15], [0.6, 0.2], [0.55, 0.2]]))
    res = capacity_on(bursts(), small_table(), cal, ["tree:3", "tree:auto"], slo=SLO(ttft_s=0.15, attainment=0.99),
                   options=OPTS, max_replicas=64)
    assert [p.label for p in res.policies] == ["fixed:0", "tree:3", "tree:auto"]
    assert all(p.replicas == K and p.attainment == 1.0 and p.energy_saving == 0.0 for p in res.policies)


def test_costs_per_token():
    reqs = bursts()
    res = capacity_on(reqs, small_table(), small_calibration(), ["propose"], slo=SLO(ttft_s=0.15), options=OPTS,
                   gpu_hour_usd=2.5)
    p = res.policy("propose@0")
    probe = {q.units: q for q in p.probes}[K]
    tokens = int(reqs["output_tokens"].sum())
    assert probe.output_tokens == tokens and probe.gpus == K
    assert p.tokens_per_s_per_gpu == pytest.approx(tokens / probe.makespan_s / K)
    assert p.gpu_hours_per_mtok == pytest.approx(K * probe.makespan_s / 3600 / tokens * 1e6)
    assert p.usd_per_mtok == pytest.approx(2.5 * p.gpu_hours_per_mtok)
    # Energy: 0.5 J per prompt token of every request, plus 3 W over each replica's idle time.
    idle_s = K * probe.makespan_s - reqs.shape[0] * 0.1
    assert p.j_per_token * tokens == pytest.approx(0.5 * 100 * reqs.shape[0] + 3.0 * idle_s)


def reference_search(attain, target, cap):
    """The fewest ``m`` in 1..cap with ``attain(m) >= target`` for a monotone ``attain``."""
    return next((m for m in range(1, cap + 1) if attain(m) >= target), None)


def drive(gen, attain):
    probed = []
    try:
        m = next(gen)
        while True:
            probed.append(m)
            m = gen.send(attain(m))
    except StopIteration as stop:
        return stop.value[0], probed


@settings(max_examples=200, deadline=None)
@given(threshold=st.integers(1, 300), cap=st.integers(1, 256))
def test_search_matches_a_linear_scan(threshold, cap):
    def attain(m):
        return 1.0 if m >= threshold else m / (threshold + 1)

    answer, probed = drive(search_sizes(0.99, cap), attain)
    assert answer == reference_search(attain, 0.99, cap)
    assert len(probed) == len(set(probed)) and max(probed) <= cap
    assert len(probed) <= 2 * cap.bit_length() + 2
    if answer is not None:
        assert answer == 1 or answer - 1 in probed
        assert answer + 1 in probed or answer == cap


class FakeExecutor(Executor):
    """Answers every probe with ``attain(label, units)`` instead of simulating it."""

    def __init__(self, attain):
        super().__init__("serial")
        self.attain = attain

    def map(self, fn, calls, on_result=None, keys=None) -> list:
        out = []
        for _, _, (label, _, _), units, _ in calls:
            out.append(Probe(label, units, units, units, self.attain(label, units), 1000, 10.0, 500.0, 0.1, 0.01))
        return out


def run_one(requests, fleet, policy, units, slo, label=None, seeds=(), router="least_outstanding", slack=0.0,
          resamples=()):
    """:func:`run_probe` of ``policy`` (text) on ``units`` copies of ``fleet``."""
    run = (label or policy, read_policy(policy), slack)
    return run_probe(requests, ProbeSetup(fleet, router, slo, seeds), run, units, resamples)


def test_non_monotone_boundary_is_reported():
    # Met at 4 replicas and from 8 on, but not at 5: the search answers 4 and says it is fragile.
    def attain(label, m):
        return 1.0 if m == 4 or m >= 8 else 0.5

    res = capacity_on(bursts(), small_table(), small_calibration(), ["fixed:1"], slo=SLO(ttft_s=1.0), options=OPTS,
                   executor=FakeExecutor(attain))
    p = res.policy("fixed:1")
    assert p.replicas == 4 and p.monotone_at_boundary is False
    assert sorted(q.units for q in p.probes) == [1, 2, 3, 4, 5]


def test_unreachable_target_names_the_best_attainment():
    def attain(label, m):
        return min(0.9, 0.1 * m) if label == "fixed:1" else 1.0

    with pytest.raises(CapacityError) as info:
        capacity_on(bursts(), small_table(), small_calibration(), ["fixed:1"], slo=SLO(ttft_s=1.0), options=OPTS,
                 executor=FakeExecutor(attain), max_replicas=20)
    text = str(info.value)
    assert "up to 20 replicas" in text and "fixed:1: best attainment 0.9000 (at 16 replicas)" in text
    assert "fixed:0" not in text.split("\n", 1)[1]


def test_fleet_unit_is_multiplied():
    cal = small_calibration()
    unit = Fleet((ReplicaGroup("a", 2, small_table(), cal, OPTS), ReplicaGroup("b", 1, small_table(), cal, OPTS, 2)))
    res = capacity_on(bursts(k=7), policies=["fixed:1"], fleet=unit, slo=SLO(ttft_s=0.15), options=None,
                   router="least_outstanding", max_replicas=30)
    p = res.policy("fixed:1")
    # 7 simultaneous requests need 7 replicas: three units (9 replicas, 12 GPUs); two units have 6.
    assert p.units == 3 and p.replicas == 9 and p.gpus == 12
    assert res.unit_replicas == 3 and res.unit_gpus == 4


def test_bad_arguments():
    t, c = small_table(), small_calibration()
    reqs = bursts()
    with pytest.raises(CapacityError, match="give an SLO"):
        capacity_on(reqs, t, c)
    with pytest.raises(SimulationError, match="attainment"):
        SLO(ttft_s=1.0, attainment=1.5)
    with pytest.raises(SimulationError, match="needs an SLO"):
        SLO(attainment=0.9)
    with pytest.raises(SimulationError, match="seconds"):
        SLO(ttft_s=-1.0)
    with pytest.raises(SimulationError, match="must be finite"):
        SLO(tpot_s=10**400)  # an int past the floats: it raised a bare OverflowError
    with pytest.raises(CapacityError, match="not both"):
        capacity_on(reqs, t, c, fleet=Fleet.uniform(t, c, 1), slo=SLO(ttft_s=1.0))
    with pytest.raises(CapacityError, match="below one unit"):
        capacity_on(reqs, fleet=Fleet.uniform(t, c, 4), slo=SLO(ttft_s=1.0), max_replicas=3)
    with pytest.raises(CapacityError, match="table and a calibration"):
        capacity_on(reqs, t, slo=SLO(ttft_s=1.0))


def test_frames():
    pytest.importorskip("pandas")
    res = capacity_on(bursts(), small_table(), small_calibration(), ["fixed:2"], slo=SLO(ttft_s=0.15), options=OPTS)
    df = res.to_frame()
    assert list(df["label"]) == ["fixed:0", "fixed:2"] and list(df["replicas"]) == [K, K]
    probes = res.probes_frame()
    assert len(probes) == sum(len(p.probes) for p in res.policies)
    assert set(probes["units"]) >= {K - 1, K, K + 1}
    # The intervals travel with the answers and the probes: 150 requests x 3 seeds, all met at K.
    assert (df["attainment_low"] >= 0.99).all() and (df["attainment_high"] == 1.0).all()
    assert set(probes["trials"]) == {450} and (probes["attainment_low"] <= probes["attainment"]).all()
    assert (probes["attainment"] <= probes["attainment_high"]).all()


def test_dask_gives_the_serial_answer():
    pytest.importorskip("dask.distributed")

    args = dict(slo=SLO(ttft_s=0.15), options=OPTS, max_replicas=16)
    serial = capacity_on(bursts(), small_table(), small_calibration(), ["propose"], executor="serial", **args)
    resampled = capacity_on(uneven_bursts(), small_table(), small_calibration(), ["propose"], executor="serial",
                            window_resamples=3, windows=4, **args)
    with Executor("dask", 1) as ex:
        spread = capacity_on(bursts(), small_table(), small_calibration(), ["propose"], executor=ex, **args)
        spread_resampled = capacity_on(uneven_bursts(), small_table(), small_calibration(), ["propose"], executor=ex,
                                       window_resamples=3, windows=4, **args)
    assert spread.to_dict() == serial.to_dict()
    assert spread_resampled.to_dict() == resampled.to_dict()


def test_threads_give_the_serial_answer():
    from specsim._executor import ExecutorChoice

    args = dict(slo=SLO(ttft_s=0.15), options=OPTS, max_replicas=16)
    serial = capacity_on(bursts(), small_table(), small_calibration(), ["propose", "sequence"], **args)
    threads = capacity_on(bursts(), small_table(), small_calibration(), ["propose", "sequence"],
                          executor=ExecutorChoice("threads", 3), **args)
    assert threads.to_dict() == serial.to_dict()
    # A running executor is the caller's: the search leaves it open.
    with Executor("threads", 2) as ex:
        again = capacity_on(bursts(), small_table(), small_calibration(), ["propose", "sequence"], executor=ex,
                            **args)
        assert ex.map(len, [("ab",)]) == [2]
    assert again.to_dict() == serial.to_dict()


def test_probe_is_a_pure_function():
    fleet = Fleet.uniform(small_table(), small_calibration(), 1, OPTS)
    a = run_one(bursts(), fleet, "sequence", 3, SLO(0.15), "x", slack=0.1)
    b = run_one(bursts(), fleet, "sequence", 3, SLO(0.15), "x", slack=0.1)
    assert a == b and a.replicas == 3


# -- the command ------------------------------------------------------------------------------------

def write_inputs(tmp_path, k=K):
    (tmp_path / "t.toml").write_text(small_table().to_text())
    (tmp_path / "c.toml").write_text(small_calibration().render())
    rows = "\n".join(f"{float(t)},100,1" for t in range(20) for _ in range(k))
    (tmp_path / "trace.csv").write_text("arrival_s,prompt_tokens,output_tokens\n" + rows + "\n")


def cli(tmp_path, *extra):
    argv = [sys.executable, "-m", "specsim", "capacity", "--trace", str(tmp_path / "trace.csv"), "--format", "csv",
            "--columns", "arrival=arrival_s,prompt=prompt_tokens,output=output_tokens",
            "--table", str(tmp_path / "t.toml"), "--calibration", str(tmp_path / "c.toml"), "--max-batch", "1",
            "--prefill-ms-per-token", "1", "--slo-ttft-s", "0.15", *extra]
    if not {"--threads", "--scheduler"} & set(extra):
        argv.append("--serial")
    return subprocess.run(argv, capture_output=True, text=True, cwd=tmp_path)


def test_cli_writes_json_and_plot(tmp_path):
    pytest.importorskip("matplotlib")
    write_inputs(tmp_path)
    # 100 requests x 3 seeds resolve 95% (a fleet meeting every request has a 95% interval from
    # 98.7%), not 99%.
    run = cli(tmp_path, "--policy", "fixed:2", "--policy", "propose", "--gpu-hour-usd", "3", "--json", "cap.json",
              "--plot", "cap.png", "--attainment", "0.95")
    assert run.returncode == 0, run.stderr
    assert "fixed:2" in run.stdout and "propose@0" in run.stdout and "capacity:" in run.stderr
    doc = json.loads((tmp_path / "cap.json").read_text())
    assert [p["replicas"] for p in doc["policies"]] == [K, K, K]
    assert doc["policies"][1]["usd_per_mtok"] == pytest.approx(3 * doc["policies"][1]["gpu_hours_per_mtok"])
    assert doc["trace"]["requests"] == 20 * K
    assert (tmp_path / "cap.png").read_bytes()[:4] == b"\x89PNG"


def test_cli_counts_the_gpus_of_a_tensor_parallel_table(tmp_path):
    # A TP2 table: every replica is two GPUs, so the GPUs, $/Mtok and tokens/s per GPU of the
    # same answer follow (double, double, half) what --gpus-per-replica 1 says.
    write_inputs(tmp_path)
    t = small_table()
    (tmp_path / "t.toml").write_text(CostTable(t.key, t.widths, t.costs, {"tp": 2}).to_text())
    runs = {}
    for name, extra in (("tp", ()), ("one", ("--gpus-per-replica", "1"))):
        run = cli(tmp_path, "--policy", "fixed:2", "--gpu-hour-usd", "3", "--attainment", "0.95", "--quiet",
                  "--json", f"{name}.json", *extra)
        assert run.returncode == 0, run.stderr
        runs[name] = json.loads((tmp_path / f"{name}.json").read_text())["policies"]
    for tp, one in zip(runs["tp"], runs["one"]):
        assert tp["replicas"] == one["replicas"] == K
        assert tp["gpus"] == 2 * one["gpus"] == 2 * K
        assert tp["usd_per_mtok"] == pytest.approx(2 * one["usd_per_mtok"])
        assert tp["tokens_per_s_per_gpu"] == pytest.approx(one["tokens_per_s_per_gpu"] / 2)
    fleet = subprocess.run([sys.executable, "-m", "specsim", "fleet", "--trace", "trace.csv", "--format", "csv",
                            "--columns", "arrival=arrival_s,prompt=prompt_tokens,output=output_tokens",
                            "--table", "t.toml", "--calibration", "c.toml", "--replicas", "3", "--policy", "fixed:1"],
                           capture_output=True, text=True, cwd=tmp_path)
    assert fleet.returncode == 0, fleet.stderr
    assert "3 replica(s), 6 GPU(s)" in fleet.stdout


def test_cli_unreachable_slo_writes_nothing(tmp_path):
    write_inputs(tmp_path)
    (tmp_path / "cap.json").write_text("earlier")
    run = cli(tmp_path, "--policy", "fixed:2", "--max-replicas", "3", "--json", "cap.json", "--plot", "cap.png",
              "--quiet", "--attainment", "0.95")
    assert run.returncode == 2 and "Traceback" not in run.stderr
    assert "no fleet of up to 3 replicas meets 0.95" in run.stderr and "best attainment 0.6000" in run.stderr
    assert (tmp_path / "cap.json").read_text() == "earlier" and not (tmp_path / "cap.png").exists()


@pytest.mark.parametrize("extra, message", [
    (("--policy", "fixed:1", "--json", "t.toml"), "is also the input"),
    (("--policy", "fixed:1", "--attainment", "0"), "--attainment"),
    (("--policy", "nonsense"), "nonsense"),
    (("--policy", "fixed:1", "--fleet", "f.toml"), "not both"),
    (("--policy", "fixed:1", "--gpus-per-replica", "0"), "--gpus-per-replica"),
    # Worker counts the machine cannot run, or none at all, and an address that is not one: refused
    # before any work starts (no cluster of 100,000 processes, no distributed ValueError).
    (("--policy", "fixed:1", "--workers", "100000"), "--workers 100,000 is outside 1..64"),
    (("--policy", "fixed:1", "--workers", "0"), "--workers 0 is outside"),
    (("--policy", "fixed:1", "--threads", "0"), "--threads 0 is outside"),
    (("--policy", "fixed:1", "--threads", "65"), "--threads 65 is outside"),
    (("--policy", "fixed:1", "--scheduler", "not a url"), "is not a Dask scheduler address"),
])
def test_cli_refusals(tmp_path, extra, message):
    write_inputs(tmp_path)
    before = (tmp_path / "t.toml").read_bytes()
    run = cli(tmp_path, *extra)
    assert run.returncode == 2 and message in run.stderr and "Traceback" not in run.stderr
    assert (tmp_path / "t.toml").read_bytes() == before


def test_cli_needs_an_slo(tmp_path):
    write_inputs(tmp_path)
    argv = [sys.executable, "-m", "specsim", "capacity", "--trace", "trace.csv", "--table", "t.toml",
            "--calibration", "c.toml", "--policy", "fixed:0", "--serial"]
    run = subprocess.run(argv, capture_output=True, text=True, cwd=tmp_path)
    assert run.returncode == 2 and "give an SLO" in run.stderr


def test_to_json_is_finite():
    res = capacity_on(bursts(), small_table(), small_calibration(), ["fixed:1"], slo=SLO(ttft_s=0.15), options=OPTS)
    text = json.dumps(res.to_dict(), allow_nan=False)
    assert np.isfinite(json.loads(text)["policies"][0]["j_per_token"])


# -- intervals ---------------------------------------------------------------------------------------

def _coin_requests(n):
    """``n`` three-token requests, one at a time on one replica at width 1: a request's TPOT is
    half a step when its first decode step's draft is accepted and a whole step when not, so
    with a TPOT target between the two it meets the SLO exactly when that draft is accepted."""
    return requests([(10.0 * i, 50, 3) for i in range(n)])


COIN_OPTS = ServerOptions(max_num_seqs=1, prefill_ms_per_token=0.01)


def test_attainment_interval_covers_the_known_rate():
    """The interval covers the true attainment in at least 90% of 50 seeded repetitions. The truth
    is known by construction: a request meets the SLO exactly when its first draft is accepted,
    which the calibration makes happen with its first position's rate (0.75); a run 40 times
    larger agrees."""
    table, cal = small_table(), small_calibration()
    fleet = Fleet.uniform(table, cal, 1, COIN_OPTS)
    step_ms = table.costs[0, 1, 0] + table.costs[0, 1, 2]  # verify + draft at width 1, depth 1
    slo_tpot = 0.75 * step_ms / 1000.0
    p = float(cal.priors[0])
    assert 0.2 < p < 0.95  # a coin, not a certainty: the interval has work to do
    large = run_one(_coin_requests(4000), fleet, "fixed:1", 1, SLO(tpot_s=slo_tpot), "t", tuple(range(1000, 1006)),
                  "round_robin")
    assert large.attainment_low <= p <= large.attainment_high
    covered = 0
    for rep in range(50):
        one = run_one(_coin_requests(200), fleet, "fixed:1", 1, SLO(tpot_s=slo_tpot), "t",
                    (3 * rep, 3 * rep + 1, 3 * rep + 2), "round_robin")
        assert one.trials == 600 and one.seeds == 3
        covered += one.attainment_low <= p <= one.attainment_high
    assert covered >= 45, covered


def test_the_interval_with_window_resampling_still_covers_the_known_rate():
    """The same coin as above, with four window resamples per probe: the wider interval covers
    the calibration's first-position rate in at least 90% of 50 seeded repetitions too."""
    from specsim.studies.windows import resample_windows

    table, cal = small_table(), small_calibration()
    fleet = Fleet.uniform(table, cal, 1, COIN_OPTS)
    slo_tpot = 0.75 * (table.costs[0, 1, 0] + table.costs[0, 1, 2]) / 1000.0
    p = float(cal.priors[0])
    covered = 0
    for rep in range(50):
        seeds = (3 * rep, 3 * rep + 1, 3 * rep + 2)
        reqs = _coin_requests(200)
        one = run_one(reqs, fleet, "fixed:1", 1, SLO(tpot_s=slo_tpot), "t", seeds, "round_robin",
                    resamples=resample_windows(reqs, 4, 8, seed=rep))
        assert one.window_resamples == 4
        covered += one.attainment_low <= p <= one.attainment_high
    assert covered >= 45, covered


@pytest.mark.slow
def test_tour_capacity_is_the_smallest_fleet_whose_interval_meets(shared_data):
    """The README tour's trace (300 requests at 8x): no smaller fleet than each answer meets the
    target under the same seeds, and the note says how few requests may miss."""

    from specsim import AcceptanceCalibration, CostTable
    from specsim.traces import read_trace

    examples = ROOT / "examples"
    reqs = read_trace(examples / "trace.csv", rate_scale=8.0).requests
    table, cal = CostTable.load(examples / "table.toml"), AcceptanceCalibration.load(examples / "cal.toml")
    with pytest.raises(CapacityError, match="no fleet") as info:
        capacity_on(reqs, table, cal, ["fixed:3"], slo=SLO(1.0, 0.05), max_replicas=16)
    assert "miss the SLO even alone on an idle replica" in str(info.value)
    res = capacity_on(reqs, table, cal, ["fixed:3", "propose"], slo=SLO(1.0, 0.05, 0.98), executor="serial")
    assert any("allows 6 to miss" in w for w in res.warnings)
    assert any("even alone on an idle replica" in w for w in res.warnings)
    fleet = Fleet.uniform(table, cal, 1, None)
    for p in res.policies:
        assert p.attainment_low >= 0.98
        pol = {"propose@0": "propose"}.get(p.label, p.label)
        for units in range(1, p.units):
            one = run_one(reqs, fleet, pol, units, SLO(1.0, 0.05), p.label, (0, 1, 2), res.router)
            assert one.attainment_low < 0.98, (p.label, units, p.units)


def test_a_300_request_trace_warns_that_99_percent_lets_3_miss():
    """99% of 300 requests is 3 allowed to miss: the answer rests on a handful, and the result says so."""
    reqs = bursts(k=K, periods=60)
    assert reqs.shape[0] == 300
    res = capacity_on(reqs, small_table(), small_calibration(), ["fixed:2"], slo=SLO(ttft_s=0.15, attainment=0.99),
                   options=OPTS, max_replicas=16)
    assert any("300 requests: 99.00% attainment allows 3 to miss" in w for w in res.warnings), res.warnings


# -- window resampling ---------------------------------------------------------------------------------

def uneven_bursts(periods=40):
    """Bursts of ``K`` one-token requests every second, and of ``K + 1`` in every fourth second of
    the trace's second half: at ``K`` replicas one request of those bursts waits a turn, so how
    much of the trace misses depends on which stretches of it a resample draws."""
    rows = []
    for t in range(periods):
        extra = 1 if t >= periods // 2 and t % 4 == 0 else 0
        rows += [(float(t), 100, 1)] * (K + extra)
    return requests(rows)


def test_window_resampling_off_is_todays_answer_exactly():
    args = dict(slo=SLO(ttft_s=0.15, attainment=0.95), options=OPTS, max_replicas=16)
    plain = capacity_on(uneven_bursts(), small_table(), small_calibration(), ["fixed:2"], **args)
    off = capacity_on(uneven_bursts(), small_table(), small_calibration(), ["fixed:2"], window_resamples=None,
                   windows=None, **args)
    assert off.to_dict() == plain.to_dict()
    doc = plain.to_dict()
    assert "window_resampling" not in doc and "interval_includes" not in doc["policies"][0]
    assert "window_resamples" not in doc["policies"][0]["probes"][0]
    assert plain.interval_includes == "3 draft-outcome seeds"


def test_window_resampling_widens_or_keeps_every_interval_and_is_deterministic():
    args = dict(slo=SLO(ttft_s=0.15, attainment=0.95), options=OPTS, max_replicas=16)
    plain = capacity_on(uneven_bursts(), small_table(), small_calibration(), ["fixed:2"], **args)
    on = capacity_on(uneven_bursts(), small_table(), small_calibration(), ["fixed:2"], window_resamples=6, windows=8,
                  **args)
    assert capacity_on(uneven_bursts(), small_table(), small_calibration(), ["fixed:2"], window_resamples=6, windows=8,
                    **args).to_dict() == on.to_dict()
    widened = 0
    for a, b in zip(plain.policies, on.policies):
        before = {q.units: q for q in a.probes}
        for q in b.probes:
            if q.units not in before:
                continue
            p = before[q.units]
            # The point stays the trace's own; the interval holds Wilson's interval over seeds.
            assert q.attainment == p.attainment and q.trials == p.trials
            assert q.attainment_low <= p.attainment_low and q.attainment_high >= p.attainment_high
            assert q.window_resamples == 6 and len(q.resample_attainments) == 6 and q.window_half_width >= 0
            widened += q.attainment_low < p.attainment_low
        assert b.interval_includes == "3 draft-outcome seeds and 6 window resamples (8 windows)"
        assert b.attainment_low >= 0.95
    assert widened  # at K replicas the uneven second half spreads the resamples' attainments
    doc = on.to_dict()
    assert doc["window_resampling"] == {"resamples": 6, "windows": 8,
                                        "interval_includes": "3 draft-outcome seeds and 6 window resamples (8 windows)"}
    json.dumps(doc, allow_nan=False)
    pytest.importorskip("pandas")
    df = on.to_frame()
    assert set(df["interval_includes"]) == {on.interval_includes} and "window_half_width" in df


def test_resampled_traces_keep_each_windows_gaps():
    from specsim.studies.windows import resample_windows

    reqs = requests([(0.5 * i * i, 10 + i, 1 + i % 3) for i in range(40)])
    a = resample_windows(reqs, 3, 4, seed=7)
    assert len(a) == 3 and all(x.shape[0] == 40 for x in a)
    assert all(np.array_equal(x, y) for x, y in zip(a, resample_windows(reqs, 3, 4, seed=7)))
    assert not all(np.array_equal(x, y) for x, y in zip(a, resample_windows(reqs, 3, 4, seed=8)))
    windows = [reqs[i:i + 10] for i in range(0, 40, 10)]
    for x in a:
        assert x["arrival_s"][0] == reqs["arrival_s"][0] and (np.diff(x["arrival_s"]) >= 0).all()
        for i in range(0, 40, 10):
            piece = x[i:i + 10]
            w = next(w for w in windows if np.array_equal(w["prompt_tokens"], piece["prompt_tokens"]))
            assert np.allclose(np.diff(piece["arrival_s"]), np.diff(w["arrival_s"]))


def test_widening_adds_the_resample_spread_in_quadrature():
    from specsim.studies.windows import widened

    h, (lo, hi) = widened(0.9, (0.88, 0.91), (0.9, 0.9, 0.9))
    assert h == 0.0 and (lo, hi) == (0.88, 0.91)
    h, (lo, hi) = widened(0.9, (0.88, 0.91), (0.85, 0.95))
    assert h == pytest.approx(12.706 * np.std([0.85, 0.95], ddof=1))
    assert lo < 0.01 and hi == 1.0  # two resamples this far apart leave little to say
    h, (lo, hi) = widened(0.9, (0.88, 0.91), (0.89, 0.9, 0.91, 0.9))
    assert lo == pytest.approx(0.9 - np.hypot(0.02, h)) and hi == pytest.approx(0.9 + np.hypot(0.01, h))


@pytest.mark.parametrize("kw, message", [
    (dict(window_resamples=1), "resampling.resamples = 1 must be a whole number of resampled traces in 2..64"),
    (dict(window_resamples=65), "in 2..64"),
    (dict(window_resamples=2.5), "whole number"),
    (dict(window_resamples=4, windows=1), "resampling.windows = 1 must be a whole number in 2..20"),
    (dict(window_resamples=4, windows=21), "allow windows of at least 10 requests each"),
    (dict(windows=4), "window resampling, which is off"),
])
def test_window_resampling_refuses_bad_settings(kw, message):
    with pytest.raises(CapacityError, match=message.replace(".", r"\.")):
        capacity_on(uneven_bursts(), small_table(), small_calibration(), ["fixed:2"], slo=SLO(ttft_s=0.15),
                 options=OPTS, **kw)


def test_window_resampling_needs_twenty_requests():
    with pytest.raises(CapacityError, match="needs at least 20"):
        capacity_on(bursts(periods=3), small_table(), small_calibration(), ["fixed:2"],
                 slo=SLO(ttft_s=0.15, attainment=0.5), options=OPTS, window_resamples=2)


def test_cli_window_resampling(tmp_path):
    write_inputs(tmp_path)
    run = cli(tmp_path, "--policy", "fixed:2", "--attainment", "0.95", "--resample-windows", "3",
              "--window-count", "4", "--json", "cap.json", "--quiet")
    assert run.returncode == 0, run.stderr
    assert "95% interval*" in run.stdout and "includes window resampling: 3 draft-outcome seed(s)" not in run.stdout
    assert "the interval includes window resampling: 3 draft-outcome seeds and 3 window resamples (4 windows)" \
        in run.stdout
    doc = json.loads((tmp_path / "cap.json").read_text())
    assert doc["window_resampling"]["resamples"] == 3 and doc["window_resampling"]["windows"] == 4
    assert all(p["interval_includes"].endswith("(4 windows)") for p in doc["policies"])


@pytest.mark.parametrize("extra, message", [
    (("--resample-windows", "1"), "--resample-windows = 1 must be a whole number of resampled traces in 2..64"),
    (("--resample-windows", "3", "--window-count", "11"), "--window-count = 11 must be a whole number in 2..10"),
    (("--window-count", "4"), "give --resample-windows N (2 or more) as well"),
])
def test_cli_window_resampling_refusals(tmp_path, extra, message):
    write_inputs(tmp_path)
    run = cli(tmp_path, "--policy", "fixed:2", "--attainment", "0.95", "--json", "cap.json", *extra)
    assert run.returncode == 2 and message in run.stderr and "Traceback" not in run.stderr, run.stderr
    assert not (tmp_path / "cap.json").exists()
