"""What a per-request acceptance spread changes: TPOT p99 on the Azure 2023 conversation hour
with the demo's modelled table and calibration, at request spreads ``logit_sd`` = 0, 0.75 and 1.5
(docs/calibration.md#per-request-spread).

Run: ``python -m benchmarks.request_spread [--out FILE.md]`` from the repository root (the trace
is in tests/data). Prints one markdown table: for ``fixed:3``, ``fixed:5`` and ``propose``, TPOT
p50 and p99 and throughput at each spread. Everything but the trace is modelled (the roofline
table, the demo's EAGLE calibration): the figures show what the spread does to the tail, they are
not measurements of a GPU.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from specsim.calibration._types import RequestSpread
from specsim.demo_inputs import demo_calibration, demo_table
from specsim.sim import simulate
from specsim.sim.metrics import summarize
from specsim.traces import read_trace

ROOT = Path(__file__).resolve().parents[1]
TRACE = ROOT / "tests/data/traces/azure2023/AzureLLMInferenceTrace_conv.csv"
SPREADS = (0.0, 0.75, 1.5)
POLICIES = ("fixed:3", "fixed:5", "propose")


def run(trace_path=TRACE, spreads=SPREADS, policies=POLICIES, seed=0):
    """``(requests, {(policy, sd): (TPOT p50 s, TPOT p99 s, tokens/s)})``."""
    reqs = read_trace(trace_path).requests
    table, base = demo_table(), demo_calibration()
    rows = {}
    for sd in spreads:
        cal = base.with_spread(RequestSpread(sd, 0.0, 0, "benchmarks.request_spread")) if sd else base
        for policy in policies:
            s = summarize(simulate(reqs, table, cal, policy, seed=seed))
            rows[(policy, sd)] = (s["tpot_s"]["p50"], s["tpot_s"]["p99"], s["tokens_per_s"])
    return len(reqs), rows


def render(count, rows, spreads=SPREADS, policies=POLICIES) -> str:
    head = " | ".join(f"TPOT p99 ms, sd {sd:g}" for sd in spreads)
    lines = [f"**Azure 2023 conversation hour** ({count:,} requests; demo table and calibration)", "",
             f"| policy | TPOT p50 ms, sd 0 | {head} | tok/s, sd 0 | tok/s, sd {spreads[-1]:g} |",
             "|---" * (4 + len(spreads)) + "|"]
    for p in policies:
        cells = " | ".join(f"{1e3 * rows[(p, sd)][1]:.2f}" for sd in spreads)
        lines.append(f"| {p} | {1e3 * rows[(p, spreads[0])][0]:.2f} | {cells} | {rows[(p, spreads[0])][2]:,.0f} | "
                     f"{rows[(p, spreads[-1])][2]:,.0f} |")
    return "\n".join(lines) + "\n"


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", help="also write the table to this markdown file")
    args = p.parse_args(argv)
    count, rows = run()
    text = render(count, rows)
    print(text, flush=True)
    if args.out:
        Path(args.out).write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
