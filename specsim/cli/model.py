"""``specsim table model``: a cost table from the analytic roofline, for hardware you do not have."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

from specsim.cli._common import context_list, count, int_list, key_name, positive, require_matplotlib, widths_text
from specsim.errors import CostModelError, printable
from specsim._io import Outputs
from specsim.costmodel import DEFAULT_CONTEXT_TOKENS, DEFAULT_WIDTHS, load_specs, model_table
from specsim.costmodel.engines import ENGINE_PROFILES
from specsim.costmodel.published import compare, plot_comparison, read_published, setup_mismatches
from specsim.costmodel.specs import (BUILTIN_DRAFTERS, BUILTIN_GPUS, BUILTIN_MODELS, LINK_DOMAIN_GPUS, gpu_spec,
                                     load_hf_config, model_spec)
from specsim.table import CostTable


def register(sub, groups):
    p = groups["table"].add_parser(
        "model", help="model a cost table from GPU, model and drafter specs (no hardware needed)",
        description="Write a cost table from an analytic roofline over public specs. The table's [meta] "
                    "says energy_source = \"model\": it is an estimate, never a measurement.")
    p.add_argument("--list", action="store_true",
                   help="list the built-in GPUs, models and drafters with their sources (and those of any --*-spec "
                        "files), then exit")
    p.add_argument("--gpu", help="GPU spec name (built-in or from --gpu-spec); required unless --list")
    which = p.add_mutually_exclusive_group()
    which.add_argument("--model", help="model spec name (built-in or from --model-spec); this or --model-config "
                                       "is required unless --list")
    which.add_argument("--model-config", metavar="PATH",
                       help="a Hugging Face config.json of a dense decoder (instead of --model)")
    p.add_argument("--drafter", help="drafter spec name (built-in or from --drafter-spec); required unless --list")
    p.add_argument("--tp", type=positive, default=1, help="tensor-parallel GPUs (default 1)")
    p.add_argument("--context-tokens", type=count, default=None,
                   help="KV-cache tokens per sequence the costs assume (default 2048); with --contexts, the "
                        "reference context (one of them; default 2048 when listed, else the smallest)")
    p.add_argument("--contexts", type=context_list, default=None, metavar="C,C,...",
                   help="model the grid at each of these contexts (ascending, e.g. 512,2048,8192): a table with a "
                        "context axis, interpolated in context between them")
    p.add_argument("--widths", type=int_list, default=None, help="batch widths, e.g. 1,2,4,8 (default 1..256)")
    p.add_argument("--max-k", type=count, help="deepest draft depth; required unless --list")
    p.add_argument("--dtype", help="override the model's weight format (bf16, fp8, nvfp4, ...)")
    p.add_argument("--overheads", choices=("cuda-graph", "eager"), default="cuda-graph",
                   help="host overheads of the serving engine: cuda-graph (default) or eager (every kernel "
                        "launched from Python; docs/tables.md)")
    p.add_argument("--engine", choices=tuple(ENGINE_PROFILES), default=None,
                   help="price speculation as this serving engine pays for it on top of the roofline's passes "
                        "(per step, draft pass, verify row and drafted token, CUDA-graph padding, the passes as "
                        "its proposer runs them; vllm fitted on published measurements, sglang and trtllm with "
                        "vllm's host figures: docs/tables.md#engine-profiles); default: the passes alone")
    for kind in ("gpu", "model", "drafter"):
        p.add_argument(f"--{kind}-spec", action="append", default=[], metavar="FILE",
                       help=f"TOML file with [[{kind}]] (or any) specs; repeatable")
    p.add_argument("-o", "--output", metavar="OUT.toml", help="table file to write; required unless --list")
    p.set_defaults(func=cmd_model)

    p = groups["table"].add_parser(
        "compare", help="a table's speedups against a published set's, by batch (how far to trust it)",
        description="Compare the speedup a cost table gives (tokens per step times plain over speculative step "
                    "time) with a published set's measured speedups or TPOTs, by batch: tokens per step from the "
                    "set's acceptance length where given, else fitted at each curve's smallest batch (only the "
                    "shape is then tested). See docs/tables.md#against-published-measurements.")
    p.add_argument("table", help="cost table TOML (e.g. from table model --engine)")
    p.add_argument("--published", required=True, metavar="SET.csv",
                   help="published measurements (the columns of tests/data/published-sd)")
    p.add_argument("--method", metavar="TEXT", type=key_name,  # an empty TEXT would keep every row
                   help="compare only the rows whose method contains TEXT (case-sensitive; a set may measure "
                        "several drafters, each with its own table)")
    p.add_argument("--plot", metavar="OUT", help="draw predicted against published speedup by batch (matplotlib)")
    p.set_defaults(func=cmd_compare)


def cmd_model(args):
    if args.list:
        print(spec_list(_extra_specs(args)))
        return 0
    missing = [flag for flag, value in (("--gpu", args.gpu), ("--model or --model-config", args.model or args.model_config),
                                        ("--drafter", args.drafter), ("--max-k", args.max_k), ("-o", args.output))
               if value is None]
    if missing:
        raise CostModelError(f"give {', '.join(missing)} (or --list to see the built-in specs)")
    inputs = [(f"--{kind}-spec", path) for kind in ("gpu", "model", "drafter")
              for path in getattr(args, f"{kind}_spec")]
    if args.model_config is not None:
        inputs.append(("--model-config", args.model_config))
    with Outputs(inputs) as out:
        out.declare(args.output, "-o")
        specs = _extra_specs(args)
        table = _model(args, specs)
        out.text(args.output, table.to_text())
    gpu = gpu_spec(args.gpu, specs.get("gpu"))
    _warn_unlinked(args, gpu)
    _warn_beyond_links(args, gpu)
    widths = widths_text(table.widths)
    contexts = f"; contexts {', '.join(map(str, table.contexts.tolist()))}" if table.contexts.size else ""
    print(f"{args.output}: modelled table {table.key.box_class} / {table.key.recipe}; widths {widths}; "
          f"depths 0..{table.max_k}{contexts} (energy_source = model: an estimate, not a measurement)")
    return 0


# The most a PCIe link carries a direction (Gen6 x16: 128 GB/s); a faster one is NVLink or Infinity Fabric.
PCIE_MAX_GBS = 128.0


def _warn_beyond_links(args, gpu) -> None:
    """tp past the GPUs one domain of the spec's links joins
    (:data:`~specsim.costmodel.specs.LINK_DOMAIN_GPUS`): the all-reduces are priced at the links'
    rate, not over the slower links between domains."""
    most = LINK_DOMAIN_GPUS.get(gpu.interconnect)
    if most is not None and args.tp > most:
        print(f"specsim table model: warning: --tp {args.tp} on gpu {gpu.name!r}: its interconnect "
              f"\"{gpu.interconnect}\" joins at most {most} GPUs; past them the all-reduces cross slower links "
              f"(PCIe between bridged pairs, the network between servers), which are not priced: they stay at "
              f"{gpu.link_gbs:g} GB/s, so the table is optimistic (docs/tables.md#engine-profiles)", file=sys.stderr)


def _warn_unlinked(args, gpu) -> None:
    """An engine's table on tp > 1 GPUs that say ``interconnect = "pcie"`` (a ``[[gpu]]`` spec's
    default) with links faster than PCIe carries: the all-reduces were priced as NCCL's ring,
    which is likely not what the user's NVLink GPUs run."""
    if args.engine is not None and args.tp >= 2 and gpu.interconnect == "pcie" and gpu.link_gbs > PCIE_MAX_GBS:
        print(f"specsim table model: warning: gpu {gpu.name!r} says interconnect \"pcie\" (a [[gpu]] spec's "
              f"default) with links of {gpu.link_gbs:g} GB/s, more than PCIe carries: its all-reduces are priced as "
              "NCCL's ring; if its GPUs are NVLink-connected, set interconnect = \"nvswitch\" (or "
              "\"nvlink-bridge\" for a pair) in its spec (docs/tables.md#engine-profiles)", file=sys.stderr)


def _extra_specs(args) -> dict:
    """The specs of the ``--gpu-spec``, ``--model-spec`` and ``--drafter-spec`` files, by kind."""
    specs = {"gpu": {}, "model": {}, "drafter": {}}
    for path in args.gpu_spec + args.model_spec + args.drafter_spec:
        for kind, found in load_specs(path).items():
            specs[kind].update(found)
    return specs


def spec_list(extra=None) -> str:
    """The GPUs, models and drafters ``table model`` knows, each with where its numbers come from:
    the built-ins, then any from spec files (which take a built-in's place under its name)."""
    lines = []
    for kind, builtins in (("gpu", BUILTIN_GPUS), ("model", BUILTIN_MODELS), ("drafter", BUILTIN_DRAFTERS)):
        known = dict(builtins) | dict((extra or {}).get(kind, {}))
        lines.append(f"{kind}s (--{kind}):")
        for name in sorted(known):
            origin = "" if known[name] is builtins.get(name) else " [from a --{kind}-spec file]".format(kind=kind)
            # A GPU's interconnect decides how an engine's table prices its tensor-parallel all-reduces.
            linked = f" [interconnect {known[name].interconnect}]" if kind == "gpu" else ""
            lines.append(printable(f"  {name}{origin}{linked}: {known[name].source or 'no source given'}"))
        lines.append("")
    lines.append("Hugging Face configs: --model-config PATH (docs/tables.md)")
    return "\n".join(lines)


def _model(args, specs):
    model = (model_spec(args.model, specs.get("model"), dtype=args.dtype) if args.model_config is None
             else load_hf_config(args.model_config, dtype=args.dtype))

    def at(context_tokens):
        return model_table(
            args.gpu, model, args.drafter, tp=args.tp, context_tokens=context_tokens,
            widths=DEFAULT_WIDTHS if args.widths is None else args.widths,
            max_k=args.max_k, overheads=args.overheads, specs=specs, engine=args.engine,
        )

    if args.contexts is None:
        return at(DEFAULT_CONTEXT_TOKENS if args.context_tokens is None else args.context_tokens)

    reference = args.context_tokens
    if reference is None:
        reference = DEFAULT_CONTEXT_TOKENS if DEFAULT_CONTEXT_TOKENS in args.contexts else args.contexts[0]
    elif reference not in args.contexts:
        raise CostModelError(f"--context-tokens {reference} is not one of --contexts {args.contexts}: the "
                             "reference context must be a modelled one")
    return CostTable.from_contexts({c: at(c) for c in args.contexts}, reference=reference,
                                   source=f"<modelled table at contexts {args.contexts}>")


def cmd_compare(args):
    out = Outputs({"TABLE": args.table, "--published": args.published})
    if out.declare(args.plot, "--plot"):
        require_matplotlib("--plot", args.plot)
    table = CostTable.load(args.table)
    rows, skipped = read_published(args.published)
    if args.method is not None:
        rows = [r for r in rows if args.method in r.method]
        if not rows:
            raise CostModelError(f"{args.published}: no comparable row's method contains {args.method!r}")
    compared, more = compare(table, rows)
    skipped += more
    if not compared:
        raise CostModelError(f"{args.published}: no row can be compared with {args.table}: "
                             + "; ".join(f"line {line}: {why}" for line, why in skipped[:3]))
    mismatches = setup_mismatches(table, rows)
    for why in mismatches[:5]:
        print(f"specsim table compare: warning: {args.published}, {why}: its errors include that "
              "difference (docs/tables.md#against-published-measurements)", file=sys.stderr)
    if len(mismatches) > 5:
        print(f"specsim table compare: warning: {args.published}: {len(mismatches) - 5} more GPUs, models or tp "
              "the table does not model", file=sys.stderr)
    print(f"{args.table} ({table.key.box_class} / {table.key.recipe}) against {args.published}")
    print(f"{'method':<40} {'k':>3} {'batch':>6} {'published':>10} {'table':>8} {'error':>8}")
    curves = {}
    for c in compared:
        curves.setdefault((c.method, c.depth), []).append(c)
        error = "fitted" if c.fitted else f"{100 * (c.predicted / c.published - 1):+.1f}%"
        print(f"{c.method[:40]:<40} {c.depth:>3} {c.batch:>6} {c.published:>9.3f}x {c.predicted:>7.3f}x {error:>8}")
    for (method, depth), curve in curves.items():
        errs = [abs(c.predicted / c.published - 1) for c in curve if not c.fitted]
        if errs:
            print(f"{method}, k={depth}: median |error| {100 * float(np.median(errs)):.1f}% over {len(errs)} "
                  f"point{'s' if len(errs) > 1 else ''}")
    if skipped:
        print(f"skipped {len(skipped)} row{'s' if len(skipped) > 1 else ''}: "
              + "; ".join(f"line {line}: {why}" for line, why in skipped[:5]) + ("; ..." if len(skipped) > 5 else ""))
    with out:
        if args.plot:
            plot_comparison(compared, out.path(args.plot), f"{table.key.box_class} / {table.key.recipe} against "
                            f"{Path(args.published).name}")
    return 0
