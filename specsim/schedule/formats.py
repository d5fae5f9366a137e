"""Width-to-depth schedules as values, and specsim's own schedule file.

A schedule is a tuple of ranges ``(first_width, last_width or None for open, depth)``, sorted and
non-overlapping, exactly as a ``schedule:`` policy holds them; a width no range covers decodes
plainly (depth 0). :func:`canonical` rewrites any schedule into its one normal form (ranges
contiguous from width 1, equal neighbours merged, the last range open), so two schedules are the
same when their normal forms are equal.

The engines' formats of a schedule live with each engine in :mod:`specsim.interop`; this
module is the schedule as a value and specsim's own schedule file.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

from specsim.errors import PolicyError, ScheduleError

SCHEMA = 1


# -- schedules as values --------------------------------------------------------------------------

def check_ranges(ranges, where: str = "schedule") -> tuple:
    """Validate ``ranges`` and return them as a sorted tuple of ``(int, int or None, int)``.

    Raises
    ------
    ScheduleError
        A range that is not whole numbers, starts below 1, ends before it starts, has a
        negative depth, or overlaps another.
    """
    from specsim._checks import MAX_DEPTH, MAX_WIDTH, int_problem, is_int, show

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
    for a, b in zip(out, out[1:]):
        if a[1] is None or a[1] >= b[0]:
            raise ScheduleError(f"{where}: ranges {span(a)} and {span(b)} overlap")
    return tuple(out)


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
    """``schedule:1-16=4,17-=2`` for ``ranges`` (as :func:`specsim.sim.policy.parse_policy` reads it)."""
    return "schedule:" + ",".join(f"{span(r)}={r[2]}" for r in ranges)


# -- specsim's schedule file ------------------------------------------------------------------------

@dataclass(frozen=True)
class ScheduleFile:
    """A schedule TOML as read back: the ranges and everything recorded beside them."""

    ranges: tuple
    objective: str = ""
    max_batch: int = None
    sections: dict = field(default_factory=dict)

    @property
    def policy(self) -> str:
        return policy_text(self.ranges)


def requests_digest(requests) -> str:
    """``sha256:`` of a request array's arrival, prompt and output columns (little-endian), so a
    trace read from two files of the same content has one digest."""
    import numpy as np

    h = hashlib.sha256()
    for name, dtype in (("arrival_s", "<f8"), ("prompt_tokens", "<i8"), ("output_tokens", "<i8")):
        h.update(np.ascontiguousarray(requests[name], dtype=dtype).tobytes())
    return "sha256:" + h.hexdigest()


def text_digest(text: str) -> str:
    return "sha256:" + hashlib.sha256(text.encode("utf-8")).hexdigest()


def render_schedule(ranges, *, objective: str, max_batch=None, sections=None) -> str:
    """The schedule TOML (docs/schedules.md#the-schedule-file): header fields, one ``[[range]]``
    per range of the canonical schedule, then each of ``sections`` as a TOML table of scalars."""
    from specsim import _toml

    c = canonical(ranges)
    lines = ["# A batch-width -> draft-depth schedule written by specsim (docs/schedules.md).",
             "# Serve it: specsim schedule export THIS.toml --to vllm|trtllm|sglang",
             f"schema = {SCHEMA}", f"policy = {_toml.string(policy_text(c))}", f"objective = {_toml.string(objective)}"]
    if max_batch is not None:
        lines.append(f"max_batch = {int(max_batch)}")
    for lo, hi, k in c:
        lines += ["", "[[range]]", f"first = {lo}"]
        if hi is not None:
            lines.append(f"last = {hi}")
        lines.append(f"depth = {k}")
    for name, table in (sections or {}).items():
        lines += ["", f"[{_toml.key(name)}]"]
        for key, value in table.items():
            if value is not None:
                lines.append(f"{_toml.key(key)} = {_toml.scalar(value)}")
    return "\n".join(lines) + "\n"


def load_schedule(path) -> ScheduleFile:
    """Read a schedule TOML written by :func:`render_schedule` (or by hand)."""
    from specsim import _toml
    from specsim._io import read_input

    doc = _toml.loads(read_input(path, "a schedule file", ScheduleError), "schedule file", str(path), ScheduleError)
    return schedule_from_doc(doc, str(path))


def schedule_from_doc(doc: dict, source: str) -> ScheduleFile:
    if doc.get("schema") != SCHEMA:
        raise ScheduleError(f"{source}: schema = {doc.get('schema')!r}; this specsim reads schedule files of "
                            f"schema {SCHEMA}")
    rows = doc.get("range")
    if not isinstance(rows, list) or not rows:
        raise ScheduleError(f"{source}: no [[range]] tables (each has first, optional last, depth)")
    ranges = []
    for i, row in enumerate(rows):
        if not isinstance(row, dict) or "first" not in row or "depth" not in row:
            raise ScheduleError(f"{source}: [[range]] {i + 1} needs first and depth (last is optional: open range)")
        from specsim._checks import show

        unknown = sorted(set(row) - {"first", "last", "depth"})
        if unknown:
            raise ScheduleError(f"{source}: [[range]] {i + 1} has unknown key(s) {', '.join(map(show, unknown))}; "
                                "a range has first, last (optional) and depth")
        ranges.append((row["first"], row.get("last"), row["depth"]))
    c = canonical(check_ranges(ranges, source))
    written = doc.get("policy")
    if written is not None:
        from specsim.sim.policy import parse_policy

        try:
            theirs = canonical(parse_policy(written).ranges)
        except PolicyError as e:
            raise ScheduleError(f"{source}: policy = {written!r} does not parse: {e}") from None
        if theirs != c:
            raise ScheduleError(f"{source}: policy = {written!r} disagrees with the [[range]] tables "
                                f"({policy_text(c)}); fix one of them or delete the policy line")
    from specsim._checks import is_int

    mb = doc.get("max_batch")
    if mb is not None and (not is_int(mb) or mb < 1):
        raise ScheduleError(f"{source}: max_batch must be a whole number >= 1, got {mb!r}")
    sections = {k: v for k, v in doc.items() if isinstance(v, dict)}
    return ScheduleFile(c, str(doc.get("objective", "")), mb, sections)


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
