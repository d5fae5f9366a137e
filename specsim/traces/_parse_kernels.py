"""Numba kernels that parse request-trace text (CSV rows, JSONL objects) held as ``uint8`` bytes.

Each kernel takes a buffer of whole lines and writes one value per good row into preallocated
arrays; a bad row is either skipped and counted or stops the parse, reported through an
``info`` array (status codes, not exceptions). Byte values are written as integer literals so a
kernel sees no Python strings.
"""

from __future__ import annotations

import numpy as np

from specsim._jit import jit

# Reasons a row is bad (info[2]).
BAD_FIELDS = 1  # too few fields / a field missing
BAD_ARRIVAL = 2
BAD_PROMPT = 3
BAD_OUTPUT = 4
BAD_SHAPE = 5  # not a JSON object on one line
BAD_EXTRA = 6  # more fields than the header names

# info layout
INFO_BAD, INFO_FIRST_BAD_LINE, INFO_REASON, INFO_BAD_OFFSET, INFO_LINES = range(5)
INFO_SIZE = 5

_NL, _CR, _SP, _TAB, _QUOTE, _COMMA = 10, 13, 32, 9, 34, 44
_ZERO, _NINE, _DOT, _PLUS, _MINUS, _COLON = 48, 57, 46, 43, 45, 58
_LBRACE, _RBRACE, _LBRACK, _RBRACK, _BSLASH = 123, 125, 91, 93, 92


@jit(internal=True)
def _trim_nb(buf, a, b):
    """Bounds of ``buf[a:b]`` without surrounding blanks and one pair of double quotes."""
    while a < b and (buf[a] == _SP or buf[a] == _TAB):
        a += 1
    while b > a and (buf[b - 1] == _SP or buf[b - 1] == _TAB):
        b -= 1
    if b - a >= 2 and buf[a] == _QUOTE and buf[b - 1] == _QUOTE:
        a += 1
        b -= 1
        while a < b and buf[a] == _SP:
            a += 1
        while b > a and buf[b - 1] == _SP:
            b -= 1
    return a, b


@jit(internal=True)
def _fixed_digits_nb(buf, a, count):
    """The value of ``count`` ASCII digits at ``a``; -1 if any is not a digit."""
    v = 0
    for i in range(a, a + count):
        c = buf[i]
        if c < _ZERO or c > _NINE:
            return -1
        v = v * 10 + (c - _ZERO)
    return v


@jit(internal=True)
def days_from_civil_nb(y, m, d):
    """Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant's algorithm)."""
    if m <= 2:
        y -= 1
    era = (y if y >= 0 else y - 399) // 400
    yoe = y - era * 400
    mp = m - 3 if m > 2 else m + 9
    doy = (153 * mp + 2) // 5 + d - 1
    doe = yoe * 365 + yoe // 4 - yoe // 100 + doy
    return era * 146097 + doe - 719468


@jit(internal=True)
def _days_in_month_nb(y, m):
    if m == 2:
        leap = (y % 4 == 0 and y % 100 != 0) or y % 400 == 0
        return 29 if leap else 28
    if m == 4 or m == 6 or m == 9 or m == 11:
        return 30
    return 31


@jit
def parse_datetime_nb(buf, a, b):
    """``(ok, ns)``: nanoseconds since 1970-01-01 UTC of an ISO-like timestamp in ``buf[a:b]``.

    Accepts ``YYYY-MM-DD HH:MM:SS`` (or ``T`` between), an optional fraction of any length
    (digits past the ninth are read but dropped) and an optional ``Z`` or ``+HH:MM``/``-HH:MM``
    (or ``+HHMM``) offset; a naive timestamp is taken as UTC.
    """
    if b - a < 19:
        return False, np.int64(0)
    y = _fixed_digits_nb(buf, a, np.int64(4))
    mo = _fixed_digits_nb(buf, a + 5, np.int64(2))
    d = _fixed_digits_nb(buf, a + 8, np.int64(2))
    hh = _fixed_digits_nb(buf, a + 11, np.int64(2))
    mi = _fixed_digits_nb(buf, a + 14, np.int64(2))
    ss = _fixed_digits_nb(buf, a + 17, np.int64(2))
    sep = buf[a + 10]
    if (y < 0 or mo < 1 or mo > 12 or d < 1 or hh < 0 or hh > 23 or mi < 0 or mi > 59 or ss < 0 or ss > 59
            or buf[a + 4] != _MINUS or buf[a + 7] != _MINUS or buf[a + 13] != _COLON or buf[a + 16] != _COLON
            or (sep != _SP and sep != 84)):  # 84 = 'T'
        return False, np.int64(0)
    if d > _days_in_month_nb(y, mo):
        return False, np.int64(0)
    p = a + 19
    frac = np.int64(0)
    if p < b and buf[p] == _DOT:
        p += 1
        ndig = 0
        while p < b and _ZERO <= buf[p] <= _NINE:
            if ndig < 9:
                frac = frac * 10 + (buf[p] - _ZERO)
            ndig += 1
            p += 1
        if ndig == 0:
            return False, np.int64(0)
        while ndig < 9:
            frac *= 10
            ndig += 1
    offset_s = 0
    if p < b:
        c = buf[p]
        if c == 90:  # 'Z'
            p += 1
        elif c == _PLUS or c == _MINUS:
            sign = 1 if c == _PLUS else -1
            if p + 3 > b:
                return False, np.int64(0)
            oh = _fixed_digits_nb(buf, p + 1, np.int64(2))
            p += 3
            if p < b and buf[p] == _COLON:
                p += 1
            if p + 2 > b:
                return False, np.int64(0)
            om = _fixed_digits_nb(buf, p, np.int64(2))
            p += 2
            if oh < 0 or oh > 23 or om < 0 or om > 59:
                return False, np.int64(0)
            offset_s = sign * (oh * 3600 + om * 60)
    if p != b:
        return False, np.int64(0)
    secs = np.int64(days_from_civil_nb(y, mo, d)) * 86400 + hh * 3600 + mi * 60 + ss - offset_s
    return True, secs * 1_000_000_000 + frac


@jit
def parse_number_nb(buf, a, b):
    """``(ok, value)`` of a finite decimal number ``[+-]digits[.digits][(e|E)[+-]digits]``.

    Up to 18 significant digits are kept and scaled by a power of ten: within two ulps of the
    correctly rounded value while that power is exact (|exponent| <= 22, which covers any
    timestamp), a little looser beyond; exact for integers below 2**53. Values that overflow
    (near 1.8e308) are refused.
    """
    if a >= b:
        return False, 0.0
    neg = False
    if buf[a] == _PLUS or buf[a] == _MINUS:
        neg = buf[a] == _MINUS
        a += 1
    mant = np.int64(0)
    sig = 0
    exp10 = 0
    ndig = 0
    p = a
    while p < b and _ZERO <= buf[p] <= _NINE:
        if sig < 18:
            mant = mant * 10 + (buf[p] - _ZERO)
            if mant > 0:
                sig += 1
        else:
            exp10 += 1
        ndig += 1
        p += 1
    if p < b and buf[p] == _DOT:
        p += 1
        while p < b and _ZERO <= buf[p] <= _NINE:
            if sig < 18:
                mant = mant * 10 + (buf[p] - _ZERO)
                if mant > 0:
                    sig += 1
                exp10 -= 1
            ndig += 1
            p += 1
    if ndig == 0:
        return False, 0.0
    if p < b and (buf[p] == 101 or buf[p] == 69):  # 'e' 'E'
        p += 1
        eneg = False
        if p < b and (buf[p] == _PLUS or buf[p] == _MINUS):
            eneg = buf[p] == _MINUS
            p += 1
        e = 0
        edig = 0
        while p < b and _ZERO <= buf[p] <= _NINE:
            if e < 10000:
                e = e * 10 + (buf[p] - _ZERO)
            edig += 1
            p += 1
        if edig == 0:
            return False, 0.0
        exp10 += -e if eneg else e
    if p != b:
        return False, 0.0
    v = float(mant)
    if exp10 > 0:
        v = v * 10.0 ** exp10
    elif exp10 < 0:
        v = v / 10.0 ** (-exp10)
    if not np.isfinite(v):
        return False, 0.0
    return True, -v if neg else v


@jit(internal=True)
def parse_count_nb(buf, a, b):
    """``(ok, value)`` of a token count: digits, optionally ``.`` and zeros (``"12"``, ``"12.0"``)."""
    if a >= b:
        return False, np.int64(0)
    v = np.int64(0)
    p = a
    while p < b and _ZERO <= buf[p] <= _NINE:
        if p - a >= 18:
            return False, np.int64(0)
        v = v * 10 + (buf[p] - _ZERO)
        p += 1
    if p == a:
        return False, np.int64(0)
    if p < b and buf[p] == _DOT:
        p += 1
        while p < b and buf[p] == _ZERO:
            p += 1
    if p != b:
        return False, np.int64(0)
    return True, v


@jit(internal=True)
def _parse_arrival_nb(buf, a, b, t_num, t_ns):
    """The arrival field: a number when ``t_num`` (the numbers' output) is given, a timestamp
    when ``t_ns`` is; the other is None. Numba drops a branch on an argument that is None while
    compiling (and only then), so each parser sits under its own output's test: a file of
    numbers compiles no timestamp parser, and the reverse."""
    ok, v, ns = False, 0.0, np.int64(0)
    if t_num is not None:
        ok, v = parse_number_nb(buf, a, b)
    if t_ns is not None:
        ok, ns = parse_datetime_nb(buf, a, b)
    return ok, v, ns


@jit(internal=True)
def _line_end_nb(buf, s):
    e = s
    n = buf.shape[0]
    while e < n and buf[e] != _NL:
        e += 1
    return e


@jit(internal=True)
def _bad_nb(info, bad_lines, line, reason, offset):
    """Count one bad row: remember the first one's line, reason and offset, and the line numbers
    of the first ``len(bad_lines)`` bad rows."""
    if info[INFO_BAD] < bad_lines.shape[0]:
        bad_lines[info[INFO_BAD]] = line
    if info[INFO_BAD] == 0:
        info[INFO_FIRST_BAD_LINE] = line
        info[INFO_REASON] = reason
        info[INFO_BAD_OFFSET] = offset
    info[INFO_BAD] += 1


@jit
def parse_csv_nb(buf, col_t, col_p, col_o, n_header, first_line, skip_bad, t_num, t_ns, prompt, output, bad_lines,
                 info):
    """Parse comma-separated rows into arrival, prompt and output arrays.

    Parameters
    ----------
    buf : ndarray(uint8, ndim=1)
        Whole lines (the header already removed); a final line may lack its newline.
    col_t, col_p, col_o : int
        0-based column of the arrival, prompt tokens and output tokens.
    n_header : int
        Fields the header names: a row with more is bad (``BAD_EXTRA``), as one with too few.
    first_line : int
        1-based line number of ``buf``'s first line in its file.
    skip_bad : bool
        Skip and count bad rows; else stop at the first.
    t_num : ndarray(float64) or None, t_ns : ndarray(int64) or None, prompt, output : ndarray(int64)
        Outputs, one slot per line at least; modified in place. The arrival column's kind is
        which of ``t_num`` (numbers) and ``t_ns`` (timestamps, ns since 1970 UTC) is given; the
        other is None.
    bad_lines : ndarray(int64, ndim=1)
        Line numbers of the first bad rows (as many as fit); modified in place.
    info : ndarray(int64, ndim=1), shape (INFO_SIZE,)
        Bad-row count, first bad line, its reason, its byte offset, lines consumed; modified in place.

    Returns
    -------
    int
        Good rows written. Blank lines are neither rows nor bad.
    """
    # A tuple, not an array: its values stay in registers through the line loop.
    cols = (np.int64(col_t), np.int64(col_p), np.int64(col_o), np.int64(n_header))
    return _parse_lines_nb(buf, cols, None, first_line, skip_bad, t_num, t_ns, prompt, output, bad_lines, info)


@jit(internal=True)
def _parse_lines_nb(buf, cols, keys, first_line, skip_bad, t_num, t_ns, prompt, output, bad_lines, info):
    """The line loop the formats share: each line's row parsed by the format's row parser (CSV's
    with ``cols`` = ``(col_t, col_p, col_o, n_header)`` and ``keys`` None; JSONL's with ``keys``,
    the three keys' bytes, and ``cols`` None), a good row written to the outputs, a bad one
    counted or the parse stopped. Other arguments and the return as :func:`parse_csv_nb`."""
    n = buf.shape[0]
    s = np.int64(0)  # not the literal 0: _bad_nb compiles once
    line = first_line
    rows = 0
    while s < n:
        # Numba drops a test on an argument that is None while compiling, so each format's row
        # parser sits under its own argument's test: one of them compiles.
        if cols is not None:
            e, blank, reason, tv, tn, pv, ov = _csv_row_nb(buf, s, cols, t_num, t_ns)
        if keys is not None:
            e, blank, reason, tv, tn, pv, ov = _jsonl_row_nb(buf, s, keys)
        if not blank:
            if reason == 0:
                if t_num is not None:
                    t_num[rows] = tv
                if t_ns is not None:
                    t_ns[rows] = tn
                prompt[rows] = pv
                output[rows] = ov
                rows += 1
            else:
                _bad_nb(info, bad_lines, line, reason, s)
                if not skip_bad:
                    info[INFO_LINES] = line - first_line
                    return rows
        line += 1
        s = e + 1
    info[INFO_LINES] = line - first_line
    return rows


# The row parsers are inlined into the line loop: called once per row, they made a 1M-line parse
# about a tenth slower.
@jit(internal=True, inline="always")
def _csv_row_nb(buf, s, cols, t_num, t_ns):
    """The CSV row at ``s``: ``(end, blank, reason, arrival number, arrival ns, prompt, output)``;
    ``cols`` holds the arrival, prompt and output columns and the header's field count."""
    # one pass over the line: field bounds of the wanted columns, and the line's end
    n = buf.shape[0]
    col_t, col_p, col_o = cols[0], cols[1], cols[2]
    ta, tb, pa, pb, oa, ob = -1, -1, -1, -1, -1, -1
    field = 0
    fs = s
    inq = False
    i = s
    while i < n:
        c = buf[i]
        if c == _NL:
            break
        if c == _QUOTE:
            inq = not inq
        elif c == _COMMA and not inq:
            if field == col_t:
                ta, tb = fs, i
            elif field == col_p:
                pa, pb = fs, i
            elif field == col_o:
                oa, ob = fs, i
            field += 1
            fs = i + 1
        i += 1
    le = i
    if le > s and buf[le - 1] == _CR:
        le -= 1
    if field == col_t:
        ta, tb = fs, le
    elif field == col_p:
        pa, pb = fs, le
    elif field == col_o:
        oa, ob = fs, le
    field += 1
    tv, tn, pv, ov = 0.0, np.int64(0), np.int64(0), np.int64(0)
    reason = np.int64(0)  # not the literal 0: _bad_nb compiles once
    blank = field == 1
    if blank:
        for j in range(s, le):
            if buf[j] != _SP and buf[j] != _TAB:
                blank = False
                break
    if not blank:
        if field < max(col_t, max(col_p, col_o)) + 1:
            reason = BAD_FIELDS
        elif field > cols[3]:
            reason = BAD_EXTRA
        else:
            ta, tb = _trim_nb(buf, ta, tb)
            ok, tv, tn = _parse_arrival_nb(buf, ta, tb, t_num, t_ns)
            pa, pb = _trim_nb(buf, pa, pb)
            okp, pv = parse_count_nb(buf, pa, pb)
            oa, ob = _trim_nb(buf, oa, ob)
            oko, ov = parse_count_nb(buf, oa, ob)
            if not ok:
                reason = BAD_ARRIVAL
            elif not okp:
                reason = BAD_PROMPT
            elif not oko:
                reason = BAD_OUTPUT
    return i, blank, reason, tv, tn, pv, ov


@jit(internal=True)
def _skip_string_nb(buf, p, end):
    """Index just past the JSON string whose opening quote is at ``p``; -1 if unterminated."""
    p += 1
    while p < end:
        c = buf[p]
        if c == _BSLASH:
            p += 2
            continue
        if c == _QUOTE:
            return p + 1
        p += 1
    return -1


@jit(internal=True)
def _key_is_nb(buf, a, b, key):
    if b - a != key.shape[0]:
        return False
    for i in range(key.shape[0]):
        if buf[a + i] != key[i]:
            return False
    return True


@jit(internal=True)
def _skip_ws_nb(buf, p, end):
    while p < end and (buf[p] == _SP or buf[p] == _TAB):
        p += 1
    return p


@jit
def parse_jsonl_nb(buf, key_t, key_p, key_o, first_line, skip_bad, t_num, prompt, output, bad_lines, info):
    """Parse one JSON object per line, reading three top-level number fields by key.

    A scanner, not a validating JSON parser: it walks the object's top-level members (skipping
    strings, arrays and nested objects whole) and reads the values of ``key_t`` (arrival, a
    number), ``key_p`` and ``key_o`` (token counts). A line that is not ``{...}``, lacks a key, or
    holds a non-number there is bad. Parameters and return as :func:`parse_csv_nb` (arrivals go
    to ``t_num``); keys are ``ndarray(uint8)`` of the key's bytes without quotes.
    """
    return _parse_lines_nb(buf, None, (key_t, key_p, key_o), first_line, skip_bad, t_num, None, prompt, output,
                           bad_lines, info)


@jit(internal=True)
def _jsonl_value_end_nb(buf, p, end):
    """Index just past the JSON value at ``p`` (a string, an array or object whole, or a scalar up to
    the next comma); -1 when a string or a bracket is left open."""
    if p < end and buf[p] == _QUOTE:
        return _skip_string_nb(buf, p, end)
    if p < end and (buf[p] == _LBRACK or buf[p] == _LBRACE):
        depth = 0
        while p < end:
            c = buf[p]
            if c == _QUOTE:
                p = _skip_string_nb(buf, p, end)
                if p < 0:
                    return -1
                continue
            if c == _LBRACK or c == _LBRACE:
                depth += 1
            elif c == _RBRACK or c == _RBRACE:
                depth -= 1
                if depth == 0:
                    return p + 1
            p += 1
        return -1
    while p < end and buf[p] != _COMMA:
        p += 1
    return p


@jit(internal=True, inline="always")
def _jsonl_row_nb(buf, s, keys):
    """The JSON-object line at ``s``: ``(end, blank, reason, arrival, 0, prompt, output)`` (the
    shape of :func:`_csv_row_nb`'s), the values read at ``keys`` (arrival, prompt, output)."""
    key_t, key_p, key_o = keys
    e = _line_end_nb(buf, s)
    a, b = s, e
    while a < b and (buf[a] == _SP or buf[a] == _TAB):
        a += 1
    while b > a and (buf[b - 1] == _SP or buf[b - 1] == _TAB or buf[b - 1] == _CR):
        b -= 1
    tn = np.int64(0)
    tv, pv, ov = 0.0, np.int64(0), np.int64(0)
    reason = np.int64(0)  # not the literal 0: _bad_nb compiles once
    if a >= b:
        return e, True, reason, tv, tn, pv, ov
    if buf[a] != _LBRACE or buf[b - 1] != _RBRACE:
        return e, False, np.int64(BAD_SHAPE), tv, tn, pv, ov
    found = 0
    p = a + 1
    end = b - 1
    while p < end and reason == 0:
        p = _skip_ws_nb(buf, p, end)
        if p >= end:
            break
        q = _skip_string_nb(buf, p, end) if buf[p] == _QUOTE else -1
        if q < 0:
            reason = BAD_SHAPE
            break
        ka, kb = p + 1, q - 1
        p = _skip_ws_nb(buf, q, end)
        if p >= end or buf[p] != _COLON:
            reason = BAD_SHAPE
            break
        v0 = _skip_ws_nb(buf, p + 1, end)
        p = _jsonl_value_end_nb(buf, v0, end)
        if p < 0:
            reason = BAD_SHAPE
            break
        v1 = p
        while v1 > v0 and (buf[v1 - 1] == _SP or buf[v1 - 1] == _TAB):
            v1 -= 1
        if _key_is_nb(buf, ka, kb, key_t):
            ok, tv = parse_number_nb(buf, v0, v1)
            reason = reason if ok else BAD_ARRIVAL
            found |= 1
        elif _key_is_nb(buf, ka, kb, key_p):
            ok, pv = parse_count_nb(buf, v0, v1)
            reason = reason if ok else BAD_PROMPT
            found |= 2
        elif _key_is_nb(buf, ka, kb, key_o):
            ok, ov = parse_count_nb(buf, v0, v1)
            reason = reason if ok else BAD_OUTPUT
            found |= 4
        p = _skip_ws_nb(buf, p, end)
        if p < end:
            if buf[p] != _COMMA:
                reason = BAD_SHAPE
                break
            p += 1
    if reason == 0 and found != 7:
        reason = BAD_FIELDS
    return e, False, reason, tv, tn, pv, ov
