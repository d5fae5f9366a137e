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
# and about how long compiling them all takes, seconds, on a quiet 2-core machine: measured by
# benchmarks/cold_start.py (demo 27 s, simulate 25 s, fleet 36 s), then scaled by the ratios
# the compile changes since measured back to back on a busier machine (demo 0.72x, simulate of
# one policy 0.38x: the engine without the per-sequence planner; tune, sweep and capacity run
# `sequence`, so the whole engine, fleet and capacity the fleet kernel beside it).
# Keys: the command, or (command, action) for a group.
_ENGINE = (("sim/_engine_kernels.py", "run_nb"), ("traces/_parse_kernels.py", "parse_csv_nb"))
KERNELS = {
    "demo": (_ENGINE, 20),
    "simulate": (_ENGINE, 10),
    "fleet": (_ENGINE + (("sim/fleet/_kernels.py", "fleet_nb"),), 20),
    "capacity": (_ENGINE + (("sim/fleet/_kernels.py", "fleet_nb"),), 26),
    "tune": (_ENGINE, 20),
    "sweep": (_ENGINE, 20),
    "plan": ((("plan/_kernels.py", "propose_table_nb"),), 5),
    ("trace", "show"): ((("traces/_parse_kernels.py", "parse_csv_nb"),), 3),
    ("table", "query"): ((("table/_kernels.py", "cell_into_nb"),), 3),
}
# What the per-sequence planner adds to simulate's and fleet's first compile where a run plans per
# sequence (the figures above leave it out; the demo's, tune's, sweep's and capacity's count it).
SEQUENCE_S = 8
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
    its kernels are not yet on disk; else None."""
    words = [a for a in argv if not str(a).startswith("-")][:2]
    if not words:
        return None
    entry = KERNELS.get(tuple(words[:2])) or KERNELS.get(words[0])
    if entry is None or "-h" in argv or "--help" in argv:
        return None
    kernels, seconds = entry
    if all(is_cached(m, n) for m, n in kernels):
        return None
    if words[0] in ("simulate", "fleet") and any(str(a).rpartition("=")[2].split("@")[0] == "sequence" for a in argv):
        seconds += SEQUENCE_S
    return seconds


def announce(argv, stream=None) -> None:
    """Print the one-line first-use notice when the command will compile for a while."""
    seconds = compile_estimate(argv)
    if seconds is not None and seconds >= NOTICE_FROM_S:
        print(f"specsim: compiling kernels on first use, once per install: ~{seconds:.0f} s", file=stream or sys.stderr,
              flush=True)
