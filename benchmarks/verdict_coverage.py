"""What stopping a verdict early costs: its rule (``look`` in specsim/sim/verdict.py) against
the fixed-seed rule on simulated paired differences.

Each trial draws ``1 + NOISE_SEEDS`` paired differences, normal with mean ``effect`` and standard
deviation 1 (the engine's paired differences in units of their own noise), and decides the
verdict both ways: every seed and the 95% interval at the end, or seed by seed with the early
looks. Prints, per effect, how often each calls the leader the winner, how often its reported
interval holds the true difference (coverage) and the seeds the early rule used on average.

    python -m benchmarks.verdict_coverage [--trials 20000]
"""

from __future__ import annotations

import argparse
import sys

import numpy as np

from specsim.sim.verdict import NOISE_SEEDS, look

EFFECTS = (-30.0, -10.0, -5.0, -3.0, -2.0, -1.5, -1.0, -0.5, 0.0, 0.5, 1.0)


def measure(trials: int, seed: int = 0) -> list:
    """Rows ``(effect, full_clear, full_coverage, early_clear, early_coverage, mean_seeds)``."""
    rng = np.random.default_rng(seed)
    n = NOISE_SEEDS + 1
    rows = []
    for effect in EFFECTS:
        d = rng.normal(effect, 1.0, size=(trials, n))
        fc = fcov = ec = ecov = seeds = 0
        for row in d:
            decision, half, _ = look(row, last=True)
            mean = row.mean()
            fc += decision == "clear"
            fcov += abs(mean - effect) <= half
            for m in range(2, n + 1):
                decision, half, _ = look(row[:m], last=m == n)
                if decision is not None:
                    break
            mean = row[:m].mean()
            ec += decision == "clear"
            ecov += abs(mean - effect) <= half
            seeds += m
        rows.append((effect, fc / trials, fcov / trials, ec / trials, ecov / trials, seeds / trials))
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.verdict_coverage", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trials", type=int, default=20_000)
    args = ap.parse_args(argv)
    print("| effect / noise | winner, every seed | coverage, every seed | winner, early stop | coverage, early stop "
          "| seeds, early stop |")
    print("|---|---|---|---|---|---|")
    for effect, fc, fcov, ec, ecov, seeds in measure(args.trials):
        print(f"| {effect:+g} | {fc:.1%} | {fcov:.1%} | {ec:.1%} | {ecov:.1%} | {seeds:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
