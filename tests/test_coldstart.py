"""The first-use notice: said before compiling, once, and only when the kernels are not on disk."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from specsim import _coldstart
from specsim.costmodel.defaults import demo_table

ROOT = Path(__file__).resolve().parents[1]


def test_every_named_kernel_exists_where_the_notice_looks_for_it():
    for kernels, seconds in _coldstart.KERNELS.values():
        assert seconds > 0
        for module, name in kernels:
            assert _coldstart._first_line(_coldstart.PACKAGE / module, name) is not None, (module, name)


@pytest.mark.slow
def test_the_notice_comes_first_on_an_empty_cache_and_not_again(tmp_path):
    (tmp_path / "t.toml").write_text(demo_table().to_text())
    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path / "cache"),
               PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    argv = [sys.executable, "-m", "specsim", "table", "query", str(tmp_path / "t.toml"), "8", "2"]
    cold = subprocess.run(argv, capture_output=True, text=True, env=env)
    assert cold.returncode == 0, cold.stderr
    assert cold.stderr.startswith("specsim: compiling kernels on first use, once per install: ~")
    assert cold.stderr.count("compiling kernels") == 1
    warm = subprocess.run(argv, capture_output=True, text=True, env=env)
    assert warm.returncode == 0 and "compiling" not in warm.stderr and warm.stdout == cold.stdout
    # Help and unknown commands never announce anything.
    env["NUMBA_CACHE_DIR"] = str(tmp_path / "empty")
    assert _coldstart.compile_estimate(["table", "query", "--help"]) is None
    assert _coldstart.compile_estimate(["nonsense"]) is None
    assert _coldstart.compile_estimate([]) is None


def test_the_check_follows_numba_cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("NUMBA_CACHE_DIR", str(tmp_path))
    assert not _coldstart.is_cached("table/_kernels.py", "cell_into_nb")
    assert _coldstart.compile_estimate(["demo"]) == _coldstart.KERNELS["demo"][1]


def test_a_simulation_that_plans_per_sequence_is_estimated_longer(tmp_path, monkeypatch):
    monkeypatch.setenv("NUMBA_CACHE_DIR", str(tmp_path))
    plain = _coldstart.compile_estimate(["simulate", "--trace", "t.csv", "--policy", "propose"])
    assert plain == _coldstart.KERNELS["simulate"][1]
    for argv in (["simulate", "--policy", "sequence"], ["simulate", "--policy=sequence@0.2"],
                 ["simulate", "--policy", "fixed:2", "--policy", "sequence"]):
        assert _coldstart.compile_estimate(argv) == plain + _coldstart.SEQUENCE_S, argv


# Compiled more than once in one cold process, and rightly: NumPy's ndarray.view, for each of the
# (array, dtype) pairs the planner's workspace and sort view. Nothing else may be (a literal
# argument, int instead of np.int64, would compile its kernel once more).
KNOWN_TWINS = {"ol_compatible_view.<locals>.impl"}
_COMPILE_COUNTS = r'''
import collections, json, sys
from numba.core import event

counts = collections.Counter()

class Count(event.Listener):
    def on_start(self, ev):
        d = ev.data.get("dispatcher")
        counts[d.py_func.__qualname__ if d is not None else "?"] += 1

    def on_end(self, ev):
        pass

event.register("numba:compile", Count())
from specsim import Planner
from specsim.costmodel.defaults import demo_calibration, demo_table
from specsim.sim import simulate
from specsim.table import CostTable
from specsim.traces import read_trace

reqs = read_trace(sys.argv[1]).requests[:200]
table, cal = demo_table(), demo_calibration()
axis = CostTable.from_contexts({512: table, 4096: CostTable(table.key, table.widths, table.costs * 2.0)})
simulate(reqs, table, cal, "propose")  # the engine without the per-sequence planner
light = dict(counts)
for t in (table, axis):  # a table without an axis and one with: one compiled engine
    for policy in ("sequence", "propose"):  # from the first sequence run on, the engine with it
        simulate(reqs, t, cal, policy)
Planner(table, cal).propose(8)  # the planner's kernels, as the engine's memo compiled them
print(json.dumps([light, counts]))
'''


@pytest.mark.slow
def test_a_cold_process_compiles_each_kernel_once(tmp_path):
    """Planning and simulating, on tables with and without a context axis, in one process with
    an empty cache: every engine and planner kernel is compiled once (a read-only table array,
    a context axis or a literal argument would each compile a second copy), except the engine's
    four top kernels, once without the per-sequence planner (a first run of ``propose``, which
    compiles none of that planner) and once with it (``sequence``, and every run after it)."""
    import json

    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path / "cache"),
               PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    run = subprocess.run([sys.executable, "-c", _COMPILE_COUNTS, str(ROOT / "examples" / "trace.csv")],
                         capture_output=True, text=True, env=env)
    assert run.returncode == 0, run.stderr
    light, counts = json.loads(run.stdout.strip().splitlines()[-1])
    assert light.get("run_nb") == 1
    assert not {"sequence_depths_nb", "_plan_sequence", "sort_gains_desc_nb"} & set(light), sorted(light)
    for kernel in ("run_nb", "step_nb", "_schedule_nb", "plan_depths_nb"):
        assert counts.get(kernel) == 2, (kernel, counts.get(kernel))
    for kernel in ("sequence_depths_nb", "admit_nb", "decode_cost_nb", "prefill_cost_nb",
                   "propose_table_nb", "propose_depth_nb", "width_costs_nb", "row_cost_nb"):
        assert counts.get(kernel) == 1, (kernel, counts.get(kernel))
    twice = {name for name, c in counts.items() if c > 1} - {"run_nb", "step_nb", "_schedule_nb", "plan_depths_nb"}
    assert twice <= KNOWN_TWINS, sorted(twice - KNOWN_TWINS)


def _engines_run(monkeypatch, runs) -> set:
    """Over the engine calls of ``simulate_runs(runs)``, from a process that has not run the engine
    with the per-sequence planner: whether each ran the engine without that planner."""
    from specsim.costmodel.defaults import demo_calibration
    from specsim.sim import engine
    from specsim.traces import read_trace

    real, seen = engine.run_nb, []

    def spy(*args):
        seen.append(args[7] is None)  # run_nb's plan argument
        return real(*args)

    monkeypatch.setattr(engine, "run_nb", spy)
    monkeypatch.setattr(engine, "_sequence_engine", [False])
    reqs = read_trace(ROOT / "examples" / "trace.csv").requests[:40]
    engine.simulate_runs(reqs, demo_table(), demo_calibration(), runs, engine.ServerOptions())
    return set(seen)


def test_a_run_set_with_sequence_runs_every_policy_on_the_engine_with_the_planner(monkeypatch):
    """One compiled engine for a set of runs: with a ``sequence`` run among them, every run (the
    ``propose`` one too, whichever thread starts first) takes the planner's workspace; without,
    none does, so the per-sequence planner is not compiled for them."""
    assert _engines_run(monkeypatch, [("propose", 0.0), ("sequence", 0.0)]) == {False}
    assert _engines_run(monkeypatch, [("propose", 0.0), ("fixed:2", 0.0)]) == {True}


def test_a_sweep_point_of_a_sweep_with_sequence_takes_the_engine_with_the_planner(monkeypatch):
    """A point of a sweep where some point runs ``sequence`` (run_point's last argument) runs on
    the engine with the planner, and so does every later run in its process."""
    from specsim.costmodel.defaults import demo_calibration
    from specsim.sim import engine
    from specsim.sim.slo import SLO
    from specsim.studies.sweep.run import run_point
    from specsim.traces import read_trace

    monkeypatch.setattr(engine, "_sequence_engine", [False])
    assert engine.plan_workspace_for(False, 4, 3) is None
    reqs = read_trace(ROOT / "examples" / "trace.csv").requests[:20]
    run_point({"policy": "propose"}, reqs, demo_table(), demo_calibration(), {}, SLO(None, None), True)
    assert engine.plan_workspace_for(False, 4, 3) is not None
