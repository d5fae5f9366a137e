"""The real serving engines, one module each (:mod:`~specsim.interop.vllm`,
:mod:`~specsim.interop.sglang`, :mod:`~specsim.interop.trtllm`): what they print and export about
speculative decoding (``docs/telemetry.md``), and the settings they read.

This registry names every telemetry format (:data:`TELEMETRY`), tells a file's format from its
content (:func:`detect_telemetry_format`) and reads files of one format into records in serve order
(:func:`read_telemetry`); :func:`specsim.calibration.from_telemetry.identify` turns records into what
they identify.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from specsim.errors import CalibrationError, PolicyError, ScheduleError
from specsim.interop import sglang, trtllm, vllm
from specsim.interop._config import EngineConfig
from specsim.interop._records import Format, Record, Tally, read_text
from specsim.policy.policy import Policy, parse_policy
from specsim.policy.schedule import canonical
from specsim.tree.settings import sglang_settings, trtllm_settings, vllm_settings
from specsim._checks import MAX_WIDTH, int_problem, name_problem, show
from specsim._io import decode_text, read_input

ENGINES = {"vllm": vllm, "trtllm": trtllm, "sglang": sglang}
"""The engines specsim knows, each one module holding its telemetry readers, its config export
(``export_config``, ``DEFAULT_METHOD``) and import (``parse_config``)."""

TELEMETRY = {f.name: f for module in ENGINES.values() for f in module.TELEMETRY}
"""Every telemetry format by name (``--from``)."""

FORMATS = {name: f.description for name, f in TELEMETRY.items()}

# Detection tries formats in this order, most specific marker first: the first format whose
# marker a file holds.
_DETECT_ORDER = ("vllm-prometheus", "vllm-log", "vllm-bench", "sglang-log", "trtllm-iteration", "trtllm-request",
                 "vllm-request", "sglang-server-info", "sglang-request")
_MARKERS = tuple((name, TELEMETRY[name].markers) for name in _DETECT_ORDER)


def detect_telemetry_format(text: str, source: str = "<text>") -> str:
    """The telemetry format of a file's text, told from markers each format always carries."""
    if "sglang:spec_accept" in text and "Decode batch" not in text:
        raise CalibrationError(
            f"{source}: SGLang's sglang:spec_accept_length / spec_accept_rate are gauges reset every log interval, "
            "so a scrape holds one interval's mean and loses the rest; import the `Decode batch` log lines or the "
            "per-request meta_info instead")
    for name, markers in _MARKERS:
        if any(m in text for m in markers):
            return name
    raise CalibrationError(
        f"{source}: no speculative-decoding telemetry recognised (none of the formats' markers, e.g. "
        "`SpecDecoding metrics:`, `vllm:spec_decode_`, `Decode batch`, `specDecodingStats`, appears); "
        f"name the format with --from ({', '.join(FORMATS)})"
    )


def read_telemetry(paths, fmt=None, strict: bool = False, decode_log_interval=None):
    """Read telemetry files of one format into records in serve order.

    Parameters
    ----------
    paths : sequence of path
        Files in the order they were written (scrapes: earliest first).
    fmt : str, optional
        One of :data:`FORMATS`; detected from each file's content when None (all must agree).
    strict : bool
        Refuse any line or block that looks like the format but cannot be read (listing them),
        instead of skipping and counting it.
    decode_log_interval : int, optional
        SGLang's ``--decode-log-interval`` the serve ran (decode steps per ``Decode batch``
        line; default 40).

    Returns
    -------
    (str, list of Record, Tally)
        The format, the records and what was read.
    """
    if fmt is not None and fmt not in FORMATS:
        raise CalibrationError(f"unknown telemetry format {fmt!r}: one of {', '.join(FORMATS)}")
    texts, names = [], []
    for p in paths:
        text = read_text(p)
        found = fmt or detect_telemetry_format(text, str(p))
        if fmt is None and names and found != texts[0][1]:
            raise CalibrationError(f"{p} looks like {found} but {names[0]} like {texts[0][1]}: import one format at a "
                                   "time (or name it with --from)")
        texts.append((text, found))
        names.append(str(p))
    fmt = fmt or texts[0][1]
    if decode_log_interval is not None and decode_log_interval < 1:
        raise CalibrationError(f"--decode-log-interval {decode_log_interval}: SGLang logs every N >= 1 decode steps")
    options = {"decode_log_interval": decode_log_interval or sglang.DECODE_LOG_INTERVAL}
    reader = TELEMETRY[fmt]
    kw = {k: options[k] for k in reader.options}
    if reader.whole:  # one reading of every file together (scrapes: their differences)
        records, tally = reader.parse([t for t, _ in texts], [Path(n).name for n in names], **kw)
    else:
        records, tally = [], Tally()
        for (text, _), name in zip(texts, names):
            recs, t = reader.parse(text, Path(name).name, **kw)
            records += recs
            tally.merge(t)
    tally.records = len(records)
    if strict and tally.garbage:
        raise CalibrationError(f"--strict: {tally.garbage} lines or blocks look like {fmt} but cannot be read",
                               tally.problems[:12] + ([f"... and {tally.garbage - 12} more"] if tally.garbage > 12 else []))
    return fmt, records, tally


# -- schedules in the engines' configs ---------------------------------------------------------------

def per_batch_cost(engine: str) -> float:
    """What serving a per-batch (width-dependent) schedule costs ``engine`` against its plain
    static setting, as a share of its throughput: its module's ``PER_BATCH_COST`` (vLLM's CUDA
    graphs), 0 where none is known."""
    if not isinstance(engine, str) or engine not in ENGINES:
        raise ScheduleError(f"unknown engine {show(engine)}: use one of {', '.join(ENGINES)}")
    return float(getattr(ENGINES[engine], "PER_BATCH_COST", 0.0))


def export_schedule(engine: str, ranges, *, method=None, max_num_seqs=None, draft_model=None) -> EngineConfig:
    """Write ``ranges`` in ``engine``'s format (``vllm``, ``trtllm`` or ``sglang``).

    Parameters
    ----------
    method : str, optional
        The speculative method the engine names (default: the engine module's
        ``DEFAULT_METHOD``, EAGLE-3 for all three; the notes say the default was taken).
    max_num_seqs : int, optional
        The serve's largest batch (vLLM's ``max_num_seqs``): where the format needs a finite last range (vLLM's entries,
        TensorRT-LLM's upper bounds), the open last range ends there.
    draft_model : str, optional
        The drafter's weights (vLLM ``model``, TensorRT-LLM ``speculative_model_dir``).

    Raises
    ------
    ScheduleError
        The engine cannot represent the schedule (the message says why and what would do).
    """
    if not isinstance(engine, str) or engine not in ENGINES:
        raise ScheduleError(f"unknown engine {show(engine)}: use one of {', '.join(ENGINES)}")
    problem = max_num_seqs is not None and int_problem(max_num_seqs, "max_num_seqs", 1, MAX_WIDTH)
    if problem:
        raise ScheduleError(problem)
    for name, value in (("method", method), ("draft_model", draft_model)):
        problem = value is not None and name_problem(value, name)
        if problem:
            raise ScheduleError(problem)
    module = ENGINES[engine]
    cfg = module.export_config(canonical(ranges), method or module.DEFAULT_METHOD, max_num_seqs, draft_model)
    if method is None:
        cfg = EngineConfig(cfg.engine, cfg.text, cfg.notes + (
            f"method {module.DEFAULT_METHOD!r} is the default (most current drafters are EAGLE-3): give --method "
            "for another",), cfg.usage)
    return cfg


# What no engine's tree settings can say, in every tree export's notes.
STATIC_TREE_NOTE = ("{engine} takes one tree setting for every batch size: a tree that changes with the batch "
                    "width (as the planner's does) cannot be expressed")


def export_tree(engine: str, tree, rank_acceptance, *, method=None, draft_model=None, notes=()) -> EngineConfig:
    """Write the draft tree ``tree`` (a :class:`~specsim.tree.Tree`) as ``engine``'s settings:
    vLLM's ``speculative_token_tree`` (any tree, exactly), SGLang's EAGLE flags as server
    arguments (JSON, as ``sglang:FILE`` reads them back) and TensorRT-LLM's dynamic-tree fields
    (LLM-API YAML, as ``trtllm:FILE`` reads them back), both from ``specsim.tree.settings``: the
    top-k whose tree is ``tree`` for the calibration's ``rank_acceptance``, else the closest,
    the notes saying what differs. Every engine serves that one setting at every batch width;
    ``notes`` (what the caller's tree changes with width, say) go first.

    Raises
    ------
    ScheduleError
        An unknown engine, a bad ``method`` or ``draft_model``, plain decoding (no tree), or a
        tree no setting of the engine drafts (the message says why).
    """
    if not isinstance(engine, str) or engine not in ENGINES:
        raise ScheduleError(f"unknown engine {show(engine)}: use one of {', '.join(ENGINES)}")
    for name, value in (("method", method), ("draft_model", draft_model)):
        problem = value is not None and name_problem(value, name)
        if problem:
            raise ScheduleError(problem)
    if tree.nodes == 0:
        raise ScheduleError("a tree of 0 nodes is plain decoding: there is no tree to write")
    module = ENGINES[engine]
    method = method or module.DEFAULT_METHOD
    if engine == "vllm":
        setting = vllm_settings(tree)
    else:
        build = sglang_settings if engine == "sglang" else trtllm_settings
        setting = build(tree, rank_acceptance)
    if not setting.fields:
        raise ScheduleError(f"{engine}: no setting drafts a tree of {tree.nodes} nodes: {setting.differs}")
    out = [*notes, STATIC_TREE_NOTE.format(engine=_ENGINE_NAMES[engine])]
    out += [n for n in (setting.differs, setting.note) if n]
    fields = dict(setting.fields)
    if engine == "vllm":
        cfg = {"method": method, **({"model": draft_model} if draft_model else {}), **fields}
        line = json.dumps(cfg, separators=(", ", ": "))
        if not draft_model:
            out.append(f"method {method!r}: add \"model\" (the drafter's weights) for a method that has one")
        return EngineConfig("vllm", line + "\n", tuple(out), f"vllm serve MODEL --speculative-config '{line}'")
    if engine == "sglang":
        cfg = {"speculative_algorithm": method, **{f"speculative_{k}": v for k, v in fields.items()}}
        if draft_model:
            cfg["speculative_draft_model_path"] = draft_model
        flags = " ".join(f"--{k.replace('_', '-')} {v}" for k, v in cfg.items())
        text = "{\n" + ",\n".join(f"  {json.dumps(k)}: {json.dumps(v)}" for k, v in cfg.items()) + "\n}\n"
        return EngineConfig("sglang", text, tuple(out), f"python -m sglang.launch_server ... {flags}")
    extra = [f"  {k}: {'true' if v is True else 'false' if v is False else v}" for k, v in fields.items()
             if k != "max_draft_len"]
    return trtllm.yaml_config("docs/schedules.md#draft-trees", f"Tree: {tree.nodes} nodes, depth {tree.depth}", out,
                              method, fields["max_draft_len"], draft_model, extra)


_ENGINE_NAMES = {"vllm": "vLLM", "sglang": "SGLang", "trtllm": "TensorRT-LLM"}


_SGLANG_GRAPHS = re.compile(r"sglang\[(.*)\]")


def engine_file(text):
    """``(engine, path)`` of an ``ENGINE:FILE`` policy (``vllm:``, ``trtllm:``, ``sglang:``,
    ``sglang[B1,..]:``), or None when ``text`` is not one; the path is ``""`` when the file is
    missing from the text."""
    head, sep, path = str(text).strip().partition(":")
    head = head.strip().lower()
    if _SGLANG_GRAPHS.fullmatch(head):
        head = "sglang"
    if not sep or head not in ENGINES:
        return None
    return head, path.strip()


def engine_tree(text):
    """The ``tree`` policy of an ``sglang:FILE`` whose server settings state an EAGLE tree
    (``--speculative-eagle-topk`` > 1, with ``--speculative-num-steps`` and
    ``--speculative-num-draft-tokens``, as JSON server arguments or a launch line), or None:
    SGLang verifies that tree every step, built from the calibration's ``[tree]`` table as the
    engine builds it from its draft scores (``specsim.tree.tree_from_sglang``). Likewise a
    ``vllm:FILE`` with a ``speculative_token_tree``: that tree, drafted and verified, but a
    branching one accepted as vLLM's release accepts it, as the chain of its nodes in list order;
    and a ``trtllm:FILE`` that turns on ``use_dynamic_tree``: the tree TensorRT-LLM's dynamic tree
    builds on scores that follow the table (``specsim.tree.tree_from_trtllm``), every step (the
    engine's changes with each step's scores: its expected shape)."""
    named = engine_file(text)
    if named is None or not named[1]:
        return None
    engine, path = named
    what = f"a {engine} config"
    content = decode_text(read_input(path, what, PolicyError), what, path, PolicyError)
    if engine == "vllm":
        tree = vllm.token_tree(content, path)
        if tree is None:
            return None
        if tree.is_chain:
            return Policy("tree", nodes=tree.nodes, tree_depth=tree.depth, shape=tree,
                          source=f"vllm:{path} (speculative_token_tree: a chain of {tree.nodes})")
        # vLLM's branching-tree rejection sampler was never merged: its release drafts and verifies
        # the tree but accepts it as the chain of its nodes in list order (docs/simulation.md#draft-trees).
        return Policy("tree", nodes=tree.nodes, tree_depth=tree.depth, shape=tree, settings=("vllm-flattened",),
                      source=f"vllm:{path} (speculative_token_tree of {tree.nodes} nodes, verified as a flattened "
                             "chain, as vLLM's release does)")
    if engine == "trtllm":
        settings = trtllm.dynamic_tree(content, path)
        if settings is None:
            return None
        topk, depth, budget = settings
        return Policy("tree", nodes=budget, tree_depth=depth, settings=("trtllm", topk, depth, budget),
                      source=f"trtllm:{path} (dynamic tree: top-k {topk}, draft length {depth}, {budget} draft tokens; "
                             "simulated as its expected shape)")
    return sglang_tree_policy(content, path)


def sglang_tree_policy(content, path, label=None):
    """The ``tree`` policy of SGLang server settings ``content`` (read from ``path``) that state an
    EAGLE tree, or None where they state a chain; ``label``: the policy's text in reports (default
    ``sglang:PATH (EAGLE tree: ...)``)."""
    settings = sglang.tree_settings(content, path)
    if settings is None:
        return None
    topk, steps, tokens = settings
    # SGLang's adaptive controller refuses top-k > 1 (adaptive_unsupported_reason) and the server
    # serves the static tree with a warning: so does the simulation, and the label says so.
    adaptive = re.search(r"--speculative-adaptive(?![-\w])", content) or re.search(
        r'"speculative_adaptive"\s*:\s*true', content)
    ignored = "; --speculative-adaptive ignored: SGLang adapts only top-k 1" if adaptive else ""
    return Policy("tree", nodes=tokens - 1, tree_depth=steps, settings=("sglang", topk, steps, tokens),
                  source=label or f"sglang:{path} (EAGLE tree: top-k {topk}, {steps} steps, {tokens} draft tokens"
                                  f"{ignored})")


def engine_schedule(text):
    """The ranges of an ``ENGINE:FILE`` policy (``vllm:``, ``trtllm:``, ``sglang:``, and
    ``sglang[1,2,4,8,16]:FILE`` with SGLang's ``--cuda-graph-bs`` capture sizes), or None when
    ``text`` is not one (the policy parser's hook)."""
    named = engine_file(text)
    if named is None:
        return None
    engine, path = named
    if not path:
        raise PolicyError(f"policy {text!r} needs a file: {engine}:FILE")
    ranges = import_file(engine, path)
    m = _SGLANG_GRAPHS.fullmatch(str(text).strip().partition(":")[0].strip().lower())
    return ranges if m is None else sglang.pad_to_graphs(ranges, sglang.cuda_graph_sizes(m.group(1), text))


def read_policy(text) -> Policy:
    """A policy where it enters from a user: an ``ENGINE:FILE`` policy (``vllm:v.json``) is read
    into the ``schedule`` the engine's file sets (docs/schedules.md#reading-engine-files-back),
    ``sglang-adaptive:FILE`` into SGLang's adaptive controller on that config; any other text is :func:`~specsim.policy.policy.parse_policy`'s; a :class:`Policy` passes."""
    if isinstance(text, Policy):
        return text
    adaptive = _ADAPTIVE.fullmatch(str(text).strip().partition(":")[0].strip().lower())
    if adaptive is not None:
        return _adaptive_policy(str(text).strip(), adaptive.group(1))
    tree = engine_tree(text)
    if tree is not None:
        return tree
    ranges = engine_schedule(text)
    if ranges is not None:
        return Policy("schedule", ranges=ranges, gate=engine_gate(text) or ())
    return parse_policy(text)


_ADAPTIVE = re.compile(r"sglang-adaptive(?:\[(.*)\])?")


def policy_file(text):
    """The file a policy text reads (``ENGINE:FILE`` or ``sglang-adaptive:FILE``), or None."""
    head, sep, path = str(text).strip().partition(":")
    if sep and path.strip() and _ADAPTIVE.fullmatch(head.strip().lower()):
        return path.strip()
    named = engine_file(text)
    return named[1] if named is not None and named[1] else None


def _adaptive_policy(raw, graphs) -> Policy:
    """``sglang-adaptive[B1,..]:FILE``: SGLang's adaptive controller on the config FILE sets
    (docs/schedules.md#the-engines-own-adaptation)."""
    _, sep, path = raw.partition(":")
    path = path.strip()
    if not sep or not path:
        raise PolicyError(f"policy {raw!r} needs a file: sglang-adaptive:FILE (SGLang's --speculative-adaptive-config)")
    what = "an SGLang adaptive config"
    cfg = sglang.parse_adaptive(decode_text(read_input(path, what, PolicyError), what, path, PolicyError), path)
    sizes = sglang.cuda_graph_sizes(graphs, raw) if graphs is not None else ()
    return Policy("sglang-adaptive", adaptive=cfg, graphs=sizes, source=path)


def engine_gate(text):
    """The speculation gate ``(window, threshold)`` a ``trtllm:FILE`` policy's config carries
    (``acceptance_window`` and ``acceptance_length_threshold`` in its ``speculative_config``), or
    None (another policy, or a file without both keys)."""
    named = engine_file(text)
    if named is None or named[0] != "trtllm" or not named[1]:
        return None
    what = "a trtllm config"
    body = decode_text(read_input(named[1], what, PolicyError), what, named[1], PolicyError)
    return trtllm.parse_gate(body, named[1])


def import_file(engine: str, path, trtllm_keys=None) -> tuple:
    """Read an engine's config file and return its schedule as ``schedule:`` ranges (canonical).

    ``trtllm_keys`` (``upper`` or ``lower``, see :data:`specsim.interop.trtllm.KEYS`) says how
    the build that serves a TensorRT-LLM file reads its keys; None tells it from the file where
    the file shows it (key 1 with a 0 last length is a lower-bound file), else upper bounds."""
    if engine not in ENGINES:
        raise ScheduleError(f"unknown engine {engine!r}: use one of {', '.join(ENGINES)}")
    what = f"a {engine} config"
    text = decode_text(read_input(path, what, PolicyError), what, str(path), PolicyError)
    return import_text(engine, text, str(path), trtllm_keys)


def import_text(engine: str, text: str, source: str = "<text>", trtllm_keys=None) -> tuple:
    """:func:`import_file` on text already read."""
    if trtllm_keys is not None and trtllm_keys not in trtllm.KEYS:
        raise ScheduleError(f"TensorRT-LLM keys {trtllm_keys!r}: one of {', '.join(trtllm.KEYS)}")
    if engine == "trtllm":
        return canonical(trtllm.parse_config(text, source, trtllm_keys))
    return canonical(ENGINES[engine].parse_config(text, source))


__all__ = ["ENGINES", "FORMATS", "TELEMETRY", "EngineConfig", "Format", "Record", "Tally", "detect_telemetry_format",
           "engine_file", "engine_gate", "engine_schedule", "engine_tree", "export_schedule", "export_tree", "import_file",
           "import_text", "policy_file", "read_policy", "read_telemetry", "sglang_tree_policy"]
