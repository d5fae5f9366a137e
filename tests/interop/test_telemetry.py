"""Importing serving telemetry: every documented variant of each format, aggregation by counts,
skipped and garbage lines, version drift, refusals, round trips, and recovery of known priors."""

import json
import math
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from specsim.calibration import AcceptanceCalibration, DrafterKey
from specsim.calibration.online import chain_runs
from specsim.calibration.from_telemetry import calibration_from, constant_rate, identify, render_windows
from specsim.interop import detect_telemetry_format, read_telemetry
from specsim.errors import CalibrationError

DRAFTER = DrafterKey("ef" * 32, 32000, "bf16", True)
KEY = ["--drafter-sha256", "ef" * 32, "--vocab", "32000", "--quantization", "bf16", "--context", "true"]


def write(tmp_path, name, text, mode="w"):
    p = tmp_path / name
    if isinstance(text, bytes):
        p.write_bytes(text)
    else:
        p.write_text(text)
    return p


def load(tmp_path, text, name="t.log", fmt=None, strict=False, assume=None, depth=None):
    p = write(tmp_path, name, text)
    found, records, tally = read_telemetry([p], fmt, strict)
    return found, identify(found, records, tally, assume, depth, [name]), tally


def vllm_line(acc, n, k, prefix="(APIServer pid=7) INFO 10-10 12:00:00 [metrics.py:96] ", extra="", mal=None,
              tail=""):
    """A current vLLM log line for an interval of ``n`` steps at depth ``k`` with ``acc[j]``
    drafts accepted at position j + 1 (3-decimal rates, as vLLM prints)."""
    drafted = n * k
    accepted = sum(acc)
    rates = ", ".join(f"{a / n:.3f}" for a in acc)
    mal = 1 + accepted / n if mal is None else mal
    return (f"{prefix}SpecDecoding metrics: Mean acceptance length: {mal:.2f}, Accepted throughput: 12.50 tokens/s, "
            f"Drafted throughput: 30.00 tokens/s, Accepted: {accepted} tokens, Drafted: {drafted} tokens, {extra}"
            f"Per-position acceptance rate: {rates}, Avg Draft acceptance rate: {100 * accepted / drafted:.1f}%{tail}")


# -- vLLM log lines ---------------------------------------------------------------------------
def test_vllm_lines_aggregate_by_counts_with_prefixes_extra_fields_and_junk(tmp_path):
    text = "\n".join([
        "INFO 10-10 11:59:00 [api_server.py:1] Starting vLLM API server",
        vllm_line([80, 50, 20], 100, 3, tail="   "),
        vllm_line([300, 150, 60], 400, 3, prefix="", extra="Rejected: 690 tokens, Effective tokens/forward: 2.27, "),
        "INFO 10-10 12:00:20 [metrics.py:96] SpecDecoding metrics: Mean acceptance length: nan, Accepted throughput: "
        "0.00 tokens/s, Drafted throughput: 0.00 tokens/s, Accepted: 0 tokens, Drafted: 0 tokens, Per-position "
        "acceptance rate: nan, nan, nan, Avg Draft acceptance rate: nan%",
        "INFO SpecDecoding metrics: Mean acceptance length: 2.",
        "garbage \ufffd",
    ])
    fmt, ident, tally = load(tmp_path, text)
    assert fmt == "vllm-log"
    # Counts add up: 500 steps, 380 at position 1, 200 at 2, 80 at 3 (not the mean of the rates).
    assert ident.steps == {(3, 0): 120, (3, 1): 180, (3, 2): 120, (3, 3): 80}
    assert (tally.zero_draft, tally.garbage, tally.other) == (1, 1, 2)
    cal = calibration_from(ident, DRAFTER)
    assert cal.priors.tolist() == [380 / 500, 200 / 380, 80 / 200]
    assert cal.meta["zero_draft_skipped"] == 1 and cal.meta["garbage_ignored"] == 1
    assert cal.meta["source_format"] == "vllm-log" and cal.meta["assumption"] == "none"


def test_vllm_line_without_the_average_field(tmp_path):
    line = vllm_line([80, 50, 20], 100, 3).split(", Avg Draft")[0] + "  "
    _, ident, _ = load(tmp_path, line)
    assert ident.steps == {(3, 0): 20, (3, 1): 30, (3, 2): 30, (3, 3): 20}


def test_vllm_mean_acceptance_length_with_and_without_bonus(tmp_path):
    with_bonus = vllm_line([80, 50, 20], 100, 3)                    # 2.50: later builds
    without = vllm_line([80, 50, 20], 100, 3, mal=1.5)              # 1.50: before mid-2025
    _, a, _ = load(tmp_path, with_bonus, "a.log")
    _, b, _ = load(tmp_path, without, "b.log")
    assert a.steps == b.steps
    assert a.meta["source_mean_acceptance_length"] == "with bonus token"
    assert b.meta["source_mean_acceptance_length"].startswith("without bonus token")


def test_vllm_early_v1_is_mean_only(tmp_path):
    text = "INFO [metrics.py:80] SpecDecoding metrics: Draft acceptance rate: 50.0%, Accepted: 600 tokens, Drafted: 1200 tokens\n"
    with pytest.raises(CalibrationError, match="--assume constant-rate"):
        load(tmp_path, text)
    with pytest.raises(CalibrationError, match="--depth"):
        load(tmp_path, text, assume="constant-rate")
    _, ident, _ = load(tmp_path, text, assume="constant-rate", depth=3)
    p = ident.constant_rate
    assert p + p * p + p ** 3 == pytest.approx(600 / 400, rel=1e-12)
    assert ident.meta["steps"] == 400 and ident.meta["assumption"].startswith("constant-rate")
    cal = calibration_from(ident, DRAFTER)
    assert cal.priors.tolist() == [p] * 3


def test_vllm_v0_lines_are_cumulative_and_resets_are_handled(tmp_path):
    def v0(acc, drafted, emitted):
        return (f"INFO 03-01 10:00:00 metrics.py:455] Speculative metrics: Draft acceptance rate: 0.500, System "
                f"efficiency: 0.600, Number of speculative tokens: 4, Number of accepted tokens: {acc}, Number of draft "
                f"tokens: {drafted}, Number of emitted tokens: {emitted}.")
    text = "\n".join([v0(100, 400, 200), v0(100, 400, 200), v0(300, 800, 500), v0(50, 200, 100)])
    _, ident, tally = load(tmp_path, text, assume="constant-rate")
    # Intervals: (100 acc, 100 steps), nothing, (200 acc, 100 steps), restart -> (50 acc, 50 steps).
    assert tally.zero_draft == 1 and tally.resets == 1
    assert ident.depth == 4 and ident.meta["mean_accepted_per_step"] == pytest.approx(350 / 250)


# -- vLLM Prometheus ------------------------------------------------------------------------
def scrape(engines, ts="1.7e9"):
    """An exposition with one series per engine; ``engines`` maps engine -> (drafts, acc per pos,
    draft tokens per pos or None)."""
    lines = ["# HELP vllm:spec_decode_num_drafts Number of spec decoding drafts.",
             "# TYPE vllm:spec_decode_num_drafts counter"]
    for e, (drafts, acc, dpos) in engines.items():
        lab = f'engine="{e}",model_name="m\\"x"'
        lines.append(f"vllm:spec_decode_num_drafts_total{{{lab}}} {float(drafts)}")
        lines.append(f"vllm:spec_decode_num_drafts_created{{{lab}}} {ts}")
        lines.append(f"vllm:spec_decode_num_draft_tokens_total{{{lab}}} {float(drafts * len(acc))}")
        lines.append(f"vllm:spec_decode_num_accepted_tokens_total{{{lab}}} {float(sum(acc))}")
        for j, a in enumerate(acc):
            lines.append(f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{{lab},position="{j}"}} {float(a)}')
            if dpos is not None:
                lines.append(f'vllm:spec_decode_num_draft_tokens_per_pos_total{{{lab},position="{j}"}} {float(dpos[j])}')
    lines.append('vllm:num_requests_running{engine="0"} 3.0')
    return "\n".join(lines) + "\n"


def test_prometheus_one_scrape_sums_engines(tmp_path):
    text = scrape({"0": (100, [80, 50], None), "1": (300, [200, 100], None)})
    fmt, ident, tally = load(tmp_path, text, "m.prom")
    assert fmt == "vllm-prometheus"
    assert ident.steps == {(2, 0): 120, (2, 1): 130, (2, 2): 150}
    assert tally.garbage == 0 and tally.other == 3  # two _created series, one other metric


def test_prometheus_two_scrapes_difference_and_a_reset(tmp_path):
    a = write(tmp_path, "a.prom", scrape({"0": (100, [80, 50], None), "1": (100, [70, 40], None)}))
    b = write(tmp_path, "b.prom", scrape({"0": (300, [230, 150], None), "1": (40, [30, 20], None)}))  # engine 1 restarted
    fmt, records, tally = read_telemetry([a, b])
    ident = identify(fmt, records, tally, files=["a.prom", "b.prom"])
    # engine 0: +200 drafts, +150, +100; engine 1 restarted: 40, 30, 20 since.
    assert ident.steps == {(2, 0): 60, (2, 1): 60, (2, 2): 120}
    assert tally.resets == 5 and ident.meta["counter_resets"] == 5  # engine 1's five series


def test_prometheus_variable_depth_is_refused_or_cut_to_the_shallowest_depth(tmp_path):
    # 100 drafting steps drafted 160 tokens at 2 positions: the depth varied.
    text = scrape({"0": (100, [80, 30], None)}).replace(
        "vllm:spec_decode_num_draft_tokens_total{engine=\"0\",model_name=\"m\\\"x\"} 200.0",
        "vllm:spec_decode_num_draft_tokens_total{engine=\"0\",model_name=\"m\\\"x\"} 160.0")
    assert "} 160.0" in text
    with pytest.raises(CalibrationError, match="depth varied") as e:
        load(tmp_path, text, "m.prom")
    assert "--min-depth" in str(e.value) and "--per-request-spec-decode-metrics detailed" in str(e.value)
    p = write(tmp_path, "m.prom", text)
    fmt, records, tally = read_telemetry([p])
    ident = identify(fmt, records, tally, files=["m.prom"], min_depth=1)
    assert ident.steps == {(1, 0): 20, (1, 1): 80} and ident.meta["variable_depth_records"] == 1


def test_prometheus_junk_is_counted_and_strict_refuses(tmp_path):
    text = scrape({"0": (100, [80, 50], None)}) + "this is { not a sample\n"
    _, _, tally = load(tmp_path, text, "m.prom")
    assert tally.garbage == 1
    with pytest.raises(CalibrationError, match="--strict"):
        load(tmp_path, text, "m.prom", strict=True)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 10**6), st.lists(st.integers(0, 10**6), min_size=1, max_size=8)),
                min_size=1, max_size=4))
def test_prometheus_round_trip(engines):
    spec = {}
    for e, (drafts, acc) in enumerate(engines):
        acc = sorted((min(a, drafts) for a in acc), reverse=True)
        spec[str(e)] = (drafts, acc, None)
    from specsim.interop.vllm import parse_prometheus

    records, tally = parse_prometheus([scrape(spec)], ["m.prom"])
    k = max(len(a) for _, a, _ in spec.values())
    want = [sum(a[j] if j < len(a) else 0 for _, a, _ in spec.values()) for j in range(k)]
    assert tally.garbage == 0 and records[0].accepted == want
    assert records[0].reached == [sum(d for d, _, _ in spec.values())] * k


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 999), st.lists(st.floats(0, 1), min_size=1, max_size=8))
def test_vllm_log_line_round_trip(n, shares):
    # Rates are printed to 3 decimals: below 1000 steps per interval the counts come back exactly.
    acc, run = [], n
    for s in shares:
        run = int(run * s)
        acc.append(run)
    from specsim.interop.vllm import parse_log

    records, tally = parse_log(vllm_line(acc, n, len(acc)), "x.log")
    assert tally.garbage == 0
    assert records[0].accepted == acc and records[0].reached == [n] * len(acc)
    assert records[0].variable is None  # a fixed depth is never taken for a varying one


# -- vLLM bench and per-request ------------------------------------------------------------------
BENCH = """============ Serving Benchmark Result ============
Successful requests:                     100       
---------------Speculative Decoding---------------
Acceptance rate (%):                     55.00     
Acceptance length:                       2.65      
Drafts:                                  2000      
Draft tokens:                            6000      
Accepted tokens:                         3300      
Per-position acceptance (%):
  Position 0:                            80.00     
  Position 1:                            55.00     
  Position 2:                            30.00     
==================================================
"""


def test_vllm_bench_summary(tmp_path):
    fmt, ident, _ = load(tmp_path, BENCH, "bench.txt")
    assert fmt == "vllm-bench"
    assert ident.steps == {(3, 0): 400, (3, 1): 500, (3, 2): 500, (3, 3): 600}


def test_vllm_per_request_histograms_windows_and_per_step(tmp_path):
    docs = [
        {"id": "a", "metrics": {"speculative_decoding": {"acceptance_histogram": [10, 20, 30, 40], "num_spec_tokens": 3,
                                                          "mean_acceptance_length": 3.0}}},
        {"id": "b", "usage": {"metrics": {"speculative_decoding": {"acceptance_histogram": [1, 1, 1, 1],
                                                                    "num_spec_tokens": 3}}}},
        {"id": "c", "metrics": {"speculative_decoding": {"per_step_accepted": [3, 0, 1, 2], "per_step_drafted": [3, 3, 3, 3],
                                                          "acceptance_histogram": [1, 1, 1, 1]}}},
        {"id": "d", "metrics": {"speculative_decoding": {"num_spec_steps": 0, "num_accepted_draft_tokens": 0}}},
    ]
    text = "\n".join(json.dumps(d) for d in docs) + "\n{not json\n"
    fmt, ident, tally = load(tmp_path, text, "r.jsonl")
    assert fmt == "vllm-request"
    assert ident.steps == {(3, 0): 12, (3, 1): 22, (3, 2): 32, (3, 3): 42}
    assert tally.zero_draft == 1 and tally.garbage == 1
    assert ident.runs[3] == [None, None, [3, 0, 1, 2]]
    text_w = render_windows(ident, fmt)
    from specsim.sim.replay import parse_acceptance_file

    afile = parse_acceptance_file(text_w)
    assert afile.traces["d3"].k_logged == 3
    # Per-step arrays give the serve's order; the histograms' runs are spread; all are kept.
    assert sorted(afile.traces["d3"].accepted.tolist()) == sorted(
        [0] * 10 + [1] * 20 + [2] * 30 + [3] * 40 + [0, 1, 2, 3] + [3, 0, 1, 2])


def test_vllm_streamed_response_final_usage_chunk(tmp_path):
    chunks = [{"id": "x", "choices": [{"delta": {"content": "hi"}}]},
              {"id": "x", "choices": [], "usage": {"completion_tokens": 9, "metrics": {"speculative_decoding": {
                  "acceptance_histogram": [2, 3, 4], "num_spec_tokens": 2}}}}]
    text = "\n\n".join(f"data: {json.dumps(c)}" for c in chunks) + "\n\ndata: [DONE]\n"
    fmt, ident, tally = load(tmp_path, text, "stream.txt")
    assert fmt == "vllm-request" and ident.steps == {(2, 0): 2, (2, 1): 3, (2, 2): 4}
    assert tally.garbage == 0


def test_sglang_gauges_are_refused_with_the_reason(tmp_path):
    text = 'sglang:spec_accept_length{model_name="m"} 2.5\nsglang:spec_accept_rate{model_name="m"} 0.6\n'
    with pytest.raises(CalibrationError, match="gauges reset every log interval"):
        load(tmp_path, text, "m.prom")


def test_vllm_per_request_mean_only_needs_the_assumption(tmp_path):
    text = json.dumps({"speculative_decoding": {"num_spec_steps": 200, "num_accepted_draft_tokens": 300,
                                                "num_spec_tokens": 4}})
    with pytest.raises(CalibrationError, match="mean acceptance only"):
        load(tmp_path, text, "r.json")
    _, ident, _ = load(tmp_path, text, "r.json", assume="constant-rate")
    assert ident.depth == 4 and ident.meta["steps"] == 200


# -- SGLang --------------------------------------------------------------------------------------
SGL = [
    # current
    "[2026-10-01 10:00:00 TP0] Decode batch, #running-req: 4, #token: 9000, token usage: 0.05, accept len: 2.50, "
    "accept rate: 0.50, cuda graph: True, gen throughput (token/s): 120.00, #queue-req: 0,   ",
    # older: `Decode batch.`, no accept rate, trailing ", "
    "[2025-03-01 10:00:00] Decode batch. #running-req: 1, #token: 100, token usage: 0.00, accept len: 3.50, "
    "gen throughput (token/s): 20.00, #queue-req: 0, ",
    # iteration tag, hybrid token fields, cpu graph, appended fields, largest-len, first-generation accept rate > 1
    "[2026-11-01 10:00:00 DP0 TP0] Decode batch [1234], #running-req: 2, #full token: 50, full token usage: 0.01, "
    "#swa token: 10, swa token usage: 0.00, accept len: 1.50, accept rate: 1.20, largest-len: 100, cpu graph: "
    "False, gen throughput (token/s): 40.00, #queue-req: 1, est. decode TFLOPS/s: 1.2, fwd occupancy: 80%",
    # a serve without speculation and a line with nobody running
    "[2026-10-01 10:00:00 TP0] Decode batch, #running-req: 3, #token: 10, token usage: 0.00, cuda graph: True",
    "[2026-10-01 10:00:00 TP0] Decode batch, #running-req: 0, #token: 0, token usage: 0.00, accept len: 0.00",
    "[2026-10-01 10:00:00 TP0] Prefill batch, #new-seq: 1",
]


def test_sglang_decode_lines_weight_by_running_requests(tmp_path):
    fmt, ident, tally = load(tmp_path, "\n".join(SGL), "s.log", assume="constant-rate", depth=3)
    assert fmt == "sglang-log"
    # mean accepted = (4*1.5 + 1*2.5 + 2*0.5) / 7 over 40-step intervals
    assert ident.meta["mean_accepted_per_step"] == pytest.approx((4 * 1.5 + 2.5 + 2 * 0.5) / 7)
    assert ident.meta["steps"] == 280 and tally.zero_draft == 1
    assert ident.meta["source_accept_rate_meaning"].startswith("accepted with bonus")
    with pytest.raises(CalibrationError, match="mean acceptance only"):
        load(tmp_path, "\n".join(SGL), "s.log")


@pytest.mark.parametrize("meta, kind", [
    ({"spec_correct_drafts_histogram": [5, 10, 85], "spec_num_correct_drafts": 180, "spec_verify_ct": 100}, "steps"),
    ({"spec_accept_histogram": [5, 10, 85], "spec_accept_rate": 0.9}, "steps"),
    ({"spec_accepted_drafts": 180, "spec_proposed_drafts": 200, "spec_verify_ct": 100}, "mean"),
    ({"spec_accept_token_num": 180, "spec_draft_token_num": 200, "spec_verify_ct": 100, "spec_accept_length": 2.8}, "mean"),
    ({"spec_verify_ct": 100, "completion_tokens": 280}, "mean"),  # 280 / 100 - 1
])
def test_sglang_meta_info_generations(tmp_path, meta, kind):
    doc = {"text": "hi", "meta_info": {"id": "x", "completion_tokens": 280, **meta}}
    fmt, ident, _ = load(tmp_path, json.dumps(doc), "s.json", assume="constant-rate", depth=2)
    assert fmt == "sglang-request"
    if kind == "steps":
        assert ident.steps == {(2, 0): 5, (2, 1): 10, (2, 2): 85}
        assert ident.windows == {2: [[85, 10, 5]]}
    else:
        assert ident.meta["mean_accepted_per_step"] == pytest.approx(1.8)


def test_sglang_histogram_length_is_not_the_depth(tmp_path):
    # SGLang grows the histogram to the largest accepted run + 1: at depth 4, runs of at most 2.
    meta = {"spec_correct_drafts_histogram": [5, 10, 85], "spec_verify_ct": 100}
    with pytest.raises(CalibrationError, match="--depth K"):
        load(tmp_path, json.dumps({"meta_info": meta}), "s.json")
    _, ident, _ = load(tmp_path, json.dumps({"meta_info": {**meta, "spec_num_proposed_drafts": 400}}), "s.json")
    assert ident.steps == {(4, 0): 5, (4, 1): 10, (4, 2): 85}
    _, ident, _ = load(tmp_path, json.dumps({"meta_info": meta}), "s.json", depth=4)
    assert ident.steps == {(4, 0): 5, (4, 1): 10, (4, 2): 85}
    # counts that contradict the histogram are unreadable
    from specsim.interop.sglang import parse_requests

    _, tally = parse_requests(json.dumps({"meta_info": {**meta, "spec_verify_ct": 99}}), "s.json")
    assert tally.garbage == 1 and "contradict" in tally.problems[0]


def test_sglang_server_info(tmp_path):
    doc = {"internal_states": [{"avg_spec_accept_length": 2.6, "speculative_num_steps": 3},
                               {"avg_spec_accept_length": 2.4}], "version": "0.5"}
    fmt, ident, _ = load(tmp_path, json.dumps(doc), "info.json", assume="constant-rate")
    assert fmt == "sglang-server-info"
    assert ident.depth == 3 and ident.meta["steps"] == "unknown"
    assert ident.meta["mean_accepted_per_step"] == pytest.approx(1.5)


# -- TensorRT-LLM ----------------------------------------------------------------------------------
def test_trtllm_iteration_stats_camel_and_snake(tmp_path):
    its = [{"iter": 1, "specDecodingStats": {"numDraftTokens": 12, "numAcceptedTokens": 6, "numRequestsWithDraftTokens": 4,
                                             "acceptanceLength": 2.5, "iterLatencyMS": 10.0, "draftOverhead": 0.1}},
           {"iter": 2, "spec_decoding_stats": {"num_draft_tokens": 300, "num_accepted_tokens": 150,
                                               "num_requests_with_draft_tokens": 100}},
           {"iter": 3, "specDecodingStats": {"numDraftTokens": 0, "numAcceptedTokens": 0, "numRequestsWithDraftTokens": 0}}]
    fmt, ident, tally = load(tmp_path, json.dumps(its), "it.json", assume="constant-rate")
    assert fmt == "trtllm-iteration" and tally.zero_draft == 1
    assert ident.depth == 3 and ident.meta["mean_accepted_per_step"] == pytest.approx(156 / 104)


def test_trtllm_per_request_blocks(tmp_path):
    doc = [{"request_id": 1, "speculative_decoding": {"acceptance_histogram": [1, 2, 3], "num_spec_steps": 6,
                                                       "total_accepted_draft_tokens": 8, "total_draft_tokens": 12,
                                                       "acceptance_rate": 0.67, "num_spec_tokens": 2}}]
    fmt, ident, _ = load(tmp_path, json.dumps(doc), "r.json")
    assert fmt == "trtllm-request" and ident.steps == {(2, 0): 1, (2, 1): 2, (2, 2): 3}


# -- detection, refusals ----------------------------------------------------------------------------
def test_unknown_content_is_refused_naming_the_formats(tmp_path):
    with pytest.raises(CalibrationError, match="--from"):
        detect_telemetry_format("hello world\n", "x.log")


def test_constant_rate_solves_the_mean():
    for k in (1, 2, 5, 8):
        for p in (0.0, 0.3, 0.77, 1.0):
            mean = sum(p ** j for j in range(1, k + 1))
            assert constant_rate(mean, k) == pytest.approx(p, abs=1e-12)


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "specsim", *map(str, args)], capture_output=True, text=True)


@pytest.mark.parametrize("content, match", [
    (b"", "empty"), (b"   \n", "empty"), (b"\xff\xfeS\x00p\x00", "UTF-16"), (b"\x89PNG\r\n\x1a\n\x00\x00", "NUL"),
    (b"caf\xe9 SpecDecoding metrics:", "not UTF-8"),
])
def test_cli_refuses_bad_files(tmp_path, content, match):
    p = write(tmp_path, "bad.log", content)
    r = _cli("calib", "import", p, *KEY, "-o", tmp_path / "c.toml")
    assert r.returncode == 2 and match in r.stderr and "Traceback" not in r.stderr
    assert not (tmp_path / "c.toml").exists()


def test_cli_import_writes_calibration_and_windows(tmp_path, shared_data):
    docs = [{"speculative_decoding": {"acceptance_histogram": [30, 40, 50, 80], "num_spec_tokens": 3}} for _ in range(2)]
    src = write(tmp_path, "req.jsonl", "\n".join(json.dumps(d) for d in docs) + "\n")
    out, win = tmp_path / "cal.toml", tmp_path / "w.toml"
    r = _cli("calib", "import", src, *KEY, "-o", out, "--windows-out", win)
    assert r.returncode == 0, r.stderr
    cal = AcceptanceCalibration.load(out)
    assert cal.drafter == DRAFTER
    assert cal.priors.tolist() == [340 / 400, 260 / 340, 160 / 260]
    assert cal.meta["source_format"] == "vllm-request" and cal.meta["source_files"] == ["req.jsonl"]
    # The windows file is what `calib fit --windows` reads back to the same calibration.
    refit = tmp_path / "refit.toml"
    r = _cli("calib", "fit", "--windows", win, "--run", "d3", *KEY, "-o", refit)
    assert r.returncode == 0, r.stderr
    assert AcceptanceCalibration.load(refit) == cal
    # ...and an acceptance file replay and simulate read directly, with the imported calibration.
    table = tmp_path / "t.toml"
    r = _cli("table", "import", shared_data / "metrale/qwen38_27b_mtp_gb10.toml", "--run", "qwen38_27b_mtp_r1",
             "-o", table, "--box-class", "gb10", "--recipe", "qwen")
    assert r.returncode == 0, r.stderr
    r = _cli("replay", win, "--table", table, "--policy", "propose", "--calibration", out, "--width", "2",
             "--budget", "500")
    assert r.returncode == 0, r.stderr
    assert "trace d3 (k_logged 3, 400 steps logged)" in r.stdout
    r = _cli("simulate", "--synthetic", "requests=20,rate=2", "--table", table, "--calibration", out,
             "--acceptance", win, "--policy", "fixed:2", "--quiet")
    assert r.returncode == 0, r.stderr
    assert "fixed:2" in r.stdout


def test_cli_refuses_output_over_input_and_strict_junk(tmp_path):
    src = write(tmp_path, "v.log", vllm_line([800, 500, 200], 1000, 3) + "\nSpecDecoding metrics: ???\n")
    r = _cli("calib", "import", src, *KEY, "-o", src)
    assert r.returncode == 2 and "input" in r.stderr
    r = _cli("calib", "import", src, *KEY, "--strict", "-o", tmp_path / "c.toml")
    assert r.returncode == 2 and "--strict" in r.stderr
    r = _cli("calib", "import", src, *KEY, "-o", tmp_path / "c.toml")
    assert r.returncode == 0 and "1 unreadable ignored" in r.stdout


# -- known calibration in, priors back -------------------------------------------------------------
def _synthetic(source, truth, k, intervals=40, steps=500):
    """Telemetry of ``source`` for chains drawn from per-position conditional rates ``truth``."""
    parts, total = [], [0] * (k + 1)
    for interval in range(intervals):
        runs = chain_runs(truth, k, steps, seed=100 + interval)
        hist = np.bincount(runs, minlength=k + 1).tolist()
        total = [t + h for t, h in zip(total, hist)]
        acc = [int((runs >= j).sum()) for j in range(1, k + 1)]
        if source == "vllm-log":
            parts.append(vllm_line(acc, steps, k))
        elif source == "vllm-request":
            parts.append(json.dumps({"speculative_decoding": {"acceptance_histogram": hist, "num_spec_tokens": k}}))
        elif source == "sglang-request":
            parts.append(json.dumps({"meta_info": {"spec_correct_drafts_histogram": hist, "spec_verify_ct": steps,
                                                   "spec_num_proposed_drafts": steps * k}}))
        elif source == "trtllm-request":
            parts.append(json.dumps({"speculative_decoding": {"acceptance_histogram": hist, "num_spec_tokens": k,
                                                              "total_accepted_draft_tokens": int(runs.sum())}}))
    if source == "vllm-prometheus":
        acc = [sum(total[j:]) for j in range(1, k + 1)]
        parts.append(scrape({"0": (sum(total), acc, None)}))
    return "\n".join(parts) + "\n"


@pytest.mark.parametrize("source", ["vllm-log", "vllm-request", "vllm-prometheus", "sglang-request",
                                    "trtllm-request"])
def test_import_recovers_known_priors_within_binomial_error(tmp_path, source):
    truth = [0.8, 0.65, 0.5, 0.4]
    k = 4
    fmt, ident, _ = load(tmp_path, _synthetic(source, truth, k), "syn.txt")
    assert fmt == source
    cal = calibration_from(ident, DRAFTER)
    reached = 40 * 500
    for j, p in enumerate(truth):
        se = math.sqrt(p * (1 - p) / reached)
        # 4 standard errors; the log line's rates are rounded to 3 decimals (at most 0.0005 each).
        assert abs(cal.priors[j] - p) < 4 * se + 1e-3 * (source == "vllm-log"), (j, cal.priors[j], p)
        reached = int(reached * p)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 9), st.lists(st.integers(0, 60), min_size=10, max_size=10)),
                min_size=1, max_size=6))
def test_windows_file_round_trip(requests):
    """Histograms in, the windows file out, and back: `calib fit --windows` and the acceptance
    file reader see every step again."""
    from specsim.calibration.from_telemetry import Identified
    from specsim.cli.calib import _read_windows
    from specsim.sim.replay import parse_acceptance_file

    windows, steps = {}, {}
    for d, counts in requests:
        row = counts[: d + 1]  # index a = steps that accepted exactly a
        windows.setdefault(d, []).append(row[::-1])
        for a, c in enumerate(row):
            if c:
                steps[(d, a)] = steps.get((d, a), 0) + c
    if not any(sum(r) for rows in windows.values() for r in rows):
        return
    text = render_windows(Identified(steps, None, None, {}, windows, {}), "vllm-request")
    afile = parse_acceptance_file(text)
    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "w.toml"
        path.write_text(text)
        for d, rows in windows.items():
            trace = afile.traces[f"d{d}"]
            want = sorted(a for row in rows for a, c in enumerate(row[::-1]) for _ in range(c))
            assert sorted(trace.accepted.tolist()) == want
            if want:
                got = _read_windows(str(path), f"d{d}")
                assert {k: v for k, v in got.items() if v} == {k: v for k, v in steps.items() if k[0] == d}


def test_files_of_different_formats_are_refused_and_from_overrides_detection(tmp_path):
    a = write(tmp_path, "a.log", vllm_line([80, 50, 20], 100, 3))
    b = write(tmp_path, "b.txt", BENCH)
    with pytest.raises(CalibrationError, match="one format at a time"):
        read_telemetry([a, b])
    # Named explicitly, a bench summary read as a log has no log lines: nothing to import.
    fmt, records, tally = read_telemetry([b], "vllm-log")
    assert fmt == "vllm-log" and not records and tally.other == len(BENCH.splitlines())
    with pytest.raises(CalibrationError, match="no speculative-decoding counts"):
        identify(fmt, records, tally, files=["b.txt"])
    with pytest.raises(CalibrationError, match="unknown telemetry format"):
        read_telemetry([a], "vllm-logs")


def test_sglang_older_line_shape_is_recorded(tmp_path):
    _, ident, _ = load(tmp_path, "\n".join([SGL[1]] * 3), "old.log", assume="constant-rate", depth=3)  # 120 steps
    assert ident.meta["source_sglang_line"].startswith("older")
    assert ident.meta["mean_accepted_per_step"] == pytest.approx(2.5)


# -- generations added: V0 "tokens tokens", bench JSON, SGLang 0.5.10 depth, TensorRT-LLM released block ----------
def test_vllm_v0_first_releases_print_tokens_twice(tmp_path):
    line = ("INFO 01-10 10:00:00 metrics.py:341] Speculative metrics: Draft acceptance rate: 0.500, System efficiency: "
            "0.600, Number of speculative tokens: 4, Number of accepted tokens: 200, Number of draft tokens tokens: "
            "400, Number of emitted tokens tokens: 300.")
    _, ident, tally = load(tmp_path, line, assume="constant-rate")
    assert tally.garbage == 0 and ident.depth == 4
    assert ident.meta["mean_accepted_per_step"] == pytest.approx(2.0)  # 200 accepted over 300 - 200 steps


@pytest.mark.parametrize("scale", [1.0, 100.0])
def test_vllm_bench_save_result_json(tmp_path, scale):
    doc = {"date": "20261201", "spec_decode_acceptance_rate": 55.0, "spec_decode_acceptance_length": 2.65,
           "spec_decode_num_drafts": 2000, "spec_decode_draft_tokens": 6000, "spec_decode_accepted_tokens": 3300,
           "spec_decode_per_position_acceptance_rates": [0.8 * scale, 0.55 * scale, 0.3 * scale]}
    fmt, ident, _ = load(tmp_path, json.dumps(doc), "bench.json")
    assert fmt == "vllm-bench"
    assert ident.steps == {(3, 0): 400, (3, 1): 500, (3, 2): 500, (3, 3): 600}


def test_sglang_0_5_10_depth_from_draft_tokens_over_verify_steps(tmp_path):
    meta = {"spec_accept_histogram": [5, 10, 85], "spec_verify_ct": 100, "spec_draft_token_num": 300,
            "spec_accept_token_num": 180}
    _, ident, _ = load(tmp_path, json.dumps({"meta_info": meta}), "s.json")
    assert ident.steps == {(3, 0): 5, (3, 1): 10, (3, 2): 85}


def test_trtllm_released_per_request_block_is_a_mean_needing_the_depth(tmp_path):
    doc = [{"request_id": i, "speculative_decoding": {"acceptance_rate": 0.5, "total_accepted_draft_tokens": 150,
                                                       "total_draft_tokens": 300}} for i in range(2)]
    with pytest.raises(CalibrationError, match="--depth K"):
        load(tmp_path, json.dumps(doc), "r.json", assume="constant-rate")
    fmt, ident, tally = load(tmp_path, json.dumps(doc), "r.json", assume="constant-rate", depth=3)
    assert fmt == "trtllm-request" and ident.meta["steps"] == 200
    assert ident.meta["mean_accepted_per_step"] == pytest.approx(1.5)
    assert ident.meta["source_request_block"] == "accepted and drafted tokens only"


def test_sglang_depth_flag_wins_over_the_ratio(tmp_path):
    # with draft trees (topk > 1) proposed / verify counts tree nodes: --depth K names the chain depth
    meta = {"spec_correct_drafts_histogram": [5, 10, 85], "spec_verify_ct": 100, "spec_num_proposed_drafts": 600}
    _, ident, _ = load(tmp_path, json.dumps({"meta_info": meta}), "s.json")
    assert ident.steps == {(6, 0): 5, (6, 1): 10, (6, 2): 85}
    _, ident, _ = load(tmp_path, json.dumps({"meta_info": meta}), "s.json", depth=3)
    assert ident.steps == {(3, 0): 5, (3, 1): 10, (3, 2): 85}
