"""Tuning a width -> depth schedule: the search finds the exhaustive optimum on a small space, beats
the built-in policies on the demo trace's held-out window, and writes a schedule file that reads back."""

from __future__ import annotations

import itertools
import json
from types import SimpleNamespace

import numpy as np
import pytest

from specsim.cli import main
from specsim.errors import PolicyError, ScheduleError, SpecsimError
from specsim.policy.schedule import policy_text, ranges_from_depths
from specsim.studies.schedule_file import load_schedule
from specsim.studies.tune import evaluate
from specsim.studies.tune_search import _moves, _runs, grid_widths, schedule_policy
from specsim.sim.options import ServerOptions
from specsim.sim.slo import SLO
from tests.fixtures import tune_on


@pytest.fixture(scope="module")
def small():
    """A 4-width, depth-0..2 modelled table and a busy synthetic trace that fills batches of 1-8."""
    from specsim.demo_inputs import DEMO_DRAFTER, DEMO_GPU, DEMO_MODEL, demo_calibration
    from specsim.costmodel.roofline import model_table
    from specsim.traces import synthetic_trace

    table = model_table(DEMO_GPU, DEMO_MODEL, DEMO_DRAFTER, widths=(1, 2, 4, 8), max_k=2)
    trace = synthetic_trace(160, 60.0, seed=5).requests
    return trace, table, demo_calibration()


def _write_inputs(folder, trace, table, cal):
    """The table, calibration and trace as the CLI reads them: paths ``(table, calibration, trace)``."""
    t, c, tr = folder / "t.toml", folder / "c.toml", folder / "trace.csv"
    t.write_text(table.to_text())
    c.write_text(cal.render())
    rows = ["arrival_s,prompt_tokens,output_tokens"] + [f"{a!r},{p},{o}" for a, p, o in trace.tolist()]
    tr.write_text("\n".join(rows) + "\n")
    return t, c, tr


def _exhaustive(trace, table, cal, opts, widest, k_cap, seeds, objective="energy"):
    """Every depth vector over widths 1..widest (the last one covering wider): the best mean."""
    field = "j_per_token" if objective == "energy" else "tokens_per_s"
    best = None
    for depths in itertools.product(range(k_cap + 1), repeat=widest):
        pol = policy_text(ranges_from_depths(depths))
        value = np.mean([evaluate(trace, table, cal, pol, opts, s, SLO())[field] for s in seeds])
        value = value if objective == "energy" else -value
        if best is None or value < best[0]:
            best = (value, pol)
    return best


def bent_table(c, ms):
    """Widths 1-8, depths 0-2, whose verify energy grows with depth x width squared: deep drafts
    pay at width 1, not at width 4, so the best depth depends on the width."""
    from specsim.table import Cell, CostTable, TableKey

    cells = [Cell(n, k, 10.0 + 0.5 * n + ms * k * n, 2.0 + 0.3 * n + c * k * n * n, 0.8 * k, 0.1 * k)
             for n in (1, 2, 4, 8) for k in range(3)]
    return CostTable.from_cells(TableKey(1, "test", "test", {}), cells)


@pytest.mark.parametrize("c, ms, rate, objective", [
    (0.1, 1.0, 20.0, "energy"), (0.1, 1.0, 60.0, "energy"), (0.3, 4.0, 20.0, "energy"),
    (0.3, 1.0, 120.0, "energy"), (0.1, 4.0, 20.0, "throughput"), (0.1, 4.0, 120.0, "throughput"),
])
def test_tune_finds_the_exhaustive_optimum(c, ms, rate, objective):
    from specsim.calibration import AcceptanceCalibration, DrafterKey
    from specsim.traces import synthetic_trace

    key = DrafterKey(weights_sha256="test", vocab=100, quantization="bf16", context=True)
    cal = AcceptanceCalibration(key, [-2.0, -0.5, -0.1, 0.0], [0.1, 0.45, 0.8, 0.95], [0.75, 0.6, 0.55])
    table, trace = bent_table(c, ms), synthetic_trace(150, rate, seed=5).requests
    opts = ServerOptions(max_num_seqs=8, prefill_ms_per_token=0.02, prefill_j_per_token=0.015, idle_w=30.0)
    # One seed: "better on the mean" and "better on every seed" are then the same test. The search
    # without the time windows' noise check, which may rightly stop short of the optimum.
    res = tune_on(trace, table, cal, allow_overload=True, objective=objective, widths_max=4, seeds=1, holdout=0, options=opts,
               executor="serial", min_gain=0.0, noise_windows=None)
    value, pol = _exhaustive(trace, table, cal, opts, 4, 2, [0], objective)
    # The optimum is none of the starts: the moves had to find it.
    assert pol not in {p for p, _ in res.starts.values()}
    found = res.train.mean if objective == "energy" else -res.train.mean
    assert found == value, (res.policy, pol)


def test_moves_stay_in_range_and_cover_depths_boundaries_and_splits():
    d = np.array([3, 3, 3, 1, 1, 1, 1, 1, 0, 0], dtype=np.int64)
    grid = grid_widths(10, [1, 2, 4, 8])
    moves = _moves(d, 10, 4, grid, busy=[5])
    assert all(m.shape == d.shape and m.min() >= 0 and m.max() <= 4 for m in moves)
    runs = {tuple(_runs(m)) for m in moves}
    assert ((1, 3, 4), (4, 8, 1), (9, 10, 0)) in runs          # a range's depth
    assert ((1, 2, 3), (3, 8, 1), (9, 10, 0)) in runs          # a boundary moved down
    assert ((1, 4, 3), (5, 8, 1), (9, 10, 0)) in runs          # a boundary moved up
    assert ((1, 3, 3), (4, 4, 1), (5, 8, 2), (9, 10, 0)) in runs  # a split at a busy width
    assert ((1, 1, 3), (2, 2, 2), (3, 3, 3), (4, 8, 1), (9, 10, 0)) in runs  # one cell, inside a range
    assert all(not np.array_equal(m, d) for m in moves)


def test_grid_widths():
    g = grid_widths(256, [1, 2, 4, 8, 16, 32, 64, 128, 256])
    assert g[0] == 2 and g[-1] <= 256 and np.all(np.diff(g) > 0)
    assert {2, 3, 4, 5, 6, 7, 8, 9, 17, 33, 65, 129} <= set(g.tolist())
    assert grid_widths(1, [1]).shape == (0,)


@pytest.mark.slow
def test_tuned_schedule_beats_every_builtin_policy_on_the_demo_holdout():
    from specsim.demo_inputs import demo_calibration, demo_table
    from specsim.demo import demo_server, demo_trace

    opts = ServerOptions(**demo_server())
    res = tune_on(demo_trace(), demo_table(), demo_calibration(), options=opts, seeds=2, executor="threads")
    tuned = res.holdout[0]
    assert tuned.policy == res.policy
    builtins = [s for s in res.holdout[1:]]
    assert {s.policy for s in builtins} >= {"fixed:0", "fixed:3", "goodput", "propose", "sequence"}
    for s in builtins:
        # Held-out window, seeds the search never saw; lower J/token is better.
        assert tuned.mean <= s.mean, (s.policy, tuned.mean, s.mean)
    assert res.within_noise is False and res.gain > 0
    assert res.train.mean <= min(score.mean for _, score in res.starts.values())


def test_slo_targets_rule_out_schedules_that_miss_them(small):
    trace, table, cal = small
    opts = ServerOptions(max_num_seqs=8, prefill_ms_per_token=0.02, prefill_j_per_token=0.015)
    free = tune_on(trace, table, cal, allow_overload=True, widths_max=4, seeds=1, holdout=0, options=opts, executor="threads")
    tpot = min(s.tpot_p99_s for _, s in free.starts.values())
    tight = tune_on(trace, table, cal, allow_overload=True, widths_max=4, seeds=1, holdout=0, options=opts, executor="threads",
                 slo=SLO(tpot_s=tpot * 1.0001, attainment=0.95))
    # The start with the lowest p99 TPOT meets the target for >= 99% of requests, so one exists.
    assert tight.train.mean_attainment >= 0.95
    assert tight.train.mean >= free.train.mean  # a constraint never lowers the energy
    assert tight.holdout[0].attainment is not None and free.holdout[0].attainment is None


def test_result_writes_a_schedule_file_that_reads_back(small, tmp_path):
    trace, table, cal = small
    res = tune_on(trace, table, cal, allow_overload=True, widths_max=4, seeds=2, holdout=0.3, options=ServerOptions(max_num_seqs=8),
               executor="threads", names={"trace": "t.csv"})
    f = tmp_path / "s.toml"
    f.write_text(res.to_toml())
    doc = load_schedule(f)
    assert doc.ranges == res.ranges and doc.objective == "energy" and doc.max_num_seqs == 8
    assert doc.sections["inputs"]["trace"] == "t.csv"
    assert doc.sections["inputs"]["trace_sha256"].startswith("sha256:")
    assert doc.sections["result"]["best_fixed"] == res.best_fixed
    assert res.evaluations > 0 and res.executor == "threads"
    assert res.verdict().startswith("on the held-out window")
    if max(k for *_, k in res.ranges):
        cfg = json.loads(res.export("vllm").text)
        if len(res.ranges) > 1:
            assert cfg["num_speculative_tokens_per_batch_size"][0][0] == 1
        else:  # a constant schedule is the static setting
            assert "num_speculative_tokens_per_batch_size" not in cfg


def test_executors_agree(small):
    trace, table, cal = small
    kw = dict(widths_max=4, seeds=1, holdout=0.25, options=ServerOptions(max_num_seqs=8), max_rounds=2)
    serial = tune_on(trace, table, cal, allow_overload=True, executor="serial", **kw)
    threads = tune_on(trace, table, cal, allow_overload=True, executor="threads", workers=2, **kw)
    assert serial.policy == threads.policy
    assert serial.holdout == threads.holdout


def test_dask_local_cluster_agrees_with_threads(small, port_8787_taken):
    """Also while another program holds Dask's default dashboard port: the local cluster binds no
    fixed port, and no warning (an error under the suite's filterwarnings) is raised."""
    pytest.importorskip("dask.distributed")
    trace, table, cal = small
    kw = dict(widths_max=4, seeds=1, holdout=0.25, options=ServerOptions(max_num_seqs=8), max_rounds=1)
    dask = tune_on(trace, table, cal, allow_overload=True, executor="dask", workers=2, **kw)
    threads = tune_on(trace, table, cal, allow_overload=True, executor="threads", **kw)
    assert dask.executor == "dask"
    assert dask.policy == threads.policy and dask.holdout == threads.holdout


@pytest.mark.parametrize("kw, match", [
    ({"objective": "latency"}, "objective"),
    ({"seeds": 0}, "seeds"),
    ({"seeds": 65}, r"seeds \(--seeds\) must be a whole number of draft-outcome seeds in 1..64"),
    ({"seeds": 99_999_999_999}, "in 1..64"),
    ({"holdout": 1e-300}, "needs at least 10"),
    ({"holdout": 1.0}, "holdout"),
    ({"slo": {"attainment": 0.9}}, "needs an SLO"),
    ({"slo": {"tpot_s": 0.1, "attainment": 1.5}}, "attainment"),
    ({"slo": (0.1, 0.2)}, "must be an SLO"),
    ({"executor": "gpu"}, "executor"),
    ({"min_gain": -1}, "min_gain"),
    ({"compare": ["fixed:x"]}, "depth K"),
    ({"scheduler": "not an address"}, "not a Dask scheduler address"),
    ({"scheduler": "tcp://127.0.0.1:8786", "executor": "threads"}, "one or the other"),
    ({"workers": 0}, "workers 0 is outside 1..64"),
    ({"workers": 100_000, "executor": "dask"}, "outside 1..64"),
    ({"widths_max": 0}, "widths_max must be a whole number >= 1"),
    ({"options": ServerOptions(max_num_seqs=8, seed=(1 << 64) - 2)}, "64 bits"),
])
def test_tune_refuses_bad_settings(small, kw, match):
    trace, table, cal = small
    with pytest.raises(SpecsimError if "compare" not in kw else PolicyError, match=match):
        if isinstance(kw.get("slo"), dict):
            kw = {**kw, "slo": SLO(**kw["slo"])}
        tune_on(trace, table, cal, allow_overload=True, **({"executor": "serial", "options": ServerOptions(max_num_seqs=8)} | kw))


def test_tune_refuses_a_window_with_no_requests(small):
    trace, table, cal = small
    with pytest.raises(ScheduleError, match="leaves 0 requests to train on and 1 held out"):
        tune_on(trace[:1], table, cal, holdout=0.5, executor="serial")


def test_a_window_too_small_at_the_suggested_holdout_does_not_suggest_it_again(small):
    trace, table, cal = small
    with pytest.raises(ScheduleError) as refused:
        tune_on(trace[:1], table, cal, holdout=0.25, executor="serial")
    assert "holdout 0.25 leaves" in str(refused.value) and "nearer 0.25" not in str(refused.value)
    with pytest.raises(ScheduleError, match="use a holdout nearer 0.25, a longer trace"):
        tune_on(trace[:1], table, cal, holdout=0.5, executor="serial")


def test_a_holdout_near_1_is_shown_as_given_with_one_request_singular(small):
    trace, table, cal = small
    with pytest.raises(ScheduleError, match=r"holdout 0\.9999999 leaves 1 request to train on and 159 held out"):
        tune_on(trace, table, cal, allow_overload=True, holdout=0.9999999, executor="serial")


def test_cli_tune_refuses_a_seed_count_it_could_not_run_before_reading_anything(tmp_path, capsys):
    from specsim.cli import main

    assert main(["tune", "--trace", str(tmp_path / "missing.csv"), "--table", "t.toml", "--calibration", "c.toml",
                 "--seeds", "99999999999", "-o", str(tmp_path / "s.toml")]) == 2
    assert "--seeds 99999999999: give a number of draft-outcome seeds in 1..64" in capsys.readouterr().err
    assert not (tmp_path / "s.toml").exists()


def test_tune_without_a_holdout_says_the_comparison_reran_the_whole_trace(small):
    """With holdout 0 nothing is held out: the final comparison reruns the training trace on
    unseen seeds, and the report and verdict say so instead of naming a held-out window."""
    from specsim.cli.tune import report

    trace, table, cal = small
    res = tune_on(trace, table, cal, allow_overload=True, widths_max=4, seeds=2, holdout=0, options=ServerOptions(max_num_seqs=8),
               executor="serial", max_rounds=1)
    assert res.compared_on == "the whole trace (no holdout)"
    text = report(res)
    assert "held-out" not in text and "training window did not carry over" not in text
    assert "whole trace (no holdout), 2 unseen seeds" in text and res.verdict().startswith("on the whole trace")


def test_cli_tune_writes_and_compares(small, tmp_path, capsys):
    trace, table, cal = small
    t, c, tr = _write_inputs(tmp_path, trace, table, cal)
    current = tmp_path / "current.json"
    current.write_text('{"method": "eagle", "num_speculative_tokens": 2}')
    out = tmp_path / "s.toml"
    argv = ["tune", "--allow-overload", "--trace", str(tr), "--table", str(t), "--calibration", str(c), "--max-batch", "8",
            "--widths-max", "4", "--seeds", "1", "--threads", "--quiet", "--compare", f"vllm:{current}", "-o", str(out)]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    for name in ("fixed:0", "fixed:2", "goodput", "propose", "sequence", "tuned", "best fixed", "held-out"):
        assert name in printed
    # The held-out table: no column repeats another, none is empty throughout (no SLO given, so no SLO column).
    table = printed[printed.index("held-out window"):].splitlines()[1:]
    header = table[0].split()
    assert header == ["policy", "J/token", "+-", "tok/s", "TPOT", "p99", "ms", "row"]
    cells = [line.split() for line in table[2:] if line.strip() and not line.startswith(("tuned", "the "))]
    assert all(len(c) >= 5 for c in cells)
    assert f"vllm:{current}" in printed
    doc = load_schedule(out)
    assert doc.sections["inputs"]["trace"] == "trace.csv"
    assert main(argv[:-1] + [str(t)]) == 2
    assert "destroy the input" in capsys.readouterr().err


def test_progress_line_says_each_round(small, capsys):
    trace, table, cal = small
    tune_on(trace, table, cal, allow_overload=True, widths_max=4, seeds=1, options=ServerOptions(max_num_seqs=8), executor="threads",
         progress=True)
    err = capsys.readouterr().err.splitlines()
    assert err[0].startswith("tune: ") and "best start" in err[0]
    assert any("round 1" in line for line in err)


def test_without_dask_auto_runs_threads_and_dask_is_refused(monkeypatch):
    import builtins

    from specsim._executor import Executor, ExecutorChoice
    from specsim.studies.tune import _executor

    real = builtins.__import__

    def no_dask(name, *args, **kwargs):
        if name.startswith("dask"):
            raise ImportError("no dask here")
        return real(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_dask)
    assert _executor("auto")[0].kind == "threads"
    assert _executor("serial")[0].kind == "serial"
    with pytest.raises(ScheduleError, match="Dask is not installed"):
        _executor("dask")
    with pytest.raises(ScheduleError, match="Dask is not installed"):
        _executor(ExecutorChoice("auto", scheduler="tcp://127.0.0.1:8786"))
    # The caller's running executor is used as it is, and left to the caller to close.
    mine = Executor("serial")
    assert _executor(mine) == (mine, False)


def test_the_file_serves_the_best_fixed_depth_unless_the_tuned_schedule_earned_its_place():
    """A tuned schedule that did not beat the best fixed depth on the held-out window by more
    than the noise is recorded, but the file and the exports carry the fixed depth."""
    from dataclasses import replace

    from specsim.policy.schedule import policy_text
    from specsim.studies.tune_result import Score, TuneResult

    def score(policy, mean):
        return Score(policy=policy, values=(mean, mean), attainment=None, j_per_token=mean, tokens_per_s=100.0,
                     tpot_p99_s=0.05)

    tuned = ((1, 4, 3), (5, None, 1))
    base = TuneResult(ranges=tuned, objective="energy", train=score("schedule:1-4=3,5-=1", 1.0),
                      holdout=(score("schedule:1-4=3,5-=1", 0.99), score("fixed:2", 1.0)), best_fixed="fixed:2",
                      gain=0.01, gain_noise=0.001, starts={}, evaluations=1, seconds=1.0, executor="serial")
    assert base.serves_tuned and base.recommended == tuned
    for gain, noise in ((0.0005, 0.001), (-0.01, 0.001)):
        worse = replace(base, gain=gain, gain_noise=noise)
        assert not worse.serves_tuned
        assert worse.recommended == ((1, None, 2),)
        doc = load_schedule_text(worse.to_toml())
        assert policy_text(doc.ranges) == "schedule:1-=2"
        assert doc.sections["result"]["tuned"] == "schedule:1-4=3,5-=1"
        assert doc.sections["result"]["served"] == "best fixed"
    assert load_schedule_text(base.to_toml()).sections["result"]["served"] == "tuned"


def load_schedule_text(text):
    import tempfile
    from pathlib import Path

    from specsim.studies.schedule_file import load_schedule

    with tempfile.TemporaryDirectory() as d:
        f = Path(d) / "s.toml"
        f.write_text(text)
        return load_schedule(f)


def test_cli_tune_reports_the_best_depth_by_context_on_a_table_with_an_axis(small, tmp_path, capsys):
    """Per width band, the planner's depth at each measured context: deeper drafts where verify
    steps grow dear with context (here: verify cost x 1 at context 128, x 6 at 8192)."""
    from specsim.plan.planner import Planner
    from specsim.table import CostTable

    trace, table, cal = small
    axis = CostTable.from_contexts({128: table, 8192: CostTable(table.key, table.widths, table.costs * [6, 6, 1, 1])})
    t, c, tr = tmp_path / "t.toml", tmp_path / "c.toml", tmp_path / "trace.csv"
    t.write_text(axis.to_text())
    c.write_text(cal.render())
    rows = ["arrival_s,prompt_tokens,output_tokens"] + [f"{a!r},{p},{o}" for a, p, o in trace.tolist()]
    tr.write_text("\n".join(rows) + "\n")
    argv = ["tune", "--allow-overload", "--trace", str(tr), "--table", str(t), "--calibration", str(c), "--max-batch", "8",
            "--widths-max", "4", "--seeds", "1", "--threads", "--quiet", "-o", str(tmp_path / "s.toml")]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    assert "best depth by context" in printed and "ctx 128" in printed and "ctx 8192" in printed
    block = printed[printed.index("best depth by context"):].splitlines()[3:]
    planner = Planner(axis, cal)
    for line in block:
        cells = line.split()
        mid = int(cells[1])
        assert [int(x) for x in cells[3:5]] == [planner.propose(mid, context=128), planner.propose(mid, context=8192)]


def test_an_slo_no_candidate_meets_exits_2_writes_nothing_and_names_the_best(small, tmp_path, capsys):
    """A TPOT target below any step's time: nothing can meet it, so there is no schedule to serve."""
    trace, table, cal = small
    t, c, tr = _write_inputs(tmp_path, trace, table, cal)
    out = tmp_path / "s.toml"
    argv = ["tune", "--allow-overload", "--trace", str(tr), "--table", str(t), "--calibration", str(c), "--max-batch", "8",
            "--widths-max", "4", "--seeds", "1", "--threads", "--quiet", "--slo-tpot-s", "0.0001",
            "--attainment", "0.99", "-o", str(out)]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "no candidate meets the SLO for 99.00% of requests" in err and "reached 0.00%" in err
    assert "Traceback" not in err and not out.exists()
    with pytest.raises(ScheduleError, match="best of the .* tried reached"):
        tune_on(trace, table, cal, allow_overload=True, widths_max=4, seeds=1, holdout=0.25, options=ServerOptions(max_num_seqs=8),
             executor="threads", slo=SLO(tpot_s=0.0001, attainment=0.99))


# -- moves against the noise over seeds and time windows ------------------------------------------------

def test_reversals_count_changes_of_direction_across_widths():
    from specsim.studies.tune_search import reversals

    assert reversals([1, 1, 1, 1]) == 0 and reversals([0, 1, 2, 2]) == 0 and reversals([3, 3, 1, 0]) == 0
    assert reversals([1, 2, 1, 1]) == 1 and reversals([2, 1, 1, 2]) == 1 and reversals([0, 2, 0, 2]) == 2


class _FakePool:
    """Stands in for the evaluation pool: ``value(part, policy, seed)`` is the J/token."""

    def __init__(self, value):
        self.value = value
        self.seen = []

    def run(self, tasks, tick=None):
        self.seen += [pol for _, pol, _ in tasks]
        return [{"j_per_token": self.value(part, str(pol), seed), "tokens_per_s": 1.0, "attainment": None,
                 "tpot_p99_s": 0.01, "max_width": 4, "width_quantiles": [1, 2, 3, 4]} for part, pol, seed in tasks]


def _descend_with(window_gains):
    """A search over widths 1-4, depths 0-2 from ``fixed:1`` where one move only wins: the zig-zag
    ``1=1,2=2,3-=1`` (up at width 2, down again at 3), 1% cheaper on the whole training window
    under both seeds; ``window_gains[w][s]`` is its gain on window ``w`` under seed ``s``."""
    from specsim.studies.tune import _Line
    from specsim.studies.tune_search import _Search

    flat = policy_text(ranges_from_depths(np.full(4, 1)))
    zigzag = policy_text(ranges_from_depths(np.array([1, 2, 1, 1])))

    def value(part, pol, seed):
        if pol == flat:
            return 1.0
        if pol != zigzag:
            return 2.0
        if part == "train":
            return 0.99
        return 1.0 - window_gains[int(part.split("#")[1])][seed]

    search = _Search(_FakePool(value), _Line(False), "energy", None, 0, 2, 1e-4, len(window_gains))
    starts = {"fixed:1": (np.full(4, 1), search.add(schedule_policy(np.full(4, 1))))}
    search.run([("train", flat, s) for s in search.train_seeds])
    winner = search.descend(starts, SimpleNamespace(widths=np.array([1, 2, 4])), 2, 4, 10)
    return winner, search.rejected, zigzag


def test_the_search_hands_its_candidates_over_as_policy_values():
    """Every candidate reaches the evaluations as a Policy built from its depths, never as text
    to parse again; its label is that policy's text."""
    from specsim.policy.policy import Policy
    from specsim.studies.tune import _Line
    from specsim.studies.tune_search import _Search

    pool = _FakePool(lambda part, pol, seed: 1.0 if pol == "schedule:1-=1" else 2.0)
    search = _Search(pool, _Line(False), "energy", None, 0, 2, 1e-4)
    flat = search.add(schedule_policy(np.full(4, 1)))
    search.run([("train", flat, s) for s in search.train_seeds])
    search.descend({"fixed:1": (np.full(4, 1), flat)}, SimpleNamespace(widths=np.array([1, 2, 4])), 2, 4, 3)
    assert len(pool.seen) > 1 and all(type(p) is Policy and p.kind == "schedule" for p in pool.seen)
    assert all(search.values[str(p)] == p for p in pool.seen)


def test_a_zigzag_move_that_wins_by_less_than_the_noise_is_rejected():
    # Mean gain 0.01 per (seed, window) pair, but +-0.05 from pair to pair: inside the noise.
    gains = [[0.06, -0.04], [-0.04, 0.06], [0.06, -0.04], [-0.04, 0.06]]
    winner, rejected, zigzag = _descend_with(gains)
    assert winner == policy_text(ranges_from_depths(np.full(4, 1)))
    assert len(rejected) == 1
    move = rejected[0]
    assert move["policy"] == zigzag and move["zigzag"] is True and move["pairs"] == 8 and move["round"] == 1
    assert move["gain"] == pytest.approx(0.01)
    sd = np.std(np.array(gains).ravel(), ddof=1)
    assert move["noise"] == pytest.approx(2.365 * sd / np.sqrt(8)) and move["noise"] > move["gain"]


def test_a_zigzag_move_that_clearly_wins_is_accepted():
    gains = [[0.0101, 0.0099], [0.0100, 0.0102], [0.0098, 0.0100], [0.0101, 0.0099]]
    winner, rejected, zigzag = _descend_with(gains)
    assert winner == zigzag and rejected == []


def test_a_move_must_also_clear_min_gain_over_the_pairs():
    # Every pair gains the same 0.00005 (no noise), below min_gain 1e-4 of the incumbent's 1.0.
    winner, rejected, _ = _descend_with([[0.00005, 0.00005]] * 4)
    assert winner == policy_text(ranges_from_depths(np.full(4, 1))) and len(rejected) == 1


@pytest.fixture(scope="module")
def bent():
    from specsim.demo_inputs import demo_calibration
    from specsim.traces import synthetic_trace

    return synthetic_trace(800, 20.0, seed=3).requests, bent_table(0.1, 1.0), demo_calibration()


def test_noise_windows_default_to_four_and_off_is_the_search_without_them(bent):
    """The default checks moves over AUTO_WINDOWS time windows, exactly as noise_windows=4 does;
    None turns the check off: no window-long runs, nothing about windows in the file."""
    from specsim.studies.tune import AUTO_WINDOWS

    trace, table, cal = bent
    kw = dict(widths_max=8, seeds=2, options=ServerOptions(max_num_seqs=8), executor="serial")
    default = tune_on(trace, table, cal, allow_overload=True, **kw)
    four = tune_on(trace, table, cal, allow_overload=True, noise_windows=AUTO_WINDOWS, **kw)
    assert AUTO_WINDOWS == 4 and default.noise_windows == 4
    for name in ("ranges", "train", "holdout", "best_fixed", "gain", "gain_noise", "evaluations", "starts",
                 "rejected_moves"):
        assert getattr(default, name) == getattr(four, name), name
    off = tune_on(trace, table, cal, allow_overload=True, noise_windows=None, **kw)
    assert off.noise_windows == 0 and off.within_noise_moves == 0 and off.rejected_moves == ()
    assert off.evaluations < default.evaluations
    toml = off.to_toml()
    assert "noise_windows" not in toml and "within_noise_moves" not in toml


def test_auto_noise_windows_fit_the_training_part(small):
    """On a short training part ``auto`` cuts as many windows as hold 10 requests each, up to four,
    and none where fewer than two fit."""
    from specsim.studies.tune import _noise_windows

    trace, _, _ = small
    assert len(_noise_windows("auto", trace[:113])) == 4
    assert len(_noise_windows("auto", trace[:35])) == 3
    assert len(_noise_windows("auto", trace[:20])) == 2
    assert _noise_windows("auto", trace[:19]) == {} == _noise_windows(None, trace)


def test_noise_windows_reject_moves_inside_the_noise_and_the_file_says_so(bent):
    trace, table, cal = bent
    res = tune_on(trace, table, cal, allow_overload=True, widths_max=8, seeds=2, options=ServerOptions(max_num_seqs=8), executor="serial",
               noise_windows=4)
    assert res.noise_windows == 4 and res.within_noise_moves == len(res.rejected_moves) >= 1
    for m in res.rejected_moves:
        # Within the noise, or below min_gain of the incumbent's J/token (about 0.8 here).
        assert m["pairs"] == 8 and (m["gain"] <= m["noise"] or m["gain"] <= 1e-4 * 0.9)
    doc = load_schedule_text(res.to_toml())
    assert doc.sections["inputs"]["noise_windows"] == 4
    assert doc.sections["result"]["noise_windows"] == 4
    assert doc.sections["result"]["within_noise_moves"] == res.within_noise_moves
    assert doc.sections["result"]["within_noise_zigzags"] == sum(m["zigzag"] for m in res.rejected_moves)


@pytest.mark.parametrize("kw, match", [
    ({"noise_windows": 1}, r"noise_windows \(--noise-windows\) must be a whole number in 2\.\.64, 'auto' or None \(off\), "
                           "got 1"),
    ({"noise_windows": "four"}, "got 'four'"),
    ({"noise_windows": 2.0}, "whole number"),
    ({"noise_windows": 65}, "in 2..64"),
    ({"noise_windows": 12}, "the training part holds 113 requests and each window needs at least 10, so at most 11"),
])
def test_noise_windows_refuse_bad_settings(small, kw, match):
    trace, table, cal = small
    with pytest.raises(ScheduleError, match=match):
        tune_on(trace, table, cal, allow_overload=True, executor="serial", options=ServerOptions(max_num_seqs=8), **kw)


def test_cli_noise_windows(bent, tmp_path, capsys):
    trace, table, cal = bent
    t, c, tr = _write_inputs(tmp_path, trace, table, cal)
    out = tmp_path / "s.toml"
    argv = ["tune", "--allow-overload", "--trace", str(tr), "--table", str(t), "--calibration", str(c), "--max-batch", "8",
            "--seeds", "2", "--serial", "--quiet", "-o", str(out)]
    assert main(argv + ["--noise-windows", "4"]) == 0
    printed = capsys.readouterr().out
    assert "moves checked over 4 time windows x 2 seeds:" in printed and "within-noise move(s) rejected" in printed
    assert load_schedule_text(out.read_text()).sections["inputs"]["noise_windows"] == 4
    out.unlink()
    assert main(argv + ["--noise-windows", "off"]) == 0
    assert "time windows" not in capsys.readouterr().out
    assert "noise_windows" not in load_schedule_text(out.read_text()).sections["inputs"]
    out.unlink()
    for bad, message in (("1", "argument --noise-windows: '1': give a number of time windows in 2..64"),
                         ("x", "argument --noise-windows: 'x': give a number of time windows in 2..64 (a spread "
                               "needs two), auto or off"),
                         ("500", "'500': give a number of time windows in 2..64"), ("\uff14", "in 2..64"),
                         ("9" * 5000, "…(5,002 characters): give a number"), ("59", "so at most 58 fit")):
        try:
            code = main(argv + ["--noise-windows", bad])
        except SystemExit as e:  # refused by the parser
            code = e.code
        assert code == 2
        err = capsys.readouterr().err
        assert message in err and "Traceback" not in err and not out.exists()


# -- an overloaded server -------------------------------------------------------------------------------

def test_tune_refuses_to_recommend_for_an_overloaded_server_and_names_the_rate_it_serves(small, tmp_path, capsys):
    """The small fixture offers 60 requests/s to a server of 8 sequences: queueing grows through
    the run whatever the depth, as simulate says; tune refuses unless told to go on."""
    from specsim.cli.tune import report
    from specsim.sim.metrics import overload
    from specsim.sim import simulate
    from specsim.studies.tune import offered_rate

    trace, table, cal = small
    kw = dict(widths_max=4, seeds=1, holdout=0.25, options=ServerOptions(max_num_seqs=8), executor="serial",
              max_rounds=1)
    with pytest.raises(ScheduleError, match=r"the server is overloaded.*kept up with about \d+% of the offered "
                                            r"[\d.]+ requests/s, about [\d.]+ requests/s.*--allow-overload"):
        tune_on(trace, table, cal, **kw)
    res = tune_on(trace, table, cal, allow_overload=True, **kw)
    o = res.overloaded
    assert o["policy"] == res.policy and o["seeds"] == "1 of 1"
    train = trace[trace["arrival_s"] < trace["arrival_s"][0] + 0.75 * (trace["arrival_s"][-1] - trace["arrival_s"][0])]
    assert o["offered_rate"] == pytest.approx(offered_rate(train))
    # The served share is simulate's own overload estimate for that schedule on the training part.
    sim = simulate(train, table, cal, res.policy, options=ServerOptions(max_num_seqs=8, seed=0))
    assert o["served_fraction"] == pytest.approx(overload(sim)["served_fraction"])
    assert o["served_rate"] == pytest.approx(o["offered_rate"] * o["served_fraction"]) and o["served_fraction"] < 0.5
    assert "overloaded: " in report(res) and "--allow-overload" in report(res)
    assert "overloaded = true" in res.to_toml()

    t, c, tr = _write_inputs(tmp_path, trace, table, cal)
    out = tmp_path / "s.toml"
    argv = ["tune", "--trace", str(tr), "--table", str(t), "--calibration", str(c), "--max-batch", "8",
            "--widths-max", "4", "--seeds", "1", "--serial", "--quiet", "--max-rounds", "1", "-o", str(out)]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "the server is overloaded" in err and "Traceback" not in err and not out.exists()


def test_tune_on_a_server_that_keeps_up_says_nothing_of_overload_and_compares_the_loads(small):
    from specsim.cli.tune import report
    from specsim.traces import synthetic_trace

    _, table, cal = small
    trace = synthetic_trace(160, 2.0, seed=5).requests
    res = tune_on(trace, table, cal, widths_max=4, seeds=1, holdout=0.25, options=ServerOptions(max_num_seqs=8),
               executor="serial", max_rounds=1)
    assert res.overloaded is None and "overloaded" not in report(res) and "overloaded" not in res.to_toml()
    t = trace["arrival_s"]
    cut = t[0] + 0.75 * (t[-1] - t[0])
    train, held = t[t < cut], t[t >= cut]
    train_rate, held_rate = train.size / (train[-1] - train[0]), held.size / (held[-1] - held[0])
    assert res.inputs["train_rate"] == pytest.approx(train_rate) and res.inputs["holdout_rate"] == pytest.approx(held_rate)
    line = next(x for x in report(res).splitlines() if x.startswith("load: "))
    assert f"({held_rate / train_rate:.2f}x" in line and f"{held_rate:.3g} requests/s held out" in line
    none = tune_on(trace, table, cal, widths_max=4, seeds=1, holdout=0, options=ServerOptions(max_num_seqs=8),
                executor="serial", max_rounds=1)
    assert "load: the comparison reruns the training part's" in report(none)


def test_a_recommendation_at_the_table_deepest_depth_says_measure_deeper_and_names_extrapolation():
    from dataclasses import replace

    from specsim.cli.tune import report
    from specsim.plan import TABLE_ENDS
    from specsim.studies.tune_result import Score, TuneResult

    def score(policy, mean):
        return Score(policy=policy, values=(mean, mean), attainment=None, j_per_token=mean, tokens_per_s=100.0,
                     tpot_p99_s=0.05)

    base = TuneResult(ranges=((1, 4, 3), (5, None, 1)), objective="energy", train=score("schedule:1-4=3,5-=1", 1.0),
                      holdout=(score("schedule:1-4=3,5-=1", 0.99), score("fixed:2", 1.0)), best_fixed="fixed:2",
                      gain=0.01, gain_noise=0.001, starts={}, evaluations=1, seconds=1.0, executor="serial",
                      inputs={"table_max_k": 3, "fitted_positions": 2, "holdout": 0.25})
    assert base.deepest == 3 and base.reach()["table_ends"] and base.reach()["extrapolated"]
    text = report(base)
    assert TABLE_ENDS in text and "deepest depth (3) is extrapolated" in text
    result = load_schedule_text(base.to_toml()).sections["result"]
    assert result["table_ends"] is True and result["extrapolated"] is True
    # Served the best fixed depth (2): inside the table and the fitted positions, so neither note.
    fixed = replace(base, gain=-0.01)
    assert fixed.deepest == 2 and fixed.reach_lines() == [] and TABLE_ENDS not in report(fixed)
    result = load_schedule_text(fixed.to_toml()).sections["result"]
    assert result["table_ends"] is False and result["extrapolated"] is False


def test_tune_records_the_table_deepest_depth_and_the_fitted_positions(small):
    trace, table, cal = small
    res = tune_on(trace, table, cal, allow_overload=True, widths_max=4, seeds=1, holdout=0, executor="serial",
               options=ServerOptions(max_num_seqs=8), max_rounds=1)
    assert res.inputs["table_max_k"] == table.max_k and res.inputs["fitted_positions"] == cal.priors.shape[0]
    assert res.reach()["table_ends"] == (res.deepest == table.max_k)


# -- tune --trees ---------------------------------------------------------------------------------

TREE_OPTS = ServerOptions(max_num_seqs=8)


@pytest.fixture(scope="module")
def treed():
    """A 4-width, depth-0..4 modelled table, the demo's tree calibration, a trace, and tune with and
    without ``trees=True`` on them (serial, two seeds)."""
    from specsim.demo_inputs import DEMO_DRAFTER, DEMO_GPU, DEMO_MODEL, demo_tree_calibration
    from specsim.costmodel.roofline import model_table
    from specsim.traces import synthetic_trace

    table = model_table(DEMO_GPU, DEMO_MODEL, DEMO_DRAFTER, widths=(1, 2, 4, 8), max_k=4)
    trace = synthetic_trace(160, 20.0, seed=5).requests
    cal = demo_tree_calibration()
    kw = dict(seeds=2, executor="serial", options=TREE_OPTS, allow_overload=True)
    return trace, table, cal, tune_on(trace, table, cal, trees=True, **kw), tune_on(trace, table, cal, **kw)


def _mean_j_per_token(requests, table, cal, policy, seeds):
    """Per seed, J/token of a plain ``simulate`` run of ``policy`` on ``requests``."""
    from dataclasses import replace

    from specsim.sim.engine import simulate

    out = []
    for s in seeds:
        res = simulate(requests, table, cal, policy, options=replace(TREE_OPTS, seed=s))
        out.append(float(res.energy_j) / int(res.output_tokens.sum()))
    return np.array(out)


@pytest.mark.kernels
def test_trees_are_weighed_only_with_trees_and_a_tree_table(treed, small):
    trace, table, cal, with_trees, without = treed
    assert without.trees is None
    assert not any(s.policy.startswith("tree:") for s in without.holdout)
    assert "[trees]" not in without.to_toml() and not without.tree_lines()
    # tree:2 .. tree:k_max (4 here): every size the server drafts
    assert sorted(with_trees.trees["candidates"]) == ["tree:2", "tree:3", "tree:4"]
    trace_s, table_s, chain_cal = small
    with pytest.raises(ScheduleError, match=r"trees \(--trees\): this calibration has no \[tree\] table"):
        tune_on(trace_s, table_s, chain_cal, trees=True, seeds=1, executor="serial")
    one_deep = ServerOptions(max_num_seqs=8, k_max=1)
    with pytest.raises(ScheduleError, match=r"k_max = 1 .* no tree of 2 or more nodes fits"):
        tune_on(trace, table, cal, trees=True, seeds=1, executor="serial", options=one_deep)


@pytest.mark.kernels
def test_the_chain_part_of_tune_is_unchanged_by_trees(treed):
    _, _, _, with_trees, without = treed
    assert with_trees.ranges == without.ranges and with_trees.train == without.train
    assert with_trees.best_fixed == without.best_fixed and with_trees.gain == without.gain
    chains = {s.policy: s for s in with_trees.holdout}
    assert all(chains[s.policy] == s for s in without.holdout)


@pytest.mark.kernels
def test_the_best_static_tree_is_the_lowest_objective_on_the_training_window(treed):
    trace, table, cal, res, _ = treed
    t = res.trees
    assert t["best"] == min(t["candidates"], key=t["candidates"].get)
    cut = trace["arrival_s"][0] + 0.75 * (trace["arrival_s"][-1] - trace["arrival_s"][0])
    train = np.ascontiguousarray(trace[trace["arrival_s"] < cut])
    for pol, value in t["candidates"].items():
        assert value == pytest.approx(_mean_j_per_token(train, table, cal, pol, [0, 1]).mean(), rel=1e-12)


@pytest.mark.kernels
def test_tree_figures_equal_separate_simulate_runs_on_the_held_out_window(treed):
    trace, table, cal, res, _ = treed
    t = res.trees
    cut = trace["arrival_s"][0] + 0.75 * (trace["arrival_s"][-1] - trace["arrival_s"][0])
    held = np.ascontiguousarray(trace[trace["arrival_s"] >= cut])
    unseen = [2, 3]  # the search's seeds are 0 and 1
    auto, static, chain = (_mean_j_per_token(held, table, cal, p, unseen) for p in ("tree:auto", t["best"], t["chain"]))
    assert t["static_cost"] == pytest.approx((static - auto).mean(), rel=1e-9, abs=1e-15)
    noise = 2.0 * np.std(static - auto, ddof=1) / np.sqrt(2)
    assert t["static_cost_noise"] == pytest.approx(noise, rel=1e-9, abs=1e-15)
    assert t["gain"] == pytest.approx((chain - static).mean(), rel=1e-9, abs=1e-15)
    within = abs(t["gain"]) <= t["noise"] or t["gain"] == 0
    assert t["winner"] == ("tie" if within else ("tree" if t["gain"] > 0 else "chain"))


@pytest.mark.kernels
def test_cli_tune_trees_prints_the_winner_and_the_static_cost_and_writes_them(treed, tmp_path, capsys):
    trace, table, cal, _, _ = treed
    t, c, tr = _write_inputs(tmp_path, trace, table, cal)
    out = tmp_path / "s.toml"
    args = ["tune", "--trace", str(tr), "--table", str(t), "--calibration", str(c), "-o", str(out), "--serial",
            "--quiet", "--max-num-seqs", "8", "--allow-overload", "--trees"]
    assert main(args) == 0
    printed = capsys.readouterr().out
    assert "trees: the best static tree on the training window of 3 tried is tree:" in printed
    assert "static tree's cost: tree:auto (the tree changing with width, which no engine serves)" in printed
    written = load_schedule(out).sections["trees"]
    assert written["winner"] in ("chain", "tree", "tie") and written["best"].startswith("tree:")
    from specsim.demo_inputs import demo_calibration

    c.write_text(demo_calibration().render())
    out.unlink()
    assert main(args) == 2
    err = capsys.readouterr().err
    assert "no [tree] table" in err and "Traceback" not in err and not out.exists()


@pytest.mark.kernels
def test_schedule_export_tree_notes_the_static_tree_cost_from_a_tune_trees_file(treed, tmp_path, capsys):
    from specsim.demo_inputs import DEMO_DRAFTER, DEMO_GPU, DEMO_MODEL
    from specsim.costmodel.roofline import model_table

    _, _, cal, res, without = treed
    deep = model_table(DEMO_GPU, DEMO_MODEL, DEMO_DRAFTER, tp=1, context_tokens=1024, widths=(1, 2, 4, 8, 16), max_k=32)
    t, c, s, chains = tmp_path / "t.toml", tmp_path / "c.toml", tmp_path / "s.toml", tmp_path / "chains.toml"
    t.write_text(deep.to_text())
    c.write_text(cal.render())
    s.write_text(res.to_toml())
    chains.write_text(without.to_toml())
    out = tmp_path / "sg.json"
    assert main(["schedule", "export", str(s), "--planner", str(t), str(c), "--tree", "--to", "sglang",
                 "-o", str(out)]) == 0
    err = capsys.readouterr().err
    tr = res.trees
    assert (f"tree:auto (the tree changing with width) gains {tr['static_cost']:+.4g} +- {tr['static_cost_noise']:.3g} "
            f"J/token over the best static tree, {tr['best']} (simulated both ways") in err
    assert f"against the chain {tr['chain']}" in err and out.exists()
    out.unlink()
    assert main(["schedule", "export", str(chains), "--planner", str(t), str(c), "--tree", "--to", "sglang",
                 "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert "no [trees] table: tune with --trees" in err and "Traceback" not in err and not out.exists()
