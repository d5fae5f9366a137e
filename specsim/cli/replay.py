"""``specsim replay`` (acceptance-trace replay, docs/replay.md) and ``specsim table import``."""

from __future__ import annotations

import json
import sys
import warnings
from pathlib import Path

from specsim.cli._common import add_policy_inputs, count, digest_map, key_name, real, slack, widths_text
from specsim.errors import PolicyError, printable, SpecsimWarning, TableError, TraceError
from specsim._checks import check_finite_results
from specsim._io import Outputs
from specsim._progress import Progress
from specsim.calibration import AcceptanceCalibration
from specsim.measure.engine_tables import MIN_CELL_SAMPLES, import_table
from specsim.sim.replay import load_acceptance_file, replay, run_table
from specsim.table import CostTable, SCHEMA, TableKey


def register(sub, groups):
    p = sub.add_parser(
        "replay",
        help="replay a policy on a logged acceptance trace at one width until a token budget",
        description="Replay a draft-depth policy on a logged acceptance trace (docs/replay.md). Costs come from "
                    "--table, else from the file's per-depth step_ms list (no joules). propose and goodput "
                    "take their priors from --calibration, else estimate them from the trace.",
    )
    p.add_argument("file", help="acceptance file (TOML with [[trace]] entries and optionally step_ms)")
    p.add_argument("--trace", metavar="NAME",
                   help="name of the [[trace]] to replay (default: the file's only trace)")
    p.add_argument("--policy", required=True, metavar="P",
                   help="fixed:K, schedule:1-16=3,17-64=2,65-=0, propose or goodput")
    p.add_argument("--width", required=True, type=count, metavar="N", help="streams per step")
    p.add_argument("--budget", required=True, type=count, metavar="TOKENS", help="tokens to emit")
    p.add_argument("--table", metavar="T", help="cost table TOML (default: the file's step_ms list)")
    p.add_argument("--calibration", metavar="C", help="calibration TOML for propose/goodput priors")
    p.add_argument("--slack", type=slack, default=0.0, help="planner slack in [0, 1) (default 0)")
    p.add_argument("--max-seqs", type=count, metavar="M", help="planner speculation cap (default: no cap)")
    p.add_argument("--json", metavar="OUT", help="write the result as JSON to OUT")
    p.add_argument("--quiet", action="store_true", help="no progress line")
    p.set_defaults(func=cmd_replay)

    t = groups["table"].add_parser(
        "import", help="convert a measured [[run]] of cells, or an engine's telemetry, into a cost table",
        description="Convert a measured [[run]] of cells (--run NAME) or fit a table on a serving engine's "
                    "telemetry (--from trtllm-iterations|sglang-log, joules from --assume-power-w); see "
                    "docs/measure.md.")
    t.add_argument("file", nargs="+", help="TOML with [[run]] tables (name, cells = [[n, k, verify_ms, verify_j, "
                                           "draft_ms, draft_j]]), or the telemetry files (with --from)")
    source = t.add_mutually_exclusive_group(required=True)
    source.add_argument("--run", metavar="NAME", help="name of the [[run]] to convert")
    source.add_argument("--from", dest="from_format", choices=("trtllm-iterations", "sglang-log"),
                        help="fit the table on engine telemetry: TensorRT-LLM iteration stats or SGLang "
                             "`Decode batch` lines")
    t.add_argument("--assume-power-w", type=real, metavar="W",
                   help="with --from: joules are W watts times time ([meta] energy_source = assumed)")
    t.add_argument("--nvml-log", metavar="CSV",
                   help="with --from, instead of --assume-power-w: joules are the mean board power of this "
                        "nvidia-smi power log (timestamp, index, power.draw) times time")
    t.add_argument("--min-samples", type=count, metavar="N", default=None,
                   help="with --from: fewest samples a measured cell rests on (default 5)")
    t.add_argument("-o", "--output", required=True, metavar="OUT", help="cost table TOML to write")
    t.add_argument("--box-class", required=True, type=key_name, help="key: the hardware class the run was measured on")
    t.add_argument("--recipe", required=True, type=key_name, help="key: model + drafter + precision recipe id")
    t.add_argument("--digest", action="append", default=[], metavar="MODE=DIGEST",
                   help="key: plan digest of one mode (repeat per mode)")
    t.set_defaults(func=cmd_import)


def cmd_replay(args):
    with Outputs({"FILE": args.file, "--table": args.table, "--calibration": args.calibration}) as out:
        add_policy_inputs(out, [args.policy])
        out.declare(args.json, "--json")
        _replay(args, out)
    return 0


def _replay(args, out):
    afile = load_acceptance_file(args.file)
    trace = afile.trace(args.trace if args.trace is not None else _only_trace(afile, "--trace"))
    table = cal = None
    if args.table:
        table = CostTable.load(args.table)
    elif afile.step_ms is None:
        raise PolicyError(f"{args.file} has no step_ms list: give a cost table with --table")
    if args.calibration:
        cal = AcceptanceCalibration.load(args.calibration)

    with warnings.catch_warnings(record=True) as caught, \
            Progress(args.budget, "replay", enabled=not args.quiet and args.budget >= 50_000_000, unit="tokens") as bar:
        warnings.simplefilter("always", SpecsimWarning)

        def tick(tokens):
            bar.update(min(tokens, args.budget) - bar.done)

        result = replay(trace, args.policy, args.width, args.budget, table=table, step_ms=afile.step_ms,
                        calibration=cal, slack=args.slack, max_seqs=args.max_seqs, progress=tick)
    for w in caught:
        if issubclass(w.category, SpecsimWarning):
            print(f"specsim: warning: {printable(w.message, newlines=True)}", file=sys.stderr)
        else:
            warnings.showwarning(w.message, w.category, w.filename, w.lineno)
    costs = f"table {args.table}" if table is not None else "the file's step_ms list (no joules)"
    priced = f"the costs in {args.table}" if table is not None else f"the step_ms list of {args.file}"
    check_finite_results(result.to_dict(), f"{priced}, added up over {result.steps:,} steps", PolicyError)
    per_j = "unknown" if result.tokens_per_j is None else f"{result.tokens_per_j:.3f}"
    joules = "unknown" if result.joules is None else f"{result.joules:.3f}"
    print(f"trace {trace.name} (k_logged {trace.k_logged}, {trace.accepted.shape[0]} steps logged), costs from {costs}")
    print(f"policy {result.policy} at width {result.width}: depth {result.depth}")
    print(f"  {result.tokens} tokens in {result.steps} steps ({result.plain_steps} plain), {result.ms:.3f} ms, "
          f"{joules} J")
    print(f"  {result.tokens_per_s:.2f} tok/s, {result.tokens_per_ms:.5f} tok/ms, {per_j} tok/J")
    if args.json:
        doc = result.to_dict() | {"file": Path(args.file).name, "costs": "table" if table is not None else "step_ms"}
        out.text(args.json, json.dumps(doc, indent=2, allow_nan=False) + "\n")


def cmd_import(args):
    digests = digest_map(args.digest)
    if args.from_format is not None:
        return _import_telemetry(args, digests)
    for flag in ("--assume-power-w", "--min-samples", "--nvml-log"):
        if getattr(args, flag[2:].replace("-", "_")) is not None:
            raise TableError(f"{flag} applies to --from (engine telemetry), not to --run")
    if len(args.file) != 1:
        raise TableError(f"--run converts one file's [[run]]; {len(args.file)} files were given")
    args.file = args.file[0]
    out = Outputs({"FILE": args.file})
    out.declare(args.output, "-o")
    afile = load_acceptance_file(args.file)
    cells = afile.run(args.run)
    key = TableKey(SCHEMA, args.box_class, args.recipe, digests)
    meta = {"imported_from": Path(args.file).name, "run": args.run}
    table = run_table(cells, key, meta=meta, source=f"{args.file} run {args.run}")
    with out:
        out.text(args.output, CostTable.render(table.key, table.cells, table.meta))
    print(f"wrote {args.output}: {len(cells)} cells, widths {widths_text(table.widths)}, "
          f"depths 0..{table.max_k}")
    return 0


def _import_telemetry(args, digests):
    if (args.assume_power_w is None) == (args.nvml_log is None):
        raise TableError("--from needs one of --assume-power-w W (joules are W watts times time; the table records "
                         "energy_source = \"assumed\") and --nvml-log CSV (the log's mean board power): engine "
                         "telemetry holds no joules")
    inputs = {f"FILE {i + 1}": f for i, f in enumerate(args.file)}
    if args.nvml_log is not None:
        inputs["--nvml-log"] = args.nvml_log
    out = Outputs(inputs)
    out.declare(args.output, "-o")
    key = TableKey(SCHEMA, args.box_class, args.recipe, digests)
    fitted = import_table(args.file, args.from_format, key, power_w=args.assume_power_w, nvml_log=args.nvml_log,
                          min_samples=MIN_CELL_SAMPLES if args.min_samples is None else args.min_samples)
    table = fitted.table
    with out:
        out.text(args.output, CostTable.render(table.key, table.cells, table.meta, table.extras))
    measured = table.meta["measured_cells"]
    print(f"wrote {args.output}: {measured} measured cells ({table.meta['samples']:,} samples, at least "
          f"{table.meta['min_cell_samples']} each), {len(table.cells) - measured} fitted; widths "
          f"{', '.join(map(str, table.widths.tolist()))}, depths 0..{table.max_k}; " + (
              f"joules assumed at {args.assume_power_w:g} W" if args.nvml_log is None else
              f"joules at the NVML log's mean {table.meta['power_log_w']:.1f} W"))
    m = table.meta
    print(f"fit: samples lie a median {100 * m['cell_residual_median']:.1f}% (p90 "
          f"{100 * m['cell_residual_p90']:.1f}%) from their cell; engine parameters {m['step_model']}, a median "
          f"{100 * m['step_model_residual_median']:.1f}% (p90 {100 * m['step_model_residual_p90']:.1f}%) from the "
          "samples")
    if fitted.refused:
        print("refused (too few samples): " + table.meta["refused_cells"])
    apart = ", ".join(f"{v:,} {k}" for k, v in fitted.kept_apart.items() if v)
    if apart:
        print(f"kept apart (not in any cell): {apart}")
    return 0


def _only_trace(afile, flag):
    """The name of an acceptance file's only trace; several (or none) need ``flag NAME``."""
    if len(afile.traces) != 1:
        raise TraceError(f"{afile.source} holds {len(afile.traces)} traces ({', '.join(afile.traces) or 'none'}): "
                         f"name one with {flag} NAME")
    return next(iter(afile.traces))
