"""``specsim table ...``: check, show and query cost tables."""

from __future__ import annotations

from specsim.cli._common import context, count, digest_map, key_name, print_json, whole, width, widths_text
from specsim._text import format_grid
from specsim.errors import KeyMismatchError, TableError
from specsim.table import CostTable, TableKey
from specsim.table._types import DRAFT_J, DRAFT_MS, VERIFY_J, VERIFY_MS


def register(sub, groups):
    table = sub.add_parser("table", help="check, show and query cost tables")
    tsub = table.add_subparsers(dest="table_command", metavar="ACTION")
    tsub.required = True
    groups["table"] = tsub

    p = tsub.add_parser("check", help="validate a table; optionally check its key against a serve's")
    p.add_argument("file", help="cost table TOML")
    p.add_argument("--against", metavar="TABLE", help="a second table whose key is the serve's key")
    p.add_argument("--schema", type=whole, help="serve key: schema (default 1)")
    p.add_argument("--box-class", type=key_name, help="serve key: box class")
    p.add_argument("--recipe", type=key_name, help="serve key: recipe id")
    p.add_argument("--digest", action="append", default=[], metavar="MODE=DIGEST",
                   help="serve key: plan digest of one mode (repeat per mode)")
    p.set_defaults(func=cmd_check)

    p = tsub.add_parser("show", help="print a readable grid of step ms and J")
    p.add_argument("file", help="cost table TOML")
    p.add_argument("--context", type=context, metavar="C",
                   help="the grid at context C (mean KV tokens per decoding sequence; default: every measured "
                        "context of a table with a context axis)")
    p.add_argument("--json", action="store_true", help="print the key, meta and cells as JSON")
    p.set_defaults(func=cmd_show)

    p = tsub.add_parser("query", help="the (interpolated) cell at width N and depth K")
    p.add_argument("file", help="cost table TOML")
    p.add_argument("n", type=width, help="batch width")
    p.add_argument("k", type=count, help="draft depth")
    p.add_argument("--context", type=context, metavar="C",
                   help="mean KV tokens per decoding sequence (default: the table's reference context)")
    p.add_argument("--json", action="store_true", help="print the cell as JSON")
    p.set_defaults(func=cmd_query)


def _serve_key(args, table_key):
    if args.against:
        return CostTable.load(args.against).key
    flags = (args.schema, args.box_class, args.recipe, args.digest)
    if all(f in (None, []) for f in flags):
        return None
    digests = digest_map(args.digest)
    # Flags not given are taken from the table: the check is only about what the user named.
    return TableKey(
        table_key.schema if args.schema is None else args.schema,
        table_key.box_class if args.box_class is None else args.box_class,
        table_key.recipe if args.recipe is None else args.recipe,
        digests if args.digest else table_key.plan_digests,
    )


def cmd_check(args):
    table = CostTable.load(args.file)
    serve = _serve_key(args, table.key)
    widths = widths_text(table.widths)
    print(f"{args.file}: valid; widths {widths}; depths 0..{table.max_k}")
    if serve is not None:
        mismatches = table.key.check(serve)
        if mismatches:
            raise KeyMismatchError(f"{args.file}: the table's key does not match the serve's", map(str, mismatches))
        print("key matches the serve's")
    return 0


def cmd_show(args):
    table = CostTable.load(args.file)
    if args.context is not None:
        grids = [(args.context, table.at_context(args.context))]
    elif table.contexts.size:
        grids = [(int(c), table.at_context(c)) for c in table.contexts]
    else:
        grids = [(None, table)]
    if args.json:
        doc = {
            "key": {"schema": table.key.schema, "box_class": table.key.box_class, "recipe": table.key.recipe,
                    "plan_digests": dict(table.key.plan_digests)},
            "meta": table.meta,
            "widths": table.widths.tolist(),
            "max_k": table.max_k,
            "cells": [c._asdict() | {"step_ms": c.step_ms, "step_j": c.step_j} for c in grids[0][1].cells],
        }
        if table.contexts.size:
            doc["contexts"] = table.contexts.tolist()
            doc["reference_context"] = table.reference_context
            doc["cells_by_context"] = {f"{c:g}": [cell._asdict() for cell in t.cells] for c, t in grids}
        print_json(doc, cause=f"the costs in {args.file} (verify and draft too large to add up)")
        return 0
    k = table.key
    print(f"box class {k.box_class}   recipe {k.recipe}   schema {k.schema}")
    for mode, digest in k.plan_digests.items():
        print(f"  plan digest {mode}: {digest}")
    source = table.meta.get("energy_source")
    if source:
        print(f"  energy source: {source}")
    if table.contexts.size:
        print(f"  context axis: {', '.join(map(str, table.contexts.tolist()))} tokens "
              f"(reference {table.reference_context}; linear between, nearest outside)")
    for c, grid in grids:
        at = "" if c is None else f" at context {c:g}"
        print(f"step cost (verify + drafts){at}:")
        print(format_grid(*_grid_rows(grid)))
    return 0


def _grid_rows(table):
    header = ["n"] + [f"k={d} ms" for d in range(table.max_k + 1)] + [f"k={d} J" for d in range(table.max_k + 1)]
    rows = []
    for i, n in enumerate(table.widths):
        step = table.costs[i]
        rows.append([int(n)] + [f"{step[d, VERIFY_MS] + step[d, DRAFT_MS]:.3f}" for d in range(table.max_k + 1)]
                    + [f"{step[d, VERIFY_J] + step[d, DRAFT_J]:.3f}" for d in range(table.max_k + 1)])
    return header, rows


def cmd_query(args):
    table = CostTable.load(args.file)
    # A grid cell of a modelled table (the roofline's: [meta] cost_source = "model") was computed,
    # not measured.
    grid = "modelled" if table.meta.get("cost_source") == "model" else "measured"
    if args.n < 1:
        raise TableError(f"N is a batch width: at least 1 sequence, got N={args.n}")
    cell = table.cell(args.n, args.k, context=args.context)
    if cell is None:
        raise TableError(f"{args.file}: depth K={args.k} is beyond the deepest {grid} depth {table.max_k}")
    if args.json:
        doc = cell._asdict() | {"step_ms": cell.step_ms, "step_j": cell.step_j}
        if table.contexts.size:
            doc["context"] = args.context if args.context is not None else table.reference_context
        print_json(doc, cause=f"the costs in {args.file} (verify and draft too large to add up)")
        return 0
    on_grid = int(args.n) in set(table.widths.tolist())
    how = grid if on_grid else "interpolated" if table.widths[0] < args.n < table.widths[-1] else "nearest width"
    if table.contexts.size:
        c = table.reference_context if args.context is None else args.context
        cs = table.contexts.tolist()
        where = ("reference context" if args.context is None else f"{grid} context" if c in cs
                 else "interpolated in context" if cs[0] < c < cs[-1] else "nearest context")
        how += f"; context {c:g}, {where}"
    elif args.context is not None:
        how += "; the table has no context axis: the same at every context"
    print(f"n={cell.n} k={cell.k} ({how})")
    for f in ("verify_ms", "verify_j", "draft_ms", "draft_j", "step_ms", "step_j"):
        print(f"  {f:9} {getattr(cell, f)!r}")
    return 0
