"""Helpers shared by the command modules: option parsing and output."""

from __future__ import annotations

import argparse
import json
import math
import re
import sys

from specsim._checks import (
    COUNT_MAX, MAX_TOKENS_PER_REQUEST, MAX_WIDTH, check_finite_results, name_problem, number_problem, show,
)
from specsim.errors import SpecsimError, TableError
from specsim.interop import policy_file


def _items(text: str, what: str) -> list:
    """The comma-separated items of ``text``: none of them empty (``"0.8,,0.4"`` would shift every
    later item's position, ``"1,2,"`` is a typo), in ASCII."""
    if not _ascii(text).strip():
        raise argparse.ArgumentTypeError("the list is empty")
    items = text.split(",")
    empty = [i for i, v in enumerate(items, 1) if not v.strip()]
    if empty:
        raise argparse.ArgumentTypeError(f"{show(text)}: item {empty[0]} of {len(items)} is empty; give a "
                                         f"comma-separated list of {what} with nothing between two commas")
    return items


# A whole number as a user types one: ASCII digits, a sign allowed, spaces around (``int`` also
# reads ``1_000`` and other scripts' digits, and refuses 4,300 digits or more with its own words).
_WHOLE = re.compile(r"\s*[+-]?[0-9]{1,30}\s*")


def _whole(text: str):
    """``int(text)`` when ``text`` is a whole number written as :data:`_WHOLE` allows, else None."""
    return int(text) if _WHOLE.fullmatch(text) else None


def whole(text: str) -> int:
    """A whole number (any sign, at most 30 digits) for argparse ``type=``: seeds and the counts
    whose range the command checks itself."""
    value = _whole(text)
    if value is None:
        raise argparse.ArgumentTypeError(f"{show(text)} is not a whole number written in ASCII digits")
    return value


def int_list(text: str):
    """``"1,2,4"`` -> ``[1, 2, 4]`` for argparse ``type=``."""
    values = [_whole(v) for v in _items(text, "integers")]
    if None in values:
        raise argparse.ArgumentTypeError(f"{show(text)} is not a comma-separated list of integers")
    return values


def float_list(text: str):
    """``"0.8,0.6"`` -> ``[0.8, 0.6]`` for argparse ``type=``: finite numbers."""
    items = _items(text, "numbers")
    try:
        values = [float(v) for v in items]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{show(text)} is not a comma-separated list of numbers") from None
    if not all(math.isfinite(v) for v in values):
        raise argparse.ArgumentTypeError(f"{show(text)}: every item must be a finite number")
    return values


def context_list(text: str):
    """``"512,2048,8192"`` -> contexts (KV tokens per sequence) for argparse ``type=``: integers
    >= 1, strictly ascending, as a table's context axis needs them."""
    values = int_list(text)
    bad = [v for v in values if v < 1]
    if bad:
        raise argparse.ArgumentTypeError(f"context {bad[0]} is not a context length: each must be >= 1 token")
    if any(b <= a for a, b in zip(values, values[1:])):
        raise argparse.ArgumentTypeError(f"{text!r} is not strictly ascending: list each context once, smallest first")
    return values


def _ascii(text: str) -> str:
    """``text`` when it is plain ASCII without ``_``: ``int`` and ``float`` also read other
    scripts' digits (``"٣"`` is 3) and Python's digit groups (``"1_0"`` is 10), which no config
    or log a user copies from holds."""
    if not text.isascii() or "_" in text:
        raise argparse.ArgumentTypeError(f"{show(text)} is not a number written in ASCII digits")
    return text


def key_name(text: str) -> str:
    """A name for argparse ``type=`` (a box class, a recipe): one non-empty line of printable
    text, so no control character reaches a table's key or the terminal."""
    if name_problem(text, "name"):
        raise argparse.ArgumentTypeError(f"{show(text)} is not a name: give one line of printable text, without "
                                         "control characters")
    return text


def method_name(text: str) -> str:
    """An engine's name for a speculative method (eagle, Eagle3, mtp, ...) for argparse
    ``type=``: one short word, as it is written into the engine's config and repeated in notes."""
    if not text or len(text) > 64 or not text.isprintable() or any(c.isspace() for c in text):
        raise argparse.ArgumentTypeError(f"{show(text)} is not a method name (one word of at most 64 characters, "
                                         "such as eagle, Eagle3 or mtp)")
    return text


def real(text: str) -> float:
    """A number for argparse ``type=`` (``float``, in ASCII digits); the command checks its range."""
    try:
        return float(_ascii(text)) + 0.0  # -0 is 0 (messages printed "-0")
    except ValueError:
        raise argparse.ArgumentTypeError(f"{show(text)} is not a number") from None


def context(text: str) -> float:
    """A context (mean KV tokens per decoding sequence) for argparse ``type=``: a finite number
    in ``(0, MAX_TOKENS_PER_REQUEST]`` (a sequence holds at most that many tokens)."""
    try:
        value = float(_ascii(text))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{show(text)} is not a number of tokens") from None
    if not (math.isfinite(value) and 0 < value <= MAX_TOKENS_PER_REQUEST):
        raise argparse.ArgumentTypeError(f"context {show(text)} must be a number of tokens in "
                                         f"(0, {MAX_TOKENS_PER_REQUEST:,}] (docs/limits.md)")
    return value


def nonneg_float(text: str) -> float:
    """A finite number >= 0 for argparse ``type=``: costs, powers, latency targets."""
    try:
        value = float(_ascii(text))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{show(text)} is not a number") from None
    problem = number_problem(value, "the value", 0.0)
    if problem:
        raise argparse.ArgumentTypeError(f"{show(text)} must be a finite number >= 0")
    return value + 0.0  # -0 is 0


def digest_map(items) -> dict:
    """``["verify=sha256:..", ...]`` (repeated ``--digest MODE=DIGEST``) -> ``{mode: digest}``."""
    digests = {}
    for item in items:
        mode, sep, digest = item.partition("=")
        if not sep or not mode:
            raise TableError(f"--digest {item!r} is not MODE=DIGEST (e.g. --digest verify=sha256:...)")
        if mode in digests:
            raise TableError(f"--digest {show(item)}: mode {show(mode)} is already given "
                             f"(--digest {show(mode + '=' + digests[mode])}); give each mode's digest once")
        digests[mode] = digest
    return digests


def count(text: str) -> int:
    """A whole number in ``0..2**62`` for argparse ``type=``: sizes, widths, budgets, depths."""
    digits = text.strip().lstrip("+-")
    if len(digits) > 30 and digits.isascii() and digits.isdigit():  # int() refuses 4,300 digits and more
        raise argparse.ArgumentTypeError(f"{show(text)} is outside 0..{COUNT_MAX:,}")
    value = _whole(_ascii(text))
    if value is None:
        raise argparse.ArgumentTypeError(f"{show(text)} is not a whole number")
    if not 0 <= value <= COUNT_MAX:
        raise argparse.ArgumentTypeError(f"{value:,} is outside 0..{COUNT_MAX:,}")
    return value


def positive(text: str) -> int:
    """A whole number in ``1..2**62`` for argparse ``type=``: counts of GPUs, where 0 means none."""
    try:
        value = count(text)
    except argparse.ArgumentTypeError:
        if not (text.isascii() and re.fullmatch(r"\s*[+-]?[0-9]+\s*", text)):
            raise  # not a whole number: count's refusal says so
        value = 0  # a whole number out of range (negative, or too many digits)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{show(text)} is outside 1..{COUNT_MAX:,}")
    return value


def width(text: str) -> int:
    """A batch width in ``0..MAX_WIDTH`` for argparse ``type=`` (docs/limits.md): beyond it a
    table's costs are only its widest width's, stretched over a batch no server steps."""
    value = count(text)
    if value > MAX_WIDTH:
        raise argparse.ArgumentTypeError(f"{value:,} is beyond {MAX_WIDTH:,} sequences, the widest batch specsim "
                                         "takes (docs/limits.md)")
    return value


def _fraction(text: str, outside: str) -> float:
    try:
        value = float(_ascii(text))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{show(text)} is not a number") from None
    if not 0.0 <= value < 1.0:
        raise argparse.ArgumentTypeError(outside.format(value=value))
    return value + 0.0  # -0 is 0


def slack(text: str) -> float:
    """A planner slack in [0, 1) for argparse ``type=``."""
    return _fraction(text, "slack {value} is outside [0, 1): 0 = no slower than depth 1, near 1 = energy first")


def share(text: str) -> float:
    """A share in [0, 1) for argparse ``type=``: held-out windows, smallest gains."""
    return _fraction(text, "{value} is outside [0, 1)")


def widths_text(widths) -> str:
    """A table's widths for a one-line report: each of them up to twelve, else the first four, the
    last two and how many (a table of every width to 256 would make a line of 1.5 KB)."""
    w = [str(int(x)) for x in widths]
    if len(w) <= 12:
        return ", ".join(w)
    return f"{', '.join(w[:4])}, ..., {', '.join(w[-2:])} ({len(w)} widths)"


def print_json(obj, out=None, cause: str = "the inputs") -> None:
    """Print ``obj`` as JSON; infinities or NaN in it are refused, naming ``cause``."""
    check_finite_results(obj if isinstance(obj, dict) else {"value": obj}, cause, SpecsimError)
    text = json.dumps(obj, indent=2, allow_nan=False)
    (out or sys.stdout).write(text + "\n")


def refuse(message: str, problems=()):
    raise SpecsimError(message, problems)


def require_matplotlib(flag: str = "--plot", path=None) -> None:
    """Refuse ``flag`` before any work when matplotlib is not installed, or when ``path`` (a
    plot whose format follows its extension) names a format matplotlib cannot write."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise SpecsimError(f"{flag} needs matplotlib: pip install 'specsim-llm[plot]'") from None
    if path is not None and "." in str(path).rsplit("/", 1)[-1]:
        from matplotlib.figure import Figure  # optional (the plot extra): loaded only when a figure is drawn

        kinds = Figure().canvas.get_supported_filetypes()
        suffix = str(path).rsplit(".", 1)[-1].lower()
        if suffix not in kinds:
            raise SpecsimError(f"{flag} {show(str(path))}: matplotlib cannot write .{suffix[:20]} files; "
                               f"use one of {', '.join('.' + k for k in sorted(kinds))}")


def add_policy_inputs(out, policies, label: str = "--policy") -> None:
    """Name the engine config files that ``ENGINE:FILE`` and ``sglang-adaptive:FILE`` policies read as inputs
    of ``out`` (an :class:`specsim._io.Outputs`), so no output overwrites one; other policies name
    no file."""
    for text in policies or ():
        path = policy_file(text) if isinstance(text, str) else None
        if path is not None:
            out.add_input(path, f"{label} {text}")
