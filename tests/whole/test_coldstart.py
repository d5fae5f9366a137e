"""The first-use notice: said before compiling, once, and only when the kernels are not on disk."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from specsim import _coldstart
from specsim.demo_inputs import demo_table
from tests.fixtures import ROOT



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
    plain = _coldstart.compile_estimate(["simulate", "--synthetic", "requests=9,rate=1", "--policy", "propose"])
    assert plain == _coldstart.KERNELS["simulate"][1]
    for argv in (["simulate", "--policy", "sequence"], ["simulate", "--policy=sequence@0.2"],
                 ["simulate", "--policy", "fixed:2", "--policy", "sequence"]):
        assert _coldstart.compile_estimate(argv) == plain + _coldstart.SEQUENCE_S, argv


def test_the_trace_reader_counts_only_where_a_trace_file_is_read(tmp_path, monkeypatch):
    """The engine commands add the trace reader's compile when they read a trace file, and only
    then; a warm engine with a cold reader announces the reader alone and starts no helper (the
    demo and --synthetic traces read no file: on a warm engine they announce nothing)."""
    import io

    from specsim import _compile_ahead

    monkeypatch.setenv("NUMBA_CACHE_DIR", str(tmp_path))
    engine, reader = _coldstart.KERNELS["simulate"][1], _coldstart.KERNELS[("trace", "show")][1]
    assert _coldstart.compile_estimate(["simulate", "--trace", "t.csv", "--policy", "propose"]) == engine + reader
    assert _coldstart.compile_estimate(["simulate", "--trace=t.csv", "--policy", "propose"]) == engine + reader
    assert _coldstart.compile_estimate(["simulate", "--format", "synthetic", "--trace", "t.csv"]) == engine
    warm = {"run_nb", "fleet_nb"}
    monkeypatch.setattr(_coldstart, "is_cached", lambda module, name: name in warm)
    monkeypatch.setattr(_compile_ahead, "start", lambda variant: pytest.fail("no helper for a warm engine"))
    assert _coldstart.compile_estimate(["demo"]) is None
    assert _coldstart.compile_estimate(["simulate", "--synthetic", "requests=9,rate=1"]) is None
    out = io.StringIO()
    _coldstart.announce(["fleet", "--trace", "t.csv", "--policy", "sequence"], stream=out)
    assert out.getvalue() == f"specsim: compiling kernels on first use, once per install: ~{reader:.0f} s\n"


# Compiled more than once in one cold process, and rightly: NumPy's ndarray.view, for each of the
# (array, dtype) pairs the planner's workspace and sort view. Nothing else may be (a literal
# argument, int instead of np.int64, would compile its kernel once more).
KNOWN_TWINS = {"ol_compatible_view.<locals>.impl"}
# A process that counts the kernels it compiles, with the inputs both scripts below run.
_LISTENING = r'''
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
from specsim.demo_inputs import demo_calibration, demo_table
from specsim.plan.planner import sequence_depths
from specsim.sim import simulate
from specsim.sim.fleet.fleet import Fleet, simulate_fleet
from specsim.table import CostTable
from specsim.traces import read_trace

reqs = read_trace(sys.argv[1]).requests[:200]
table, cal = demo_table(), demo_calibration()
axis = CostTable.from_contexts({512: table, 4096: CostTable(table.key, table.widths, table.costs * 2.0)})
'''
_COMPILE_COUNTS = _LISTENING + r'''
simulate(reqs, table, cal, "propose")  # the engine without the per-sequence planner
light = dict(counts)
for t in (table, axis):  # a table without an axis, then one with: the engine with context pricing
    for policy in ("sequence", "propose"):  # from the first sequence run on, the engine with it
        simulate(reqs, t, cal, policy)
Planner(table, cal).propose(8)  # the planner's kernels, as the engine's memo compiled them
print(json.dumps([light, counts]))
'''


# The engine's top kernels, compiled once per engine: without the per-sequence planner and with
# it, each without context pricing and with it (here three: no run of propose on the table with a
# context axis precedes the first sequence run's).
TOP = ("run_nb", "step_nb", "_schedule_nb", "plan_depths_nb")
# Kernels that take the table's bundle, compiled once without context pricing and once with it.
BY_TABLE = ("_decode_part_nb", "decode_cost_nb", "_context_decode_cost", "_context_depth", "_plan_sequence",
            "_plan_arrays")
# What only context pricing runs: compiled for a table with a context axis alone.
CONTEXT_ONLY = ("_context_grid", "_live_depth", "context_bracket_nb", "goodput_depth_nb")


@pytest.mark.slow
def test_a_cold_process_compiles_each_kernel_once(tmp_path):
    """Planning and simulating, on tables with and without a context axis, in one process with
    an empty cache: every engine and planner kernel is compiled once (a read-only table array
    or a literal argument would each compile a second copy), except the engine's top kernels,
    once per engine (without the per-sequence planner, a first run of ``propose``, which compiles
    none of that planner, and with it: ``sequence``, and every run after it; without context
    pricing and with it) and the kernels that take the table's bundle, once without context
    pricing and once with it. A run without context pricing compiles none of it."""
    import json

    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path / "cache"),
               PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    run = subprocess.run([sys.executable, "-c", _COMPILE_COUNTS, str(ROOT / "examples" / "trace.csv")],
                         capture_output=True, text=True, env=env)
    assert run.returncode == 0, run.stderr
    light, counts = json.loads(run.stdout.strip().splitlines()[-1])
    assert light.get("run_nb") == 1
    assert not {"_sequence_depths_nb", "_plan_sequence", "bucket_gains_desc_nb", "sort_buckets_nb"} & set(light), \
        sorted(light)
    assert not set(CONTEXT_ONLY) & set(light), sorted(set(CONTEXT_ONLY) & set(light))
    for kernel in TOP:
        assert counts.get(kernel) == 3, (kernel, counts.get(kernel))
    for kernel in BY_TABLE:
        assert counts.get(kernel) == 2, (kernel, counts.get(kernel))
    for kernel in ("_sequence_depths_nb", "admit_nb", "_price_nb", "prefill_cost_nb", "_context_grid",
                   "propose_table_nb", "propose_depth_nb", "width_costs_nb", "row_cost_nb"):
        assert counts.get(kernel) == 1, (kernel, counts.get(kernel))
    twice = {name for name, c in counts.items() if c > 1} - set(TOP) - set(BY_TABLE)
    assert twice <= KNOWN_TWINS, sorted(twice - KNOWN_TWINS)


def _engines_run(monkeypatch, runs) -> set:
    """Over the engine calls of ``simulate_runs(runs)``, from a process that has not run the engine
    with the per-sequence planner: whether each ran the engine without that planner."""
    from specsim.demo_inputs import demo_calibration
    from specsim.policy.policy import parse_policy
    from specsim.sim import engine
    from specsim.sim.options import ServerOptions
    from specsim.traces import read_trace

    real, seen = engine.run_nb, []

    def spy(*args):
        seen.append(args[7] is None)  # run_nb's plan argument
        return real(*args)

    monkeypatch.setattr(engine, "run_nb", spy)
    monkeypatch.setattr(engine, "_sequence_engine", [False])
    reqs = read_trace(ROOT / "examples" / "trace.csv").requests[:40]
    engine.simulate_runs(reqs, demo_table(), demo_calibration(), [(parse_policy(p), s) for p, s in runs],
                         ServerOptions())
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
    from specsim.demo_inputs import demo_calibration
    from specsim.sim import engine
    from specsim.sim.slo import SLO
    from specsim.studies.sweep.run import run_point
    from specsim.traces import read_trace

    monkeypatch.setattr(engine, "_sequence_engine", [False])
    assert engine.plan_workspace_for(False, 4, 3) is None
    reqs = read_trace(ROOT / "examples" / "trace.csv").requests[:20]
    run_point({"policy": "propose"}, reqs, demo_table(), demo_calibration(), {}, SLO(None, None), True)
    assert engine.plan_workspace_for(False, 4, 3) is not None


# -- compiling ahead on a second core ------------------------------------------------------------

def test_the_command_line_picks_the_helper_its_engine_needs():
    from specsim._coldstart import ahead_variant

    assert ahead_variant(["demo"]) == ahead_variant(["tune", "--trace", "t.csv"]) == "sequence"
    assert ahead_variant(["simulate", "--policy", "propose"]) == "plain"
    assert ahead_variant(["simulate", "--policy", "fixed:1", "--policy=sequence@0.2"]) == "sequence"
    assert ahead_variant(["fleet", "--policy", "sequence"]) == "sequence"
    assert ahead_variant(["sweep", "grid.toml"]) == ahead_variant(["capacity"]) == "plain"
    for argv in (["plan", "t.toml", "c.toml"], ["trace", "show", "t.csv"], ["table", "query"], []):
        assert ahead_variant(argv) is None, argv


def test_the_helpers_list_names_real_kernels_with_their_arity():
    """Each entry names a kernel of its module with one argument type per parameter, known to
    the helper; the plain engine's list leaves out the per-sequence planner's kernels, and no
    entry is one of the engine's top kernels (another signature per engine variant)."""
    import importlib
    import inspect

    from specsim import _compile_ahead

    named = _compile_ahead._types()
    for module, name, args, variants in _compile_ahead.PLAN + _compile_ahead.TREE_PLAN:
        kernel = getattr(importlib.import_module(f"specsim.{module}"), name)
        assert len(inspect.signature(kernel.py_func).parameters) == len(args), name
        assert all(a in named or a == "tree?" for a in args), (name, args)
        assert set(variants) <= set(_compile_ahead.VARIANTS) and variants, name
        assert name not in ("run_nb", "step_nb", "_schedule_nb", "plan_depths_nb"), name
    for trees in _compile_ahead.TREES:
        for _, _, args, _ in _compile_ahead.kernels("sequence", trees):
            assert all(a in named for a in args), (trees, args)
        plain = {e[1] for e in _compile_ahead.kernels("plain", trees)}
        assert not plain & {"_scan_nb", "bucket_gains_desc_nb", "sort_buckets_nb", "_assign_nb"}
        assert plain < {e[1] for e in _compile_ahead.kernels("sequence", trees)}


def test_the_kernels_that_take_trees_are_compiled_ahead_only_in_the_one_signature_a_command_compiles():
    """A kernel that takes a run's trees (None for a chain) compiles in one signature per kind of
    run: the helper compiles it only where every run is a chain (with None) or every run a tree
    (with the tree bundle); where the command serves both, or the helper cannot tell, it is left
    to the command, so the two never write different entries of its cache index. The trees' own
    kernels come only where the command serves trees."""
    import importlib
    import inspect

    from specsim import _compile_ahead

    def taking_trees(trees):
        out = {}
        for module, name, args, _ in _compile_ahead.kernels("sequence", trees):
            params = list(inspect.signature(getattr(importlib.import_module(f"specsim.{module}"), name).py_func)
                          .parameters)
            if "tree" in params:
                out[name] = args[params.index("tree")]
        return out

    tree_only = {e[1] for e in _compile_ahead.TREE_PLAN}
    assert set(taking_trees("none").values()) == {"none"} and not set(taking_trees("none")) & tree_only
    assert set(taking_trees("only").values()) == {"tree"} and tree_only < set(taking_trees("only")) | tree_only
    assert "apply_nb" in set(taking_trees("none")) & set(taking_trees("only"))
    assert set(taking_trees("mixed")) <= tree_only and set(taking_trees("mixed").values()) == {"tree"}
    assert not taking_trees("unknown")
    for trees, served in (("none", False), ("only", True), ("mixed", True), ("unknown", False)):
        names = {e[1] for e in _compile_ahead.kernels("plain", trees)}
        assert (tree_only <= names) == served and (names & tree_only == set()) == (not served), trees


def test_the_helpers_tree_type_is_a_tree_runs():
    """The helper builds the tree bundle's Numba type without a tree (no greedy order to
    compile first): the type of every tree policy's bundle, with and without a context axis and
    a request spread."""
    import numpy as np
    from numba import typeof

    from specsim import _compile_ahead
    from specsim.calibration._types import RequestSpread
    from specsim.demo_inputs import demo_tree_calibration
    from specsim.policy.policy import parse_policy
    from specsim.sim.engine import prepare
    from specsim.sim.options import ServerOptions
    from specsim.table import CostTable
    from specsim.traces._types import REQUEST_DT

    requests = np.zeros(2, dtype=REQUEST_DT)
    requests["arrival_s"], requests["prompt_tokens"], requests["output_tokens"] = (0.0, 0.5), 8, 4
    table, cal = demo_table(), demo_tree_calibration()
    axis = CostTable.from_contexts({512: table, 4096: CostTable(table.key, table.widths, table.costs * 2.0)})
    spread = cal.with_spread(RequestSpread(0.5, 0.1, 100, "test"))
    named = _compile_ahead._types()
    for t, c in ((table, cal), (axis, cal), (table, spread)):
        for policy in ("tree:auto", "tree:4", "tree:3,2"):
            p = prepare(requests, t, c, parse_policy(policy), ServerOptions(max_num_seqs=4))
            assert typeof(p.tree) == named["tree"], (policy, typeof(p.tree))


def test_the_command_line_says_what_its_runs_draft():
    from specsim._coldstart import ahead_trees

    assert ahead_trees(["demo"]) == ahead_trees(["tune", "--trees", "--trace", "t.csv"]) == "mixed"
    assert ahead_trees(["tune", "--trace", "t.csv"]) == ahead_trees(["simulate", "--policy", "propose@0.1"]) == "none"
    assert ahead_trees(["simulate", "--policy", "tree:auto", "--policy=tree:4,2"]) == "only"
    assert ahead_trees(["fleet", "--policy", "fixed:3", "--policy", "tree:8"]) == "mixed"
    assert ahead_trees(["capacity", "--policy", "tree:8"]) == "mixed"  # plain decoding is always sized
    assert ahead_trees(["simulate", "--policy", "sglang-adaptive:a.json", "--policy", "fixed:2"]) == "none"
    for argv in (["simulate", "--policy", "sglang:s.json"], ["simulate", "--policy", "tree:4", "--policy=vllm:v.json"],
                 ["sweep", "grid.toml"]):
        assert ahead_trees(argv) == "unknown", argv


def test_the_helper_is_off_when_asked_and_ended_by_stop(tmp_path, monkeypatch):
    from specsim import _compile_ahead

    monkeypatch.setenv("NUMBA_CACHE_DIR", str(tmp_path))
    for off in ("0", " 0 ", "false", "No", "OFF"):
        monkeypatch.setenv(_compile_ahead.ENV, off)
        assert _compile_ahead.start("plain") is None, off
    monkeypatch.setenv(_compile_ahead.ENV, "1")
    with pytest.raises(ValueError, match="variant"):
        _compile_ahead.start("everything")
    with pytest.raises(ValueError, match="trees"):
        _compile_ahead.start("plain", "some")
    if _compile_ahead.usable_cpus() < 2:
        assert _compile_ahead.start("plain") is None
        return
    proc = _compile_ahead.start("plain")
    try:
        assert proc is not None and proc.args[-5:] == ["specsim._compile_ahead", "plain", "none",
                                                       _compile_ahead._PACKAGE, str(os.getpid())]
        assert _compile_ahead.start("plain") is None  # one at a time
    finally:
        _compile_ahead.stop()
    assert proc.returncode is not None and not _compile_ahead._running
    # Two threads asking at once start one helper.
    import threading

    got, barrier = [], threading.Barrier(4)

    def ask():
        barrier.wait()
        got.append(_compile_ahead.start("plain"))

    threads = [threading.Thread(target=ask) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    try:
        assert sum(p is not None for p in got) == 1 and len(_compile_ahead._running) == 1
    finally:
        _compile_ahead.stop()
    assert not _compile_ahead._running


def test_the_helper_compiles_nothing_for_another_copy_of_the_package(tmp_path, monkeypatch):
    """A helper that imported another specsim than the command's (a path the command found it on
    and the helper did not), was given no such path, or whose parent is not the command (the
    command died before the helper looked) compiles nothing and ends at once."""
    from numba.core import event

    from specsim import _compile_ahead

    seen = []

    class Seen(event.Listener):
        def on_start(self, ev):
            seen.append(ev)

        def on_end(self, ev):
            pass

    listener = Seen()
    event.register("numba:compile", listener)
    try:
        mine, other = str(os.getppid()), str(os.getpid())  # main() runs here: its parent is this one's
        package = _compile_ahead._PACKAGE
        for argv in (["plain", "none", str(tmp_path), mine], ["plain", "none", package], ["plain"],
                     ["plain", package, mine], ["everything", "none", package, mine],
                     ["plain", "everything", package, mine], ["plain", "none", package, other],
                     ["plain", "none", package, "x"]):
            assert _compile_ahead.main(argv) == 0
    finally:
        event.unregister("numba:compile", listener)
    assert not seen


_CHAINS = r'''
for policy in ("propose", "goodput", "load-aware", "sequence"):
    simulate(reqs, axis, cal, policy)
simulate(reqs, table, cal, "sequence")
simulate_fleet(reqs, Fleet.uniform(table, cal, 2), "sequence")
'''
_TREES = r'''
from specsim.demo_inputs import demo_tree_calibration
tcal = demo_tree_calibration()
for policy in ("tree:auto", "tree:4", "tree:3,2"):
    simulate(reqs, table, tcal, policy)
simulate(reqs, axis, tcal, "tree:auto")
simulate_fleet(reqs, Fleet.uniform(table, tcal, 2), "tree:4")
'''
_PLANNER = r'''
Planner(table, cal).propose(8)
sequence_depths(table, cal, [[-0.1, -0.5], [-0.2]], [2, 1], 3, 8, 0.0)
print(json.dumps(sorted(counts)))
'''


@pytest.mark.slow
@pytest.mark.parametrize("variant, trees, runs", [("sequence", "none", _CHAINS), ("plain", "only", _TREES),
                                                  ("sequence", "mixed", _CHAINS + _TREES)])
def test_what_the_helper_compiled_a_run_loads_and_compiles_in_no_other_signature(tmp_path, variant, trees, runs):
    """The helper's signatures are the ones a run compiles: after the helper ran on an empty
    cache, a process that runs the engines the helper was told of (tables with and without a
    context axis, every planning policy, chains, trees or both), a fleet and the Planner
    compiles none of the helper's kernels again, so none of them is ever compiled in two
    signatures (whose cache writes could cross). Fails when a kernel's arguments change and the
    helper's list does not follow."""
    import json

    from specsim import _compile_ahead

    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path / "cache"),
               PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    helper = subprocess.run([sys.executable, "-m", "specsim._compile_ahead", variant, trees,
                             _compile_ahead._PACKAGE, str(os.getpid())], capture_output=True, text=True, env=env)
    assert helper.returncode == 0 and not helper.stdout and not helper.stderr, helper.stderr
    run = subprocess.run([sys.executable, "-c", _LISTENING + runs + _PLANNER, str(ROOT / "examples" / "trace.csv")],
                         capture_output=True, text=True, env=env)
    assert run.returncode == 0, run.stderr
    compiled = set(json.loads(run.stdout.strip().splitlines()[-1]))
    assert "run_nb" in compiled and "fleet_nb" in compiled  # the run did compile the rest
    ahead = {e[1] for e in _compile_ahead.kernels(variant, trees)}
    assert {"greedy_order_nb", "tree_accepted_nb"} <= ahead or trees == "none"
    assert not compiled & ahead, sorted(compiled & ahead)


def test_the_notice_counts_the_helper_where_one_started(tmp_path, monkeypatch):
    """The estimate is the one-core figure, times AHEAD_SHARE when the helper started; nothing
    is started for a command that runs no engine."""
    import io

    from specsim import _compile_ahead

    monkeypatch.setenv("NUMBA_CACHE_DIR", str(tmp_path))
    started = []
    for result in (object(), None):
        monkeypatch.setattr(_compile_ahead, "start",
                            lambda variant, trees, r=result: started.append((variant, trees)) or r)
        out = io.StringIO()
        _coldstart.announce(["demo"], stream=out)
        seconds = _coldstart.KERNELS["demo"][1] * (_coldstart.AHEAD_SHARE if result is not None else 1)
        assert out.getvalue() == f"specsim: compiling kernels on first use, once per install: ~{seconds:.0f} s\n"
    _coldstart.announce(["trace", "show", "t.csv"], stream=io.StringIO())
    assert started == [("sequence", "mixed"), ("sequence", "mixed")]  # the demo serves chains and trees


def test_the_helper_imports_nothing_from_the_working_folder(tmp_path, monkeypatch):
    """``python -m`` puts the working folder first on the import path: the helper runs from the
    package's own folder, so a user's numba.py (or a specsim/ of their own) there never runs."""
    import time

    from specsim import _compile_ahead

    if _compile_ahead.usable_cpus() < 2:
        pytest.skip("the helper starts only with a second CPU")
    marker = tmp_path / "ran"
    for name in ("numba.py", "numpy.py", "specsim/__init__.py", "specsim/_compile_ahead.py"):
        (tmp_path / name).parent.mkdir(exist_ok=True)
        (tmp_path / name).write_text(f"open({str(marker)!r}, 'a').write({name!r})\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("NUMBA_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv(_compile_ahead.ENV, "1")
    proc = _compile_ahead.start("plain")
    try:
        time.sleep(2.0)  # well past its imports: it is compiling by now
        assert proc.poll() is None
    finally:
        _compile_ahead.stop()
    assert not marker.exists(), marker.read_text()


def _ended(pid: int) -> bool:
    """Whether process ``pid`` is gone or a zombie (ended, not yet reaped by its new parent)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return True
    return state in ("Z", "X")


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs /proc")
def test_a_sigterm_to_a_command_leaves_its_compile_ahead_helper_running(tmp_path):
    """Hostile input round four, case 17: a command killed by SIGTERM runs no exit handler, so
    it cannot end its helper; the helper must notice it is gone during a kernel's compile (cold,
    one takes seconds), not only between kernels, and end with it. The helper here runs with
    every compile stalled (a stand-in for a long one), so only the helper's own watch can end it."""
    import signal
    import time

    from specsim import _compile_ahead

    helper_main = tmp_path / "stalled_helper.py"
    helper_main.write_text(
        "import runpy, sys, time\n"
        "from numba.core.dispatcher import Dispatcher\n"
        f"Dispatcher.compile = lambda self, sig: (open({str(tmp_path / 'compiling')!r}, 'w').close(), "
        "time.sleep(300))  # a compile that does not end soon\n"
        "sys.argv = ['specsim._compile_ahead'] + sys.argv[1:]\n"
        "runpy.run_module('specsim._compile_ahead', run_name='__main__')\n")
    command = tmp_path / "command.py"
    command.write_text(
        "import os, subprocess, sys, time\n"
        f"h = subprocess.Popen([sys.executable, {str(helper_main)!r}, 'plain', 'none', {_compile_ahead._PACKAGE!r}, "
        "str(os.getpid())], start_new_session=True, stdin=subprocess.DEVNULL)\n"
        "print(h.pid, flush=True)\n"
        "time.sleep(300)\n")
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    parent = subprocess.Popen([sys.executable, str(command)], stdout=subprocess.PIPE, text=True, env=env)
    helper = None
    try:
        helper = int(parent.stdout.readline())
        deadline = time.monotonic() + 60.0  # until it is inside its first (stalled) compile
        while time.monotonic() < deadline and not _ended(helper) and not (tmp_path / "compiling").exists():
            time.sleep(0.05)
        assert not _ended(helper) and (tmp_path / "compiling").exists(), "the helper never reached a compile"
        parent.send_signal(signal.SIGTERM)
        parent.wait(timeout=30)
        deadline = time.monotonic() + 20.0  # a stalled compile never returns: only the watch ends it
        while not _ended(helper) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _ended(helper), "the compile-ahead helper outlived its command"
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait(timeout=30)
        parent.stdout.close()
        if helper is not None and not _ended(helper):
            os.kill(helper, signal.SIGKILL)


@pytest.mark.parametrize("where", ["a module that is gone", "a class its module no longer holds"])
def test_a_cache_index_naming_a_moved_type_reads_as_empty(tmp_path, monkeypatch, where):
    """A kernel's cache index written by another version names its bundle types by module path;
    where one has moved since (``sim/_types.py`` -> ``sim/bundles.py``) the kernel compiles
    afresh instead of raising from Numba's unpickling on its first call."""
    import pickle
    import types

    import numba
    from numba.core import caching

    from specsim import _jit
    from specsim.sim import bundles
    from specsim.sim._replay_kernels import replay_nb

    assert type(replay_nb._cache._cache_file) is _jit._KernelIndex  # every kernel's index reads so
    moved = type("Moved", (), {})
    if where == "a module that is gone":
        home = types.ModuleType("specsim_gone_module")
        monkeypatch.setitem(sys.modules, home.__name__, home)
    else:
        home = bundles
    moved.__module__ = home.__name__
    monkeypatch.setattr(home, "Moved", moved, raising=False)
    data = pickle.dumps(("stamp", {(moved,): "k.1.nbc"}))
    monkeypatch.undo()  # the type is gone again, as after an upgrade
    with open(tmp_path / "k.nbi", "wb") as f:
        pickle.dump(numba.__version__, f)
        f.write(data)
    with pytest.raises((ImportError, AttributeError)):
        caching.IndexDataCacheFile(str(tmp_path), "k", "stamp")._load_index()
    assert _jit._KernelIndex(str(tmp_path), "k", "stamp")._load_index() == {}
