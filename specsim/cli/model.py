"""``specsim table model``: a cost table from the analytic roofline, for hardware you do not have."""

from __future__ import annotations

from specsim.cli._common import count, int_list


def register(sub, groups):
    p = groups["table"].add_parser(
        "model", help="model a cost table from GPU, model and drafter specs (no hardware needed)",
        description="Write a cost table from an analytic roofline over public specs. The table's [meta] "
                    "says energy_source = \"model\": it is an estimate, never a measurement.")
    p.add_argument("--gpu", required=True, help="GPU spec name (built-in or from --gpu-spec)")
    which = p.add_mutually_exclusive_group(required=True)
    which.add_argument("--model", help="model spec name (built-in or from --model-spec)")
    which.add_argument("--model-config", metavar="PATH",
                       help="a Hugging Face config.json of a dense decoder (instead of --model)")
    p.add_argument("--drafter", required=True, help="drafter spec name (built-in or from --drafter-spec)")
    p.add_argument("--tp", type=count, default=1, help="tensor-parallel GPUs (default 1)")
    p.add_argument("--context-tokens", type=count, default=None,
                   help="KV-cache tokens per sequence the costs assume (default 2048)")
    p.add_argument("--widths", type=int_list, default=None, help="batch widths, e.g. 1,2,4,8 (default 1..256)")
    p.add_argument("--max-k", type=count, required=True, help="deepest draft depth")
    p.add_argument("--dtype", help="override the model's weight format (bf16, fp8, nvfp4, ...)")
    p.add_argument("--overheads", choices=("cuda-graph", "eager"), default="cuda-graph",
                   help="host overheads of the serving engine: cuda-graph (default) or eager (every kernel "
                        "launched from Python; docs/tables.md)")
    for kind in ("gpu", "model", "drafter"):
        p.add_argument(f"--{kind}-spec", action="append", default=[], metavar="FILE",
                       help=f"TOML file with [[{kind}]] (or any) specs; repeatable")
    p.add_argument("-o", "--output", required=True, metavar="OUT.toml", help="table file to write")
    p.set_defaults(func=cmd_model)


def cmd_model(args):
    from specsim._io import Outputs

    inputs = [(f"--{kind}-spec", path) for kind in ("gpu", "model", "drafter")
              for path in getattr(args, f"{kind}_spec")]
    if args.model_config is not None:
        inputs.append(("--model-config", args.model_config))
    with Outputs(inputs) as out:
        out.declare(args.output, "-o")
        table = _model(args)
        out.text(args.output, table.to_text())
    widths = ", ".join(map(str, table.widths.tolist()))
    print(f"{args.output}: modelled table {table.key.box_class} / {table.key.recipe}; widths {widths}; "
          f"depths 0..{table.max_k} (energy_source = model: an estimate, not a measurement)")
    return 0


def _model(args):
    from specsim.costmodel import DEFAULT_CONTEXT_TOKENS, DEFAULT_WIDTHS, load_specs, model_table
    from specsim.costmodel.specs import load_hf_config

    specs = {"gpu": {}, "model": {}, "drafter": {}}
    for path in args.gpu_spec + args.model_spec + args.drafter_spec:
        for kind, found in load_specs(path).items():
            specs[kind].update(found)
    model = args.model if args.model_config is None else load_hf_config(args.model_config)
    return model_table(
        args.gpu, model, args.drafter, tp=args.tp,
        context_tokens=DEFAULT_CONTEXT_TOKENS if args.context_tokens is None else args.context_tokens,
        widths=DEFAULT_WIDTHS if args.widths is None else args.widths,
        max_k=args.max_k, dtype=args.dtype, overheads=args.overheads, specs=specs,
    )
