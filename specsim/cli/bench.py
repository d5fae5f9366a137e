"""``specsim bench``: measure a cost table; ``specsim table merge``: merge runs of one sweep."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from specsim.cli._common import context_list, count, int_list, key_name
from specsim._text import format_grid
from specsim._checks import MAX_POWER_W, MAX_SECONDS, MIN_POWER_W
from specsim._io import Outputs
from specsim.measure import SweepDevice, SweepInterrupted, SweepRun, SweepSettings, bench, context_path, merge_files
from specsim.measure.harness import partial_path


def _seconds(text):
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not 0 <= value <= MAX_SECONDS:
        raise argparse.ArgumentTypeError(f"{text!r} must be a number of seconds in 0..{MAX_SECONDS:g} (one day; "
                                         "docs/limits.md)")
    return value


def _watts(text):
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a power in watts") from None
    if not MIN_POWER_W <= value <= MAX_POWER_W:
        raise argparse.ArgumentTypeError(f"{text!r} must be a power in watts >= {MIN_POWER_W:g} and <= {MAX_POWER_W:g} "
                                         "(docs/limits.md)")
    return value


def register(sub, groups):
    p = sub.add_parser(
        "bench", help="measure a cost table: time and meter verify and draft steps at each width and depth",
        description="Measure a cost table. For every width n and depth k: time one verify step "
                    "(n sequences of k+1 rows) and the k chained draft steps, and meter their energy over a "
                    "window of repeated steps. Finished cells are kept beside OUT (e.g. table.toml.partial.jsonl) "
                    "until the table is written; --resume continues an interrupted sweep.")
    p.add_argument("--recipe", required=True, metavar="FILE|NAME",
                   help="recipe TOML, or a built-in: tiny, small, llama-3.2-1b, llama-3.1-8b, llama-3.1-70b-tp8")
    p.add_argument("--widths", required=True, type=int_list, metavar="N,N,...", help="batch widths, e.g. 1,2,4,8")
    p.add_argument("--max-k", required=True, type=count, metavar="K", help="deepest draft depth (depths 0..K)")
    p.add_argument("--contexts", type=context_list, metavar="C,C,...",
                   help="measure the grid at each of these contexts (KV tokens each sequence attends over, "
                        "ascending, e.g. 512,2048,8192): a table with a context axis (a recipe's context is "
                        "replaced by each in turn)")
    p.add_argument("--backend", choices=("numpy", "cupy"), default="numpy",
                   help="numpy: CPU, host clock; cupy: CUDA GPU, CUDA events (default numpy)")
    p.add_argument("--device", type=count, default=0, help="CUDA device for --backend cupy (default 0)")
    p.add_argument("--meter", choices=("auto", "nvml", "rapl", "assumed"), default="auto",
                   help="energy meter: auto (NVML on cupy, RAPL on numpy), nvml, rapl, assumed (default auto)")
    p.add_argument("--assume-power-w", type=_watts, metavar="W",
                   help="where no meter is readable, write joules as W watts times time (energy_source = assumed)")
    p.add_argument("--min-window-s", type=_seconds, default=1.0, metavar="S",
                   help="shortest energy window per mode and cell (default 1; NVML updates every ~10-100 ms)")
    p.add_argument("--repeats", type=count, default=20, metavar="R", help="timed samples per mode and cell (default 20)")
    p.add_argument("--warmup", type=count, default=3, metavar="W", help="untimed calls before timing (default 3)")
    p.add_argument("--cooldown-s", type=_seconds, default=0.0, metavar="S", help="pause between cells (default 0)")
    p.add_argument("--idle-s", type=_seconds, metavar="S",
                   help="length of the idle-power reading before the sweep (default: --min-window-s)")
    p.add_argument("--box-class", metavar="B", type=key_name, help="box class for the key (default: from the device name)")
    p.add_argument("--resume", action="store_true", help="continue the unfinished sweep kept beside OUT")
    p.add_argument("--quiet", action="store_true", help="no progress line")
    p.add_argument("-o", "--out", required=True, metavar="OUT.toml", help="the table to write")
    p.set_defaults(func=cmd_bench)

    m = groups["table"].add_parser("merge", help="merge runs of one sweep: the per-field median of every cell")
    m.add_argument("runs", nargs="+", metavar="RUN", help="table TOML files measured under one key and grid")
    m.add_argument("-o", "--out", required=True, metavar="OUT.toml", help="the merged table to write")
    m.set_defaults(func=cmd_merge)


def cmd_bench(args):
    # The table and its partial file are written by the sweep itself (the partial file after
    # every cell, so Ctrl-C keeps what is finished); both are checked here before any work.
    recipe = args.recipe if Path(args.recipe).is_file() else None
    out = Outputs({"--recipe": recipe})
    out.declare(args.out, "-o")
    out.declare(str(partial_path(args.out)), "the partial file of -o")
    for c in args.contexts or ():
        kept = context_path(args.out, c)
        out.declare(str(kept), f"the sweep at context {c} kept beside -o")
        out.declare(str(partial_path(kept)), f"the partial file of the sweep at context {c}")

    settings = SweepSettings(min_window_s=args.min_window_s, repeats=args.repeats, warmup=args.warmup,
                             cooldown_s=args.cooldown_s, idle_s=args.idle_s)

    def log(line):
        print(f"specsim bench: {line}", file=sys.stderr)

    try:
        table = bench(args.recipe, args.widths, args.max_k, args.out,
                      device=SweepDevice(args.backend, args.device, args.meter, args.assume_power_w),
                      settings=settings, box_class=args.box_class,
                      run=SweepRun(args.resume, not args.quiet, log), contexts=args.contexts)
    except SweepInterrupted as e:
        print(f"specsim bench: {e}", file=sys.stderr)
        return 130
    print(f"wrote {args.out}: box class {table.key.box_class}, recipe {table.key.recipe}, "
          f"energy {table.meta.get('energy_source')}")
    print(_summary(table))
    return 0


def cmd_merge(args):
    Outputs([("RUN", r) for r in args.runs]).declare(args.out, "-o")

    table = merge_files(args.runs, args.out)
    print(f"wrote {args.out}: median of {len(args.runs)} runs; widths "
          f"{', '.join(map(str, table.widths.tolist()))}; depths 0..{table.max_k}")
    return 0


def _summary(table) -> str:
    rows = []
    for c in table.cells:
        x = table.extras.get((c.n, c.k), {})
        rows.append([c.n, c.k, f"{c.verify_ms:.3f}", f"{x.get('verify_ms_cv', float('nan')):.3f}",
                     f"{c.verify_j:.4g}", f"{c.draft_ms:.3f}", f"{c.draft_j:.4g}"])
    return format_grid(["n", "k", "verify_ms", "cv", "verify_j", "draft_ms", "draft_j"], rows)
