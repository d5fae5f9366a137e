"""Compare the speed-up ratios of the latest saved benchmark run with a baseline.

Absolute times move with the machine's load; a kernel's speed-up over its plain reference,
timed in the same run, moves far less. So a regression is a ratio that fell::

    pytest benchmarks --benchmark-only --benchmark-autosave      # save a baseline (once)
    ...change the code...
    pytest benchmarks --benchmark-only --benchmark-autosave      # save the new run
    python -m benchmarks.compare_ratios --threshold 0.25          # exit 1 if a ratio fell > 25%

Baselines are the JSON files pytest-benchmark writes under ``.benchmarks/``; by default the two
newest are compared (``--baseline FILE --current FILE`` to choose).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def ratios(path):
    """``{benchmark name: {extra-info key: value}}`` for every speed-up ratio in a saved run."""
    data = json.loads(Path(path).read_text())
    out = {}
    for bench in data.get("benchmarks", []):
        info = {k: v for k, v in bench.get("extra_info", {}).items() if k.startswith("speedup") and v}
        if info:
            out[bench["fullname"]] = info
    return out


def saved_runs(root):
    return sorted(Path(root).glob("*/*.json"), key=lambda p: p.name)


def compare(baseline, current, threshold):
    """Rows ``(name, key, old, new, change)`` and whether any ratio fell by more than ``threshold``."""
    old, new = ratios(baseline), ratios(current)
    rows, failed = [], False
    for name in sorted(set(old) & set(new)):
        for key in sorted(set(old[name]) & set(new[name])):
            a, b = old[name][key], new[name][key]
            change = b / a - 1.0
            rows.append((name, key, a, b, change))
            failed |= change < -threshold
    return rows, failed


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.compare_ratios", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--root", default=".benchmarks", help="where pytest-benchmark saved runs (default .benchmarks)")
    ap.add_argument("--baseline", help="saved run to compare against (default: the second newest)")
    ap.add_argument("--current", help="saved run to check (default: the newest)")
    ap.add_argument("--threshold", type=float, default=0.25, help="largest allowed fall of a ratio (default 0.25)")
    args = ap.parse_args(argv)
    runs = saved_runs(args.root)
    current = Path(args.current) if args.current else (runs[-1] if runs else None)
    baseline = Path(args.baseline) if args.baseline else (runs[-2] if len(runs) >= 2 else None)
    if current is None or baseline is None:
        print(f"need two saved runs under {args.root} (pytest benchmarks --benchmark-only --benchmark-autosave)",
              file=sys.stderr)
        return 2
    rows, failed = compare(baseline, current, args.threshold)
    if not rows:
        print("no speed-up ratio is common to both runs", file=sys.stderr)
        return 2
    print(f"baseline {baseline.name}  ->  current {current.name}")
    for name, key, a, b, change in rows:
        flag = "  REGRESSION" if change < -args.threshold else ""
        print(f"{change:+7.1%}  {a:10.1f} -> {b:10.1f}  {key}  {name}{flag}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
