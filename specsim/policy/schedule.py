"""Width-to-depth schedules as values: the check, the canonical form, the text form and the lookup.

A schedule is a tuple of ranges ``(first_width, last_width or None for open, depth)``, sorted and
non-overlapping, exactly as a ``schedule:`` policy holds them; a width no range covers decodes
plainly (depth 0). :func:`canonical` rewrites any schedule into its one normal form (ranges
contiguous from width 1, equal neighbours merged, the last range open), so two schedules are the
same when their normal forms are equal. Nothing here reads or writes a file: the engines' formats
and specsim's own schedule file build on these functions.
"""

from __future__ import annotations

from specsim._checks import MAX_DEPTH, MAX_WIDTH, int_problem, is_int, show
from specsim.errors import ScheduleError


def check_ranges(ranges, where: str = "schedule") -> tuple:
    """Validate ``ranges`` and return them as a sorted tuple of ``(int, int or None, int)``.

    Raises
    ------
    ScheduleError
        A range that is not whole numbers, starts below 1, ends before it starts, has a
        negative depth, or overlaps another.
    """
    if isinstance(ranges, (str, bytes)) or not hasattr(ranges, "__iter__"):
        raise ScheduleError(f"{where}: {show(ranges)} is not a list of (first_width, last_width or None, depth)")
    out = []
    for r in ranges:
        try:
            lo, hi, k = r
        except (TypeError, ValueError):
            raise ScheduleError(f"{where}: {show(r)} is not (first_width, last_width or None, depth)") from None
        for name, v in (("first width", lo), ("depth", k)) + ((("last width", hi),) if hi is not None else ()):
            if not is_int(v):
                raise ScheduleError(f"{where}: the {name} of range {show(r)} is not a whole number")
        # Widths and depths past the limits no engine serves (docs/limits.md).
        for name, v, top in (("first width", lo, MAX_WIDTH), ("last width", hi, MAX_WIDTH), ("depth", k, MAX_DEPTH)):
            problem = v is not None and v > top and int_problem(v, f"the {name} of range {show(r)}", 0, top)
            if problem:
                raise ScheduleError(f"{where}: {problem}")
        if lo < 1:
            raise ScheduleError(f"{where}: range {r!r} starts below width 1")
        if hi is not None and hi < lo:
            raise ScheduleError(f"{where}: range {r!r} ends before it starts")
        if k < 0:
            raise ScheduleError(f"{where}: range {r!r} has a negative depth")
        out.append((int(lo), None if hi is None else int(hi), int(k)))
    if not out:
        raise ScheduleError(f"{where}: no ranges")
    out.sort(key=lambda r: r[0])
    clash = overlap(out)
    if clash:
        raise ScheduleError(f"{where}: ranges {span(clash[0])} and {span(clash[1])} overlap")
    return tuple(out)


def overlap(ranges):
    """The first two neighbours of sorted ``ranges`` that overlap, or None."""
    for a, b in zip(ranges, ranges[1:]):
        if a[1] is None or a[1] >= b[0]:
            return a, b
    return None


def canonical(ranges) -> tuple:
    """The normal form of a schedule: contiguous from width 1 (gaps become depth-0 ranges),
    neighbours of equal depth merged, the last range open."""
    filled, nxt = [], 1
    for lo, hi, k in check_ranges(ranges):
        if lo > nxt:
            filled.append([nxt, lo - 1, 0])
        filled.append([lo, hi, k])
        if hi is None:
            nxt = None
            break
        nxt = hi + 1
    if nxt is not None:
        filled.append([nxt, None, 0])
    merged = [filled[0]]
    for lo, hi, k in filled[1:]:
        if k == merged[-1][2]:
            merged[-1][1] = hi
        else:
            merged.append([lo, hi, k])
    return tuple(tuple(r) for r in merged)


def depth_at(ranges, width: int) -> int:
    """The depth a schedule gives batch ``width`` (0 where no range covers it)."""
    for lo, hi, k in ranges:
        if lo <= width and (hi is None or width <= hi):
            return k
    return 0


def span(r) -> str:
    lo, hi, _ = r
    return f"{lo}-" if hi is None else (f"{lo}" if hi == lo else f"{lo}-{hi}")


def policy_text(ranges) -> str:
    """``schedule:1-16=4,17-=2`` for ``ranges`` (as :func:`specsim.policy.policy.parse_policy` reads it)."""
    return "schedule:" + ",".join(f"{span(r)}={r[2]}" for r in ranges)


def ranges_from_depths(depths) -> tuple:
    """Collapse per-width depths into canonical ranges.

    Parameters
    ----------
    depths : sequence of int, length W >= 1
        ``depths[i]`` is the depth at width ``i + 1``; the last one also covers every wider width.
    """
    d = [int(v) for v in depths]
    if not d:
        raise ScheduleError("no widths to collapse into a schedule")
    out, lo = [], 1
    for i in range(1, len(d)):
        if d[i] != d[i - 1]:
            out.append((lo, i, d[i - 1]))
            lo = i + 1
    out.append((lo, None, d[-1]))
    return canonical(out)
