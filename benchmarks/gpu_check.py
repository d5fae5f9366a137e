"""One short measured sweep on a CUDA GPU with NVML energy, validated and printed.

    python benchmarks/gpu_check.py [--recipe llama-3.1-8b] [--widths 1,8,32] [--max-k 3] [--out T.toml]

Installs nothing: it needs CuPy and nvidia-ml-py already present, and refuses clearly (exit 2)
without them or without a CUDA device. With the defaults (the llama-3.1-8b proxy, widths 1, 8, 32,
depths 0..3, 1 s energy windows) it measures 12 verify and 9 draft windows and finishes in about
a minute on an H200 (well under 5). It prints the table, the power each cell implies (J / ms),
and the idle power, then checks that the table parses back and that every figure is plausible.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

try:
    import specsim  # noqa: F401
except ImportError:  # run from a checkout without installing
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main(argv=None) -> int:
    from specsim.cli._common import int_list
    from specsim._text import format_grid
    from specsim.errors import SpecsimError
    from specsim.measure import CupyBackend, NvmlMeter, ProxyWorkload, SweepRun, SweepSettings, measure_table
    from specsim.table import CostTable

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--recipe", default="llama-3.1-8b", help="recipe file or built-in name (default llama-3.1-8b)")
    ap.add_argument("--widths", type=int_list, default=[1, 8, 32], help="batch widths (default 1,8,32)")
    ap.add_argument("--max-k", type=int, default=3, help="deepest draft depth (default 3)")
    ap.add_argument("--min-window-s", type=float, default=1.0, help="energy window per mode and cell (default 1)")
    ap.add_argument("--repeats", type=int, default=20, help="timed samples per mode and cell (default 20)")
    ap.add_argument("--device", type=int, default=0, help="CUDA device (default 0)")
    ap.add_argument("--out", help="where to write the table (default: a temporary folder)")
    args = ap.parse_args(argv)

    start = time.perf_counter()
    try:
        backend = CupyBackend(args.device)
        meter = NvmlMeter(pci_bus_ids=backend.meter_targets())
    except SpecsimError as e:
        print(f"gpu_check: cannot run: {e}", file=sys.stderr)
        return 2
    out = Path(args.out) if args.out else Path(tempfile.mkdtemp(prefix="specsim-gpu-check-")) / "table.toml"
    print(f"device {backend.device_name()} (PCI {backend.pci_bus_id()}), CuPy {backend.versions()['cupy']}, "
          f"recipe {args.recipe}, widths {args.widths}, depths 0..{args.max_k}, {args.min_window_s} s windows")
    settings = SweepSettings(min_window_s=args.min_window_s, repeats=args.repeats, warmup=3,
                             idle_s=args.min_window_s)
    try:
        workload = ProxyWorkload(args.recipe, backend)
        table = measure_table(workload, backend, meter, args.widths, args.max_k, out, settings=settings,
                              run=SweepRun(log=lambda line: print(f"  {line}")))
    except SpecsimError as e:
        print(f"gpu_check: failed: {e}", file=sys.stderr)
        return 2
    finally:
        meter.close()
    elapsed = time.perf_counter() - start

    back = CostTable.load(out)  # raises if the written file does not validate
    problems = []
    if back != table:
        problems.append("the written table does not read back to the measured one")
    if back.meta.get("energy_source") != "nvml":
        problems.append(f"energy source is {back.meta.get('energy_source')!r}, not nvml")
    idle = float(back.meta.get("idle_power_w", float("nan")))
    rows = []
    for c in back.cells:
        x = back.extras.get((c.n, c.k), {})
        verify_w = c.verify_j / c.verify_ms * 1e3
        draft_w = c.draft_j / c.draft_ms * 1e3 if c.k else float("nan")
        rows.append([c.n, c.k, f"{c.verify_ms:.3f}", f"{x.get('verify_ms_cv', 0):.3f}", f"{c.verify_j:.4f}",
                     f"{verify_w:.0f}", f"{c.draft_ms:.3f}", f"{c.draft_j:.4f}",
                     "-" if c.k == 0 else f"{draft_w:.0f}", x.get("verify_window_steps", "")])
        for what, watts in (("verify", verify_w), ("draft", draft_w)):
            if watts == watts and not (0.5 * idle <= watts <= 2000):
                problems.append(f"n={c.n} k={c.k}: {what} implies {watts:.0f} W (idle {idle:.0f} W)")
    print()
    print(format_grid(["n", "k", "verify_ms", "cv", "verify_j", "verify_W", "draft_ms", "draft_j", "draft_W",
                       "window_steps"], rows))
    print(f"\nidle power {idle:.1f} W; driver {back.meta.get('nvidia_driver')}; key digests "
          + ", ".join(f"{m}={d[:19]}..." for m, d in back.key.plan_digests.items()))
    print(f"table: {out}  ({elapsed:.1f} s in all)")
    print()
    print(out.read_text())
    if problems:
        print("gpu_check: implausible figures:\n" + "\n".join(f"  - {p}" for p in problems), file=sys.stderr)
        return 1
    print("gpu_check: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
