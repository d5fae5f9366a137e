"""What serving trees costs the engine: CPU time of ``simulate`` on one trace (the Azure 2023
conversation hour), chain policies on this engine against an older commit's (the chain-only
engine before trees were served), and tree policies against chain policies on this engine.

    git archive COMMIT | tar -x -C ../old     # or a git worktree of COMMIT
    python -m benchmarks.tree_serve --old ../old --trace tests/data/traces/azure2023/AzureLLMInferenceTrace_conv.csv

Each version runs in its own process (benchmarks/cpu_worker.py, as benchmarks/engine_vs_old.py
runs them), rounds interleaved, best of ``--rounds`` CPU times. The table and calibration are
the old commit's ``specsim demo --requests 300``'s; the tree policies run on that calibration
with a ``[tree]`` table added: the rank-1 column its position priors, ranks 2..4 at 0.10, 0.05
and 0.03 (each row held to sum at most 1). Prints CPU milliseconds and the ratios.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
from pathlib import Path

import numpy as np

from benchmarks.engine_vs_old import ROOT, Worker, inputs_from

CHAINS = ("fixed:0", "fixed:3", "fixed:4", "propose", "sequence")
# (tree policy, the chain policy it is compared with): the same rows per sequence, the same planner
PAIRS = (("tree:4", "fixed:4"), ("tree:4,2", "fixed:4"), ("tree:auto", "propose"))
OPTIONS = {"max_num_seqs": 128, "k_max": 4}
RANK_TAIL = (0.10, 0.05, 0.03)


def tree_inputs(inputs: Path, out: Path) -> Path:
    """``out`` with ``inputs``' table and its calibration plus a ``[tree]`` table (the module's
    docstring)."""
    from specsim.calibration import AcceptanceCalibration

    out.mkdir(parents=True, exist_ok=True)
    shutil.copy(inputs / "table.toml", out / "table.toml")
    cal = AcceptanceCalibration.load(inputs / "calibration.toml")
    rows = []
    for p in cal.priors:
        tail = np.array(RANK_TAIL) * min(1.0, (1.0 - p) / sum(RANK_TAIL))
        rows.append([float(p), *tail.tolist()])
    (out / "calibration.toml").write_text(cal.with_rank_acceptance(np.array(rows)).render())
    return out


def measure(old_root, trace, inputs: Path, trees: Path, rounds: int):
    """``{(policy, "old"|"new"|"tree"): best CPU seconds}``: chains on the old and this engine
    (the plain calibration), trees and their chains on this engine (the calibration with trees)."""
    workers = {"old": Worker(old_root, trace, inputs), "new": Worker(ROOT, trace, inputs),
               "tree": Worker(ROOT, trace, trees)}
    plan = [(p, "old") for p in CHAINS] + [(p, "new") for p in CHAINS]
    plan += [(p, "tree") for pair in PAIRS for p in pair if (p, "tree") not in plan]
    plan = list(dict.fromkeys(plan))
    try:
        for p, w in plan:
            workers[w].ask(policy=p, options=OPTIONS, warm=True)
        best = {}
        for _ in range(rounds):
            for p, w in plan:
                cpu = workers[w].ask(policy=p, options=OPTIONS)["cpu_s"]
                best[(p, w)] = min(best.get((p, w), float("inf")), cpu)
        return best
    finally:
        for w in workers.values():
            w.close()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.tree_serve", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--old", required=True, help="a checkout of the chain-only commit")
    ap.add_argument("--trace", required=True, help="the trace (the Azure 2023 conversation hour)")
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args(argv)
    with inputs_from(args.old) as inputs, tempfile.TemporaryDirectory() as tmp:
        best = measure(args.old, args.trace, inputs, tree_inputs(inputs, Path(tmp) / "trees"), args.rounds)
    print(f"{'chain policy':14s} {'old ms':>8s} {'new ms':>8s} {'new/old':>8s}")
    for p in CHAINS:
        print(f"{p:14s} {1e3 * best[(p, 'old')]:8.1f} {1e3 * best[(p, 'new')]:8.1f} "
              f"{best[(p, 'new')] / best[(p, 'old')]:7.3f}x")
    old = sum(best[(p, "old")] for p in CHAINS)
    new = sum(best[(p, "new")] for p in CHAINS)
    print(f"{'total':14s} {1e3 * old:8.1f} {1e3 * new:8.1f} {new / old:7.3f}x")
    print(f"\n{'tree policy':14s} {'ms':>8s} {'chain':>10s} {'chain ms':>9s} {'tree/chain':>11s}")
    for tree, chain in PAIRS:
        t, c = best[(tree, "tree")], best[(chain, "tree")]
        print(f"{tree:14s} {1e3 * t:8.1f} {chain:>10s} {1e3 * c:9.1f} {t / c:10.3f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
