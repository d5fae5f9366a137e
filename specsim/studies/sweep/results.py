"""A sweep's results file: what a point's row depends on (its inputs, digested part by part, so a
resume says which one changed), and reading, checking and writing the rows (CSV or Parquet).

Why one module: the digests and the row checks are the two halves of deciding whether a kept row
may be reused, and reading, checking and writing the file share its columns' rules.
"""

from __future__ import annotations

import csv
import functools
import hashlib
import io
import json
import math
import re
from dataclasses import dataclass
from pathlib import Path

from specsim._checks import COUNT_MAX, int_problem, number_problem, show
from specsim._io import atomic_write_bytes, atomic_write_text, csv_rows, decode_text, loads_json, read_input
from specsim.errors import GridError
from specsim.sim.engine import ENGINE_SEMANTICS
from specsim.sim.options import ServerOptions
from specsim.studies.sweep.grid import RUN_AXES, Grid, point_options


# -- results files ----------------------------------------------------------------------------------

def _is_parquet(path) -> bool:
    return str(path).lower().endswith((".parquet", ".pq"))


# Columns that hold names, not numbers, whatever their text looks like (a point id can be all
# digits, or read as a float like "1e5").
TEXT_COLUMNS = ("point_id", "inputs_digest", "inputs", "run_digest", "trace", "table", "calibration", "policy", "label",
                "depth_histogram", "router")


# -- what a point's row depends on ----------------------------------------------------------------
#
# A row is reused on a later run only when every input it was computed from is the same: the
# trace's requests (after the reader's options), the table's and the calibration's files, the
# server options, the point's run axes (policy, traffic scale, replicas, router; seeds included, a
# server option), the SLO and the engine's semantics version. Each is digested on its own, so a
# resume can say which input changed.
INPUT_PARTS = ("trace", "table", "calibration", "server", "run", "slo", "engine")


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:16]


def _canonical(value) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=str).encode()


def requests_digest(requests) -> str:
    """Digest of a request array's content: every field's name, dtype and values."""
    import numpy as np

    parts = []
    for name in requests.dtype.names:
        column = np.ascontiguousarray(requests[name])
        parts.append(name.encode() + b":" + column.dtype.str.encode() + b":" + column.tobytes())
    return _sha(b"\0".join(parts))


def file_digest(path) -> str:
    return _sha(Path(path).read_bytes())


def server_digest(options: dict) -> str:
    """Digest of a point's server options; a prefill curve counts by its values, not its path."""
    import numpy as np

    opts = dict(options)
    if opts.get("prefill_curve") is not None:
        curve = ServerOptions(prefill_curve=opts["prefill_curve"]).prefill_curve
        opts["prefill_curve"] = _sha(b"|".join(np.ascontiguousarray(c, dtype=np.float64).tobytes() for c in curve))
    return _sha(_canonical(opts))


def point_inputs(grid: Grid, point: dict, digests: dict) -> dict:
    """The digests of everything one point's row depends on, by :data:`INPUT_PARTS`.

    ``digests`` maps ``(kind, name)`` (kind ``trace``, ``table`` or ``calibration``) to the
    content digest of that input.
    """
    run = {k: v for k, v in point.items() if k in RUN_AXES}
    return {
        "trace": digests[("trace", point["trace"])],
        "table": digests[("table", point["table"])],
        "calibration": digests[("calibration", point["calibration"])],
        "server": server_digest(point_options(grid, point)),
        "run": _sha(_canonical(run)),
        "slo": _sha(_canonical(grid.slo)),
        "engine": ENGINE_SEMANTICS,
    }


def inputs_digest(inputs: dict) -> str:
    """One digest of a point's input digests (the ``inputs_digest`` column)."""
    return _sha(_canonical(inputs))


def _changed_parts(row: dict, inputs: dict) -> list:
    """Which inputs of a kept row differ from this run's (all of them when the row has none)."""
    try:
        kept = json.loads(row.get("inputs") or "")
    except (TypeError, ValueError):
        return ["unrecorded"]
    if not isinstance(kept, dict):
        return ["unrecorded"]
    return [part for part in INPUT_PARTS if kept.get(part) != inputs[part]] or ["digest"]


def check_results_path(path) -> list:
    """The rows kept in a results file (:func:`read_results`), read once before any work: a path
    that is not .csv/.parquet, or a file that is not sweep results or has a damaged row, is
    refused."""
    path = Path(path)
    if not str(path).lower().endswith((".csv", ".parquet", ".pq")):
        raise GridError(f"{path}: results go to a .csv or .parquet file")
    if path.is_dir():
        raise GridError(f"{path}: is a folder; give a results file name")
    return read_results(path)


def read_results(path) -> list:
    """Rows of an existing results file (CSV or Parquet), or [] when there is none; a damaged row
    (:func:`results_rows`) is refused naming it."""
    rows, damaged = results_rows(path)
    if damaged:
        raise damaged_error(path, damaged)
    return rows


def damaged_error(path, damaged) -> GridError:
    """The refusal of a results file with ``damaged`` rows (a list of :class:`DamagedRow`)."""
    d = damaged[0]
    more = f" ({len(damaged) - 1} more damaged row(s))" if len(damaged) > 1 else ""
    return GridError(f"{path}: {d.where}: {d.detail} (a row {d.kind}){more}; delete the row (its point is "
                     "computed again), repair it, or choose another -o")


@dataclass(frozen=True)
class DamagedRow:
    """A row of a results file that is not whole or not valid: where it is (``line 7`` of a CSV,
    ``row 7`` of a Parquet file), what kind of damage (one of the kinds below) and the detail."""

    where: str
    kind: str
    detail: str


# What a row can be damaged by.
CUT_SHORT = "cut short"
TOO_WIDE = "with more fields than the header"
BAD_VALUE = "with a value out of range"
BAD_INPUTS = "with inputs that do not match their digest"
BAD_ID = "without a point id"
EDITED = "whose columns do not match its point"

# What :func:`specsim.studies.sweep.grid.point_id` makes: the first 16 hex digits of a SHA-256.
POINT_ID = re.compile(r"[0-9a-f]{16}")

# What the summary's columns may hold (result_row flattens the summary of specsim.sim.metrics):
# a kept row with anything else was cut short or edited, and is not reused. An empty cell passes
# (a figure can be undefined, e.g. tokens/s of a run without requests); any other number must be
# finite whatever its column.
COUNT_COLUMNS = frozenset({"requests", "output_tokens", "prompt_tokens", "preemptions", "recomputed_tokens",
                           "drafts_cut", "kv_block_size", "kv_capacity_blocks", "kv_peak_blocks", "replicas", "gpus"})
FRACTION_COLUMNS = frozenset({"acceptance_rate", "overload_served_fraction", "kv_mean", "kv_peak",
                              "slo_ttft_attainment", "slo_tpot_attainment", "slo_attainment"})
NON_NEGATIVE_COLUMNS = frozenset({"makespan_s", "tokens_per_s", "tokens_per_s_per_gpu", "energy_j", "j_per_token",
                                  "mean_power_w", "mean_width", "accepted_per_step", "nodes_per_sequence",
                                  "overload_first_quarter_s",
                                  "overload_last_quarter_s", "kv_mean_blocks", "slo_ttft_target_s",
                                  "slo_tpot_target_s"})
# Column families by prefix: the step counters, the latency percentiles, the energy breakdown.
COUNT_PREFIXES = ("steps_",)
NON_NEGATIVE_PREFIXES = ("ttft_s_", "tpot_s_", "e2e_s_", "queue_s_", "energy_breakdown_")
FLAG_COLUMNS = frozenset({"overload_flag"})
JSON_COLUMNS = frozenset({"depth_histogram"})


def results_rows(path):
    """The whole, valid rows of a results file (CSV or Parquet) and its damaged ones.

    The one place results rows are read and checked. A row is whole when it has exactly the
    header's fields and, the last row of a CSV, ends with a line end (the writer ends every row
    with one, so a row without is the place a copy or a full disk cut the file); valid when its
    ``point_id`` is one, every cell fits its column and its ``inputs`` parse as JSON and digest to
    its ``inputs_digest`` (:func:`row_problem`). A file that is not sweep results at all is refused.

    Returns
    -------
    (list of dict, list of DamagedRow)
    """
    path = Path(path)
    if not path.exists():
        return [], []
    not_results = f"{path}: not a sweep results file (no point_id column); choose another -o"
    if _is_parquet(path):
        pq = _pyarrow_parquet()
        try:
            table = pq.read_table(path)
        except Exception as e:  # pyarrow raises its own error classes for a damaged file
            raise GridError(f"{path}: cannot read it as Parquet ({e}); choose another -o") from None
        if "point_id" not in table.column_names:
            raise GridError(not_results)
        return _split_rows((f"row {i + 1}", r) for i, r in enumerate(table.to_pylist()))
    what = "the sweep results file"
    text = decode_text(read_input(path, what, GridError), what, path, GridError)
    header, rows = csv_rows(text, what, path, GridError)
    if header is None:
        return [], []
    if "point_id" not in header:
        raise GridError(not_results)
    dup = sorted({h for h in header if header.count(h) > 1})
    if dup:
        raise GridError(f"{path}:1: the header names {', '.join(map(show, dup[:5]))} twice; choose another -o")
    rows = [(line, row) for line, row in rows if row]
    ended = text.endswith(("\n", "\r"))
    parsed, damaged = [], []
    for i, (line, row) in enumerate(rows):
        where = f"line {line}"
        if len(row) < len(header):
            damaged.append(DamagedRow(where, CUT_SHORT, f"{len(row)} fields where the header has {len(header)}"))
        elif len(row) > len(header):
            damaged.append(DamagedRow(where, TOO_WIDE, f"{len(row)} fields where the header has {len(header)}"))
        elif i == len(rows) - 1 and not ended:
            damaged.append(DamagedRow(where, CUT_SHORT, "the file ends inside it"))
        else:
            parsed.append((where, {k: (v if k in TEXT_COLUMNS else _from_text(v)) for k, v in zip(header, row)}))
    kept, bad = _split_rows(parsed)
    return kept, damaged + bad


def _split_rows(rows):
    """``(valid rows, damaged rows)`` of ``(where, row)`` pairs, by :func:`row_problem`."""
    kept, damaged = [], []
    for where, row in rows:
        problem = row_problem(row)
        if problem is None:
            kept.append(row)
        else:
            damaged.append(DamagedRow(where, *problem))
    return kept, damaged


def row_problem(row: dict):
    """``None`` for a valid row, else ``(kind, detail)``: a ``point_id`` that is not one (16 hex
    digits, :data:`POINT_ID`), a cell that does not fit its column (:func:`cell_problem`), or
    ``inputs`` that do not parse or do not digest to ``inputs_digest`` (a row from before inputs
    were recorded has neither, and passes: the sweep recomputes it)."""
    pid = row.get("point_id")
    if not (isinstance(pid, str) and POINT_ID.fullmatch(pid)):
        return BAD_ID, f"point_id = {show(pid)} is not a point id (16 hex digits, the hash specsim names a point by)"
    for name, value in row.items():
        problem = cell_problem(name, value)
        if problem:
            return BAD_VALUE, problem
    digest, text = row.get("inputs_digest"), row.get("inputs")
    if not digest and not text:
        return None
    inputs = _json_cell(text)
    if not isinstance(inputs, dict):
        return BAD_INPUTS, f"inputs = {show(text)} is not a JSON object"
    if inputs_digest(inputs) != digest:
        return BAD_INPUTS, f"inputs_digest = {show(digest)} is not the digest of its inputs"
    return None


def point_row_problem(row: dict, point: dict, labels) -> str | None:
    """``None`` when a kept row describes the grid point its ``point_id`` names, else what
    differs: every axis column must hold the point's value (as the file stores it), and the
    ``label`` one of ``labels`` (what a run of the point's policy may be labelled). The inputs'
    digest cannot see these columns, and the verdict reads them."""
    for name, value in point.items():
        got = row.get(name)
        if not (got == value or got == _stored(name, value)):
            return f"{name} = {show(got)} where its point has {show(value)}"
    label = row.get("label")
    if label is not None and label not in labels:
        return f"label = {show(label)} is not a label of its point's policy {show(point.get('policy'))}"
    return None


def _stored(name: str, value):
    """``value`` as a CSV results file reads it back in column ``name``."""
    text = "" if value is None else str(_to_text(value))
    return text if name in TEXT_COLUMNS else _from_text(text)


def cell_problem(name: str, value) -> str | None:
    """``None`` if ``value`` fits results column ``name`` (see :data:`COUNT_COLUMNS` and the
    others), else what is wrong with it."""
    if value is None or value == "":
        return None
    rule = _column_rule(name)
    kind = type(value)
    # The plain cases first, without a message: a large sweep's file holds millions of cells.
    if rule == "count":
        return None if kind is int and 0 <= value <= COUNT_MAX else int_problem(value, name)
    if rule in NUMBER_RULES:
        low, high = NUMBER_RULES[rule]
        if kind is float and math.isfinite(value) and low <= value <= high:
            return None
        if kind is int and abs(value) > COUNT_MAX:  # past what a float check can take in
            return f"{name} = {show(value)} is out of range"
        return number_problem(value, name, low, high)
    if rule == "flag":
        return None if kind is bool else f"{name} = {show(value)} must be True or False"
    if rule == "json":
        return None if isinstance(_json_cell(value), dict) else f"{name} = {show(value)} is not a JSON object"
    return number_problem(value, name) if kind is float and not math.isfinite(value) else None


# The bounds of the number rules of _column_rule.
NUMBER_RULES = {"fraction": (0.0, 1.0), "non-negative": (0.0, math.inf)}


@functools.lru_cache(maxsize=1024)
def _column_rule(name: str) -> str:
    # Once per column name, not per cell: a large sweep's file holds millions of cells.
    if name in COUNT_COLUMNS or name.startswith(COUNT_PREFIXES):
        return "count"
    if name in FRACTION_COLUMNS:
        return "fraction"
    if name in NON_NEGATIVE_COLUMNS or name.startswith(NON_NEGATIVE_PREFIXES):
        return "non-negative"
    if name in FLAG_COLUMNS:
        return "flag"
    if name in JSON_COLUMNS:
        return "json"
    return "any"


def _json_cell(text):
    """A JSON cell's value, or None where it does not parse."""
    if not isinstance(text, str):
        return None
    try:
        return loads_json(text, "the cell", "results", GridError)
    except GridError:
        return None


def write_results(path, rows, columns) -> None:
    """All rows, atomically (a reader never sees a half-written file)."""
    if _is_parquet(path):
        pa = _pyarrow()
        pq = _pyarrow_parquet()
        table = pa.Table.from_pylist([{c: r.get(c) for c in columns} for r in rows])
        buf = io.BytesIO()
        pq.write_table(table, buf)
        atomic_write_bytes(path, buf.getvalue())
        return
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(columns)
    for r in rows:
        writer.writerow(["" if r.get(c) is None else _to_text(r.get(c)) for c in columns])
    atomic_write_text(path, out.getvalue())


def _to_text(value):
    if isinstance(value, float):
        return repr(value)
    return value


def _from_text(text):
    """A CSV cell as ``int`` where ``int`` reads it, else ``float``, ``bool`` or the text."""
    if text == "":
        return None
    # float first: most cells are figures, and a refused int() per cell (an exception) was most of
    # the time a large file took to read.
    try:
        value = float(text)
    except ValueError:
        return text == "True" if text in ("True", "False") else text
    if not (value.is_integer() or math.isinf(value)):  # what int() reads is whole, or past the floats
        return value
    try:
        return int(text)
    except ValueError:  # "2.0", "inf"; also Python's refusal of integers past 4,300 digits
        return value


def _pyarrow():
    try:
        import pyarrow  # optional (the dist extra): loaded only for Parquet
    except ImportError:
        raise GridError("writing Parquet needs pyarrow (pip install pyarrow), or give a .csv path") from None
    return pyarrow


def _pyarrow_parquet():
    _pyarrow()
    import pyarrow.parquet as pq  # optional (the dist extra): loaded only for Parquet

    return pq
