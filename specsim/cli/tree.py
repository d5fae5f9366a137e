"""``specsim tree``: the best draft tree, the best chain and plain decoding at each batch width,
the choice between them, where they cross over, and the engine settings that give the choice
(docs/planner.md#draft-trees). ``specsim plan --tree`` prints the same at one width."""

from __future__ import annotations

import json
import sys

from specsim.cli._common import context, count, int_list, real, slack
from specsim._text import format_grid
from specsim.errors import PlanError
from specsim._checks import MAX_MODEL_WIDTHS, MAX_TREE_DEPTH, MAX_TREE_NODES, MAX_WIDTH, check_finite_results
from specsim._io import Outputs
from specsim.calibration import AcceptanceCalibration
from specsim.plan import Planner
from specsim.table import CostTable
from specsim.plan._trees import tree_shapes
from specsim.tree import TREE_ATTENTION_FACTOR, greedy_order, tree_step_cost
from specsim.tree.pricing import check_tree_attention_factor
from specsim.tree.settings import ENGINES, engine_settings

USAGE = "specsim tree TABLE CALIBRATION"
DEFAULT_MAX_NODES = 64
DEFAULT_MAX_DEPTH = 8
KINDS = ("plain", "chain", "tree")


def register(sub, groups):
    p = sub.add_parser(
        "tree",
        help="the best draft tree, the best chain and plain decoding per batch width, and the choice "
             "(docs/planner.md#draft-trees)",
        description="Per batch width: the best draft tree, the best chain and plain decoding side by side (expected "
                    "tokens, step ms and J, tokens/s per sequence, tokens/J), the one the planner picks (the most "
                    "tokens/J among those at least (1 - slack) times as fast as depth 1), the widths where trees "
                    "and chains stop paying, and the vLLM, SGLang and TensorRT-LLM settings that draft the choice. "
                    "The calibration needs a [tree] table (docs/calibration.md#draft-trees).",
    )
    p.add_argument("table", help="cost table TOML")
    p.add_argument("calibration", help="acceptance calibration TOML with a [tree] table")
    which = p.add_mutually_exclusive_group()
    which.add_argument("--n", type=count, help="one batch width")
    which.add_argument("--widths", type=int_list, metavar="N,N,...",
                       help="batch widths, e.g. 1,2,4,8,16,32,64,128,256 (default: the table's widths)")
    add_tree_options(p)
    p.add_argument("--slack", type=slack, default=0.0, help="throughput slack in [0, 1) (default 0)")
    p.add_argument("--context", type=context, default=None, metavar="C",
                   help="mean KV tokens per sequence, for a table with a context axis")
    p.add_argument("--json", metavar="OUT", help="write every width's figures, the choices and the settings as JSON")
    p.set_defaults(func=cmd_tree)


def add_tree_options(p) -> None:
    """The tree options ``specsim tree`` and ``specsim plan --tree`` share."""
    p.add_argument("--max-nodes", type=count, default=None, metavar="M",
                   help=f"most draft nodes a tree may hold, 1..{MAX_TREE_NODES} (default {DEFAULT_MAX_NODES}; "
                        "at most the table's deepest verify)")
    p.add_argument("--max-depth", type=count, default=None, metavar="D",
                   help=f"deepest tree or chain, 1..{MAX_TREE_DEPTH} (default {DEFAULT_MAX_DEPTH})")
    p.add_argument("--tree-attention-factor", type=real, default=None, metavar="F",
                   help=f"a branching tree's verify cost over a chain's of as many nodes, 1..10 (default "
                        f"{TREE_ATTENTION_FACTOR:g}; docs/planner.md#pricing)")


def check_tree_options(args) -> tuple:
    """``(max_nodes, max_depth, tree_attention_factor)`` from the options, refused by name outside
    their limits before any file is read."""
    max_nodes = DEFAULT_MAX_NODES if args.max_nodes is None else args.max_nodes
    max_depth = DEFAULT_MAX_DEPTH if args.max_depth is None else args.max_depth
    if not 1 <= max_nodes <= MAX_TREE_NODES:
        raise PlanError(f"--max-nodes {max_nodes:,} is outside 1..{MAX_TREE_NODES} (docs/limits.md)")
    if not 1 <= max_depth <= MAX_TREE_DEPTH:
        raise PlanError(f"--max-depth {max_depth:,} is outside 1..{MAX_TREE_DEPTH} (docs/limits.md)")
    factor = TREE_ATTENTION_FACTOR
    if args.tree_attention_factor is not None:
        try:
            factor = check_tree_attention_factor(args.tree_attention_factor)
        except PlanError as e:
            raise PlanError(str(e).replace("tree_attention_factor", "--tree-attention-factor", 1)) from None
    return max_nodes, max_depth, factor


def checked_widths(values, option: str) -> list:
    """Batch widths for the tree table: 1..MAX_WIDTH each, at most MAX_MODEL_WIDTHS of them,
    each once, ascending."""
    if len(values) > MAX_MODEL_WIDTHS:
        raise PlanError(f"{option}: {len(values):,} widths; at most {MAX_MODEL_WIDTHS:,} (docs/limits.md)")
    bad = next((v for v in values if not 1 <= v <= MAX_WIDTH), None)
    if bad is not None:
        raise PlanError(f"{option}: width {bad:,} is outside 1..{MAX_WIDTH:,} sequences (docs/limits.md)")
    if any(b <= a for a, b in zip(values, values[1:])):
        raise PlanError(f"{option}: {','.join(map(str, values))} is not strictly ascending: list each width once, "
                        "smallest first")
    return list(values)


def load_tree_inputs(table_path, cal_path, usage: str, option: str):
    """The table and the calibration; one without a [tree] table is refused (chains only)."""
    table = CostTable.load(table_path, usage=usage)
    cal = AcceptanceCalibration.load(cal_path, usage=usage)
    if cal.rank_acceptance is None:
        raise PlanError(f"{cal_path}: this calibration has no [tree] table: chains only. {option} needs the "
                        "draft's acceptance by depth and rank: calib fit --rank-rates R1,R2,... or --drafts-log "
                        "with rank columns (docs/calibration.md#draft-trees); specsim plan without --tree plans "
                        "the chain")
    return table, cal


def cmd_tree(args):
    max_nodes, max_depth, factor = check_tree_options(args)
    widths = None
    if args.n is not None:
        widths = checked_widths([args.n], "--n")
    elif args.widths is not None:
        widths = checked_widths(args.widths, "--widths")
    with Outputs({"TABLE": args.table, "CALIBRATION": args.calibration}) as out:
        out.declare(args.json, "--json")
        table, cal = load_tree_inputs(args.table, args.calibration, USAGE, "specsim tree")
        if widths is None:
            widths = table.widths.tolist()  # a table's widths are 1..2^20, ascending (its own rules)
        study = TreeStudy(table, cal, args.slack, args.context, max_nodes, max_depth, factor)
        report = study.report(widths)
        print(report_text(report))
        if args.json:
            doc = {"table": str(args.table), "calibration": str(args.calibration), **study.inputs(),
                   **report.to_dict()}
            check_finite_results(doc, "the inputs", PlanError)
            out.text(args.json, json.dumps(doc, indent=2, allow_nan=False) + "\n")
    for path in out.written:
        print(f"wrote {path}", file=sys.stderr)
    return 0


# -- the figures ---------------------------------------------------------------------------------

class TreeStudy:
    """Plain decoding, the best chain and the best branching tree of one table and calibration at
    any width, beside the planner's choice (``Planner.propose_tree``) and its engine settings.

    Every figure comes from the homes the planner reads: the chains' from ``Planner.explain``
    (the chain planner's arithmetic), the branching candidates from the planner's ``tree_shapes``,
    a tree's price from :func:`specsim.tree.tree_step_cost`.
    """

    def __init__(self, table, cal, slack_value, ctx, max_nodes, max_depth, factor):
        self.factor = factor
        self.table, self.cal, self.context = table, cal, ctx
        self.slack, self.max_nodes, self.max_depth = slack_value, max_nodes, max_depth
        self.planner = Planner(table, cal, slack=slack_value, memo=False, tree_attention_factor=self.factor)
        # The planner's candidates: the branching best trees of 2..min(max_nodes, max_k) nodes.
        self.trees = [s.tree for s in tree_shapes(cal.rank_acceptance, table.max_k, max_depth)
                      if s.tree.nodes <= max_nodes]
        self._settings = {}

    def report(self, widths) -> "Report":
        """Every width's row, the crossovers and the no-tree sentence."""
        rows = [self.row(n) for n in widths]
        return Report(rows, crossovers(rows), why_no_tree(rows, self.no_tree_reason()))

    def no_tree_reason(self) -> str:
        """Why there is no branching candidate at all, or ``""``."""
        if self.trees:
            return ""
        if self.table.max_k < 2:
            return (f"its deepest verify is k = {self.table.max_k}, and a branching tree needs 2 nodes or more "
                    "(model or measure deeper)")
        if self.max_nodes < 2:
            return f"--max-nodes {self.max_nodes} leaves no branching tree (one needs 2 nodes or more)"
        limit = min(self.max_nodes, self.table.max_k)
        order = greedy_order(self.cal.rank_acceptance, MAX_TREE_NODES, self.max_depth)
        branching = [i + 1 for i, r in enumerate(order.ranks) if r > 1]
        if not branching:
            return (f"every best tree of the calibration's [tree] table (up to {MAX_TREE_NODES} nodes, depth "
                    f"{self.max_depth}) is a chain: no rank past the first is ever matched")
        first = branching[0]
        bound = (f"the table's deepest verify, k = {self.table.max_k} (model or measure deeper)"
                 if limit == self.table.max_k else f"--max-nodes {self.max_nodes}")
        return (f"the best trees of up to {limit} nodes are chains (each deeper rank-1 path is likelier than any "
                f"other rank's), and the first best tree that branches has {first} nodes, past {bound}")

    def inputs(self) -> dict:
        return {"slack": self.slack, "context": self.context, "max_nodes": self.max_nodes,
                "max_depth": self.max_depth, "tree_attention_factor": self.factor}

    def row(self, n) -> dict:
        """One width: the figures per sequence of plain decoding, the best chain and the best
        branching tree, the planner's choice with its note, and the engine settings of the choice."""
        ex = self.planner.explain(n, self.context)
        floor = ex.floor_tokens_per_s / n  # per sequence
        # The chains' "fast enough" is explain's: the very comparison the chain planner makes.
        plain, *chains = [
            _figures("chain" if d.k else "plain", d.k, d.k, n, d.tokens / n, d.step_ms, d.step_j, d.feasible)
            for d in ex.depths[:min(self.table.max_k, self.max_depth) + 1]
        ]
        plan = self.planner.propose_tree(n, context=self.context, max_nodes=self.max_nodes, max_depth=self.max_depth)
        settings = self._settings.get(plan.tree)
        if settings is None:
            settings = self._settings[plan.tree] = {s.engine: s for s in engine_settings(plan.tree,
                                                                                         self.cal.rank_acceptance)}
        tree = plan.tree.to_dict()
        return {"n": int(n), "choice": plan.kind, "nodes": int(plan.nodes), "depth": int(plan.depth),
                "parents": tree["parents"], "ranks": tree["ranks"],
                "expected_tokens": float(plan.expected_tokens), "step_ms": float(plan.step_ms),
                "step_j": float(plan.step_j), "tokens_per_j": float(plan.tokens_per_j), "note": plan.note,
                "floor_tokens_per_s": float(floor), "plain": plain, "chain": _best(chains),
                "tree": self._tree(n, floor), "settings": settings}

    def _tree(self, n, floor):
        """The best branching tree at width ``n``: the most tokens/J among those fast enough,
        else (none is) the fastest; None where no branching tree fits."""
        trees = []
        for tree in self.trees:
            cost = tree_step_cost(self.table, tree, n, context=self.context, tree_attention_factor=self.factor)
            trees.append(_figures("tree", tree.nodes, tree.depth, n, tree.expected_tokens, cost.step_ms,
                                  cost.step_j, tree.expected_tokens / cost.step_ms * 1000.0 >= floor))
        return _best(trees)


def _figures(kind, nodes, depth, n, expected_tokens, step_ms, step_j, fast_enough) -> dict:
    """One candidate at width ``n``: expected tokens per sequence per step, the whole step's ms
    and J, tokens/s per sequence, the step's tokens/J (all ``n`` sequences' tokens), and whether
    it is fast enough (reaches the floor)."""
    per_s = expected_tokens / step_ms * 1000.0
    return {"kind": kind, "nodes": int(nodes), "depth": int(depth), "expected_tokens": float(expected_tokens),
            "step_ms": float(step_ms), "step_j": float(step_j), "tokens_per_s": float(per_s),
            "tokens_per_j": float(n * expected_tokens / step_j), "fast_enough": bool(fast_enough)}


def _best(candidates):
    """The most tokens/J among the fast enough (the first of equals), else the fastest; None
    for no candidate."""
    fast = [c for c in candidates if c["fast_enough"]]
    if fast:
        return max(fast, key=lambda c: c["tokens_per_j"])
    return max(candidates, key=lambda c: c["tokens_per_s"], default=None)


def crossovers(rows) -> dict:
    """Where, along ascending widths, trees and chains stop paying: ``{"tree": (last width
    chosen, next width) or None, "chain": ...}``, from the last width each kind is chosen at.
    A kind chosen at the widest width never stops (``(last, None)``); one never chosen is
    ``None``."""
    out = {}
    for kind in ("tree", "chain"):
        at = [i for i, r in enumerate(rows) if r["choice"] == kind]
        if not at:
            out[kind] = None
        else:
            last = at[-1]
            out[kind] = (rows[last]["n"], rows[last + 1]["n"] if last + 1 < len(rows) else None)
    return out


def why_no_tree(rows, no_candidate: str = "") -> str:
    """One sentence saying why no tree pays on these widths (from the narrowest, where a tree's
    extra rows cost least; ``no_candidate``: why there is no branching tree at all), or ``""``
    when one does."""
    if not rows or any(r["choice"] == "tree" for r in rows):
        return ""
    r = rows[0]
    tree, chosen = r["tree"], r[r["choice"]]
    if tree is None:
        return f"No tree pays on this table: {no_candidate}."
    shape = f"the best tree ({tree['nodes']} nodes, depth {tree['depth']})"
    wider = ", and at no wider width here does a tree do better" if len(rows) > 1 else ""
    against = "plain decoding" if chosen["kind"] == "plain" else f"the chain k = {chosen['nodes']}"
    if not tree["fast_enough"]:
        return (f"No tree pays on this table: at n = {r['n']} {shape} is too slow, {tree['tokens_per_s']:.1f} "
                f"tokens/s per sequence against a floor of {r['floor_tokens_per_s']:.1f}{wider}.")
    return (f"No tree pays on this table: at n = {r['n']} {shape} adds "
            f"{tree['expected_tokens'] - chosen['expected_tokens']:+.3f} tokens per sequence per step over {against} "
            f"for {tree['step_j'] - chosen['step_j']:+.4f} J per step ({tree['tokens_per_j']:.3f} against "
            f"{chosen['tokens_per_j']:.3f} tokens/J){wider}.")


class Report:
    """The rows, the crossovers and the no-tree sentence of one run."""

    def __init__(self, rows, cross, why):
        self.rows, self.cross, self.why = rows, cross, why

    def to_dict(self) -> dict:
        rows = [{k: ({e: s.to_dict() for e, s in v.items()} if k == "settings" else v) for k, v in r.items()}
                for r in self.rows]
        cross = {kind: (None if c is None else {"last_width": c[0], "next_width": c[1]}) for kind, c in self.cross.items()}
        return {"widths": rows, "crossovers": cross, "why_no_tree": self.why or None}


def _shape(f) -> str:
    if f["kind"] == "plain":
        return "-"
    if f["kind"] == "chain":
        return f"k={f['nodes']}"
    return f"{f['nodes']} nodes, depth {f['depth']}"


def _is_choice(r, f) -> bool:
    return f["kind"] == r["choice"] and f["nodes"] == r["nodes"] and f["depth"] == r["depth"]


def report_text(report) -> str:
    lines = []
    grid = []
    for r in report.rows:
        for kind in KINDS:
            f = r[kind]
            if f is None:
                grid.append([r["n"], kind, "none", "", "", "", "", "", "", ""])
                continue
            grid.append([r["n"], kind, _shape(f), f"{f['expected_tokens']:.3f}", f"{f['step_ms']:.3f}",
                         f"{f['step_j']:.4f}", f"{f['tokens_per_s']:.1f}", f"{f['tokens_per_j']:.3f}",
                         "yes" if f["fast_enough"] else "no", "<-" if _is_choice(r, f) else ""])
    lines.append(format_grid(["n", "kind", "shape", "E[tokens]", "step ms", "step J", "tok/s/seq", "tok/J",
                              "fast enough", "choice"], grid))
    notes = sorted({r["note"] for r in report.rows if r["note"]})
    lines += [f"note: {note}" for note in notes]
    if len(report.rows) > 1:
        lines.append("choice by width: " + _runs(report.rows))
        for kind, word in (("tree", "trees"), ("chain", "chains")):
            c = report.cross[kind]
            if c is None:
                lines.append(f"{word} pay at none of these widths")
            elif c[1] is None:
                lines.append(f"{word} pay up to the widest width here, n = {c[0]}")
            else:
                lines.append(f"{word} stop paying between n = {c[0]} and n = {c[1]}")
    if report.why:
        lines.append(report.why)
    # One block per distinct choice, with the widths it is chosen at.
    chosen = {}
    for r in report.rows:
        chosen.setdefault((r["choice"], tuple(r["parents"]), tuple(r["ranks"])), []).append(r)
    for rows in chosen.values():
        lines += settings_lines(rows)
    return "\n".join(lines)


def _runs(rows) -> str:
    runs = []
    for r in rows:
        if runs and runs[-1][0] == r["choice"]:
            runs[-1][2] = r["n"]
        else:
            runs.append([r["choice"], r["n"], r["n"]])
    return ", ".join(f"{kind} at {a}" + ("" if a == b else f"-{b}") for kind, a, b in runs)


def settings_lines(rows) -> list:
    """The engine settings that draft one choice (``rows``: the widths it is chosen at), each
    saying whether the engine's tree is the chosen one or what differs."""
    r = rows[0]
    what = {"plain": "plain decoding", "chain": f"the chain k = {r['nodes']}",
            "tree": f"the tree of {r['nodes']} nodes, depth {r['depth']}"}[r["choice"]]
    widths = ", ".join(str(x["n"]) for x in rows)
    lines = [f"settings for {what} (n = {widths}):"]
    for e in ENGINES:
        s = r["settings"][e]
        lines.append(f"  {e}: {s.line()}" + ("" if s.exact else f" (closest: {s.differs})"))
        if s.note:
            lines.append(f"    note: {s.note}")
    return lines
