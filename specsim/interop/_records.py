"""What a telemetry parser returns: records in serve order and the bookkeeping of the lines read.

A parser turns one file into :class:`Record` values, each the counts one log line, scrape
difference, summary block or per-request block reports, and a :class:`Tally` of what it read,
skipped and could not read. Records come in three kinds, by what they identify (see
``docs/telemetry.md``, "What each source identifies"):

- ``"steps"``: verify steps by ``(drafts, accepted run)`` (accept-run histograms, per-step arrays);
- ``"marginal"``: per-position accepted drafts over the steps that drafted (vLLM's per-position
  counters and rates);
- ``"mean"``: accepted drafts and verify steps, or a mean only (every other source).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Optional

from specsim._io import DuplicateKeyError, decode_text, json_object, read_input
from specsim.errors import CalibrationError
from specsim._checks import COUNT_MAX, MAX_DEPTH


@dataclass
class Record:
    """The counts of one line, scrape difference or block, in the order the serve wrote them.

    Attributes
    ----------
    kind : {"steps", "marginal", "mean"}
    where : str
        File and line (or block) it came from, for messages.
    steps : dict
        ``"steps"``: ``(drafts d, accepted a) -> count``.
    runs : dict
        ``"steps"`` with per-step arrays: ``d -> list of accepted runs`` in serve order.
    windows : dict
        ``"steps"`` from histograms: ``d -> list of rows [accepted d, .., accepted 1, rejected]``.
    accepted : list of int
        ``"marginal"``: accepted drafts at positions 1..K.
    reached : list of int
        ``"marginal"``: the steps behind each position's count (every step that drafted, the
        denominator the engines divide by).
    mean_accepted : float
        ``"mean"``: accepted drafts per verify step (bonus token excluded).
    n_steps : float or None
        ``"mean"``: verify steps behind the mean (None when the source does not say).
    depth : int or None
        Drafts per verify step when the record tells it.
    accepted_tokens, drafted_tokens : int or None
        ``"mean"`` records that count tokens but not steps (vLLM's early V1 line, TensorRT-LLM's
        released per-request block): the steps are ``drafted / depth`` once the depth is known.
    variable : str or None
        Why the record's counts show that the depth varied from step to step (then positions
        past the shallowest depth mix steps that never reached them); None when they do not.
    depth_told : bool
        False for a histogram whose length is not the depth (SGLang grows it to the largest
        accepted run + 1): the depth must come from elsewhere.
    """

    kind: str
    where: str
    steps: dict = field(default_factory=dict)
    runs: dict = field(default_factory=dict)
    windows: dict = field(default_factory=dict)
    accepted: list = field(default_factory=list)
    reached: list = field(default_factory=list)
    mean_accepted: float = 0.0
    n_steps: Optional[float] = None
    depth: Optional[int] = None
    accepted_tokens: Optional[int] = None
    drafted_tokens: Optional[int] = None
    variable: Optional[str] = None
    depth_told: bool = True


@dataclass(frozen=True)
class Format:
    """A telemetry format an engine module reads.

    Attributes
    ----------
    name : str
        ``--from`` name, ``ENGINE-SOURCE``.
    description : str
    markers : tuple of str
        Strings every file of the format holds (content detection).
    parse : callable
        ``parse(text, source, **options) -> (records, Tally)``; with ``whole``, ``parse(texts,
        sources, **options)`` reads every file at once.
    whole : bool
    options : tuple of str
        Reading options the parser takes (``decode_log_interval``).
    """

    name: str
    description: str
    markers: tuple
    parse: object
    whole: bool = False
    options: tuple = ()


@dataclass
class Tally:
    """What a parser read.

    Attributes
    ----------
    records : int
        Lines or blocks that gave counts.
    zero_draft : int
        Lines or blocks of the format that drafted nothing in their interval (skipped).
    garbage : int
        Lines or blocks that look like the format (they carry its anchor) but could not be read.
    other : int
        Lines unrelated to speculative decoding (startup logs, other metrics): ignored.
    resets : int
        Counter series that went down between two scrapes (a server restart).
    notes : dict
        Facts for the calibration's ``[meta]``: versions told apart, assumptions taken.
    problems : list of str
        One line per garbage line or block (for ``--strict`` and messages).
    """

    records: int = 0
    zero_draft: int = 0
    garbage: int = 0
    other: int = 0
    resets: int = 0
    notes: dict = field(default_factory=dict)
    problems: list = field(default_factory=list)

    def bad(self, where: str, why: str) -> None:
        self.garbage += 1
        self.problems.append(f"{where}: {why}")

    def merge(self, other: "Tally") -> None:
        for name in ("records", "zero_draft", "garbage", "other", "resets"):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        self.problems += other.problems
        for k, v in other.notes.items():
            if k in self.notes and self.notes[k] != v and not isinstance(v, (int, float)):
                if self.notes[k] != "mixed":
                    self.notes[k] = "mixed"
            elif isinstance(v, int) and not isinstance(v, bool) and k in self.notes:
                self.notes[k] += v
            else:
                self.notes.setdefault(k, v)


def read_text(path) -> str:
    """A telemetry file's text, refused (naming the file) when it is empty, binary, UTF-16 or
    not UTF-8; a UTF-8 byte-order mark is dropped."""
    text = decode_text(read_input(path, "the telemetry file", CalibrationError), "the telemetry file", path,
                       CalibrationError)
    if not text.strip():
        raise CalibrationError(f"{path}: the telemetry file is empty: give a log, a /metrics scrape or a JSON dump")
    return text


def json_documents(text: str, source: str, tally: Tally, lines=None):
    """The JSON values of a file: one document, or one per line (JSON Lines, or a saved
    streaming response whose lines are ``data: {...}`` events ending in ``data: [DONE]``).

    A JSON Lines file keeps the lines that parse; a line that does not is garbage (counted).
    ``NaN`` is accepted (Python's JSON writer emits it for an empty mean); nesting too deep to
    read is refused, naming the file. ``lines``, a list, receives each document's first line.
    """
    stripped = text.strip()
    try:
        docs = [_loads(stripped, source)]
        if lines is not None:
            lines.append(text[:len(text) - len(text.lstrip())].count("\n") + 1)
        return docs
    except DuplicateKeyError as e:
        try:
            json.loads(stripped)
        except (ValueError, RecursionError):
            pass  # not one document: each line is read (and refused) on its own below
        else:
            raise CalibrationError(f"{source}: {e}") from None
    except ValueError:
        pass
    docs = []
    for i, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if line.startswith("data:"):  # a saved server-sent event stream: the metrics ride its last chunk
            line = line[5:].strip()
            if line == "[DONE]":
                continue
        if not line:
            continue
        try:
            docs.append(_loads(line, f"{source}:{i}"))
            if lines is not None:
                lines.append(i)
        except DuplicateKeyError as e:
            tally.bad(f"{source}:{i}", str(e))
        except ValueError:
            tally.bad(f"{source}:{i}", "not a JSON value")
    return docs


def _loads(text, source):
    try:
        return json.loads(text, object_pairs_hook=json_object)
    except RecursionError:
        raise CalibrationError(f"{source}: the JSON nests too deep to read") from None


def block_records(text: str, source: str, tally: Tally, find, parse, label: str) -> list:
    """Records of every block of every JSON document of a file: ``find(doc)`` lists a
    document's blocks (none: the document is counted as other), ``parse(block, where)`` turns
    one into a Record or None (already tallied). ``tally.records`` is set to the count."""
    records = []
    for n, doc in enumerate(json_documents(text, source, tally)):
        blocks = find(doc)
        if not blocks:
            tally.other += 1
            continue
        for b, block in enumerate(blocks):
            rec = parse(block, f"{source} document {n + 1} {label} {b + 1}")
            if rec is not None:
                records.append(rec)
    tally.records = len(records)
    return records


def walk(value):
    """Every dict inside a JSON value, depth first, in document order."""
    stack = [value]
    while stack:
        v = stack.pop()
        if isinstance(v, dict):
            yield v
            stack.extend(reversed(list(v.values())))
        elif isinstance(v, list):
            stack.extend(reversed(v))


def as_count(value):
    """A JSON or text count as int (an integral float such as ``12.0`` included), else None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value if 0 <= value <= COUNT_MAX else None  # counts end at 2**62 (docs/limits.md)
    if isinstance(value, float):
        return as_count(int(value)) if value.is_integer() and value >= 0 else None
    if isinstance(value, str):
        if not value.isascii() or len(value) > 40:
            return None
        try:
            return as_count(float(value)) if "." in value or "e" in value.lower() else as_count(int(value))
        except ValueError:
            return None
    return None


def as_number(value):
    """A finite JSON or text number as float, else None."""
    if isinstance(value, bool):
        return None
    try:
        v = float(value)
    except (TypeError, ValueError):
        return None
    return v if v == v and abs(v) != float("inf") else None


def histogram_record(hist, depth, where, tally):
    """A ``"steps"`` record from an exact-accepted histogram (index j = steps accepting exactly j).

    ``depth`` is the drafts per step when the source says it (else ``len(hist) - 1``); a
    histogram shorter than ``depth + 1`` is padded with zeros, a longer one is refused.
    """
    counts = [as_count(c) for c in hist] if isinstance(hist, list) else None
    if not counts or any(c is None for c in counts):
        tally.bad(where, f"the acceptance histogram {hist!r} is not a list of counts")
        return None
    d = len(counts) - 1 if depth is None else depth
    if d > MAX_DEPTH:
        tally.bad(where, f"a histogram of {d} drafts per step: at most {MAX_DEPTH}")
        return None
    if len(counts) > d + 1:
        if any(counts[d + 1:]):
            tally.bad(where, f"the histogram has {len(counts)} entries for {d} drafts per step")
            return None
        counts = counts[:d + 1]
    counts += [0] * (d + 1 - len(counts))
    if not sum(counts):
        tally.zero_draft += 1
        return None
    steps = {(d, a): c for a, c in enumerate(counts) if c}
    return Record("steps", where, steps=steps, windows={d: [counts[::-1]]}, depth=d)
