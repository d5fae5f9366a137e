"""What a telemetry parser returns: records in serve order and the bookkeeping of the lines read.

A parser turns one file into :class:`Record` values, each the counts one log line, scrape
difference, summary block or per-request block reports, and a :class:`Tally` of what it read,
skipped and could not read. Records come in three kinds, by what they identify (see
``docs/telemetry.md``, "What each source identifies"):

- ``"steps"``: verify steps by ``(drafts, accepted run)`` (accept-run histograms, per-step arrays);
- ``"marginal"``: per-position accepted drafts over the steps that drafted (vLLM's per-position
  counters and rates);
- ``"mean"``: accepted drafts and verify steps, or a mean only (every other source).

The per-request blocks vLLM and TensorRT-LLM write (one layout, each engine's own count names) are
read here, by :func:`request_records`, for both.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Optional

from specsim._io import DuplicateKeyError, decode_text, json_object, read_input
from specsim.errors import CalibrationError
from specsim._checks import COUNT_MAX, MAX_DEPTH, is_int


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
            elif is_int(v) and k in self.notes:
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


# -- per-request metrics --------------------------------------------------------------------
def request_records(text: str, source: str, block_key="speculative_decoding",
                    keys=("num_accepted_draft_tokens", "num_draft_tokens")):
    """Records of per-request speculative-decoding blocks (vLLM's, and TensorRT-LLM's with its
    own count names ``keys``: accepted drafts, drafted tokens): per-step arrays, a histogram,
    else a mean."""
    def find(doc):
        blocks = [d[block_key] for d in walk(doc) if isinstance(d.get(block_key), dict)]
        if not blocks and isinstance(doc, dict) and ("acceptance_histogram" in doc or "num_spec_steps" in doc):
            blocks = [doc]
        return blocks

    tally = Tally()
    records = block_records(text, source, tally, find, lambda block, where: _request_block(block, where, keys, tally),
                            "block")
    return records, tally


def _request_block(block, where, keys, tally):
    """One block. The histogram has ``num_spec_tokens + 1`` entries (index j = steps that accepted
    exactly j). Its steps are at that depth only when every step drafted it: ``num_draft_tokens``
    other than ``num_spec_steps x num_spec_tokens``, or a null ``num_spec_tokens`` (TensorRT-LLM
    writes null under ``draft_len_schedule``), marks the depth variable; per-step arrays stay
    exact whatever the depth did."""
    accepted_key, drafted_key = keys
    depth = as_count(block.get("num_spec_tokens"))
    accepted, drafted = block.get("per_step_accepted"), block.get("per_step_drafted")
    if isinstance(accepted, list) and isinstance(drafted, list):
        a = [as_count(v) for v in accepted]
        d = [as_count(v) for v in drafted]
        if (len(a) != len(d) or any(x is None for x in a + d) or any(x > y for x, y in zip(a, d))
                or max(d, default=0) > MAX_DEPTH):
            tally.bad(where, "per_step_accepted and per_step_drafted are not matching lists of counts, accepted <= "
                             f"drafted <= {MAX_DEPTH}")
            return None
        steps, runs = {}, {}
        for x, y in zip(a, d):
            if y == 0:
                continue
            steps[(y, x)] = steps.get((y, x), 0) + 1
            runs.setdefault(y, []).append(x)
        if not steps:
            tally.zero_draft += 1
            return None
        return Record("steps", where, steps=steps, runs=runs, depth=depth)
    n_steps = as_count(block.get("num_spec_steps"))
    acc = as_count(block.get(accepted_key))
    drafted = as_count(block.get(drafted_key))
    if "acceptance_histogram" in block:
        hist = block["acceptance_histogram"]
        if "num_spec_tokens" in block and block["num_spec_tokens"] is not None and depth is None:
            tally.bad(where, f"num_spec_tokens {block['num_spec_tokens']!r} is not a count")
            return None
        rec = histogram_record(hist, depth, where, tally)
        if rec is None:
            return None
        total = sum(rec.steps.values())
        accepted_total = sum(a * c for (_, a), c in rec.steps.items())
        if n_steps is not None and n_steps != total:
            tally.bad(where, f"num_spec_steps {n_steps} but the histogram counts {total} steps: counts that contradict "
                             "each other")
            return None
        if acc is not None and acc != accepted_total:
            tally.bad(where, f"{accepted_key} {acc} but the histogram accepts {accepted_total}: counts that contradict "
                             "each other")
            return None
        if depth is None and "num_spec_tokens" in block:
            rec.variable = "num_spec_tokens is null (the depth followed a schedule)"
        elif depth is not None and drafted is not None and drafted != total * depth:
            if drafted > total * depth:
                tally.bad(where, f"{drafted_key} {drafted} is more than {total} steps x num_spec_tokens {depth}")
                return None
            rec.variable = f"{drafted_key} {drafted} is not {total} steps x num_spec_tokens {depth}"
        return rec
    if n_steps is None and acc is not None and drafted is not None:
        # TensorRT-LLM's released block: accepted and drafted tokens only; the steps need the depth.
        if drafted == 0:
            tally.zero_draft += 1
            return None
        if acc > drafted:
            tally.bad(where, f"{accepted_key} {acc} > {drafted_key} {drafted}: counts that contradict each other")
            return None
        tally.notes["request_block"] = "accepted and drafted tokens only"
        return Record("mean", where, accepted_tokens=acc, drafted_tokens=drafted, depth=depth)
    if n_steps is None or acc is None:
        tally.bad(where, f"a speculative-decoding block without a histogram, num_spec_steps or {accepted_key}")
        return None
    if n_steps == 0:
        tally.zero_draft += 1
        return None
    if depth is not None and acc > n_steps * depth:
        tally.bad(where, f"{accepted_key} {acc} is more than {n_steps} steps x {depth} drafts")
        return None
    return Record("mean", where, mean_accepted=acc / n_steps, n_steps=n_steps, depth=depth)
