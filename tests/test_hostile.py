"""Hostile input, round three: the commands added since the earlier rounds held to the same
promises (docs/limits.md): no damaged file, no hang, no traceback, no foreign exception, no
impossible value accepted in silence. One test per defect found, named after it."""

from __future__ import annotations

import math
import os

import pytest

from specsim.cli import main
from specsim.costmodel.defaults import demo_calibration, demo_table
from specsim.errors import SpecsimError
from specsim.sim.slo import SLO

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
    assert "specsim: error:" in err and "Traceback" not in err
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


def test_api_capacity_with_a_runner_that_answers_nothing_raises_keyerror():
    from specsim.studies.capacity import capacity
    from specsim.traces import synthetic_trace

    requests = synthetic_trace(20, 5.0, seed=1).requests
    for runner in (lambda a: [], lambda a: None, lambda a: ["x"] * len(a)):
        with pytest.raises(SpecsimError, match="runner"):
            capacity(requests, demo_table(), demo_calibration(), ["fixed:1"], slo=SLO(tpot_s=1.0), runner=runner)


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
