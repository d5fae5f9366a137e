"""``specsim tune``: search a width -> depth schedule on a request trace and write it as TOML."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from specsim.cli._common import add_policy_inputs, count, share, slack
from specsim.cli._server import add_server_options, server_options, warn_placeholder_prefill
from specsim.cli._slo import add_slo_options, slo_from_args
from specsim.cli.trace import add_trace_options, trace_from_args
from specsim.errors import ScheduleError
from specsim._checks import MAX_SEEDS, MAX_WINDOWS, MIN_WINDOW_REQUESTS, show
from specsim._executor import ExecutorChoice
from specsim._io import Outputs
from specsim._text import format_grid
from specsim.calibration import AcceptanceCalibration
from specsim.plan.planner import Planner
from specsim.policy.schedule import policy_text
from specsim.sim.options import ServerOptions
from specsim.studies.inputs import StudyInputs
from specsim.studies.tune import (
    AUTO_WINDOWS, DEFAULT_ATTAINMENT, DEFAULT_HOLDOUT, DEFAULT_SEEDS, MIN_GAIN, TuneSettings, tune,
)
from specsim.table import CostTable


def register(sub, groups):
    p = sub.add_parser(
        "tune",
        help="search the batch-width -> draft-depth schedule that serves a trace best; write it as TOML",
        description="Search contiguous batch-width ranges, each with a draft depth, for the schedule with the "
                    "least energy per token (or the most tokens/s) on a request trace, subject to SLO targets. "
                    "Starts from every fixed depth, the planner's depth at every width and the goodput depth; "
                    "improves by moving range depths and boundaries; scores on several draft-outcome seeds and "
                    "checks the winner on a held-out time window with unseen seeds. See docs/schedules.md.",
    )
    p.add_argument("--trace", metavar="FILE", help="request trace (format detected from the file unless --format)")
    add_trace_options(p)
    p.add_argument("--table", required=True, metavar="T", help="cost table TOML")
    p.add_argument("--calibration", required=True, metavar="C", help="acceptance calibration TOML")
    p.add_argument("-o", "--out", required=True, metavar="SCHEDULE.toml", help="where to write the schedule")
    p.add_argument("--objective", choices=("energy", "throughput"), default="energy",
                   help="energy: least J/token (default); throughput: most output tokens/s")
    add_slo_options(p, targets="a schedule must meet", metavar="A",
                    attainment=f"share of requests that must meet the targets (default {DEFAULT_ATTAINMENT})")
    p.add_argument("--widths-max", type=count, metavar="N",
                   help="widest width with its own depth (default: the batch cap); wider batches share it")
    p.add_argument("--seeds", type=count, default=DEFAULT_SEEDS, metavar="N",
                   help=f"draft-outcome seeds per evaluation (default {DEFAULT_SEEDS}; the final check uses N others)")
    p.add_argument("--holdout", type=share, default=DEFAULT_HOLDOUT, metavar="FRAC",
                   help=f"share of the trace's span, at its end, kept for the final check (default {DEFAULT_HOLDOUT})")
    p.add_argument("--compare", action="append", default=[], metavar="P",
                   help="another policy for the final check, e.g. vllm:current.json (repeatable)")
    where = p.add_mutually_exclusive_group()
    where.add_argument("--scheduler", metavar="ADDR", help="run evaluations on this Dask scheduler (tcp://host:port)")
    where.add_argument("--threads", action="store_true", help="run evaluations in threads of this process, not Dask")
    where.add_argument("--serial", action="store_true", help="run evaluations one after another in this process")
    p.add_argument("--workers", type=count, metavar="N", help="local Dask workers or threads (default: the CPU count)")
    p.add_argument("--max-rounds", type=count, default=40, metavar="N", help="most rounds of moves (default 40)")
    p.add_argument("--min-gain", type=share, default=MIN_GAIN, metavar="G",
                   help=f"smallest relative gain a move must bring (default {MIN_GAIN:g})")
    p.add_argument("--noise-windows", type=_noise_windows, default="auto", metavar="W",
                   help=f"cut the training part into W time windows (2..{MAX_WINDOWS}, each of {MIN_WINDOW_REQUESTS} "
                        "requests or more) and accept a move only when its mean "
                        "gain over the (seed, window) pairs clears t95 x its standard error as well as --min-gain; "
                        f"auto (the default): {AUTO_WINDOWS}, fewer on a short trace; off: no time windows")
    p.add_argument("--slack", type=slack, default=0.0, metavar="S",
                   help="planner slack for the propose start and comparison (default 0)")
    add_server_options(p)
    p.add_argument("--seed", type=count, default=0, metavar="N", help="first draft-outcome seed (default 0)")
    p.add_argument("--allow-overload", action="store_true",
                   help="write a schedule even when it overloads the server (queueing grows through the training "
                        "window); by default tune refuses, naming the rate the server keeps up with")
    p.add_argument("--trees", action="store_true",
                   help="also weigh the static trees an engine can serve (tree:2 .. tree:16, within k_max) against "
                        "the chain schedule, and what a static tree costs against tree:auto; needs a calibration "
                        "with a [tree] table (docs/schedules.md#trees)")
    p.add_argument("--quiet", action="store_true", help="no progress line")
    p.set_defaults(func=cmd_tune)


def cmd_tune(args):
    if not 1 <= args.seeds <= MAX_SEEDS:  # before any input is read
        raise ScheduleError(f"--seeds {args.seeds}: give a number of draft-outcome seeds in 1..{MAX_SEEDS}")
    with Outputs({"--trace": args.trace, "--table": args.table, "--calibration": args.calibration,
                  "--prefill-curve": args.prefill_curve}) as out:
        add_policy_inputs(out, args.compare, "--compare")
        out.declare(args.out, "-o")
        read = trace_from_args(args, args.trace)
        table = CostTable.load(args.table)
        cal = AcceptanceCalibration.load(args.calibration)
        opts = ServerOptions(**server_options(args), slack=args.slack, seed=args.seed)
        warn_placeholder_prefill(opts, table, "tune")
        kind = "serial" if args.serial else ("threads" if args.threads else "auto")
        names = {"trace": Path(args.trace).name if args.trace else read.source, "table": Path(args.table).name,
                 "calibration": Path(args.calibration).name}
        inputs = StudyInputs(read, table, cal, opts, slo_from_args(args, ScheduleError), args.seeds, names=names)
        settings = TuneSettings(widths_max=args.widths_max, holdout=args.holdout, max_rounds=args.max_rounds,
                                min_gain=args.min_gain, noise_windows=args.noise_windows)
        result = tune(inputs, args.objective, settings=settings, compare=args.compare,
                      executor=ExecutorChoice(kind, args.workers, args.scheduler), progress=not args.quiet,
                      allow_overload=args.allow_overload, trees=args.trees)
        print(report(result, read))
        if table.contexts.size:
            print(depth_by_context(result, table, cal, opts))
        out.text(args.out, result.to_toml())

    what = "the tuned schedule" if result.serves_tuned else f"{result.best_fixed}, the best fixed depth"
    print(f"wrote {args.out} ({what}: {policy_text(result.recommended)}); serve it with: "
          f"specsim schedule export {args.out} --to vllm|trtllm|sglang", file=sys.stderr)
    return 0


def _noise_windows(text):
    """``--noise-windows``: a whole number in 2..MAX_WINDOWS, ``auto`` or ``off`` (None)."""
    word = text.strip().lower()
    if word in ("auto", "off"):
        return None if word == "off" else "auto"
    try:
        value = count(text)
    except argparse.ArgumentTypeError:
        value = None
    if value is None or not 2 <= value <= MAX_WINDOWS:
        raise argparse.ArgumentTypeError(f"{show(text)}: give a number of time windows in 2..{MAX_WINDOWS} (a spread "
                                         "needs two), auto or off")
    return value


def report(result, read=None) -> str:
    """What ``specsim tune`` prints: the search, the held-out comparison and the verdict."""
    train = result.train
    unit = result.unit()
    lines = []
    if read is not None:
        r = read.requests
        held = (f"the last {100 * result.inputs['holdout']:g}% of the span held out" if result.inputs["holdout"]
                else "nothing held out (holdout 0)")
        lines.append(f"{read.source}: {r.shape[0]} requests over {read.span_s:.0f} s; {held}")
    lines.append(f"search: {result.evaluations} simulations in {result.seconds:.1f} s "
                 f"({result.evaluations_per_s:.1f}/s, {result.executor}); training: {train.mean:.5g} {unit} "
                 f"+- {train.spread:.2g} over {len(train.values)} seeds")
    if result.noise_windows:
        zigzags = sum(bool(m["zigzag"]) for m in result.rejected_moves)
        lines.append(f"moves checked over {result.noise_windows} time windows x {len(train.values)} seeds: "
                     f"{result.within_noise_moves} within-noise move(s) rejected ({zigzags} of them zig-zags)")
    lines.append(f"tuned: {result.policy}")
    lines.append(load_line(result))
    if result.overloaded:
        o = result.overloaded
        rate = "" if o["served_rate"] is None else f", about {o['served_rate']:.3g} requests/s"
        lines.append(f"overloaded: {o['policy']} kept up with about {100 * o['served_fraction']:.0f}% of the offered "
                     f"rate{rate} ({o['seeds']} seeds); written because of --allow-overload: its figures measure a "
                     "backlog")
    lines.append("")
    lines.append(f"{result.compared_on.removeprefix('the ')}, {len(train.values)} unseen seeds (+- = half the range over seeds):")
    lines.append(result.table())
    lines.append(result.verdict())
    lines.extend(result.reach_lines())
    lines.extend(result.tree_lines())
    return "\n".join(lines)


def load_line(result) -> str:
    """How the held-out window's offered load compares with the training part's."""
    train, held = result.inputs.get("train_rate"), result.inputs.get("holdout_rate")
    if result.inputs.get("holdout", 1) == 0:
        return "load: the comparison reruns the training part's" + ("" if train is None else f" {train:.3g} requests/s")
    if train is None or held is None:
        return "load: not measured (a part's arrivals span no time)"
    ratio = held / train
    words = "about the same as" if abs(ratio - 1.0) < 0.1 else ("more than" if ratio > 1 else "less than")
    return (f"load: {held:.3g} requests/s held out against {train:.3g} requests/s in training ({ratio:.2f}x: "
            f"{words} the load the schedule was tuned on)")


def depth_by_context(result, table, cal, opts) -> str:
    """How the best depth moves with context on a table with a context axis: for each width band
    of the tuned schedule, the planner's ``propose`` depth at the band's middle width at each
    measured context (docs/schedules.md, "Tuning")."""
    planner = Planner(table, cal, slack=opts.slack, max_seqs=opts.max_seqs)
    widest = int(table.widths[-1]) if opts.max_num_seqs is None else opts.max_num_seqs
    contexts = table.contexts.tolist()
    rows = []
    for lo, hi, depth in result.ranges:
        top = widest if hi is None else hi
        if lo > top:
            continue
        mid = (lo + top) // 2
        band = f"{lo}-{'' if hi is None else hi}"
        rows.append([band, mid, depth] + [planner.propose(mid, context=c) for c in contexts])
    header = ["widths", "middle", "tuned"] + [f"ctx {c}" for c in contexts]
    searched = "on" if opts.context_pricing else "off"
    return (f"best depth by context (the planner's propose at each band's middle width; the schedule was "
            f"tuned with context pricing {searched}):\n" + format_grid(header, rows))
