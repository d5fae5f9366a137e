"""``specsim schedule``: write a width-to-depth schedule in a serving engine's format, or read one back."""

from __future__ import annotations

import sys
from dataclasses import replace

from specsim.cli._common import count, method_name, share, slack
from specsim.errors import PolicyError, ScheduleError
from specsim._checks import MAX_WIDTH, is_int, show
from specsim._io import Outputs
from specsim.calibration import AcceptanceCalibration
from specsim.interop import ENGINES, export_schedule, export_tree, import_file, per_batch_cost
from specsim.interop.sglang import cuda_graph_sizes, pad_to_graphs
from specsim.plan import Planner
from specsim.plan._trees import NO_TREE_TABLE
from specsim.policy.schedule import policy_text, ranges_from_depths
from specsim.policy.policy import parse_policy
from specsim.sim.trees import AUTO_MAX_DEPTH, AUTO_MAX_NODES
from specsim.studies.schedule_file import load_schedule, per_batch_verdict
from specsim.table import CostTable


# How export takes the planner's two files, for the hint when they are swapped.
PLANNER_USAGE = "specsim schedule export --planner TABLE CAL"


def register(sub, groups):
    group = sub.add_parser("schedule", help="write a width -> depth schedule for vLLM, TensorRT-LLM or SGLang")
    ssub = group.add_subparsers(dest="schedule_command", metavar="ACTION")
    ssub.required = True
    groups["schedule"] = ssub
    p = ssub.add_parser(
        "export",
        help="write a schedule (a tuned TOML, or the planner's depth at every width) in an engine's config format",
        description="Write a batch-width -> draft-depth schedule as vLLM's --speculative-config JSON "
                    "(num_speculative_tokens_per_batch_size), TensorRT-LLM's LLM-API options YAML "
                    "(draft_len_schedule) or SGLang's adaptive speculation config. Prints what the engine cannot "
                    "express; refuses a schedule it cannot represent. See docs/schedules.md.",
    )
    p.add_argument("schedule", nargs="?", metavar="SCHEDULE.toml", help="a schedule file written by specsim tune")
    p.add_argument("--planner", nargs=2, metavar=("TABLE", "CAL"),
                   help="instead of a file: the planner's depth at every width from this cost table and calibration")
    p.add_argument("--slack", type=slack, default=0.0, help="with --planner: slack in [0, 1) (default 0)")
    p.add_argument("--widths-max", type=count, metavar="N",
                   help="with --planner: widest width to plan (default the table's widest); "
                        "wider widths keep its depth")
    p.add_argument("--tree", action="store_true",
                   help="with --planner: write the planner's draft tree (tree:auto's choice) as the engine's tree "
                        "settings, one static tree (docs/schedules.md#draft-trees); a schedule file from tune --trees "
                        "beside it adds what one static tree cost on the tuned trace")
    p.add_argument("--tree-width", type=count, metavar="W",
                   help="with --tree: the batch width whose planned tree to write (default: the branching tree the "
                        "planner picks at the most widths)")
    p.add_argument("--to", required=True, choices=tuple(ENGINES), help="the engine to write for")
    p.add_argument("--method", metavar="NAME", type=method_name,
                   help="speculative method as the engine names it (default: vLLM eagle3, TensorRT-LLM Eagle3, "
                        "SGLang EAGLE3: most current drafters are EAGLE-3)")
    p.add_argument("--draft-model", metavar="PATH", help="the drafter's weights, written where the engine takes them")
    p.add_argument("--max-num-seqs", "--max-batch", dest="max_num_seqs", type=count, metavar="N",
                   help="the serve's largest batch, where a format needs the last range closed (default: the "
                        "schedule file's max_batch, or the table's widest width with --planner)")
    p.add_argument("--per-batch-cost", type=share, metavar="FRAC",
                   help="what a per-batch schedule costs the engine against its static setting, as a share "
                        "(default: the known cost, vLLM 0.14 on its V1 runner's CUDA graphs, else 0): a tuned "
                        "schedule file's per-batch schedule is written only when its held-out gain clears this and "
                        "the noise, else its best fixed depth as the plain static setting")
    p.add_argument("-o", "--out", metavar="FILE", help="write the config here (default: print it)")
    p.set_defaults(func=cmd_export)

    p = ssub.add_parser(
        "import",
        help="read an engine's config and print the schedule: policy specsim simulates for it",
        description="Read a vLLM, TensorRT-LLM or SGLang config the way the engine reads it and print the "
                    "equivalent schedule: policy (the same as --policy vllm:FILE and the like).",
    )
    p.add_argument("--from", dest="engine", required=True, choices=tuple(ENGINES), help="the engine the file is for")
    p.add_argument("file", help="the engine's config file")
    p.add_argument("--trtllm-keys", choices=("upper", "lower"),
                   help="how the TensorRT-LLM build reads draft_len_schedule keys: upper bounds (since PR #10860, "
                        "about March 2026) or lower bounds (from PR #8194 until then); default: told from the file "
                        "(key 1 with a 0 last length is a lower-bound file), else upper")
    p.add_argument("--cuda-graph-bs", metavar="B1,B2,..",
                   help="--from sglang: the serve's CUDA-graph capture sizes; a batch is padded up to the next one "
                        "before its slot is chosen (the policy form is sglang[B1,B2,..]:FILE)")
    p.set_defaults(func=cmd_import)


def _planner_ranges(args):
    import numpy as np

    if args.widths_max is not None and not 1 <= args.widths_max <= MAX_WIDTH:
        raise _error(f"--widths-max {args.widths_max:,}: give the widest batch to plan for, in 1..{MAX_WIDTH:,}")
    table = CostTable.load(args.planner[0], usage=PLANNER_USAGE)
    cal = AcceptanceCalibration.load(args.planner[1], usage=PLANNER_USAGE)
    widest = int(table.widths[-1]) if args.widths_max is None else args.widths_max
    depths = Planner(table, cal, slack=args.slack, memo=False).propose_many(np.arange(1, widest + 1))
    return ranges_from_depths(depths), (args.max_num_seqs if args.max_num_seqs is not None else int(table.widths[-1]))


def _planned_tree(args):
    """``(tree, rank acceptance, notes, width)``: the tree ``tree:auto`` plans at ``--tree-width``
    (default: the branching tree it picks at the most widths), and a note of what it plans at every
    width, which no engine's one tree setting expresses."""
    if args.widths_max is not None and not 1 <= args.widths_max <= MAX_WIDTH:
        raise _error(f"--widths-max {args.widths_max:,}: give the widest batch to plan for, in 1..{MAX_WIDTH:,}")
    table = CostTable.load(args.planner[0], usage=PLANNER_USAGE)
    cal = AcceptanceCalibration.load(args.planner[1], usage=PLANNER_USAGE)
    if cal.rank_acceptance is None:
        raise _error(f"--tree: {args.planner[1]}: {NO_TREE_TABLE} (fit one with calib fit --drafts-log or "
                     "--rank-rates), or export its chain schedule without --tree")
    widest = int(table.widths[-1]) if args.widths_max is None else args.widths_max
    if args.tree_width is not None and not 1 <= args.tree_width <= widest:
        raise _error(f"--tree-width {args.tree_width:,}: plan widths are 1..{widest:,} (--widths-max, else the "
                     "table's widest)")
    planner = Planner(table, cal, slack=args.slack, memo=False)
    plans = [planner.propose_tree(n, max_nodes=AUTO_MAX_NODES, max_depth=AUTO_MAX_DEPTH) for n in range(1, widest + 1)]
    spans = []  # [first, last, plan] of consecutive widths with one choice
    for n, plan in enumerate(plans, start=1):
        if spans and (spans[-1][2].kind, spans[-1][2].nodes) == (plan.kind, plan.nodes):
            spans[-1][1] = n
        else:
            spans.append([n, n, plan])
    said = "; ".join(f"{a if a == b else f'{a}-{b}'}: {_choice(p)}" for a, b, p in spans)
    if args.tree_width is not None:
        width = args.tree_width
    else:
        branching = [(b - a + 1, -a, a) for a, b, p in spans if p.kind == "tree"]
        if not branching:
            raise _error(f"--tree: the planner picks no branching tree at widths 1..{widest:,} ({said}): export its "
                         "chain schedule without --tree")
        width = max(branching)[2]
    tree = plans[width - 1].tree
    note = (f"the planner's choice by batch width (slack {args.slack:g}) is {said}; this config serves the tree it "
            f"plans at width {width} ({_choice(plans[width - 1])}) at every batch size")
    return tree, cal.rank_acceptance, (note,), width


def _choice(plan) -> str:
    if plan.kind == "tree":
        return f"a tree of {plan.nodes} nodes, depth {plan.depth}"
    return "plain decoding" if plan.nodes == 0 else f"a chain of {plan.nodes}"


def _worth_serving(doc, ranges, args):
    """A tuned file's per-batch schedule, or its best fixed depth when the gain tune measured does
    not clear the noise and what the per-batch form costs the engine (``--per-batch-cost``)."""
    result = doc.sections.get("result", {})
    if len(ranges) == 1 or not isinstance(result, dict) or result.get("served") != "tuned":
        return ranges, ""
    cost = per_batch_cost(args.to) if args.per_batch_cost is None else args.per_batch_cost
    best = result.get("best_fixed")
    try:
        depth = parse_policy(best).fixed_depth if isinstance(best, str) else None
    except PolicyError:
        depth = None
    if depth is None:
        return ranges, (f"[result] best_fixed = {show(best)} is not a fixed:K policy, so the per-batch schedule is "
                        f"exported without weighing its gain against the {100 * cost:g}% it costs")
    k_max = doc.sections.get("inputs", {}).get("k_max") if isinstance(doc.sections.get("inputs"), dict) else None
    if is_int(k_max) and depth > k_max:
        raise _error(f"{args.schedule}: [result] best_fixed = {best!r} is deeper than the k_max = {k_max} it was "
                     "tuned with: the file was edited; tune again or fix best_fixed")
    worth, why = per_batch_verdict(result, cost)
    return (ranges if worth else ((1, None, depth),)), why


def _error(message):
    return ScheduleError(message)


def cmd_export(args):
    if args.tree and args.schedule is not None and args.planner is not None:
        return _export_tree(args)  # the schedule file: a tune --trees result whose static-tree cost is noted
    if (args.schedule is None) == (args.planner is None):
        raise _error("give a schedule file or --planner TABLE CAL (one of them)")
    if args.planner is None and (args.widths_max is not None or args.slack):
        raise _error("--slack and --widths-max apply to --planner")
    if (args.tree or args.tree_width is not None) and args.planner is None:
        raise _error("--tree and --tree-width apply to --planner TABLE CAL (a schedule file holds chain depths)")
    if args.tree_width is not None and not args.tree:
        raise _error("--tree-width applies with --tree")
    if args.tree:
        return _export_tree(args)
    table, cal = args.planner or (None, None)
    with Outputs({"SCHEDULE.toml": args.schedule, "--planner TABLE": table, "--planner CAL": cal}) as out:
        out.declare(args.out, "-o")
        why = ""
        if args.schedule:
            doc = load_schedule(args.schedule)
            ranges, seqs = doc.ranges, (args.max_num_seqs if args.max_num_seqs is not None else doc.max_num_seqs)
            ranges, why = _worth_serving(doc, ranges, args)
        else:
            if args.per_batch_cost is not None:
                raise _error("--per-batch-cost applies to a tuned schedule file (it weighs the gain tune measured)")
            ranges, seqs = _planner_ranges(args)
        config = export_schedule(args.to, ranges, method=args.method, max_num_seqs=seqs, draft_model=args.draft_model)
        if why:
            config = replace(config, notes=config.notes + (why,))
        if args.out:
            out.text(args.out, config.text)
    print(f"specsim: {policy_text(ranges)} for {args.to}", file=sys.stderr)
    return _report(config, args.out)


def _report(config, out_path) -> int:
    """Say what was exported: the notes, how to use it, and where it went (standard output when
    no ``-o``); the command's exit code."""
    for note in config.notes:
        print(f"specsim: note: {note}", file=sys.stderr)
    print(f"specsim: use: {config.usage}", file=sys.stderr)
    if out_path:
        print(f"wrote {out_path}", file=sys.stderr)
    else:
        sys.stdout.write(config.text)
    return 0


def _export_tree(args):
    if args.max_num_seqs is not None or args.per_batch_cost is not None:
        raise _error("--max-num-seqs and --per-batch-cost apply to chain schedules, not --tree")
    with Outputs({"SCHEDULE.toml": args.schedule, "--planner TABLE": args.planner[0],
                  "--planner CAL": args.planner[1]}) as out:
        out.declare(args.out, "-o")
        tuned = _tuned_tree_note(args.schedule) if args.schedule else ()
        tree, ranks, notes, width = _planned_tree(args)
        notes += tuned
        config = export_tree(args.to, tree, ranks, method=args.method, draft_model=args.draft_model, notes=notes)
        if args.out:
            out.text(args.out, config.text)
    print(f"specsim: a tree of {tree.nodes} nodes, depth {tree.depth} (planned at width {width}) for {args.to}",
          file=sys.stderr)
    return _report(config, args.out)


def _tuned_tree_note(path) -> tuple:
    """The note from a ``tune --trees`` schedule file's ``[trees]``: what serving one static tree
    instead of ``tree:auto`` (the tree changing with width) cost on the tuned trace, simulated both ways."""
    doc = load_schedule(path)
    t = doc.sections.get("trees")
    if t is None:
        raise _error(f"{path}: no [trees] table: tune with --trees to measure what a static tree costs, or export the "
                     "planned tree without the schedule file")
    trace = doc.sections.get("inputs", {}).get("trace") or "the tuned trace"
    noise = f" +- {t['static_cost_noise']:.3g}" if "static_cost_noise" in t else ""
    return (f"on {trace}'s held-out window, tree:auto (the tree changing with width) gains {t['static_cost']:+.4g}"
            f"{noise} {t['unit']} over the best static tree, {t['best']} (simulated both ways; positive: what one "
            f"static tree costs); tune weighed {t['best']} against the chain {t['chain']}: {t['winner']} wins"
            .replace("tie wins", "a tie"),)


def cmd_import(args):
    if args.trtllm_keys and args.engine != "trtllm":
        raise ScheduleError("--trtllm-keys applies to --from trtllm")
    if args.cuda_graph_bs and args.engine != "sglang":
        raise ScheduleError("--cuda-graph-bs applies to --from sglang")
    ranges = import_file(args.engine, args.file, args.trtllm_keys)
    if args.cuda_graph_bs:
        ranges = pad_to_graphs(ranges, cuda_graph_sizes(args.cuda_graph_bs))
    print(policy_text(ranges))
    return 0
