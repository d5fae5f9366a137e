"""Schedules in the engines' formats: export, import, round trips, each engine's own rules."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from specsim.cli import main
from specsim.errors import PolicyError, ScheduleError
from specsim.interop import ENGINES, import_text, read_policy
from specsim.interop import export_schedule as export
from specsim.interop.trtllm import _yaml_subset, read_yaml
from specsim.policy.policy import parse_policy
from specsim.policy.schedule import canonical, depth_at
from specsim.studies.schedule_file import load_schedule, render_schedule
from tests.fixtures import ROOT, schedules


def _roundtrip(engine, ranges, **kw):
    cfg = export(engine, ranges, **kw)
    return import_text(engine, cfg.text, "exported")


# -- round trips ----------------------------------------------------------------------------------------

@settings(max_examples=150, deadline=None)
@given(schedules(), st.integers(1, 400))
def test_vllm_roundtrip(ranges, max_batch):
    if max(k for *_, k in ranges) == 0:
        with pytest.raises(ScheduleError, match="never speculates"):
            export("vllm", ranges, max_num_seqs=max_batch)
        return
    assert _roundtrip("vllm", ranges, max_num_seqs=max_batch) == ranges


@settings(max_examples=150, deadline=None)
@given(schedules(deepest_first=True), st.integers(1, 400))
def test_trtllm_roundtrip(ranges, max_batch):
    if ranges[0][2] == 0:
        return
    back = _roundtrip("trtllm", ranges, max_num_seqs=max_batch)
    last = ranges[-1]
    if last[2] == 0 or len(ranges) == 1:  # a constant schedule is max_draft_len alone: exact
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
    if engine == "trtllm" and ranges[-1][2] != 0 and len(ranges) > 1:
        back = _roundtrip(engine, ranges, max_num_seqs=1024)
        # TensorRT-LLM ends a speculating open range at the serve's largest batch.
        assert all(depth_at(back, w) == depth_at(ranges, w) for w in range(1, 1025))
        assert depth_at(back, 1025) == 0
        return
    if engine == "trtllm" and ranges[0][2] != max(k for *_, k in ranges):
        with pytest.raises(ScheduleError, match="max_draft_len"):
            export(engine, ranges)
        return
    assert _roundtrip(engine, ranges, max_num_seqs=1024) == canonical(ranges)


def test_a_closed_last_range_exports_its_plain_tail():
    ranges = ((1, 16, 3),)  # widths above 16 decode plainly
    for engine in ENGINES:
        assert _roundtrip(engine, ranges) == ((1, 16, 3), (17, None, 0))


# -- each engine's own rules ------------------------------------------------------------------------------

def vllm_rules(cfg):
    """vLLM's documented validation of num_speculative_tokens_per_batch_size, plus contiguity."""
    nst = cfg["num_speculative_tokens"]
    assert isinstance(nst, int) and nst > 0
    if "num_speculative_tokens_per_batch_size" not in cfg:
        return
    entries = cfg["num_speculative_tokens_per_batch_size"]
    assert isinstance(entries, list) and entries
    assert entries[0][0] == 1
    prev = 0
    for lo, hi, k in entries:
        assert 0 < lo <= hi and k >= 0 and k <= nst
        assert lo == prev + 1  # contiguous: no gap for vLLM to fill with the K before it
        prev = hi
    assert nst == max(k for *_, k in entries)


def trtllm_rules(spec):
    """TensorRT-LLM's draft_len_schedule validator."""
    mdl = spec["max_draft_len"]
    assert isinstance(mdl, int) and mdl > 0
    if "draft_len_schedule" not in spec:
        return
    sched = spec["draft_len_schedule"]
    assert sched and mdl > 0
    assert all(b >= 1 and v >= 0 for b, v in sched.items())
    assert sched[min(sched)] == mdl
    assert all(v <= mdl for v in sched.values())


@settings(max_examples=100, deadline=None)
@given(schedules(), st.integers(1, 400))
def test_vllm_export_obeys_vllms_rules(ranges, max_batch):
    if max(k for *_, k in ranges) == 0:
        return
    cfg = json.loads(export("vllm", ranges, max_num_seqs=max_batch).text)
    vllm_rules(cfg)
    assert cfg["method"] == "eagle3"
    assert ("num_speculative_tokens_per_batch_size" in cfg) == (len(ranges) > 1)


@settings(max_examples=100, deadline=None)
@given(schedules(deepest_first=True), st.integers(1, 400))
def test_trtllm_export_obeys_trtllms_rules_and_is_yaml(ranges, max_batch):
    if ranges[0][2] == 0:
        return
    text = export("trtllm", ranges, max_num_seqs=max_batch).text
    spec = _yaml_subset(text, "x")["speculative_config"]
    trtllm_rules(spec)
    yaml = pytest.importorskip("yaml")
    assert yaml.safe_load(text)["speculative_config"] == spec


def test_trtllm_refuses_what_it_cannot_express():
    with pytest.raises(ScheduleError, match="smallest batch-size key"):
        export("trtllm", ((1, 4, 2), (5, None, 4)), max_num_seqs=64)
    with pytest.raises(ScheduleError, match="--max-num-seqs"):
        export("trtllm", ((1, 4, 4), (5, None, 1)))
    for engine in ENGINES:
        with pytest.raises(ScheduleError, match="never speculates"):
            export(engine, ((1, None, 0),))
    with pytest.raises(ScheduleError, match="unknown engine"):
        export("tgi", ((1, None, 1),))


def test_every_export_says_what_the_engine_cannot_express():
    ranges = ((1, 16, 4), (17, 64, 2), (65, None, 1))
    for engine in ENGINES:
        cfg = export(engine, ranges, max_num_seqs=256)
        assert any("per-sequence" in n for n in cfg.notes)
        assert any("energy" in n for n in cfg.notes)
    text = export("trtllm", ranges, max_num_seqs=256).text
    assert "# Note: one depth for the whole batch" in text
    assert "above 256 plain-decode" in text


def test_exports_match_the_documented_examples():
    cfg = json.loads(export("vllm", ((1, 16, 4), (17, 64, 3), (65, None, 1)), max_num_seqs=256,
                            draft_model="yuhuili/EAGLE-LLaMA3.1-Instruct-8B").text)
    assert cfg == {"method": "eagle3", "model": "yuhuili/EAGLE-LLaMA3.1-Instruct-8B", "num_speculative_tokens": 4,
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


def test_sglang_import_reads_slots_as_its_loader_does_and_refuses_choices():
    assert import_text("sglang", '{"8": {"candidate_steps": [1]}, "1": {"candidate_steps": [3, 3]}, '
                                 '"strategy": "ema"}') == ((1, 7, 3), (8, None, 1))
    assert import_text("sglang", '{"4": {"candidate_steps": [2]}, "16": {"candidate_steps": [0]}}') == \
        ((1, 15, 2), (16, None, 0))
    # SGLang's loader crashes on a bare list (AttributeError): refused, saying so
    with pytest.raises(PolicyError, match="bare list"):
        import_text("sglang", '{"4": [2], "16": [0]}')
    with pytest.raises(PolicyError, match="chooses among"):
        import_text("sglang", '{"1": {"candidate_steps": [1, 3, 5, 7]}, "8": {"candidate_steps": [0, 1, 3]}}')
    # static steps: the server arguments a constant schedule exports
    assert import_text("sglang", '{"speculative_algorithm": "EAGLE3", "speculative_num_steps": 3}') == ((1, None, 3),)
    with pytest.raises(PolicyError, match="no batch-size slot"):
        import_text("sglang", '{"strategy": "ema"}')
    with pytest.raises(PolicyError, match="candidate steps"):
        import_text("sglang", '{"1": {"candidate_steps": []}}')


# -- the policy hook and the command line ---------------------------------------------------------------------

def test_engine_files_are_schedule_policies(tmp_path):
    ranges = ((1, 16, 4), (17, 64, 2), (65, None, 1))
    for engine in ENGINES:
        f = tmp_path / f"cfg.{engine}"
        f.write_text(export(engine, ranges, max_num_seqs=256).text)
        pol = read_policy(f"{engine}:{f}")
        assert pol.kind == "schedule"
        assert all(pol.depth_for_width(w) == depth_at(ranges, w) for w in range(1, 257))
    with pytest.raises(PolicyError, match="needs a file"):
        read_policy("vllm:")
    with pytest.raises(PolicyError, match="cannot read"):
        read_policy(f"sglang:{tmp_path / 'missing.json'}")
    # the policy value reads no file: an ENGINE:FILE text is not one of its forms
    with pytest.raises(PolicyError, match="unknown policy"):
        parse_policy(f"vllm:{tmp_path / 'cfg.vllm'}")


def test_schedule_file_roundtrip_and_refusals(tmp_path):
    ranges = ((1, 8, 3), (9, None, 1))
    text = render_schedule(ranges, objective="energy", max_num_seqs=128, sections={"inputs": {"trace": "t.csv"}})
    f = tmp_path / "s.toml"
    f.write_text(text)
    doc = load_schedule(f)
    assert doc.ranges == ranges and doc.max_num_seqs == 128 and doc.objective == "energy"
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
    s.write_text(render_schedule(((1, 16, 4), (17, None, 1)), objective="energy", max_num_seqs=256))
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
    from specsim.demo_inputs import demo_calibration, demo_table
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
    from specsim.demo_inputs import demo_calibration, demo_table
    from specsim.traces import synthetic_trace

    t, c, tr, cfg = tmp_path / "t.toml", tmp_path / "c.toml", tmp_path / "trace.csv", tmp_path / "vllm.json"
    t.write_text(demo_table().to_text())
    c.write_text(demo_calibration().render())
    trace = synthetic_trace(120, 20.0, seed=2).requests
    tr.write_text("arrival_s,prompt_tokens,output_tokens\n" + "".join(f"{a!r},{p},{o}\n" for a, p, o in trace.tolist()))
    cfg.write_text(export("vllm", ((1, 4, 3), (5, None, 1)), max_num_seqs=256).text)
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
    f.write_text(render_schedule(ranges, objective=objective, max_num_seqs=max_batch,
                                 sections={"result": {"gain": 0.25, "within_noise": False, "note": 'a "quoted" word'}}))
    doc = load_schedule(f)
    assert (doc.ranges, doc.max_num_seqs, doc.objective) == (ranges, max_batch, objective)
    assert doc.sections["result"] == {"gain": 0.25, "within_noise": False, "note": 'a "quoted" word'}


# -- constant schedules, notes, TensorRT-LLM key semantics, the documented schedules ----------------------------

def test_a_constant_schedule_exports_as_each_engines_static_setting():
    ranges = ((1, None, 3),)
    vllm = export("vllm", ranges, max_num_seqs=256)
    assert json.loads(vllm.text) == {"method": "eagle3", "num_speculative_tokens": 3}
    trt = export("trtllm", ranges, max_num_seqs=256)
    spec = _yaml_subset(trt.text, "x")["speculative_config"]
    assert spec == {"decoding_type": "Eagle3", "max_draft_len": 3}
    sg = export("sglang", ranges)
    assert json.loads(sg.text)["speculative_num_steps"] == 3 and "--speculative-adaptive" not in sg.usage
    for cfg in (vllm, trt, sg):
        assert any("plain static setting" in n and "CUDA-graph" in n for n in cfg.notes), cfg.notes
        assert import_text(cfg.engine, cfg.text, "exported") == ranges


def test_vllm_notes_say_what_decides_whether_a_schedule_helps():
    cfg = export("vllm", ((1, 16, 4), (17, None, 1)), max_num_seqs=256)
    text = " ".join(cfg.notes)
    for needle in ("ngram, eagle, eagle3, mtp, draft_model, dflash", "v0.24", "prefill chunks", "PIECEWISE",
                   "'eagle3' is the default"):
        assert needle in text, needle
    assert "is not among them" in " ".join(export("vllm", ((1, 16, 4), (17, None, 1)), method="medusa").notes)
    assert not any("default" in n for n in export("vllm", ((1, 16, 4), (17, None, 1)), method="eagle").notes)


def test_trtllm_notes_floor_depth_zero_tiers_and_key_semantics():
    ranges = ((1, 4, 4), (5, 8, 0), (9, 32, 1))
    notes = " ".join(export("trtllm", ranges).notes)
    assert "PR #10860" in notes and "floored at 1" in notes
    assert "the engine drafts where" in " ".join(export("trtllm", ranges, method="DraftTarget").notes)


def test_trtllm_lower_bound_files_are_told_apart_or_named():
    lower = "speculative_config:\n  max_draft_len: 4\n  draft_len_schedule:\n    1: 4\n    8: 2\n    32: 0\n"
    # key 1 with a 0 tail: a lower-bound file (1-7 -> 4, 8-31 -> 2, 32 and wider -> 0)
    assert import_text("trtllm", lower) == ((1, 7, 4), (8, 31, 2), (32, None, 0))
    assert import_text("trtllm", lower, trtllm_keys="upper") == ((1, 1, 4), (2, 8, 2), (9, None, 0))
    ambiguous = "speculative_config:\n  max_draft_len: 4\n  draft_len_schedule: {1: 4, 8: 2}\n"
    assert import_text("trtllm", ambiguous) == ((1, 1, 4), (2, 8, 2), (9, None, 0))
    assert import_text("trtllm", ambiguous, trtllm_keys="lower") == ((1, 7, 4), (8, None, 2))
    with pytest.raises(PolicyError, match="key 1"):
        import_text("trtllm", "speculative_config:\n  max_draft_len: 4\n  draft_len_schedule: {4: 4}\n",
                    trtllm_keys="lower")


def _vllm_engine_lookup(cfg, width):
    """vLLM's lookup (dynamic/utils.py): inclusive [start, end, K] ranges, a gap or the tail
    takes the K before it, K clamped to num_speculative_tokens; no list: the static K."""
    nst = cfg["num_speculative_tokens"]
    entries = cfg.get("num_speculative_tokens_per_batch_size")
    if entries is None:
        return nst
    k = None
    for lo, hi, kk in sorted(entries):
        if lo <= width:
            k = kk
    return min(k, nst)


def _trtllm_engine_lookup(spec, width):
    """TensorRT-LLM (current builds): the smallest upper-bound key >= width, wider -> 0; no
    schedule: max_draft_len."""
    sched = spec.get("draft_len_schedule")
    if sched is None:
        return spec["max_draft_len"]
    keys = [b for b in sorted(sched) if b >= width]
    return sched[keys[0]] if keys else 0


def _sglang_engine_lookup(doc, width):
    """SGLang's adaptive loader: digit keys are slot lower bounds, each a dict with
    candidate_steps (anything else crashes it); the slot is the largest key <= width (the
    smallest for narrower widths); one candidate pins the depth. Static: the steps."""
    slots = {int(k): v for k, v in doc.items() if k.isdigit()}
    if not slots:
        return doc["speculative_num_steps"]
    for v in slots.values():
        steps = v["candidate_steps"]  # a bare list raises here, as SGLang's loader does
        assert len(steps) == 1
    keys = [k for k in sorted(slots) if k <= width] or [min(slots)]
    return slots[keys[-1]]["candidate_steps"][0]


def _documented_schedules():
    import re

    text = (ROOT / "docs" / "schedules.md").read_text()
    found = sorted(set(re.findall(r"schedule:[0-9][0-9=,-]*[0-9]", text)))
    return [parse_policy(p).ranges for p in found] + [((1, 4, 4), (5, 8, 2), (9, 32, 1)), ((1, None, 3),)]


@pytest.mark.parametrize("engine", ENGINES)
def test_the_documented_schedules_load_through_each_engines_validator_and_lookup(engine):
    schedules = _documented_schedules()
    assert len(schedules) >= 6
    for ranges in schedules:
        c = canonical(ranges)
        if engine == "trtllm" and c[0][2] != max(k for *_, k in c):
            with pytest.raises(ScheduleError, match="max_draft_len"):
                export(engine, c, max_num_seqs=256)
            continue
        cfg = export(engine, c, max_num_seqs=256)
        if engine == "vllm":
            doc = json.loads(cfg.text)
            vllm_rules(doc)
            look = _vllm_engine_lookup
        elif engine == "trtllm":
            doc = _yaml_subset(cfg.text, "x")["speculative_config"]
            trtllm_rules(doc)
            look = _trtllm_engine_lookup
        else:
            doc = json.loads(cfg.text)
            look = _sglang_engine_lookup
        assert all(look(doc, w) == depth_at(c, w) for w in range(1, 257)), (engine, c)


def test_sglang_pads_the_batch_to_its_cuda_graph_sizes(tmp_path):
    from specsim.interop import read_policy

    f = tmp_path / "a.json"
    f.write_text('{"1": {"candidate_steps": [4]}, "6": {"candidate_steps": [2]}, "40": {"candidate_steps": [1]}}')
    sizes = (1, 2, 4, 8, 16, 24, 32)
    pol = read_policy(f"sglang[{','.join(map(str, sizes))}]:{f}")
    for w in range(1, 80):
        padded = next((s for s in sizes if s >= w), w)  # wider than every graph: unpadded
        slot = max(k for k in (1, 6, 40) if k <= padded)
        assert pol.depth_for_width(w) == {1: 4, 6: 2, 40: 1}[slot], w
    # width 5 pads to 8, past the slot boundary at 6: depth 2 where the plain lookup gives 4
    assert pol.depth_for_width(5) == 2 and read_policy(f"sglang:{f}").depth_for_width(5) == 4
    with pytest.raises(PolicyError, match="CUDA-graph"):
        read_policy(f"sglang[0,x]:{f}")


# -- a per-batch schedule must clear its own costs ----------------------------------------------------

def _tuned_file(path, gain, noise, base=0.25, served="tuned"):
    """A schedule file as tune writes it: a per-batch schedule that gained ``gain`` J/token (+-
    ``noise``) over fixed:3 (``base`` J/token) on the held-out window."""
    result = {"best_fixed": "fixed:3", "best_fixed_holdout_mean": base, "gain": gain, "gain_noise": noise,
              "unit": "J/token", "tuned": "schedule:1-16=4,17-=1", "served": served}
    path.write_text(render_schedule(((1, 16, 4), (17, None, 1)), objective="energy", max_num_seqs=256,
                                    sections={"result": result}))
    return path


@pytest.mark.parametrize("gain, noise, engine, per_batch", [
    (0.0003, 0.0001, "vllm", False),   # +0.12%: far under vLLM's 14% per-batch cost
    (0.05, 0.001, "vllm", True),       # +20% +- 0.4%: clears 14% and the noise
    (0.0365, 0.001, "vllm", True),     # +14.6% - 0.4% = 14.2%: just clears
    (0.0352, 0.001, "vllm", False),    # +14.1% - 0.4%: does not
    (0.0003, 0.0001, "trtllm", True),  # no per-batch cost known: the noise alone decides
    (0.0003, 0.0004, "trtllm", False),
])
def test_export_writes_a_per_batch_schedule_only_when_it_clears_the_noise_and_the_engines_cost(
        tmp_path, capsys, gain, noise, engine, per_batch):
    from specsim.interop import per_batch_cost
    from specsim.studies.schedule_file import per_batch_verdict

    s = _tuned_file(tmp_path / "s.toml", gain, noise)
    worth, why = per_batch_verdict(load_schedule(s).sections["result"], per_batch_cost(engine))
    assert worth == per_batch
    assert main(["schedule", "export", str(s), "--to", engine]) == 0
    out = capsys.readouterr()
    assert out.err.splitlines()[0] == ("specsim: schedule:1-16=4,17-=1 for " + engine if per_batch
                                       else f"specsim: schedule:1-=3 for {engine}")
    if not per_batch:
        assert "the plain static setting (fixed:3) serves better" in out.err
        if engine == "vllm":
            assert json.loads(out.out) == {"method": "eagle3", "num_speculative_tokens": 3}
    # A serve that pays no per-batch cost (vLLM's V2 runner keeps full CUDA graphs) says so.
    assert main(["schedule", "export", str(s), "--to", engine, "--per-batch-cost", "0"]) == 0
    assert (capsys.readouterr().err.splitlines()[0].startswith("specsim: schedule:1-16=4")) == (gain > noise)


def test_export_keeps_a_schedule_it_cannot_weigh(tmp_path, capsys):
    # No [result] (written by hand), or a file that already serves its best fixed depth.
    s = tmp_path / "s.toml"
    s.write_text(render_schedule(((1, 16, 4), (17, None, 1)), objective="energy", max_num_seqs=256))
    assert main(["schedule", "export", str(s), "--to", "vllm"]) == 0
    assert "num_speculative_tokens_per_batch_size" in capsys.readouterr().out
    assert main(["schedule", "export", "--planner", str(s), str(s), "--to", "vllm", "--per-batch-cost", "0.1"]) == 2
    assert "--per-batch-cost applies to a tuned schedule file" in capsys.readouterr().err


def test_tune_result_recommends_per_engine():
    from specsim.studies.tune_result import Score, TuneResult

    def score(policy, mean):
        return Score(policy=policy, values=(mean, mean), attainment=None, j_per_token=mean, tokens_per_s=100.0,
                     tpot_p99_s=0.05)

    base = TuneResult(ranges=((1, 4, 3), (5, None, 1)), objective="energy", train=score("schedule:1-4=3,5-=1", 1.0),
                      holdout=(score("schedule:1-4=3,5-=1", 0.9988), score("fixed:2", 1.0)), best_fixed="fixed:2",
                      gain=0.0012, gain_noise=0.0002, starts={}, evaluations=1, seconds=1.0, executor="serial",
                      inputs={"max_num_seqs": 64})
    assert base.serves_tuned  # beats the noise: the file serves it
    ranges, why = base.recommended_for("vllm")
    assert ranges == ((1, None, 2),) and "not more than the 14% the per-batch form costs" in why
    cfg = base.export("vllm")
    assert json.loads(cfg.text) == {"method": "eagle3", "num_speculative_tokens": 2} and why in cfg.notes
    assert base.recommended_for("trtllm") == (((1, 4, 3), (5, None, 1)), "")
    assert base.recommended_for("vllm", cost=0.0)[0] == ((1, 4, 3), (5, None, 1))


@pytest.mark.parametrize("key, value, says", [
    ("gain", True, "not the numbers tune writes"), ("gain", "x", "not the numbers tune writes"),
    ("gain", float("nan"), "not the numbers tune writes"), ("best_fixed_holdout_mean", 0.0, "not the numbers"),
    ("gain_noise", True, "not the numbers tune writes"), ("best_fixed", "garbage", "is not a fixed:K policy"),
    ("best_fixed", 3, "is not a fixed:K policy"),
])
def test_an_edited_result_is_exported_unweighed_and_says_so(tmp_path, capsys, key, value, says):
    s = _tuned_file(tmp_path / "s.toml", 0.0003, 0.0001)
    doc = load_schedule(s)
    result = dict(doc.sections["result"]) | {key: value}
    s.write_text(render_schedule(doc.ranges, objective="energy", max_num_seqs=256, sections={"result": result}))
    assert main(["schedule", "export", str(s), "--to", "vllm"]) == 0
    err = capsys.readouterr().err
    assert err.splitlines()[0] == "specsim: schedule:1-16=4,17-=1 for vllm" and says in err


def test_a_best_fixed_depth_past_the_tuned_k_max_is_refused(tmp_path, capsys):
    s = _tuned_file(tmp_path / "s.toml", 0.0003, 0.0001)
    doc = load_schedule(s)
    s.write_text(render_schedule(doc.ranges, objective="energy", max_num_seqs=256,
                                 sections={"inputs": {"k_max": 8}, "result": doc.sections["result"] | {"best_fixed": "fixed:99"}}))
    assert main(["schedule", "export", str(s), "--to", "vllm"]) == 2
    assert "deeper than the k_max = 8" in capsys.readouterr().err


# -- draft trees -------------------------------------------------------------------------------------

def _tree_inputs(tmp_path, max_k=32):
    """The demo's box modelled to depth ``max_k`` (where the planner picks trees at narrow widths)
    and the demo's calibration with its [tree] table, written to files."""
    from specsim.demo_inputs import DEMO_DRAFTER, DEMO_GPU, DEMO_MODEL, demo_tree_calibration
    from specsim.costmodel.roofline import model_table

    table = model_table(DEMO_GPU, DEMO_MODEL, DEMO_DRAFTER, tp=1, context_tokens=1024,
                        widths=(1, 2, 4, 8, 16, 32, 64), max_k=max_k)
    cal = demo_tree_calibration()
    t, c = tmp_path / "t.toml", tmp_path / "c.toml"
    t.write_text(table.to_text())
    c.write_text(cal.render())
    return table, cal, t, c


@pytest.mark.parametrize("engine", ["vllm", "sglang", "trtllm"])
def test_cli_exports_the_planned_tree_and_the_engine_reads_it_back(tmp_path, capsys, engine):
    from specsim.plan import Planner
    from specsim.tree.settings import rank_paths, sglang_settings, trtllm_settings

    table, cal, t, c = _tree_inputs(tmp_path)
    planner = Planner(table, cal, memo=False)
    plans = [planner.propose_tree(n) for n in range(1, 65)]
    width = next(n for n, p in enumerate(plans, start=1) if p.kind == "tree")  # trees pay at narrow widths
    planned = plans[width - 1].tree
    out = tmp_path / f"{engine}.cfg"
    assert main(["schedule", "export", "--planner", str(t), str(c), "--tree", "--tree-width", str(width),
                 "--to", engine, "-o", str(out)]) == 0
    err = capsys.readouterr().err
    assert f"a tree of {planned.nodes} nodes, depth {planned.depth} (planned at width {width})" in err
    assert "a tree that changes with the batch width (as the planner's does) cannot be expressed" in err
    # the note names every width's choice; some widths plan no tree, so one static tree differs there
    assert any(p.kind != "tree" for p in plans) and "a chain of" in err
    policy = read_policy(f"{engine}:{out}")
    assert policy.kind == "tree"
    if engine == "vllm":
        assert set(rank_paths(policy.shape)) == set(rank_paths(planned)) and "flattened" in str(policy)
    elif engine == "sglang":
        fields = dict(sglang_settings(planned, cal.rank_acceptance).fields)
        assert policy.settings == ("sglang", fields["eagle_topk"], fields["num_steps"], fields["num_draft_tokens"])
        assert fields["num_draft_tokens"] == planned.nodes + 1
    else:
        fields = dict(trtllm_settings(planned, cal.rank_acceptance).fields)
        assert policy.settings == ("trtllm", fields["dynamic_tree_max_topK"], fields["max_draft_len"],
                                   fields["max_total_draft_tokens"])
        assert fields["max_total_draft_tokens"] == planned.nodes


def test_cli_tree_export_defaults_to_the_tree_planned_at_the_most_widths(tmp_path, capsys):
    from specsim.plan import Planner

    table, cal, t, c = _tree_inputs(tmp_path)
    assert main(["schedule", "export", "--planner", str(t), str(c), "--tree", "--to", "vllm"]) == 0
    err = capsys.readouterr().err
    plans = [Planner(table, cal, memo=False).propose_tree(n) for n in range(1, 65)]
    counts = {}
    for n, p in enumerate(plans, start=1):
        if p.kind == "tree":
            counts.setdefault(p.nodes, []).append(n)
    nodes = max(counts, key=lambda v: (len(counts[v]), -counts[v][0]))
    assert f"a tree of {nodes} nodes" in err and f"(planned at width {counts[nodes][0]})" in err


@pytest.mark.parametrize("extra, message", [
    (["--tree-width", "0"], "--tree-width 0"),
    (["--tree-width", "65"], "--tree-width 65: plan widths are 1..64"),
    (["--max-num-seqs", "8"], "apply to chain schedules"),
])
def test_cli_tree_export_refusals(tmp_path, capsys, extra, message):
    _, _, t, c = _tree_inputs(tmp_path)
    out = tmp_path / "out.json"
    assert main(["schedule", "export", "--planner", str(t), str(c), "--tree", "--to", "sglang", "-o", str(out),
                 *extra]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert not out.exists()


def test_cli_tree_export_refuses_without_a_tree_to_write(tmp_path, capsys):
    from specsim.demo_inputs import demo_calibration

    _, _, t, c = _tree_inputs(tmp_path, max_k=4)
    out = tmp_path / "out.json"
    assert main(["schedule", "export", "--planner", str(t), str(c), "--tree", "--to", "vllm", "-o", str(out)]) == 2
    assert "picks no branching tree at widths 1..64" in capsys.readouterr().err
    chains = tmp_path / "chains.toml"
    chains.write_text(demo_calibration().render())
    assert main(["schedule", "export", "--planner", str(t), str(chains), "--tree", "--to", "vllm", "-o", str(out)]) == 2
    assert "no [tree] table" in capsys.readouterr().err
    assert main(["schedule", "export", "--planner", str(t), str(c), "--tree-width", "2", "--to", "vllm"]) == 2
    assert "--tree-width applies with --tree" in capsys.readouterr().err
    assert not out.exists()
