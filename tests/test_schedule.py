"""Schedules in the engines' formats: export, import, round trips, each engine's own rules."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from specsim.cli import main
from specsim.errors import PolicyError, ScheduleError
from specsim.schedule.formats import (
    ENGINES, canonical, depth_at, export, import_text, load_schedule, ranges_from_depths,
    read_yaml, render_schedule,
)
from specsim.schedule.formats import _yaml_subset
from specsim.sim.policy import parse_policy


@st.composite
def schedules(draw, max_k=8, deepest_first=False):
    """Canonical schedules: contiguous ranges from width 1, the last open, depths 0..max_k."""
    n = draw(st.integers(1, 6))
    cuts = sorted(draw(st.sets(st.integers(2, 300), min_size=n - 1, max_size=n - 1)))
    depths = draw(st.lists(st.integers(0, max_k), min_size=n, max_size=n))
    if deepest_first:
        depths[0] = max(depths)
    starts = [1] + cuts
    ranges = [(lo, (starts[i + 1] - 1 if i + 1 < n else None), k) for i, (lo, k) in enumerate(zip(starts, depths))]
    return canonical(ranges)


def _roundtrip(engine, ranges, **kw):
    cfg = export(engine, ranges, **kw)
    return import_text(engine, cfg.text, "exported")


# -- canonical form -----------------------------------------------------------------------------------

def test_canonical_fills_gaps_merges_and_opens_the_last_range():
    assert canonical([(5, 8, 2), (1, 2, 3)]) == ((1, 2, 3), (3, 4, 0), (5, 8, 2), (9, None, 0))
    assert canonical([(1, 4, 2), (5, None, 2)]) == ((1, None, 2),)
    assert canonical([(1, 1, 0)]) == ((1, None, 0),)


@given(schedules())
def test_canonical_keeps_every_width_depth(ranges):
    shuffled = list(reversed(ranges))
    c = canonical(shuffled)
    assert all(depth_at(c, w) == depth_at(ranges, w) for w in range(1, 320))
    assert c[0][0] == 1 and c[-1][1] is None
    assert all(a[2] != b[2] for a, b in zip(c, c[1:]))


def test_check_refuses_overlap_and_bad_values():
    for bad in ([(1, 4, 2), (4, 8, 1)], [(0, 4, 1)], [(3, 2, 1)], [(1, None, -1)], [(1, None, 1), (5, 6, 1)],
                [(1, 2.5, 1)], []):
        with pytest.raises(ScheduleError):
            canonical(bad)


def test_ranges_from_depths_collapse():
    assert ranges_from_depths([4, 4, 3, 3, 3, 0]) == ((1, 2, 4), (3, 5, 3), (6, None, 0))
    assert ranges_from_depths([2]) == ((1, None, 2),)


# -- round trips ----------------------------------------------------------------------------------------

@settings(max_examples=150, deadline=None)
@given(schedules(), st.integers(1, 400))
def test_vllm_roundtrip(ranges, max_batch):
    if max(k for *_, k in ranges) == 0:
        with pytest.raises(ScheduleError, match="never speculates"):
            export("vllm", ranges, max_batch=max_batch)
        return
    assert _roundtrip("vllm", ranges, max_batch=max_batch) == ranges


@settings(max_examples=150, deadline=None)
@given(schedules(deepest_first=True), st.integers(1, 400))
def test_trtllm_roundtrip(ranges, max_batch):
    if ranges[0][2] == 0:
        return
    back = _roundtrip("trtllm", ranges, max_batch=max_batch)
    last = ranges[-1]
    if last[2] == 0:
        assert back == ranges
    else:
        # An open speculating range ends at the serve's largest batch: the same on every width it serves.
        end = max(last[0], max_batch)
        assert all(depth_at(back, w) == depth_at(ranges, w) for w in range(1, end + 1))
        assert depth_at(back, end + 1) == 0


@settings(max_examples=150, deadline=None)
@given(schedules())
def test_sglang_roundtrip(ranges):
    if max(k for *_, k in ranges) == 0:
        return
    assert _roundtrip("sglang", ranges) == ranges


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("ranges", [
    ((1, None, 3),),                                   # one range
    ((1, 16, 4), (17, 64, 3), (65, 256, 1), (257, None, 0)),  # a range ending at the widest width
    ((1, 8, 2), (9, 32, 0), (33, None, 1)),            # a depth-0 range inside
    ((1, 8, 4), (9, None, 0)),                         # a depth-0 tail
])
def test_roundtrip_edge_cases(engine, ranges):
    if engine == "trtllm" and ranges[-1][2] != 0:
        back = _roundtrip(engine, ranges, max_batch=1024)
        # TensorRT-LLM ends a speculating open range at the serve's largest batch.
        assert all(depth_at(back, w) == depth_at(ranges, w) for w in range(1, 1025))
        assert depth_at(back, 1025) == 0
        return
    if engine == "trtllm" and ranges[0][2] != max(k for *_, k in ranges):
        with pytest.raises(ScheduleError, match="max_draft_len"):
            export(engine, ranges)
        return
    assert _roundtrip(engine, ranges, max_batch=1024) == canonical(ranges)


def test_a_closed_last_range_exports_its_plain_tail():
    ranges = ((1, 16, 3),)  # widths above 16 decode plainly
    for engine in ENGINES:
        assert _roundtrip(engine, ranges) == ((1, 16, 3), (17, None, 0))


# -- each engine's own rules ------------------------------------------------------------------------------

def vllm_rules(cfg):
    """vLLM's documented validation of num_speculative_tokens_per_batch_size, plus contiguity."""
    entries, nst = cfg["num_speculative_tokens_per_batch_size"], cfg["num_speculative_tokens"]
    assert isinstance(entries, list) and entries and nst > 0
    assert entries[0][0] == 1
    prev = 0
    for lo, hi, k in entries:
        assert 0 < lo <= hi and k >= 0 and k <= nst
        assert lo == prev + 1  # contiguous: no gap for vLLM to fill with the K before it
        prev = hi
    assert nst == max(k for *_, k in entries)


def trtllm_rules(spec):
    """TensorRT-LLM's draft_len_schedule validator."""
    sched, mdl = spec["draft_len_schedule"], spec["max_draft_len"]
    assert sched and mdl > 0
    assert all(b >= 1 and v >= 0 for b, v in sched.items())
    assert sched[min(sched)] == mdl
    assert all(v <= mdl for v in sched.values())


@settings(max_examples=100, deadline=None)
@given(schedules(), st.integers(1, 400))
def test_vllm_export_obeys_vllms_rules(ranges, max_batch):
    if max(k for *_, k in ranges) == 0:
        return
    cfg = json.loads(export("vllm", ranges, max_batch=max_batch).text)
    vllm_rules(cfg)
    assert cfg["method"] == "eagle"


@settings(max_examples=100, deadline=None)
@given(schedules(deepest_first=True), st.integers(1, 400))
def test_trtllm_export_obeys_trtllms_rules_and_is_yaml(ranges, max_batch):
    if ranges[0][2] == 0:
        return
    text = export("trtllm", ranges, max_batch=max_batch).text
    spec = _yaml_subset(text, "x")["speculative_config"]
    trtllm_rules(spec)
    yaml = pytest.importorskip("yaml")
    assert yaml.safe_load(text)["speculative_config"] == spec


def test_trtllm_refuses_what_it_cannot_express():
    with pytest.raises(ScheduleError, match="smallest batch-size key"):
        export("trtllm", ((1, 4, 2), (5, None, 4)), max_batch=64)
    with pytest.raises(ScheduleError, match="--max-batch"):
        export("trtllm", ((1, 4, 4), (5, None, 1)))
    for engine in ENGINES:
        with pytest.raises(ScheduleError, match="never speculates"):
            export(engine, ((1, None, 0),))
    with pytest.raises(ScheduleError, match="unknown engine"):
        export("tgi", ((1, None, 1),))


def test_every_export_says_what_the_engine_cannot_express():
    ranges = ((1, 16, 4), (17, 64, 2), (65, None, 1))
    for engine in ENGINES:
        cfg = export(engine, ranges, max_batch=256)
        assert any("per-sequence" in n for n in cfg.notes)
        assert any("energy" in n for n in cfg.notes)
    text = export("trtllm", ranges, max_batch=256).text
    assert "# Note: one depth for the whole batch" in text
    assert "above 256 plain-decode" in text


def test_exports_match_the_documented_examples():
    cfg = json.loads(export("vllm", ((1, 16, 4), (17, 64, 3), (65, None, 1)), max_batch=256,
                            draft_model="yuhuili/EAGLE-LLaMA3.1-Instruct-8B").text)
    assert cfg == {"method": "eagle", "model": "yuhuili/EAGLE-LLaMA3.1-Instruct-8B", "num_speculative_tokens": 4,
                   "num_speculative_tokens_per_batch_size": [[1, 16, 4], [17, 64, 3], [65, 256, 1]]}
    spec = _yaml_subset(export("trtllm", ((1, 4, 4), (5, 8, 2), (9, 32, 1))).text, "x")["speculative_config"]
    assert spec["draft_len_schedule"] == {4: 4, 8: 2, 32: 1} and spec["max_draft_len"] == 4
    assert spec["decoding_type"] == "Eagle3"
    sg = json.loads(export("sglang", ((1, 7, 3), (8, 31, 1), (32, None, 0))).text)
    assert sg == {"1": {"candidate_steps": [3]}, "8": {"candidate_steps": [1]}, "32": {"candidate_steps": [0]}}


# -- imports read the files as the engines do ---------------------------------------------------------------

def test_vllm_import_follows_vllms_lookup():
    # A gap keeps the K before it; the last K covers wider batches; K is clamped to num_speculative_tokens.
    text = json.dumps({"method": "eagle", "num_speculative_tokens": 3,
                       "num_speculative_tokens_per_batch_size": [[1, 4, 5], [9, 16, 1]]})
    assert import_text("vllm", text) == ((1, 8, 3), (9, None, 1))
    assert import_text("vllm", json.dumps({"num_speculative_tokens": 2})) == ((1, None, 2),)
    assert import_text("vllm", "[[1, 8, 2], [9, 9, 0]]") == ((1, 8, 2), (9, None, 0))


@pytest.mark.parametrize("text, match", [
    ('{"num_speculative_tokens": 2, "num_speculative_tokens_per_batch_size": [[2, 4, 1]]}', "start at 1"),
    ('{"num_speculative_tokens": 2, "num_speculative_tokens_per_batch_size": [[1, 4, 1], [4, 8, 0]]}', "overlap"),
    ('{"num_speculative_tokens": 2, "num_speculative_tokens_per_batch_size": [[1, 4, -1]]}', "K >= 0"),
    ('{"num_speculative_tokens": 2, "num_speculative_tokens_per_batch_size": [[4, 1, 1]]}', "start_bs <= end_bs"),
    ('{"num_speculative_tokens": 0, "num_speculative_tokens_per_batch_size": [[1, 4, 1]]}', "> 0"),
    ('{"num_speculative_tokens": 2, "num_speculative_tokens_per_batch_size": []}', "non-empty"),
    ('{"num_speculative_tokens": 2, "num_speculative_tokens_per_batch_size": [[1, 4, 1, 512, 1]]}', "context"),
    ('{"method": "eagle"}', "neither"),
    ("[1, 2", "not JSON: line 1"),
    ('{"num_speculative_tokens": NaN}', "NaN"),
])
def test_vllm_import_refuses_what_vllm_refuses(text, match):
    with pytest.raises(PolicyError, match=match):
        import_text("vllm", text)


def test_trtllm_import_reads_upper_bounds_and_checks_its_rules():
    text = ("speculative_config:\n  decoding_type: Eagle3\n  max_draft_len: 4\n"
            "  draft_len_schedule: {4: 4, 8: 2, 32: 1}\n")
    assert import_text("trtllm", text) == ((1, 4, 4), (5, 8, 2), (9, 32, 1), (33, None, 0))
    assert import_text("trtllm", "speculative_config:\n  max_draft_len: 3\n  max_concurrency: 16\n") == \
        ((1, 16, 3), (17, None, 0))
    with pytest.raises(PolicyError, match="must equal max_draft_len"):
        import_text("trtllm", "speculative_config:\n  max_draft_len: 4\n  draft_len_schedule:\n    4: 2\n    8: 4\n")
    with pytest.raises(PolicyError, match="exceeds max_draft_len"):
        import_text("trtllm", "speculative_config:\n  max_draft_len: 4\n  draft_len_schedule:\n    4: 4\n    8: 5\n")
    with pytest.raises(PolicyError, match="exclusive"):
        import_text("trtllm", "speculative_config:\n  max_draft_len: 4\n  max_concurrency: 8\n"
                              "  draft_len_schedule: {4: 4}\n")


def test_yaml_subset_reads_what_pyyaml_reads():
    text = ("# options\nbackend: pytorch\ncuda_graph_config:\n  batch_sizes:\n    - 1\n    - 2\n"
            "speculative_config:  # the block\n  decoding_type: \"Eagle3\"\n  max_draft_len: 4\n"
            "  draft_len_schedule:\n    4: 4\n    64: 1\nkv_cache_config: {free_gpu_memory_fraction: 0.8}\n")
    mine = _yaml_subset(text, "x")
    assert mine["speculative_config"] == {"decoding_type": "Eagle3", "max_draft_len": 4,
                                          "draft_len_schedule": {4: 4, 64: 1}}
    assert mine["kv_cache_config"] == {"free_gpu_memory_fraction": 0.8}
    yaml = pytest.importorskip("yaml")
    assert yaml.safe_load(text)["speculative_config"] == mine["speculative_config"]
    assert read_yaml(text, "x")["speculative_config"] == mine["speculative_config"]


def test_sglang_import_takes_both_slot_forms_and_refuses_choices():
    assert import_text("sglang", '{"8": [1], "1": {"candidate_steps": [3, 3]}, "strategy": "ema"}') == \
        ((1, 7, 3), (8, None, 1))
    assert import_text("sglang", '{"4": [2], "16": [0]}') == ((1, 15, 2), (16, None, 0))
    with pytest.raises(PolicyError, match="chooses among"):
        import_text("sglang", '{"1": [1, 3, 5, 7], "8": [0, 1, 3]}')
    with pytest.raises(PolicyError, match="no batch-size slot"):
        import_text("sglang", '{"strategy": "ema"}')
    with pytest.raises(PolicyError, match="candidate steps"):
        import_text("sglang", '{"1": []}')


# -- the policy hook and the command line ---------------------------------------------------------------------

def test_engine_files_are_schedule_policies(tmp_path):
    ranges = ((1, 16, 4), (17, 64, 2), (65, None, 1))
    for engine in ENGINES:
        f = tmp_path / f"cfg.{engine}"
        f.write_text(export(engine, ranges, max_batch=256).text)
        pol = parse_policy(f"{engine}:{f}")
        assert pol.kind == "schedule"
        assert all(pol.depth_for_width(w) == depth_at(ranges, w) for w in range(1, 257))
    with pytest.raises(PolicyError, match="needs a file"):
        parse_policy("vllm:")
    with pytest.raises(PolicyError, match="cannot read"):
        parse_policy(f"sglang:{tmp_path / 'missing.json'}")


def test_schedule_file_roundtrip_and_refusals(tmp_path):
    ranges = ((1, 8, 3), (9, None, 1))
    text = render_schedule(ranges, objective="energy", max_batch=128, sections={"inputs": {"trace": "t.csv"}})
    f = tmp_path / "s.toml"
    f.write_text(text)
    doc = load_schedule(f)
    assert doc.ranges == ranges and doc.max_batch == 128 and doc.objective == "energy"
    assert doc.sections["inputs"]["trace"] == "t.csv"
    assert parse_policy(doc.policy).ranges == ranges
    f.write_text(text.replace('policy = "schedule:1-8=3,9-=1"', 'policy = "schedule:1-=3"'))
    with pytest.raises(ScheduleError, match="disagrees"):
        load_schedule(f)
    f.write_text(text.replace("schema = 1", "schema = 9"))
    with pytest.raises(ScheduleError, match="schema"):
        load_schedule(f)


def test_cli_export_and_import(tmp_path, capsys):
    s = tmp_path / "s.toml"
    s.write_text(render_schedule(((1, 16, 4), (17, None, 1)), objective="energy", max_batch=256))
    assert main(["schedule", "export", str(s), "--to", "vllm"]) == 0
    out = capsys.readouterr()
    cfg = json.loads(out.out)
    assert cfg["num_speculative_tokens_per_batch_size"] == [[1, 16, 4], [17, 256, 1]]
    assert "note:" in out.err and "--speculative-config" in out.err
    out_file = tmp_path / "t.yaml"
    assert main(["schedule", "export", str(s), "--to", "trtllm", "-o", str(out_file)]) == 0
    capsys.readouterr()
    assert main(["schedule", "import", "--from", "trtllm", str(out_file)]) == 0
    assert capsys.readouterr().out.strip() == "schedule:1-16=4,17-256=1,257-=0"
    assert main(["schedule", "export", str(s), "--to", "vllm", "-o", str(s)]) == 2
    assert "destroy the input" in capsys.readouterr().err
    assert main(["schedule", "export", "--to", "vllm"]) == 2
    assert main(["schedule", "export", str(s), "--to", "trtllm", "--max-batch", "0"]) == 2


def test_cli_export_from_the_planner(tmp_path, capsys):
    from specsim.costmodel.defaults import demo_calibration, demo_table
    from specsim.plan import Planner

    t, c = tmp_path / "t.toml", tmp_path / "c.toml"
    table, cal = demo_table(), demo_calibration()
    t.write_text(table.to_text())
    c.write_text(cal.render())
    assert main(["schedule", "export", "--planner", str(t), str(c), "--to", "sglang", "--widths-max", "64"]) == 0
    back = import_text("sglang", capsys.readouterr().out)
    planner = Planner(table, cal, memo=False)
    assert all(depth_at(back, w) == planner.propose(min(w, 64)) for w in range(1, 100))


def test_simulate_runs_an_engine_config_as_the_schedule_it_sets(tmp_path, capsys):
    from specsim.costmodel.defaults import demo_calibration, demo_table
    from specsim.sim.synthetic import synthetic_trace

    t, c, tr, cfg = tmp_path / "t.toml", tmp_path / "c.toml", tmp_path / "trace.csv", tmp_path / "vllm.json"
    t.write_text(demo_table().to_text())
    c.write_text(demo_calibration().render())
    trace = synthetic_trace(120, 20.0, seed=2).requests
    tr.write_text("arrival_s,prompt_tokens,output_tokens\n" + "".join(f"{a!r},{p},{o}\n" for a, p, o in trace.tolist()))
    cfg.write_text(export("vllm", ((1, 4, 3), (5, None, 1)), max_batch=256).text)
    base = ["simulate", "--trace", str(tr), "--table", str(t), "--calibration", str(c), "--quiet"]
    mine, theirs = tmp_path / "a.json", tmp_path / "b.json"
    assert main(base + ["--policy", f"vllm:{cfg}", "--json", str(mine)]) == 0
    assert main(base + ["--policy", "schedule:1-4=3,5-=1", "--json", str(theirs)]) == 0
    capsys.readouterr()
    a, b = (json.loads(p.read_text())["policies"][0] for p in (mine, theirs))
    assert a["policy"] == b["policy"] == "schedule:1-4=3,5-=1"
    assert a["j_per_token"] == b["j_per_token"] and a["tokens_per_s"] == b["tokens_per_s"]


@settings(max_examples=60, deadline=None)
@given(schedules(), st.one_of(st.none(), st.integers(1, 4096)), st.sampled_from(["energy", "throughput"]))
def test_schedule_file_roundtrip_any_schedule(tmp_path_factory, ranges, max_batch, objective):
    f = tmp_path_factory.mktemp("s") / "s.toml"
    f.write_text(render_schedule(ranges, objective=objective, max_batch=max_batch,
                                 sections={"result": {"gain": 0.25, "within_noise": False, "note": 'a "quoted" word'}}))
    doc = load_schedule(f)
    assert (doc.ranges, doc.max_batch, doc.objective) == (ranges, max_batch, objective)
    assert doc.sections["result"] == {"gain": 0.25, "within_noise": False, "note": 'a "quoted" word'}
