"""The TOML form of a cost table (docs/formats.md#cost-table): reading into plain values and writing back."""

from __future__ import annotations

import math

import numpy as np

from specsim import _toml
from specsim._checks import MAX_DEPTH, MAX_STEP_COST, MAX_TOKENS_PER_REQUEST, MAX_WIDTH, few, is_int, is_number, show
from specsim.errors import TableError
from specsim.table._types import CONTEXT_FIELDS, COST_FIELDS, SCHEMA, Cell, ContextAxis, TableKey

CELL_INT_FIELDS = ("n", "k")
# A [context] table that was refused: its cells' costs per context are not checked against it.
BAD_AXIS = ContextAxis((), 0, {})


def read(text, source: str = "<text>", usage: str | None = None):
    """Parse table text into ``(key, cells, meta, extras, axis)`` without applying the validation
    rules.

    Every shape problem (a missing or mistyped field, a context axis that is not ascending or a
    cell whose costs per context do not match it) is collected and raised together. ``extras``
    maps ``(n, k)`` to the cell's unknown fields, which the metrale serve's reader ignores;
    ``axis`` is None or the :class:`ContextAxis` of a table with a ``[context]`` axis. ``usage``:
    how the command takes the table and the calibration, for the hint when this file is the
    calibration (:func:`specsim._toml.swapped_hint`).
    """
    doc = _toml.loads(text, "the cost table", source, TableError)
    problems = []
    key = _read_key(doc.get("key", _toml.MISSING), problems)
    axis = _read_axis(doc.get("context", _toml.MISSING), problems)
    cells, extras = [], {}
    raw_cells = doc.get("cells", _toml.MISSING)
    if raw_cells is _toml.MISSING:
        hint = ""
        if isinstance(doc.get("run"), list):
            hint = " (this looks like a file of measured [[run]]s: convert one with `specsim table import`)"
        problems.append("there is no [[cells]] array: add one [[cells]] table per measured (n, k)" + hint)
    elif not isinstance(raw_cells, list):
        problems.append(f"`cells` is a {_toml.type_name(raw_cells)}, not an array of tables ([[cells]])")
    else:
        for i, raw in enumerate(raw_cells):
            cell = _read_cell(i, raw, problems)
            if cell is not None:
                cells.append(cell)
                extra = {f: v for f, v in raw.items() if f not in Cell._fields and f not in CONTEXT_FIELDS}
                if extra:
                    extras[(cell.n, cell.k)] = extra
                _read_cell_contexts(i, raw, cell, axis, problems)
    meta = doc.get("meta", {})
    if not isinstance(meta, dict):
        meta = {"value": meta}
    if problems:
        swapped = _toml.swapped_hint(doc, "cost table", usage)
        raise TableError(f"{source}: the cost table cannot be read" + (f": {swapped}" if swapped else ""), problems)
    return key, cells, meta, extras, axis


def _read_axis(raw, problems):
    """The ``[context]`` table: ``tokens`` (strictly ascending integers >= 1) and ``reference``
    (one of them). None when the table has none, ``BAD_AXIS`` when it is refused (the problem
    listed); else the axis, its ``at`` filled as the cells are read."""
    if raw is _toml.MISSING:
        return None
    if not isinstance(raw, dict):
        problems.append(f"`context` is a {_toml.type_name(raw)}, not a table ([context] with tokens and reference)")
        return BAD_AXIS
    tokens = raw.get("tokens", _toml.MISSING)
    if tokens is _toml.MISSING or not isinstance(tokens, list) or not tokens:
        problems.append("[context] tokens must be a non-empty array of context lengths (mean KV tokens per "
                        f"decoding sequence), got {_toml.show(tokens) if tokens is not _toml.MISSING else 'nothing'}")
        return BAD_AXIS
    values = [_toml.as_uint(t) for t in tokens]
    bad = [_toml.show(t) for t, v in zip(tokens, values) if v is None or v == 0]
    if bad:
        problems.append(f"[context] tokens: {', '.join(bad)} is not a context length; each must be an integer >= 1")
        return BAD_AXIS
    if any(b <= a for a, b in zip(values, values[1:])):
        problems.append(f"[context] tokens = {values} is not strictly ascending: list each context once, "
                        "smallest first")
        return BAD_AXIS
    if max(values) > MAX_TOKENS_PER_REQUEST:
        problems.append(f"[context] tokens: {max(values):,} is beyond the {MAX_TOKENS_PER_REQUEST:,} tokens a "
                        "request may hold (docs/limits.md)")
        return BAD_AXIS
    reference = raw.get("reference", _toml.MISSING)
    ref = None if reference is _toml.MISSING else _toml.as_uint(reference)
    if ref is None or ref not in values:
        given = "nothing" if reference is _toml.MISSING else _toml.show(reference)
        problems.append(f"[context] reference = {given} must be one of tokens {values}: the context the cells' "
                        "plain cost fields price")
        return BAD_AXIS
    unknown = sorted(set(raw) - {"tokens", "reference"})
    if unknown:
        problems.append(f"[context] has unknown field(s) {', '.join(unknown)}; it holds tokens and reference")
        return BAD_AXIS
    return ContextAxis(tuple(values), ref, {})


def _read_cell_contexts(i, raw, cell, axis, problems):
    """A cell's ``*_at`` arrays (one value per context of the axis) into ``axis.at``."""
    where = f"cells[{i}] (n={cell.n}, k={cell.k})"
    present = [f for f in CONTEXT_FIELDS if f in raw]
    if axis is BAD_AXIS:
        return
    if axis is None:
        if present:
            problems.append(f"{where} has {', '.join(present)} but the table has no [context] axis: add "
                            "[context] tokens = [...] and reference, or drop the field(s)")
        return
    values = []
    for name, plain in zip(CONTEXT_FIELDS, COST_FIELDS):
        arr = raw.get(name, _toml.MISSING)
        if arr is _toml.MISSING:
            problems.append(f"{where} has no `{name}`: a table with a [context] axis gives every cost at every "
                            f"context ({len(axis.tokens)} values)")
            return
        if not isinstance(arr, list) or len(arr) != len(axis.tokens):
            got = f"{len(arr)} values" if isinstance(arr, list) else f"a {_toml.type_name(arr)}"
            problems.append(f"{where} {name} has {got}; the context axis {list(axis.tokens)} is ragged there: give "
                            f"one value per context ({len(axis.tokens)})")
            return
        nums = [_toml.as_float(v) for v in arr]
        if any(v is None for v in nums):
            problems.append(f"{where} {name} = {_toml.show(arr)} is not an array of numbers")
            return
        ref = nums[axis.tokens.index(axis.reference)]
        if ref != getattr(cell, plain) and not (math.isnan(ref) and math.isnan(getattr(cell, plain))):
            problems.append(f"{where} {name} at the reference context {axis.reference} is {ref!r} but {plain} is "
                            f"{getattr(cell, plain)!r}: the plain field is the cost at the reference context")
            return
        values.append(tuple(nums))
    axis.at[(cell.n, cell.k)] = tuple(zip(*values))


def _read_key(raw, problems):
    if raw is _toml.MISSING:
        problems.append("there is no [key] table (schema, box_class, recipe, [key.plan_digests])")
        return None
    if not isinstance(raw, dict):
        problems.append(f"`key` is a {_toml.type_name(raw)}, not a table")
        return None
    ok = True
    schema = raw.get("schema", _toml.MISSING)
    if schema is _toml.MISSING:
        problems.append("[key] has no `schema` (this version reads schema = 1)")
        ok = False
    elif _toml.as_uint(schema, 32) is None:
        problems.append(f"[key] schema = {_toml.show(schema)} is not an unsigned 32-bit integer")
        ok = False
    strings = {}
    for name in ("box_class", "recipe"):
        value = raw.get(name, _toml.MISSING)
        if value is _toml.MISSING:
            problems.append(f"[key] has no `{name}` string")
            ok = False
        elif not isinstance(value, str):
            problems.append(f"[key] {name} is a {_toml.type_name(value)}, not a string")
            ok = False
        strings[name] = value
    digests = raw.get("plan_digests", _toml.MISSING)
    if digests is _toml.MISSING:
        problems.append("[key] has no [key.plan_digests] table (one digest per measured mode)")
        ok = False
    elif not isinstance(digests, dict):
        problems.append(f"[key] plan_digests is a {_toml.type_name(digests)}, not a table")
        ok = False
    else:
        for mode, digest in digests.items():
            if not isinstance(digest, str):
                problems.append(f"[key.plan_digests] {mode} is a {_toml.type_name(digest)}, not a string")
                ok = False
    if not ok:
        return None
    return TableKey(schema, strings["box_class"], strings["recipe"], digests)


def _read_cell(i, raw, problems):
    where = f"cells[{i}]"
    if not isinstance(raw, dict):
        problems.append(f"{where} is a {_toml.type_name(raw)}, not a table")
        return None
    values = {}
    for name in Cell._fields:
        value = raw.get(name, _toml.MISSING)
        if value is _toml.MISSING:
            problems.append(f"{where} has no `{name}`")
            continue
        conv = _toml.as_uint(value) if name in CELL_INT_FIELDS else _toml.as_float(value)
        if conv is None:
            want = "a non-negative integer" if name in CELL_INT_FIELDS else "a number"
            problems.append(f"{where} {name} = {_toml.show(value)} is not {want}")
            continue
        # Every per-width and per-depth array is sized from these: bounded before anything is built.
        limit = {"n": (MAX_WIDTH, "widest batch"), "k": (MAX_DEPTH, "deepest draft depth")}.get(name)
        if limit is not None and conv > limit[0]:
            problems.append(f"{where} {name} = {conv:,} is beyond the {limit[1]} specsim takes, {limit[0]:,} "
                            "(docs/limits.md)")
            continue
        values[name] = conv
    if len(values) != len(Cell._fields):
        return None
    return Cell(**values)


def array_problems(widths, costs, contexts=None, context_costs=None, reference_context=None):
    """Breaches of the cell rules by a table given as arrays (``CostTable(key, widths, costs)``,
    which the kernels index without bounds checks): the shapes (``widths`` 1-D, ascending, in
    ``1..MAX_WIDTH``; ``costs`` ``(W, K + 1, 4)``, K at most ``MAX_DEPTH``), then the values, as
    :func:`rule_problems` checks them, the first few named by width and depth; likewise a context
    axis. Empty when the arrays make a valid table."""
    widths, costs = np.asarray(widths), np.asarray(costs)
    problems = []
    if widths.ndim != 1 or widths.shape[0] == 0 or widths.dtype.kind not in "iu":
        problems.append(f"widths must be a non-empty 1-D array of whole numbers, got shape {widths.shape} "
                        f"of {widths.dtype}")
    elif not (widths[0] >= 1 and widths[-1] <= MAX_WIDTH and np.all(widths[1:] > widths[:-1])):
        problems.append(f"widths must ascend strictly within 1..{MAX_WIDTH:,}, got {few(widths.tolist())}")
    if (costs.ndim != 3 or costs.shape[2:] != (4,) or not 1 <= costs.shape[1] <= MAX_DEPTH + 1
            or widths.ndim != 1 or costs.shape[0] != widths.shape[0] or costs.dtype.kind not in "iuf"):
        problems.append(f"costs must be a (widths, depths 0..max_k, 4) array of numbers with max_k <= {MAX_DEPTH}, "
                        f"got shape {costs.shape} of {costs.dtype} for {widths.shape[0] if widths.ndim else 0} widths")
    if problems:
        return problems
    problems += _grid_value_problems(widths, costs, "costs")
    if contexts is None:
        return problems
    contexts, context_costs = np.asarray(contexts), np.asarray(context_costs)
    if contexts.ndim != 1 or contexts.shape[0] == 0 or contexts.dtype.kind not in "iu" or contexts[0] < 1 \
            or np.any(contexts[1:] <= contexts[:-1]) or contexts[-1] > MAX_TOKENS_PER_REQUEST:
        return problems + [f"contexts must ascend strictly within 1..{MAX_TOKENS_PER_REQUEST:,}, got "
                           f"{few(contexts.ravel().tolist())}"]
    if context_costs.shape != (contexts.shape[0],) + costs.shape or context_costs.dtype.kind not in "iuf":
        return problems + [f"context_costs must be a (contexts,) + costs.shape {(contexts.shape[0],) + costs.shape} "
                           f"array of numbers, got {context_costs.shape} of {context_costs.dtype}"]
    if reference_context not in contexts.tolist():
        problems.append(f"reference_context {show(reference_context)} is not one of the contexts")
    for i, c in enumerate(contexts.tolist()):
        problems += _grid_value_problems(widths, context_costs[i], f"context_costs[{i}] (context {c})")
    return problems


def _grid_value_problems(widths, costs, name):
    """The value rules of :func:`rule_problems` over a whole ``(W, K + 1, 4)`` grid, vectorised."""
    with np.errstate(invalid="ignore"):
        finite = np.isfinite(costs)
        bad = ~finite | (costs > MAX_STEP_COST)
        bad[:, :, :2] |= ~(costs[:, :, :2] > 0)  # verify ms and J
        bad[:, 0, 2:] |= costs[:, 0, 2:] != 0  # a plain step drafts nothing
        bad[:, 1:, 2:] |= ~(costs[:, 1:, 2:] > 0)
    cells = np.argwhere(bad.any(axis=2))
    out = []
    for w, k in cells[:5].tolist():
        values = ", ".join(f"{f}={show(float(costs[w, k, j]))}" for j, f in enumerate(COST_FIELDS))
        out.append(f"{name}[{w}, {k}] (n={int(widths[w])}, k={k}): {values}: each cost finite and at most "
                   f"{MAX_STEP_COST:g}, verify_ms and verify_j > 0, draft_ms and draft_j exactly 0 at k = 0 "
                   "and > 0 above")
    if cells.shape[0] > 5:
        out.append(f"{name}: and {cells.shape[0] - 5:,} more such cells")
    return out


def rule_problems(cells, where=lambda i: f"cells[{i}]"):
    """Every breach of the cell rules (docs/tables.md#validation), as messages; empty when the grid is valid."""
    # Types and sizes first: the grid checks below walk every depth, so a cell at depth 10**12
    # (or a cost that is a string) must be named before they run.
    problems = []
    for i, c in enumerate(cells):
        for name, limit in (("n", MAX_WIDTH), ("k", MAX_DEPTH)):
            v = getattr(c, name)
            if not is_int(v) or not 0 <= v <= limit:
                problems.append(f"{where(i)}: {name} = {show(v)} must be a whole number in 0..{limit:,} "
                                "(docs/limits.md)")
        bad = [f"{f} = {show(getattr(c, f))}" for f in COST_FIELDS if not is_number(getattr(c, f))]
        if bad:
            problems.append(f"{where(i)}: {', '.join(bad)} must be a number (ms or J)")
        if len(problems) > 100:
            break
    if problems:
        return problems
    seen = {}
    for i, c in enumerate(cells):
        costs = [getattr(c, f) for f in COST_FIELDS]
        shown = f"{where(i)} (n={c.n}, k={c.k}, verify_ms={c.verify_ms!r}, verify_j={c.verify_j!r}, draft_ms={c.draft_ms!r}, draft_j={c.draft_j!r})"
        if c.n == 0:
            problems.append(f"{shown}: n = 0; a batch width is at least 1")
        bad = [f for f, v in zip(COST_FIELDS, costs) if not math.isfinite(v)]
        if bad:
            problems.append(f"{shown}: {', '.join(bad)} not finite")
        # Sums of larger costs over a run can overflow to infinity.
        huge = [f for f, v in zip(COST_FIELDS, costs) if math.isfinite(v) and v > MAX_STEP_COST]
        if huge:
            problems.append(f"{shown}: {', '.join(huge)} beyond {MAX_STEP_COST:g} ms or J per step "
                            "(docs/limits.md)")
        for f in ("verify_ms", "verify_j"):
            v = getattr(c, f)
            if math.isfinite(v) and not v > 0:
                problems.append(f"{shown}: {f} must be > 0")
        for f in ("draft_ms", "draft_j"):
            v = getattr(c, f)
            if not math.isfinite(v):
                continue
            if c.k == 0 and v != 0.0:
                problems.append(f"{shown}: {f} must be exactly 0 at k = 0 (a plain decode step drafts nothing)")
            elif c.k > 0 and not v > 0:
                problems.append(f"{shown}: {f} must be > 0 at k > 0")
        if (c.n, c.k) in seen:
            problems.append(f"{shown}: duplicate of {where(seen[(c.n, c.k)])}")
        else:
            seen[(c.n, c.k)] = i
    if not cells:
        problems.append("there is no cell: a table needs at least one [[cells]] entry")
        return problems
    max_k = max(c.k for c in cells)
    for n in sorted({c.n for c in cells}):
        missing = [k for k in range(max_k + 1) if (n, k) not in seen]
        if missing:
            problems.append(
                f"width n={n} lacks depth(s) {few(missing)}: every width needs every k in 0..={max_k}"
            )
    return problems


def key_problems(key):
    if key.schema != SCHEMA:
        return [f"[key] schema = {key.schema}; this version reads schema {SCHEMA}"]
    return []


def write(key, cells, meta=None, extras=None, axis=None) -> str:
    """The TOML text of a table, cells sorted by (n, k); no validation here. With ``axis`` (a
    :class:`ContextAxis`), the ``[context]`` table and every cell's costs per context."""
    lines = ["[key]", f"schema = {_toml.number(key.schema)}", f"box_class = {_toml.string(key.box_class)}",
             f"recipe = {_toml.string(key.recipe)}", "", "[key.plan_digests]"]
    for mode, digest in key.plan_digests.items():
        lines.append(f"{_toml.key(mode)} = {_toml.string(digest)}")
    if meta:
        lines += ["", "[meta]"]
        for name, value in meta.items():
            lines.append(f"{_toml.key(name)} = {_toml.scalar(value)}")
    if axis is not None:
        lines += ["", "[context]", f"tokens = {_toml.scalar(list(axis.tokens))}",
                  f"reference = {_toml.number(axis.reference)}"]
    extras = extras or {}
    for c in sorted(cells, key=lambda c: (c.n, c.k)):
        lines += ["", "[[cells]]", f"n = {c.n}", f"k = {c.k}"]
        for f in COST_FIELDS:
            lines.append(f"{f} = {_toml.number(getattr(c, f))}")
        if axis is not None:
            for f, name in enumerate(CONTEXT_FIELDS):
                values = ", ".join(_toml.number(v[f]) for v in axis.at[(c.n, c.k)])
                lines.append(f"{name} = [{values}]")
        for name, value in extras.get((c.n, c.k), {}).items():
            lines.append(f"{_toml.key(name)} = {_toml.scalar(value)}")
    return "\n".join(lines) + "\n"
