"""Request-trace readers (docs/formats.md): one aligned structured array per trace.

Every reader returns a :class:`~specsim.traces.TraceRead` whose ``requests`` is an array of
:data:`~specsim.traces.REQUEST_DT` (``arrival_s``, ``prompt_tokens``, ``output_tokens``),
sorted by arrival (stable: equal arrivals keep file order), with arrivals in seconds from the
trace start, the earliest kept request.

Formats (detected from the file's first line when not given):

``azure2023`` / ``azure2024``
    Azure LLM inference CSV ``TIMESTAMP,ContextTokens,GeneratedTokens``; naive timestamps with
    7 fractional digits (2023) or ``+00:00`` offsets with 6 (2024). One parser reads both;
    offsets are honoured, naive stamps taken as UTC.
``mooncake``
    JSONL ``{"timestamp": ms from the trace start, "input_length", "output_length", ...}``.
``burstgpt``
    CSV ``Timestamp`` (seconds), ``Request tokens``, ``Response tokens`` among other columns.
``csv``
    Any CSV with a header; ``columns`` names the arrival, prompt and output columns and
    ``arrival_unit`` says what the arrival is (``s``, ``ms``, ``us``, ``ns`` or ``datetime``).

Rows with 0 prompt or 0 output tokens (failed or empty requests: nothing to prefill or nothing
to decode) are skipped and counted. A row that cannot be parsed raises :class:`TraceError`
naming the file and line, or with ``skip_bad_rows`` is skipped and counted.

Options apply in this order: the ``window`` (seconds from the trace start, in the file's own
time; kept arrivals are re-based to the window's start), then ``limit`` (the first N requests
by arrival), then ``rate_scale`` (arrivals divided by it: 2 means twice the traffic). They apply
after the whole file is read, because a file need not be in time order (BurstGPT's is not).

Files are parsed by Numba kernels in blocks of whole lines, so memory holds only the output
arrays and one block of text, never a Python object per row.
"""

from __future__ import annotations

import csv
import io
import math
import os
from pathlib import Path
from typing import NamedTuple

import numpy as np

from specsim._checks import (MAX_TOKENS_PER_REQUEST, arrival_problem, few, flag_problem, is_int, rate_scale_problem,
                             show)
from specsim.errors import TraceError
from specsim.traces._types import REQUEST_DT, ParsedRows, TraceCut, TraceRead
from specsim._io import decode_text, open_input

FORMATS = ("azure2023", "azure2024", "mooncake", "burstgpt", "csv")
ARRIVAL_UNITS = {"s": 1.0, "ms": 1e3, "us": 1e6, "ns": 1e9, "datetime": None}
COLUMN_ROLES = ("arrival", "prompt", "output")

# Column names (CSV) or keys (JSONL) of each fixed format, and its arrival unit.
_FIXED = {
    "azure2023": (("TIMESTAMP", "ContextTokens", "GeneratedTokens"), "datetime"),
    "azure2024": (("TIMESTAMP", "ContextTokens", "GeneratedTokens"), "datetime"),
    "burstgpt": (("Timestamp", "Request tokens", "Response tokens"), "s"),
    "mooncake": (("timestamp", "input_length", "output_length"), "ms"),
}

_BLOCK_BYTES = 32 << 20
_MAX_BAD_LINES = 20
_BOM = b"\xef\xbb\xbf"


def parse_columns(text: str) -> dict:
    """``"arrival=COL,prompt=COL,output=COL"`` -> ``{"arrival": COL, ...}`` (all three required)."""
    out = {}
    for part in (p.strip() for p in str(text).split(",")):
        if not part:
            continue
        role, sep, col = part.partition("=")
        role, col = role.strip(), col.strip()
        if not sep or role not in COLUMN_ROLES or not col:
            raise TraceError(
                f"columns: {part!r} is not ROLE=COLUMN with ROLE one of {', '.join(COLUMN_ROLES)} "
                "(e.g. arrival=ts,prompt=in_tokens,output=out_tokens)"
            )
        if role in out:
            raise TraceError(f"columns: {role} is named twice")
        out[role] = col
    missing = [r for r in COLUMN_ROLES if r not in out]
    if missing:
        raise TraceError(f"columns: no column named for {', '.join(missing)} (give arrival=, prompt= and output=)")
    return out


# The plain CSV layout specsim writes (arrival seconds, prompt and output tokens); detected as csv.
SPECSIM_COLUMNS = {"arrival": "arrival_s", "prompt": "prompt_tokens", "output": "output_tokens"}


def detect_format(path) -> str:
    """The format of a trace file, from its first line (and the first data row for Azure).

    Raises
    ------
    TraceError
        When the file cannot be read or matches no known format.
    """
    path = Path(path)
    head = _text_head(path).removeprefix(_BOM)
    text = head.decode("utf-8", errors="replace")
    stripped = text.lstrip()
    if not stripped:
        raise TraceError(f"{path}: the trace file is empty")
    if stripped.startswith("{"):
        first = stripped.splitlines()[0]
        if all(f'"{k}"' in first for k in _FIXED["mooncake"][0]):
            return "mooncake"
        raise TraceError(
            f"{path}: a JSON-lines file without the Mooncake keys (timestamp, input_length, output_length); "
            "convert it to CSV and read it with format csv and columns"
        )
    rows = list(csv.reader(io.StringIO("\n".join(text.splitlines()[:2]))))
    header = {h.strip().lower() for h in rows[0]} if rows else set()
    if {"timestamp", "contexttokens", "generatedtokens"} <= header:
        stamp = rows[1][0].strip() if len(rows) > 1 and rows[1] else ""
        return "azure2024" if len(stamp) > 19 and any(c in stamp[19:] for c in "+-Z") else "azure2023"
    if {"timestamp", "request tokens", "response tokens"} <= header:
        return "burstgpt"
    if set(SPECSIM_COLUMNS.values()) <= header:
        return "csv"  # specsim's own layout (as `specsim demo` writes it): columns are known
    shown = ",".join(rows[0])[:200] if rows else ""
    raise TraceError(
        f"{path}: cannot tell the trace format from its header {shown!r}; give the format "
        f"({', '.join(FORMATS)}) and, for a plain CSV, the columns (arrival=COL,prompt=COL,output=COL)"
    )


def _text_head(path) -> bytes:
    """The trace's first 64 KiB, with UTF-16/32 and binary content refused (saying which)."""
    try:
        with _open(path) as f:
            head = f.read(1 << 16)
    except OSError as e:
        raise TraceError(f"{path}: cannot read the trace ({e.strerror or e})") from e
    if head.startswith((b"\xff\xfe", b"\xfe\xff")) or b"\x00" in head:
        decode_text(head, "the trace", path, TraceError)
    return head


def read_trace(path, format=None, *, columns=None, arrival_unit=None, rate_scale=1.0, limit=None, window=None,
               skip_bad_rows=False) -> TraceRead:
    """Read a request trace file into one structured array.

    Parameters
    ----------
    path : str or Path
    format : str, optional
        One of :data:`FORMATS`; detected from the file when None.
    columns : dict or str, optional
        Format ``csv`` only: ``{"arrival": COL, "prompt": COL, "output": COL}`` or its text form
        ``"arrival=COL,prompt=COL,output=COL"``; COL is a header name.
    arrival_unit : str, optional
        Format ``csv`` only: ``s`` (default), ``ms``, ``us``, ``ns`` or ``datetime``.
    rate_scale : float
        Arrivals are divided by this (> 0): 2 compresses the trace to twice the request rate.
    limit : int, optional
        Keep the first ``limit`` requests by arrival.
    window : (float, float or None), optional
        Keep arrivals in ``[start_s, end_s)`` seconds from the trace start (before rate
        scaling); kept arrivals are re-based to ``start_s``. None as the end: no end.
    skip_bad_rows : bool
        Skip and count rows that cannot be parsed instead of raising.

    Returns
    -------
    TraceRead
    """
    if not isinstance(path, (str, os.PathLike)) or isinstance(os.fspath(path), bytes):
        raise TraceError(f"path must be a file name (str or Path), got {type(path).__name__} {show(path)}")
    path = Path(path)
    rate_scale, limit, window = _check_options(rate_scale, limit, window)
    problem = flag_problem(skip_bad_rows, "skip_bad_rows")
    if problem:
        raise TraceError(problem)
    if format is not None:
        _text_head(path)  # detect_format checks it otherwise
    fmt = detect_format(path) if format is None else str(format)
    if fmt not in FORMATS:
        raise TraceError(f"unknown trace format {fmt!r}: use one of {', '.join(FORMATS)} (or the synthetic generator)")
    if fmt == "csv":
        if columns is None and format is None:
            columns = dict(SPECSIM_COLUMNS)  # detected as specsim's own layout
        if columns is None:
            raise TraceError(f"{path}: format csv needs columns (arrival=COL,prompt=COL,output=COL)")
        try:
            cols = parse_columns(columns) if isinstance(columns, str) else dict(columns)
        except (TypeError, ValueError):
            raise TraceError(f"columns must be a dict {{'arrival': COL, 'prompt': COL, 'output': COL}} or the text "
                             f"'arrival=COL,prompt=COL,output=COL', got {show(columns)}") from None
        if sorted(cols) != sorted(COLUMN_ROLES):
            raise TraceError(f"columns must name exactly {', '.join(COLUMN_ROLES)}, got {', '.join(cols)}")
        names = tuple(str(cols[r]) for r in COLUMN_ROLES)
        unit = "s" if arrival_unit is None else str(arrival_unit)
        if unit not in ARRIVAL_UNITS:
            raise TraceError(f"arrival unit {unit!r} is not one of {', '.join(ARRIVAL_UNITS)}")
    else:
        if columns is not None or arrival_unit is not None:
            raise TraceError(f"columns and arrival unit apply to format csv only, not {fmt}")
        names, unit = _FIXED[fmt]
    if fmt == "mooncake":
        parsed = _read_jsonl(path, names, skip_bad_rows)
    else:
        parsed = _read_csv(path, names, unit == "datetime", skip_bad_rows, exact=fmt != "csv")
    return finish_trace(parsed, fmt, str(path), unit, TraceCut(rate_scale, limit, window))


def finish_trace(parsed, fmt, source, unit="s", cut=TraceCut()) -> TraceRead:
    """Sort, re-base, skip zero-token rows and apply window, limit and rate scale.

    Parameters
    ----------
    parsed : ParsedRows
        The rows as read, arrivals in ``unit``.
    fmt, source : str
        The reader and the file read (or the generator), for :class:`TraceRead`.
    unit : str
        One of :data:`ARRIVAL_UNITS`.
    cut : TraceCut
        The window, the request limit and the rate scale.
    """
    times, prompt, output, skipped_bad, bad_lines = parsed
    rate_scale, limit, window = _check_options(*cut)
    prompt = np.asarray(prompt, dtype=np.int64)
    output = np.asarray(output, dtype=np.int64)
    rows = int(prompt.shape[0]) + int(skipped_bad)
    keep = (prompt > 0) & (output > 0)
    skipped_zero = int(keep.shape[0] - np.count_nonzero(keep))
    if skipped_zero:
        times, prompt, output = times[keep], prompt[keep], output[keep]
    n = times.shape[0]
    # Most traces are already in time order: then no sort and no gather.
    ordered = n < 2 or bool(np.all(times[1:] >= times[:-1]))
    order = None if ordered else np.argsort(times, kind="stable")
    t = times if ordered else times[order]
    arrival = np.empty(n)
    if n:
        if unit == "datetime":
            # int64 difference first: ns since 1970 do not fit a float64 exactly
            np.divide(t - t[0], 1e9, out=arrival)
        else:
            np.divide(np.asarray(t, dtype=np.float64) - float(t[0]), ARRIVAL_UNITS[unit], out=arrival)
    lo, hi = 0, n
    if window is not None:
        start, end = window
        lo = int(np.searchsorted(arrival, start, side="left"))
        hi = n if end is None else int(np.searchsorted(arrival, end, side="left"))
    if limit is not None:
        hi = min(hi, lo + limit)
    arrival = arrival[lo:hi]
    if window is not None and window[0]:
        arrival = arrival - window[0]
    if rate_scale != 1.0:
        arrival = arrival / rate_scale

    problem = arrival_problem(arrival)
    if problem:
        raise TraceError(f"{source}: {problem}")
    out = np.empty(hi - lo, dtype=REQUEST_DT)
    out["arrival_s"] = arrival
    if ordered:
        out["prompt_tokens"] = prompt[lo:hi]
        out["output_tokens"] = output[lo:hi]
    else:
        out["prompt_tokens"] = prompt[order[lo:hi]]
        out["output_tokens"] = output[order[lo:hi]]
    return TraceRead(out, fmt, source, rows, skipped_zero, int(skipped_bad), tuple(int(x) for x in bad_lines),
                     n - out.shape[0])


def _check_options(rate_scale, limit, window):
    problem = rate_scale_problem(rate_scale)
    if problem:
        raise TraceError(problem)
    rate_scale = float(rate_scale)
    if limit is not None:
        if not is_int(limit) or limit < 0:
            raise TraceError(f"request limit must be an integer >= 0, got {limit!r}")
        limit = int(limit)
    if window is not None:
        try:
            start, end = window
            start = float(start)
            end = None if end is None else float(end)
        except (TypeError, ValueError):
            raise TraceError(f"window must be (start_s, end_s or None), got {window!r}") from None
        if not math.isfinite(start) or start < 0 or (end is not None and not end > start):
            raise TraceError(f"window [{start}, {end}) must have 0 <= start < end (seconds from the trace start)")
        if end is not None and math.isinf(end):
            end = None
        window = (start, end)
    return rate_scale, limit, window


_REASONS = {
    1: "{fields}",
    2: "the arrival is not {what}",
    3: f"the prompt token count is not a whole number in 0..{MAX_TOKENS_PER_REQUEST:,} (docs/limits.md)",
    4: f"the output token count is not a whole number in 0..{MAX_TOKENS_PER_REQUEST:,} (docs/limits.md)",
    5: "not one JSON object on one line",
    6: "more fields than the header names: a comma too many, or a row of another file",
}


def _bad_row_error(path, line, reason, text, what, fields):
    why = _REASONS[reason].format(what=what, fields=fields)
    shown = text[:200] + ("..." if len(text) > 200 else "")
    return TraceError(
        f"{path}:{line}: {why}: {shown!r}; fix or delete the row, or skip bad rows "
        "(--skip-bad-rows / skip_bad_rows=True) to count them instead"
    )


def _blocks(f):
    """Yield ``(block, lines)``: buffers of whole lines from a binary file and a row capacity.

    A block ends at its last newline and the file is re-read from there (a seek back), so no
    block is copied to join it with the next; a line longer than a block grows the read.
    """
    size = _BLOCK_BYTES
    pending = b""
    while True:
        got = f.read(size)
        chunk = pending + got if pending else got
        pending = b""
        if not chunk:
            return
        if len(got) < size:  # the end of the file: all that is left
            yield memoryview(chunk), chunk.count(b"\n") + 1
            return
        cut = chunk.rfind(b"\n")
        if cut < 0:
            pending = chunk
            size *= 2
            continue
        f.seek(cut + 1 - len(chunk), 1)
        yield memoryview(chunk)[:cut + 1], chunk.count(b"\n", 0, cut + 1)


def _open(path):
    return open_input(path, "a trace", TraceError)


def _run_blocks(path, f, first_line, parse, datetime_kind, what, fields):
    # lazy: Numba loads with the first kernel call
    from specsim.traces._parse_kernels import INFO_BAD, INFO_BAD_OFFSET, INFO_FIRST_BAD_LINE, INFO_LINES, INFO_REASON, INFO_SIZE

    info = np.zeros(INFO_SIZE, dtype=np.int64)
    bad_lines = np.zeros(_MAX_BAD_LINES, dtype=np.int64)
    times, prompts, outputs = [], [], []
    line = first_line
    for block, size in _blocks(f):
        buf = np.frombuffer(block, dtype=np.uint8)
        t_num = None if datetime_kind else np.empty(size)  # the kernels parse the kind given
        t_ns = np.empty(size, dtype=np.int64) if datetime_kind else None
        prompt = np.empty(size, dtype=np.int64)
        output = np.empty(size, dtype=np.int64)
        bad_before = int(info[INFO_BAD])
        rows = parse(buf, line, _Outputs(t_num, t_ns, prompt, output, bad_lines, info))
        if not parse.skip_bad and info[INFO_BAD] > bad_before:
            off = int(info[INFO_BAD_OFFSET])
            raw = bytes(block[off:off + 4096])
            text = raw.split(b"\n", 1)[0].rstrip(b"\r").decode("utf-8", errors="replace")
            raise _bad_row_error(path, int(info[INFO_FIRST_BAD_LINE]), int(info[INFO_REASON]), text, what, fields)
        times.append((t_ns if datetime_kind else t_num)[:rows])
        prompts.append(prompt[:rows])
        outputs.append(output[:rows])
        line += int(info[INFO_LINES])
    nbad = int(info[INFO_BAD])
    cat = (lambda xs, dt: np.concatenate(xs) if xs else np.empty(0, dtype=dt))
    return ParsedRows(cat(times, np.int64 if datetime_kind else np.float64), cat(prompts, np.int64),
                      cat(outputs, np.int64), nbad, bad_lines[:min(nbad, _MAX_BAD_LINES)].tolist())


class _Outputs(NamedTuple):
    """What a parse kernel writes for one block, in the CSV kernel's argument order."""

    t_num: np.ndarray
    t_ns: np.ndarray
    prompt: np.ndarray
    output: np.ndarray
    bad_lines: np.ndarray
    info: np.ndarray


class _Parse:
    """A kernel call ``fn(buf, first line, outputs)`` with its format's arguments bound (keeps
    ``_run_blocks`` format-free)."""

    def __init__(self, fn, skip_bad):
        self.fn, self.skip_bad = fn, skip_bad

    def __call__(self, buf, line, out):
        return self.fn(buf, line, out)


def _read_csv(path, names, datetime_kind, skip_bad, exact):
    # lazy: Numba loads with the first kernel call
    from specsim.traces._parse_kernels import parse_csv_nb

    with _open(path) as f:
        header_bytes = f.readline().removeprefix(_BOM)
        header_text = header_bytes.decode("utf-8", errors="replace")
        try:
            header = next(csv.reader([header_text.rstrip("\r\n")]), [])
        except csv.Error as e:
            raise TraceError(f"{path}:1: the header is not one CSV line ({e}); give the file's header row") from None
        cols = [_column_index(path, header, name, exact) for name in names]
        what = "a timestamp YYYY-MM-DD HH:MM:SS[.fraction][+HH:MM]" if datetime_kind else "a number"

        c0, c1, c2 = cols
        nh, skip = len(header), bool(skip_bad)
        parse = _Parse(lambda buf, line, out: parse_csv_nb(buf, c0, c1, c2, nh, line, skip, *out), skip)
        fields = f"too few fields (the header names {len(header)}; column {max(cols) + 1} is needed)"
        return _run_blocks(path, f, 2, parse, datetime_kind, what, fields)


def _column_index(path, header, name, exact):
    stripped = [h.strip() for h in header]
    lowered = [h.lower() for h in stripped]
    for names, wanted in ((stripped, name), (lowered, name.lower())):
        found = [i for i, h in enumerate(names) if h == wanted]
        if len(found) > 1:
            # Which of them holds the data is a guess (the csv module's DictReader takes the last).
            raise TraceError(f"{path}:1: the header names column {name!r} {len(found)} times (fields "
                             f"{', '.join(str(i + 1) for i in found)}); rename all but one")
        if found:
            return found[0]
    hint = "" if exact else "; name columns as they appear in the header"

    # Names shown quoted and short: a binary file's "header" is control bytes and noise.
    raise TraceError(f"{path}:1: the header has no column {name!r} (it has: {few(show(h, 40) for h in stripped)}){hint}")


def _read_jsonl(path, keys, skip_bad):
    from specsim.traces._parse_kernels import parse_jsonl_nb  # lazy: Numba loads with the first kernel call

    kt, kp, ko = (np.frombuffer(k.encode("utf-8"), dtype=np.uint8) for k in keys)
    skip = bool(skip_bad)

    with _open(path) as f:
        if f.read(len(_BOM)) != _BOM:
            f.seek(0)
        parse = _Parse(lambda buf, line, out: parse_jsonl_nb(buf, kt, kp, ko, line, skip, out.t_num, *out[2:]), skip)
        return _run_blocks(path, f, 1, parse, False, "a number (milliseconds)",
                           "the object lacks one of the keys " + ", ".join(keys))
