"""Drift alarm: the CUSUM kernel against the plain reference, alarms on shifted data and not on
in-control data, the real GLM traces (a pre-fix drafter against a fixed one), and the CLI."""

import json
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from specsim import DriftSettings, OnlineCalibration
from specsim.calibration import AcceptanceCalibration, DrafterKey
from specsim.calibration.online import false_alarm_rate, monitor_runs, chain_runs
from specsim.calibration.fit import counts_from_steps, fit_counts
from specsim.sim.replay import load_acceptance_file
from tests.reference import ref_cusum, ref_online_step

DRAFTER = DrafterKey("cd" * 32, 151552, "nvfp4", True)
EDGES = [-2.0, -1.0, -0.5, 0.0]
CAL = AcceptanceCalibration(DRAFTER, EDGES, [0.3, 0.3, 0.6, 0.85], [0.7, 0.6, 0.5])
GLM = "metrale/glm53_flash_dflash2_gb10x3.toml"

# The settings docs/telemetry.md states, and the rates it reports for them.
DEFAULT = DriftSettings()


def step_outcomes(cal, batch):
    """Per monitored stream (pools, then positions) the (outcomes, acceptances) of one step."""
    conf, n_conf, run = batch
    acc, rej, steps, _ = ref_online_step([float(e) for e in cal.edges], conf, n_conf, run)
    pools = []
    for b in range(len(acc)):
        if b == 0 or cal.p_accept[b] != cal.p_accept[b - 1]:
            pools.append([0, 0])
        pools[-1][0] += acc[b] + rej[b]
        pools[-1][1] += acc[b]
    positions = [[0, 0] for _ in cal.priors]
    for (d, a), c in steps.items():
        for j in range(min(a + 1, d)):
            if j < len(positions):
                positions[j][0] += c
                positions[j][1] += c * (j < a)
    return [tuple(p) for p in pools + positions]


@st.composite
def shifted_batches(draw):
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    steps = draw(st.integers(1, 30))
    width = draw(st.integers(0, 12))
    lift = draw(st.floats(-0.4, 0.2))
    out = []
    for _ in range(steps):
        conf = (-rng.exponential(0.8, (width, 4))).astype(np.float32)
        n_conf = rng.integers(0, 5, width).astype(np.int64)
        p = np.clip(np.exp(conf * 0.5) + lift, 0, 1)
        ok = rng.random((width, 4)) < p
        run = np.array([int(np.cumprod(ok[i, :d]).sum()) for i, d in enumerate(n_conf)], dtype=np.int64)
        out.append((conf, n_conf, run))
    return out


@settings(max_examples=50, deadline=None)
@given(shifted_batches(), st.floats(0.1, 1.0), st.floats(0.5, 8.0))
def test_cusum_kernel_matches_the_reference(batches, shift, threshold):
    s = DriftSettings(shift=shift, threshold=threshold)
    online = OnlineCalibration(CAL, max_depth=4, drift=s)
    for b in batches:
        online.update(*b)
    rates = [0.3, 0.6, 0.85, 0.7, 0.6, 0.5]
    stats, alarms = ref_cusum(rates, shift, threshold, [step_outcomes(CAL, b) for b in batches])
    np.testing.assert_allclose(online.statistics(), np.array(stats), rtol=1e-9, atol=1e-9)
    rep = online.drift()
    names = {"down": 0, "up": 1}
    got = {(online.streams.index(a.stream), names[a.direction]): (a.since_step, a.alarm_step) for a in rep.alarms}
    assert got == alarms


def test_streams_are_pools_then_positions():
    online = OnlineCalibration(CAL)
    assert [s.label for s in online.streams] == [
        "pool of buckets 0..1", "bucket 2", "bucket 3", "position 1", "position 2", "position 3"]


def test_in_control_runs_stay_quiet_at_the_stated_rate():
    # docs/telemetry.md states about 0.4% of in-control runs of 2,000 chains raise any alarm at
    # the default threshold (three fitted positions, both directions). Measured here over 200
    # seeded runs; the bound leaves room for the sampling error of 200 runs, not for a monitor
    # an order of magnitude noisier.
    cal = AcceptanceCalibration(DRAFTER, [0.0], [0.5], [0.62, 0.48, 0.40])
    rate = false_alarm_rate(cal, depth=5, steps=2000, runs=200, settings=DEFAULT, seed=1000)
    assert rate <= 0.02
    # A lower threshold trades quiet for speed: the same runs alarm far more often at 4 nats.
    loud = false_alarm_rate(cal, depth=5, steps=2000, runs=50, settings=DriftSettings(threshold=4.0), seed=1000)
    assert loud > rate


def test_a_change_is_caught_and_dated():
    cal = AcceptanceCalibration(DRAFTER, [0.0], [0.5], [0.62, 0.48, 0.40])
    before = chain_runs([0.62, 0.48, 0.40], 5, 300, seed=4)
    after = chain_runs([0.50, 0.40, 0.35], 5, 600, seed=5)
    runs = np.concatenate([before, after])
    rep, hist = monitor_runs(cal, np.full(runs.shape[0], 5), runs, DEFAULT, history=True)
    assert rep.drifted
    first = min(rep.alarms, key=lambda a: a.alarm_step)
    assert first.alarm_step >= 300  # not before the change
    assert first.since_step >= 200  # the excursion that raised it began around the change
    assert first.direction == "down" and first.change < 0
    assert hist.shape == (900, 4)


def _trace_steps(trace):
    a = np.minimum(trace.accepted.astype(np.int64), trace.k_logged)
    return np.full(a.shape[0], trace.k_logged, dtype=np.int64), a


def _fit_on(trace):
    d, a = _trace_steps(trace)
    steps = {}
    for x, y in zip(d.tolist(), a.tolist()):
        steps[(x, y)] = steps.get((x, y), 0) + 1
    return fit_counts(DRAFTER, counts_from_steps(steps, source=trace.name)).calibration


def test_real_pre_fix_drafter_raises_the_alarm(shared_data):
    # Fitted on the fixed drafter's 1:7-ladder trace; the pre-fix drafter on the same ladder
    # accepts less at position 1 (0.54 against 0.62). docs/telemetry.md reports the delay.
    traces = load_acceptance_file(shared_data / GLM).traces
    cal = _fit_on(traces["glm53_dflash_fk7"])
    rep, _ = monitor_runs(cal, *_trace_steps(traces["glm53_dflash_dk7"]), DEFAULT)
    assert rep.drifted
    first = min(rep.alarms, key=lambda a: a.alarm_step)
    assert first.alarm_step <= 300  # 265 steps at the default threshold
    assert first.stream.label == "position 1" and first.direction == "down"


@pytest.mark.parametrize("held_out", ["glm53_dflash_dpa2", "glm53_dflash_fk4"])
def test_real_same_drafter_stays_quiet(shared_data, held_out):
    traces = load_acceptance_file(shared_data / GLM).traces
    cal = _fit_on(traces["glm53_dflash_fk7"])
    rep, _ = monitor_runs(cal, *_trace_steps(traces[held_out]), DEFAULT)
    assert not rep.drifted, rep.format()


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "specsim", *map(str, args)], capture_output=True, text=True)


def test_cli_verdict_json_and_plot(shared_data, tmp_path):
    traces = load_acceptance_file(shared_data / GLM).traces
    cal_path = tmp_path / "fixed.toml"
    cal_path.write_text(_fit_on(traces["glm53_dflash_fk7"]).render())
    out = tmp_path / "v.json"
    png = tmp_path / "v.png"
    r = _cli("calib", "drift", cal_path, "--acceptance", shared_data / GLM, "--trace", "glm53_dflash_dk7",
             "--json", out, "--plot", png)
    assert r.returncode == 0, r.stderr
    assert "DRIFT" in r.stdout and "position 1: down" in r.stdout
    doc = json.loads(out.read_text())
    assert doc["drifted"] and doc["alarms"][0]["since_step"] <= doc["alarms"][0]["alarm_step"]
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    r = _cli("calib", "drift", cal_path, "--acceptance", shared_data / GLM, "--trace", "glm53_dflash_dpa2")
    assert r.returncode == 0 and "no drift" in r.stdout


def test_cli_per_draft_and_per_step_logs(tmp_path):
    rng = np.random.default_rng(2)
    rows = ["step,sequence,position,confidence,accepted"]
    steps = ["drafts,accepted"]
    for t in range(400):
        alive = True
        run = 0
        for j in range(1, 4):
            conf = -rng.exponential(0.5)
            ok = rng.random() < 0.3  # far below CAL: every stream drifts down
            rows.append(f"{t},0,{j},{conf:.4f},{int(ok)}")
            if alive and ok:
                run += 1
            alive = alive and ok
        steps.append(f"3,{run}")
    (tmp_path / "d.csv").write_text("\n".join(rows) + "\n")
    (tmp_path / "s.csv").write_text("\n".join(steps) + "\n")
    cal_path = tmp_path / "c.toml"
    cal_path.write_text(CAL.render())
    for flag, name in (("--drafts-log", "d.csv"), ("--steps-log", "s.csv")):
        r = _cli("calib", "drift", cal_path, flag, tmp_path / name)
        assert r.returncode == 0, r.stderr
        assert "DRIFT" in r.stdout and "position 1: down" in r.stdout


def test_cli_refuses_an_output_over_an_input(tmp_path):
    cal_path = tmp_path / "c.toml"
    cal_path.write_text(CAL.render())
    r = _cli("calib", "drift", cal_path, "--steps-log", tmp_path / "s.csv", "--json", cal_path)
    assert r.returncode == 2 and "specsim: error:" in r.stderr and "Traceback" not in r.stderr
    assert AcceptanceCalibration.load(cal_path) == CAL


def test_cli_from_serving_telemetry(tmp_path):
    from tests.interop.test_telemetry import vllm_line

    cal = AcceptanceCalibration(DRAFTER, [0.0], [0.5], [0.8, 0.6, 0.5])
    cal_path = tmp_path / "c.toml"
    cal_path.write_text(cal.render())
    lines = []
    for t in range(60):  # intervals of 200 steps; from interval 30 on, position 1 drops to 0.7
        p1 = 0.8 if t < 30 else 0.7
        runs = chain_runs([p1, 0.6, 0.5], 3, 200, seed=t)
        lines.append(vllm_line([int((runs >= j).sum()) for j in (1, 2, 3)], 200, 3))
    log = tmp_path / "v.log"
    log.write_text("\n".join(lines) + "\n")
    out = tmp_path / "v.json"
    r = _cli("calib", "drift", cal_path, "--from-log", log, "--json", out)
    assert r.returncode == 0, r.stderr
    doc = json.loads(out.read_text())
    first = min(doc["alarms"], key=lambda a: a["alarm_step"])
    assert first["stream"] == "position 1" and first["direction"] == "down"
    assert 30 <= first["alarm_step"] <= 35 and 25 <= first["since_step"] <= 31
    mean_only = tmp_path / "s.log"
    mean_only.write_text("[x] Decode batch, #running-req: 4, #token: 9, token usage: 0.05, accept len: 2.50\n")
    r = _cli("calib", "drift", cal_path, "--from-log", mean_only)
    assert r.returncode == 2 and "mean acceptance only" in r.stderr
