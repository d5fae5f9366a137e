"""Acceptance-trace replay (docs/replay.md) and ``table import``."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from specsim.errors import PolicyError, SpecsimWarning, TraceError, TraceWarning
from specsim.sim import AcceptanceTrace, load_acceptance_file, parse_acceptance_file, replay
from specsim.table import CostTable
from tests import reference as ref

GLM = "metrale/glm53_flash_dflash2_gb10x3.toml"
QWEN = "metrale/qwen38_27b_mtp_gb10.toml"


def make_trace(digits, k_logged, name="t"):
    arr = np.array(digits, dtype=np.int8)
    arr.flags.writeable = False
    return AcceptanceTrace(name, "", k_logged, arr)


# -- hand-computed cases -----------------------------------------------------------------------------

def test_hand_computed_width_one():
    # entries 0,1,2,3 at depth 2 emit 1,2,3,3 (3 clamps to 2); then 0 -> 1: 10 tokens in 5 steps
    r = replay(make_trace([0, 1, 2, 3], 3), "fixed:2", 1, 10, step_ms=[10.0, 20.0, 30.0, 40.0])
    assert (r.tokens, r.steps, r.plain_steps, r.depth, r.by_depth) == (10, 5, 0, 2, (0, 0, 5, 0))
    assert r.ms == 150.0 and r.joules is None and r.tokens_per_j is None
    assert r.tokens_per_ms == pytest.approx(10 / 150)


def test_hand_computed_width_three_cycles():
    # step 1 uses entries 2,0,1 -> 3+1+2 = 6; step 2 uses 3,1 and wraps to 2 -> 4+2+3 = 9; 15 >= 12
    # A step_ms list prices one stream's step: at width 3 the replay says it reports 3x.
    with pytest.warns(SpecsimWarning, match="throughput is 3x a single stream's"):
        r = replay(make_trace([2, 0, 1, 3, 1], 3), "fixed:3", 3, 12, step_ms=[1.0, 2.0, 3.0, 4.0])
    assert (r.tokens, r.steps, r.ms) == (15, 2, 8.0)


def test_plain_steps_use_no_entry():
    with pytest.warns(SpecsimWarning, match="at width 4"):
        r = replay(make_trace([5, 5, 5], 5), "fixed:0", 4, 10, step_ms=[7.0, 9.0])
    assert (r.tokens, r.steps, r.plain_steps, r.by_depth, r.ms) == (12, 3, 3, (3, 0), 21.0)


def test_depth_clamped_to_k_logged():
    r = replay(make_trace([2, 2], 2), "fixed:6", 1, 6, step_ms=[1.0] * 8)
    assert r.depth == 2 and (r.tokens, r.steps) == (6, 2)


def test_schedule_policy_and_table_costs(shared_data):
    table = qwen_table(shared_data, "qwen38_27b_mtp_r1")
    trace = make_trace([1, 0, 3, 2], 3)
    r = replay(trace, "schedule:1-2=3,3-6=1,7-=0", 4, 100, table=table)
    cell = table.cell(4, 1)
    steps = 0
    tokens = 0
    while tokens < 100:
        tokens += 2 + 1 + 2 + 2
        steps += 1
    assert (r.depth, r.tokens, r.steps) == (1, tokens, steps)
    assert r.ms == pytest.approx(steps * cell.step_ms) and r.joules == pytest.approx(steps * cell.step_j)
    assert r.tokens_per_j == pytest.approx(tokens / r.joules)
    # width 5 is interpolated between 4 and 8
    r5 = replay(trace, "fixed:2", 5, 50, table=table)
    c5 = table.cell(5, 2)
    assert r5.ms == pytest.approx(r5.steps * c5.step_ms)


def test_depth_beyond_the_costs_is_refused(shared_data):
    table = qwen_table(shared_data, "qwen38_27b_mtp_r1")
    with pytest.raises(PolicyError, match="price depths up to 3"):
        replay(make_trace([4, 4, 4], 4), "fixed:4", 1, 9, table=table)
    r = replay(make_trace([4, 4, 4], 4), "fixed:3", 1, 9, table=table)
    assert r.depth == 3 and r.tokens == 12


@pytest.mark.parametrize("policy", ["tree:3", "tree:3,2", "tree:auto"])
def test_a_tree_policy_is_refused_by_replay(shared_data, policy):
    """An acceptance trace logs a chain's accepted runs: tree:3 replayed as a chain of 3 (a silent
    wrong answer) and tree:auto raised a TypeError; both are refused by name."""
    table = qwen_table(shared_data, "qwen38_27b_mtp_r1")
    with pytest.raises(PolicyError, match=rf"policy {policy} drafts a tree.*replay a chain policy"):
        replay(make_trace([2, 1, 3], 3), policy, 1, 9, table=table)


def test_digit_above_k_logged_warns_not_raises():
    trace = make_trace([7, 0, 1], 5)
    with pytest.warns(TraceWarning, match="above k_logged = 5"):
        r = replay(trace, "fixed:5", 1, 8, step_ms=[1.0] * 6)
    assert (r.tokens, r.steps) == (6 + 1 + 2, 3)


def test_replay_refusals():
    trace = make_trace([1, 2], 2)
    with pytest.raises(TraceError, match="needs step costs"):
        replay(trace, "fixed:1", 1, 10)
    for bad in ({"width": 0}, {"budget": 0}, {"width": 1.5}):
        kwargs = {"width": 1, "budget": 10} | bad
        with pytest.raises(TraceError):
            replay(trace, "fixed:1", kwargs["width"], kwargs["budget"], step_ms=[1.0, 2.0])
    with pytest.raises(TraceError, match="step_ms"):
        replay(trace, "fixed:1", 1, 10, step_ms=[1.0, -2.0])
    with pytest.raises(PolicyError, match="confidence"):
        replay(trace, "sequence", 1, 10, step_ms=[1.0, 2.0])
    with pytest.raises(PolicyError, match="cost table"):
        replay(trace, "propose", 1, 10, step_ms=[1.0, 2.0])
    with pytest.raises(PolicyError, match="cost table"):
        replay(trace, "goodput", 1, 10, step_ms=[1.0, 2.0])
    with pytest.raises(PolicyError, match="unknown policy"):
        replay(trace, "greedy", 1, 10, step_ms=[1.0, 2.0])


# -- against the reference ------------------------------------------------------------------------

@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 9), min_size=1, max_size=40), st.integers(0, 9), st.integers(1, 9),
       st.integers(1, 12), st.integers(1, 500))
def test_kernel_matches_reference(digits, k_logged, depth, width, budget):
    from specsim.sim._replay_kernels import replay_nb

    got = replay_nb(np.array(digits, dtype=np.int8), width, min(depth, k_logged), budget, 0.1, 0.3)
    want = ref.ref_replay(digits, width, min(depth, k_logged), budget, 0.1, 0.3)
    assert got[:4] == want


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 9), min_size=1, max_size=40), st.integers(0, 9), st.integers(1, 12),
       st.integers(1, 500), st.integers(1, 7))
def test_the_replay_in_chunks_matches_the_reference(digits, depth, width, budget, chunk):
    # Chunks of steps (between which Ctrl-C and the progress line act) give the one-call result.
    from specsim.sim._replay_kernels import replay_steps_nb

    counts, sums = np.zeros(3, dtype=np.int64), np.zeros(2, dtype=np.float64)
    calls = 0
    while not replay_steps_nb(np.array(digits, dtype=np.int8), width, depth, budget, 0.1, 0.3, counts, sums,
                              np.int64(chunk)):
        calls += 1
        assert counts[1] == calls * chunk  # each call stops after exactly `chunk` steps until the end
    want = ref.ref_replay(digits, width, depth, budget, 0.1, 0.3)
    assert (int(counts[0]), int(counts[1]), float(sums[0]), float(sums[1])) == want


def test_real_glm_traces_against_reference(shared_data):
    afile = load_acceptance_file(shared_data / GLM)
    assert len(afile.traces) == 6 and len(afile.step_ms) == 8
    for trace in afile.traces.values():
        digits = trace.accepted.tolist()
        for width in (1, 3, 8):
            for k in range(trace.k_logged + 1):
                if width > 1 or (trace.above_k_logged and k):
                    # The k_logged quirk (TraceWarning) and the width note are both SpecsimWarnings.
                    with pytest.warns(SpecsimWarning):
                        r = replay(trace, f"fixed:{k}", width, 20000, step_ms=afile.step_ms)
                else:
                    r = replay(trace, f"fixed:{k}", width, 20000, step_ms=afile.step_ms)
                tokens, steps, ms, _ = ref.ref_replay(digits, width, k, 20000, afile.step_ms[k], 0.0)
                assert (r.tokens, r.steps, r.ms) == (tokens, steps, ms), (trace.name, width, k)
                assert r.by_depth[k] == steps and sum(r.by_depth) == steps
        assert trace.priors() == pytest.approx(ref.ref_trace_priors(trace.accepted.tolist(), trace.k_logged))


def test_real_trace_sizes_and_the_k_logged_quirk(shared_data):
    afile = load_acceptance_file(shared_data / GLM)
    fk7 = afile.trace("glm53_dflash_fk7")
    assert fk7.k_logged == 5 and int(fk7.accepted.max()) == 7 and fk7.above_k_logged > 0
    assert fk7.accepted.dtype == np.int8 and not fk7.accepted.flags.writeable
    assert sum(len(s) for s in __import__("tomllib").loads((shared_data / GLM).read_text())["trace"][0]["steps"]) \
        == fk7.accepted.shape[0]
    others = [t for t in afile.traces.values() if t.name != "glm53_dflash_fk7"]
    assert all(t.above_k_logged == 0 for t in others)
    with pytest.raises(TraceError, match="traces here"):
        afile.trace("nope")


# -- files -----------------------------------------------------------------------------------------

def test_acceptance_file_problems_all_listed():
    text = """
step_ms = [1.0, -2]
[[trace]]
name = "a"
k_logged = 12
steps = ["01x2"]
[[trace]]
k_logged = 1
steps = ["0"]
[[trace]]
name = "c"
k_logged = 2
steps = []
[[run]]
name = "r"
cells = [[1, 0, 1.0, 1.0, 0.0], [1.5, 0, 1, 1, 0, 0]]
"""
    with pytest.raises(TraceError) as e:
        parse_acceptance_file(text, "f.toml")
    problems = e.value.problems
    assert any("step_ms" in p for p in problems)
    assert any("k_logged = 12" in p for p in problems)
    assert any("character 3 is 'x'" in p for p in problems)
    assert any("trace[1] has no `name`" in p for p in problems)
    assert any("no digit" in p for p in problems)
    assert sum("cells[" in p for p in problems) == 2
    with pytest.raises(TraceError, match="not valid TOML"):
        parse_acceptance_file("x = [", "g.toml")
    with pytest.raises(TraceError, match="not an acceptance file"):
        parse_acceptance_file("a = 1", "h.toml")


def test_qwen_file_has_runs_not_traces(shared_data):
    afile = load_acceptance_file(shared_data / QWEN)
    assert sorted(afile.runs) == ["qwen38_27b_mtp_r1", "qwen38_27b_mtp_r2"] and not afile.traces
    assert len(afile.run("qwen38_27b_mtp_r2")) == 16
    with pytest.raises(TraceError, match="table import"):
        afile.trace("qwen38_27b_mtp_r1")


def qwen_table(shared_data, run):
    from specsim.sim.replay import run_table
    from specsim.table import TableKey

    cells = load_acceptance_file(shared_data / QWEN).run(run)
    return run_table(cells, TableKey(1, "gb10", "qwen3.8-27b/mtp-nvfp4", {}))


# -- CLI ------------------------------------------------------------------------------------------

def test_cli_table_import_both_runs(shared_data, tmp_path, capsys):
    from specsim.cli import main

    raw = __import__("tomllib").loads((shared_data / QWEN).read_text())
    for run in raw["run"]:
        out = tmp_path / f"{run['name']}.toml"
        rc = main(["table", "import", str(shared_data / QWEN), "--run", run["name"], "-o", str(out),
                   "--box-class", "gb10", "--recipe", "qwen3.8-27b/mtp-nvfp4", "--digest", "verify=sha256:ab"])
        assert rc == 0
        table = CostTable.load(out)
        assert table.key.box_class == "gb10" and dict(table.key.plan_digests) == {"verify": "sha256:ab"}
        assert sorted(tuple(c) for c in table.cells) == sorted(tuple(c) for c in raw_cells(run))
        assert table.widths.tolist() == [1, 2, 4, 8] and table.max_k == 3
        assert main(["table", "check", str(out)]) == 0
    capsys.readouterr()
    base = ["table", "import", str(shared_data / QWEN), "-o", str(tmp_path / "x.toml"), "--box-class", "b", "--recipe", "r"]
    assert main(base + ["--run", "nope"]) == 2
    assert "runs here" in capsys.readouterr().err
    assert main(base + ["--run", "qwen38_27b_mtp_r1", "--digest", "novalue"]) == 2
    bad = tmp_path / "bad.toml"
    bad.write_text('[[run]]\nname = "r"\ncells = [[1, 0, 1.0, 1.0, 0.5, 0.0]]\n')
    assert main(["table", "import", str(bad), "--run", "r", "-o", str(tmp_path / "y.toml"), "--box-class", "b",
                 "--recipe", "r"]) == 2
    assert "exactly 0 at k = 0" in capsys.readouterr().err
    assert not (tmp_path / "y.toml").exists()


def raw_cells(run):
    return [(c[0], c[1], float(c[2]), float(c[3]), float(c[4]), float(c[5])) for c in run["cells"]]


def test_cli_replay(shared_data, tmp_path, capsys):
    from specsim.cli import main

    out = tmp_path / "r.json"
    rc = main(["replay", str(shared_data / GLM), "--trace", "glm53_dflash_fk4", "--policy", "fixed:2", "--width", "4",
               "--budget", "5000", "--json", str(out)])
    assert rc == 0
    doc = json.loads(out.read_text())
    afile = load_acceptance_file(shared_data / GLM)
    tokens, steps, ms, _ = ref.ref_replay(afile.trace("glm53_dflash_fk4").accepted.tolist(), 4, 2, 5000,
                                          afile.step_ms[2], 0.0)
    assert (doc["tokens"], doc["steps"], doc["ms"], doc["joules"], doc["plain_steps"]) == (tokens, steps, ms, None, 0)
    assert doc["by_depth"] == {"2": steps} and doc["tokens_per_ms"] == pytest.approx(tokens / ms)
    assert "tok/s" in capsys.readouterr().out

    table = tmp_path / "q.toml"
    assert main(["table", "import", str(shared_data / QWEN), "--run", "qwen38_27b_mtp_r2", "-o", str(table),
                 "--box-class", "gb10", "--recipe", "q"]) == 0
    rc = main(["replay", str(shared_data / GLM), "--trace", "glm53_dflash_fk7", "--policy", "fixed:0", "--width", "2",
               "--budget", "100", "--table", str(table), "--json", str(out)])
    assert rc == 0
    doc = json.loads(out.read_text())
    assert doc["plain_steps"] == doc["steps"] == 50 and doc["joules"] == pytest.approx(50 * CostTable.load(table).cell(2, 0).step_j)
    capsys.readouterr()
    rc = main(["replay", str(shared_data / GLM), "--trace", "glm53_dflash_fk7", "--policy", "fixed:3", "--width", "1",
               "--budget", "100"])
    assert rc == 0 and "warning: " in capsys.readouterr().err

    base = ["replay", str(shared_data / GLM), "--width", "1", "--budget", "10"]
    assert main(base + ["--trace", "nope", "--policy", "fixed:1"]) == 2
    assert main(base + ["--trace", "glm53_dflash_fk4", "--policy", "fixed:x"]) == 2
    assert main(base + ["--trace", "glm53_dflash_fk4", "--policy", "sequence"]) == 2
    assert main(["replay", str(shared_data / QWEN), "--trace", "x", "--policy", "fixed:1", "--width", "1",
                 "--budget", "1"]) == 2
    assert main(["replay", str(tmp_path / "absent.toml"), "--trace", "x", "--policy", "fixed:1", "--width", "1",
                 "--budget", "1"]) == 2
    with pytest.raises(SystemExit) as e:
        main(["replay", str(shared_data / GLM), "--trace", "glm53_dflash_fk4"])
    assert e.value.code == 2


# -- planner policies (propose, goodput) --------------------------------------------------------------

@pytest.mark.parametrize("kind", ["propose", "goodput"])
def test_planner_policies_in_replay(shared_data, kind):
    plan = pytest.importorskip("specsim.plan")
    from specsim.sim.replay import estimated_calibration

    table = qwen_table(shared_data, "qwen38_27b_mtp_r1")
    afile = load_acceptance_file(shared_data / GLM)
    trace = afile.trace("glm53_dflash_fk4")
    cal = estimated_calibration(trace)
    assert cal.priors.tolist() == pytest.approx(ref.ref_trace_priors(trace.accepted.tolist(), trace.k_logged))
    for width in (1, 2, 3, 8, 20):
        for slack in (0.0, 0.5, 0.95):
            planner = plan.Planner(table, cal, slack=slack, max_seqs=None)
            want = planner.propose(width) if kind == "propose" else planner.goodput(width)
            r = replay(trace, kind, width, 3000, table=table, slack=slack)
            assert r.depth == min(want, trace.k_logged), (width, slack)
            tokens, steps, ms, joules = ref.ref_replay(trace.accepted.tolist(), width, r.depth, 3000,
                                                       table.cell(width, r.depth).step_ms,
                                                       table.cell(width, r.depth).step_j)
            assert (r.tokens, r.steps, r.ms, r.joules) == (tokens, steps, ms, joules)
    # a speculation cap below the width plain-decodes
    if kind == "propose":
        assert replay(trace, kind, 8, 100, table=table, max_seqs=4).depth == 0


def test_propose_with_a_given_calibration(shared_data, tmp_path):
    pytest.importorskip("specsim.plan")
    from specsim.calibration import AcceptanceCalibration, DrafterKey
    from specsim.cli import main

    table = qwen_table(shared_data, "qwen38_27b_mtp_r1")
    trace = load_acceptance_file(shared_data / GLM).trace("glm53_dflash_fk4")
    sure = AcceptanceCalibration(DrafterKey("x", 1, "bf16", True), [0.0], [1.0], [1.0, 1.0, 1.0])
    never = AcceptanceCalibration(DrafterKey("x", 1, "bf16", True), [0.0], [0.0], [0.0])
    deep = replay(trace, "goodput", 1, 500, table=table, calibration=sure).depth
    shallow = replay(trace, "goodput", 1, 500, table=table, calibration=never).depth
    assert deep == 3 and shallow == 0
    cal_path = tmp_path / "c.toml"
    cal_path.write_text(sure.render())
    table_path = tmp_path / "t.toml"
    table_path.write_text(table.to_text())
    out = tmp_path / "r.json"
    assert main(["replay", str(shared_data / GLM), "--trace", "glm53_dflash_fk4", "--policy", "goodput", "--width", "1",
                 "--budget", "500", "--table", str(table_path), "--calibration", str(cal_path), "--json", str(out)]) == 0
    assert json.loads(out.read_text())["depth"] == 3
    assert main(["replay", str(shared_data / GLM), "--trace", "glm53_dflash_fk4", "--policy", "propose", "--width", "1",
                 "--budget", "500"]) == 2


def test_named_depths_beyond_the_costs_are_refused_and_capped_ones_labelled(shared_data):
    """As in the engine: a depth the step costs do not price is refused; one above the trace's
    k_logged runs capped, and the label names the depth that ran."""
    import warnings

    afile = load_acceptance_file(shared_data / GLM)
    trace = afile.trace("glm53_dflash_fk4")  # k_logged = 4; the step_ms list prices depths 0..7
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = replay(trace, "fixed:6", 1, 1000, step_ms=afile.step_ms)
        assert (res.policy, res.depth) == ("fixed:4", 4)
        res = replay(trace, "schedule:1-2=6,3-=1", 1, 1000, step_ms=afile.step_ms)
        assert (res.policy, res.depth) == ("schedule:1-2=4,3-=1", 4)
        assert replay(trace, "fixed:2", 1, 1000, step_ms=afile.step_ms).policy == "fixed:2"
        with pytest.raises(PolicyError, match="fixed:99 names depth 99.*up to 7"):
            replay(trace, "fixed:99", 1, 1000, step_ms=afile.step_ms)
