"""``specsim simulate``: options, outputs (JSON, per-request CSV, plot), refusals, real traces."""

from __future__ import annotations

import csv
import json

import numpy as np
import pytest

from specsim.cli import main
from specsim.sim import simulate, synthetic_trace
from specsim.sim.slo import SLO
from tests.fixtures import small_calibration, small_table

SYNTH = "requests=150,rate=4,seed=2,output=lognormal:20:0.8,prompt=lognormal:200:0.5"


@pytest.fixture
def files(tmp_path):
    table, cal = small_table(), small_calibration()
    t = tmp_path / "table.toml"
    c = tmp_path / "cal.toml"
    t.write_text(CostTableText(table))
    c.write_text(cal.render())
    return t, c


def CostTableText(table):  # noqa: N802
    from specsim.table import CostTable

    return CostTable.render(table.key, table.cells)


def test_simulate_writes_json_csv_and_matches_the_api(files, tmp_path, capsys):
    t, c = files
    out, req = tmp_path / "sim.json", tmp_path / "req.csv"
    rc = main(["simulate", "--synthetic", SYNTH, "--table", str(t), "--calibration", str(c),
               "--policy", "fixed:0", "--policy", "propose", "--policy", "sequence", "--policy", "goodput",
               "--slack", "0", "--slack", "0.4", "--max-batch", "3", "--seed", "5", "--idle-w", "12",
               "--prefill-ms-per-token", "0.02", "--prefill-j-per-token", "0.01",
               "--slo-ttft-s", "0.5", "--slo-tpot-s", "0.03", "--json", str(out), "--requests-csv", str(req)])
    assert rc == 0
    text = capsys.readouterr().out
    for label in ("fixed:0", "propose@0", "propose@0.4", "sequence@0", "sequence@0.4", "goodput", "TPOT p99"):
        assert label in text
    doc = json.loads(out.read_text())
    labels = [p["label"] for p in doc["policies"]]
    assert labels == ["fixed:0", "propose@0", "propose@0.4", "sequence@0", "sequence@0.4", "goodput"]
    assert doc["trace"]["requests"] == 150 and doc["trace"]["format"] == "synthetic"
    assert doc["options"]["max_batch"] == 3 and doc["options"]["seed"] == 5 and doc["options"]["slacks"] == [0.0, 0.4]
    assert doc["table"]["widths"] == [1, 2, 4] and doc["calibration"]["prior_by_position"] == [0.75, 0.6, 0.55]
    for key in ("requests", "output_tokens", "makespan_s", "tokens_per_s", "energy_j", "j_per_token", "mean_power_w",
                "mean_width", "depth_histogram", "accepted_per_step", "ttft_s", "tpot_s", "e2e_s", "slo"):
        assert key in doc["policies"][0]
    assert set(doc["policies"][0]["ttft_s"]) >= {"p50", "p90", "p99"}
    # The file is what the Python API gives for the same inputs.
    reqs = synthetic_trace(150, 4.0, seed=2, **_lengths()).requests
    res = simulate(reqs, small_table(), small_calibration(), "sequence", slack=0.4, max_num_seqs=3, seed=5, idle_w=12.0,
                   prefill_ms_per_token=0.02, prefill_j_per_token=0.01)
    want = res.summary(SLO(0.5, 0.03))
    # The command adds which earlier policy, if any, made the same run: on this trace slack 0.4
    # changes no depth the sequence planner picks.
    assert doc["policies"][4] == json.loads(json.dumps(want)) | {"same_as": "sequence@0"}
    seq0 = simulate(reqs, small_table(), small_calibration(), "sequence", slack=0.0, max_num_seqs=3, seed=5, idle_w=12.0,
                    prefill_ms_per_token=0.02, prefill_j_per_token=0.01)
    assert np.array_equal(seq0.finish_s, res.finish_s) and seq0.energy_j == res.energy_j
    with req.open() as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 6 * 150
    seq = [r for r in rows if r["policy"] == "sequence" and r["slack"] == "0.4"]
    assert [float(r["finish_s"]) for r in seq] == res.finish_s.tolist()


def _lengths():
    from specsim.traces import LogNormalLengths

    return {"output": LogNormalLengths(20.0, 0.8), "prompt": LogNormalLengths(200.0, 0.5)}


def test_simulate_plot(files, tmp_path, capsys):
    pytest.importorskip("matplotlib")
    t, c = files
    png = tmp_path / "sim.png"
    rc = main(["simulate", "--synthetic", "requests=60,rate=3,seed=1,output=lognormal:15:0.5", "--table", str(t),
               "--calibration", str(c), "--policy", "fixed:2", "--policy", "propose", "--slack", "0",
               "--slack", "0.5", "--plot", str(png)])
    assert rc == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "wrote" in capsys.readouterr().err


@pytest.mark.parametrize("argv, message", [
    (["--policy", "fastest"], "unknown policy"),
    (["--policy", "propose", "--max-batch", "0"], "max_num_seqs"),
    (["--policy", "propose", "--occupancy", "1,2"], "one per calibration bucket"),
])
def test_simulate_refusals_exit_2(files, capsys, argv, message):
    t, c = files
    rc = main(["simulate", "--synthetic", "requests=5,rate=1", "--table", str(t), "--calibration", str(c), *argv])
    assert rc == 2
    assert message in capsys.readouterr().err


def test_simulate_needs_a_trace(files, capsys):
    t, c = files
    assert main(["simulate", "--table", str(t), "--calibration", str(c), "--policy", "fixed:1"]) == 2
    assert "trace" in capsys.readouterr().err


def test_progress_line_on_long_runs(files, capsys, monkeypatch):
    from specsim.sim import engine

    t, c = files
    monkeypatch.setattr(engine, "PROGRESS_CHUNK", 50)
    monkeypatch.setenv("SPECSIM_PROGRESS", "1")  # stderr is not a terminal here: ask for the line
    rc = main(["simulate", "--synthetic", "requests=100000,rate=400,seed=3,output=lognormal:3:0.3", "--table", str(t),
               "--calibration", str(c), "--policy", "fixed:1", "--policy", "fixed:0", "--max-batch", "4",
               "--prefill-ms-per-token", "0"])
    assert rc == 0
    err = capsys.readouterr().err
    assert "simulate:" in err and "100%" in err and "200k/200k" in err
    assert "summaries:" in err and "2/2" in err  # the summaries of 100,000 requests report too


def test_simulate_real_azure_code_trace(shared_data, files, tmp_path, capsys):
    t, c = files
    out = tmp_path / "code.json"
    trace = shared_data / "traces" / "azure2023" / "AzureLLMInferenceTrace_code.csv"
    rc = main(["simulate", "--trace", str(trace), "--limit", "1500", "--table", str(t), "--calibration", str(c),
               "--policy", "fixed:0", "--policy", "sequence", "--json", str(out)])
    assert rc == 0
    doc = json.loads(out.read_text())
    assert doc["trace"]["format"] == "azure2023" and doc["trace"]["requests"] == 1500
    tokens = {p["output_tokens"] for p in doc["policies"]}
    assert tokens == {doc["trace"]["output_tokens"]["sum"]}
    assert np.isfinite([p["j_per_token"] for p in doc["policies"]]).all()
    capsys.readouterr()


def test_simulate_with_a_real_acceptance_trace(shared_data, files, tmp_path, capsys):
    t, c = files
    out = tmp_path / "acc.json"
    glm = shared_data / "metrale" / "glm53_flash_dflash2_gb10x3.toml"
    rc = main(["simulate", "--synthetic", SYNTH, "--table", str(t), "--calibration", str(c), "--policy", "fixed:3",
               "--policy", "sequence", "--acceptance", str(glm), "--acceptance-trace", "glm53_dflash_fk7",
               "--json", str(out)])
    assert rc == 0
    doc = json.loads(out.read_text())
    assert doc["options"]["acceptance_trace"] == "glm53_dflash_fk7"
    assert "exceed k_logged" in capsys.readouterr().err
    assert main(["simulate", "--synthetic", SYNTH, "--table", str(t), "--calibration", str(c), "--policy", "fixed:3",
                 "--acceptance", str(glm)]) == 2
    assert "glm53_dflash_fk4" in capsys.readouterr().err


def test_scheduling_and_prefill_options_reach_the_engine(files, tmp_path, capsys):
    t, c = files
    curve = tmp_path / "prefill.csv"
    curve.write_text("tokens,ms,j\n64,6,3\n512,20,10\n")
    out = tmp_path / "sim.json"
    argv = ["simulate", "--synthetic", SYNTH, "--table", str(t), "--calibration", str(c), "--policy", "fixed:2",
            "--max-num-seqs", "3", "--max-num-batched-tokens", "96", "--kv-capacity-tokens", "2048",
            "--kv-block-size", "32", "--prefill-curve", str(curve), "--seed", "5", "--json", str(out), "--quiet"]
    assert main(argv) == 0
    text = capsys.readouterr().out
    assert "queue p99" in text and "KV peak" in text
    doc = json.loads(out.read_text())
    o, p = doc["options"], doc["policies"][0]
    assert (o["max_num_seqs"], o["max_num_batched_tokens"], o["kv_capacity_tokens"], o["kv_block_size"]) == \
        (3, 96, 2048, 32)
    assert o["chunked_prefill"] is True and o["prefill_curve"][0] == [64.0, 512.0]
    for key in ("queue_s", "preemptions", "recomputed_tokens", "drafts_cut", "kv"):
        assert key in p
    assert p["kv"]["capacity_blocks"] == 64 and 0 < p["kv"]["peak"] <= 1
    reqs = synthetic_trace(150, 4.0, seed=2, **_lengths()).requests
    res = simulate(reqs, small_table(), small_calibration(), "fixed:2", max_num_seqs=3, max_num_batched_tokens=96,
                   kv_capacity_tokens=2048, kv_block_size=32, prefill_curve=str(curve), seed=5)
    assert p == json.loads(json.dumps(res.summary())) | {"same_as": None}
    # The first engine's mode, from the command line.
    assert main(argv[:-3] + ["--no-chunked-prefill", "--max-num-batched-tokens", "none", "--json", str(out),
                             "--quiet"]) == 0
    doc = json.loads(out.read_text())
    assert doc["options"]["chunked_prefill"] is False and doc["options"]["max_num_batched_tokens"] is None
    assert doc["policies"][0]["steps"]["mixed_steps"] == 0


@pytest.mark.parametrize("extra, match", [
    (["--kv-block-size", "0"], "kv_block_size"),
    (["--max-num-batched-tokens", "0"], "max_num_batched_tokens"),
    (["--kv-capacity-tokens", "16"], "KV blocks"),
    (["--prefill-curve", "missing.csv"], "prefill curve"),
])
def test_scheduling_option_refusals(files, capsys, extra, match):
    t, c = files
    argv = ["simulate", "--synthetic", SYNTH, "--table", str(t), "--calibration", str(c), "--policy", "fixed:1",
            "--quiet"] + extra
    assert main(argv) == 2
    err = capsys.readouterr().err
    # A warning (placeholder prefill costs) may come first; the refusal is the error line.
    errors = [line for line in err.splitlines() if line.startswith("specsim: error:")]
    assert errors and match in err and "Traceback" not in err


def test_a_prefill_curves_fixed_part_above_the_plain_step_is_reported(files, tmp_path, capsys):
    t, c = files
    curve = tmp_path / "prefill.csv"
    curve.write_text("tokens,ms,j\n1,64.66,5\n128,58.19,5\n")
    argv = ["simulate", "--synthetic", SYNTH, "--table", str(t), "--calibration", str(c), "--policy", "fixed:2",
            "--prefill-curve", str(curve), "--quiet"]
    assert main(argv) == 0
    err = capsys.readouterr().err
    assert "warning: the prefill curve implies a fixed part per step of 64.66 ms" in err
    assert "the table's is used" in err and err.count("\n") == 1
    # Under the additive rule nothing is shared, and nothing is said.
    assert main(argv + ["--mixed-step-pricing", "additive"]) == 0
    assert "fixed part" not in capsys.readouterr().err
