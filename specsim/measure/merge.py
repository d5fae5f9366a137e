"""Merging several measured runs of one sweep into one table: the per-field median (docs/measure.md#merging)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from specsim._checks import is_number
from specsim._io import atomic_write_text, same_file
from specsim.errors import MeasureError
from specsim.table import COST_FIELDS, Cell, ContextAxis, CostTable


def merge_tables(tables, sources=None):
    """One table whose every cell field is the median of that field across ``tables``.

    The four costs (at every context, for tables with a context axis) and every numeric extra cell
    field present in all runs are medians; ``[meta]`` keeps the fields all runs agree on, takes the
    median of numeric fields they do not, and gains ``merged_runs``.

    Parameters
    ----------
    tables : sequence of CostTable
        Runs of one sweep: the same key, the same widths and depths, the same context axis (or
        none), the same energy source.
    sources : sequence of str, optional
        Names of the runs for messages (default: each table's source).

    Returns
    -------
    (TableKey, list of Cell, dict, dict, ContextAxis or None)
        Key, cells, meta, extras and context axis, as :meth:`CostTable.render` takes them.

    Raises
    ------
    MeasureError
        Listing every difference in key, grid and energy source between the first run and each
        other one.
    """
    tables = list(tables)
    if not tables:
        raise MeasureError("nothing to merge: give at least one table")
    sources = list(sources) if sources is not None else [t.source for t in tables]
    first, name0 = tables[0], sources[0]
    problems = []
    for t, name in zip(tables[1:], sources[1:]):
        for m in first.key.check(t.key):
            what = m.kind if m.mode is None else f"plan digest of mode {m.mode!r}"
            problems.append(f"{name}: {what} is {m.serve!r}, {name0} has {m.table!r}")
        mine, theirs = set(first.widths.tolist()), set(t.widths.tolist())
        if mine - theirs:
            problems.append(f"{name}: lacks width(s) {sorted(mine - theirs)} that {name0} has")
        if theirs - mine:
            problems.append(f"{name}: has width(s) {sorted(theirs - mine)} that {name0} lacks")
        if t.max_k != first.max_k:
            problems.append(f"{name}: depths 0..{t.max_k}, {name0} has 0..{first.max_k}")
        if t.contexts.tolist() != first.contexts.tolist() or t.reference_context != first.reference_context:
            problems.append(f"{name}: context axis {t.contexts.tolist()} (reference {t.reference_context}), {name0} "
                            f"has {first.contexts.tolist()} (reference {first.reference_context})")
        s0, s1 = first.meta.get("energy_source"), t.meta.get("energy_source")
        if s0 != s1:
            problems.append(f"{name}: energy source {s1!r}, {name0} has {s0!r}")
    if problems:
        raise MeasureError("the runs are not one sweep, so they cannot be merged", problems)

    costs = np.median(np.stack([t.costs for t in tables]), axis=0)
    cells = [
        Cell(int(n), k, *(float(costs[i, k, f]) for f in range(len(COST_FIELDS))))
        for i, n in enumerate(first.widths) for k in range(first.max_k + 1)
    ]
    extras = {}
    for c in cells:
        per_run = [t.extras.get((c.n, c.k), {}) for t in tables]
        common = set(per_run[0]).intersection(*per_run[1:])
        merged = {}
        for field in sorted(common):
            values = [r[field] for r in per_run]
            if all(is_number(v) for v in values):
                merged[field] = _median(values)
        if merged:
            extras[(c.n, c.k)] = merged
    meta = _merge_meta([t.meta for t in tables])
    meta["merged_runs"] = len(tables)
    axis = None
    if first.contexts.size:
        grid = np.median(np.stack([t.context_costs for t in tables]), axis=0)
        at = {(int(n), k): tuple(tuple(map(float, grid[c, i, k])) for c in range(first.contexts.size))
              for i, n in enumerate(first.widths) for k in range(first.max_k + 1)}
        # The plain grid is the axis at its reference: the same medians, taken once.
        ref = first.contexts.tolist().index(first.reference_context)
        cells = [Cell(c.n, c.k, *at[(c.n, c.k)][ref]) for c in cells]
        axis = ContextAxis(tuple(first.contexts.tolist()), first.reference_context, at)
    return first.key, cells, meta, extras, axis


def merge_files(paths, out) -> CostTable:
    """Merge the table files ``paths`` into ``out`` (written atomically, validated by parsing back)."""
    paths = [Path(p) for p in paths]
    # One file named twice (or through a link) would count its run twice in every median.
    for j, p in enumerate(paths):
        first = next((i for i in range(j) if same_file(paths[i], p)), None)
        if first is not None:
            what = (f"{p} is given twice (runs {first + 1} and {j + 1})" if str(paths[first]) == str(p) else
                    f"{p} (run {j + 1}) is the same file as {paths[first]} (run {first + 1})")
            raise MeasureError(f"{what}: each run counts once in the median; give each file once")
    tables = [CostTable.load(p) for p in paths]
    key, cells, meta, extras, axis = merge_tables(tables, [str(p) for p in paths])
    text = CostTable.render(key, cells, meta=meta, extras=extras, axis=axis)
    table = CostTable.parse(text, str(out))
    atomic_write_text(out, text)
    return table


def _median(values):
    m = float(np.median(values))
    if all(isinstance(v, int) for v in values) and m == int(m):
        return int(m)
    return m


def _merge_meta(metas):
    out = {}
    for field in metas[0]:
        values = [m.get(field) for m in metas]
        if any(field not in m for m in metas):
            continue
        if all(v == values[0] for v in values):
            out[field] = values[0]
        elif all(is_number(v) for v in values):
            out[field] = _median(values)
    return out
