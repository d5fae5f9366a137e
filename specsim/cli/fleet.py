"""``specsim fleet``: serve a request trace on several replicas behind a router; the fleet's
figures and every replica's (docs/fleets.md)."""

from __future__ import annotations

import json
import sys

from specsim.cli._common import add_policy_inputs, count, slack, whole
from specsim.cli._slo import add_slo_options, slo_from_args
from specsim.cli.trace import add_trace_options
from specsim import __version__
from specsim._io import Outputs
from specsim._text import format_grid
from specsim.cli._server import add_server_options
from specsim.cli.capacity import _inputs, add_gpus_option
from specsim.sim.fleet import DEFAULT_FLEET_ROUTER, FleetError, ROUTERS, simulate_fleet
from specsim.sim.metrics import overload_lines, requests_csv as engine_csv
from specsim.sim.report import comparison_table
from specsim.traces import summary as trace_summary


def register(sub, groups):
    p = sub.add_parser(
        "fleet",
        help="serve a request trace on replicas behind a router: the fleet's and each replica's figures",
        description="Simulate R identical replicas (--table, --calibration, --replicas) or a fleet file's replica "
                    "groups (--fleet) behind a router, all in one time-ordered simulation, and report the fleet "
                    "per policy and every replica: tokens/s, J/token, utilisation, p99 TTFT and TPOT. "
                    "See docs/fleets.md.",
    )
    p.add_argument("--trace", metavar="FILE", help="request trace (format detected from the file unless --format)")
    add_trace_options(p)
    p.add_argument("--table", metavar="T", help="cost table TOML of every replica (with --calibration)")
    p.add_argument("--calibration", metavar="C", help="acceptance calibration TOML of every replica")
    p.add_argument("--replicas", type=count, default=None, metavar="R", help="identical replicas (default 1)")
    p.add_argument("--fleet", metavar="FILE", help="fleet TOML: replica groups with their own tables")
    add_gpus_option(p)
    p.add_argument("--router", choices=ROUTERS, default=None,
                   help=f"how requests are spread (default: the fleet file's, else {DEFAULT_FLEET_ROUTER})")
    p.add_argument("--policy", required=True, action="append", metavar="P",
                   help="fixed:K, schedule:..., propose, sequence, goodput, load-aware, ENGINE:FILE or sglang-adaptive:FILE "
                        "(repeat to compare)")
    p.add_argument("--slack", type=slack, default=0.0, metavar="S", help="planner slack for propose and sequence")
    add_server_options(p, replica=True)
    p.add_argument("--seed", type=whole, default=0, metavar="N", help="seed of the draft outcomes (default 0)")
    add_slo_options(p)
    p.add_argument("--json", metavar="OUT", help="write every policy's fleet summary with its per-replica rows")
    p.add_argument("--requests-csv", metavar="OUT", help="write per-request times with each request's replica")
    p.set_defaults(func=cmd_fleet)


def cmd_fleet(args):
    if args.fleet is None and (args.table is None or args.calibration is None):
        raise FleetError("give --table and --calibration (with --replicas R), or --fleet FILE")
    if args.fleet is not None and (args.table or args.calibration or args.replicas is not None):
        raise FleetError("--fleet names its own tables and replica counts: leave out --table, --calibration and "
                         "--replicas")
    if args.replicas is not None and args.replicas < 1:
        raise FleetError(f"--replicas must be >= 1, got {args.replicas}")
    with Outputs({"--trace": args.trace, "--table": args.table, "--calibration": args.calibration,
                  "--fleet": args.fleet, "--prefill-curve": args.prefill_curve}) as out:
        add_policy_inputs(out, args.policy)
        out.declare(args.json, "--json")
        out.declare(args.requests_csv, "--requests-csv")
        _run(args, out)
    for path in out.written:
        print(f"wrote {path}", file=sys.stderr)
    return 0


def _run(args, out):
    fleet, read = _inputs(args, out)
    if args.fleet is None:
        fleet = fleet.scaled(args.replicas or 1)
    router = args.router or fleet.router or DEFAULT_FLEET_ROUTER
    fleet = fleet.with_options(slack=args.slack)
    results = [simulate_fleet(read.requests, fleet, policy, router=router) for policy in args.policy]
    slo = slo_from_args(args)
    summaries = [r.summary(slo) for r in results]
    print(f"{read.source} ({read.format}): {read.requests.shape[0]} requests; {fleet.replicas} replica(s), "
          f"{fleet.gpus} GPU(s); router {router}")
    print(comparison_table(summaries))
    for line in overload_lines(summaries):
        print(line)
    for s in summaries:
        print(f"\n{s['label']}: per replica")
        print(replica_table(s["per_replica"]))
    if args.json:
        doc = {"policies": summaries, "trace": trace_summary(read), "router": router, "groups": fleet.describe(),
               "slo": {"ttft_s": args.slo_ttft_s, "tpot_s": args.slo_tpot_s}, "specsim_version": __version__}
        out.text(args.json, json.dumps(doc, indent=2, allow_nan=False) + "\n")
    if args.requests_csv:
        out.text(args.requests_csv, requests_csv(results))


def _f(value, spec):
    return "-" if value is None else format(value, spec)


def replica_table(rows) -> str:
    """Per-replica rows side by side."""
    header = ["replica", "group", "requests", "tok/s", "J/tok", "busy", "TTFT p99", "TPOT p99", "KV peak", "SLO"]
    body = [[str(r["replica"]), r["group"], str(r["requests"]), _f(r["tokens_per_s"], ".1f"),
             _f(r["j_per_token"], ".4f"), _f(r["utilisation"], ".1%"), _f(r["ttft_p99_s"], ".3f"),
             _f(r["tpot_p99_s"], ".4f"), _f(r["kv_peak"], ".0%"), _f(r["slo_attainment"], ".1%")] for r in rows]
    return format_grid(header, body)


def requests_csv(results) -> str:
    """The engine's per-request CSV of each policy's fleet, with a ``replica`` column."""
    lines = []
    for res in results:
        text = engine_csv([res.fleet]).splitlines()
        if not lines:
            lines.append(text[0] + ",replica")
        lines.extend(f"{line},{r}" for line, r in zip(text[1:], res.assignment.tolist()))
    return "\n".join(lines) + "\n"
