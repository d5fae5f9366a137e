"""Raw serve logs binned into fitting counts (docs/calibration.md#fitting).

Two logs are read, each as CSV (a header row naming the columns, in any order; other columns are
ignored) or JSON Lines (one object per line; chosen by a ``.jsonl``, ``.ndjson`` or ``.json``
suffix):

- a **per-draft log**, one row per drafted token: ``step`` (verify step id, integer),
  ``sequence`` (sequence id within the step, integer), ``position`` (1-based draft position),
  ``confidence`` (the drafter's top-1 log-probability; ``nan``, or JSON ``null``, when unknown)
  and ``accepted`` (``1``/``0`` or ``true``/``false``). A chain is the rows of one
  ``(step, sequence)``: its positions must run 1, 2, .. without gaps or repeats. A draft is
  *reached* when every draft before it in its chain was accepted; rows after a chain's first
  rejection are not reached, whatever their ``accepted`` says, and are counted apart, not
  binned. Each chain also counts as one verify step ``(drafts, accepted run)``. An optional
  ``request`` column (integer) names the request each chain belongs to: the per-request counts a
  request spread is fitted from (:mod:`specsim.calibration.spread`).
- a **per-step log**, one row per chain: ``drafts`` and ``accepted`` (the accepted run).

Rows may come in any order; a log already in ``(step, sequence, position)`` order is binned
without sorting.
"""

from __future__ import annotations

import csv
import io
import json
import math
import re
import warnings
from pathlib import Path

import numpy as np

from specsim.calibration._types import FitCounts
from specsim.calibration.fit import DEFAULT_EDGES, counts_from_steps, make_counts
from specsim.calibration.spread import drafts_data
from specsim.calibration.tree_fit import TREE_COLUMNS, bin_tree
from specsim.errors import CalibrationError
from specsim._checks import MAX_DEPTH, logprob_problem, show
from specsim._io import decode_text, json_object, loads_json, read_input

DRAFT_COLUMNS = ("step", "sequence", "position", "confidence", "accepted")
STEP_COLUMNS = ("drafts", "accepted")
# Columns a per-draft log may carry besides DRAFT_COLUMNS: a request id here; a tree's ranks and
# parents are tree_fit.TREE_COLUMNS.
DRAFT_OPTIONAL = ("request",)
_JSON_SUFFIXES = (".jsonl", ".ndjson", ".json")


def bin_drafts(step, sequence, position, confidence, accepted, edges=DEFAULT_EDGES, holdout: float = 0.0,
               source: str = "<drafts>"):
    """Bin a per-draft log into counts (docs/calibration.md#fitting), optionally holding out the latest steps.

    Parameters
    ----------
    step, sequence, position : array_like of int, shape (n,)
    confidence : array_like of float, shape (n,)
        Top-1 log-probabilities, compared with the edges in float32.
    accepted : array_like of int or bool, shape (n,)
        1 / True when the target accepted the draft.
    edges : sequence of float, shape (B,)
    holdout : float
        Fraction in [0, 1) of distinct step ids, the highest (latest), whose chains are binned
        apart for a held-out check; 0 keeps everything for fitting.

    Returns
    -------
    (FitCounts, FitCounts or None)
        The counts to fit, and the held-out counts (None without a holdout).
    """
    # lazy: Numba loads with the first kernel call
    from specsim.calibration._fit_kernels import BAD_NEXT, BAD_START, OK, bin_drafts_nb

    edges32 = check_edges(edges, source)
    step = _int_column(step, "step", source)
    n = step.shape[0]
    seq = _int_column(sequence, "sequence", source, n)
    position = _int_column(position, "position", source, n)
    conf64 = np.asarray(confidence, dtype=np.float64).reshape(-1)
    with np.errstate(over="ignore"):
        conf = np.ascontiguousarray(conf64.astype(np.float32))
    # Finiteness is judged on the logged value: a finite log-prob past float32's range still bins
    # (as -inf, in the first bucket); NaN marks every non-finite one for the kernel.
    conf[~np.isfinite(conf64)] = np.nan
    acc = _accepted_column(accepted, source, n)
    if conf.shape[0] != n:
        raise CalibrationError(f"{source}: confidence has {conf.shape[0]} rows, step has {n}")
    order, status, row = _row_order(step, seq, position)
    holdout_from = _holdout_from(step, holdout, source)
    # A chain is never longer than the log nor than its largest position (else it has a gap).
    depth = int(min(n, max(int(position.max()), 0))) if n else 0
    _check_depth(depth, "position", position, source)
    b = edges32.shape[0]
    acc_out = np.zeros((2, b), dtype=np.int64)
    rej_out = np.zeros((2, b), dtype=np.int64)
    steps_out = np.zeros((2, depth + 1, depth + 1), dtype=np.int64)
    apart = np.zeros((2, 2), dtype=np.int64)
    if status == OK:
        status, row = bin_drafts_nb(edges32, step, seq, position, conf, acc, order, holdout_from,
                                    acc_out, rej_out, steps_out, apart)
    if status != OK:
        where = f"{source}: data row {row + 1} (step {step[row]}, sequence {seq[row]}, position {position[row]})"
        if status == BAD_START:
            raise CalibrationError(f"{where} starts its chain: positions must run 1, 2, .. once each")
        assert status == BAD_NEXT
        raise CalibrationError(
            f"{where} repeats or skips a position of its chain: positions must run 1, 2, .. once each"
        )
    groups = (0, 1) if holdout > 0 else (0,)
    if holdout <= 0:  # one group: fold the (empty) held-out side in
        acc_out[0] += acc_out[1]
        rej_out[0] += rej_out[1]
        steps_out[0] += steps_out[1]
        apart[0] += apart[1]
    out = []
    for g in groups:
        steps = {(int(d), int(a)): int(steps_out[g, d, a]) for d, a in zip(*np.nonzero(steps_out[g]))}
        out.append(make_counts(
            [float(e) for e in edges], acc_out[g].tolist(), rej_out[g].tolist(), steps,
            int(apart[g, 0]), int(apart[g, 1]), source if g == 0 else f"{source} (held out)",
        ))
    return out[0], (out[1] if holdout > 0 else None)


def _check_depth(depth, name, column, source):
    """Refuse a chain deeper than docs/limits.md allows before its depth-by-depth table is built."""
    if depth > MAX_DEPTH:
        row = int(np.argmax(column > MAX_DEPTH))
        raise CalibrationError(f"{source}: data row {row + 1}: {name} {int(column[row]):,} is beyond the deepest "
                               f"draft depth, {MAX_DEPTH:,} (docs/limits.md)")


def bin_steps(drafts, accepted, source: str = "<steps>") -> dict:
    """Histogram ``(drafts, accepted run) -> count`` of a per-step log."""
    from specsim.calibration._fit_kernels import OK, bin_steps_nb  # lazy: Numba loads with the first kernel call

    drafts = _int_column(drafts, "drafts", source)
    accepted = _int_column(accepted, "accepted", source, drafts.shape[0])
    depth = int(drafts.max()) if drafts.shape[0] else 0
    _check_depth(depth, "drafts", drafts, source)
    out = np.zeros((max(depth, 0) + 1, max(depth, 0) + 1), dtype=np.int64)
    status, row = bin_steps_nb(drafts, accepted, out)
    if status != OK:
        raise CalibrationError(
            f"{source}: data row {row + 1} has drafts {drafts[row]}, accepted {accepted[row]}: "
            "need 0 <= accepted <= drafts"
        )
    return {(int(d), int(a)): int(out[d, a]) for d, a in zip(*np.nonzero(out))}


def load_drafts_log(path, edges=DEFAULT_EDGES, holdout: float = 0.0, requests: bool = False, tree: bool = False):
    """Read and bin a per-draft log file; see :func:`bin_drafts`.

    With ``requests``, a third value: the log's per-request counts
    (:class:`~specsim.calibration.spread.RequestData`, from the steps that are fitted, not the
    held-out ones) when it has a ``request`` column, else None.

    With ``tree``, a last value: the log's :class:`~specsim.calibration.TreeCounts` (from the
    fitted steps) when it has a ``rank`` column, else None (docs/calibration.md#draft-trees). A
    log with ranks holds trees: its chain part (buckets and priors) is binned from each tree's
    rank-1 path, so a chain logged with ranks fits exactly as without them.
    """
    cols = read_log(path, DRAFT_COLUMNS, (DRAFT_OPTIONAL if requests else ()) + (TREE_COLUMNS if tree else ()))
    tree_counts = None
    if "parent" in cols and "rank" not in cols:
        raise CalibrationError(f"{path}: the log has a parent column but no rank column: a tree's nodes need both "
                               "(a chain needs neither)")
    if "rank" in cols:
        tree_counts, on_chain = _bin_tree(path, cols, holdout)
        cols = {c: v[on_chain] for c, v in cols.items()}
    counts, held = bin_drafts(*(cols[c] for c in DRAFT_COLUMNS), edges=edges, holdout=holdout, source=str(path))
    out = (counts, held)
    if requests:
        out += (_request_data(path, cols, holdout),)
    return out + (tree_counts,) if tree else out


def _bin_tree(path, cols, holdout):
    n = cols["step"].shape[0]
    step = _int_column(cols["step"], "step", str(path))
    others = {c: _int_column(cols[c], c, str(path), n) for c in ("sequence", "position", "rank")}
    parent = _int_column(cols["parent"], "parent", str(path), n) if "parent" in cols else None
    fitted = step < _holdout_from(step, holdout, str(path))
    return bin_tree(step, others["sequence"], others["position"], others["rank"],
                    _accepted_column(cols["accepted"], str(path), n), parent, fitted, str(path),
                    where=lambda row: f"line {_row_line(path, row)}")


def _row_line(path, row) -> int:
    """The file line of 0-based data row ``row`` of a log (read again: only a refusal asks)."""
    path = Path(path)
    text = decode_text(read_input(path, "the log", CalibrationError), "the log", path, CalibrationError)
    lines = text.splitlines()
    if path.suffix.lower() in _JSON_SUFFIXES:
        data = [i for i, line in enumerate(lines, 1) if line.strip()]
    else:  # as np.loadtxt reads: the header, then every line with something before a '#'
        data = [i for i, line in enumerate(lines[1:], 2) if line.split("#", 1)[0].strip()]
    return data[row] if row < len(data) else row + 2


def _request_data(path, cols, holdout):
    data = None
    if "request" in cols:
        fitted = cols["step"] < _holdout_from(cols["step"], holdout, str(path))
        data = drafts_data(*(cols[c][fitted] for c in ("request", "step", "sequence", "position", "accepted")),
                           source=str(path))
    return data


def load_steps_log(path) -> FitCounts:
    """Read a per-step log file into one-bucket counts (a calibration that ignores confidence)."""
    cols = read_log(path, STEP_COLUMNS)
    return counts_from_steps(bin_steps(cols["drafts"], cols["accepted"], str(path)), source=str(path))


def check_edges(edges, source="<edges>"):
    """Bucket edges as float32, refused unless non-empty, finite as float32, strictly ascending
    and the last >= 0."""
    try:
        e64 = np.asarray(edges, dtype=np.float64).reshape(-1)
    except (TypeError, ValueError) as e:
        raise CalibrationError(f"{source}: edges {edges!r} are not numbers") from e
    with np.errstate(over="ignore"):
        e32 = np.ascontiguousarray(e64.astype(np.float32))
    problems = []
    if e32.shape[0] == 0:
        problems.append("there are no edges: give at least one (the last >= 0)")
    # An edge past float32's range would be written as an infinite bucket bound.
    for i in np.flatnonzero(np.isinf(e32))[:5].tolist():
        why = "is infinite" if np.isinf(e64[i]) else "is beyond float32's range (about 3.4e38), the edges' type"
        problems.append(f"edge {i + 1} ({show(float(e64[i]))}) {why}: give a finite log-probability bound")
    if np.isnan(e32).any():
        problems.append("an edge is NaN")
    elif e32.shape[0] and not (np.diff(e32) > 0).all():
        problems.append(f"edges {e64.tolist()} are not strictly ascending as float32")
    if e32.shape[0] and e32[-1] < 0:
        problems.append(f"the last edge {float(e32[-1])!r} is < 0: it must be >= 0")
    if problems:
        raise CalibrationError(f"{source}: the bucket edges are refused", problems)
    return e32


# -- reading files --------------------------------------------------------------------------
def read_log(path, columns, optional=()):
    """Named columns of a CSV or JSON Lines log as arrays (floats for ``confidence``); each of
    ``optional`` too when the log has it (a CSV header names it, or a JSON line holds it: then
    every line must)."""
    path = Path(path)
    text = decode_text(read_input(path, "the log", CalibrationError), "the log", path, CalibrationError)
    read = _read_jsonl if path.suffix.lower() in _JSON_SUFFIXES else _read_csv
    cols = read(text, path, columns, optional)
    if "confidence" in cols:
        problem = logprob_problem(cols["confidence"])
        if problem:
            raise CalibrationError(f"{path}: {problem}")
    return cols


def _read_csv(text, path, columns, optional=()):
    header = text.split("\n", 1)[0]
    names = [h.strip().strip('"').lower() for h in header.strip().split(",")]
    columns = tuple(columns) + tuple(c for c in optional if c in names)
    missing = [c for c in columns if c not in names]
    if missing:
        raise CalibrationError(
            f"{path}: line 1 (the header) lacks the column(s) {', '.join(missing)}; "
            f"found {', '.join(names) or 'nothing'}; a log needs a header naming {', '.join(columns)}"
        )
    _refuse_extra_fields(text, path, len(names))
    usecols = [names.index(c) for c in columns]
    fields = [(c, np.float64 if c == "confidence" else np.int64) for c in columns]
    try:
        data = _loadtxt(text, usecols, fields, converters=None)
    except ValueError as first:
        if "accepted" not in columns:
            raise CalibrationError(f"{path}: {_at_line(first, text)}") from first
        # Slower second pass that also takes true/false in the accepted column.
        conv = {columns.index("accepted"): _bool_text}
        try:
            data = _loadtxt(text, usecols, fields, converters=conv)
        except ValueError as e:
            raise CalibrationError(f"{path}: {_at_line(e, text)}") from e
    return {c: np.ascontiguousarray(data[c]) for c in columns}


def _at_line(error, text) -> str:
    """NumPy's ``... at row R, column C.`` as ``line L: ... (column C)``: its rows count the data
    rows from 0, blank and ``#`` lines skipped, where every other message names the file's line."""
    message = str(error)
    m = re.search(r" at row (\d+), column (\d+)\.?$", message)
    if not m:
        return message
    row = int(m.group(1))
    for lineno, line in enumerate(text.split("\n")[1:], 2):
        if line.split("#", 1)[0].strip():
            if row == 0:
                return f"line {lineno}: {message[:m.start()]} (column {m.group(2)})"
            row -= 1
    return message


def _refuse_extra_fields(text, path, n_header):
    """Refuse the first row with more fields than the header names, as any other bad row: the
    columns are read by position, so a comma too many would shift what is read silently."""
    for lineno, line in enumerate(text.split("\n")[1:], 2):
        if line.count(",") < n_header:
            continue  # too few commas for too many fields, quoted or not
        row = next(csv.reader([line.rstrip("\r")]), [])
        if len(row) > n_header:
            raise CalibrationError(f"{path}: line {lineno} has {len(row)} fields but the header names {n_header}: fix "
                                   "or delete the row (a comma too many, or a row of another file)")


def _loadtxt(text, usecols, fields, converters):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # "input contained no data": an empty log
        return np.loadtxt(io.StringIO(text), delimiter=",", skiprows=1, usecols=usecols, dtype=np.dtype(fields),
                          ndmin=1, quotechar='"', converters=converters)


def _bool_text(text):
    t = text.strip().strip('"').lower()
    if t in ("1", "true"):
        return 1
    if t in ("0", "false"):
        return 0
    raise ValueError(f"accepted value {text!r} is not 1, 0, true or false")


def _read_jsonl(text, path, columns, optional=()):
    numbered = [(i, line) for i, line in enumerate(text.splitlines(), 1) if line.strip()]
    linenos = [i for i, _ in numbered]
    # One parse of all lines as an array is the fast path; per-line parsing finds a bad line
    # (or a line holding two values) with its number.
    try:
        objs = json.loads("[" + ",".join(line for _, line in numbered) + "]", object_pairs_hook=json_object)
    except (ValueError, RecursionError):
        objs = None
    if objs is None or len(objs) != len(numbered):
        # The guarded reader finds the bad line: deep nesting, huge integers, NaN, broken JSON.
        objs = [loads_json(line, f"line {lineno}", path, CalibrationError) for lineno, line in numbered]
    if not set(map(type, objs)) <= {dict}:
        i = next(i for i, o in enumerate(objs) if type(o) is not dict)
        raise CalibrationError(f"{path}: line {linenos[i]} is a JSON {type(objs[i]).__name__}, not an object")
    columns = tuple(columns) + tuple(c for c in optional if any(c in o for o in objs))
    # Whole-column checks (type sets, then one conversion) keep a million lines to about a second.
    return {c: _jsonl_column(objs, linenos, c, columns, path) for c in columns}


def _jsonl_column(objs, linenos, name, columns, path):
    try:
        col = [o[name] for o in objs]
    except KeyError:
        i = next(i for i, o in enumerate(objs) if name not in o)
        raise CalibrationError(f"{path}: line {linenos[i]} has no {name!r} (a row needs {', '.join(columns)})") from None
    if name == "confidence":
        allowed, want, dtype = {int, float, type(None)}, "a number or null", np.float64
    elif name == "accepted":
        allowed, want, dtype = {int, bool}, "true, false, 1 or 0", np.int64
    else:
        allowed, want, dtype = {int}, "an integer", np.int64
    types = set(map(type, col))
    if not types <= allowed:
        i = next(i for i, v in enumerate(col) if type(v) not in allowed)
        raise CalibrationError(f"{path}: line {linenos[i]}: {name} {col[i]!r} is not {want}")
    if type(None) in types:
        col = [math.nan if v is None else v for v in col]
    try:
        return np.array(col, dtype=dtype)
    except OverflowError as e:
        raise CalibrationError(f"{path}: the {name} column holds an integer past 64 bits ({e})") from e


# -- columns --------------------------------------------------------------------------------
def _int_column(values, name, source, n=None):
    arr = np.asarray(values)
    if arr.ndim != 1:
        arr = arr.reshape(-1)
    if arr.dtype.kind == "b" or (arr.dtype.kind not in "iu" and arr.shape[0]):
        raise CalibrationError(f"{source}: the {name} column must hold integers, got {arr.dtype}")
    if arr.dtype.kind == "u" and arr.shape[0] and arr.max() > np.iinfo(np.int64).max:
        raise CalibrationError(f"{source}: the {name} column holds values past the int64 range")
    arr = np.ascontiguousarray(arr, dtype=np.int64)
    if n is not None and arr.shape[0] != n:
        raise CalibrationError(f"{source}: the {name} column has {arr.shape[0]} rows, the first column {n}")
    return arr


def _accepted_column(values, source, n):
    arr = np.asarray(values).reshape(-1)
    if arr.shape[0] != n:
        raise CalibrationError(f"{source}: the accepted column has {arr.shape[0]} rows, the first column {n}")
    if arr.dtype.kind == "b":
        return np.ascontiguousarray(arr, dtype=np.int8)
    if arr.shape[0] and (arr.dtype.kind not in "iuf" or not np.isin(arr, (0, 1)).all()):
        bad = int(np.flatnonzero(~np.isin(arr, (0, 1)))[0]) if arr.dtype.kind in "iuf" else 0
        raise CalibrationError(
            f"{source}: data row {bad + 1}: accepted = {arr[bad].item()!r} is not 1 or 0 (true or false)"
        )
    return np.ascontiguousarray(arr, dtype=np.int8)


def _row_order(step, seq, position):
    """Row visiting order ``(step, seq, position)``: as is, by counting sort, or by lexsort.

    Returns ``(order, status, row)``; a status other than OK names a row whose position breaks
    its chain (found while ordering).
    """
    # lazy: Numba loads with the first kernel call
    from specsim.calibration._fit_kernels import OK, chain_order_nb, drafts_sorted_nb

    n = step.shape[0]
    if n == 0 or drafts_sorted_nb(step, seq, position):
        return np.arange(n, dtype=np.int64), OK, -1
    step_min, seq_min = int(step.min()), int(seq.min())
    seq_span = int(seq.max()) - seq_min + 1
    n_slots = (int(step.max()) - step_min + 1) * seq_span
    if n_slots <= 4 * n + 1024:  # dense ids (the usual case): linear time, no comparisons
        order = np.empty(n, dtype=np.int64)
        status, row = chain_order_nb(step, seq, position, step_min, seq_min, seq_span, n_slots, order)
        return order, status, row
    # Sparse ids: a comparison sort. Chains are checked while binning.
    return np.lexsort((position, seq, step)).astype(np.int64), OK, -1


def _holdout_from(step, holdout, source):
    """The smallest step id held out, or int64 max (nothing held out; folded back after binning)."""
    if not 0.0 <= holdout < 1.0:
        raise CalibrationError(f"{source}: holdout fraction {holdout!r} is outside [0, 1)")
    if holdout == 0.0:
        return np.iinfo(np.int64).max
    ids = np.unique(step)
    held = max(1, int(round(holdout * ids.shape[0])))
    if held >= ids.shape[0]:
        raise CalibrationError(
            f"{source}: holding out {holdout:g} of {ids.shape[0]} distinct steps leaves none to fit; "
            "use a smaller fraction or a longer log"
        )
    return int(ids[ids.shape[0] - held])
