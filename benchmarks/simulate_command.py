"""The whole ``specsim simulate`` a user runs, this checkout against another, interleaved: wall
and CPU time (user + system, the command's process) of each run, medians over ``--rounds``.

    python -m benchmarks.simulate_command --old CHECKOUT --trace TRACE --inputs DIR

``DIR`` holds the ``table.toml`` and ``calibration.toml`` that ``specsim demo --requests 300``
wrote (benchmarks/engine_vs_old.py makes them from an old checkout); the policies are fixed:0,
fixed:3, propose and sequence, as in docs/simulation.md's "Speed". Each run is its own process
with PYTHONPATH at its checkout; the rounds alternate between the two, so a change in a shared
machine's load falls on both. Prints each pair and the medians, and checks that the two print
the same table. The runs write and read Python's bytecode cache, as an installed package's do: a
``PYTHONDONTWRITEBYTECODE`` in the calling shell is dropped for them (with it every run compiles
each of its modules from source again, which measured 0.3-0.6 s of the command's start).
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
POLICIES = ("fixed:0", "fixed:3", "propose", "sequence")


def run(root, trace, inputs) -> tuple:
    """``(wall s, CPU s, stdout)`` of one ``specsim simulate`` with ``root`` on PYTHONPATH."""
    trace, inputs = Path(trace).resolve(), Path(inputs).resolve()
    argv = [sys.executable, "-m", "specsim", "simulate", "--trace", str(trace), "--table", str(inputs / "table.toml"),
            "--calibration", str(inputs / "calibration.toml")]
    for p in POLICIES:
        argv += ["--policy", p]
    env = dict(os.environ, PYTHONPATH=str(root))
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # as a user's: modules compiled once, then read from the cache
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    # In the checkout's folder: ``python -m`` puts the working folder first on the import path.
    out = subprocess.run(argv, env=env, cwd=str(root), capture_output=True, text=True, check=True).stdout
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime), out


def table_of(text) -> list:
    """The lines of the comparison table (the verdict lines may differ in how many seeds they used)."""
    return [line for line in text.splitlines() if not line.startswith(("lowest energy:", "lowest p99 TPOT:"))]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.simulate_command", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--old", required=True, help="the other checkout")
    ap.add_argument("--trace", required=True)
    ap.add_argument("--inputs", required=True, type=Path)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args(argv)
    for root in (args.old, ROOT):  # warm the compile cache and the page cache
        run(root, args.trace, args.inputs)
    rows = {"old": [], "new": []}
    for _ in range(args.rounds):
        (ow, oc, oout), (nw, nc, nout) = run(args.old, args.trace, args.inputs), run(ROOT, args.trace, args.inputs)
        if table_of(oout) != table_of(nout):
            print("the two print different tables", file=sys.stderr)
            return 1
        rows["old"].append((ow, oc))
        rows["new"].append((nw, nc))
        print(f"old {ow:5.2f} s wall {oc:5.2f} s CPU   new {nw:5.2f} s wall {nc:5.2f} s CPU")
    for side, r in rows.items():
        print(f"{side}: median {statistics.median(w for w, _ in r):.2f} s wall, "
              f"{statistics.median(c for _, c in r):.2f} s CPU")
    print(f"new / old: wall {statistics.median(w for w, _ in rows['new']) / statistics.median(w for w, _ in rows['old']):.2f}, "
          f"CPU {statistics.median(c for _, c in rows['new']) / statistics.median(c for _, c in rows['old']):.2f}")
    for line in nout.splitlines():
        if line.startswith(("lowest energy:", "lowest p99 TPOT:")):
            print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
