"""Telemetry of a serve whose draft depth followed a width schedule, written in each engine's
format, imports exactly at every position it reports, or is refused naming the way out.

The serve: steps of random batch width, each request in the batch drafting the depth the
schedule gives that width and accepting a run drawn from known conditional rates. Every source
is written from the same steps as the engine counts them (docs/telemetry.md)."""

import json

import numpy as np
import pytest

from specsim.calibration import DrafterKey
from specsim.calibration.from_telemetry import calibration_from, identify
from specsim.interop import read_telemetry
from specsim.errors import CalibrationError

TRUTH = [0.807, 0.739, 0.670, 0.687]
K = 4  # num_speculative_tokens: the deepest the schedule drafts
SCHEDULE = ((1, 4, 4), (5, 8, 3), (9, None, 2))  # shallowest depth 2
DRAFTER = DrafterKey("ab" * 32, 32000, "bf16", True)


def depth_at(width):
    return next(k for lo, hi, k in SCHEDULE if lo <= width and (hi is None or width <= hi))


def serve(n_batches=9000, seed=3, rates=TRUTH):
    """Steps of a serve: ``(batch, request, depth, accepted run)`` arrays, batches of widths 1-12
    drawn from 40 requests, in serve order."""
    rng = np.random.default_rng(seed)
    widths = rng.integers(1, 13, n_batches)
    depth_of = np.array([0] + [depth_at(w) for w in range(1, 13)])
    batch = np.repeat(np.arange(n_batches), widths)
    req = np.concatenate([rng.choice(40, w, replace=False) for w in widths])
    depth = depth_of[np.repeat(widths, widths)]
    u = rng.random((len(batch), K))
    ok = u < np.asarray(rates)[None, :]
    ok &= np.arange(K)[None, :] < depth[:, None]
    run = np.cumprod(ok, axis=1).sum(axis=1)
    return batch, req, depth, run


def _groups(key, n):
    return [np.flatnonzero(key == i) for i in range(n)]


def vllm_log(steps, intervals=12):
    batch, _, depth, run = steps
    lines = []
    for part in np.array_split(np.arange(len(batch)), intervals):
        n, acc, drafted = len(part), int(run[part].sum()), int(depth[part].sum())
        rates = ", ".join(f"{(run[part] >= j).sum() / n:.3f}" for j in range(1, K + 1))
        lines.append(f"(APIServer pid=1) INFO 12-01 10:00:00 [metrics.py:137] SpecDecoding metrics: Mean acceptance "
                     f"length: {1 + acc / n:.2f}, Accepted throughput: 80.00 tokens/s, Drafted throughput: 120.00 "
                     f"tokens/s, Accepted: {acc} tokens, Drafted: {drafted} tokens, Per-position acceptance rate: "
                     f"{rates}, Avg Draft acceptance rate: {100 * acc / drafted:.1f}%")
    return "\n".join(lines) + "\n"


def vllm_prometheus(steps):
    _, _, depth, run = steps
    lab = 'engine="0",model_name="m"'
    lines = [f"vllm:spec_decode_num_drafts_total{{{lab}}} {float(len(run))}",
             f"vllm:spec_decode_num_draft_tokens_total{{{lab}}} {float(depth.sum())}",
             f"vllm:spec_decode_num_accepted_tokens_total{{{lab}}} {float(run.sum())}"]
    lines += [f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{{lab},position="{j}"}} {float((run > j).sum())}'
              for j in range(K)]
    return "\n".join(lines) + "\n"


def vllm_bench_text(steps):
    _, _, depth, run = steps
    n = len(run)
    rows = [f"{'Acceptance rate (%):':<40} {100 * run.sum() / depth.sum():<10.2f}",
            f"{'Acceptance length:':<40} {1 + run.sum() / n:<10.2f}",
            f"{'Drafts:':<40} {n:<10}", f"{'Draft tokens:':<40} {int(depth.sum()):<10}",
            f"{'Accepted tokens:':<40} {int(run.sum()):<10}", "Per-position acceptance (%):"]
    rows += [f"{f'  Position {j}:':<40} {100 * (run > j).sum() / n:<10.2f}" for j in range(K)]
    return ("=" * 50 + "\n" + "-" * 15 + "Speculative Decoding" + "-" * 15 + "\n" + "\n".join(rows) + "\n"
            + "=" * 50 + "\n")


def vllm_bench_json(steps):
    _, _, depth, run = steps
    n = len(run)
    return json.dumps({"completed": 40, "spec_decode_acceptance_rate": 100 * run.sum() / depth.sum(),
                       "spec_decode_acceptance_length": 1 + run.sum() / n, "spec_decode_num_drafts": n,
                       "spec_decode_draft_tokens": int(depth.sum()), "spec_decode_accepted_tokens": int(run.sum()),
                       "spec_decode_per_position_acceptance_rates": [float((run > j).sum() / n) for j in range(K)]})


def per_request(steps, engine, detailed=False):
    _, req, depth, run = steps
    out = []
    for i, idx in enumerate(_groups(req, 40)):
        hist = np.bincount(run[idx], minlength=K + 1).tolist()
        if engine == "vllm":
            block = {"mean_acceptance_length": 1 + run[idx].mean(), "acceptance_histogram": hist,
                     "num_spec_steps": len(idx), "num_accepted_draft_tokens": int(run[idx].sum()),
                     "num_draft_tokens": int(depth[idx].sum()), "num_spec_tokens": K}
            if detailed:
                block["per_step_accepted"] = run[idx].tolist()
                block["per_step_drafted"] = depth[idx].tolist()
            out.append({"id": f"r{i}", "metrics": {"speculative_decoding": block}})
        elif engine == "trtllm":  # open PR #19311's payload: num_spec_tokens null under draft_len_schedule
            out.append({"request_id": i, "speculative_decoding": {
                "acceptance_histogram": hist, "num_spec_steps": len(idx), "num_spec_tokens": None,
                "total_accepted_draft_tokens": int(run[idx].sum()), "total_draft_tokens": int(depth[idx].sum()),
                "acceptance_rate": float(run[idx].sum() / depth[idx].sum())}})
        elif engine == "trtllm-released":
            out.append({"request_id": i, "speculative_decoding": {
                "acceptance_rate": float(run[idx].sum() / depth[idx].sum()),
                "total_accepted_draft_tokens": int(run[idx].sum()), "total_draft_tokens": int(depth[idx].sum())}})
        else:  # SGLang meta_info: the histogram grows to the largest run + 1
            top = int(run[idx].max())
            out.append({"text": "", "meta_info": {
                "id": f"r{i}", "completion_tokens": int(len(idx) + run[idx].sum() + 1), "spec_verify_ct": len(idx),
                "spec_num_correct_drafts": int(run[idx].sum()), "spec_num_proposed_drafts": int(depth[idx].sum()),
                "spec_correct_drafts_histogram": hist[:top + 1],
                "spec_accept_length": (len(idx) + run[idx].sum() + 1) / len(idx)}})
    return "\n".join(json.dumps(d) for d in out) + "\n"


def trtllm_iterations(steps):
    batch, _, depth, run = steps
    its = []
    for b, idx in enumerate(_groups(batch, batch.max() + 1)):
        w = len(idx)
        its.append({"iter": b, "iterLatencyMS": 12.0, "specDecodingStats": {
            "numDraftTokens": int(depth[idx].sum()), "numAcceptedTokens": int(run[idx].sum()),
            "numRequestsWithDraftTokens": w, "acceptanceLength": float(1 + run[idx].sum() / w)},
            "inflightBatchingStats": {"numScheduledRequests": w, "numGenRequests": w, "numContextRequests": 0}})
    return "\n".join(json.dumps(i) for i in its) + "\n"


WRITERS = {
    "vllm-log": vllm_log, "vllm-prometheus": vllm_prometheus, "vllm-bench": vllm_bench_text,
    "vllm-bench-json": vllm_bench_json, "vllm-request": lambda s: per_request(s, "vllm"),
    "trtllm-request": lambda s: per_request(s, "trtllm"), "sglang-request": lambda s: per_request(s, "sglang"),
}


@pytest.fixture(scope="module")
def steps():
    return serve()


def _import(tmp_path, text, **kw):
    p = tmp_path / "telemetry.txt"
    p.write_text(text)
    fmt, records, tally = read_telemetry([p])
    return fmt, identify(fmt, records, tally, files=["telemetry.txt"], **kw)


def _priors(ident):
    return calibration_from(ident, DRAFTER).priors


@pytest.mark.parametrize("source", sorted(WRITERS))
def test_variable_depth_is_refused_naming_the_way_out(tmp_path, steps, source):
    with pytest.raises(CalibrationError, match="depth varied") as e:
        _import(tmp_path, WRITERS[source](steps))
    text = str(e.value)
    assert "--per-request-spec-decode-metrics detailed" in text and "--schedule FILE" in text


@pytest.mark.parametrize("source", sorted(WRITERS))
def test_the_positions_every_step_reached_import_within_001(tmp_path, steps, source):
    fmt, ident = _import(tmp_path, WRITERS[source](steps), min_depth=2)
    assert fmt == source.replace("-json", "")
    priors = _priors(ident)
    assert len(priors) == 2, priors  # positions past the shallowest depth are not reported
    for j, p in enumerate(priors):
        assert abs(p - TRUTH[j]) < 0.01, (source, j, p)
    assert ident.meta["positions_kept"].startswith("1-2")


def test_what_today_s_reading_would_have_said(steps):
    """Position 3 read over every step (the bias the refusal prevents) is far from the truth."""
    _, _, _, run = steps
    naive = (run >= 3).sum() / (run >= 2).sum()
    assert naive < TRUTH[2] - 0.1


def test_per_step_arrays_are_exact_at_every_depth(tmp_path, steps):
    _, ident = _import(tmp_path, per_request(steps, "vllm", detailed=True))
    priors = _priors(ident)
    assert len(priors) == K
    for j, p in enumerate(priors):
        assert abs(p - TRUTH[j]) < 0.01, (j, p)


def test_the_log_line_counts_the_drafting_steps(steps):
    from specsim.interop.vllm import parse_log

    text = vllm_log(steps, intervals=1)
    records, tally = parse_log(text, "x.log")
    assert records[0].variable and abs(records[0].reached[0] - len(steps[0])) <= 0.002 * len(steps[0])
    assert tally.notes["mean_acceptance_length"] == "with bonus token"


def test_a_fixed_depth_log_line_is_not_flagged():
    from specsim.interop.vllm import parse_log

    steps = serve(n_batches=800, seed=5)
    fixed = (steps[0], steps[1], np.full_like(steps[2], K), steps[3])
    records, _ = parse_log(vllm_log(fixed, intervals=3), "x.log")
    assert [r.variable for r in records] == [None] * 3


def test_schedule_file_gives_the_shallowest_depth(tmp_path, steps):
    import subprocess
    import sys

    tel = tmp_path / "serve.log"
    tel.write_text(vllm_log(steps))
    cfg = tmp_path / "vllm.json"
    cfg.write_text(json.dumps({"method": "eagle3", "num_speculative_tokens": 4,
                               "num_speculative_tokens_per_batch_size": [[1, 4, 4], [5, 8, 3], [9, 256, 2]]}))
    key = ["--drafter-sha256", "ab" * 32, "--vocab", "32000", "--quantization", "bf16", "--context", "true"]
    run = [sys.executable, "-m", "specsim", "calib", "import", str(tel), *key, "-o", str(tmp_path / "c.toml")]
    r = subprocess.run(run, capture_output=True, text=True)
    assert r.returncode == 2 and "depth varied" in r.stderr and not (tmp_path / "c.toml").exists()
    r = subprocess.run(run + ["--schedule", f"vllm:{cfg}"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    from specsim.calibration import AcceptanceCalibration

    cal = AcceptanceCalibration.load(tmp_path / "c.toml")
    assert len(cal.priors) == 2 and abs(cal.priors[1] - TRUTH[1]) < 0.01


def test_mean_only_sources_are_refused_and_fit_each_iteration_at_its_own_depth(tmp_path):
    steps = serve(n_batches=3000, seed=9, rates=[0.7] * K)
    for text in (trtllm_iterations(steps), per_request(steps, "trtllm-released")):
        with pytest.raises(CalibrationError, match="mean acceptance only"):
            _import(tmp_path, text)
    fmt, ident = _import(tmp_path, trtllm_iterations(steps), assume="constant-rate")
    assert fmt == "trtllm-iteration" and ident.meta["depth"] == "2-4 (each record at its own depth)"
    assert abs(ident.constant_rate - 0.7) < 0.01
    # the released per-request block: steps are drafted tokens / --depth, a mean at one depth
    fmt, ident = _import(tmp_path, per_request(steps, "trtllm-released"), assume="constant-rate", depth=4)
    assert fmt == "trtllm-request" and ident.depth == 4


def _line(mal="2.20", acc=120, drafted=400, rates="0.800, 0.400, 0.000, 0.000"):
    return (f"INFO [metrics.py:137] SpecDecoding metrics: Mean acceptance length: {mal}, Accepted throughput: 1.00 "
            f"tokens/s, Drafted throughput: 1.00 tokens/s, Accepted: {acc} tokens, Drafted: {drafted} tokens, "
            f"Per-position acceptance rate: {rates}, Avg Draft acceptance rate: 30.0%")


LAB = 'engine="0",model_name="m"'
BAD = [
    ("vllm-log", _line()[:90], "without `Accepted"),  # a truncated line
    ("vllm-log", _line(rates="1.200, 0.400, 0.000, 0.000"), "not numbers in \\[0, 1\\]"),
    ("vllm-log", _line(rates="0.400, 0.800, 0.000, 0.000"), "cannot rise"),
    ("vllm-log", _line(mal="inf"), "not a finite number"),
    ("vllm-log", _line(mal="3.50"), "contradict"),
    ("vllm-log", _line(acc=50 * 256, drafted=100 * 256, mal="129.00", rates=", ".join(["0.500"] * 256)), "at most 255"),
    ("vllm-prometheus", f"vllm:spec_decode_num_drafts_total{{{LAB}}} 100\n"
                        f"vllm:spec_decode_num_draft_tokens_total{{{LAB}}} 200\n"
                        f"vllm:spec_decode_num_accepted_tokens_total{{{LAB}}} 150\n"
                        f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{{LAB},position="0"}} 80\n'
                        f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{{LAB},position="1"}} 40\n', "contradict"),
    ("vllm-prometheus", f"vllm:spec_decode_num_drafts_total{{{LAB}}} 100\n"
                        f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{{LAB},position="0"}} 40\n'
                        f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{{LAB},position="1"}} 80\n', "cannot rise"),
    ("vllm-request", json.dumps({"speculative_decoding": {"acceptance_histogram": [1, 2, 3], "num_spec_steps": 7,
                                                          "num_spec_tokens": 2}}), "contradict"),
]


@pytest.mark.parametrize("fmt, text, why", BAD)
def test_bad_input_is_named_by_file_and_line_and_strict_refuses(tmp_path, fmt, text, why):
    p = tmp_path / "bad.txt"
    p.write_text(text + "\n")
    found, records, tally = read_telemetry([p], fmt)
    assert tally.garbage == 1 and records == []
    assert tally.problems[0].startswith("bad.txt"), tally.problems
    import re

    assert re.search(why, tally.problems[0]), tally.problems
    with pytest.raises(CalibrationError, match="--strict") as e:
        read_telemetry([p], fmt, strict=True)
    assert any("bad.txt" in q for q in e.value.problems)


def test_calib_export_vllm_synthetic_serves_the_calibrations_acceptance(tmp_path):
    import subprocess
    import sys

    from specsim.calibration import AcceptanceCalibration
    from specsim.calibration.fit import calibration_from_rates

    cal = calibration_from_rates(DRAFTER, TRUTH, "conditional")
    f = tmp_path / "c.toml"
    f.write_text(cal.render())
    r = subprocess.run([sys.executable, "-m", "specsim", "calib", "export", str(f), "--to", "vllm-synthetic",
                        "--depth", "6", "-o", str(tmp_path / "s.json")], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    cfg = json.loads((tmp_path / "s.json").read_text())
    assert cfg["rejection_sample_method"] == "synthetic" and cfg["num_speculative_tokens"] == 6
    want = np.cumprod(TRUTH + [TRUTH[-1]] * 2)
    assert np.allclose(cfg["synthetic_acceptance_rates"], want, atol=1e-6)
    # the unconditional rates read back (as marginal rates) give the calibration's priors
    back = calibration_from_rates(DRAFTER, cfg["synthetic_acceptance_rates"], "marginal")
    assert np.allclose(back.priors[:4], AcceptanceCalibration.load(f).priors[:4], atol=1e-5)
    r = subprocess.run([sys.executable, "-m", "specsim", "calib", "export", str(f), "--to", "vllm-synthetic",
                        "--depth", "0"], capture_output=True, text=True)
    assert r.returncode == 2 and "Traceback" not in r.stderr


def test_drift_replays_variable_depth_telemetry_exactly_or_refuses(tmp_path, steps):
    from specsim.calibration.fit import calibration_from_rates
    from specsim.calibration.from_telemetry import record_batches

    p = tmp_path / "serve.log"
    p.write_text(vllm_log(steps))
    fmt, records, _ = read_telemetry([p])
    with pytest.raises(CalibrationError, match="depth varied"):
        record_batches(fmt, records)
    batches = record_batches(fmt, records, min_depth=2)
    assert all(d == 2 for b in batches for d, _ in b)
    from specsim.calibration import drift, online

    rep, _ = online.monitor_steps(calibration_from_rates(DRAFTER, TRUTH, "conditional"), batches, drift.DriftSettings())
    assert not rep.alarms  # the truth's own calibration: no alarm on the exact positions
