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


def checked_arrays(widths, costs, contexts=None, context_costs=None, reference_context=None):
    """A table given as arrays (``CostTable(key, widths, costs)``, which the kernels index without
    bounds checks) as the table stores it, and every breach of the rules.

    The values are checked as stored, after the conversion: a longdouble cost of 1e-4000 is 0 in
    float64 and refused as 0, one of 1e400 is infinite and refused as infinite. First the shapes
    (``widths`` 1-D whole numbers, ascending within ``1..MAX_WIDTH``; ``costs`` ``(W, K + 1, 4)``,
    K at most ``MAX_DEPTH``), then the values, as :func:`rule_problems` checks them, the first few
    named by width and depth; likewise a context axis, whose ``context_costs`` at
    ``reference_context`` (an integer, one of ``contexts``) must be ``costs``.

    Returns
    -------
    ((widths, costs, contexts, context_costs), problems)
        ``widths`` and ``contexts`` ndarray(int64), ``costs`` and ``context_costs``
        ndarray(float64), C-contiguous; the contexts None without an axis. The arrays are None
        when ``problems`` is not empty.
    """
    problems = []
    widths = _axis_array(widths, "widths", MAX_WIDTH, problems)
    if widths is None:
        return None, problems
    given = _as_array(costs)
    costs = _floats(given)
    if (costs is None or costs.ndim != 3 or costs.shape[2:] != (4,) or not 1 <= costs.shape[1] <= MAX_DEPTH + 1
            or costs.shape[0] != widths.shape[0]):
        problems.append(f"costs must be a (widths, depths 0..max_k, 4) array of numbers with max_k <= {MAX_DEPTH}, "
                        f"got {_described(given)} for {widths.shape[0]} widths")
    if problems:
        return None, problems
    problems += _grid_value_problems(widths, costs, "costs")
    if contexts is None:
        if context_costs is not None or reference_context is not None:
            problems.append("context_costs and reference_context come with contexts: give all three or none")
        return (None, problems) if problems else ((widths, costs, None, None), problems)
    contexts = _axis_array(contexts, "contexts", MAX_TOKENS_PER_REQUEST, problems)
    if contexts is None:
        return None, problems
    shape = (contexts.shape[0],) + costs.shape
    given = _as_array(context_costs)
    context_costs = _floats(given)
    if context_costs is None or context_costs.shape != shape:
        return None, problems + [f"context_costs must be a (contexts,) + costs.shape {shape} array of numbers, "
                                 f"got {_described(given)}"]
    for i, c in enumerate(contexts.tolist()):
        problems += _grid_value_problems(widths, context_costs[i], f"context_costs[{i}] (context {c})")
    if not is_int(reference_context) or int(reference_context) not in contexts.tolist():
        problems.append(f"reference_context {show(reference_context)} must be one of the contexts "
                        f"({few(contexts.tolist())}), as an integer: the context `costs` prices")
    else:
        ref = contexts.tolist().index(int(reference_context))
        with np.errstate(invalid="ignore"):
            differ = np.argwhere((costs != context_costs[ref]).any(axis=2))
        if differ.shape[0]:
            w, k = differ[0].tolist()
            problems.append(f"costs[{w}, {k}] (n={int(widths[w])}, k={k}) is {tuple(costs[w, k].tolist())} but "
                            f"context_costs[{ref}] (the reference context {int(reference_context)}) has "
                            f"{tuple(context_costs[ref, w, k].tolist())} there ({differ.shape[0]:,} cell(s) differ): "
                            "costs is the grid at the reference context")
    return (None, problems) if problems else ((widths, costs, contexts, context_costs), problems)


def _as_array(values):
    """``np.asarray(values)``, or None where it is no array (ragged nesting, ...)."""
    try:
        return np.asarray(values)
    except (TypeError, ValueError, OverflowError):
        return None


def _axis_array(values, name, high, problems):
    """``values`` as a strictly ascending int64 array within ``1..high``, or None with the problem
    appended to ``problems``. Floats pass when every one is whole, checked before the cast (which
    would truncate 1.5 to 1)."""
    arr = _as_array(values)
    if arr is None or arr.ndim != 1 or arr.shape[0] == 0 or arr.dtype.kind not in "iuf":
        problems.append(f"{name} must be a non-empty 1-D array of whole numbers, got {_described(arr)}")
        return None
    if arr.dtype.kind == "f":
        with np.errstate(invalid="ignore"):
            whole = bool(np.all(np.isfinite(arr) & (arr == np.floor(arr))))
        if not whole:
            problems.append(f"{name} must be whole numbers, got {few(arr.tolist())}")
            return None
    # Python numbers: a comparison with a narrow dtype (int8, float16) would convert ``high`` to it.
    cast = int if arr.dtype.kind in "iu" else float
    if not (cast(arr.min()) >= 1 and cast(arr.max()) <= high):
        problems.append(f"{name} must ascend strictly within 1..{high:,}, got {few(arr.tolist())}")
        return None
    out = np.ascontiguousarray(arr, dtype=np.int64)
    if np.any(out[1:] <= out[:-1]):
        problems.append(f"{name} must ascend strictly within 1..{high:,}, got {few(out.tolist())}")
        return None
    return out


def _described(arr) -> str:
    return "an object that is not an array" if arr is None else f"shape {arr.shape} of {arr.dtype}"


def _floats(arr):
    """``arr`` (from :func:`_as_array`) as a C-contiguous float64 array, or None when it does not
    hold numbers. A value past float64 (a longdouble 1e400) becomes infinite, without a warning:
    the value rules refuse it."""
    if arr is None or arr.dtype.kind not in "iuf":
        return None
    with np.errstate(over="ignore", under="ignore", invalid="ignore"):
        return np.ascontiguousarray(arr, dtype=np.float64)


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
    """What is wrong with a table's ``key``: not a :class:`TableKey`, or of another schema."""
    if not isinstance(key, TableKey):
        return [f"key must be a TableKey (box class, recipe and plan digests), got {show(key)}"]
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
