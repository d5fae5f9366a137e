"""What context pricing changes: the Azure 2023 conversation hour and the Mooncake conversation
trace on a modelled H200 table with a context axis, priced at each step's batch context and at
the table's reference context (docs/simulation.md, "Context pricing: what it changes").

Run: ``python -m benchmarks.context_pricing [--out FILE.md]`` from the repository root (the
traces are in tests/data). Prints one markdown table per trace: for each fixed depth and for
``propose``, throughput (output tokens / makespan), TPOT p99 and J/token with context pricing on
and off, and the best fixed depth by TPOT p99 and by J/token for each. Everything is modelled (the
roofline table, the demo's EAGLE calibration): the figures compare pricing rules, they are not
measurements of a GPU.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TRACES = {
    "Azure 2023 conversation hour": ROOT / "tests/data/traces/azure2023/AzureLLMInferenceTrace_conv.csv",
    "Mooncake conversation (first 1,000 requests)": ROOT / "tests/data/traces/mooncake/conversation_trace.jsonl",
}
CONTEXTS = (512, 2048, 8192, 16384)
REFERENCE = 2048
# The widest width whose KV cache fits at the longest context (48 x 16,384 tokens on an H200).
WIDTHS = (1, 2, 4, 8, 16, 32, 48)
MAX_K = 5


def context_table():
    """The modelled H200 / Llama-3.1-8B / EAGLE-1L table at every context of CONTEXTS."""
    from specsim.costmodel import model_table
    from specsim.table import CostTable

    tables = {c: model_table("h200", "llama-3.1-8b", "eagle-1l", context_tokens=c, widths=WIDTHS, max_k=MAX_K)
              for c in CONTEXTS}
    return CostTable.from_contexts(tables, reference=REFERENCE)


def run(trace_path, table, cal):
    from specsim.sim import simulate
    from specsim.sim.metrics import summarize
    from specsim.traces import read_trace

    reqs = read_trace(trace_path).requests
    rows = {}
    for policy in [f"fixed:{k}" for k in range(MAX_K + 1)] + ["propose"]:
        for on in (True, False):
            res = simulate(reqs, table, cal, policy, context_pricing=on)
            s = summarize(res)
            rows[(policy, on)] = (s["tokens_per_s"], s["tpot_s"]["p99"], s["j_per_token"],
                                  res.kv["mean_decode_context"])
    return len(reqs), rows


def render(name, count, rows) -> str:
    lines = [f"**{name}** ({count:,} requests)", "",
             "| policy | tok/s on | tok/s off | TPOT p99 ms on | TPOT p99 ms off | J/token on | J/token off |",
             "|---|---|---|---|---|---|---|"]
    policies = sorted({p for p, _ in rows}, key=lambda p: (p == "propose", p))
    for p in policies:
        a, b = rows[(p, True)], rows[(p, False)]
        lines.append(f"| {p} | {a[0]:,.0f} | {b[0]:,.0f} | {1e3 * a[1]:.2f} | {1e3 * b[1]:.2f} | {a[2]:.3f} | "
                     f"{b[2]:.3f} |")
    fixed = [p for p in policies if p.startswith("fixed:")]
    lines.append("")
    for on, label in ((True, "on"), (False, "off")):
        by_tpot = min(fixed, key=lambda p: rows[(p, on)][1])
        by_j = min(fixed, key=lambda p: rows[(p, on)][2])
        lines.append(f"- context pricing {label}: best fixed depth by TPOT p99 `{by_tpot}`, by J/token `{by_j}`")
    ctx = rows[("fixed:0", True)][3]
    lines.append(f"- mean decode context priced (fixed:0, pricing on): {ctx:,.0f} tokens per sequence "
                 f"(off: every step at the reference {REFERENCE:,})")
    return "\n".join(lines) + "\n"


def main(argv=None):
    from specsim.demo_inputs import demo_calibration

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", help="also write the tables to this markdown file")
    args = p.parse_args(argv)
    table, cal = context_table(), demo_calibration()
    parts = []
    for name, path in TRACES.items():
        count, rows = run(path, table, cal)
        parts.append(render(name, count, rows))
        print(parts[-1], flush=True)
    if args.out:
        Path(args.out).write_text("\n".join(parts))
    return 0


if __name__ == "__main__":
    sys.exit(main())
