"""``CostTable``: a parsed, validated cost table held as flat arrays (docs/tables.md)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from specsim._io import read_input
from specsim.errors import TableError
from specsim.table import _format
from specsim.table._types import COST_FIELDS, Cell, TableKey


class CostTable:
    """What one speculative step costs at each batch width and draft depth, on one box class.

    Build one with :meth:`parse`, :meth:`load` or :meth:`from_cells`; each refuses a table that
    breaks any rule of docs/tables.md#validation and lists every problem it finds.

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
    """

    __slots__ = ("key", "widths", "costs", "meta", "extras", "source")

    def __init__(self, key, widths, costs, meta=None, extras=None, source="<table>"):
        self.key = key
        self.widths = np.ascontiguousarray(widths, dtype=np.int64)
        self.costs = np.ascontiguousarray(costs, dtype=np.float64)
        self.widths.flags.writeable = False
        self.costs.flags.writeable = False
        self.meta = dict(meta or {})
        self.extras = dict(extras or {})
        self.source = source

    # -- building -------------------------------------------------------------------------
    @classmethod
    def from_cells(cls, key: TableKey, cells, meta=None, extras=None, source="<cells>"):
        """A table from a key and an iterable of :class:`Cell`; refused as :meth:`parse` would."""
        cells = [c if isinstance(c, Cell) else Cell(*c) for c in cells]
        problems = _format.key_problems(key) + _format.rule_problems(cells)
        if problems:
            raise TableError(f"{source}: the cost table is refused", problems)
        widths = sorted({c.n for c in cells})
        max_k = max(c.k for c in cells)
        costs = np.empty((len(widths), max_k + 1, 4))
        row = {n: i for i, n in enumerate(widths)}
        for c in cells:
            costs[row[c.n], c.k] = [getattr(c, f) for f in COST_FIELDS]
        return cls(key, widths, costs, meta, extras, source)

    @classmethod
    def parse(cls, text, source: str = "<text>") -> "CostTable":
        """Parse and validate table text (docs/formats.md#cost-table, docs/tables.md#validation).

        Raises
        ------
        TableError
            Listing every problem: file, cell index and values, and the rule each breaks.
        """
        key, cells, meta, extras = _format.read(text, source)
        return cls.from_cells(key, cells, meta, extras, source)

    @classmethod
    def load(cls, path) -> "CostTable":
        """Read and validate a table file."""
        text = read_input(path, "the cost table", TableError)
        return cls.parse(text, str(Path(path)))

    @staticmethod
    def render(key: TableKey, cells, meta=None, extras=None) -> str:
        """The table file text for ``key`` and ``cells``, sorted by (n, k).

        Validated by parsing it back: a grid that would be refused when read is refused here,
        and a key or cell that would not read back identically raises.
        """
        cells = [c if isinstance(c, Cell) else Cell(*c) for c in cells]
        problems = _format.key_problems(key) + _format.rule_problems(cells)
        if problems:
            raise TableError("the cost table to write is refused", problems)
        try:
            text = _format.write(key, cells, meta, extras)
        except ValueError as e:
            raise TableError(f"the cost table cannot be written as TOML: {e}") from e
        back = CostTable.parse(text, "the table to write")
        if back.key != key or sorted(back.cells) != sorted(cells):
            raise TableError("the rendered table does not read back to the same key and cells")
        return text

    def to_text(self) -> str:
        """This table rendered again, with its meta and extra cell fields."""
        return self.render(self.key, self.cells, self.meta, self.extras)

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

    def cell(self, n: int, k: int):
        """The cost at width ``n`` and depth ``k``, interpolated in width (docs/tables.md#lookup).

        Returns None when ``k > max_k``.
        """
        n, k = _check_index(n, "n"), _check_index(k, "k")
        if k > self.max_k:
            return None
        from specsim.table._kernels import cell_into_nb

        out = np.empty(4)
        # Every n at or above the widest measured width takes that width's costs, so clamping to
        # int64 changes nothing but lets any Python int (the metrale serve's usize) be asked.
        cell_into_nb(self.widths, self.costs, min(n, _INT64_MAX), k, out)
        return Cell(n, k, *map(float, out))

    def lookup(self, ns, ks, out=None):
        """Cells for arrays of widths and depths in one call.

        Parameters
        ----------
        ns, ks : array_like of int, shape (N,)
        out : ndarray(float64, ndim=2), shape (N, 4), optional
            Filled in place when given.

        Returns
        -------
        ndarray(float64, ndim=2), shape (N, 4)
            ``(verify_ms, verify_j, draft_ms, draft_j)`` per query; NaN rows where ``k > max_k``.
        """
        from specsim.table._kernels import lookup_nb

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
        lookup_nb(self.widths, self.costs, ns, ks, out)
        return out

    def __eq__(self, other):
        if not isinstance(other, CostTable):
            return NotImplemented
        return (
            self.key == other.key
            and np.array_equal(self.widths, other.widths)
            and np.array_equal(self.costs, other.costs)
        )

    __hash__ = None

    def __repr__(self):
        return (
            f"CostTable(box_class={self.key.box_class!r}, recipe={self.key.recipe!r}, "
            f"widths={self.widths.tolist()}, max_k={self.max_k})"
        )


_INT64_MAX = (1 << 63) - 1


def _check_index(value, name):
    # Any size is a width (the serve asks with a usize); only the kind and the sign are checked.
    from specsim._checks import is_int, show

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
    if arr.dtype.kind == "u" and arr.size and int(arr.max()) > _INT64_MAX:
        raise TableError(f"lookup {name} must fit 64-bit signed integers")
    return np.ascontiguousarray(arr, dtype=np.int64)
