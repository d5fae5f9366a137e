"""Hostile input, round three: the commands added since the earlier rounds held to the same
promises (docs/limits.md): no damaged file, no hang, no traceback, no foreign exception, no
impossible value accepted in silence. One test per defect found, named after it."""

from __future__ import annotations

import math
import os
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from specsim.cli import main
from specsim.demo_inputs import demo_calibration, demo_table
from specsim.errors import SpecsimError
from specsim.sim.slo import SLO
from tests.fixtures import capacity_on

VLLM = '{"method": "eagle", "num_speculative_tokens": 3, "num_speculative_tokens_per_batch_size": [[1, 64, 3]]}\n'
TRACE = "arrival_s,prompt_tokens,output_tokens\n" + "".join(f"{i * 0.2:.3f},{100 + i},{20 + i % 7}\n"
                                                           for i in range(40))


@pytest.fixture
def files(tmp_path):
    (tmp_path / "t.toml").write_text(demo_table().to_text())
    (tmp_path / "c.toml").write_text(demo_calibration().render())
    (tmp_path / "tiny.csv").write_text(TRACE)
    (tmp_path / "v.json").write_text(VLLM)
    (tmp_path / "conf.json").write_text("[[-0.1, -0.5], [-0.2]]\n")
    return tmp_path


def _run(argv):
    try:
        return main([str(a) for a in argv])
    except SystemExit as e:
        return e.code


def _refused(argv, capsys, *needles):
    code = _run(argv)
    err = capsys.readouterr().err
    assert code == 2, err
    assert "error:" in err and "Traceback" not in err  # ours, or argparse's "specsim CMD: error:"
    for n in needles:
        assert n in err, err
    return err


# -- damaged files and wrong answers -----------------------------------------------------------

def _tc(d):
    return ["--table", d / "t.toml", "--calibration", d / "c.toml"]


POLICY_FILE_OUTPUTS = {
    "simulate": lambda d, out: ["simulate", "--trace", d / "tiny.csv", *_tc(d), "--policy", f"vllm:{d / 'v.json'}",
                                "--json", out],
    "fleet": lambda d, out: ["fleet", "--trace", d / "tiny.csv", *_tc(d), "--replicas", "2",
                             "--policy", f"vllm:{d / 'v.json'}", "--requests-csv", out],
    "capacity": lambda d, out: ["capacity", "--trace", d / "tiny.csv", *_tc(d), "--slo-tpot-s", "1", "--serial",
                                "--policy", f"vllm:{d / 'v.json'}", "--json", out],
    "tune": lambda d, out: ["tune", "--trace", d / "tiny.csv", *_tc(d), "--serial",
                            "--compare", f"vllm:{d / 'v.json'}", "-o", out],
    "replay": lambda d, out: ["replay", d / "a.toml", "--trace", "x", "--policy", f"vllm:{d / 'v.json'}",
                              "--width", "1", "--budget", "10", "--json", out],
}


@pytest.mark.parametrize("command", POLICY_FILE_OUTPUTS)
@pytest.mark.parametrize("via_link", [False, True], ids=["same name", "symlink"])
def test_an_output_may_overwrite_the_engine_config_named_by_a_policy(files, command, via_link, capsys):
    out = files / "v.json"
    if via_link:
        out = files / "link.json"
        out.symlink_to(files / "v.json")
    _refused(POLICY_FILE_OUTPUTS[command](files, out), capsys, "destroy the input", "v.json")
    assert (files / "v.json").read_text() == VLLM


def test_planner_with_no_cap_answers_0_above_widths_2_62_and_explain_says_capped():
    from specsim import Planner

    planner = Planner(demo_table(), demo_calibration())
    for n in (2**62, 2**62 + 1, 2**63 - 1):
        assert planner.propose(n) == planner.propose(2**20) > 0
        assert planner.goodput(n) == planner.goodput(2**20) > 0
        assert not planner.explain(n).capped
    assert Planner(demo_table(), demo_calibration(), max_seqs=2**62).propose(2**62 + 1) == 0


def test_capacity_on_an_empty_trace_answers_1_replica_at_100_percent(files, capsys):
    (files / "empty.csv").write_text(TRACE.splitlines()[0] + "\n")
    _refused(["capacity", "--trace", files / "empty.csv", *_tc(files), "--slo-tpot-s", "1", "--serial",
              "--policy", "fixed:1", "--json", files / "out.json"], capsys, "no requests")
    assert not (files / "out.json").exists()


def test_api_capacity_refuses_an_executor_it_cannot_run_on():
    from specsim.traces import synthetic_trace

    requests = synthetic_trace(200, 5.0, seed=1).requests
    for executor in (lambda a: [], None, "cluster"):
        with pytest.raises(SpecsimError, match="executor"):
            capacity_on(requests, demo_table(), demo_calibration(), ["fixed:1"], slo=SLO(tpot_s=1.0, attainment=0.5),
                        executor=executor)


# -- hangs ---------------------------------------------------------------------------------------

def _calib_key():
    return ["--drafter-sha256", "ab" * 32, "--vocab", "9", "--quantization", "bf16", "--context", "true"]


FIFO_READERS = {
    "table show": ["table", "show", "{p}"],
    "table import": ["table", "import", "{p}", "--run", "r", "--box-class", "b", "--recipe", "x", "-o", "{d}/o.toml"],
    "table model --gpu-spec": ["table", "model", "--gpu", "h200", "--model", "llama-3.1-8b", "--drafter", "eagle-1l",
                               "--max-k", "2", "--widths", "1,2", "--gpu-spec", "{p}", "-o", "{d}/o.toml"],
    "calib show": ["calib", "show", "{p}"],
    "calib fit --counts": ["calib", "fit", "--counts", "{p}", *_calib_key(), "-o", "{d}/o.toml"],
    "calib fit --drafts-log": ["calib", "fit", "--drafts-log", "{p}", *_calib_key(), "-o", "{d}/o.toml"],
    "calib fit --steps-log": ["calib", "fit", "--steps-log", "{p}", *_calib_key(), "-o", "{d}/o.toml"],
    "calib fit --windows": ["calib", "fit", "--windows", "{p}", *_calib_key(), "-o", "{d}/o.toml"],
    "calib import": ["calib", "import", "{p}", *_calib_key(), "-o", "{d}/o.toml"],
    "calib drift --from-log": ["calib", "drift", "{d}/c.toml", "--from-log", "{p}"],
    "calib drift --acceptance": ["calib", "drift", "{d}/c.toml", "--acceptance", "{p}"],
    "calib drift CAL": ["calib", "drift", "{p}", "--from-log", "{d}/c.toml"],
    "plan --confidences": ["plan", "{d}/t.toml", "{d}/c.toml", "--confidences", "{p}"],
    "plan --known-drafts": ["plan", "{d}/t.toml", "{d}/c.toml", "--confidences", "{d}/conf.json",
                            "--known-drafts", "{p}"],
    "replay": ["replay", "{p}", "--trace", "x", "--policy", "fixed:1", "--width", "1", "--budget", "10"],
    "schedule import": ["schedule", "import", "--from", "vllm", "{p}"],
    "schedule export": ["schedule", "export", "{p}", "--to", "vllm"],
    "sweep": ["sweep", "{p}", "-o", "{d}/r.csv"],
    "bench --recipe": ["bench", "--recipe", "{p}", "--widths", "1", "--max-k", "1", "-o", "{d}/o.toml"],
    "trace show": ["trace", "show", "{p}"],
    "simulate --trace": ["simulate", "--trace", "{p}", "--table", "{d}/t.toml", "--calibration", "{d}/c.toml",
                         "--policy", "fixed:1"],
    "simulate --prefill-curve": ["simulate", "--trace", "{d}/tiny.csv", "--table", "{d}/t.toml", "--calibration",
                                 "{d}/c.toml", "--policy", "fixed:1", "--prefill-curve", "{p}"],
    "simulate --policy sglang:": ["simulate", "--trace", "{d}/tiny.csv", "--table", "{d}/t.toml", "--calibration",
                                  "{d}/c.toml", "--policy", "sglang:{p}"],
    "simulate --policy trtllm:": ["simulate", "--trace", "{d}/tiny.csv", "--table", "{d}/t.toml", "--calibration",
                                  "{d}/c.toml", "--policy", "trtllm:{p}"],
    "fleet --fleet": ["fleet", "--trace", "{d}/tiny.csv", "--fleet", "{p}", "--policy", "fixed:1"],
}


@pytest.fixture
def watchdog():
    """Turn a hang into a failure: SIGALRM raises after a while, far past any refusal."""
    import signal

    def fire(*_):
        raise TimeoutError("the reader blocked")

    old = signal.signal(signal.SIGALRM, fire)
    signal.alarm(20)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, old)


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs named pipes")
@pytest.mark.parametrize("reader", FIFO_READERS)
def test_a_named_pipe_given_as_any_input_file_blocks_forever(files, reader, watchdog, capsys):
    fifo = files / "in.dat"
    os.mkfifo(fifo)
    argv = [a.format(d=files, p=fifo) for a in FIFO_READERS[reader]]
    _refused(argv, capsys, "named pipe")


def test_a_pipe_that_is_being_written_is_still_read(files):
    from specsim._io import read_input
    import threading

    fifo = files / "pipe"
    os.mkfifo(fifo)
    payload = b"x" * 300_000

    def write():
        with open(fifo, "wb") as f:
            f.write(payload)

    writer = threading.Thread(target=write)
    writer.start()
    assert read_input(fifo, "a file", SpecsimError) == payload
    writer.join()


# -- tracebacks and foreign exceptions -----------------------------------------------------------

@pytest.mark.slow
def test_fleet_with_65536_replicas_dies_with_memoryerror():
    # The documented replica limit: every replica's step log is its share of one fleet-wide
    # budget, not 4,096 entries each (2 GiB per log array at this size).
    from specsim.sim.fleet import Fleet, simulate_fleet
    from specsim.sim.fleet.fleet import FLEET_LOG_ENTRIES, MAX_REPLICAS
    from specsim.traces import synthetic_trace

    requests = synthetic_trace(30, 5.0, seed=1).requests
    result = simulate_fleet(requests, Fleet.uniform(demo_table(), demo_calibration(), MAX_REPLICAS), "fixed:2")
    assert len(result.replicas) == MAX_REPLICAS
    assert int(result.fleet.output_tokens.sum()) == int(requests["output_tokens"].sum())
    assert sum(r.step_t_s.shape[0] for r in result.replicas) <= FLEET_LOG_ENTRIES


def test_online_calibration_window_2_20_max_depth_64_asks_for_33_gib():
    from specsim.calibration.online import MAX_WINDOW_STEPS, OnlineCalibration

    with pytest.raises(SpecsimError, match="GiB.*at most"):
        OnlineCalibration(demo_calibration(), window=MAX_WINDOW_STEPS, max_depth=64)
    # The documented window still fits at the default depth.
    OnlineCalibration(demo_calibration(), window=MAX_WINDOW_STEPS, max_depth=8)


@pytest.mark.parametrize("drift", ["yes", 1, object()])
def test_online_calibration_drift_yes_attributeerror(drift):
    from specsim.calibration.online import OnlineCalibration

    with pytest.raises(SpecsimError, match="drift"):
        OnlineCalibration(demo_calibration(), drift=drift)


@pytest.mark.parametrize("bad", [0.5, math.inf], ids=["positive", "+inf"])
def test_online_calibration_update_takes_positive_or_inf_confidences(bad):
    import numpy as np

    from specsim.calibration.online import OnlineCalibration

    online = OnlineCalibration(demo_calibration(), max_depth=4)
    conf = np.array([[-0.1, -0.2], [-0.3, bad]], dtype=np.float32)
    with pytest.raises(SpecsimError, match="row 1, draft 1.*log-probability"):
        online.update(conf, np.array([2, 2], dtype=np.int64), np.array([1, 1], dtype=np.int64))
    assert online.steps_seen == 0 and sum(online.counts().accepted) == 0
    conf[1, 1] = np.nan  # unknown passes
    online.update(conf, np.array([2, 2], dtype=np.int64), np.array([1, 1], dtype=np.int64))
    assert online.steps_seen == 1


@pytest.mark.parametrize("engine,text", [
    ("sglang", '{"\\u00b2": {"candidate_steps": [2]}, "1": {"candidate_steps": [3]}}'),
    ("sglang", '{"' + "9" * 5000 + '": {"candidate_steps": [2]}}'),
    ("trtllm", '{"speculative_config": {"draft_len_schedule": {"\\u00b2": 2}}}'),
    ("trtllm", "speculative_config:\n  decoding_type: Eagle\n  max_draft_len: 2\n  draft_len_schedule: {\u00b2: 2}\n"),
    ("trtllm", "speculative_config:\n  max_draft_len: 2\n  draft_len_schedule: {" + "9" * 5000 + ": 2}\n"),
], ids=["sglang ²", "sglang 5000 digits", "trtllm json ²", "trtllm yaml ²", "trtllm yaml 5000 digits"])
def test_a_key_superscript_two_in_sglang_or_trtllm_configs_is_int_valueerror(files, engine, text, capsys):
    path = files / "engine.cfg"
    path.write_text(text, encoding="utf-8")
    _refused(["schedule", "import", "--from", engine, path], capsys, "engine.cfg")


def test_capacity_plot_xyz_fails_after_the_search(files, capsys):
    pytest.importorskip("matplotlib")
    _refused(["capacity", "--trace", files / "tiny.csv", *_tc(files), "--slo-tpot-s", "1", "--serial",
              "--policy", "fixed:1", "--plot", files / "p.xyz"], capsys, "cannot write .xyz")
    assert not (files / "p.xyz").exists()


HUGE_GPU_TOML = ('[[gpu]]\nname = "big"\nmemory_gb = {memory}\nbandwidth_gbs = {bandwidth}\nbf16_tflops = 989.4\n'
            'tdp_w = 700\nidle_w = 70\n')


@pytest.mark.parametrize("memory,bandwidth,field", [("1e308", "4800", "memory_gb"), ("141", "1e-308", "bandwidth_gbs")],
                         ids=["memory_gb 1e308 NaN ValueError", "bandwidth_gbs 1e-308 blamed on a cell"])
def test_table_model_gpu_spec_memory_gb_1e308_nan_valueerror(files, memory, bandwidth, field, capsys):
    (files / "gpu.toml").write_text(HUGE_GPU_TOML.format(memory=memory, bandwidth=bandwidth))
    err = _refused(["table", "model", "--gpu", "big", "--model", "llama-3.1-8b", "--drafter", "eagle-1l", "--max-k",
                    "2", "--widths", "1,2", "--gpu-spec", files / "gpu.toml", "-o", files / "m.toml"], capsys, field)
    assert "verify_ms" not in err and not (files / "m.toml").exists()


CURVE = "tokens,ms,j\n128,5.0,2.0\n1024,20.0,9.0\n"


def test_a_prefill_curve_csv_with_a_200_kb_field_is_a_csv_error(files):
    from specsim.sim.options import ServerOptions

    (files / "curve.csv").write_text(CURVE + '"' + "9" * 200_000 + '",1,1\n')
    with pytest.raises(SpecsimError, match="curve.csv:4.*not CSV"):
        ServerOptions(prefill_curve=files / "curve.csv")


def test_a_prefill_curve_with_a_utf8_bom_is_missing_the_tokens_header(files):
    from specsim.sim.options import ServerOptions

    (files / "curve.csv").write_bytes(b"\xef\xbb\xbf" + CURVE.encode())
    assert ServerOptions(prefill_curve=files / "curve.csv").prefill_curve[0] == (128.0, 1024.0)


def test_fractional_tokens_in_a_prefill_curve_are_accepted(files):
    from specsim.sim.options import ServerOptions

    (files / "curve.csv").write_text("tokens,ms,j\n128.5,5.0,2.0\n1024,20.0,9.0\n")
    with pytest.raises(SpecsimError, match="128.5 is not a whole number"):
        ServerOptions(prefill_curve=files / "curve.csv")


def test_prefill_curve_together_with_prefill_ms_per_token_ignores_one(files, capsys):
    (files / "curve.csv").write_text(CURVE)
    _refused(["simulate", "--trace", files / "tiny.csv", *_tc(files), "--policy", "fixed:1", "--prefill-curve",
              files / "curve.csv", "--prefill-ms-per-token", "0.1"], capsys, "prefill_ms_per_token")


def test_table_import_of_a_run_with_a_cell_at_depth_10_12_memoryerror(files, capsys, watchdog):
    (files / "run.toml").write_text('[[run]]\nname = "r"\ncells = [[1, 0, 80.0, 4.0, 0.0, 0.0], '
                                    '[1, 1000000000000, 83.6, 5.3, 5.6, 0.3]]\n')
    _refused(["table", "import", files / "run.toml", "--run", "r", "--box-class", "b", "--recipe", "x",
              "-o", files / "o.toml"], capsys, "k = 1000000000000", "0..255")
    assert not (files / "o.toml").exists()


def test_api_costtable_from_cells_with_string_fields_typeerror():
    from specsim.table import SCHEMA, CostTable, TableKey

    key = TableKey(SCHEMA, "b", "r", {})
    for cell in ((1, 0, "80", 4.0, 0.0, 0.0), ("1", 0, 80.0, 4.0, 0.0, 0.0), (1, None, 80.0, 4.0, 0.0, 0.0)):
        with pytest.raises(SpecsimError, match="cells\\[0\\]"):
            CostTable.from_cells(key, [cell])


def _api_calls():
    import numpy as np

    from specsim import simulate
    from specsim.interop import export_schedule
    from specsim.sim.fleet import Fleet
    from specsim.traces import synthetic_trace

    table, cal = demo_table(), demo_calibration()
    requests = synthetic_trace(10, 5.0, seed=1).requests
    conf, n_conf = np.full((2, 3), -0.1, dtype=np.float32), np.array([3, 3], dtype=np.int64)
    return {
        "simulate warp=9": lambda: simulate(requests, table, cal, "fixed:1", warp=9),
        "Fleet.with_options warp=9": lambda: Fleet.uniform(table, cal, 2).with_options(warp=9),
        "export_schedule draft_model=object()": lambda: export_schedule("vllm", ((1, None, 2),),
                                                                          draft_model=object()),
        "p_matrix m_out=-1": lambda: cal.p_matrix(conf, n_conf, m_out=-1),
        "p_matrix m_out='x'": lambda: cal.p_matrix(conf, n_conf, m_out="x"),
        "Fleet.uniform('x', C, 1)": lambda: Fleet.uniform("x", cal, 1),
    }


@pytest.mark.parametrize("call", list(_api_calls()))
def test_api_typeerrors_and_keyerrors_listed(call):
    with pytest.raises(SpecsimError):
        _api_calls()[call]()


@pytest.mark.parametrize("sha", ["ab" * 32 + "\n", "ab\ncd", "abc", " " + "ab" * 32, "unknown", "g" * 64,
                                 "ab" * 33],
                         ids=["trailing newline", "inner newline", "3 hex digits", "leading space", "a label",
                              "64 non-hex", "66 hex digits"])
def test_drafter_sha256_with_a_newline_or_not_64_hex_digits_is_accepted(files, sha, capsys):
    _refused(["calib", "fit", "--rates", "0.8,0.6", "--drafter-sha256", sha, "--vocab", "9", "--quantization",
              "bf16", "--context", "true", "-o", files / "c2.toml"], capsys, "--drafter-sha256")
    assert not (files / "c2.toml").exists()


def test_edges_nan_in_a_calibration_is_accepted(files, capsys):
    from specsim.calibration import AcceptanceCalibration, DrafterKey

    with pytest.raises(SpecsimError, match="NaN"):
        AcceptanceCalibration(DrafterKey("x", 9, "bf16", True), [math.nan], [0.5], [0.5])
    (files / "nan.toml").write_text('[drafter]\nweights_sha256 = "x"\nvocab = 9\nquantization = "bf16"\n'
                                    'context = true\n[acceptance]\nedges = [nan]\np_accept = [0.5]\n'
                                    'prior_by_position = [0.5]\n')
    _refused(["calib", "show", files / "nan.toml"], capsys, "nan.toml", "NaN")


def test_unknown_keys_in_a_schedule_range_are_accepted(files, capsys):
    (files / "s.toml").write_text('schema = 1\n[[range]]\nfirst = 1\ndepth = 3\ndepht = 2\n')
    _refused(["schedule", "export", files / "s.toml", "--to", "vllm"], capsys, "s.toml", "'depht'")


def test_2_63_minus_1_tokens_are_not_a_non_negative_integer(files, capsys):
    (files / "big.csv").write_text(TRACE.splitlines()[0] + f"\n0.0,10,{2**63 - 1}\n")
    err = _refused(["trace", "show", files / "big.csv"], capsys, "big.csv:2", "0..16,777,216")
    assert "not a non-negative integer" not in err


# -- found by the hostile-input harness (tests/whole/hostile_harness.py) over the newer surfaces ---------

@pytest.mark.parametrize("text", ["[" * 5000 + "]" * 5000, "speculative_config:\n  max_draft_len: " + "9" * 5000 + "\n"],
                         ids=["deep nesting", "5000-digit integer"])
def test_trtllm_options_that_pyyaml_cannot_read_are_a_recursionerror_or_valueerror(files, text, capsys):
    (files / "tr.yaml").write_text(text)
    _refused(["schedule", "import", "--from", "trtllm", files / "tr.yaml"], capsys, "tr.yaml")


@pytest.mark.parametrize("argv", [
    ["trace", "show", "{d}/tiny.csv", "--rate-scale", "\u0663"],
    ["plan", "{d}/t.toml", "{d}/c.toml", "--n", "\u0663"],
    ["simulate", "--trace", "{d}/tiny.csv", "--table", "{d}/t.toml", "--calibration", "{d}/c.toml",
     "--policy", "fixed:1", "--kv-block-size", "\u0663"],
], ids=["float option", "count option", "server option"])
def test_numeric_options_take_digits_of_other_scripts(files, argv, capsys):
    _refused([a.format(d=files) for a in argv], capsys)


@pytest.mark.parametrize("value", ["1e308", "99999999999999999999"])
def test_table_query_context_past_any_sequence_is_accepted(files, value, capsys):
    _refused(["table", "query", files / "t.toml", "4", "2", "--context", value], capsys, "16,777,216")


def test_a_schedule_policy_naming_a_width_past_the_limit_is_accepted(files, capsys):
    _refused(["simulate", "--trace", files / "tiny.csv", *_tc(files), "--policy", "schedule:1-" + "9" * 30 + "=1"],
             capsys)
    _refused(["simulate", "--trace", files / "tiny.csv", *_tc(files), "--policy", "schedule:1-" + "9" * 5000 + "=1"],
             capsys)


def _calib_import(files, name, text, *extra):
    (files / name).write_text(text)
    return ["calib", "import", files / name, *_calib_key(), "--strict", *extra, "-o", files / "o.toml"]


def test_an_sglang_accept_len_of_1e308_writes_mean_accepted_per_step_inf(files, capsys):
    line = ("[2026-10-01 10:00:00 TP0] Decode batch, #running-req: 4, #token: 9000, token usage: 0.05, "
            "accept len: {}, gen throughput (token/s): 120.00, #queue-req: 0\n")
    _refused(_calib_import(files, "sgl.log", line.format("2.50") * 3 + line.format("1e308"), "--depth", "3"),
             capsys, "accept len")
    assert not (files / "o.toml").exists()


def test_a_vllm_drafted_count_of_2_63_passes_the_2_62_count_limit(files, capsys):
    line = ("INFO 12-01 14:00:10 [metrics.py:86] SpecDecoding metrics: Mean acceptance length: 2.89, Accepted "
            "throughput: 226.80 tokens/s, Drafted throughput: 360.00 tokens/s, Accepted: {a} tokens, Drafted: {d} "
            "tokens, Per-position acceptance rate: 0.800, 0.620, 0.470, Avg Draft acceptance rate: 63.0%\n")
    text = line.format(a=2268, d=3600) + line.format(a=2**62, d=2**63)
    _refused(_calib_import(files, "v.log", text), capsys)
    assert not (files / "o.toml").exists()


BENCH_RISING = ("---------------Speculative Decoding---------------\nDrafts:        1000\nDraft tokens:  3000\n"
                "Per-position acceptance (%):\n  Position 0:   50.00\n  Position 1:   80.00\n  Position 2:   90.00\n"
                "=====\n")


def test_calib_import_of_per_position_rates_that_rise_writes_priors_0_5_1_1_even_with_strict(files, capsys):
    _refused(_calib_import(files, "bench.txt", BENCH_RISING), capsys, "bench.txt:1", "position 2 (80)",
             "cannot rise")
    assert not (files / "o.toml").exists()
    good = BENCH_RISING.replace("90.00", "40.00").replace("80.00", "45.00")
    argv = [a for a in _calib_import(files, "bench.txt", BENCH_RISING + good) if a != "--strict"]
    assert _run(argv) == 0
    err = capsys.readouterr().err
    assert "warning: skipped bench.txt:1" in err and "cannot rise" in err, err
    assert "prior_by_position = [0.5, 0.9, 0.8888" in (files / "o.toml").read_text()


HOSTILE_NAME = "x\x1b[31m\ry"


def test_control_characters_in_names_printed_raw(files, capsys):
    (files / f"t{HOSTILE_NAME}.csv").write_text(TRACE)
    assert _run(["trace", "show", files / f"t{HOSTILE_NAME}.csv"]) == 0  # a report naming the file
    out = capsys.readouterr().out
    err = _refused(["simulate", "--trace", files / f"no{HOSTILE_NAME}.csv", *_tc(files), "--policy", "fixed:1"],
                   capsys)
    from specsim._text import format_grid

    for text in (out, err, format_grid(["policy"], [[HOSTILE_NAME]])):
        assert "\x1b" not in text and "\r" not in text, text
        assert "x\\x1b[31m\\ry" in text, text


def test_calib_drift_blames_an_internal_max_depth_the_user_never_gave(files, capsys):
    from specsim.calibration import DrafterKey, calibration_from_rates
    from specsim.calibration.online import OnlineCalibration

    deep = calibration_from_rates(DrafterKey("x", 9, "bf16", True), [0.9] * 20, "conditional")
    assert OnlineCalibration(deep).max_depth == 20  # the calibration's depth, not a default of 16
    (files / "deep.toml").write_text(deep.render())
    (files / "steps.csv").write_text("drafts,accepted\n" + "20,12\n" * 5 + "300,3\n")
    err = _refused(["calib", "drift", files / "deep.toml", "--steps-log", files / "steps.csv"], capsys,
                   "300 drafts per sequence", "at most 255")
    assert "max_depth" not in err


def test_extra_fields_in_trace_and_drafts_log_rows_are_accepted(files, capsys):
    from specsim.traces import read_trace

    (files / "wide.csv").write_text(TRACE + "9.0,10,20,30\n")
    _refused(["trace", "show", files / "wide.csv"], capsys, "wide.csv:42", "more fields than the header")
    read = read_trace(files / "wide.csv", skip_bad_rows=True)  # counted, as any bad row
    assert (read.skipped_bad, read.bad_lines) == (1, (42,))
    (files / "d.csv").write_text("step,sequence,position,confidence,accepted\n0,0,1,-0.1,1\n0,0,2,-0.2,0,7\n")
    _refused(["calib", "fit", "--drafts-log", files / "d.csv", *_calib_key(), "-o", files / "o.toml"], capsys,
             "d.csv: line 3 has 6 fields", "header names 5")
    assert not (files / "o.toml").exists()


# == Hostile input, round four (cases 8-17; docs/limits.md) =======================================

# -- 8: an NVML log's GPUs summed per sampling instant, by their index ----------------------------

@pytest.mark.parametrize("header,stamps", [
    ("index, power.draw [W]", ["", ""]),
    ("timestamp, index, power.draw [W]", ["2025/06/01 10:00:00.000, ", "2025/06/01 10:00:00.001, "]),
], ids=["no timestamp", "per-GPU stamps"])
def test_a_multi_gpu_nvml_log_without_a_shared_timestamp_halves_the_power(tmp_path, header, stamps):
    from specsim.errors import TableError
    from specsim.measure.engine_tables import nvml_log_power_w

    log = tmp_path / "power.csv"
    rows = [f"{stamps[i % 2]}{i % 2}, {300 + 10 * i}.00 W\n" for i in range(6)]
    if not stamps[0]:
        rows = [r.lstrip() for r in rows]
    log.write_text(header + "\n" + "".join(rows))
    assert nvml_log_power_w(log) == (pytest.approx(300 + 310 + 20 * 2), 3, 2)
    log.write_text(header + "\n" + "".join(rows) + "".join(rows[:4:2]))  # GPU 0 read twice more
    with pytest.raises(TableError, match="GPU 0: 5, GPU 1: 3"):
        nvml_log_power_w(log)
    log.write_text(header + "\n" + rows[0].replace(", 0,", ", x,") if stamps[0] else header + "\nx, 300 W\n")
    with pytest.raises(TableError, match="index = 'x' is not a GPU index"):
        nvml_log_power_w(log)


@pytest.mark.parametrize("reading", ["3_00 W", "+300 W", "0x12c W", "٣٠٠ W"])
def test_an_nvml_reading_3_00_w_is_read_as_300(tmp_path, reading):  # item 16
    from specsim.errors import TableError
    from specsim.measure.engine_tables import nvml_log_power_w

    log = tmp_path / "power.csv"
    log.write_text(f"index, power.draw [W]\n0, {reading}\n", encoding="utf-8")
    with pytest.raises(TableError, match=f"power.draw = '{re.escape(reading)}' is not a power"):
        nvml_log_power_w(log)


# -- 12: every label specsim prints for a policy is a valid --policy -------------------------------

@pytest.mark.parametrize("text", ["propose@0.1", "sequence@0.1", "load-aware@0.1", "propose@0"])
def test_slack_forms_the_run_labels_show_are_an_unknown_policy(files, text, capsys):
    from specsim.policy import parse_policy

    pol = parse_policy(text)
    assert str(pol) == text and pol.slack == float(text.partition("@")[2])
    assert _run(["simulate", "--trace", files / "tiny.csv", *_tc(files), "--policy", text, "--slack", "0.5"]) == 0
    assert f"\n{text} " in capsys.readouterr().out  # run at its own slack, labelled as given


@pytest.mark.parametrize("text,needle", [("fixed@0.1", "only propose, sequence and load-aware take a slack"),
                                         ("propose@1", "outside [0, 1)"), ("propose@x", "not a share in [0, 1)"),
                                         ("propose@1_0", "not a share"), ("propose@nan", "outside [0, 1)"),
                                         ("propose@0.1:x", "propose@SLACK takes no argument")])
def test_a_bad_slack_form_is_refused_by_name(files, text, needle, capsys):
    _refused(["simulate", "--trace", files / "tiny.csv", *_tc(files), "--policy", text], capsys, needle)


@settings(max_examples=60, deadline=None)
@given(kind=st.sampled_from(["propose", "sequence", "load-aware", "goodput", "fixed:3"]),
       slack=st.floats(0.0, 1.0, exclude_max=True))
def test_a_printed_label_reads_back_as_the_run_it_labels(kind, slack):
    from specsim.policy import parse_policy

    pol = parse_policy(kind)
    label = pol.at_slack(slack)
    back = parse_policy(label)
    assert str(back) == label
    assert back.at_slack(0.5) == label
    if pol.reads_slack:
        assert back.slack == slack and "@-" not in label
    assert "@-" not in pol.at_slack(-0.0) and "@-" not in str(parse_policy(f"{kind}@-0" if pol.reads_slack else kind))


# -- 15: foreign exceptions from the Python API, by the project's own errors ------------------------

def _foreign_calls(tmp):
    from specsim.calibration import DrafterKey
    from specsim.calibration.spread import fit_spread
    from specsim.errors import CalibrationError, KeyMismatchError, TableError
    from specsim.measure.engine_tables import import_table
    from specsim.plan.planner import SpecCostState

    (tmp / "t.toml").write_text(demo_table().to_text())
    (tmp / "c.toml").write_text(demo_calibration().render())
    (tmp / "it.jsonl").write_text('{"iter": 0}\n')
    table_key, drafter_key = demo_table().key, demo_calibration().drafter
    assert isinstance(drafter_key, DrafterKey)
    return {
        "fit_spread('x')": (lambda: fit_spread("x"), CalibrationError, "fit_spread takes a RequestData"),
        "fit_spread(None)": (lambda: fit_spread(None), CalibrationError, "got None"),
        "import_table(key='key')": (lambda: import_table([tmp / "it.jsonl"], "trtllm-iterations", "key",
                                                         power_w=300.0), TableError, "key must be a TableKey"),
        "SpecCostState.load keys swapped": (
            lambda: SpecCostState.load(tmp / "t.toml", tmp / "c.toml", drafter_key, table_key, 0.0),
            KeyMismatchError, "serve_key must be a TableKey, got DrafterKey(" ),
        "SpecCostState.load drafter_key=None": (
            lambda: SpecCostState.load(tmp / "t.toml", tmp / "c.toml", table_key, None, 0.0),
            KeyMismatchError, "drafter_key must be a DrafterKey, got None"),
    }


@pytest.mark.parametrize("call", ["fit_spread('x')", "fit_spread(None)", "import_table(key='key')",
                                  "SpecCostState.load keys swapped", "SpecCostState.load drafter_key=None"])
def test_api_calls_that_raise_attributeerror(tmp_path, call):
    run, error, said = _foreign_calls(tmp_path)[call]
    with pytest.raises(error) as e:
        run()
    assert said in str(e.value)


# -- 16: silent accepts ----------------------------------------------------------------------------

DUP = "appears twice in one object"


def test_duplicate_json_keys_take_the_last_value(files, capsys):
    # a side file read whole (an engine config)
    (files / "dup.json").write_text('{"method": "eagle", "num_speculative_tokens": 3, "num_speculative_tokens": 5}')
    _refused(["simulate", "--trace", files / "tiny.csv", *_tc(files), "--policy", f"vllm:{files / 'dup.json'}"],
             capsys, "dup.json", "the key 'num_speculative_tokens' " + DUP)
    # a drafts log in JSON Lines (its fast path reads every line at once)
    rows = [f'{{"step": {i}, "sequence": 0, "position": 1, "confidence": -0.1, "accepted": 1}}' for i in range(40)]
    rows[7] = '{"step": 7, "sequence": 0, "position": 1, "confidence": -0.1, "accepted": 1, "accepted": 0}'
    (files / "d.jsonl").write_text("\n".join(rows) + "\n")
    _refused(["calib", "fit", "--drafts-log", files / "d.jsonl", *_calib_key(), "-o", files / "o.toml"], capsys,
             "d.jsonl", "line 8", "the key 'accepted' " + DUP)
    assert not (files / "o.toml").exists()


def test_duplicate_keys_in_telemetry_documents_take_the_last_value(tmp_path):
    from specsim.errors import SpecsimError
    from specsim.interop._records import Tally, json_documents

    one = '{\n  "iter": 1,\n  "iterLatencyMS": 5.0,\n  "iterLatencyMS": 50.0\n}\n'
    with pytest.raises(SpecsimError, match="doc.json: the key 'iterLatencyMS' " + DUP):
        json_documents(one, "doc.json", Tally())
    tally = Tally()
    docs = json_documents('{"iter": 1}\n{"iter": 2, "iter": 3}\n{"iter": 4}\n', "it.jsonl", tally)
    assert docs == [{"iter": 1}, {"iter": 4}] and tally.garbage == 1
    assert tally.problems == [f"it.jsonl:2: the key 'iter' {DUP}: give it once (which value is meant is unknown)"]


@pytest.mark.parametrize("method", ["", " ", "eagle\x1b[2J", "two words"])
def test_calib_export_method_empty_is_written(files, method, capsys):
    _refused(["calib", "export", files / "c.toml", "--to", "vllm-synthetic", "--method", method, "-o",
              files / "s.json"], capsys, "is not a method name")
    assert not (files / "s.json").exists()
    from specsim.errors import CalibrationError
    from specsim.interop.vllm import synthetic_config

    with pytest.raises(CalibrationError, match="method = '' must be a non-empty line of printable text"):
        synthetic_config(demo_calibration(), method="")
    with pytest.raises(CalibrationError, match="draft_model = 'a\\\\nb' must be"):
        synthetic_config(demo_calibration(), draft_model="a\nb")


@pytest.mark.parametrize("flag", ["--box-class", "--recipe"])
def test_control_characters_in_box_class_are_written_to_the_table(files, flag, capsys):
    metrale = files / "m.toml"
    metrale.write_text("")
    argv = ["table", "import", metrale, "--run", "r", "--box-class", "b", "--recipe", "x", "-o", files / "o.toml"]
    argv[argv.index(flag) + 1] = HOSTILE_NAME
    err = _refused(argv, capsys, "is not a name: give one line of printable text")
    assert "\x1b" not in err and not (files / "o.toml").exists()
    _refused(["table", "check", files / "t.toml", flag, "h\x07"], capsys, "is not a name")


def test_control_characters_in_fleet_group_names_are_printed(files, capsys):
    (files / "f.toml").write_text('[[group]]\nname = "a\\u001b[31mb"\ncount = 1\ntable = "t.toml"\n'
                                  'calibration = "c.toml"\n')
    err = _refused(["fleet", "--trace", files / "tiny.csv", "--fleet", files / "f.toml", "--policy", "fixed:1"], capsys,
                   "name = 'a\\x1b[31mb' must be a non-empty line of printable text")
    assert "\x1b" not in err


@pytest.mark.parametrize("argv,said", [
    (["--rate-scale", "-0"], "rate scale = 0.0 must be >= 1e-06"),
    (["--policy", "propose@-0"], None),
    (["--policy", "propose", "--slack", "-0"], None),
])
def test_messages_print_minus_0(files, argv, said, capsys):
    base = ["simulate", "--trace", files / "tiny.csv", *_tc(files)] + ([] if "--policy" in argv else
                                                                      ["--policy", "fixed:1"])
    if said:
        err = _refused(base + argv, capsys, said)
    else:
        assert _run(base + argv) == 0
        err = capsys.readouterr().out
        assert "propose@0 " in err
    assert "-0" not in err.replace("e-0", ""), err
    from specsim._checks import number_problem

    assert number_problem(-0.0, "x", low=1.0) == "x = 0.0 must be >= 1"


# == Hostile input, round five: draft trees, engine profiles, published comparisons ==============

def test_a_tree_with_expected_tokens_10_400_is_an_overflowerror_and_1e308_is_kept():
    from specsim.errors import TreeError
    from specsim.tree import Tree

    for bad in (10**400, -(10**400), 1e308, math.inf, 0.5, 3):
        with pytest.raises(TreeError, match="expected_tokens = .* a tree of 1 nodes emits 1 \\+ one probability"):
            Tree((-1,), (1,), bad)
    assert Tree((-1,), (1,), 2).expected_tokens == 2.0 and math.isnan(Tree((-1,), (1,)).expected_tokens)
    assert Tree((), (), 1.0).expected_tokens == 1.0


@pytest.mark.kernels
@pytest.mark.parametrize("table,cell", [([["0.5"]], "depth 1 rank 1 = '0.5'"), ([[True, False]], "depth 1 rank 1 = True"),
                                        ([[0.5 + 0.5j]], "depth 1 rank 1 = (0.5+0.5j)"),
                                        ([[0.5, None]], "depth 1 rank 2 = None")],
                         ids=["text", "boolean", "complex", "None"])
def test_a_rank_acceptance_of_text_booleans_or_complex_numbers_is_read_as_rates(table, cell):
    import numpy as np

    from specsim.errors import TreeError
    from specsim.tree import best_tree, expected_tokens

    for value in (table, np.array(table)):
        with pytest.raises(TreeError, match=re.escape(cell) + " is not a number"):
            best_tree(value, 2, 1)
        with pytest.raises(TreeError, match="is not a number"):
            expected_tokens(value, [-1], [1])
    with pytest.raises(SpecsimError, match=re.escape(cell)):
        demo_calibration().with_rank_acceptance(table)
    assert best_tree(np.array([[0.5, 0.25]], dtype=object), 2, 1).expected_tokens == 1.75  # numbers held as objects


@pytest.mark.parametrize("setting", ["trtllm:2,2,\u0663", "sglang:2,\u0663,4", "sglang:2,2,1_0", "sglang:2,2,+4"])
def test_calib_import_tree_reads_digits_of_other_scripts(setting):
    from specsim.calibration.tree_check import tree_of_setting

    with pytest.raises(SpecsimError, match="whole numbers"):
        tree_of_setting(setting, [[0.79, 0.1, 0.04], [0.74, 0.1, 0.04]])
    assert tree_of_setting("sglang: 2, 2 ,4", [[0.79, 0.1, 0.04], [0.74, 0.1, 0.04]]).nodes == 3


PUBLISHED_HEADER = ("set,engine,gpu,tp,model,method,spec_tokens,tree,batch_or_concurrency,metric,value,unit,"
                    "baseline_value,acceptance_length,source\n")


def _published(files, *rows):
    (files / "pub.csv").write_text(PUBLISHED_HEADER + "".join(f"R9,vLLM,H200,1,m,{r}\n" for r in rows),
                                   encoding="utf-8")
    return ["table", "compare", files / "t.toml", "--published", files / "pub.csv"]


def test_table_compare_method_empty_keeps_every_row(files, capsys):
    _refused(_published(files, "EAGLE,3,chain,1,TPOT,4,ms,6,2.5,x") + ["--method", ""], capsys, "--method",
             "is not a name")


@pytest.mark.parametrize("value,said", [("\u0663", "'\u0663' is not a number"), ("4_0", "'4_0' is not a number")])
def test_a_published_value_in_other_digits_or_with_an_underscore_is_read_as_a_number(files, value, said, capsys):
    _refused(_published(files, f"EAGLE,3,chain,1,TPOT,{value},ms,6,2.5,x"), capsys, "pub.csv", "line 2", said)
    from specsim.costmodel.published import read_published

    rows, skipped = read_published(_published(files, f"EAGLE,3,chain,1,TPOT,{value},ms,6,2.5,x",
                                              "EAGLE,3,chain,2,TPOT,4.5,ms,6.5,2.5,x")[-1])
    assert [r.line for r in rows] == [3] and skipped[0][0] == 2


@pytest.mark.parametrize("length", ["0.5", "5", "99", "0", "-2", "1e308", "\u0663"])
def test_a_published_acceptance_length_a_depth_cannot_emit_scales_the_prediction(files, length, capsys):
    _refused(_published(files, f"EAGLE,3,chain,1,TPOT,4,ms,6,{length},x"), capsys, "line 2",
             f"acceptance_length {length!r} is not a number in 1..4")
    assert _run(_published(files, "EAGLE,3,chain,1,TPOT,4,ms,6,not reported,x",
                           "EAGLE,3,chain,2,TPOT,4.5,ms,6.5,4,x")) == 0  # a note is no length; k + 1 is one
    assert "skipped" not in capsys.readouterr().out


def test_a_published_batch_past_the_tables_widths_is_priced_at_its_widest(files, capsys):
    from specsim.table import CostTable

    widest = int(CostTable.load(files / "t.toml").widths[-1])
    _refused(_published(files, f"EAGLE,3,chain,{widest + 1},TPOT,4,ms,6,2.5,x"), capsys, "line 2",
             f"batch {widest + 1} is outside the table's widths")
    assert _run(_published(files, f"EAGLE,3,chain,{widest + 1},TPOT,4,ms,6,2.5,x",
                           f"EAGLE,3,chain,{widest},TPOT,4,ms,6,2.5,x")) == 0
    assert f"skipped 1 row: line 2: batch {widest + 1} is outside" in capsys.readouterr().out


@pytest.mark.parametrize("fields", [{"kv_lora_rank": 512, "q_lora_rank": 768, "qk_rope_head_dim": 32,
                                     "qk_nope_head_dim": 64, "v_head_dim": 64}, {"kv_lora_rank": -1}],
                         ids=["MiniCPM3-like", "kv_lora_rank -1"])
def test_a_model_config_with_latent_attention_is_priced_as_plain_attention(files, fields, capsys):
    import json

    doc = {"model_type": "minicpm3", "hidden_size": 2560, "intermediate_size": 6400, "num_hidden_layers": 62,
           "num_attention_heads": 40, "num_key_value_heads": 40, "vocab_size": 73448, "hidden_act": "silu",
           "torch_dtype": "bfloat16", **fields}
    (files / "config.json").write_text(json.dumps(doc))
    _refused(["table", "model", "--gpu", "h200", "--model-config", files / "config.json", "--drafter", "eagle-1l",
              "--max-k", "2", "--widths", "1,2", "-o", files / "m.toml"], capsys, "config.json", "kv_lora_rank",
             "multi-head latent attention")
    assert not (files / "m.toml").exists()


def _cost_model_calls():
    import numpy as np

    from specsim.costmodel import Setup, forward_breakdown, model_spec, model_table, step_costs, step_parts

    def fb(**kw):
        args = dict(tokens=8, seqs=8, context=1024) | kw
        return lambda: forward_breakdown(args.pop("gpu", "h200"), args.pop("model", "llama-3.1-8b"), **args)

    def mt(**kw):
        args = dict(widths=[1, 2], max_k=2) | kw
        return lambda: model_table(args.pop("gpu", "h200"), args.pop("model", "llama-3.1-8b"),
                                   args.pop("drafter", "eagle-1l"), **args)

    def sc(parts=False, **kw):
        setup = Setup("h200", "llama-3.1-8b", "eagle-1l", engine="sglang")
        return lambda: (step_parts if parts else step_costs)(setup, **(dict(widths=[1, 2], max_k=2) | kw))

    return {
        "forward_breakdown gpu=['h200']": (fb(gpu=["h200"]), "gpu = ['h200'] must be a gpu spec's name"),
        "forward_breakdown model={}": (fb(model={}), "model = {} must be a model spec's name"),
        "forward_breakdown overheads=3": (fb(overheads=3), "overheads = 3 must be an Overheads"),
        "forward_breakdown achieved='x'": (fb(achieved="x"), "achieved = 'x' must be an Achieved"),
        "forward_breakdown achieved=array": (fb(achieved=np.array([1.0, 2.0])), "must be an Achieved"),
        "forward_breakdown specs='x'": (fb(specs="x"), "specs = 'x' must be a dict"),
        "model_table drafter=np.array": (mt(drafter=np.array(["eagle-1l"])), "drafter = array"),
        "model_spec dtype=['bf16']": (lambda: model_spec("llama-3.1-8b", dtype=["bf16"]), "dtype ['bf16'] is not one of"),
        "model_table specs={'gpu': 'x'}": (mt(specs={"gpu": "x"}), "the user gpu specs must be a dict"),
        "model_table widths=[1.5, 2]": (mt(widths=[1.5, 2]), "widths [1.5, 2] are not a list of integers"),
        "model_table widths=['1', '2']": (mt(widths=["1", "2"]), "are not a list of integers"),
        "model_table widths=[True, 2]": (mt(widths=[True, 2]), "are not a list of integers"),
        "model_table widths=complex": (mt(widths=np.array([1 + 1j])), "are not a list of integers"),
        # step_costs and step_parts (their Setup value) took any widths and depth: NaN costs for -1,
        # 1.5 and "1" read as widths, a TypeError or a NumPy size error for a depth of None or 10**400
        "step_costs widths=[-1]": (sc(widths=[-1]), "every width must be >= 1"),
        "step_costs widths=[0]": (sc(widths=[0]), "every width must be >= 1"),
        "step_costs widths=[1.5]": (sc(widths=[1.5]), "widths [1.5] are not a list of integers"),
        "step_costs widths=['1']": (sc(widths=["1"]), "are not a list of integers"),
        "step_costs widths=None": (sc(widths=None), "widths None are not a list of integers"),
        "step_costs widths=[10**400]": (sc(widths=[10**400]), "every width must be >= 1"),
        "step_costs widths=[]": (sc(widths=[]), "widths is empty"),
        "step_costs max_k=None": (sc(max_k=None), "max_k = None must be a whole number"),
        "step_costs max_k=1.5": (sc(max_k=1.5), "max_k = 1.5 must be a whole number"),
        "step_costs max_k=-1": (sc(max_k=-1), "max_k = -1 is outside 0.."),
        "step_parts max_k=10**400": (sc(max_k=10**400, parts=True), "is outside 0.."),
        "step_parts setup='x'": (lambda: step_parts("x"), "setup must be a Setup"),
    }


@pytest.mark.parametrize("call", list(_cost_model_calls()))
def test_cost_model_api_attributeerror_typeerror_or_widths_cut_to_integers(call):
    from specsim.errors import CostModelError

    run, said = _cost_model_calls()[call]
    with pytest.raises(CostModelError) as e:
        run()
    assert said in str(e.value)


@pytest.mark.parametrize("body,line,said", [
    ("0,0,1,-0.1,1,1,-1\n0,0,1,-0.9,0,2,-1\n0,0,2,-0.2,1,1.5,0\n", 4, "'1.5' to int64 (column 6)"),
    ("0,0,1,-0.1,1,1,-1\n\n# a note\n0,0,1,-0.9,0,x,-1\n", 5, "'x' to int64 (column 6)"),
    ("0,0,1,-0.1,1,1,-1\n0,0,1,-0.9,maybe,2,-1\n", 3, "'maybe' to int64 (column 5)"),
], ids=["third row", "after a blank and a comment line", "accepted column"])
def test_a_drafts_log_value_that_is_not_a_number_is_placed_at_a_numpy_row_counted_from_0(files, body, line, said,
                                                                                          capsys):
    (files / "d.csv").write_text("step,sequence,position,confidence,accepted,rank,parent\n" + body)
    err = _refused(["calib", "fit", "--drafts-log", files / "d.csv", *_calib_key(), "-o", files / "o.toml"], capsys,
                   f"d.csv: line {line}: could not convert string {said}")
    assert "at row" not in err and not (files / "o.toml").exists()


@pytest.mark.parametrize("topk", ["0", "-2", "true", "1e400", "100000000000000000000000", "[2]"])
def test_a_server_info_topk_that_is_no_count_is_fitted_as_a_chain(files, topk, capsys):
    (files / "info.json").write_text('{"internal_states": [{"avg_spec_accept_length": 2.4}], "speculative_algorithm": '
                                     f'"EAGLE", "speculative_eagle_topk": {topk}, "speculative_num_steps": 3, '
                                     '"speculative_num_draft_tokens": 6}')
    _refused(["calib", "import", files / "info.json", *_calib_key(), "--assume", "constant-rate", "-o",
              files / "o.toml"], capsys, "(sglang:?,3,6) but not all of its settings", "not a whole number >= 1")
    assert not (files / "o.toml").exists()


# -- 17: the studies' values (tune, capacity): what escaped as TypeError, AttributeError, ValueError ---

def _study(**kw):
    from specsim.studies.inputs import StudyInputs
    from specsim.traces import synthetic_trace

    requests = kw.pop("requests", synthetic_trace(60, 5.0, seed=1).requests)
    fields = {"table": demo_table(), "calibration": demo_calibration(), "slo": SLO(tpot_s=1.0, attainment=0.5),
              "seeds": 1} | kw
    return StudyInputs(requests, **fields)


def _capacity_calls():
    from specsim import capacity

    def cap(inputs=None, **kw):
        return lambda: capacity(inputs or _study(), kw.pop("policies", ["fixed:1"]),
                                **{"max_replicas": 4, "executor": "serial"} | kw)

    return {
        "max_replicas=None": (cap(max_replicas=None), "max_replicas = None must be a whole number"),
        "max_replicas=nan": (cap(max_replicas=math.nan), "max_replicas = nan must be a whole number"),
        "max_replicas=inf": (cap(max_replicas=math.inf), "max_replicas = inf must be a whole number"),
        "max_replicas='3'": (cap(max_replicas="3"), "max_replicas = '3' must be a whole number"),
        "max_replicas=2.5": (cap(max_replicas=2.5), "max_replicas = 2.5 must be a whole number"),
        "max_replicas=True": (cap(max_replicas=True), "max_replicas = True must be a whole number"),
        "gpu_hour_usd='3'": (cap(gpu_hour_usd="3"), "gpu_hour_usd = '3' must be a number"),
        "gpu_hour_usd=10**400": (cap(gpu_hour_usd=10**400), "must be finite"),
        "gpu_hour_usd=1e308": (cap(gpu_hour_usd=1e308), "gpu_hour_usd = 1e+308 must be >= 0 and <= 1e+06 dollars"),
        "gpu_hour_usd=True": (cap(gpu_hour_usd=True), "gpu_hour_usd = True must be a number"),
        "gpu_hour_usd=1j": (cap(gpu_hour_usd=1j), "must be a number"),
        "resampling=5": (cap(resampling=5), "give a Resampling(resamples, windows)"),
        "resampling=(2,)": (cap(resampling=(2,)), "give a Resampling(resamples, windows)"),
        "resampling=(2, 3, 4)": (cap(resampling=(2, 3, 4)), "give a Resampling(resamples, windows)"),
        "policies=None": (cap(policies=None), "policies must be a list of policies"),
        "policies='propose'": (cap(policies="propose"), "write ['propose']"),
        "progress=5": (cap(progress=5), "progress = 5 must be a function"),
        "fleet='t.toml'": (cap(_study(table=None, calibration=None, fleet="t.toml")),
                           "StudyInputs.fleet must be a Fleet (or None), got str"),
        "names=5": (cap(_study(names=5)), "StudyInputs.names must be a dict"),
    }


@pytest.mark.parametrize("call", list(_capacity_calls()))
def test_capacity_arguments_typeerror_valueerror_or_silently_cut_to_integers(call):
    from specsim.studies.capacity import CapacityError

    run, said = _capacity_calls()[call]
    with pytest.raises(CapacityError) as e:
        run()
    assert said in str(e.value)


def test_capacity_takes_numpy_integers_for_seeds_and_resampling():
    import numpy as np

    from specsim import capacity
    from specsim.studies.capacity import Resampling

    result = capacity(_study(seeds=np.int64(1)), ["fixed:1"], max_replicas=np.int64(2), gpu_hour_usd=np.float64(2.0),
                      resampling=Resampling(np.int64(2), np.int64(2)))
    assert result.seeds == 1 and isinstance(result.seeds, int) and result.window_resamples == 2


def _tune_calls():
    from specsim import tune
    from specsim.studies.tune import TuneSettings

    quick = TuneSettings(max_rounds=0, holdout=0, noise_windows=None)

    def run(inputs=None, **kw):
        return lambda: tune(inputs or _study(slo=None), settings=quick, executor="serial", **kw)

    return {
        "requests=None": (run(_study(requests=None, slo=None)), "requests must be a record array"),
        "requests='x'": (run(_study(requests="x", slo=None)), "requests must be a record array"),
        "requests=list": (run(_study(requests=[1.0, 2.0], slo=None)), "requests must be a record array"),
        "table='t.toml'": (run(_study(table="t.toml", slo=None)), "StudyInputs.table must be a CostTable"),
        "calibration=5": (run(_study(calibration=5, slo=None)),
                          "StudyInputs.calibration must be an AcceptanceCalibration"),
        "names=5": (run(_study(names=5, slo=None)), "StudyInputs.names must be a dict"),
        "names={'trace': 5}": (run(_study(names={"trace": 5}, slo=None)), "StudyInputs.names must be a dict"),
        "compare=None": (run(compare=None), "compare must be a list of policies"),
        "compare=5": (run(compare=5), "compare must be a list of policies"),
        "compare='fixed:1'": (run(compare="fixed:1"), "write ['fixed:1']"),
    }


@pytest.mark.parametrize("call", list(_tune_calls()))
def test_tune_inputs_attributeerror_typeerror_or_a_text_compare_read_by_character(call):
    from specsim.errors import ScheduleError

    run, said = _tune_calls()[call]
    with pytest.raises(ScheduleError) as e:
        run()
    assert said in str(e.value)


def test_tune_takes_numpy_floats_for_holdout_and_min_gain():
    import numpy as np

    from specsim import tune
    from specsim.studies.tune import TuneSettings

    settings = TuneSettings(max_rounds=0, holdout=np.float32(0.0), min_gain=np.float64(0.01), noise_windows=None)
    result = tune(_study(slo=None), settings=settings, executor="serial")
    assert result.ranges and result.inputs["holdout"] == 0.0


# -- 18: trace files against the plain csv-module reader ---------------------------------------------

@pytest.mark.kernels
@pytest.mark.parametrize("header,name", [("id,t,t,p,o", "t"), ("id,T,T,p,o", "t"), ("id, t ,t,p,o", "t")],
                         ids=["same name", "same name in capitals", "same name padded"])
def test_a_csv_header_naming_the_arrival_column_twice_reads_the_first_where_csv_reads_the_last(tmp_path, header,
                                                                                               name):
    from specsim.traces import read_trace
    from tests import reference as ref

    path = tmp_path / "dup.csv"
    path.write_text(header + "\na,1,9,10,3\nb,2,8,11,4\n")
    rows, _ = ref.ref_read_csv(path, header.split(",")[2].strip(), "p", "o")
    assert [(p, o) for _, p, o in rows] == [(11, 4), (10, 3)]  # the last of the two, by the csv module
    with pytest.raises(SpecsimError, match=f"dup.csv:1: the header names column '{name}' 2 times \\(fields 2, 3\\)"):
        read_trace(path, "csv", columns=f"arrival={name},prompt=p,output=o")


@pytest.mark.parametrize("table", [None, "t.toml", 5, "calibration"])
def test_server_options_resolve_of_no_table_attributeerror(table):
    from specsim.errors import SimulationError
    from specsim.sim.options import ServerOptions

    table = demo_calibration() if table == "calibration" else table
    with pytest.raises(SimulationError, match="resolve takes the server's CostTable"):
        ServerOptions().resolve(table)
    assert ServerOptions().resolve(demo_table()).max_num_seqs == int(demo_table().widths[-1])



def test_capacity_json_with_a_gpu_hour_of_1e308_dollars_is_a_valueerror_traceback(files, capsys):
    _refused(["capacity", "--trace", files / "tiny.csv", *_tc(files), "--slo-tpot-s", "1", "--attainment", "0.5",
              "--serial", "--policy", "fixed:1", "--gpu-hour-usd", "1e308", "--json", files / "cap.json"], capsys,
             "gpu_hour_usd = 1e+308 must be >= 0 and <= 1e+06")
    assert not (files / "cap.json").exists()


@pytest.mark.parametrize("argv", [["simulate", "--seed", "{v}"], ["fleet", "--replicas", "2", "--seed", "{v}"],
                                  ["simulate", "--acceptance-window", "{v}", "--acceptance-length-threshold", "1"],
                                  ["table", "model", "--gpu", "h200", "--model", "llama-3.1-8b", "--drafter",
                                   "eagle-1l", "--max-k", "2", "--widths", "1,{v}", "-o", "{d}/m.toml"],
                                  ["simulate", "--kv-block-size", "{v}"]],
                         ids=["simulate --seed", "fleet --seed", "--acceptance-window", "--widths", "--kv-block-size"])
@pytest.mark.parametrize("value", ["\u0663", "1_6"], ids=["arabic-indic 3", "underscore"])
def test_whole_number_options_read_other_scripts_digits_and_underscores(files, argv, value, capsys):
    head = [] if argv[0] == "table" else ["--trace", files / "tiny.csv", *_tc(files), "--policy", "fixed:1"]
    argv = [a.replace("{v}", value).replace("{d}", str(files)) for a in argv]
    _refused([*argv[:1], *head, *argv[1:]], capsys, repr(value if value.isascii() else value)[1:-1])
    assert not (files / "m.toml").exists()


@pytest.mark.parametrize("argv", [["simulate", "--idle-w", "1_0"], ["simulate", "--rate-scale", "1_0"],
                                  ["simulate", "--slack", "0.0_1"],
                                  ["capacity", "--slo-tpot-s", "1_0", "--serial"],
                                  ["tune", "--holdout", "0.2_5", "--serial", "-o", "{d}/s.toml"]],
                         ids=["--idle-w", "--rate-scale", "--slack", "--slo-tpot-s", "--holdout"])
def test_number_options_read_1_0_as_10(files, argv, capsys):
    argv = [a.replace("{d}", str(files)) for a in argv]
    _refused([argv[0], "--trace", files / "tiny.csv", *_tc(files), *(["--policy", "fixed:1"] if argv[0] != "tune"
                                                                      else []), *argv[1:]],
             capsys, f"'{argv[2]}' is not a number written in ASCII digits")
    assert not (files / "s.toml").exists()


def test_an_executor_choice_of_10_400_workers_prints_all_536_characters():
    from specsim import ExecutorChoice, tune
    from specsim.studies.tune import TuneSettings

    with pytest.raises(SpecsimError, match=r"--workers 10,000,000,.*characters\) is outside 1\.\.64") as e:
        tune(_study(slo=None), settings=TuneSettings(max_rounds=0), executor=ExecutorChoice("threads", 10**400))
    assert len(str(e.value)) < 300


@pytest.mark.parametrize("flag", ["trees", "allow_overload", "progress"])
def test_tune_reads_the_text_false_as_true(flag):
    import numpy as np

    from specsim import tune
    from specsim.errors import ScheduleError
    from specsim.studies.tune import TuneSettings

    quick = TuneSettings(max_rounds=0, holdout=0, noise_windows=None)
    with pytest.raises(ScheduleError, match=f"{flag} must be True or False, got 'False'"):
        tune(_study(slo=None), settings=quick, executor="serial", **{flag: "False"})
    assert tune(_study(slo=None), settings=quick, executor="serial", **{flag: np.False_}).trees is None


@pytest.mark.parametrize("kw,said", [
    ({"path": None}, "path must be a file name (str or Path), got NoneType None"),
    ({"path": 5}, "path must be a file name (str or Path), got int 5"),
    ({"path": b"tiny.csv"}, "path must be a file name (str or Path), got bytes b'tiny.csv'"),
    ({"columns": 5}, "columns must be a dict"),
    ({"columns": ["a"]}, "columns must be a dict"),
    ({"skip_bad_rows": "no"}, "skip_bad_rows must be True or False, got 'no'"),
], ids=["path None", "path 5", "path bytes", "columns 5", "columns ['a']", "skip_bad_rows 'no'"])
def test_read_trace_arguments_typeerror_valueerror_or_no_read_as_yes(files, kw, said):
    from specsim.errors import TraceError
    from specsim.traces import read_trace

    args = {"path": files / "tiny.csv", "format": "csv",
            "columns": "arrival=arrival_s,prompt=prompt_tokens,output=output_tokens"} | kw
    with pytest.raises(TraceError) as e:
        read_trace(args.pop("path"), **args)
    assert said in str(e.value)


@pytest.mark.parametrize("run", ["simulate", "simulate_fleet"])
@pytest.mark.parametrize("progress", [5, "yes"])
def test_a_progress_that_is_no_function_is_a_typeerror_after_the_first_chunk(run, progress):
    from specsim import simulate, simulate_fleet
    from specsim.sim.fleet import Fleet
    from specsim.traces import synthetic_trace

    requests = synthetic_trace(20, 5.0, seed=1).requests
    with pytest.raises(SpecsimError, match=f"progress = {progress!r} must be a function called as progress"):
        if run == "simulate":
            simulate(requests, demo_table(), demo_calibration(), "fixed:1", progress=progress)
        else:
            simulate_fleet(requests, Fleet.uniform(demo_table(), demo_calibration(), 2), "fixed:1", progress=progress)


def _acceptance_trace():
    from specsim.sim.replay import parse_acceptance_file

    return parse_acceptance_file('[[trace]]\nname = "a"\nk_logged = 1\nsteps = ["0110101101"]\n').trace("a")


@pytest.mark.parametrize("trace,step_ms,said", [
    (None, [1.0, 1.5], "replay takes an AcceptanceTrace"),
    ("a", [1.0, 1.5], "replay takes an AcceptanceTrace"),
    ("trace", "1.5", "step_ms must be a non-empty list of finite numbers > 0, got '1.5'"),
    ("trace", 5, "step_ms must be a non-empty list"),
    ("trace", ["1.0", "1.5"], "step_ms must be a non-empty list"),
], ids=["trace None", "trace text", "step_ms text", "step_ms 5", "step_ms texts"])
def test_replay_of_no_trace_asks_for_step_costs_and_step_ms_text_is_read(trace, step_ms, said):
    from specsim.errors import TraceError
    from specsim.sim import replay

    with pytest.raises(TraceError) as e:
        replay(_acceptance_trace() if trace == "trace" else trace, "fixed:1", 1, 10, step_ms=step_ms)
    assert said in str(e.value)


@pytest.mark.parametrize("policy", ["sglang:{f}", "sglang[1,4]:{f}"])
def test_an_sglang_config_nested_50000_deep_is_a_recursionerror(files, policy, capsys):
    (files / "deep.json").write_text("[" * 50_000 + "]" * 50_000)
    _refused(["simulate", "--trace", files / "tiny.csv", *_tc(files), "--policy",
              policy.format(f=files / "deep.json"), "--quiet"], capsys, "deep.json")
