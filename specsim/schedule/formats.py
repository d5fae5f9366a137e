"""Width-to-depth schedules in the formats the serving engines read, and reading them back.

Schedules are the values of :mod:`specsim.policy.schedule`; this module writes them as each engine
reads them and reads an engine's file back into one (the ``ENGINE:FILE`` policies).

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

import json
import re
from dataclasses import dataclass

from specsim.errors import PolicyError, ScheduleError
from specsim.policy.policy import Policy, parse_policy
from specsim.policy.schedule import canonical, policy_text, span

ENGINES = ("vllm", "trtllm", "sglang")
# Most current drafters are EAGLE-3 (vLLM's "eagle" means EAGLE-1); --method names another.
DEFAULT_METHOD = {"vllm": "eagle3", "trtllm": "Eagle3", "sglang": "EAGLE3"}
VLLM_PER_BATCH_METHODS = ("ngram", "eagle", "eagle3", "mtp", "draft_model", "dflash")
"""The methods whose per-batch depth vLLM honours (others fall back to the static K, warning)."""
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
    given = method
    method = method or DEFAULT_METHOD[engine]
    cfg = {"vllm": _export_vllm, "trtllm": _export_trtllm, "sglang": _export_sglang}[engine](
        c, method, max_batch, draft_model)
    if given is None:
        cfg = EngineConfig(cfg.engine, cfg.text, cfg.notes + (
            f"method {method!r} is the default (most current drafters are EAGLE-3): give --method for another",),
            cfg.usage)
    return cfg


def constant_depth(c):
    """The one depth a canonical schedule gives every width, or None when it varies (a schedule
    that plain-decodes above some width is not constant)."""
    return c[0][2] if len(c) == 1 else None


CONSTANT_NOTE = ("the schedule is one depth at every width: written as the engine's plain static setting, since a "
                 "per-batch schedule costs CUDA-graph coverage even when constant")


def _export_vllm(c, method, max_batch, draft_model) -> EngineConfig:
    deepest = _deepest(c, "vLLM")
    cfg = {"method": method}
    if draft_model:
        cfg["model"] = draft_model
    cfg["num_speculative_tokens"] = deepest
    notes = list(COMMON_LIMITS)
    if constant_depth(c) is not None:
        notes.append(CONSTANT_NOTE + " (vLLM: any num_speculative_tokens_per_batch_size list turns FULL CUDA graphs "
                                     "into PIECEWISE, about -14% single-stream in vLLM issue #49548)")
    else:
        entries = []
        for lo, hi, k in c:
            # vLLM keeps the last range's K for every wider batch, so any finite end is exact.
            entries.append([lo, hi if hi is not None else max(lo, max_batch or lo), k])
        cfg["num_speculative_tokens_per_batch_size"] = entries
        notes += [
            f"batch sizes above {entries[-1][1]} keep depth {entries[-1][2]} (vLLM extends the last range)",
            "num_speculative_tokens_per_batch_size needs vLLM of about v0.24 or later: older releases refuse the "
            "unknown key at start-up",
            f"vLLM honours a per-batch depth only for methods {', '.join(VLLM_PER_BATCH_METHODS)} on the V1 runner, "
            "and not with data parallelism: otherwise it serves num_speculative_tokens throughout, with a warning"
            + ("" if method in VLLM_PER_BATCH_METHODS else f" (method {method!r} is not among them)"),
            "vLLM's batch size counts every scheduled request, prefill chunks included, where specsim's width counts "
            "decoding sequences: under chunked prefill the engine picks the depth of a wider batch",
            "any per-batch list turns vLLM's FULL CUDA graphs into PIECEWISE (about -14% single-stream in vLLM issue "
            "#49548): the schedule must win more than that to pay",
        ]
    line = json.dumps(cfg, separators=(", ", ": "))
    if not draft_model:
        notes.append(f"method {method!r}: add \"model\" (the drafter's weights) for a method that has one")
    return EngineConfig("vllm", line + "\n", tuple(notes), f"vllm serve ... --speculative-config '{line}'")


TRTLLM_FLOOR_MODES = ("DraftTarget", "PARD", "SA")
"""TensorRT-LLM modes where open PR #16888 floors a depth-0 tier at 1 (tree modes too; one-model
MTP rejects 0)."""


def _export_trtllm(c, method, max_batch, draft_model) -> EngineConfig:
    deepest = _deepest(c, "TensorRT-LLM")
    if constant_depth(c) is not None:
        notes = list(COMMON_LIMITS) + [CONSTANT_NOTE + " (TensorRT-LLM: max_draft_len without draft_len_schedule)"]
        lines = ["# TensorRT-LLM LLM-API options written by specsim (docs/schedules.md):",
                 "# trtllm-serve MODEL --extra_llm_api_options THIS.yaml, or LLM(..., **options).",
                 f"# Schedule: {policy_text(c)}"]
        lines += [f"# Note: {n}" for n in notes]
        lines += ["speculative_config:", f"  decoding_type: {_yaml_scalar(method)}", f"  max_draft_len: {deepest}"]
        if draft_model:
            lines.append(f"  speculative_model_dir: {_yaml_scalar(draft_model)}")
        return EngineConfig("trtllm", "\n".join(lines) + "\n", tuple(notes),
                            "trtllm-serve MODEL --extra_llm_api_options FILE")
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
              "max_concurrency must stay unset (the two are exclusive)",
              "keys are upper bounds in builds since PR #10860 (about March 2026); builds from PR #8194 until then "
              "read them as lower bounds and give other depths: serve a current build",
              "a dynamic draft length costs CUDA-graph coverage (graphs per draft length): the schedule must win "
              "more than that to pay"]
    if any(k == 0 for k in schedule.values()) and (method in TRTLLM_FLOOR_MODES or method.upper() == "MTP"):
        notes.append(f"decoding_type {method}: a depth-0 tier is floored at 1 (open PR #16888; one-model MTP "
                     "rejects 0): the engine drafts where this schedule plain-decodes")
    elif any(k == 0 for k in schedule.values()):
        notes.append("a depth-0 tier is floored at 1 in DraftTarget, PARD, SA and tree modes (open PR #16888) and "
                     "rejected by one-model MTP")
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
    flags = (f"--speculative-algorithm {method} --speculative-eagle-topk 1 --speculative-num-steps {deepest} "
             f"--speculative-num-draft-tokens {deepest + 1}")
    if constant_depth(c) is not None:
        notes = list(COMMON_LIMITS) + [CONSTANT_NOTE + " (SGLang: static --speculative-num-steps, no adaptive "
                                                       "config; this file records the server arguments)"]
        cfg = {"speculative_algorithm": method, "speculative_eagle_topk": 1, "speculative_num_steps": deepest,
               "speculative_num_draft_tokens": deepest + 1}
        if draft_model:
            cfg["speculative_draft_model_path"] = draft_model
        text = "{\n" + ",\n".join(f"  {json.dumps(k)}: {json.dumps(v)}" for k, v in cfg.items()) + "\n}\n"
        return EngineConfig("sglang", text, tuple(notes), f"python -m sglang.launch_server ... {flags}")
    cfg = {str(lo): {"candidate_steps": [k]} for lo, _, k in c}
    notes = list(COMMON_LIMITS) + [
        "SGLang rounds a batch up to its next CUDA-graph capture size before choosing the slot: a boundary "
        "between capture sizes acts at the next one (see --cuda-graph-bs)",
        f"adaptive speculation runs only with EAGLE or EAGLE3 ({method}), topk 1, no attention data parallelism, no "
        "multi-layer EAGLE and no two-batch overlap; otherwise SGLang serves the static steps, with a warning",
        "one candidate per slot pins its depth: SGLang's acceptance-driven controller has nothing to choose",
        "adaptive mode captures CUDA graphs for every candidate depth: the schedule must win more than that costs",
    ]
    usage = f"python -m sglang.launch_server ... {flags} --speculative-adaptive --speculative-adaptive-config FILE"
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
    """The ranges of an ``ENGINE:FILE`` policy, or None when ``text`` is not one."""
    named = engine_file(text)
    if named is None:
        return None
    engine, path = named
    if not path:
        raise PolicyError(f"policy {text!r} needs a file: {engine}:FILE")
    return import_file(engine, path)


def read_policy(text) -> Policy:
    """A policy where it enters from a user: an ``ENGINE:FILE`` policy (``vllm:v.json``) is read
    into the ``schedule`` the engine's file sets (docs/schedules.md#reading-engine-files-back);
    any other text is :func:`~specsim.policy.policy.parse_policy`'s; a :class:`Policy` passes."""
    if isinstance(text, Policy):
        return text
    ranges = engine_schedule(text)
    if ranges is not None:
        return Policy("schedule", ranges=ranges)
    return parse_policy(text)


TRTLLM_KEYS = ("upper", "lower")
"""How a TensorRT-LLM build reads ``draft_len_schedule`` keys: upper bounds (since PR #10860,
about March 2026) or lower bounds with key 1 required (from PR #8194, October 2025, until then)."""


def import_file(engine: str, path, trtllm_keys=None) -> tuple:
    """Read an engine's config file and return its schedule as ``schedule:`` ranges (canonical).

    ``trtllm_keys`` (``upper`` or ``lower``, see :data:`TRTLLM_KEYS`) says how the build that
    serves a TensorRT-LLM file reads its keys; None tells it from the file where the file shows
    it (key 1 with a 0 last length is a lower-bound file), else upper bounds."""
    from specsim._io import decode_text, read_input

    if engine not in ENGINES:
        raise ScheduleError(f"unknown engine {engine!r}: use one of {', '.join(ENGINES)}")
    what = f"a {engine} config"
    text = decode_text(read_input(path, what, PolicyError), what, str(path), PolicyError)
    return import_text(engine, text, str(path), trtllm_keys)


def import_text(engine: str, text: str, source: str = "<text>", trtllm_keys=None) -> tuple:
    """:func:`import_file` on text already read."""
    if trtllm_keys is not None and trtllm_keys not in TRTLLM_KEYS:
        raise ScheduleError(f"TensorRT-LLM keys {trtllm_keys!r}: one of {', '.join(TRTLLM_KEYS)}")
    if engine == "trtllm":
        return canonical(_parse_trtllm(text, source, trtllm_keys))
    parse = {"vllm": _parse_vllm, "sglang": _parse_sglang}[engine]
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


def _parse_trtllm(text, source, keys=None):
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
        b = int(key) if isinstance(key, str) and key.strip().isdigit() else key
        if not _whole(b) or b < 1 or not _whole(v) or v < 0:
            raise PolicyError(f"{source}: draft_len_schedule entry {key!r}: {v!r} needs a batch size >= 1 and a "
                              "draft length >= 0")
        items.append((b, v))
    items.sort()
    if keys is None:
        # Key 1 with a 0 last length: meaningless as upper bounds (wider is 0 anyway), the shape of a
        # lower-bound file (key 1 required, the last key's length covering every wider batch).
        keys = "lower" if items[0][0] == 1 and len(items) > 1 and items[-1][1] == 0 else "upper"
    if keys == "lower":
        if items[0][0] != 1:
            raise PolicyError(f"{source}: lower-bound draft_len_schedule keys need key 1 (builds from PR #8194 "
                              "until PR #10860 require it)")
        if mdl is not None and any(v > mdl for _, v in items):
            raise PolicyError(f"{source}: a draft length in draft_len_schedule exceeds max_draft_len = {mdl}")
        return tuple((b, items[i + 1][0] - 1 if i + 1 < len(items) else None, v) for i, (b, v) in enumerate(items))
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
    if not any(k.isdigit() for k in doc) and _whole(doc.get("speculative_num_steps")):
        # static steps (what a constant schedule exports): the server arguments
        k = doc["speculative_num_steps"]
        if k < 0:
            raise PolicyError(f"{source}: speculative_num_steps must be >= 0, got {k}")
        return ((1, None, k),)
    for key, entry in doc.items():
        if not key.isdigit():
            continue  # controller settings (strategy, ema_alpha, ...), as SGLang skips them
        if not isinstance(entry, dict):
            raise PolicyError(f"{source}: slot {key!r} is {entry!r}; SGLang's loader needs "
                              f"{{\"candidate_steps\": [...]}} (a bare list crashes it with AttributeError)")
        steps = entry.get("candidate_steps")
        if not isinstance(steps, list) or not steps or not all(_whole(s) and s >= 0 for s in steps):
            raise PolicyError(f"{source}: slot {key!r}: candidate steps must be a non-empty list of whole "
                              f"numbers >= 0, got {steps!r}")
        if len(set(steps)) != 1:
            raise PolicyError(f"{source}: slot {key!r} lists candidates {sorted(set(steps))}; SGLang chooses among "
                              "them at run time from its acceptance average, which specsim does not simulate: "
                              "give each slot one candidate to pin its depth")
        slots.append((int(key), steps[0]))
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
    if re.fullmatch(r"[-+]?\d+", t):
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
