"""``specsim plan``: the depth a serve would pick, with the figures that decided it."""

from __future__ import annotations


from specsim.cli._common import context, count, print_json, slack, width
from specsim._text import format_grid
from specsim.cli.tree import (
    TreeStudy, add_tree_options, check_tree_options, checked_widths, load_tree_inputs, report_text,
)
from specsim.errors import PlanError
from specsim._checks import MAX_DEPTH, MAX_WIDTH, int_problem, is_number, logprob_problem, show
from specsim._io import read_json
from specsim.calibration import AcceptanceCalibration
from specsim.plan import Planner, depth_reach, reach_lines, sequence_depths
from specsim.table import CostTable


# How the command takes its two files (positional, not --table and --calibration): the hint when
# they are swapped says so.
USAGE = "specsim plan TABLE CALIBRATION"


def register(sub, groups):
    p = sub.add_parser(
        "plan",
        help="pick a draft depth for a batch width or per-sequence depths (docs/planner.md)",
        description="Print the draft depth the planner picks at width N, with each depth's expected tokens/s "
                    "and tokens/J, or (with --confidences) each sequence's verify depth.",
    )
    p.add_argument("table", help="cost table TOML")
    p.add_argument("calibration", help="acceptance calibration TOML")
    p.add_argument("--n", type=width, help="batch width (sequences in the step); default: the number of "
                   "sequences in --confidences")
    p.add_argument("--slack", type=slack, default=0.0, help="throughput slack in [0, 1) (default 0)")
    p.add_argument("--max-seqs", type=count, default=None, help="speculation cap: above it, plain decode (default: none)")
    p.add_argument("--confidences", metavar="FILE",
                   help="JSON list of lists: each sequence's draft log-probabilities; prints per-sequence depths")
    p.add_argument("--known-drafts", metavar="FILE",
                   help="JSON list: drafts each sequence has (default: the length of its confidence list)")
    p.add_argument("--k-max", type=count, default=None, help="deepest verify depth (default: the table's)")
    p.add_argument("--row-budget", type=count, default=None, help="most draft rows in the batch (default: no limit)")
    p.add_argument("--tree", action="store_true",
                   help="choose among plain decoding, chains and draft trees at width N, with the engine settings "
                        "of the choice (the calibration needs a [tree] table; docs/planner.md#draft-trees)")
    add_tree_options(p)
    p.add_argument("--context", type=context, default=None, metavar="C",
                   help="mean KV tokens per sequence, for a table with a context axis")
    p.add_argument("--json", action="store_true", help="print the decision as JSON")
    p.set_defaults(func=cmd_plan)


def _read_json(path, what):
    return read_json(path, f"the {what}", PlanError)


def _confidences(path):
    data = _read_json(path, "confidences")
    if not isinstance(data, list):
        raise PlanError(f"{path}: expected a JSON list of lists of numbers (one list per sequence)")
    if len(data) > MAX_WIDTH:
        raise PlanError(f"{path}: {len(data):,} sequences; at most {MAX_WIDTH:,} (docs/limits.md)")
    rows = []
    for i, row in enumerate(data):
        if not isinstance(row, list):
            raise PlanError(f"{path}: sequence {i} is {show(row)}, not a list of numbers (null = unmeasured)")
        bad = next((j for j, v in enumerate(row) if not (is_number(v) or v is None)), None)
        if bad is not None:
            raise PlanError(f"{path}: sequence {i}, draft {bad} is {show(row[bad])}, not a number "
                            "(null = unmeasured)")
        if len(row) > MAX_DEPTH:
            raise PlanError(f"{path}: sequence {i} has {len(row):,} drafts; at most {MAX_DEPTH:,} "
                            "(docs/limits.md)")
        rows.append([float("nan") if v is None else float(v) for v in row])
        problem = logprob_problem(rows[-1])
        if problem:
            raise PlanError(f"{path}: sequence {i}: {problem.replace('docs/formats.md#per-draft-log', 'docs/formats.md#planner-inputs')}")
    return rows


def cmd_plan(args):
    tree_only = [f for f, v in (("--max-nodes", args.max_nodes), ("--max-depth", args.max_depth),
                                ("--tree-attention-factor", args.tree_attention_factor)) if v is not None]
    if tree_only and not args.tree:
        raise PlanError(f"{', '.join(tree_only)} {'applies' if len(tree_only) == 1 else 'apply'} to draft trees: "
                        "give --tree too")
    if args.tree:
        return _plan_tree(args)
    table = CostTable.load(args.table, usage=USAGE)
    cal = AcceptanceCalibration.load(args.calibration, usage=USAGE)
    for name in ("n", "max_seqs", "k_max", "row_budget"):
        value = getattr(args, name)
        if value is not None and value < 0:
            raise PlanError(f"--{name.replace('_', '-')} must be >= 0, got {value}")

    if not args.confidences:
        extra = [f for f, v in (("--known-drafts", args.known_drafts), ("--k-max", args.k_max),
                                ("--row-budget", args.row_budget)) if v is not None]
        if extra:
            raise PlanError(f"{', '.join(extra)} apply to per-sequence depths: give --confidences FILE too")
    if args.confidences:
        conf = _confidences(args.confidences)
        if args.n is not None and args.n != len(conf):
            raise PlanError(f"--n {args.n} disagrees with the {len(conf)} sequences in {args.confidences}")
        known = [len(r) for r in conf]
        if args.known_drafts:
            known = _read_json(args.known_drafts, "known drafts")
            if not isinstance(known, list) or len(known) != len(conf):
                raise PlanError(f"{args.known_drafts}: expected a list of {len(conf)} non-negative integers "
                                "(one per sequence in --confidences)")
            problems = [p for i, v in enumerate(known) if (p := int_problem(v, f"sequence {i}", 0, MAX_DEPTH))]
            if problems:
                raise PlanError(f"{args.known_drafts}: the known drafts are refused", problems)
        k_max = table.max_k if args.k_max is None else args.k_max
        budget = sum(known) if args.row_budget is None else args.row_budget
        capped = args.max_seqs is not None and len(conf) > args.max_seqs
        # Above the speculation cap the serve plain-decodes (docs/planner.md): nothing is verified.
        depths = [0] * len(conf) if capped else sequence_depths(table, cal, conf, known, k_max, budget, args.slack)
        if args.json:
            print_json({"depths": depths, "rows": sum(depths), "k_max": k_max, "row_budget": budget,
                        "slack": args.slack, "capped": capped})
            return 0
        rows = [[i, len(c), known[i], d, f"{cal.expected_accepted(c, d):.3f}"] for i, (c, d) in enumerate(zip(conf, depths))]
        print(format_grid(["seq", "confidences", "drafts", "verify depth", "E[accepted]"], rows))
        print(f"{sum(depths)} draft rows (budget {budget}), k_max {k_max}, slack {args.slack}")
        if capped:
            print(f"{len(conf)} sequences is above the speculation cap --max-seqs {args.max_seqs}: plain decode")
        return 0

    if args.n is None:
        raise PlanError("give --n N (the batch width) or --confidences FILE")
    planner = Planner(table, cal, slack=args.slack, max_seqs=args.max_seqs, memo=False)
    ex = planner.explain(args.n, args.context)
    fitted = int(cal.priors.shape[0])
    if args.json:
        doc = ex.to_dict()
        print_json({"n": ex.n, "depth": ex.depth, "slack": ex.slack, "max_seqs": args.max_seqs, "capped": ex.capped,
                    "floor_tokens_per_s": ex.floor_tokens_per_s,
                    "depths": [d | {"extrapolated": d["k"] > fitted} for d in doc["depths"]],
                    "reach": depth_reach(ex.depth, table.max_k, fitted)})
        return 0
    rows = [[d.k, f"{d.tokens:.3f}", f"{d.step_ms:.3f}", f"{d.step_j:.4f}", f"{d.tokens_per_s:.1f}",
             f"{d.tokens_per_j:.3f}", "yes" if d.feasible else "no", "extrapolated" if d.k > fitted else "fitted",
             "<-" if d.chosen else ""] for d in ex.depths]
    print(format_grid(["k", "E[tokens]", "step ms", "step J", "tok/s", "tok/J", "fast enough", "prior", ""], rows))
    if ex.capped:
        print(f"n = {ex.n} is above the speculation cap --max-seqs {args.max_seqs}: plain decode, depth 0")
    else:
        print(f"depth {ex.depth}: the most tokens/J among depths with tok/s >= {ex.floor_tokens_per_s:.1f} "
              f"({1 - args.slack:g} x depth {ex.reference_depth}'s)")
        for line in reach_lines(ex.depth, table.max_k, fitted, "the chosen depth"):
            print(line)
    return 0


def _plan_tree(args):
    """``plan --tree``: plain, the best chain and the best tree at one width, the choice and its
    engine settings (``specsim tree --n N``)."""
    extra = [f for f, v in (("--confidences", args.confidences), ("--known-drafts", args.known_drafts),
                            ("--k-max", args.k_max), ("--row-budget", args.row_budget),
                            ("--max-seqs", args.max_seqs)) if v is not None]
    if extra:
        one = len(extra) == 1
        raise PlanError(f"{', '.join(extra)} {'does' if one else 'do'} not apply to --tree (a tree is planned per "
                        f"width): leave {'it' if one else 'them'} out")
    if args.n is None:
        raise PlanError("--tree needs --n N (the batch width)")
    max_nodes, max_depth, factor = check_tree_options(args)
    n = checked_widths([args.n], "--n")[0]
    table, cal = load_tree_inputs(args.table, args.calibration, USAGE, "plan --tree")
    study = TreeStudy(table, cal, args.slack, args.context, max_nodes, max_depth, factor)
    report = study.report([n])
    if args.json:
        print_json(report.to_dict()["widths"][0])
        return 0
    print(report_text(report))
    return 0
