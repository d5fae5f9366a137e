"""The first-use notice: a command about to compile its Numba kernels says so before it goes quiet.

Numba compiles a kernel on its first call and keeps the machine code on disk (``cache=True``), so
only the first run of each command after an install (or with an empty ``NUMBA_CACHE_DIR``) pays.
Whether that run is now is told without importing Numba: the cache's index file for the
command's main kernel (``<module>.<function>-<line>.py<version>.nbi``) is looked for where Numba
keeps it, so the notice comes out well within a second of starting.
"""

from __future__ import annotations

import hashlib
import os
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent

# The kernels that stand for each command's compile work (module path in the package, function)
# and about how long compiling them all takes on one core, seconds, on a quiet 2-core machine:
# a command's first run, cold minus warm, with the compile-ahead helper off (benchmarks/
# cold_start.py and the same timing of fleet, tune and capacity on the README's trace). The
# demo and tune run `sequence`, so the whole engine; fleet and capacity the fleet kernel beside it.
# The engine commands' figures leave out the trace reader's, which they add when they read a
# trace file (the demo and --synthetic traces read none). Keys: the command, or (command, action).
_ENGINE = (("sim/_engine_kernels.py", "run_nb"),)
_PARSER = ("traces/_parse_kernels.py", "parse_csv_nb")
ENGINE_COMMANDS = ("demo", "simulate", "fleet", "capacity", "tune", "sweep")
KERNELS = {
    # The demo also serves draft trees: its engine compiles a second time, with the tree bundle
    # (quiet 2-core machine, load 0.6-1.4, three runs: cold 26.6-28.8 s with the helper, 44.5 s
    # without it, warm 3.6-4.4 s: about 41 s of compile on one core, 25 s at AHEAD_SHARE).
    "demo": (_ENGINE, 41),
    "simulate": (_ENGINE, 10),
    "fleet": (_ENGINE + (("sim/fleet/_kernels.py", "fleet_nb"),), 12),
    "capacity": (_ENGINE + (("sim/fleet/_kernels.py", "fleet_nb"),), 21),
    "tune": (_ENGINE, 20),
    "sweep": (_ENGINE, 20),
    "plan": ((("plan/_kernels.py", "propose_table_nb"),), 5),
    "tree": ((("tree/_kernels.py", "greedy_order_nb"), ("tree/_kernels.py", "tree_price_nb")), 8),
    ("trace", "show"): ((_PARSER,), 3),
    ("table", "query"): ((("table/_kernels.py", "cell_into_nb"),), 3),
}
# What the per-sequence planner adds to simulate's and fleet's first compile where a run plans per
# sequence (the figures above leave it out; the demo's, tune's, sweep's and capacity's count it).
SEQUENCE_S = 10
# The share of those seconds a command waits when the compile-ahead helper takes part of the work
# on the second core (specsim._compile_ahead): 0.57-0.71 measured over demo, simulate (with and
# without `sequence`), fleet, tune and capacity.
AHEAD_SHARE = 0.6
# Below this many seconds of compiling a command says nothing.
NOTICE_FROM_S = 2.0


def _cache_dirs(py_file: Path) -> list:
    """Where Numba's locators (in their order) keep the cache of functions in ``py_file``."""
    folder = str(py_file.parent)
    sub = f"{py_file.parent.name}_{hashlib.sha1(folder.encode()).hexdigest()}"
    user = os.environ.get("NUMBA_CACHE_DIR")
    if user:
        return [Path(user) / sub]
    home = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return [py_file.parent / "__pycache__", Path(home) / "numba" / sub]


def _first_line(py_file: Path, name: str):
    """The line Numba names a function's cache by: its first decorator's, else its ``def``'s."""
    try:
        lines = py_file.read_text(encoding="utf-8").splitlines()
    except OSError:
        return None
    for i, line in enumerate(lines):
        if line.startswith(f"def {name}("):
            j = i
            while j > 0 and lines[j - 1].startswith("@"):
                j -= 1
            return j + 1
    return None


def is_cached(module: str, name: str) -> bool:
    """Whether a compiled ``name`` of ``module`` (a path in the package) is on disk."""
    py_file = PACKAGE / module
    line = _first_line(py_file, name)
    if line is None:
        return True  # not ours to judge: say nothing rather than something wrong
    index = f"{py_file.stem}.{name}-{line}.py{sys.version_info[0]}{sys.version_info[1]}.nbi"
    return any((d / index).is_file() for d in _cache_dirs(py_file))


def compile_estimate(argv):
    """Seconds the command of ``argv`` (the command line's words) will spend compiling, when
    some of its kernels are not yet on disk; else None."""
    engine, other = _estimate(argv)
    return engine + other or None


def _estimate(argv) -> tuple:
    """(seconds of compiling the engine, seconds of the rest: the trace reader, a command's
    own kernels) for the command of ``argv``; (0, 0) where all it runs is on disk."""
    words = _words(argv)
    entry = (KERNELS.get(tuple(words)) or KERNELS.get(words[0])) if words else None
    if entry is None or "-h" in argv or "--help" in argv:
        return 0, 0
    kernels, seconds = entry
    cold = 0 if all(is_cached(m, n) for m, n in kernels) else seconds
    if words[0] not in ENGINE_COMMANDS:
        return 0, cold
    if cold and words[0] in ("simulate", "fleet") and _runs_sequence(argv):
        cold += SEQUENCE_S
    reads = words[0] == "sweep" or ("--trace" in argv or any(str(a).startswith("--trace=") for a in argv))
    synthetic = any(str(a).startswith("--synthetic") or str(a) in ("synthetic", "--format=synthetic") for a in argv)
    parser = KERNELS[("trace", "show")][1] if reads and not synthetic and not is_cached(*_PARSER) else 0
    return cold, parser


def _words(argv) -> list:
    """The command and its action (``trace show``): the first two words not options."""
    return [a for a in argv if not str(a).startswith("-")][:2]


def _runs_sequence(argv) -> bool:
    """Whether a command line names the ``sequence`` policy (``--policy sequence@0.2`` and the like)."""
    return any(str(a).rpartition("=")[2].split("@")[0] == "sequence" for a in argv)


def ahead_variant(argv):
    """Which engine the command of ``argv`` compiles, as :mod:`specsim._compile_ahead` names
    it, or None where it runs no engine: the demo and tune always run ``sequence`` (the engine
    with the per-sequence planner), the others when a ``--policy`` names it (a sweep's grid
    file may too: it then compiles that planner's kernels itself)."""
    words = _words(argv)
    if not words or words[0] not in ENGINE_COMMANDS:
        return None
    return "sequence" if words[0] in ("demo", "tune") or _runs_sequence(argv) else "plain"


# Policy kinds that draft chains (engine file policies, ENGINE:FILE, may state a tree).
_CHAIN_KINDS = ("fixed", "schedule", "propose", "sequence", "goodput", "load-aware")


def ahead_trees(argv) -> str:
    """What the runs of the command of ``argv`` draft, as :data:`specsim._compile_ahead.TREES`
    names it: the demo serves chains and trees ("mixed"); ``simulate`` and ``fleet`` what their
    ``--policy`` values say ("tree:..." a tree, ``sglang-adaptive:FILE`` and the planner kinds a
    chain, any other ``ENGINE:FILE`` may be either: "unknown"), and ``capacity``'s with plain
    decoding, which it always sizes; ``tune --trees`` weighs trees after its chains; a sweep's
    grid file can name trees: "unknown"; else "none"."""
    words = _words(argv)
    if not words:
        return "none"
    if words[0] == "demo" or (words[0] == "tune" and "--trees" in argv):
        return "mixed"
    if words[0] == "sweep":
        return "unknown"
    kinds = {"chain"} if words[0] == "capacity" else set()
    for i, a in enumerate(argv):
        a = str(a)
        value = a.partition("=")[2] if a.startswith("--policy=") else (
            str(argv[i + 1]) if a == "--policy" and i + 1 < len(argv) else None)
        if value is None:
            continue
        kind = value.strip().partition(":")[0].partition("@")[0].strip().lower()
        kinds.add("tree" if kind == "tree" else "chain" if kind in _CHAIN_KINDS or
                  kind.startswith("sglang-adaptive") else "unknown")
    if "unknown" in kinds:
        return "unknown"
    return {frozenset({"tree"}): "only", frozenset({"tree", "chain"}): "mixed"}.get(frozenset(kinds), "none")


def announce(argv, stream=None) -> None:
    """Print the one-line first-use notice when the command will compile for a while, after
    starting the compile-ahead helper where the command's engine is still to be compiled."""
    engine, other = _estimate(argv)
    if engine + other >= NOTICE_FROM_S:
        variant = ahead_variant(argv)
        if engine and variant is not None:
            from specsim import _compile_ahead

            if _compile_ahead.start(variant, ahead_trees(argv)) is not None:
                engine *= AHEAD_SHARE
        print(f"specsim: compiling kernels on first use, once per install: ~{engine + other:.0f} s",
              file=stream or sys.stderr, flush=True)
