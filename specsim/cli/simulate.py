"""``specsim simulate``: serve a request trace with one or more draft-depth policies (docs/simulation.md)."""

from __future__ import annotations

import json
import sys
import warnings
from pathlib import Path

from specsim.cli._common import add_policy_inputs, float_list, require_matplotlib, slack, whole
from specsim.cli._server import add_server_options, server_options, warn_placeholder_prefill
from specsim.cli._slo import add_slo_options, slo_from_args
from specsim.cli.trace import add_trace_options, trace_from_args as read
from specsim.errors import SimulationError, TraceError, TraceWarning
from specsim import __version__
from specsim._checks import check_finite_results, request_size_problem
from specsim._io import Outputs
from specsim._progress import Progress
from specsim.calibration import AcceptanceCalibration
from specsim.cli.replay import _only_trace
from specsim.interop import read_policy
from specsim.policy.policy import policy_runs
from specsim.sim.engine import request_columns, simulate_runs
from specsim.sim.options import ServerOptions
from specsim.sim.metrics import overload_lines, requests_csv, summarize
from specsim.sim.replay import load_acceptance_file
from specsim.sim.report import comparison_table, plot
from specsim.sim.verdict import mark_same_runs, reruns, verdicts as verdicts_of
from specsim.table import CostTable
from specsim.traces import summary as trace_summary


def register(sub, groups):
    p = sub.add_parser(
        "simulate",
        help="serve a request trace with draft-depth policies: throughput, energy, latency",
        description="Run a request trace through a serving engine that schedules as vLLM does (a token budget "
                    "per step shared by decodes, their drafts and chunks of prefill; a KV cache in blocks with "
                    "preemption), whose step costs come from a cost table and whose draft outcomes come from an "
                    "acceptance calibration. Every policy meets the same draft outcomes (common random numbers). "
                    "propose and sequence run once per --slack; the others once. Cost options left unset take the "
                    "table's [meta] values (specsim table model writes them). See docs/simulation.md.",
    )
    p.add_argument("--trace", metavar="FILE", help="request trace (format detected from the file unless --format)")
    add_trace_options(p)
    p.add_argument("--table", required=True, metavar="T", help="cost table TOML")
    p.add_argument("--calibration", required=True, metavar="C", help="acceptance calibration TOML")
    p.add_argument("--policy", required=True, action="append", metavar="P",
                   help="fixed:K, schedule:1-16=3,17-64=2,65-=0, propose, sequence, goodput, load-aware, a draft tree "
                        "(tree:N, tree:N,D, tree:auto; the calibration's [tree] table), an engine config "
                        "(vllm:FILE, trtllm:FILE, sglang:FILE) or SGLang's controller sglang-adaptive:FILE (repeat to "
                        "compare)")
    p.add_argument("--slack", type=slack, action="append", metavar="S",
                   help="planner slack in [0, 1) for propose and sequence (repeat to sweep; default 0)")
    add_server_options(p)
    p.add_argument("--seed", type=whole, default=0, metavar="N", help="seed of the draft outcomes (default 0)")
    p.add_argument("--occupancy", type=float_list, metavar="W1,W2,...",
                   help="confidence-bucket weights of every draft (default: per position, the maximum-entropy mix "
                        "whose mean acceptance is the calibration's prior)")
    p.add_argument("--acceptance", metavar="FILE",
                   help="draw draft outcomes from a logged acceptance trace in FILE (docs/replay.md) instead of the calibration")
    p.add_argument("--acceptance-trace", metavar="NAME", help="with --acceptance: the [[trace]] to replay")
    add_slo_options(p)
    p.add_argument("--json", metavar="OUT", help="write the summaries and the run's inputs as JSON")
    p.add_argument("--requests-csv", metavar="OUT", help="write per-request times of every policy as CSV")
    p.add_argument("--plot", metavar="OUT",
                   help="draw J/token vs tok/s, latency and queueing CDFs, depth and KV use over time (matplotlib)")
    p.add_argument("--quiet", action="store_true", help="no progress line")
    p.set_defaults(func=cmd_simulate)


def cmd_simulate(args):
    with Outputs({"--trace": args.trace, "--table": args.table, "--calibration": args.calibration,
                  "--acceptance": args.acceptance, "--prefill-curve": args.prefill_curve}) as out:
        add_policy_inputs(out, args.policy)
        out.declare(args.json, "--json")
        out.declare(args.requests_csv, "--requests-csv")
        if out.declare(args.plot, "--plot"):
            require_matplotlib("--plot", args.plot)
        _simulate(args, out)
    for path in out.written:
        print(f"wrote {path}", file=sys.stderr)
    return 0


def _simulate(args, out):
    # A trace of millions of requests takes seconds to read or generate: a live line past a second.
    with Progress(0, "trace", enabled=not args.quiet, unit="requests", live=True, delay_s=1.0) as bar:
        read = trace_from_args(args)
        bar.update(int(read.requests.shape[0]))
    too_big = request_size_problem(read.requests["prompt_tokens"], read.requests["output_tokens"])
    if too_big:
        raise SimulationError(f"{read.source}: {too_big}")
    table = CostTable.load(args.table)
    cal = AcceptanceCalibration.load(args.calibration)
    slacks = args.slack or [0.0]
    plan = policy_runs([read_policy(p) for p in args.policy], slacks)
    base = ServerOptions(**server_options(args), seed=args.seed, occupancy=args.occupancy)
    slo = slo_from_args(args)
    acceptance = _acceptance(args)
    warn_placeholder_prefill(base, table, "simulate")
    n_req = int(read.requests.shape[0])
    columns = request_columns(read.requests)  # one copy for the policies and the verdicts' reruns
    total = n_req * len(plan)
    with Progress(total, "simulate", enabled=not args.quiet and total >= 200_000, unit="requests", live=True) as bar, \
            warnings.catch_warnings():
        # Said once above; the threads would repeat it per policy.
        warnings.simplefilter("ignore", TraceWarning)
        results = simulate_runs(columns, table, cal, plan, base, progress=bar, acceptance=acceptance)
    import numpy as np

    with np.errstate(over="ignore", invalid="ignore"), \
            Progress(len(results), "summaries", enabled=not args.quiet and total >= 200_000, live=True) as bar:
        summaries = []
        for i in range(len(results)):  # an overflow is refused just below, by name
            summaries.append(summarize(results[i], slo))
            bar.update()
    check_finite_results({s["label"]: s for s in summaries},
                         f"the costs: the table {args.table}, --prefill-ms-per-token {args.prefill_ms_per_token!r}, "
                         f"--prefill-j-per-token {args.prefill_j_per_token!r} and --idle-w {args.idle_w!r} "
                         "(times or joules too large to add up)", SimulationError)
    print(f"{read.source} ({read.format}): {n_req} requests, {int(read.requests['output_tokens'].sum())} output "
          f"tokens over {read.span_s:.1f} s; table {table.key.box_class} / {table.key.recipe}")
    mark_same_runs(results, summaries)
    print(comparison_table(summaries))
    for line in overload_lines(summaries):
        print(line)
    # The verdicts' reruns on a long trace take as long as the policies did: they report too.
    rerun = reruns(columns, table, cal, results, base, slo, acceptance,
                   progress=lambda total: Progress(total, "verdicts", enabled=not args.quiet and n_req >= 200_000,
                                                   unit="requests", live=True))
    run_options = results[0].options
    if not (args.requests_csv or args.plot):
        del results  # their per-request times are summarised: the reruns' memory, not theirs
    verdicts = [v for v in verdicts_of(("lowest energy", "lowest p99 TPOT"), summaries, rerun, args.seed)
                if v is not None]
    for v in verdicts:
        print(v["line"])
    if args.json:
        doc = {
            "policies": summaries,
            "verdicts": [{k: v for k, v in x.items() if k != "line"} for x in verdicts],
            "trace": trace_summary(read),
            "table": {"file": Path(args.table).name, "box_class": table.key.box_class, "recipe": table.key.recipe,
                      "widths": table.widths.tolist(), "max_k": table.max_k},
            "calibration": {"file": Path(args.calibration).name, "edges": [float(e) for e in cal.edges],
                            "p_accept": cal.p_accept.tolist(), "prior_by_position": cal.priors.tolist()},
            "options": {k: v for k, v in run_options.items() if k != "slack"} | {"slacks": slacks},
            "slo": {"ttft_s": args.slo_ttft_s, "tpot_s": args.slo_tpot_s},
            "specsim_version": __version__,
        }
        out.text(args.json, json.dumps(doc, indent=2, allow_nan=False) + "\n")
    if args.requests_csv:
        out.text(args.requests_csv, requests_csv(results))
    if args.plot:
        plot(results, summaries, out.path(args.plot))


def _acceptance(args):
    if args.acceptance is None:
        if args.acceptance_trace is not None:
            raise TraceError("--acceptance-trace needs --acceptance FILE")
        return None
    afile = load_acceptance_file(args.acceptance)
    if args.acceptance_trace is None:
        args.acceptance_trace = _only_trace(afile, "--acceptance-trace")
    trace = afile.trace(args.acceptance_trace)
    if trace.above_k_logged:
        print(f"specsim: warning: acceptance trace {trace.name!r}: {trace.above_k_logged} entries exceed k_logged = "
              f"{trace.k_logged}; they count as {trace.k_logged}", file=sys.stderr)
    return trace


def trace_from_args(args):
    return read(args, args.trace)
