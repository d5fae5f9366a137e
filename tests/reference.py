"""Plain, slow, obviously-correct versions of specsim's kernels, written from SPEC's text.

Each section is independent of the package's code: tests compare the kernels with these.
"""

from __future__ import annotations

# --- traces and replay (§5, §6 readers) ---------------------------------------------------------

import csv as _csv
import datetime as _dt
import json as _json
from decimal import Decimal as _Decimal


def ref_datetime_ns(text):
    """Nanoseconds since 1970 UTC of ``YYYY-MM-DD HH:MM:SS[.frac][Z|+HH:MM]`` via ``datetime``.

    The fraction is read as a decimal string, truncated to 9 digits (as the kernel does).
    """
    text = text.strip()
    base, offset = text[:19], 0
    rest = text[19:]
    frac = ""
    if rest.startswith("."):
        i = 1
        while i < len(rest) and rest[i].isdigit():
            i += 1
        frac, rest = rest[1:i], rest[i:]
    if rest == "Z":
        rest = ""
    if rest:
        sign = 1 if rest[0] == "+" else -1
        hh, mm = rest[1:].replace(":", "")[:2], rest[1:].replace(":", "")[2:]
        offset = sign * (int(hh) * 3600 + int(mm) * 60)
    moment = _dt.datetime.strptime(base.replace("T", " "), "%Y-%m-%d %H:%M:%S").replace(tzinfo=_dt.timezone.utc)
    secs = int((moment - _dt.datetime(1970, 1, 1, tzinfo=_dt.timezone.utc)).total_seconds()) - offset
    return secs * 1_000_000_000 + int((frac + "000000000")[:9] or 0)


def ref_requests(times, prompts, outputs, divisor=1):
    """Skip zero-token rows, sort stably by time, re-base to the first: ``(arrival_s, p, o)`` rows.

    ``times`` are exact values (ints or Decimals); arrivals come back as exact Decimals.
    """
    rows = [(t, p, o) for t, p, o in zip(times, prompts, outputs) if p > 0 and o > 0]
    rows.sort(key=lambda r: r[0])  # list.sort is stable
    if not rows:
        return []
    t0 = rows[0][0]
    return [(_Decimal(t - t0) / _Decimal(divisor), p, o) for t, p, o in rows]


def _ref_count(text):
    value = _Decimal(text.strip())
    if value != value.to_integral_value() or value < 0:
        raise ValueError(f"{text!r} is not a token count")
    return int(value)


def ref_read_csv(path, time_col, prompt_col, output_col, unit="s"):
    """A CSV trace read with the ``csv`` module: ``(rows, zero_token_count)``; unit ``datetime`` or seconds-based."""
    with open(path, newline="", encoding="utf-8-sig") as f:
        reader = _csv.DictReader(f)
        times, prompts, outputs = [], [], []
        for row in reader:
            if unit == "datetime":
                times.append(ref_datetime_ns(row[time_col]))
            else:
                times.append(_Decimal(row[time_col].strip()))
            prompts.append(_ref_count(row[prompt_col]))
            outputs.append(_ref_count(row[output_col]))
    divisor = {"datetime": 10**9, "s": 1, "ms": 1000, "us": 10**6, "ns": 10**9}[unit]
    zero = sum(1 for p, o in zip(prompts, outputs) if p == 0 or o == 0)
    return ref_requests(times, prompts, outputs, divisor), zero


def ref_read_mooncake(path):
    """A Mooncake JSONL trace read with the ``json`` module: ``(rows, zero_token_count)``."""
    times, prompts, outputs = [], [], []
    with open(path, encoding="utf-8") as f:
        for line in f:
            if not line.strip():
                continue
            obj = _json.loads(line)
            times.append(_Decimal(str(obj["timestamp"])))
            prompts.append(int(obj["input_length"]))
            outputs.append(int(obj["output_length"]))
    zero = sum(1 for p, o in zip(prompts, outputs) if p == 0 or o == 0)
    return ref_requests(times, prompts, outputs, 1000), zero


def ref_replay(digits, width, depth, budget, step_ms, step_j):
    """SPEC §5's replay loop over a list of digits: ``(tokens, steps, ms, joules)``.

    Costs are added once per step, in step order (the kernel's order, so sums compare exactly).
    """
    tokens = steps = cursor = 0
    ms = joules = 0.0
    while tokens < budget:
        if depth == 0:
            tokens += width
        else:
            for _ in range(width):
                a = digits[cursor % len(digits)]
                tokens += 1 + min(a, depth)
                cursor += 1
        ms += step_ms
        joules += step_j
        steps += 1
    return tokens, steps, ms, joules


def ref_trace_priors(digits, k_logged):
    """Conditional acceptance by position: #(a >= j) / #(a >= j - 1), entries clamped to k_logged."""
    a = [min(d, k_logged) for d in digits]
    out = []
    for j in range(1, k_logged + 1):
        reached = sum(1 for x in a if x >= j - 1)
        out.append(sum(1 for x in a if x >= j) / reached if reached else 0.0)
    return out
