"""TOML reading and writing shared by the table and calibration formats.

Reading goes through ``tomllib`` (``tomli`` before Python 3.11). The field checks mirror what the
metrale serve's serde reader accepts, so that a file is refused here exactly when it is refused there:
integers are accepted where a float is expected (serde widens them), floats are not accepted
where an integer is expected, booleans are never numbers, unknown fields are ignored.
Writing produces TOML that any conforming reader parses back to the same values: floats by
``repr`` (shortest round-trip), strings with every character TOML forbids escaped.
"""

from __future__ import annotations

import datetime
import math
import sys

from specsim import _checks

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised only on 3.10
    import tomli as tomllib

MISSING = object()


def loads(text: str, what: str, source: str, error_cls):
    """Parse TOML text or raise ``error_cls`` naming the source and the parser's position."""
    if not isinstance(text, (str, bytes, bytearray)):
        raise error_cls(f"{source}: {what} must be text (str or bytes), got {type(text).__name__}")
    if isinstance(text, (bytes, bytearray)):
        try:
            text = bytes(text).decode("utf-8")
        except UnicodeDecodeError as e:
            raise error_cls(f"{source}: {what} is not UTF-8 text ({e})") from e
    # A byte-order mark from a Windows editor is not content; the metrale serve's reader skips it too.
    text = text.removeprefix("\ufeff")
    try:
        doc = tomllib.loads(text, parse_float=_binary64)
    except tomllib.TOMLDecodeError as e:
        raise error_cls(f"{source}: {what} is not valid TOML: {e}") from e
    except _FloatOverflow as e:
        raise error_cls(
            f"{source}: {what} is not valid TOML: the float {e} is beyond the largest 64-bit float "
            f"(write inf if infinity is meant)"
        ) from None
    # TOML integers are 64-bit signed and a reader must refuse what does not fit (the metrale serve's
    # does); tomllib alone would hand back an arbitrarily large Python int.
    big = _out_of_range_ints(doc, "")
    if big:
        raise error_cls(
            f"{source}: {what} is not valid TOML: integers outside the 64-bit signed range",
            [f"{path} = {value}" for path, value in big],
        )
    return doc


class _FloatOverflow(ValueError):
    pass


# What each input file of a run holds at its top level, and the option that takes it: a file of the
# other kind given in its place is named as what it is, with the swap to try.
FILE_KINDS = (
    ("cost table", ("key", "cells"), "--table"),
    ("acceptance calibration", ("drafter", "acceptance"), "--calibration"),
)


def swapped_hint(doc, expected: str, usage: str | None = None):
    """When ``doc`` (a parsed TOML document) is not the ``expected`` kind of :data:`FILE_KINDS`
    but plainly another, a sentence saying which it is and the swap to try; else None.

    ``usage`` is how the command takes the two files when not as the options of
    :data:`FILE_KINDS` (``"specsim plan TABLE CALIBRATION"``, positional): the swap is then named
    by what the files are, with that usage.
    """
    if not isinstance(doc, dict):
        return None
    want = next(flag for kind, _, flag in FILE_KINDS if kind == expected)
    for kind, tables, flag in FILE_KINDS:
        if kind != expected and all(t in doc for t in tables):
            what = f"this file is {_a(kind)} {kind}, not {_a(expected)} {expected}"
            if usage is not None:
                return f"{what}: did you swap the {expected} and the {kind}? `{usage}`"
            return f"{what}: did you swap {flag} and {want}?"
    return None


def _a(noun: str) -> str:
    return "an" if noun[0] in "aeiou" else "a"


def _binary64(literal: str) -> float:
    """A TOML float literal as a binary64; a finite literal that rounds to infinity is refused,
    as the metrale serve's reader refuses it (TOML floats are binary64, and 1e400 is not one)."""
    value = float(literal)
    if math.isinf(value) and "inf" not in literal:
        raise _FloatOverflow(literal)
    return value


def _out_of_range_ints(value, path):
    if isinstance(value, dict):
        return [hit for k, v in value.items() for hit in _out_of_range_ints(v, f"{path}.{k}" if path else k)]
    if isinstance(value, list):
        return [hit for i, v in enumerate(value) for hit in _out_of_range_ints(v, f"{path}[{i}]")]
    if isinstance(value, int) and not isinstance(value, bool) and not -(1 << 63) <= value < (1 << 63):
        return [(path, value)]
    return []


def type_name(value) -> str:
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "float"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "table"
    return type(value).__name__


def as_float(value):
    """A TOML value read as serde reads an f64: floats and integers, nothing else; else None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, float):
        return value
    if isinstance(value, int):
        return float(value)
    return None


def as_uint(value, bits: int = 64):
    """A TOML value read as an unsigned integer of ``bits`` bits; else None."""
    if isinstance(value, bool) or not isinstance(value, int):
        return None
    if value < 0 or value >= 1 << bits:
        return None
    return value


_ESCAPES = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\t": "\\t", "\n": "\\n", "\f": "\\f", "\r": "\\r"}


def string(value: str) -> str:
    """A TOML basic string for ``value``: quotes, backslashes and control characters escaped.

    Raises ``ValueError`` for a lone surrogate, which no TOML file can hold.
    """
    out = ['"']
    for ch in value:
        code = ord(ch)
        if ch in _ESCAPES:
            out.append(_ESCAPES[ch])
        elif code < 0x20 or code == 0x7F:
            out.append(f"\\u{code:04X}")
        elif 0xD800 <= code <= 0xDFFF:
            raise ValueError(f"string {value!r} holds a lone surrogate, which TOML cannot encode")
        else:
            out.append(ch)
    out.append('"')
    return "".join(out)


def key(name: str) -> str:
    """A TOML key: bare when it may be, else quoted."""
    if name and all(c.isascii() and (c.isalnum() or c in "_-") for c in name):
        return name
    return string(name)


def number(value) -> str:
    """A TOML literal for an int or float that parses back to exactly the same value."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    value = float(value)
    if math.isnan(value):
        return "nan"
    if math.isinf(value):
        return "inf" if value > 0 else "-inf"
    return repr(value)


def show(value, limit: int = 60) -> str:
    """A value read from a TOML file as the file writes it (``true``, not Python's ``True``),
    cut as :func:`specsim._checks.show` cuts, for messages about that file."""
    return _checks.show(value, limit, render=scalar)


def scalar(value) -> str:
    """A TOML literal for any value ``tomllib`` reads: string, bool, number, date/time, array, table.

    Tables become inline tables, so a ``[meta]`` read from a file can always be written back.
    """
    if isinstance(value, str):
        return string(value)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(scalar(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{key(k)} = {scalar(v)}" for k, v in value.items()) + "}"
    if isinstance(value, (datetime.date, datetime.time)):  # datetime is a date
        return value.isoformat()
    if hasattr(value, "item"):  # numpy scalar
        value = value.item()
    return number(value)
