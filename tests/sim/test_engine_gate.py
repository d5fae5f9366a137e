"""TensorRT-LLM's speculation gate (its acceptance window) as an option on any policy: the engine
against the plain reference step for step, the switch-off itself, its sources (ServerOptions, the
CLI, a trtllm:FILE config) and their refusals."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from specsim.errors import PolicyError, SimulationError
from specsim.sim import ServerOptions, simulate
from specsim.sim.bundles import MAX_ACCEPTANCE_WINDOW
from specsim.interop import read_policy
from tests.fixtures import random_requests, small_calibration, small_table
from tests.sim.test_engine import POLICIES, assert_matches_reference, run_reference


@given(
    n=st.integers(1, 25), trace_seed=st.integers(0, 10 ** 6), seed=st.integers(0, 2 ** 32),
    policy=st.sampled_from(POLICIES), max_batch=st.integers(1, 6), window=st.integers(-1, 8),
    threshold=st.sampled_from([0.0, 0.4, 0.9, 1.6, 10.0]), chunked=st.booleans(),
    kv_room=st.one_of(st.none(), st.integers(0, 400)), rate=st.sampled_from([0.5, 5.0, 50.0]),
)
@settings(max_examples=40, deadline=None)
def test_gate_matches_reference(n, trace_seed, seed, policy, max_batch, window, threshold, chunked, kv_room, rate):
    """Any policy with the gate, with preemption (a tight KV cache) and either prefill mode."""
    reqs = random_requests(n, trace_seed, rate=rate, max_out=25)
    table, cal = small_table(), small_calibration()
    kv = None
    if kv_room is not None:
        need = int((-(-(reqs["prompt_tokens"] + reqs["output_tokens"] - 1 + table.max_k) // 16)).max())
        kv = need * 16 + kv_room
    opts = dict(max_num_seqs=max_batch, seed=seed, chunked_prefill=chunked, kv_capacity_tokens=kv,
                prefill_ms_per_token=0.03, prefill_j_per_token=0.02, idle_w=4.0, log_size=1 << 14,
                acceptance_window=window, acceptance_length_threshold=threshold)
    res = simulate(reqs, table, cal, policy, **opts)
    assert_matches_reference(res, run_reference(reqs, table, cal, policy, **opts))


def test_gate_switches_speculation_off_after_the_window():
    """A threshold no request can reach: after the window's last request finishes, every decode
    step plain-decodes; before it, the policy's depth runs."""
    reqs = random_requests(60, 5, rate=3.0)
    table, cal = small_table(), small_calibration()
    res = simulate(reqs, table, cal, "fixed:3", max_num_seqs=4, acceptance_window=6, acceptance_length_threshold=5.0,
                   log_size=1 << 14)
    decoded = res.output_tokens > 1
    off_at = np.sort(res.finish_s[decoded])[5]
    after = res.step_t_s > off_at
    assert after.any() and (res.step_mean_depth[after] == 0).all()
    assert (res.step_mean_depth[~after] > 0).any()
    plain = simulate(reqs, table, cal, "fixed:3", max_num_seqs=4, log_size=1 << 14)
    assert res.counters["speculative_steps"] < plain.counters["speculative_steps"]


@pytest.mark.parametrize("window, threshold", [(6, 0.0), (0, 5.0), (-3, 5.0), (None, None)])
def test_gate_that_never_fires_changes_nothing(window, threshold):
    """Threshold 0 (a mean is never below it) or a window <= 0: the run is the ungated run."""
    reqs = random_requests(40, 2, rate=3.0)
    table, cal = small_table(), small_calibration()
    base = simulate(reqs, table, cal, "fixed:2", max_num_seqs=4)
    res = simulate(reqs, table, cal, "fixed:2", max_num_seqs=4, acceptance_window=window,
                   acceptance_length_threshold=threshold)
    assert np.array_equal(res.finish_s, base.finish_s) and res.counters == base.counters


@pytest.mark.parametrize("kw, match", [
    (dict(acceptance_window=4), "acceptance_window without acceptance_length_threshold"),
    (dict(acceptance_length_threshold=1.0), "acceptance_length_threshold without acceptance_window"),
    (dict(acceptance_window=2.5, acceptance_length_threshold=1.0), "acceptance_window must be a whole number"),
    (dict(acceptance_window=True, acceptance_length_threshold=1.0), "acceptance_window must be a whole number"),
    (dict(acceptance_window=MAX_ACCEPTANCE_WINDOW + 1, acceptance_length_threshold=1.0), "shorter window"),
    (dict(acceptance_window=4, acceptance_length_threshold=float("nan")), "must be a finite number"),
    (dict(acceptance_window=4, acceptance_length_threshold="1"), "must be a finite number"),
])
def test_gate_options_refused(kw, match):
    with pytest.raises(SimulationError, match=match):
        ServerOptions(**kw)


def _trtllm(tmp_path, body):
    path = tmp_path / "extra.yaml"
    path.write_text("speculative_config:\n  decoding_type: Eagle\n  max_draft_len: 3\n" + body)
    return path


def test_trtllm_file_carries_the_gate(tmp_path):
    path = _trtllm(tmp_path, "  acceptance_window: 6\n  acceptance_length_threshold: 5.0\n")
    pol = read_policy(f"trtllm:{path}")
    assert pol.gate == (6, 5.0) and pol.ranges == ((1, None, 3),)
    reqs = random_requests(60, 5, rate=3.0)
    table, cal = small_table(), small_calibration()
    from_file = simulate(reqs, table, cal, pol, max_num_seqs=4)
    assert from_file.options["acceptance_window"] == 6
    by_option = simulate(reqs, table, cal, "fixed:3", max_num_seqs=4, acceptance_window=6,
                         acceptance_length_threshold=5.0)
    assert np.array_equal(from_file.finish_s, by_option.finish_s)
    # The server's own options win over the file's.
    overridden = simulate(reqs, table, cal, pol, max_num_seqs=4, acceptance_window=6, acceptance_length_threshold=0.0)
    assert overridden.counters == simulate(reqs, table, cal, "fixed:3", max_num_seqs=4).counters


def test_trtllm_file_with_one_key_has_no_gate(tmp_path):
    """TensorRT-LLM never switches off unless both keys are set."""
    assert read_policy(f"trtllm:{_trtllm(tmp_path, '  acceptance_window: 6' + chr(10))}").gate == ()


@pytest.mark.parametrize("body, match", [
    ("  acceptance_window: six\n  acceptance_length_threshold: 1.0\n", "speculative_config acceptance_window"),
    ("  acceptance_window: 6\n  acceptance_length_threshold: high\n", "acceptance_length_threshold must be a finite"),
])
def test_trtllm_gate_refused_naming_file_and_field(tmp_path, body, match):
    path = _trtllm(tmp_path, body)
    with pytest.raises(PolicyError, match=match) as e:
        read_policy(f"trtllm:{path}")
    assert str(path) in str(e.value)


@pytest.fixture
def files(tmp_path):
    from specsim.table import CostTable

    table = small_table()
    t, c = tmp_path / "table.toml", tmp_path / "cal.toml"
    t.write_text(CostTable.render(table.key, table.cells))
    c.write_text(small_calibration().render())
    return t, c


def test_cli_gate_flags(files, tmp_path, capsys):
    """The flags reach the engine (the JSON's options and its speculative steps say so); one flag
    without the other exits 2 with the reason and writes nothing."""
    import json

    from specsim.cli import main

    t, c = files
    base = ["simulate", "--synthetic", "requests=60,rate=3,seed=1", "--table", str(t), "--calibration", str(c),
            "--policy", "fixed:3", "--max-batch", "4"]
    gated, plain = tmp_path / "gated.json", tmp_path / "plain.json"
    assert main(base + ["--acceptance-window", "6", "--acceptance-threshold", "5", "--json", str(gated)]) == 0
    assert main(base + ["--json", str(plain)]) == 0
    g, p = json.loads(gated.read_text()), json.loads(plain.read_text())
    assert g["options"]["acceptance_window"] == 6 and g["options"]["acceptance_length_threshold"] == 5.0
    assert sum(v for k, v in g["policies"][0]["depth_histogram"].items() if k != "0") < \
        sum(v for k, v in p["policies"][0]["depth_histogram"].items() if k != "0")
    capsys.readouterr()
    out = tmp_path / "refused.json"
    assert main(base + ["--acceptance-window", "4", "--json", str(out)]) == 2
    assert "without acceptance_length_threshold" in capsys.readouterr().err and not out.exists()
