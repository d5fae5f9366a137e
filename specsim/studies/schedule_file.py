"""specsim's own schedule file (docs/schedules.md#the-schedule-file): a canonical width-to-depth
schedule in TOML with what it was tuned for recorded beside it, written by ``specsim tune`` and read
by ``specsim schedule export``, ``--policy`` and the drift monitor."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

import numpy as np

from specsim import _toml
from specsim._checks import is_finite, is_int, show
from specsim._io import read_input
from specsim.errors import PolicyError, ScheduleError
from specsim.policy.policy import parse_policy
from specsim.policy.schedule import canonical, check_ranges, policy_text

SCHEMA = 1


@dataclass(frozen=True)
class ScheduleFile:
    """A schedule TOML as read back: the ranges and everything recorded beside them
    (``max_num_seqs``: the serve's largest batch, the file's ``max_batch`` key)."""

    ranges: tuple
    objective: str = ""
    max_num_seqs: int = None
    sections: dict = field(default_factory=dict)

    @property
    def policy(self) -> str:
        return policy_text(self.ranges)


def per_batch_verdict(result: dict, cost: float) -> tuple:
    """Whether a tuned per-batch schedule is worth serving on an engine where the per-batch form
    costs ``cost`` (a share of the objective; :func:`specsim.interop.per_batch_cost`), from a
    schedule file's ``[result]`` (``gain``, ``gain_noise``, ``best_fixed``,
    ``best_fixed_holdout_mean``): its held-out gain over the best fixed depth must clear both the
    noise and the cost, ``gain - gain_noise > cost x |best fixed|``. Returns ``(worth, why)``;
    ``why`` says, in words, how the gain compares (empty when it clears with no cost to pay)."""
    gain, base, noise = result.get("gain"), result.get("best_fixed_holdout_mean"), result.get("gain_noise", 0.0)

    if not (is_finite(gain) and is_finite(base) and base and (noise is None or is_finite(noise))):
        return True, (f"[result] gain {show(gain)}, gain_noise {show(noise)}, best_fixed_holdout_mean {show(base)}: "
                      "not the numbers tune writes, so the per-batch schedule is exported without weighing its gain "
                      f"against the {100 * cost:g}% it costs")
    noise = 0.0 if noise is None else float(noise)
    rel, rel_noise = 100.0 * gain / abs(base), 100.0 * noise / abs(base)
    worth = gain - noise > cost * abs(base)
    if worth and not cost:
        return True, ""
    said = (f"the tuned schedule gains {rel:+.2f}% +- {rel_noise:.2f}% over {result.get('best_fixed')} on the "
            f"held-out window")
    if worth:
        return True, f"{said}, more than the {100 * cost:g}% the per-batch form costs and the noise"
    return False, (f"{said}, not more than the {100 * cost:g}% the per-batch form costs plus the noise: "
                   f"the plain static setting ({result.get('best_fixed')}) serves better")


def trace_digest(requests) -> str:
    """``sha256:`` of a request array's arrival, prompt and output columns (little-endian), so a
    trace read from two files of the same content has one digest."""
    h = hashlib.sha256()
    for name, dtype in (("arrival_s", "<f8"), ("prompt_tokens", "<i8"), ("output_tokens", "<i8")):
        h.update(np.ascontiguousarray(requests[name], dtype=dtype).tobytes())
    return "sha256:" + h.hexdigest()


def text_digest(text: str) -> str:
    return "sha256:" + hashlib.sha256(text.encode("utf-8")).hexdigest()


def render_schedule(ranges, *, objective: str, max_num_seqs=None, sections=None) -> str:
    """The schedule TOML (docs/schedules.md#the-schedule-file): header fields, one ``[[range]]``
    per range of the canonical schedule, then each of ``sections`` as a TOML table of scalars."""
    c = canonical(ranges)
    lines = ["# A batch-width -> draft-depth schedule written by specsim (docs/schedules.md).",
             "# Serve it: specsim schedule export THIS.toml --to vllm|trtllm|sglang",
             f"schema = {SCHEMA}", f"policy = {_toml.string(policy_text(c))}", f"objective = {_toml.string(objective)}"]
    if max_num_seqs is not None:
        lines.append(f"max_batch = {int(max_num_seqs)}")
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

        unknown = sorted(set(row) - {"first", "last", "depth"})
        if unknown:
            raise ScheduleError(f"{source}: [[range]] {i + 1} has unknown key(s) {', '.join(map(show, unknown))}; "
                                "a range has first, last (optional) and depth")
        ranges.append((row["first"], row.get("last"), row["depth"]))
    c = canonical(check_ranges(ranges, source))
    written = doc.get("policy")
    if written is not None:
        try:
            theirs = canonical(parse_policy(written).ranges)
        except PolicyError as e:
            raise ScheduleError(f"{source}: policy = {written!r} does not parse: {e}") from None
        if theirs != c:
            raise ScheduleError(f"{source}: policy = {written!r} disagrees with the [[range]] tables "
                                f"({policy_text(c)}); fix one of them or delete the policy line")
    mb = doc.get("max_batch")
    if mb is not None and (not is_int(mb) or mb < 1):
        raise ScheduleError(f"{source}: max_batch must be a whole number >= 1, got {mb!r}")
    sections = {k: v for k, v in doc.items() if isinstance(v, dict)}
    return ScheduleFile(c, str(doc.get("objective", "")), mb, sections)
