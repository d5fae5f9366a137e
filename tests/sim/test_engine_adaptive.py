"""SGLang's adaptive controller as the ``sglang-adaptive:FILE`` policy: the engine against the plain
reference step for step on generated configs and traces, what the controller does, and the
config's refusals (file and field named)."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from specsim.errors import PolicyError
from specsim.interop.sglang import parse_adaptive
from specsim.sim import simulate
from specsim.interop import read_policy
from specsim.policy.policy import Policy
from tests.fixtures import random_requests, small_calibration, small_table
from tests.sim.test_engine import assert_matches_reference, run_reference

candidates = st.lists(st.integers(0, 3), min_size=1, max_size=4)


@st.composite
def adaptive_configs(draw):
    """Valid adaptive configs over the small table's depths 0..3: with or without slots, settings
    left to their defaults or drawn."""
    doc = {}
    if draw(st.booleans()):
        # (slot 0 beside slot 1 is refused: no batch reaches it)
        keys = st.lists(st.integers(0, 9), min_size=1, max_size=3, unique=True).filter(lambda ks: not {0, 1} <= set(ks))
        for key in draw(keys):
            doc[str(key)] = {"candidate_steps": draw(candidates)}
    else:  # the default candidates (1, 3, 7) are deeper than the table prices
        doc["candidate_steps"] = draw(candidates)
    for name, values in (("ema_alpha", st.sampled_from([0.2, 0.5, 1.0])), ("update_interval", st.integers(1, 4)),
                         ("warmup_batches", st.integers(0, 6)),
                         ("down_hysteresis", st.sampled_from([0.0, 0.3, -0.4])),
                         ("up_hysteresis", st.sampled_from([-0.25, 0.0, 0.6, -1.0]))):
        if draw(st.booleans()):
            doc[name] = draw(values)
    return json.dumps(doc)


def adaptive(text, graphs=()):
    return Policy("sglang-adaptive", adaptive=parse_adaptive(text, "adaptive.json"), graphs=tuple(graphs),
                  source="adaptive.json")


@given(
    config=adaptive_configs(), graphs=st.sampled_from([(), (1, 2, 4), (2, 8), (1, 3, 6)]),
    n=st.integers(1, 25), trace_seed=st.integers(0, 10 ** 6), seed=st.integers(0, 2 ** 32),
    max_batch=st.integers(1, 6), chunked=st.booleans(), k_max=st.one_of(st.none(), st.integers(0, 3)),
    row_budget=st.one_of(st.none(), st.integers(0, 8)), budget=st.one_of(st.none(), st.integers(1, 400)),
    gate=st.sampled_from([(None, None), (3, 0.8), (5, 10.0)]), rate=st.sampled_from([0.5, 5.0, 50.0]),
)
@settings(max_examples=50, deadline=None)
def test_adaptive_matches_reference(config, graphs, n, trace_seed, seed, max_batch, chunked, k_max, row_budget,
                                    budget, gate, rate):
    """Controller, caps, token budget, prefill modes and the speculation gate, step for step."""
    reqs = random_requests(n, trace_seed, rate=rate, max_out=30)
    table, cal = small_table(), small_calibration()
    pol = adaptive(config, graphs)
    opts = dict(max_num_seqs=max_batch, seed=seed, chunked_prefill=chunked, k_max=k_max, row_budget=row_budget,
                max_num_batched_tokens=budget, prefill_ms_per_token=0.03, prefill_j_per_token=0.02,
                log_size=1 << 14, acceptance_window=gate[0], acceptance_length_threshold=gate[1])
    res = simulate(reqs, table, cal, pol, **opts)
    assert_matches_reference(res, run_reference(reqs, table, cal, pol, **opts))
    assert res.policy == str(pol)


def test_one_candidate_per_slot_is_the_pinned_schedule(tmp_path):
    """With one candidate per slot the controller has nothing to choose: the run is the
    ``sglang:`` policy's schedule, CUDA-graph padding included."""
    path = tmp_path / "a.json"
    path.write_text(json.dumps({"1": {"candidate_steps": [3]}, "3": {"candidate_steps": [1]}}))
    reqs = random_requests(50, 4, rate=4.0)
    table, cal = small_table(), small_calibration()
    for head in ("sglang", "sglang[2,4]"):
        pinned = simulate(reqs, table, cal, f"{head}:{path}", max_num_seqs=4)
        moved = simulate(reqs, table, cal, f"{head.replace('sglang', 'sglang-adaptive')}:{path}", max_num_seqs=4)
        assert np.array_equal(pinned.finish_s, moved.finish_s) and pinned.counters == moved.counters


def test_controller_steps_down_when_drafts_are_rejected(tmp_path):
    """A drafter whose drafts are nearly always rejected: after the warm-up the slot leaves its
    start (the deepest candidate) for the shallowest, and mostly stays there."""
    from specsim.calibration import AcceptanceCalibration
    from tests.fixtures import SIM_DRAFTER as KEY

    path = tmp_path / "a.json"
    path.write_text(json.dumps({"candidate_steps": [1, 3], "warmup_batches": 4, "update_interval": 2}))
    poor = AcceptanceCalibration(KEY, [-2.0, 0.0], [0.02, 0.05], [0.04, 0.03, 0.02])
    res = simulate(random_requests(40, 6, rate=2.0), small_table(), poor, f"sglang-adaptive:{path}", max_num_seqs=4,
                   log_size=1 << 14)
    depths = res.step_mean_depth[res.step_mean_depth > 0]
    switch = int(np.argmax(depths == 1))
    # The EMA starts at 2 (the start depth - 1) and falls about 0.8x a batch. The depth moves only
    # at an update (batch 6, 8, ...), and stays down only once the EMA is also at most
    # 1 - 0.5 + up_hysteresis (0.25): above that, the up rule, checked against the lower
    # candidate, sends it straight back to 3.
    assert switch > 4 and (switch - 4) % 2 == 0
    assert (depths[:switch] == 3).all() and (depths[switch:] == 1).mean() > 0.8
    assert res.depth_histogram[1] > res.depth_histogram[3]


@pytest.mark.parametrize("doc, match", [
    ({"ema_alfa": 0.3}, "unknown key 'ema_alfa'"),
    ({"ema_alpha": 0.0}, "ema_alpha must be a number in \\(0, 1\\]"),
    ({"ema_alpha": True}, "ema_alpha must be a number"),
    ({"update_interval": 0}, "update_interval must be a whole number >= 1"),
    ({"warmup_batches": -1}, "warmup_batches must be a whole number >= 0"),
    ({"warmup_batches": 2.5}, "warmup_batches must be a whole number"),
    ({"up_hysteresis": "low"}, "up_hysteresis must be a finite number"),
    ({"candidate_steps": []}, "candidate_steps must be a non-empty list"),
    ({"candidate_steps": [1, -2]}, "candidate_steps must be a non-empty list"),
    ({"1": [1, 3]}, "bare list crashes it"),
    ({"1": {"candidate_steps": [1, 3], "steps": 2}}, "slot '1' needs exactly one key"),
    ({"1": {}}, "slot '1' needs exactly one key"),
    ({"4": {"candidate_steps": [2.5]}}, "slot '4': candidate_steps"),
    ([1, 3], "is a JSON object"),
])
def test_adaptive_config_refused_naming_file_and_field(tmp_path, doc, match):
    path = tmp_path / "adaptive.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(PolicyError, match=match) as e:
        read_policy(f"sglang-adaptive:{path}")
    assert str(path) in str(e.value)


def test_adaptive_policy_refusals(tmp_path):
    from specsim.policy.policy import parse_policy

    path = tmp_path / "a.json"
    path.write_text(json.dumps({"candidate_steps": [1, 5]}))
    with pytest.raises(PolicyError, match="read it with specsim.interop.read_policy"):
        parse_policy(f"sglang-adaptive:{path}")
    with pytest.raises(PolicyError, match="needs a file"):
        read_policy("sglang-adaptive")
    with pytest.raises(PolicyError, match="CUDA-graph batch sizes"):
        read_policy(f"sglang-adaptive[1,x]:{path}")
    with pytest.raises(PolicyError, match="prices depths up to 3"):
        simulate(random_requests(3, 1), small_table(), small_calibration(), f"sglang-adaptive:{path}")
    with pytest.raises(PolicyError, match="acceptance it measures"):
        read_policy(f"sglang-adaptive:{path}").depth_for_width(2)


def test_defaults_and_slots_read_as_sglang_reads_them():
    cfg = parse_adaptive("{}", "a.json")
    assert cfg.slots == ((1, (1, 3, 7)),) and cfg.deepest == 7
    assert (cfg.ema_alpha, cfg.update_interval, cfg.warmup_batches, cfg.down_hysteresis, cfg.up_hysteresis) == \
        (0.2, 5, 10, 0.0, -0.25)
    cfg = parse_adaptive(json.dumps({"1": {"candidate_steps": [3, 1, 3]}, "8": {"candidate_steps": [1]}}), "a.json")
    assert cfg.slots == ((1, (1, 3)), (8, (1,)))
    cfg = parse_adaptive(json.dumps({"0": {"candidate_steps": [2]}, "8": {"candidate_steps": [1]}}), "a.json")
    assert cfg.slots == ((1, (2,)), (8, (1,)))  # slot 0 serves the batches below 8


@pytest.mark.parametrize("slots,said", [
    ({"0": [2], "1": [3], "8": [1]}, "batch-size slot '0' is never used: no batch is smaller than 1 and slot '1'"),
    ({"1": [2], "01": [3]}, "batch-size slots '1', '01' name the same batch size"),
    ({"²": [2]}, "batch-size slot '²' is not a plain decimal batch size"),
])
def test_an_sglang_adaptive_slot_0_is_accepted_silently(slots, said):
    """Hostile input round four, case 16: a slot no batch reaches was dropped without a word;
    both SGLang readers (the controller's and the schedule's) refuse it."""
    from specsim.interop.sglang import parse_config

    text = json.dumps({k: {"candidate_steps": v} for k, v in slots.items()})
    with pytest.raises(PolicyError, match=re.escape(said)):
        parse_adaptive(text, "a.json")
    with pytest.raises(PolicyError, match=re.escape(said)):
        parse_config(text, "a.json")


def test_cli_runs_the_controller_and_guards_its_file(tmp_path, capsys):
    """``specsim simulate --policy sglang-adaptive:FILE`` runs and labels it; an output over the
    config file is refused before any work (exit 2, the file intact)."""
    from specsim.cli import main
    from specsim.table import CostTable

    table = small_table()
    t, c, cfg = tmp_path / "table.toml", tmp_path / "cal.toml", tmp_path / "adaptive.json"
    t.write_text(CostTable.render(table.key, table.cells))
    c.write_text(small_calibration().render())
    cfg.write_text(json.dumps({"candidate_steps": [1, 3], "warmup_batches": 2}))
    base = ["simulate", "--synthetic", "requests=30,rate=3,seed=1", "--table", str(t), "--calibration", str(c),
            "--policy", f"sglang-adaptive[1,2,4]:{cfg}", "--max-batch", "4"]
    out = tmp_path / "sim.json"
    assert main(base + ["--json", str(out)]) == 0
    assert json.loads(out.read_text())["policies"][0]["label"] == f"sglang-adaptive[1,2,4]:{cfg}"
    capsys.readouterr()
    before = cfg.read_text()
    assert main(base + ["--json", str(cfg)]) == 2
    assert cfg.read_text() == before and "--policy" in capsys.readouterr().err
