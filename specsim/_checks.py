"""The value checks every reader and option parser shares: whole numbers, finite numbers,
fractions, and the size limits of docs/limits.md.

Each ``*_problem`` function returns ``None`` for a good value, else one line saying what is
wrong (the value shown short, so a 100 MB string never reaches a message); the ``check_*``
functions raise the caller's error class with that line. Booleans are never numbers here,
although Python counts ``True`` as 1.
"""

from __future__ import annotations

import math
import numbers
import re

from specsim.errors import SimulationError

# The largest count anything accepts (widths, budgets, limits, seeds of sizes), and the
# "no cap" value the planner and engine use where a cap is optional: far above any real size,
# far below int64's end, so sums of a few of them never overflow.
COUNT_MAX = 1 << 62
# The engine's and the fleet's "no cap" (an option left unset, no step limit).
NO_CAP = COUNT_MAX
# The largest int64: a width or count past it cannot reach a kernel (clipped or refused there).
INT64_MAX = (1 << 63) - 1

# -- size limits (docs/limits.md) ------------------------------------------------------------
# The longest acceptance window the speculation gate keeps (TensorRT-LLM's ``acceptance_window``):
# the one place its buffer in the engine's state record is sized; a longer window is refused.
MAX_ACCEPTANCE_WINDOW = 1024
# Deepest draft depth anything may name (a table, calibration, telemetry record, trace, schedule,
# policy, the online calibration): every per-depth array is built with this many entries at most,
# and the simulated engine packs a draft's position into 8 bits of its random key.
MAX_DEPTH = 255
# Draft trees (docs/planner.md#draft-trees): most nodes one tree may hold (SGLang's largest
# published setting verifies 64; 256 leaves room), most candidate ranks per depth a rank-acceptance
# table may hold (engines expand at most top-16), and its deepest row (a tree's depth is at most its
# node count, and no engine drafts past 32 levels).
MAX_TREE_NODES = 256
MAX_TREE_RANKS = 16
MAX_TREE_DEPTH = 64
# Most batch widths (sequences per step) a table, option or replay may name.
MAX_WIDTH = 1 << 20
# Most output (or prompt) tokens one request may ask for.
MAX_TOKENS_PER_REQUEST = 1 << 24
# Most widths one modelled table may have.
MAX_MODEL_WIDTHS = 4096
# Most points a sweep grid may cross to.
MAX_GRID_POINTS = 1_000_000
# Workers one run starts (threads, or processes of a local Dask cluster): an idle local Dask worker
# holds about 65 MB, so 64 of them leave most of 24 GiB for the engine and inputs each one loads.
MAX_WORKERS = 64
# Most tokens a replay may emit (its budget).
MAX_BUDGET_TOKENS = 1 << 40
# Resampled traces per capacity probe (each one multiplies the probe's simulations), and time
# windows a trace is cut into (capacity's window resampling, tune's noise windows); a window
# holds at least MIN_WINDOW_REQUESTS requests on average.
MAX_RESAMPLES = 64
MAX_WINDOWS = 64
MIN_WINDOW_REQUESTS = 10
# Draft-outcome seeds per evaluation (capacity's probes, tune's candidates): each one is a whole
# simulation, and 64 already pin a mean far below any difference worth a verdict.
MAX_SEEDS = 64
# Longest pause or window, in seconds, a measurement option may ask for (one day).
MAX_SECONDS = 86_400.0
# Most timed samples or warm-up calls per mode and cell of a measurement.
MAX_REPEATS = 1_000_000
# Shortest and longest time a telemetry sample may give a step or its verify or draft part, in ms:
# a nanosecond (no engine steps faster; joules at MIN_POWER_W stay far above 0) to a day (far past
# any real step, and small enough that a table's joules at MAX_POWER_W stay finite).
MIN_SAMPLE_MS = 1e-6
MAX_SAMPLE_MS = 1000.0 * MAX_SECONDS
# Largest assumed power, in watts (a whole rack draws less).
MAX_POWER_W = 1e6
# Smallest assumed power, in watts: below it the joules of a sub-millisecond step round to 0
# in the table's figures, which a table refuses only after the whole measurement.
MIN_POWER_W = 1e-3
# Largest cost of one step in a cost table, in milliseconds or joules: far past any real step,
# and small enough that sums and products over any run (2^40 tokens at most) stay finite; the
# metrale serve writes such extremes in exponent form (1e20), which must still read.
MAX_STEP_COST = 1e30
# Traffic scaling (``--rate-scale``, a grid's ``rate_scale`` axis): a million times faster or
# slower than the trace is far past any what-if, and keeps scaled arrival times finite.
MIN_RATE_SCALE = 1e-6
MAX_RATE_SCALE = 1e6
# Latest arrival a trace may hold, in seconds after its first request (about 31 years; the
# public traces span an hour to a few months): later ones would turn idle power into infinite
# joules, which would then be blamed on the costs.
MAX_ARRIVAL_S = 1e9
# Largest file read whole (tables, calibrations, grids, schedules, side files): far beyond any
# real one, and a bound on the memory a never-ending pipe can take.
MAX_INPUT_BYTES = 1 << 30
# How far above 0 a logged log-probability may be and still be taken as rounding.
LOGPROB_SLACK = 1e-3
# Deepest nesting of lists/objects a JSON side file may hold.
MAX_JSON_DEPTH = 64
# The per-request acceptance spread (docs/calibration.md#per-request-spread): the largest
# ``logit_sd`` a calibration may carry or a fit may return (a request's log-odds of acceptance
# spread by 4 standard deviations already puts the middle 95% of requests between 0.04% and
# 99.96% acceptance at an even rate), and the fewest requests a spread is fitted from.
MAX_REQUEST_SPREAD = 4.0
MIN_SPREAD_REQUESTS = 30
# Most 8-byte values an online calibration's sliding-window ring may hold (1 GiB): the ring is
# allocated up front, ``window`` rows of ``2 * buckets + (max_depth + 1)**2 + 1`` values each.
MAX_ONLINE_RING_VALUES = 1 << 27


def show(value, limit: int = 60, render=repr) -> str:
    """``render(value)`` (``repr`` by default) cut to about ``limit`` characters, for messages."""
    text = render(value)
    if len(text) <= limit:
        return text
    return f"{text[:limit - 20]}…({len(text):,} characters)"


def few(values, first: int = 10) -> str:
    """``"1, 2, 3, … and 997 more"``: the first values of a long list, then how many are left."""
    values = list(values)
    head = ", ".join(map(str, values[:first]))
    return head if len(values) <= first else f"{head}, … and {len(values) - first:,} more"


def digits_int(text):
    """``int(text)`` when ``text`` is plain ASCII digits (spaces around allowed) of at most 19
    of them, else None: ``str.isdigit`` also passes superscripts (``"²"``) and other scripts'
    digits, which ``int`` then refuses or reads, and 4,300 digits or more, which it refuses."""
    if not isinstance(text, str):
        return None
    t = text.strip()
    if not t or len(t) > 19 or not t.isascii() or not t.isdigit():
        return None
    return int(t)


# A plain decimal number as logs and published tables write one (SGLang's `{:.2f}` throughput,
# nvidia-smi's `300.00` W, a paper's `1.75`), exponent allowed: no sign, no `_`, no other scripts'
# digits (``float`` reads `3_00` as 300 and `٣` as 3).
_DECIMAL = re.compile(r"(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][-+]?[0-9]+)?")


def plain_decimal(text) -> float:
    """``float(text)`` when ``text`` (spaces around allowed) is a plain decimal number >= 0 (see
    :data:`_DECIMAL`), else NaN."""
    t = text.strip() if isinstance(text, str) else ""
    return float(t) if _DECIMAL.fullmatch(t) else math.nan


def is_int(value) -> bool:
    """An integer (Python or NumPy), not a boolean."""
    return isinstance(value, (int, numbers.Integral)) and not isinstance(value, bool)


def is_number(value) -> bool:
    """A real number (int or float, Python or NumPy), not a boolean."""
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def is_finite(value) -> bool:
    """A real number (not a boolean) that is neither infinite nor NaN."""
    return is_number(value) and math.isfinite(number_float(value))


def number_float(value) -> float:
    """``float(value)`` of a real number; an integer past the floats is infinite."""
    try:
        return float(value)
    except OverflowError:
        return math.inf if value > 0 else -math.inf


def int_problem(value, name: str, low: int = 0, high: int = COUNT_MAX, why: str = "") -> str | None:
    """``None`` if ``value`` is an integer in ``low..high``, else what is wrong with it."""
    if not is_int(value):
        return f"{name} = {show(value)} must be a whole number"
    if not low <= value <= high:
        limit = f" (the limit{': ' + why if why else ''}; see docs/limits.md)" if high < COUNT_MAX else ""
        return f"{name} = {show(value)} is outside {low:,}..{high:,}{limit}"
    return None


def number_problem(value, name: str, low: float = -math.inf, high: float = math.inf, *,
                   low_open: bool = False, unit: str = "", render=repr) -> str | None:
    """``None`` if ``value`` is a finite number in ``[low, high]`` (``(low, high]`` with
    ``low_open``), else what is wrong with it (the value shown by ``render``: a file's own
    spelling, such as TOML's ``true``)."""
    u = f" {unit}" if unit else ""
    if isinstance(value, float) and value == 0.0:
        value = 0.0  # a -0 is shown as 0
    if not is_number(value):
        return f"{name} = {show(value, render=render)} must be a number{u}"
    v = number_float(value)
    if not math.isfinite(v):
        return f"{name} = {show(value, render=render)} must be finite"
    if v < low or (low_open and v == low) or v > high:
        lo = "> " if low_open else ">= "
        bounds = []
        if low > -math.inf:
            bounds.append(f"{lo}{low:g}")
        if high < math.inf:
            bounds.append(f"<= {high:g}")
        return f"{name} = {show(value, render=render)} must be {' and '.join(bounds)}{u}"
    return None


def latency_problem(value, name: str) -> str | None:
    """``None`` if ``value`` is a number of ms in ``MIN_SAMPLE_MS..MAX_SAMPLE_MS`` (an int past the
    floats is not), else what is wrong with it."""
    if number_problem(value, name, MIN_SAMPLE_MS, MAX_SAMPLE_MS) is None:
        return None
    return (f"{name} = {show(value)} is not a latency (a JSON number of ms in "
            f"{MIN_SAMPLE_MS:g}..{MAX_SAMPLE_MS:g})")


def fraction_problem(value, name: str, *, top_open: bool = False) -> str | None:
    """``None`` if ``value`` is a number in ``[0, 1]`` (``[0, 1)`` with ``top_open``)."""
    problem = number_problem(value, name, 0.0, 1.0)
    if problem is None and top_open and float(value) >= 1.0:
        problem = f"{name} = {show(value)} must be below 1"
    return problem


def check_int(value, name: str, error_cls, low: int = 0, high: int = COUNT_MAX, why: str = "") -> int:
    """``int(value)``, or ``error_cls`` when :func:`int_problem` finds something."""
    problem = int_problem(value, name, low, high, why)
    if problem:
        raise error_cls(problem)
    return int(value)


def check_number(value, name: str, error_cls, low: float = -math.inf, high: float = math.inf, *,
                 low_open: bool = False, unit: str = "") -> float:
    """``float(value)``, or ``error_cls`` when :func:`number_problem` finds something."""
    problem = number_problem(value, name, low, high, low_open=low_open, unit=unit)
    if problem:
        raise error_cls(problem)
    return float(value)


def request_size_problem(prompt, output) -> str | None:
    """``None`` if no request asks for more than :data:`MAX_TOKENS_PER_REQUEST` prompt or output
    tokens, else which one does (the engine would run for ever on it).

    Parameters
    ----------
    prompt, output : ndarray(int64), shape (R,)
        Tokens per request.
    """
    for name, tokens in (("output_tokens", output), ("prompt_tokens", prompt)):
        big = tokens > MAX_TOKENS_PER_REQUEST
        if big.any():
            i = int(big.argmax())
            return (f"request {i}: {name} = {int(tokens[i]):,} is beyond the {MAX_TOKENS_PER_REQUEST:,} tokens one "
                    f"request may ask for ({int(big.sum()):,} request(s) are; docs/limits.md)")
    return None


def name_problem(value, name: str) -> str | None:
    """``None`` if ``value`` is a name: a non-empty line of printable text (no control characters,
    which would repaint the terminal it is printed on, nor a line break), else what is wrong."""
    if not isinstance(value, str) or not value.strip() or not value.isprintable():
        return f"{name} = {show(value)} must be a non-empty line of printable text (a name or a path)"
    return None


def flag_problem(value, name: str) -> str | None:
    """``None`` if ``value`` is a boolean (Python or NumPy), else what is wrong with it: a text
    such as ``"False"`` is true to ``if``."""
    dtype = getattr(value, "dtype", None)
    if isinstance(value, bool) or (dtype is not None and dtype.kind == "b" and getattr(value, "ndim", None) == 0):
        return None
    return f"{name} must be True or False, got {show(value)}"


def callback_problem(value, name: str, call: str) -> str | None:
    """``None`` if ``value`` is None or can be called, else what is wrong with it (``call``: how
    it is called, for the message)."""
    if value is None or callable(value):
        return None
    return f"{name} = {show(value)} must be a function called as {call}, or None"


def policy_list_problem(values, name: str) -> str | None:
    """``None`` if ``values`` is a list or tuple (of policies, each read on its own), else what is
    wrong with it: a bare text is refused rather than read one character at a time."""
    if isinstance(values, (list, tuple)):
        return None
    hint = f": write [{values!r:.40}]" if isinstance(values, str) else ""
    return f"{name} must be a list of policies (text or Policy), got {type(values).__name__} {show(values)}{hint}"


def slack_problem(value, name: str = "slack") -> str | None:
    """``None`` if ``value`` is a planner slack: a real number (not a string or a boolean) in
    ``[0, 1)``, else what is wrong with it."""
    if not is_number(value):
        return f"{name} {show(value)} is not a number: give a share in [0, 1)"
    v = number_float(value)
    if not 0.0 <= v < 1.0:  # NaN fails too
        return (f"{name} {show(value)} is outside [0, 1): 0 means no slower than depth 1, values near 1 put "
                "energy first")
    return None


def slack_text(slack: float) -> str:
    """A slack as labels print it (``propose@0.1``): the short ``%g`` form when it reads back
    as the same number, else the exact one, so a printed label names the run it labels."""
    short = f"{slack:g}"
    return short if float(short) == slack else repr(float(slack))


def rate_scale_problem(value, name: str = "rate scale") -> str | None:
    """``None`` if ``value`` is a traffic scale within :data:`MIN_RATE_SCALE` ..
    :data:`MAX_RATE_SCALE`, else what is wrong with it."""
    problem = number_problem(value, name, MIN_RATE_SCALE, MAX_RATE_SCALE)
    return problem and f"{problem} (2 = twice the traffic; docs/limits.md)"


def arrival_problem(arrival) -> str | None:
    """``None`` if every arrival time is finite and at most :data:`MAX_ARRIVAL_S`, else which
    request is not.

    Parameters
    ----------
    arrival : ndarray(float64), shape (R,)
        Seconds since the trace's first request.
    """
    import numpy as np

    if arrival.shape[0] == 0:
        return None
    finite = np.isfinite(arrival)
    if not finite.all():
        return f"request {int(np.argmin(finite))}: arrival_s is not finite"
    late = arrival > MAX_ARRIVAL_S
    if late.any():
        i = int(late.argmax())
        return (f"request {i}: arrival_s = {float(arrival[i]):.6g} s is beyond {MAX_ARRIVAL_S:g} s after the first "
                f"request ({int(late.sum()):,} request(s) are; check the trace's time unit, or --rate-scale; "
                "docs/limits.md)")
    return None


def logprob_problem(values) -> str | None:
    """``None`` if no confidence in ``values`` is a positive number, else the first that is.

    A confidence is a top-1 log-probability, so at most 0; :data:`LOGPROB_SLACK` above it is
    taken as rounding. A positive one means the column holds probabilities or logits, which
    would all land in the top bucket. NaN (unknown) passes.

    Parameters
    ----------
    values : ndarray(float), any shape
    """
    import numpy as np

    arr = np.asarray(values, dtype=np.float64).reshape(-1)
    with np.errstate(invalid="ignore"):
        above = arr > LOGPROB_SLACK
    if not above.any():
        return None
    i = int(above.argmax())
    return (f"confidence {i} (counting from 0) is {float(arr[i]):.6g}: a confidence is a log-probability, "
            f"at most 0 ({int(above.sum()):,} are above); for probabilities p give log(p) "
            "(docs/formats.md#per-draft-log)")


def check_finite_results(values: dict, cause: str, error_cls) -> None:
    """Refuse results that hold infinities or NaN, naming what caused them.

    Parameters
    ----------
    values : dict
        Name -> number (or nested dicts/lists of numbers): the figures about to be reported.
    cause : str
        The inputs that can make them non-finite (``--prefill-ms-per-token``, the table ...).
    """
    bad = list(_non_finite(values, ""))
    if bad:
        raise error_cls(f"the results are not finite numbers; they come from {cause}: check it",
                        [f"{path} = {v}" for path, v in bad])


def _non_finite(value, path):
    stack = [(path, value)]
    while stack:
        where, v = stack.pop()
        if isinstance(v, dict):
            stack.extend((f"{where}.{k}" if where else str(k), x) for k, x in reversed(list(v.items())))
        elif isinstance(v, (list, tuple)):
            stack.extend((f"{where}[{i}]", x) for i, x in reversed(list(enumerate(v))))
        elif is_number(v) and not is_int(v) and not is_finite(v):
            yield where, v


def check_gate(window, threshold, where="", names=("acceptance_window", "acceptance_length_threshold")):
    """The speculation gate's ``(window, threshold)`` checked (``(None, None)``: no gate): both or
    neither, the window an integer <= MAX_ACCEPTANCE_WINDOW (<= 0: never switches off), the
    threshold a finite number. ``where`` prefixes the message (a file); ``names`` are the two
    settings as the caller calls them."""
    import numpy as np

    if window is None and threshold is None:
        return None, None
    if window is None or threshold is None:
        given, missing = (names[0], names[1]) if threshold is None else (names[1], names[0])
        raise SimulationError(f"{where}{given} without {missing}: the speculation gate needs both (or neither)")
    if isinstance(window, bool) or not isinstance(window, (int, np.integer)):
        raise SimulationError(f"{where}{names[0]} must be a whole number of requests, got {show(window)}")
    if window > MAX_ACCEPTANCE_WINDOW:
        raise SimulationError(f"{where}{names[0]} {window} is beyond the {MAX_ACCEPTANCE_WINDOW} requests the "
                              "simulated gate keeps: use a shorter window")
    if isinstance(threshold, bool) or not isinstance(threshold, (int, float, np.integer, np.floating)) \
            or not np.isfinite(threshold):
        raise SimulationError(f"{where}{names[1]} must be a finite number (mean accepted drafts per step), "
                              f"got {show(threshold)}")
    return int(window), float(threshold)
