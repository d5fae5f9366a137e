"""The serving engine's options on the command line, in one place for every command that
simulates (``simulate``, ``fleet``, ``capacity``, ``tune``). See docs/simulation.md for what each
one means and its default."""

from __future__ import annotations

import sys

from specsim.cli._common import count, nonneg_float, real, whole
from specsim.sim.options import (
    DEFAULT_KV_BLOCK_SIZE, DEFAULT_MAX_NUM_BATCHED_TOKENS, DEFAULT_MIXED_STEP_PRICING, MIXED_STEP_PRICINGS,
    prefill_fixed_note,
)


def budget(text: str):
    """``N`` tokens, or ``none`` for no token budget, for argparse ``type=``."""
    return None if text.strip().lower() == "none" else count(text)


def add_server_options(p, *, replica: bool = False) -> None:
    """Add the server options to parser ``p``; ``replica`` words the help for fleets (each
    replica gets these values; a fleet file's ``[group.server]`` overrides them per group)."""
    each = " per replica" if replica else ""
    p.add_argument("--max-num-seqs", "--max-batch", dest="max_num_seqs", type=count, metavar="B",
                   help=f"most running requests{each} (default: the table's widest measured width)")
    p.add_argument("--max-num-batched-tokens", type=budget, default=DEFAULT_MAX_NUM_BATCHED_TOKENS, metavar="N",
                   help=f"token budget per step: decode tokens, drafts and prefill chunks together (default "
                        f"{DEFAULT_MAX_NUM_BATCHED_TOKENS}; 'none' for no budget)")
    p.add_argument("--no-chunked-prefill", dest="chunked_prefill", action="store_false",
                   help="prefill admitted prompts whole in steps of their own while decodes wait (default: chunked "
                        "prefill shares steps with decodes)")
    p.add_argument("--mixed-step-pricing", choices=MIXED_STEP_PRICINGS, default=DEFAULT_MIXED_STEP_PRICING,
                   help="price a step that decodes and prefills as one forward pass, the weights read once "
                        "(one-pass, default), or as its decode and prefill parts added (additive, the earlier rule)")
    p.add_argument("--no-context-pricing", dest="context_pricing", action="store_false",
                   help="price every step at the table's reference context (default: a table with a context axis "
                        "prices each decode step at its batch's mean KV tokens per sequence)")
    p.add_argument("--kv-capacity-tokens", type=count, metavar="T",
                   help=f"KV-cache capacity{each} in tokens (default: the table's [meta] kv_capacity_tokens, "
                        "else unlimited)")
    p.add_argument("--kv-block-size", type=count, default=DEFAULT_KV_BLOCK_SIZE, metavar="N",
                   help=f"tokens per KV block (default {DEFAULT_KV_BLOCK_SIZE})")
    p.add_argument("--max-seqs", type=count, metavar="M", help="speculation cap: wider batches plain-decode (default: none)")
    p.add_argument("--k-max", type=count, metavar="K", help="most drafts per sequence per step (default: the table's max_k)")
    p.add_argument("--row-budget", type=count, metavar="R", help="most draft rows verified per step (default: no limit)")
    p.add_argument("--prefill-ms-per-token", type=nonneg_float, metavar="X",
                   help="prefill wall ms per prefilled token (default: the table's [meta], else 0.1, a placeholder)")
    p.add_argument("--prefill-j-per-token", type=nonneg_float, metavar="X",
                   help="prefill joules per prefilled token (default: the table's [meta], else 0.06)")
    p.add_argument("--prefill-ms-per-step", type=nonneg_float, metavar="X",
                   help="fixed prefill ms of a step that prefills anything (default: the table's [meta], else 0)")
    p.add_argument("--prefill-j-per-step", type=nonneg_float, metavar="X",
                   help="fixed prefill joules of a step that prefills anything (default: the table's [meta], else 0)")
    p.add_argument("--prefill-curve", metavar="CSV",
                   help="profiled prefill cost instead: CSV with columns tokens,ms,j (prefill tokens in a step -> "
                        "ms and J, interpolated)")
    p.add_argument("--idle-w", type=nonneg_float, metavar="W",
                   help=f"power{each} while nothing is active (default: the table's [meta], else 0)")
    p.add_argument("--acceptance-window", type=whole, metavar="N",
                   help="TensorRT-LLM's speculation gate, on any policy: once N requests have finished, turn "
                        "speculation off for good when the last N's mean accepted drafts per step is below "
                        "--acceptance-threshold (give both; N <= 0 never turns it off; default: no gate, or what a "
                        "trtllm:FILE policy's config sets)")
    p.add_argument("--acceptance-threshold", dest="acceptance_length_threshold", type=real, metavar="T",
                   help="the speculation gate's threshold on mean accepted drafts per step (with --acceptance-window)")


def warn_placeholder_prefill(options, table, command: str) -> None:
    """Print, once, that the prefill costs are placeholders when they are (see
    ``ServerOptions.placeholder_prefill``), and that a prefill curve's fixed part gives way to the
    table's plain step when it is above it (``prefill_fixed_note``)."""
    for note in (options.placeholder_prefill(table), prefill_fixed_note(options.resolve(table), table)):
        if note:
            print(f"specsim {command}: warning: {note}", file=sys.stderr)


def server_options(args) -> dict:
    """The values of :func:`add_server_options`' flags, as ``ServerOptions`` keywords."""
    return {"max_num_seqs": args.max_num_seqs, "max_num_batched_tokens": args.max_num_batched_tokens,
            "chunked_prefill": args.chunked_prefill, "mixed_step_pricing": args.mixed_step_pricing,
            "context_pricing": args.context_pricing,
            "kv_capacity_tokens": args.kv_capacity_tokens,
            "kv_block_size": args.kv_block_size, "max_seqs": args.max_seqs, "k_max": args.k_max,
            "row_budget": args.row_budget, "prefill_ms_per_token": args.prefill_ms_per_token,
            "prefill_j_per_token": args.prefill_j_per_token, "prefill_ms_per_step": args.prefill_ms_per_step,
            "prefill_j_per_step": args.prefill_j_per_step, "prefill_curve": args.prefill_curve,
            "idle_w": args.idle_w, "acceptance_window": args.acceptance_window,
            "acceptance_length_threshold": args.acceptance_length_threshold}
