"""Compiling ahead on a second core: a command's first run shares its compile with a helper.

Numba compiles a kernel's callees one after another, in the order the caller's source calls
them, on one core. On the first run of a command that runs the engine (nothing on disk yet) the
command starts one helper process, ``python -m specsim._compile_ahead VARIANT ...``, which compiles
the kernels the command reaches last, with the same signatures, and writes each to the same
on-disk cache as it finishes. The command's own compile loads each kernel the helper has
already written instead of compiling it, and waits mostly for the kernels above them (the demo's
first run 21.5 s -> 13-15 s on two cores; docs/README.md, "The first run").

Rules that keep this safe:

* The helper compiles only signatures the command itself compiles (a test runs a command after
  the helper and finds none of the helper's kernels compiled again), and none of the kernels
  that take another signature in the other engine variant (the four top kernels), so the two
  processes never write different entries of one kernel's cache index at once. The kernels that
  take a run's draft trees (``tree``: None for a chain) it compiles only where the command's runs
  are all chains or all trees; where the command serves both (the demo) or the command line
  cannot tell (an ``ENGINE:FILE`` policy may state a tree) the command compiles them itself.
* Where the command serves trees the helper also compiles, after the chain engine's kernels, the
  kernels only a tree run reaches: the greedy order and the tree prices its arrays are built with,
  and the engine's tree verbs (a tree run's engine is a second compile of the step, with the tree
  bundle's types; the demo's first run waits for it after its chains ran).
* It is a helper, not a dependency: it starts only where a second CPU is, in a session of its
  own (Ctrl-C in a terminal reaches the command alone), with no output, and ends when its list is
  done, when the command exits (the command ends it) or when the command is gone: a thread of
  the helper checks every :data:`WATCH_S` seconds, so a command killed (SIGTERM, SIGKILL) before
  its exit handlers run does not leave it compiling on. It runs from the package's own folder, so no file of the user's
  working folder is imported. If it fails or is slow, the command compiles what it needs itself.
"""

from __future__ import annotations

import atexit
import importlib
import os
import subprocess
import sys
import threading
import time

# The variants: "sequence" (the engine with the per-sequence planner) and "plain" (without it).
VARIANTS = ("sequence", "plain")
# What the command's runs draft: "none" (chains only), "only" (every run a tree policy: the
# kernels that take ``tree`` compile with the tree bundle), "mixed" (chains and trees: those
# kernels compile in both signatures, by the command alone) or "unknown" (an ENGINE:FILE policy,
# a sweep's grid: the helper leaves out those kernels and the trees' own).
TREES = ("none", "only", "mixed", "unknown")
# Set to 0 (or false, no, off) to start no helper (benchmarks/cold_start.py times a first run both ways).
ENV = "SPECSIM_COMPILE_AHEAD"
OFF = ("0", "false", "no", "off")

# The helper's list, in its order. A first run compiles the engine depth first, each kernel's
# callees in the order its source calls them and the kernel itself after them; the command
# starts the kernels above others (step_nb and the like) early, so the helper cannot win them and
# leaves them out. It takes the leaves the command reaches later, each before the command does:
# in the order the command reaches them (the per-sequence planner's from about 3 s on, the step's
# later verbs from about 5 s), then the table-wide planner kernels the demo's tune needs last.
# Each entry: (module in the package, kernel, argument types by name (see _types), variants);
# a kernel's callees are compiled with it. "tree?" is the runs' trees argument (None, or the tree
# bundle where every run serves trees; see TREES). The order was found by timing each kernel's compile
# in cold runs with the helper and without (a listener on Numba's compile events). Not here:
# _gains_nb, which the Planner's own per-sequence kernel compiles in another signature than the
# engine's (its calibration arrays writable), so a process that plans while the helper compiles
# could write that kernel's cache index at the same time.
_SEQ = ("sequence",)
_ALL = ("sequence", "plain")
PLAN = (
    ("sim._depth_kernels", "_draw_sequence_drafts", ("req", "cal", "ws", "i8", "i8", "i8", "u8"), _SEQ),
    ("plan._kernels", "_caps_nb", ("i8[]", "i8[]", "i8", "i8", "i8[]", "i8[]", "i8[]"), _SEQ),
    ("plan._kernels", "_no_prefix_reaches", ("f8[,]", "i8", "i8", "i8", "f8", "i8", "i8", "f8", "f8", "f8"), _SEQ),
    ("plan._sort", "bucket_gains_desc_nb", ("f8[]", "i8", "f8[]", "i8[]", "i8[]", "f8", "f8"), _SEQ),
    ("plan._sort", "sort_buckets_nb", ("f8[]", "i8[]", "i8", "i8", "i8"), _SEQ),
    ("plan._kernels", "_scan_nb", ("f8[,]", "i8", "i8", "i8", "f8", "i8", "i8", "f8[]", "f8", "f8", "i8[]", "i8"),
     _SEQ),
    ("plan._kernels", "_assign_nb", ("f8[]", "i8", "i8[]", "f8[]", "i8", "i8[]"), _SEQ),
    ("sim._schedule_kernels", "schedule_running_nb", ("req", "srv", "st", "ws", "i8", "i8"), _ALL),
    ("sim._engine_kernels", "_price_nb", ("srv", "st", "ws", "i8", "f8", "f8"), _ALL),
    ("sim._outcome_kernels", "apply_nb", ("req", "cal", "srv", "st", "ws", "tree?", "f8", "u8"), _ALL),
    ("sim._depth_kernels", "adapt_nb", ("srv", "st", "f8"), _ALL),
    ("sim._engine_kernels", "log_step_nb", ("st", "log", "f8", "i8", "f8", "i8", "i8"), _ALL),
    ("sim._engine_kernels", "_release_finished", ("req", "st", "i8", "i8"), _ALL),
    ("sim._engine_kernels", "idle_until_nb", ("srv", "st", "f8"), _ALL),
    ("plan._kernels", "above_idle_table_nb", ("i8[]", "f8[,,]", "f8[]", "f8", "i8", "f8", "i8[]", "f8[,]"), _ALL),
    ("plan._kernels", "goodput_table_nb", ("i8[]", "f8[,,]", "f8[]", "i8", "i8[]", "f8[,]"), _ALL),
    ("plan._kernels", "propose_table_nb", ("i8[]", "f8[,,]", "f8[]", "f8", "i8", "i8[]", "f8[,]"), _ALL),
)
# Where the command serves trees ("only", "mixed"), after PLAN: the kernels a tree policy's arrays
# are built with (its greedy order, its prices), in the order a run reaches them, then the
# engine's tree verb that takes the tree bundle alone. Not here: the verbs that also take the
# table's bundle (auto_tree_nb, tree_cost_nb), whose type says whether the run prices contexts
# (its context axis None or an array), which the command line cannot tell; nor any other kernel
# that takes the table's bundle, for that reason.
TREE_PLAN = (
    ("tree._kernels", "greedy_order_nb", ("f8[,]r", "i8", "i8", "i8[]", "i8[]", "f8[]", "i8[]"), _ALL),
    ("tree._kernels", "tree_price_nb", ("i8[]", "f8[,,]", "i8", "i8", "i8", "i8[]", "b1", "f8", "f8[]"), _ALL),
    ("sim._outcome_kernels", "tree_accepted_nb", ("req", "cal", "tree", "i8", "i8", "u8"), _ALL),
)

# How often the helper looks for its command, in seconds (a kernel's compile takes seconds).
WATCH_S = 0.1

_running = []  # the helper this process started, if any
_lock = threading.Lock()
_PACKAGE = os.path.dirname(os.path.abspath(__file__))  # the helper compiles this copy's kernels or none


def start(variant: str, trees: str = "none"):
    """Start the helper for ``variant`` and ``trees`` (see :data:`TREES`) unless one runs, this
    process may use only one CPU or ``SPECSIM_COMPILE_AHEAD=0``; the ``Popen`` or None. The
    command ends it when it exits."""
    if variant not in VARIANTS:
        raise ValueError(f"variant must be one of {VARIANTS}, got {variant!r}")
    if trees not in TREES:
        raise ValueError(f"trees must be one of {TREES}, got {trees!r}")
    if usable_cpus() < 2 or os.environ.get(ENV, "").strip().lower() in OFF or not sys.executable:
        return None
    with _lock:  # one helper per process, whichever thread asks
        if _running:
            return None
        try:
            # From the folder that holds this copy of the package: `-m` puts the working folder
            # first on the import path, and the user's (a numba.py of theirs) must not run here.
            proc = subprocess.Popen([sys.executable, "-m", "specsim._compile_ahead", variant, trees, _PACKAGE,
                                     str(os.getpid())], cwd=os.path.dirname(_PACKAGE), stdin=subprocess.DEVNULL,
                                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
                                    close_fds=True)
        except OSError:
            return None
        _running.append(proc)
    return proc


def usable_cpus() -> int:
    """The CPUs this process may run on (its affinity where the system says, else all)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def stop() -> None:
    """End the helper if it still runs (its list done or not: the command compiles the rest).
    Registered to run at exit."""
    with _lock:
        while _running:
            proc = _running.pop()
            if proc.poll() is None:
                proc.kill()
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass


atexit.register(stop)


def _types() -> dict:
    """The argument types by name: the engine's bundles as a small run of it builds them (the
    same Numba types whatever the calibration and, but for the table's bundle, which no kernel
    of the lists takes, whatever the table: a test pins that), and scalars."""
    import numpy as np
    from numba import typeof, types

    from specsim.demo_inputs import demo_calibration, demo_table
    from specsim.policy.policy import parse_policy
    from specsim.sim.bundles import TreeArrays
    from specsim.sim.engine import prepare
    from specsim.sim.options import ServerOptions
    from specsim.traces._types import REQUEST_DT

    requests = np.zeros(2, dtype=REQUEST_DT)
    requests["arrival_s"], requests["prompt_tokens"], requests["output_tokens"] = (0.0, 0.5), 8, 4
    table = demo_table()
    p = prepare(requests, table, demo_calibration(), parse_policy("fixed:1"), ServerOptions(max_num_seqs=4))
    named = {name: typeof(getattr(p, name)) for name in ("req", "tab", "cal", "srv", "st", "log", "ws")}
    # A tree policy's bundle (sim.trees builds it): its fields' dtypes, dimensions and the rank
    # acceptance read-only, as the calibration holds it; built here without the greedy order's
    # compile (a test pins it to a tree run's).
    i1, f1, accept = np.zeros(1, np.int64), np.zeros(1), np.zeros((1, 1))
    accept.flags.writeable = False
    named["tree"] = typeof(TreeArrays(np.zeros((1, 1), np.int64), accept, np.zeros((1, 1)), i1, np.zeros((1, 1, 1, 1)),
                                      f1, i1, i1, i1, f1, i1))
    named.update(none=types.none, i8=types.int64, f8=types.float64, u8=types.uint64, b1=types.boolean,
                 **{"i8[]": types.int64[::1], "f8[]": types.float64[::1], "f8[A]": types.float64[:],
                    "f8[,]": types.float64[:, ::1], "f8[,]r": types.Array(types.float64, 2, "C", readonly=True),
                    "f8[,,]": types.float64[:, :, ::1]})
    return named


def kernels(variant: str, trees: str = "none") -> list:
    """The helper's entries for ``variant`` and ``trees``, in its order, each with its runs' trees
    argument ("tree?") named: PLAN's, less the kernels that take trees where the command compiles
    them in two signatures or the helper cannot tell which, then TREE_PLAN's where runs serve trees."""
    runs = {"none": "none", "only": "tree"}.get(trees)
    out = []
    for module, name, args, variants in PLAN + (TREE_PLAN if trees in ("only", "mixed") else ()):
        if variant not in variants or ("tree?" in args and runs is None):
            continue
        out.append((module, name, tuple(runs if a == "tree?" else a for a in args), variants))
    return out


def main(argv) -> int:
    """The helper: compile the kernels of ``argv[0]``'s variant with ``argv[1]``'s trees, in
    order, while the command (process ``argv[3]``) is its parent (an orphan's parent is another
    process); nothing where this process imported another copy of specsim than ``argv[2]``, the
    command's."""
    if len(argv) != 4 or argv[0] not in VARIANTS or argv[1] not in TREES or \
            os.path.realpath(argv[2]) != os.path.realpath(_PACKAGE):
        return 0
    parent = int(argv[3]) if argv[3].isdigit() else -1
    if os.getppid() != parent:
        return 0
    threading.Thread(target=_watch, args=(parent,), daemon=True, name="specsim-compile-ahead-watch").start()
    named = _types()
    for module, name, args, _ in kernels(argv[0], argv[1]):
        if os.getppid() != parent:
            return 0
        kernel = getattr(importlib.import_module(f"specsim.{module}"), name)
        kernel.compile(tuple(named[a] for a in args))
    return 0


def _watch(parent: int) -> None:
    """End this helper at once when the command (process ``parent``) is gone: it became another
    process's child. Numba's compile releases the GIL in LLVM, so this thread runs between."""
    while os.getppid() == parent:
        time.sleep(WATCH_S)
    os._exit(0)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
