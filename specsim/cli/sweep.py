"""``specsim sweep``: a grid of simulations, on Dask or serially, resumable."""

from __future__ import annotations

from specsim.cli._common import count, require_matplotlib
from specsim._executor import check_scheduler, check_workers
from specsim._io import Outputs
from specsim.studies.sweep import load_grid, run_sweep
from specsim.studies.sweep.grid import point_id
from specsim.studies.sweep.plot import pareto_plot
from specsim.studies.sweep.run import best_by_traffic


def register(sub, groups):
    p = sub.add_parser(
        "sweep",
        help="run a grid of simulations (policy x slack x batch cap x traffic x seed x trace)",
        description="Cross the axes of GRID.toml and simulate every point, on a local Dask cluster (default), an "
                    "existing one (--scheduler) or serially. Each finished point is saved at once; points kept in "
                    "RESULTS are reused when every input they were computed from (trace content, table, calibration, "
                    "server options, policy, seed, SLO, engine version) is unchanged, so an interrupted sweep resumes "
                    "and a changed input recomputes. The grid format is in "
                    "docs/formats.md#sweep-grid.",
    )
    p.add_argument("grid", help="grid TOML (traces, tables, calibrations, [server], [slo], [axes])")
    p.add_argument("-o", "--out", required=True, metavar="RESULTS", help="results file: .csv, or .parquet (pyarrow)")
    p.add_argument("--scheduler", metavar="ADDRESS", help="a running Dask scheduler, e.g. tcp://10.0.0.5:8786")
    p.add_argument("--workers", type=count, default=None, help="worker processes of the local cluster (default: CPUs)")
    p.add_argument("--serial", action="store_true", help="run in this process, without Dask")
    p.add_argument("--plot", metavar="PNG", help="Pareto plot: J/token vs tokens/s, p99 TPOT as colour, one panel per traffic level (matplotlib)")
    p.add_argument("--quiet", action="store_true", help="no progress line")
    p.set_defaults(func=cmd_sweep)


def cmd_sweep(args):
    if args.workers is not None:
        check_workers(args.workers, "--workers")
    if args.scheduler is not None:
        check_scheduler(args.scheduler)
    if args.plot:
        require_matplotlib()
    grid = load_grid(args.grid)
    inputs = [("GRID", args.grid)] + [(f"[traces] {n}", p) for n, (p, _) in grid.traces.items()]
    inputs += [(f"[tables] {n}", p) for n, p in grid.tables.items()]
    inputs += [(f"[calibrations] {n}", p) for n, p in grid.calibrations.items()]
    # The results file is rewritten (atomically) after every point, so an interrupted sweep
    # keeps what is finished; the plot is written once, at the end.
    with Outputs(inputs) as out:
        out.declare(args.out, "-o")
        out.declare(args.plot, "--plot")
        if args.plot:
            require_matplotlib("--plot", args.plot)  # a format matplotlib writes, before the work
        report = run_sweep(grid, args.out, scheduler=args.scheduler, workers=args.workers, serial=args.serial,
                           progress=not args.quiet)
        print(f"{report.total} points: {report.computed} computed, {report.skipped} reused (inputs unchanged)"
              + (f", {report.stale} recomputed because an input changed" if report.stale else "") + "; "
              f"{report.seconds:.1f} s on {report.workers} worker(s); results in {report.out}")
        # The rows the sweep left in the file, as it holds them: reading the file back would check
        # every row again (seconds for a file of 100,000 rows).
        ids = {point_id(p) for p in grid.points}
        rows = [r for r in report.rows if r["point_id"] in ids]
        over = [r for r in rows if r.get("overload_flag") is True]
        if over:
            worst = max(over, key=lambda r: r["overload_growth"])
            print(f"overloaded: {len(over)} of {len(rows)} points (column overload_flag): queueing delay grew "
                  f"through the run, up to {worst['overload_growth']:.3f} s per s of arrivals ({worst['label']}, "
                  f"point {worst['point_id']}); their latency percentiles measure the backlog")
        for line in best_by_traffic(grid, report.rows):
            print(line)
        groups = {}
        for r in rows:
            if r.get("run_digest"):
                groups.setdefault(r["run_digest"], []).append(r)
        for same in groups.values():
            if len({r["label"] for r in same}) > 1:
                print(f"same run: {' = '.join(dict.fromkeys(r['label'] for r in same))} (points "
                      f"{', '.join(r['point_id'] for r in same)}): the same depth at every width they met")
        if args.plot:
            pareto_plot(rows, out.path(args.plot))
    if args.plot:
        print(f"plot written to {args.plot}")
    return 0
