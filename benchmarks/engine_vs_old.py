"""This engine against an older commit's, side by side: CPU time of ``simulate`` per policy on
one trace, both versions in one run, interleaved, best of ``--rounds``.

    git worktree add ../old 5a34273
    python -m benchmarks.engine_vs_old --old ../old --trace TRACE

Each version runs in its own process (benchmarks/cpu_worker.py, with PYTHONPATH at that
checkout), times ``time.process_time`` around each call (CPU time: a shared machine's waiting is
not counted) and the rounds alternate between the versions, so a change in the machine's load
falls on both. The table and calibration are the ones the old commit's own
``specsim demo --requests 300`` writes (``--inputs DIR`` to reuse them). This version runs with
the scheduling rules off (separate prefill steps, no token budget: the old engine's rules) and on
(the defaults); the old one with its own options. Prints CPU milliseconds and ratios to the old.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
WORKER = Path(__file__).resolve().parent / "cpu_worker.py"
POLICIES = ("fixed:0", "fixed:3", "propose", "sequence")
OLD = {"max_batch": 128, "k_max": 4}  # 5a34273's names for max_num_seqs and k_max
OFF = {"max_num_seqs": 128, "k_max": 4, "chunked_prefill": False, "max_num_batched_tokens": None}
ON = {"max_num_seqs": 128, "k_max": 4}


class Worker:
    def __init__(self, root, trace, inputs):
        env = dict(os.environ, PYTHONPATH=str(root))
        # A script's own folder is first on its import path, not the working folder: the
        # checkout on PYTHONPATH is the one imported.
        self.proc = subprocess.Popen([sys.executable, str(WORKER), str(trace), str(inputs / "table.toml"),
                                      str(inputs / "calibration.toml")], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True, env=env)
        json.loads(self.proc.stdout.readline())

    def ask(self, **q):
        self.proc.stdin.write(json.dumps(q) + "\n")
        self.proc.stdin.flush()
        return json.loads(self.proc.stdout.readline())

    def close(self):
        self.proc.stdin.close()
        self.proc.wait()


def measure(old_root, trace, inputs, rounds=5, policies=POLICIES):
    """``{(policy, "old"|"off"|"on"): best CPU seconds}``."""
    old, new = Worker(old_root, trace, inputs), Worker(ROOT, trace, inputs)
    runs = (("old", old, OLD), ("off", new, OFF), ("on", new, ON))
    try:
        for p in policies:
            for _, w, o in runs:
                w.ask(policy=p, options=o, warm=True)
        best = {}
        for _ in range(rounds):
            for p in policies:
                for name, w, o in runs:
                    cpu = w.ask(policy=p, options=o)["cpu_s"]
                    best[(p, name)] = min(best.get((p, name), float("inf")), cpu)
        return best
    finally:
        old.close()
        new.close()


@contextlib.contextmanager
def inputs_from(old_root):
    """A folder with the table and calibration the old checkout's own ``specsim demo --requests
    300`` writes (removed on exit)."""
    with tempfile.TemporaryDirectory() as tmp:
        inputs = Path(tmp) / "demo"
        # From the old checkout: `-m` puts the working folder first on the import path.
        subprocess.run([sys.executable, "-m", "specsim", "demo", "--requests", "300", "--out", str(inputs)],
                       check=True, capture_output=True, cwd=old_root, env=dict(os.environ, PYTHONPATH=str(old_root)))
        yield inputs


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.engine_vs_old", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--old", required=True, help="a checkout of the older commit (a git worktree)")
    ap.add_argument("--trace", required=True, help="the trace (the Azure 2023 conversation hour)")
    ap.add_argument("--inputs", help="a folder with the old demo's table.toml and calibration.toml")
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args(argv)
    if args.inputs:
        best = measure(args.old, args.trace, Path(args.inputs), args.rounds)
    else:
        with inputs_from(args.old) as inputs:
            best = measure(args.old, args.trace, inputs, args.rounds)
    print(f"{'policy':10s} {'old ms':>8s} {'off ms':>8s} {'off/old':>8s} {'on ms':>8s} {'on/old':>7s}")
    for p in POLICIES + ("total",):
        v = {m: (sum(best[(q, m)] for q in POLICIES) if p == "total" else best[(p, m)]) for m in ("old", "off", "on")}
        print(f"{p:10s} {1e3 * v['old']:8.1f} {1e3 * v['off']:8.1f} {v['off'] / v['old']:7.2f}x "
              f"{1e3 * v['on']:8.1f} {v['on'] / v['old']:6.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
