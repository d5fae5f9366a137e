"""A fleet of R replicas on a trace at R times its rate against one replica on the plain trace:
CPU time of ``simulate_fleet`` (best of ``--rounds``, interleaved) and its ratio to one replica's.

Two readings of "R times its rate": the trace's own requests arriving R times as fast
(``--rate-scale R``: the same work, spread over R replicas), and R copies of the trace merged,
copy k shifted by k / R of the mean gap between arrivals (R times the requests: each replica
serves about the plain trace's load, so R is the linear cost).

    python -m benchmarks.fleet_scale --trace TRACE --inputs DIR [--replicas 64] [--policy fixed:3]

``DIR`` holds the ``table.toml`` and ``calibration.toml`` that ``specsim demo --requests 300`` wrote.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path


def measure(trace, inputs, replicas=64, policy="fixed:3", rounds=3) -> dict:
    """``{"one": s, "fleet": s, "tiled": s, "ratio": fleet / one, "tiled_ratio": tiled / one}``:
    best CPU seconds."""
    import numpy as np

    from specsim.calibration import AcceptanceCalibration
    from specsim.sim.fleet import Fleet, simulate_fleet
    from specsim.table import CostTable
    from specsim.traces import read_trace

    table = CostTable.load(inputs / "table.toml")
    cal = AcceptanceCalibration.load(inputs / "calibration.toml")
    plain = read_trace(trace).requests
    fast = read_trace(trace, rate_scale=float(replicas)).requests
    gap = float(plain["arrival_s"][-1] - plain["arrival_s"][0]) / max(plain.shape[0] - 1, 1)
    copies = []
    for k in range(replicas):
        c = plain.copy()
        c["arrival_s"] += k * gap / replicas
        copies.append(c)
    tiled = np.concatenate(copies)
    tiled = tiled[np.argsort(tiled["arrival_s"], kind="stable")]
    one, many = Fleet.uniform(table, cal, 1), Fleet.uniform(table, cal, replicas)
    simulate_fleet(plain[:200], one, policy)  # load the compiled kernels
    simulate_fleet(fast[:200], many, policy)
    best = {"one": float("inf"), "fleet": float("inf"), "tiled": float("inf")}
    for _ in range(rounds):
        for name, reqs, fleet in (("one", plain, one), ("fleet", fast, many), ("tiled", tiled, many)):
            t0 = time.process_time()
            simulate_fleet(reqs, fleet, policy)
            best[name] = min(best[name], time.process_time() - t0)
    best["ratio"] = best["fleet"] / best["one"]
    best["tiled_ratio"] = best["tiled"] / best["one"]
    return best


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.fleet_scale", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trace", required=True)
    ap.add_argument("--inputs", required=True, type=Path)
    ap.add_argument("--replicas", type=int, default=64)
    ap.add_argument("--policy", default="fixed:3")
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args(argv)
    got = measure(args.trace, args.inputs, args.replicas, args.policy, args.rounds)
    print(f"one replica, plain trace: {got['one'] * 1000:.0f} ms CPU; {args.replicas} replicas at "
          f"{args.replicas}x the rate: {got['fleet'] * 1000:.0f} ms CPU; ratio {got['ratio']:.2f} "
          f"(target <= {args.replicas}); {args.replicas} copies merged on {args.replicas} replicas: "
          f"{got['tiled'] * 1000:.0f} ms CPU; ratio {got['tiled_ratio']:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
