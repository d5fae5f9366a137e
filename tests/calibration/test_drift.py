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


# -- traffic that varies more than binomial chance ------------------------------------------------------

def _fit_intervals(batches):
    """The calibration ``calib import`` fits on interval records: positions from every chain, and
    the intervals' over-dispersion recorded."""
    from specsim.calibration.drift import with_dispersion

    steps = {}
    for b in batches:
        for key, c in b.items():
            steps[key] = steps.get(key, 0) + c
    return with_dispersion(fit_counts(DRAFTER, counts_from_steps(steps, source="intervals")).calibration, batches)


def test_dispersion_is_pearsons_factor_at_its_upper_bound_and_1_for_binomial_traffic():
    from specsim.calibration.drift import estimate_dispersion, position_outcomes
    from specsim.calibration.online import interval_batches

    batches = interval_batches([0.75, 0.6, 0.5], 3, 1000, 60, 0.3, seed=3)
    counts = position_outcomes(batches, 3)
    n, k = counts[:, 0, 0].astype(float), counts[:, 0, 1].astype(float)
    p = k.sum() / n.sum()
    plain = (((k - n * p) ** 2) / (n * p * (1 - p))).sum() / 59
    phi, intervals = estimate_dispersion(batches, 3)
    assert intervals == 60 and plain > 4 and plain < phi[0] < 1.5 * plain
    # Binomial intervals (no spread): the plain factor near 1, its upper bound (x1.3 at 59 degrees of
    # freedom) under 2, floored at 1.
    flat, _ = estimate_dispersion(interval_batches([0.75, 0.6, 0.5], 3, 1000, 60, 0.0, seed=3), 3)
    assert all(1.0 <= v < 2.0 for v in flat)
    # Too few intervals to tell: nothing recorded.
    assert "interval_dispersion" not in _fit_intervals(batches[:4]).meta


@pytest.mark.kernels
@pytest.mark.parametrize("logit_sd", [0.1, 0.3])
def test_false_alarms_on_overdispersed_traffic_stay_at_the_stated_rate(logit_sd):
    """docs/telemetry.md ("Traffic that varies between intervals") states at most 2% of in-control
    runs alarm at the default threshold for this setup: three positions, 60 log intervals of 1,000
    chains whose log-odds move together by logit_sd x N(0, 1) per interval. Measured over 150
    seeded pairs (a calibration fitted on one log, then that log and a fresh one drawn with the
    same spread replayed): the binomial monitor alarms on most of them."""
    from specsim.calibration.online import interval_batches, monitor_steps

    runs, fitting, fresh, binomial = 150, 0, 0, 0
    for r in range(runs):
        log = interval_batches([0.75, 0.6, 0.5], 3, 1000, 60, logit_sd, seed=r)
        cal = _fit_intervals(log)
        other = interval_batches([0.75, 0.6, 0.5], 3, 1000, 60, logit_sd, seed=100_000 + r)
        fitting += monitor_steps(cal, log)[0].drifted
        fresh += monitor_steps(cal, other)[0].drifted
        binomial += monitor_steps(cal, other, DriftSettings(dispersion=1.0))[0].drifted
    assert fitting == 0  # never on the log the calibration was fitted from
    assert fresh / runs <= 0.02
    assert binomial / runs > 0.5  # what the plain binomial test did on such traffic


@pytest.mark.kernels
def test_a_real_drop_on_overdispersed_traffic_is_still_caught_and_its_message_says_which_way():
    from specsim.calibration.online import interval_batches, monitor_steps

    cal = _fit_intervals(interval_batches([0.75, 0.6, 0.5], 3, 1000, 60, 0.1, seed=7))
    before = interval_batches([0.75, 0.6, 0.5], 3, 1000, 30, 0.1, seed=8)
    after = interval_batches([0.55, 0.6, 0.5], 3, 1000, 30, 0.1, seed=9)
    rep, _ = monitor_steps(cal, before + after)
    first = min(rep.alarms, key=lambda a: a.alarm_step)
    assert first.stream.label == "position 1" and first.direction == "down" and 30 <= first.alarm_step <= 40
    assert first.observed_rate < first.stream.rate
    text = rep.format()
    assert f"position 1: down: acceptance fell from the calibrated {first.stream.rate:.3f} to {first.observed_rate:.3f}" in text
    assert "over-dispersion of the fitting data allowed for: position 1 x" in text
    doc = rep.to_dict()
    assert doc["alarms"][0]["relative_change"] == pytest.approx(first.change / first.stream.rate)


@pytest.mark.kernels
@settings(max_examples=40, deadline=None)
@given(shifted_batches(), st.floats(0.1, 1.0), st.floats(0.5, 8.0))
def test_an_alarm_says_the_rate_moved_its_way_over_the_outcomes_up_to_it(batches, shift, threshold):
    """Never an up alarm where the observed rate is at or below the calibrated one (the outcomes
    counted are those from the change's start to the alarm, not on to the end of the log)."""
    online = OnlineCalibration(CAL, max_depth=4, drift=DriftSettings(shift=shift, threshold=threshold))
    for b in batches:
        online.update(*b)
    for a in online.drift().alarms:
        assert (a.observed_rate > a.stream.rate) if a.direction == "up" else (a.observed_rate < a.stream.rate)
        assert a.outcomes > 0


@pytest.mark.kernels
@settings(max_examples=30, deadline=None)
@given(shifted_batches(), st.floats(0.1, 1.0), st.floats(0.5, 8.0), st.floats(1.0, 10.0))
def test_cusum_kernel_with_dispersion_matches_the_reference(batches, shift, threshold, phi):
    online = OnlineCalibration(CAL, max_depth=4, drift=DriftSettings(shift=shift, threshold=threshold, dispersion=phi))
    for b in batches:
        online.update(*b)
    rates = [0.3, 0.6, 0.85, 0.7, 0.6, 0.5]
    stats, _ = ref_cusum(rates, shift, threshold, [step_outcomes(CAL, b) for b in batches], [phi] * 6)
    np.testing.assert_allclose(online.statistics(), np.array(stats), rtol=1e-9, atol=1e-9)


def test_recorded_dispersion_is_checked_when_the_calibration_is_read(tmp_path):
    from specsim.errors import CalibrationError

    good = AcceptanceCalibration(DRAFTER, [0.0], [0.5], [0.8, 0.6], meta={"interval_dispersion": [2.5, 1.0]})
    path = tmp_path / "c.toml"
    path.write_text(good.render())
    assert AcceptanceCalibration.load(path).meta["interval_dispersion"] == [2.5, 1.0]
    assert OnlineCalibration(AcceptanceCalibration.load(path)).drift().dispersion == (1.0, 2.5, 1.0)
    for bad, says in (("[0.5, 1.0]", "position 1"), ("[2.0, 1.0, 1.0]", "3 factors for 2"), ('"x"', "give a list"),
                      ("[nan]", "position 1"), ("[]", "give a list")):
        path.write_text(good.render().replace("interval_dispersion = [2.5, 1.0]", f"interval_dispersion = {bad}"))
        with pytest.raises(CalibrationError, match=says) as info:
            AcceptanceCalibration.load(path)
        assert str(path) in str(info.value)
    with pytest.raises(CalibrationError, match="drift dispersion"):
        DriftSettings(dispersion=0.5)


def test_cli_import_records_the_spread_and_drift_allows_for_it(tmp_path):
    from specsim.calibration.online import interval_batches
    from tests.interop.test_telemetry import vllm_line

    lines = []
    for b in interval_batches([0.75, 0.6, 0.5], 3, 1000, 60, 0.3, seed=11):
        reached = [sum(c for (d, a), c in b.items() if a >= j) for j in (1, 2, 3)]
        lines.append(vllm_line(reached, sum(b.values()), 3))
    log = tmp_path / "v.log"
    log.write_text("\n".join(lines) + "\n")
    cal_path = tmp_path / "c.toml"
    r = _cli("calib", "import", log, "--drafter-sha256", "cd" * 32, "--vocab", "1000", "--quantization", "bf16",
             "--context", "true", "-o", cal_path)
    assert r.returncode == 0, r.stderr
    assert "over-dispersion by position" in r.stdout
    phi = AcceptanceCalibration.load(cal_path).meta["interval_dispersion"]
    assert len(phi) == 3 and phi[0] > 2
    r = _cli("calib", "drift", cal_path, "--from-log", log)
    assert r.returncode == 0 and "no drift" in r.stdout and "allowed for" in r.stdout, r.stdout
    r = _cli("calib", "drift", cal_path, "--from-log", log, "--dispersion", "1")
    assert r.returncode == 0 and "DRIFT" in r.stdout  # the plain binomial test on its own fitting log
