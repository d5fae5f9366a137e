"""``specsim capacity``: the fewest replicas per policy that meet an SLO, and what a token costs
(see docs/fleets.md)."""

from __future__ import annotations

import json
import sys

from specsim.cli._common import add_policy_inputs, count, nonneg_float, require_matplotlib, slack, whole
from specsim.cli._server import add_server_options, server_options, warn_placeholder_prefill
from specsim.cli._slo import add_slo_options, slo_from_args
from specsim.cli.trace import add_trace_options, trace_from_args
from specsim import __version__
from specsim._checks import MIN_WINDOW_REQUESTS, int_problem
from specsim._executor import ExecutorChoice, ExecutorError, check_scheduler, check_workers, have_dask
from specsim._io import Outputs
from specsim._text import format_grid
from specsim.calibration import AcceptanceCalibration
from specsim.sim.options import ServerOptions
from specsim.sim.fleet import MAX_REPLICAS, Fleet, FleetError, ROUTERS, load_fleet
from specsim.studies.capacity import (
    CapacityError, DEFAULT_MAX_REPLICAS, DEFAULT_ROUTER, DEFAULT_SEEDS, DEFAULT_WINDOWS, Resampling, capacity,
    check_resampling, progress_line,
)
from specsim.studies.inputs import StudyInputs
from specsim.table import CostTable
from specsim.traces import summary as trace_summary


def register(sub, groups):
    p = sub.add_parser(
        "capacity",
        help="the fewest replicas per policy that meet an SLO; tokens/s per GPU, J/token, $ per million tokens",
        description="For each policy, find the fewest replicas (behind a router) whose SLO attainment on the trace "
                    "meets the target: galloping then bisection over the fleet size, checked one size above the "
                    "answer. Plain decoding (fixed:0) is always sized, as the baseline of the savings. Probes run "
                    "on a local Dask cluster (default when dask.distributed is installed), an existing one "
                    "(--scheduler) or serially (--serial).",
    )
    p.add_argument("--trace", metavar="FILE", help="request trace (format detected from the file unless --format)")
    add_trace_options(p)
    p.add_argument("--table", metavar="T", help="one replica's cost table TOML (with --calibration)")
    p.add_argument("--calibration", metavar="C", help="one replica's acceptance calibration TOML")
    p.add_argument("--fleet", metavar="FILE", help="fleet TOML: replica groups; the search multiplies the whole mix")
    add_gpus_option(p)
    p.add_argument("--policy", required=True, action="append", metavar="P",
                   help="fixed:K, schedule:..., propose, sequence, goodput, load-aware, ENGINE:FILE or sglang-adaptive:FILE "
                        "(repeat to compare)")
    p.add_argument("--slack", type=slack, default=0.0, metavar="S", help="planner slack for propose and sequence")
    add_slo_options(p, targets="(seconds)", attainment="fraction of requests that must meet both targets (default 0.99)",
                    default=0.99)
    p.add_argument("--router", choices=ROUTERS, default=None,
                   help=f"how requests are spread (default: the fleet file's, else {DEFAULT_ROUTER})")
    p.add_argument("--max-replicas", type=count, default=DEFAULT_MAX_REPLICAS, metavar="R",
                   help=f"largest fleet to try (default {DEFAULT_MAX_REPLICAS})")
    p.add_argument("--gpu-hour-usd", type=nonneg_float, metavar="X",
                   help="price of one GPU-hour (0 to 1,000,000 dollars), for $ per million tokens")
    add_server_options(p, replica=True)
    p.add_argument("--seed", type=whole, default=0, metavar="N", help="seed of the draft outcomes (default 0)")
    p.add_argument("--seeds", type=count, default=DEFAULT_SEEDS, metavar="N",
                   help=f"draft-outcome seeds per probe, from --seed on (default {DEFAULT_SEEDS}): a size meets the "
                        "target when its attainment's 95%% interval (Wilson over requests x seeds) does")
    p.add_argument("--resample-windows", type=whole, metavar="N",
                   help="also run every probe on N traces resampled from the trace's time windows (N >= 2) and "
                        "widen the interval by the spread of their attainments (off by default; see docs/fleets.md)")
    p.add_argument("--window-count", type=whole, metavar="W",
                   help=f"time windows the trace is cut into for --resample-windows (default {DEFAULT_WINDOWS}; "
                        f"2 .. requests / {MIN_WINDOW_REQUESTS})")
    p.add_argument("--scheduler", metavar="ADDRESS", help="a running Dask scheduler, e.g. tcp://10.0.0.5:8786")
    p.add_argument("--workers", type=count, default=None, help="worker processes of the local cluster (default: CPUs)")
    p.add_argument("--serial", action="store_true", help="run the probes in this process, without Dask")
    p.add_argument("--threads", type=count, metavar="N",
                   help="run the probes on N threads of this process, without Dask (the kernels release the GIL)")
    p.add_argument("--json", metavar="OUT", help="write the answers, every probe and the inputs as JSON")
    p.add_argument("--plot", metavar="PNG", help="attainment against replicas, one line per policy (matplotlib)")
    p.add_argument("--quiet", action="store_true", help="no progress line")
    p.set_defaults(func=cmd_capacity)


def cmd_capacity(args):
    if args.fleet is None and (args.table is None or args.calibration is None):
        raise CapacityError("give --table and --calibration (one replica), or --fleet FILE")
    if args.fleet is not None and (args.table is not None or args.calibration is not None):
        raise CapacityError("give either --fleet or --table with --calibration, not both")
    if args.slo_ttft_s is None and args.slo_tpot_s is None:
        raise CapacityError("give an SLO: --slo-ttft-s, --slo-tpot-s, or both")
    slo_from_args(args, CapacityError)
    if sum(map(bool, (args.serial, args.threads is not None, args.scheduler))) > 1:
        raise CapacityError("choose one of --serial, --threads N and --scheduler ADDRESS")
    _check_executor(args)
    with Outputs({"--trace": args.trace, "--table": args.table, "--calibration": args.calibration,
                  "--fleet": args.fleet, "--prefill-curve": args.prefill_curve}) as out:
        add_policy_inputs(out, args.policy)
        out.declare(args.json, "--json")
        if out.declare(args.plot, "--plot"):
            require_matplotlib("--plot", args.plot)
        fleet, read = _inputs(args, out)
        check_resampling(args.resample_windows, args.window_count, int(read.requests.shape[0]),
                         ("--resample-windows", "--window-count"))
        result = _search(args, fleet, read)
        print(capacity_table(result))
        if args.json:
            out.text(args.json, json.dumps(_document(args, result, read), indent=2, allow_nan=False) + "\n")
        if args.plot:
            plot_capacity(result, out.path(args.plot))
    for path in out.written:
        print(f"wrote {path}", file=sys.stderr)
    return 0


def _check_executor(args):
    """Worker counts and the scheduler address, refused before any input is read."""
    try:
        if args.workers is not None:
            check_workers(args.workers, "--workers")
        if args.threads is not None:
            check_workers(args.threads, "--threads")
        if args.scheduler is not None:
            check_scheduler(args.scheduler)
    except ExecutorError as e:
        raise CapacityError(str(e)) from None


def add_gpus_option(p):
    """``--gpus-per-replica``, shared by ``fleet`` and ``capacity``."""
    p.add_argument("--gpus-per-replica", type=count, default=None, metavar="G",
                   help="GPUs one replica occupies, for GPU counts, tokens/s per GPU and $ per million tokens "
                        "(default: the table's [meta] tp, 1 when it names none; with --table only)")


def _inputs(args, out):
    base = server_options(args) | {"seed": args.seed}
    if args.gpus_per_replica is not None:
        if args.fleet is not None:
            raise FleetError("--gpus-per-replica is for --table: a fleet file gives each group's gpus_per_replica")
        p = int_problem(args.gpus_per_replica, "--gpus-per-replica", 1, MAX_REPLICAS, "GPUs per replica")
        if p:
            raise FleetError(p.replace(" = ", " ", 1))
    if args.fleet is not None:
        fleet = load_fleet(args.fleet, base)
        for g in fleet.groups:
            for kind, path in g.paths.items():
                out.add_input(path, f"{kind} of group {g.name!r}")
    else:
        table, opts = CostTable.load(args.table), ServerOptions(**base)
        warn_placeholder_prefill(opts, table, "capacity")
        fleet = Fleet.uniform(table, AcceptanceCalibration.load(args.calibration), 1, opts, args.gpus_per_replica)
    return fleet, trace_from_args(args, args.trace)


def _search(args, fleet, read):
    router = args.router or fleet.router or DEFAULT_ROUTER
    n = int(read.requests.shape[0])
    print(f"{read.source} ({read.format}): {n} requests, {int(read.requests['output_tokens'].sum())} output tokens "
          f"over {read.span_s:.1f} s; unit: {fleet.replicas} replica(s), {fleet.gpus} GPU(s); router {router}",
          file=sys.stderr)
    inputs = StudyInputs(read.requests, slo=slo_from_args(args, CapacityError), seeds=args.seeds, fleet=fleet)
    resampling = None if args.resample_windows is None else Resampling(args.resample_windows, args.window_count)
    return capacity(inputs, args.policy, slack=args.slack, router=router, max_replicas=args.max_replicas,
                    gpu_hour_usd=args.gpu_hour_usd, executor=_executor(args),
                    progress=progress_line(enabled=not args.quiet), resampling=resampling)


def _executor(args):
    """Where the probes run: ``--threads N``, ``--serial``, else Dask (``--scheduler``, or a local
    cluster of ``--workers``) when it is installed, serially with a note when it is not."""
    if args.threads is not None:
        return ExecutorChoice("threads", args.threads)
    if args.serial:
        return "serial"
    if not have_dask():
        print("specsim capacity: dask.distributed is not installed: probing serially "
              "(pip install 'specsim-llm[dist]' to spread probes over workers)", file=sys.stderr)
        return "serial"
    return ExecutorChoice("dask", args.workers, args.scheduler)


def _f(value, spec):
    return "-" if value is None else format(value, spec)


def capacity_table(result) -> str:
    """The policies side by side."""
    interval_head = "95% interval" + ("*" if result.window_resamples else "")
    header = ["policy", "replicas", "GPUs", "attain", interval_head, "tok/s/GPU", "J/tok", "GPU-h/Mtok", "$/Mtok", "GPU saving",
              "J saving", "checked"]
    rows = []
    for p in result.policies:
        interval = "-" if p.attainment_low is None else f"{100 * p.attainment_low:.2f}-{100 * p.attainment_high:.2f}%"
        rows.append([p.label, str(p.replicas), str(p.gpus), _f(p.attainment, ".2%"), interval,
                     _f(p.tokens_per_s_per_gpu, ".1f"), _f(p.j_per_token, ".4f"), _f(p.gpu_hours_per_mtok, ".3f"), _f(p.usd_per_mtok, ".2f"),
                     _f(p.gpu_saving, ".1%"), _f(p.energy_saving, ".1%"),
                     {True: "yes", False: "NON-MONOTONE", None: "at cap"}[p.monotone_at_boundary]])
    slo = ", ".join(f"{k} <= {v:g} s" for k, v in (("TTFT", result.slo_ttft_s), ("TPOT", result.slo_tpot_s))
                    if v is not None)
    note = (f"\n(target: {result.target:.2%} of requests with {slo}, met when the 95% interval's low end reaches it "
            f"over {result.seeds} draft-outcome seed(s); router {result.router}; savings against fixed:0; checked: one "
            "unit more also meets the target, a unit being one replica or the fleet file's mix)")
    if result.window_resamples:
        note += (f"\n(*: the interval includes window resampling: {result.interval_includes}; widened by t95 x the sd "
                 "of the attainment over the resampled traces)")
    for w in result.warnings:
        note += f"\nwarning: {w}"
    bad = [p.label for p in result.policies if p.monotone_at_boundary is False]
    if bad:
        note += (f"\nwarning: for {', '.join(bad)} one unit more missed the target: attainment is not monotone "
                 "in replicas here, so read that answer with care")
    for line in overload_probe_lines(result):
        note += "\n" + line
    return format_grid(header, rows) + note


def overload_probe_lines(result) -> list:
    """One line per policy whose probes overloaded the fleet (queueing grew through the run)."""
    lines = []
    for p in result.policies:
        over = [q for q in p.probes if q.overloaded]
        if over:
            sizes = ", ".join(f"{q.replicas} ({q.queue_growth:.3f})" for q in over)
            lines.append(f"overloaded: {p.label} at replicas {sizes}: queueing delay grew (s per s of arrivals, in "
                         "brackets) through the run, so those probes' attainment measures a backlog")
    return lines


def _document(args, result, read) -> dict:
    doc = result.to_dict()
    doc.update({"trace": trace_summary(read), "specsim_version": __version__,
                "inputs": {"table": args.table, "calibration": args.calibration, "fleet": args.fleet}})
    return doc


def plot_capacity(result, path) -> None:
    """Attainment against replicas with each probe's 95% interval as a band, one line per policy,
    the target as a dashed line and each policy's answer marked; the legend sits outside the axes."""
    import matplotlib  # optional (the plot extra): loaded only when a figure is drawn

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    fig, ax = plt.subplots(figsize=(8, 5))
    for p in result.policies:
        xs = [q.replicas for q in p.probes]
        ys = [q.attainment for q in p.probes]
        (line,) = ax.plot(xs, ys, marker="o", label=f"{p.label}: {p.replicas}")
        lows = [q.interval[0] for q in p.probes]
        highs = [q.interval[1] for q in p.probes]
        ax.fill_between(xs, lows, highs, color=line.get_color(), alpha=0.15, linewidth=0)
        ax.plot([p.replicas], [p.attainment], marker="*", markersize=14, color=line.get_color())
    ax.axhline(result.target, linestyle="--", color="grey", label=f"target {result.target:g}")
    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda x, _: f"{x:g}"))  # 8, not 2^3
    ax.set_xlabel("replicas")
    ax.set_ylabel("SLO attainment")
    ax.set_title("SLO attainment against fleet size, 95% intervals shaded\n(star: fewest replicas whose interval "
                 "clears the target)", fontsize=10)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
