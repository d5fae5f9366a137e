"""Width-to-depth schedules in the formats the serving engines read, and specsim's own file.

A schedule is a tuple of ranges ``(first_width, last_width or None for open, depth)``, sorted and
non-overlapping, exactly as a ``schedule:`` policy holds them; a width no range covers decodes
plainly (depth 0). :func:`canonical` rewrites any schedule into its one normal form (ranges
contiguous from width 1, equal neighbours merged, the last range open), so two schedules are the
same when their normal forms are equal.

Engine formats (docs/schedules.md#engine-formats):

vLLM
    ``num_speculative_tokens_per_batch_size``, a list of ``[start_bs, end_bs, K]`` inside the
    ``--speculative-config`` JSON, which also needs ``num_speculative_tokens`` (every K is
    clamped to it). vLLM refuses a list that does not start at 1 or has overlapping ranges; it
    fills a gap with the K before it and keeps the last K for every wider batch.
TensorRT-LLM
    ``draft_len_schedule``, a map from batch-size upper bound to draft length in the LLM-API
    options' ``speculative_config``: ``{4: 4, 8: 2, 32: 1}`` is widths 1-4 -> 4, 5-8 -> 2,
    9-32 -> 1 and wider -> 0. Its validator requires the smallest key to map to
    ``max_draft_len`` and no length above it.
SGLang
    The adaptive speculation config: a slot per batch-size lower bound (string key) with its
    candidate ``speculative_num_steps``; one candidate pins the slot's depth. Widths below the
    smallest key use the smallest slot.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field

from specsim._checks import digits_int, show
from specsim.errors import PolicyError, ScheduleError

ENGINES = ("vllm", "trtllm", "sglang")
SCHEMA = 1
DEFAULT_METHOD = {"vllm": "eagle", "trtllm": "Eagle3", "sglang": "EAGLE"}
# What none of the engines can be told, whatever the schedule.
COMMON_LIMITS = (
    "one depth for the whole batch: per-sequence depths (specsim's sequence policy) cannot be expressed",
    "the engine does not read energy or the cost table: the depths stay what was tuned here; tune again "
    "when the traffic, the model or the box changes",
)


@dataclass(frozen=True)
class EngineConfig:
    """A schedule written for one engine.

    Attributes
    ----------
    engine : str
        ``vllm``, ``trtllm`` or ``sglang``.
    text : str
        The file's content (JSON or YAML), ending in a newline.
    notes : tuple of str
        What the engine cannot express or how it reads the file differently from specsim.
    usage : str
        How to hand the file to the engine.
    """

    engine: str
    text: str
    notes: tuple
    usage: str


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


def _deepest(c, engine) -> int:
    deepest = max(k for _, _, k in c)
    if deepest == 0:
        raise ScheduleError(f"{policy_text(c)} never speculates: serve without speculative decoding instead of "
                            f"writing a {engine} schedule")
    return deepest


# -- export -----------------------------------------------------------------------------------------

def export(engine: str, ranges, *, method=None, max_batch=None, draft_model=None) -> EngineConfig:
    """Write ``ranges`` in ``engine``'s format (``vllm``, ``trtllm`` or ``sglang``).

    Parameters
    ----------
    method : str, optional
        The speculative method the engine names (default :data:`DEFAULT_METHOD`).
    max_batch : int, optional
        The serve's largest batch: where the format needs a finite last range (vLLM's entries,
        TensorRT-LLM's upper bounds), the open last range ends there.
    draft_model : str, optional
        The drafter's weights (vLLM ``model``, TensorRT-LLM ``speculative_model_dir``).

    Raises
    ------
    ScheduleError
        The engine cannot represent the schedule (the message says why and what would do).
    """
    from specsim._checks import MAX_WIDTH, int_problem, show

    if not isinstance(engine, str) or engine not in ENGINES:
        raise ScheduleError(f"unknown engine {show(engine)}: use one of {', '.join(ENGINES)}")
    problem = max_batch is not None and int_problem(max_batch, "max_batch", 1, MAX_WIDTH)
    if problem:
        raise ScheduleError(problem)
    c = canonical(ranges)
    method = method or DEFAULT_METHOD[engine]
    return {"vllm": _export_vllm, "trtllm": _export_trtllm, "sglang": _export_sglang}[engine](
        c, method, max_batch, draft_model)


def _export_vllm(c, method, max_batch, draft_model) -> EngineConfig:
    deepest = _deepest(c, "vLLM")
    entries = []
    for lo, hi, k in c:
        # vLLM keeps the last range's K for every wider batch, so any finite end is exact.
        entries.append([lo, hi if hi is not None else max(lo, max_batch or lo), k])
    cfg = {"method": method}
    if draft_model:
        cfg["model"] = draft_model
    cfg["num_speculative_tokens"] = deepest
    cfg["num_speculative_tokens_per_batch_size"] = entries
    line = json.dumps(cfg, separators=(", ", ": "))
    notes = list(COMMON_LIMITS) + [
        f"batch sizes above {entries[-1][1]} keep depth {entries[-1][2]} (vLLM extends the last range)",
        "dynamic depth is not available with data parallelism in vLLM",
    ]
    if not draft_model:
        notes.append(f"method {method!r}: add \"model\" (the drafter's weights) for a method that has one")
    return EngineConfig("vllm", line + "\n", tuple(notes), f"vllm serve ... --speculative-config '{line}'")


def _export_trtllm(c, method, max_batch, draft_model) -> EngineConfig:
    deepest = _deepest(c, "TensorRT-LLM")
    if c[0][2] != deepest:
        raise ScheduleError(
            f"{policy_text(c)}: TensorRT-LLM requires the smallest batch-size key to map to max_draft_len (the "
            f"deepest length), but this schedule gives widths {span(c[0])} depth {c[0][2]}, below its deepest "
            f"{deepest}; vLLM and SGLang can take it as it is")
    schedule, notes = {}, list(COMMON_LIMITS)
    for lo, hi, k in c:
        if hi is None:
            if k == 0:
                break  # wider than the last key is depth 0 already
            if max_batch is None:
                raise ScheduleError(
                    f"{policy_text(c)}: the last range {span((lo, hi, k))} speculates (depth {k}) but TensorRT-LLM "
                    "plain-decodes above its last key; give the serve's largest batch (--max-batch) to end it there")
            hi = max(lo, max_batch)
            notes.append(f"batch sizes above {hi} plain-decode in TensorRT-LLM: keep max_batch_size <= {hi}")
        schedule[hi] = k
    notes += ["draft_len_schedule needs a speculative mode with dynamic draft length (PyTorch backend); "
              "max_concurrency must stay unset (the two are exclusive)"]
    lines = ["# TensorRT-LLM LLM-API options written by specsim (docs/schedules.md):",
             "# trtllm-serve MODEL --extra_llm_api_options THIS.yaml, or LLM(..., **options).",
             f"# Schedule: {policy_text(c)}"]
    lines += [f"# Note: {n}" for n in notes]
    lines += ["speculative_config:", f"  decoding_type: {_yaml_scalar(method)}", f"  max_draft_len: {deepest}"]
    if draft_model:
        lines.append(f"  speculative_model_dir: {_yaml_scalar(draft_model)}")
    lines.append("  draft_len_schedule:")
    lines += [f"    {bound}: {k}" for bound, k in schedule.items()]
    return EngineConfig("trtllm", "\n".join(lines) + "\n", tuple(notes),
                        "trtllm-serve MODEL --extra_llm_api_options FILE")


def _yaml_scalar(text) -> str:
    text = str(text)
    if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_./-]*", text) and text.lower() not in ("true", "false", "null", "yes", "no"):
        return text
    return json.dumps(text)


def _export_sglang(c, method, max_batch, draft_model) -> EngineConfig:
    deepest = _deepest(c, "SGLang")
    cfg = {str(lo): {"candidate_steps": [k]} for lo, _, k in c}
    notes = list(COMMON_LIMITS) + [
        "SGLang rounds a batch up to its next CUDA-graph capture size before choosing the slot: a boundary "
        "between capture sizes acts at the next one (see --cuda-graph-bs)",
        f"adaptive speculation runs only with EAGLE or EAGLE3 ({method}), topk 1 and no attention data parallelism",
        "one candidate per slot pins its depth: SGLang's acceptance-driven controller has nothing to choose",
    ]
    usage = (f"python -m sglang.launch_server ... --speculative-algorithm {method} --speculative-eagle-topk 1 "
             f"--speculative-num-steps {deepest} --speculative-adaptive --speculative-adaptive-config FILE")
    text = "{\n" + ",\n".join(f"  {json.dumps(k)}: {json.dumps(v)}" for k, v in cfg.items()) + "\n}\n"
    return EngineConfig("sglang", text, tuple(notes), usage)


# -- import -----------------------------------------------------------------------------------------

def engine_file(text):
    """``(engine, path)`` of an ``ENGINE:FILE`` policy (``vllm:``, ``trtllm:``, ``sglang:``), or None
    when ``text`` is not one; the path is ``""`` when the file is missing from the text."""
    head, sep, path = str(text).strip().partition(":")
    if not sep or head.strip().lower() not in ENGINES:
        return None
    return head.strip().lower(), path.strip()


def engine_schedule(text):
    """The ranges of an ``ENGINE:FILE`` policy, or None when ``text`` is not one (the policy
    parser's hook)."""
    named = engine_file(text)
    if named is None:
        return None
    engine, path = named
    if not path:
        raise PolicyError(f"policy {text!r} needs a file: {engine}:FILE")
    return import_file(engine, path)


def import_file(engine: str, path) -> tuple:
    """Read an engine's config file and return its schedule as ``schedule:`` ranges (canonical)."""
    from specsim._io import decode_text, read_input

    if engine not in ENGINES:
        raise ScheduleError(f"unknown engine {engine!r}: use one of {', '.join(ENGINES)}")
    what = f"a {engine} config"
    text = decode_text(read_input(path, what, PolicyError), what, str(path), PolicyError)
    return import_text(engine, text, str(path))


def import_text(engine: str, text: str, source: str = "<text>") -> tuple:
    """:func:`import_file` on text already read."""
    parse = {"vllm": _parse_vllm, "trtllm": _parse_trtllm, "sglang": _parse_sglang}[engine]
    return canonical(parse(text, source))


def _json(text, source, engine):
    from specsim._io import loads_json

    return loads_json(text, f"a {engine} config", source, PolicyError)


def _whole(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _parse_vllm(text, source):
    doc = _json(text, source, "vLLM")
    if isinstance(doc, dict) and isinstance(doc.get("speculative_config"), dict):
        doc = doc["speculative_config"]
    if isinstance(doc, list):
        entries, nst = doc, None
    elif isinstance(doc, dict):
        entries, nst = doc.get("num_speculative_tokens_per_batch_size"), doc.get("num_speculative_tokens")
    else:
        raise PolicyError(f"{source}: expected the --speculative-config JSON object (or its "
                          "num_speculative_tokens_per_batch_size list)")
    if nst is not None and (not _whole(nst) or nst < (1 if entries is not None else 0)):
        raise PolicyError(f"{source}: num_speculative_tokens must be a whole number > 0, got {nst!r}")
    if entries is None:
        if nst is None:
            raise PolicyError(f"{source}: neither num_speculative_tokens_per_batch_size nor num_speculative_tokens")
        return ((1, None, nst),)
    if not isinstance(entries, list) or not entries:
        raise PolicyError(f"{source}: num_speculative_tokens_per_batch_size must be a non-empty list")
    parsed = []
    for e in entries:
        if isinstance(e, list) and len(e) == 5:
            raise PolicyError(f"{source}: entry {e} depends on the context length; specsim's schedules depend on "
                              "the batch width alone (use 3-item [start_bs, end_bs, K] entries)")
        if not isinstance(e, list) or len(e) != 3 or not all(_whole(v) for v in e):
            raise PolicyError(f"{source}: entry {e!r} is not [start_bs, end_bs, K] of whole numbers")
        lo, hi, k = e
        if lo <= 0 or hi <= 0 or lo > hi or k < 0:
            raise PolicyError(f"{source}: entry {e}: vLLM needs 0 < start_bs <= end_bs and K >= 0")
        parsed.append((lo, hi, k))
    parsed.sort()
    prev = 0
    for lo, hi, _ in parsed:
        if lo <= prev:
            raise PolicyError(f"{source}: batch-size ranges overlap at {lo} (vLLM refuses overlapping ranges)")
        prev = hi
    if parsed[0][0] != 1:
        raise PolicyError(f"{source}: the first batch-size range starts at {parsed[0][0]}; vLLM requires it to "
                          "start at 1")
    clamp = (lambda k: k) if nst is None else (lambda k: min(k, nst))  # noqa: E731
    # vLLM's lookup: a gap keeps the K before it, the last K covers every wider batch.
    out = []
    for i, (lo, hi, k) in enumerate(parsed):
        end = parsed[i + 1][0] - 1 if i + 1 < len(parsed) else None
        out.append((lo, end, clamp(k)))
    return tuple(out)


def _parse_trtllm(text, source):
    doc = read_yaml(text, source)
    if not isinstance(doc, dict):
        raise PolicyError(f"{source}: expected LLM-API options (a mapping with speculative_config)")
    sc = doc.get("speculative_config", doc)
    if not isinstance(sc, dict):
        raise PolicyError(f"{source}: speculative_config is not a mapping")
    sched, mdl, mc = sc.get("draft_len_schedule"), sc.get("max_draft_len"), sc.get("max_concurrency")
    if mdl is not None and (not _whole(mdl) or mdl < 0):
        raise PolicyError(f"{source}: max_draft_len must be a whole number >= 0, got {mdl!r}")
    if sched is not None and mc is not None:
        raise PolicyError(f"{source}: max_concurrency and draft_len_schedule are exclusive in TensorRT-LLM")
    if sched is None:
        if mdl is None:
            raise PolicyError(f"{source}: no draft_len_schedule and no max_draft_len in speculative_config")
        if mc is not None:
            if not _whole(mc) or mc < 1:
                raise PolicyError(f"{source}: max_concurrency must be a whole number >= 1, got {mc!r}")
            return ((1, mc, mdl),)
        return ((1, None, mdl),)
    if not isinstance(sched, dict) or not sched:
        raise PolicyError(f"{source}: draft_len_schedule must be a non-empty map of batch size -> draft length")
    items = []
    for key, v in sched.items():
        b = digits_int(key) if isinstance(key, str) else key
        b = key if b is None else b
        if not _whole(b) or b < 1 or not _whole(v) or v < 0:
            raise PolicyError(f"{source}: draft_len_schedule entry {key!r}: {v!r} needs a batch size >= 1 and a "
                              "draft length >= 0")
        items.append((b, v))
    items.sort()
    if mdl is not None:
        if items[0][1] != mdl:
            raise PolicyError(f"{source}: draft_len_schedule[{items[0][0]}] = {items[0][1]} must equal "
                              f"max_draft_len = {mdl} (TensorRT-LLM's rule for the smallest key)")
        if any(v > mdl for _, v in items):
            raise PolicyError(f"{source}: a draft length in draft_len_schedule exceeds max_draft_len = {mdl}")
    out, lo = [], 1
    for b, v in items:
        if b < lo:  # a duplicate bound after int conversion
            raise PolicyError(f"{source}: batch size {b} appears twice in draft_len_schedule")
        out.append((lo, b, v))
        lo = b + 1
    return tuple(out)


def _parse_sglang(text, source):
    doc = _json(text, source, "SGLang adaptive")
    if not isinstance(doc, dict):
        raise PolicyError(f"{source}: an SGLang adaptive config is a JSON object of batch-size slots")
    slots = []
    for key, entry in doc.items():
        if digits_int(key) is None:
            if key.strip().isdigit():  # digits of another script, or more than 19 of them
                raise PolicyError(f"{source}: batch-size slot {show(key)} is not a plain decimal batch size")
            continue  # controller settings (strategy, ema_alpha, ...), as SGLang skips them
        steps = entry.get("candidate_steps") if isinstance(entry, dict) else entry
        if not isinstance(steps, list) or not steps or not all(_whole(s) and s >= 0 for s in steps):
            raise PolicyError(f"{source}: slot {key!r}: candidate steps must be a non-empty list of whole "
                              f"numbers >= 0, got {steps!r}")
        if len(set(steps)) != 1:
            raise PolicyError(f"{source}: slot {key!r} lists candidates {sorted(set(steps))}; SGLang chooses among "
                              "them at run time from its acceptance average, which specsim does not simulate: "
                              "give each slot one candidate to pin its depth")
        slots.append((digits_int(key), steps[0]))
    if not slots:
        raise PolicyError(f"{source}: no batch-size slot (a key like \"1\" with its candidate steps)")
    slots.sort()
    out = []
    for i, (lo, k) in enumerate(slots):
        # Widths below the smallest key use the smallest slot.
        first = 1 if i == 0 else max(lo, 1)
        end = slots[i + 1][0] - 1 if i + 1 < len(slots) else None
        if end is not None and end < first:
            continue  # a slot no batch size reaches (key 0 beside key 1)
        out.append((first, end, k))
    return tuple(out)


# -- a small YAML reader for LLM-API options ---------------------------------------------------------

def read_yaml(text: str, source: str):
    """Parse LLM-API options: with PyYAML when it is installed, else the block-mapping subset
    those files use (nested ``key: value`` mappings, ``{a: b}`` flow maps, comments)."""
    try:
        import yaml
    except ImportError:
        return _yaml_subset(text, source)
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise PolicyError(f"{source}: not valid YAML: {e}") from None


def _yaml_value(text):
    t = text.strip()
    if t.startswith("{") and t.endswith("}"):
        out = {}
        for part in t[1:-1].split(","):
            if part.strip():
                k, sep, v = part.partition(":")
                if not sep:
                    raise ValueError(f"{part.strip()!r} in a flow map is not KEY: VALUE")
                out[_yaml_value(k)] = _yaml_value(v)
        return out
    if len(t) >= 2 and t[0] == t[-1] and t[0] in "\"'":
        return t[1:-1]
    if re.fullmatch(r"[-+]?[0-9]{1,19}", t):  # ASCII digits: \d also takes other scripts' digits
        return int(t)
    low = t.lower()
    if low in ("true", "false"):
        return low == "true"
    if low in ("null", "~", ""):
        return None
    try:
        return float(t)
    except ValueError:
        return t


def _yaml_subset(text, source):
    root: dict = {}
    stack = [(-1, root)]
    for number, raw in enumerate(text.splitlines(), 1):
        line = re.sub(r"(^|\s)#.*$", "", raw).rstrip()
        if not line.strip() or line.strip() == "---":
            continue
        indent = len(line) - len(line.lstrip(" "))
        body = line.strip()
        while stack[-1][0] >= indent:
            stack.pop()
        parent = stack[-1][1]
        if body.startswith("- ") or body == "-" or not isinstance(parent, dict):
            # Block lists appear elsewhere in an options file; nothing here reads them.
            stack.append((indent, []))
            continue
        key, sep, value = body.partition(":")
        if not sep:
            raise PolicyError(f"{source}: line {number}: {body!r} is not KEY: VALUE")
        try:
            k = _yaml_value(key)
            if value.strip():
                parent[k] = _yaml_value(value)
            else:
                parent[k] = {}
                stack.append((indent, parent[k]))
        except ValueError as e:
            raise PolicyError(f"{source}: line {number}: {e}") from None
    return root


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
    mb = doc.get("max_batch")
    if mb is not None and (not _whole(mb) or mb < 1):
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
