"""``CostTable``: a parsed, validated cost table held as flat arrays (docs/tables.md)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np

from specsim._checks import INT64_MAX, few, is_int, number_problem, show
from specsim._io import read_input
from specsim.errors import TableError
from specsim.table import _format
from specsim.table._types import COST_FIELDS, Cell, ContextAxis, TableKey


class CostTable:
    """What one speculative step costs at each batch width and draft depth, on one box class.

    Build one with :meth:`parse`, :meth:`load` or :meth:`from_cells`; each refuses a table that
    breaks any rule of docs/tables.md#validation and lists every problem it finds. The constructor
    itself, from arrays, refuses arrays of the wrong shape and values the cell rules refuse.

    Attributes
    ----------
    key : TableKey
    widths : ndarray(int64, ndim=1), shape (W,)
        Measured widths, ascending.
    costs : ndarray(float64, ndim=3), shape (W, max_k + 1, 4)
        ``(verify_ms, verify_j, draft_ms, draft_j)`` of every measured cell.
    meta : dict
        The optional ``[meta]`` table (device, energy source, ...); never read by the planner.
    extras : dict
        ``(n, k) -> {field: value}`` of per-cell fields beyond the six standard ones.
    contexts : ndarray(int64, ndim=1), shape (C,)
        Measured contexts (mean KV tokens per decoding sequence), ascending; empty for a table
        without a context axis (docs/tables.md#context).
    context_costs : ndarray(float64, ndim=4), shape (C, W, max_k + 1, 4)
        The grid at each measured context; ``costs`` is the one at ``reference_context``.
    reference_context : int or None
        The context ``costs`` prices; None without a context axis.
    """

    __slots__ = ("key", "widths", "costs", "meta", "extras", "source", "contexts", "context_costs",
                 "reference_context")

    def __init__(self, key, widths, costs, meta=None, extras=None, source="<table>", contexts=None,
                 context_costs=None, reference_context=None):
        # The arrays are checked as stored (int64 and float64): the kernels index them without
        # bounds checks.
        problems = _format.key_problems(key)
        arrays, more = _format.checked_arrays(widths, costs, contexts, context_costs, reference_context)
        problems += more
        if problems:
            raise TableError(f"{source}: the cost table is refused", problems)
        self.key = key
        self.widths, self.costs, contexts, context_costs = arrays
        self.widths.flags.writeable = False
        self.costs.flags.writeable = False
        self.meta = dict(meta or {})
        self.extras = dict(extras or {})
        self.source = source
        if contexts is None:
            self.contexts = np.zeros(0, dtype=np.int64)
            self.context_costs = self.costs[np.newaxis][:0]
            self.reference_context = None
        else:
            self.contexts, self.context_costs = contexts, context_costs
            self.reference_context = int(reference_context)
            self.contexts.flags.writeable = False
            self.context_costs.flags.writeable = False

    # -- building -------------------------------------------------------------------------
    @classmethod
    def from_cells(cls, key: TableKey, cells, meta=None, extras=None, source="<cells>", axis=None):
        """A table from a key and an iterable of :class:`Cell`; refused as :meth:`parse` would.

        ``axis`` (a :class:`ContextAxis`) gives the table a context axis: ``cells`` are the grid at
        ``axis.reference`` and ``axis.at`` every cell's costs at each context.
        """
        cells = [c if isinstance(c, Cell) else Cell(*c) for c in cells]
        problems = _format.key_problems(key) + _format.rule_problems(cells)
        if axis is not None:
            problems += [p for p in _axis_problems(cells, axis) if p not in problems]
        if problems:
            raise TableError(f"{source}: the cost table is refused", problems)
        widths = sorted({c.n for c in cells})
        max_k = max(c.k for c in cells)
        costs = np.empty((len(widths), max_k + 1, 4))
        row = {n: i for i, n in enumerate(widths)}
        for c in cells:
            costs[row[c.n], c.k] = [getattr(c, f) for f in COST_FIELDS]
        if axis is None:
            return cls(key, widths, costs, meta, extras, source)
        grid = np.empty((len(axis.tokens),) + costs.shape)
        for (n, k), per_context in axis.at.items():
            grid[:, row[n], k] = per_context
        return cls(key, widths, costs, meta, extras, source, axis.tokens, grid, axis.reference)

    @classmethod
    def from_contexts(cls, tables, reference=None, meta=None, source="<tables by context>"):
        """One table with a context axis from plain tables measured at several contexts.

        Parameters
        ----------
        tables : dict
            ``context -> CostTable`` (no axis), contexts integers >= 1; every table of one schema,
            box class and recipe, with the same widths and depths.
        reference : int, optional
            The context the plain grid prices (default: the smallest).
        meta : dict, optional
            Default: the reference table's, with ``context_tokens`` set to the reference.

        Each mode's plan digest is kept when every context's is the same; otherwise it becomes
        ``contexts:`` and the SHA-256 of the (context, digest) list, so the key still tells
        different measurements apart.
        """
        if not isinstance(tables, dict):
            raise TableError(f"{source}: the tables to combine are a dict of context -> CostTable, got "
                             f"{type(tables).__name__}")
        if not tables:
            raise TableError(f"{source}: no table to combine; give one per context")
        bad = [c for c in tables if not is_int(c) or c < 1]
        if bad:
            raise TableError(f"{source}: context {show(bad[0])} is not an integer >= 1 (mean KV tokens per "
                             "decoding sequence)")
        contexts = sorted(tables)
        odd = [c for c in contexts if not isinstance(tables[c], CostTable)]
        if odd:
            raise TableError(f"{source}: the table at context {odd[0]} is {show(tables[odd[0]])}, not a CostTable "
                             "(CostTable.load(path))")
        reference = contexts[0] if reference is None else reference
        if not is_int(reference) or reference not in tables:
            raise TableError(f"{source}: reference context {show(reference)} is not one of {contexts}")
        ref = tables[reference]
        problems = []
        for c in contexts:
            t = tables[c]
            if t.contexts.size:
                problems.append(f"the table at context {c} has a context axis of its own")
            if (t.key.schema, t.key.box_class, t.key.recipe) != (ref.key.schema, ref.key.box_class, ref.key.recipe):
                problems.append(f"the table at context {c} is for {t.key.box_class} / {t.key.recipe}, the one at "
                                f"{reference} for {ref.key.box_class} / {ref.key.recipe}")
            if not np.array_equal(t.widths, ref.widths) or t.max_k != ref.max_k:
                problems.append(f"the table at context {c} has widths {t.widths.tolist()} and depths 0..{t.max_k}, "
                                f"the one at {reference} widths {ref.widths.tolist()} and depths 0..{ref.max_k}: "
                                "the axis would be ragged")
        if problems:
            raise TableError(f"{source}: the tables cannot share a context axis", problems)
        digests = {}
        for mode in sorted(set().union(*(tables[c].key.plan_digests for c in contexts))):
            each = [(int(c), tables[c].key.plan_digests.get(mode)) for c in contexts]
            if len({d for _, d in each}) == 1:
                digests[mode] = each[0][1]
            else:
                text = json.dumps(each, separators=(",", ":"))
                digests[mode] = "contexts:sha256:" + hashlib.sha256(text.encode("utf-8")).hexdigest()
        key = TableKey(ref.key.schema, ref.key.box_class, ref.key.recipe, digests)
        if meta is None:
            meta = dict(ref.meta)
            if "context_tokens" in meta:
                meta["context_tokens"] = int(reference)
        grid = np.stack([tables[c].costs for c in contexts])
        return cls(key, ref.widths, ref.costs, meta, ref.extras, source, contexts, grid, reference)

    @classmethod
    def parse(cls, text, source: str = "<text>", *, usage: str | None = None) -> "CostTable":
        """Parse and validate table text (docs/formats.md#cost-table, docs/tables.md#validation).

        ``usage`` is how a command takes the table and the calibration when not as ``--table`` and
        ``--calibration`` (``"specsim plan TABLE CALIBRATION"``): the hint given when the text is a
        calibration names the swap that way.

        Raises
        ------
        TableError
            Listing every problem: file, cell index and values, and the rule each breaks.
        """
        key, cells, meta, extras, axis = _format.read(text, source, usage)
        return cls.from_cells(key, cells, meta, extras, source, axis)

    @classmethod
    def load(cls, path, *, usage: str | None = None) -> "CostTable":
        """Read and validate a table file (``usage``: as :meth:`parse` takes it)."""
        text = read_input(path, "the cost table", TableError)
        return cls.parse(text, str(Path(path)), usage=usage)

    @staticmethod
    def render(key: TableKey, cells, meta=None, extras=None, axis=None) -> str:
        """The table file text for ``key`` and ``cells`` (and a context ``axis``), sorted by (n, k).

        Validated by parsing it back: a grid that would be refused when read is refused here,
        and a key or cell that would not read back identically raises.
        """
        cells = [c if isinstance(c, Cell) else Cell(*c) for c in cells]
        problems = _format.key_problems(key) + _format.rule_problems(cells)
        if axis is not None:
            problems += [p for p in _axis_problems(cells, axis) if p not in problems]
        if problems:
            raise TableError("the cost table to write is refused", problems)
        try:
            text = _format.write(key, cells, meta, extras, axis)
        except ValueError as e:
            raise TableError(f"the cost table cannot be written as TOML: {e}") from e
        back = CostTable.parse(text, "the table to write")
        if back.key != key or sorted(back.cells) != sorted(cells) or (back.axis is None) != (axis is None) or (
                axis is not None and (back.axis.tokens, back.axis.reference, back.axis.at)
                != (tuple(axis.tokens), axis.reference, {nk: tuple(map(tuple, v)) for nk, v in axis.at.items()})):
            raise TableError("the rendered table does not read back to the same key and cells")
        return text

    def to_text(self) -> str:
        """This table rendered again, with its meta, extra cell fields and context axis."""
        return self.render(self.key, self.cells, self.meta, self.extras, self.axis)

    # -- the context axis -------------------------------------------------------------------
    @property
    def axis(self):
        """The :class:`ContextAxis` of a table with one, else None."""
        if not self.contexts.size:
            return None
        at = {(int(n), k): tuple(tuple(map(float, self.context_costs[c, i, k])) for c in range(self.contexts.size))
              for i, n in enumerate(self.widths) for k in range(self.costs.shape[1])}
        return ContextAxis(tuple(map(int, self.contexts)), self.reference_context, at)

    def at_context(self, context) -> "CostTable":
        """This table's grid at ``context`` (mean KV tokens per decoding sequence) as a table
        without an axis: each cost linear in context between the two measured contexts around
        it, the nearest one's outside them (docs/tables.md#context). A table without an axis is
        its own grid at every context."""
        context = check_context(context)
        if not self.contexts.size:
            return self
        from specsim.table._kernels import context_slice_nb  # lazy: Numba loads with the first kernel call

        out = np.empty(self.costs.shape)
        context_slice_nb(self.contexts, self.context_costs, context, out)
        meta = dict(self.meta)
        meta["context_tokens"] = int(context) if float(context).is_integer() else context
        return CostTable(self.key, self.widths, out, meta, self.extras, f"{self.source} at context {context:g}")

    # -- lookup ---------------------------------------------------------------------------
    @property
    def max_k(self) -> int:
        """Deepest measured draft depth."""
        return self.costs.shape[1] - 1

    @property
    def cells(self) -> list:
        """Every measured cell, sorted by (n, k)."""
        return [
            Cell(int(n), k, *map(float, self.costs[i, k]))
            for i, n in enumerate(self.widths)
            for k in range(self.costs.shape[1])
        ]

    def cell(self, n: int, k: int, context=None):
        """The cost at width ``n`` and depth ``k``, interpolated in width (docs/tables.md#lookup)
        and, with ``context`` on a table with a context axis, in context first
        (docs/tables.md#context); without ``context`` the reference context's grid.

        Returns None when ``k > max_k``.
        """
        n, k = _check_index(n, "n"), _check_index(k, "k")
        if k > self.max_k:
            return None
        if context is not None:  # one number, checked as the planner checks it (not [1000])
            context = check_context(context)
            return Cell(n, k, *map(float, self.lookup([min(n, INT64_MAX)], [k], contexts=[context])[0]))
        from specsim.table._kernels import cell_into_nb  # lazy: Numba loads with the first kernel call

        out = np.empty(4)
        # Every n at or above the widest measured width takes that width's costs, so clamping to
        # int64 changes nothing but lets any Python int (the metrale serve's usize) be asked.
        cell_into_nb(self.widths, self.costs, min(n, INT64_MAX), k, out)
        return Cell(n, k, *map(float, out))

    def lookup(self, ns, ks, out=None, contexts=None):
        """Cells for arrays of widths and depths in one call.

        Parameters
        ----------
        ns, ks : array_like of int, shape (N,)
        out : ndarray(float64, ndim=2), shape (N, 4), optional
            Filled in place when given.
        contexts : array_like of float, shape (N,), optional
            The context of each query (each > 0); a table without a context axis ignores them.

        Returns
        -------
        ndarray(float64, ndim=2), shape (N, 4)
            ``(verify_ms, verify_j, draft_ms, draft_j)`` per query; NaN rows where ``k > max_k``.
        """
        from specsim.table._kernels import lookup_nb  # lazy: Numba loads with the first kernel call

        ns, ks = _index_array(ns, "widths"), _index_array(ks, "depths")
        if ns.shape != ks.shape or ns.ndim != 1:
            raise TableError(f"lookup needs two 1-d arrays of one length, got shapes {ns.shape} and {ks.shape}")
        if (ns < 0).any() or (ks < 0).any():
            raise TableError("lookup widths and depths must be >= 0")
        if out is None:
            out = np.empty((ns.shape[0], 4))
        elif not (isinstance(out, np.ndarray) and out.dtype == np.float64 and out.shape == (ns.shape[0], 4)
                  and out.flags.c_contiguous and out.flags.writeable):
            # The kernel writes N rows without bounds checks: a smaller buffer would be overrun.
            raise TableError(f"lookup out must be a writable C-contiguous float64 array of shape ({ns.shape[0]}, 4), "
                             f"got {getattr(out, 'dtype', type(out).__name__)} {getattr(out, 'shape', '')}")
        if contexts is not None:
            given = np.asarray(contexts, dtype=object)
            if given.ndim != 1:
                raise TableError(f"lookup contexts must be a 1-d array, one context per query, got shape {given.shape}")
            cs = np.ascontiguousarray([check_context(c) for c in given], dtype=np.float64)
            if cs.shape != ns.shape:
                raise TableError(f"lookup contexts must have one per query ({ns.shape[0]}), got {cs.shape[0]}")
            if self.contexts.size:
                from specsim.table._kernels import context_lookup_nb  # lazy: Numba loads with the first kernel call

                context_lookup_nb(self.widths, self.contexts, self.context_costs, ns, ks, cs, out)
                return out
        lookup_nb(self.widths, self.costs, ns, ks, out)
        return out

    def __eq__(self, other):
        if not isinstance(other, CostTable):
            return NotImplemented
        return (
            self.key == other.key
            and np.array_equal(self.widths, other.widths)
            and np.array_equal(self.costs, other.costs)
            and np.array_equal(self.contexts, other.contexts)
            and np.array_equal(self.context_costs, other.context_costs)
            and self.reference_context == other.reference_context
        )

    __hash__ = None

    def __repr__(self):
        return (
            f"CostTable(box_class={self.key.box_class!r}, recipe={self.key.recipe!r}, "
            f"widths={self.widths.tolist()}, max_k={self.max_k})"
        )


def table_arrays(table) -> tuple:
    """``(widths int64[W], costs float64[W, K + 1, 4])`` of a table as writable copies.

    A table's own arrays are read-only, and a read-only array is another Numba type than the
    writable grids and workspaces the engine hands the same kernels: every caller that gives a
    table's arrays to the planner's, the engine's or the tree-pricing kernels takes these, so each
    kernel is compiled once per process, not once per kind of caller.
    """
    return np.array(table.widths, dtype=np.int64), np.array(table.costs, dtype=np.float64)


def check_context(value) -> float:
    """A context (mean KV tokens per decoding sequence) as a float: a real number (not a string,
    bytes or a boolean), finite and > 0."""
    if number_problem(value, "context", 0.0, low_open=True):
        raise TableError(f"context must be a finite number of tokens > 0 (mean KV tokens per decoding sequence), "
                         f"got {show(value)}")
    return float(value)


def _axis_problems(cells, axis):
    """Breaches of the cell rules at each context of ``axis`` (docs/tables.md#context)."""
    problems = []
    tokens = list(axis.tokens)
    if not tokens or any(not is_int(t) or t < 1 for t in tokens):
        return [f"the context axis {tokens} must be integers >= 1 (mean KV tokens per decoding sequence)"]
    if any(b <= a for a, b in zip(tokens, tokens[1:])):
        return [f"the context axis {tokens} is not strictly ascending: list each context once, smallest first"]
    if axis.reference not in tokens:
        return [f"the reference context {axis.reference!r} is not one of the axis {tokens}"]
    grid = {(c.n, c.k) for c in cells}
    if set(axis.at) != grid:
        odd = sorted(set(axis.at) ^ grid)
        return [f"the context axis is ragged: cell(s) {few(odd)} have costs at some contexts and not at others"]
    for (n, k), per_context in axis.at.items():
        if len(per_context) != len(tokens):
            return [f"cell (n={n}, k={k}) has costs at {len(per_context)} contexts, the axis has {len(tokens)}: "
                    "the context axis is ragged"]
    ref = tokens.index(axis.reference)
    for c, context in enumerate(tokens):
        at = [Cell(cell.n, cell.k, *axis.at[(cell.n, cell.k)][c]) for cell in cells]
        if c == ref:
            if at != cells:
                problems.append(f"the costs at the reference context {context} differ from the cells' plain fields")
            continue
        problems += _format.rule_problems(at, where=lambda i, context=context: f"cells[{i}] at context {context}")
    return problems


def _check_index(value, name):
    # Any size is a width (the serve asks with a usize); only the kind and the sign are checked.

    if not is_int(value) or value < 0:
        raise TableError(f"{name} must be a non-negative integer, got {show(value)}")
    return int(value)


def _index_array(values, name: str):
    """``values`` as a contiguous int64 array; non-integers and integers past int64 refused."""
    try:
        arr = np.asarray(values)
    except (TypeError, ValueError, OverflowError) as e:
        raise TableError(f"lookup {name}: not an array of whole numbers ({e})") from None
    if arr.dtype == object or not (arr.dtype.kind in "iu" or arr.size == 0):
        raise TableError(f"lookup {name} must be whole numbers within 64 bits, got an array of {arr.dtype}")
    if arr.dtype.kind == "u" and arr.size and int(arr.max()) > INT64_MAX:
        raise TableError(f"lookup {name} must fit 64-bit signed integers")
    return np.ascontiguousarray(arr, dtype=np.int64)
