"""SGLang: its speculative-decoding telemetry (the ``Decode batch`` log line, per-request
``meta_info`` and ``/server_info``; formats and versions: ``docs/telemetry.md``, "SGLang"), and
the adaptive speculation config a schedule is served with and read back from (a slot per
batch-size lower bound, string key, with its ``candidate_steps``; one candidate pins the slot's
depth; widths below the smallest key use the smallest slot; the batch is padded to the next
CUDA-graph size first; docs/schedules.md#sglang)."""

from __future__ import annotations

import json
import re
from typing import NamedTuple

import numpy as np

from specsim._checks import MAX_DEPTH, MAX_TREE_DEPTH, MAX_TREE_RANKS, MAX_WIDTH, digits_int, is_finite, is_int, is_number, show
from specsim.errors import PolicyError, TreeError
from specsim.interop._config import (
    COMMON_LIMITS, CONSTANT_NOTE, EngineConfig, constant_depth, deepest_depth, load_json,
)
from specsim.interop._records import (
    Format, Record, Tally, as_count, as_number, block_records, histogram_record, json_documents, walk,
)
from specsim.policy.schedule import canonical, depth_at, ranges_from_depths
from specsim.tree.engines import tree_from_sglang

DECODE_LOG_INTERVAL = 40
"""SGLang's default ``decode_log_interval``: decode steps between two ``Decode batch`` lines."""

_DECODE = re.compile(r"Decode batch[.,]?\s*(?:\[\d+\])?[.,]?\s*(.*)$")
_RUNNING = re.compile(r"#running-req:\s*([0-9]+)")
_ACC_LEN = re.compile(r"accept len:\s*([-0-9.eE+]+|nan)")
_ACC_RATE = re.compile(r"accept rate:\s*([-0-9.eE+]+|nan)")
# A field's whole text up to the next comma or space: a malformed value (`800_000`, `0x10`) is
# then refused whole rather than read by its front (800, 0).
FIELD_LABELS = {"running": "#running-req", "accept_len": "accept len", "throughput": "gen throughput (token/s)"}
_FIELD_TEXT = {name: re.compile(rf"{re.escape(label)}:\s*([^\s,]*)") for name, label in FIELD_LABELS.items()}


def decode_batch(line: str):
    """The raw fields of one ``Decode batch`` line (None: not such a line): ``running``
    (#running-req), ``accept_len`` and ``throughput`` (gen throughput, token/s), each its whole
    text as logged up to the next comma or space, or None when the line lacks it; and
    ``repeated``, the fields the line gives more than once (a line is one interval's figures)."""
    m = _DECODE.search(line)
    if m is None:
        return None
    body = m.group(1)
    fields, repeated = {}, []
    for name, rx in _FIELD_TEXT.items():
        found = rx.findall(body)
        fields[name] = found[0] if found else None
        if len(found) > 1:
            repeated.append(name)
    fields["repeated"] = repeated
    return fields


def parse_log(text: str, source: str, decode_log_interval: int = DECODE_LOG_INTERVAL):
    """``"mean"`` records of SGLang's ``Decode batch`` lines, one per line.

    ``accept len`` is accepted drafts plus the bonus token per request-step over the interval
    in every version; a line's steps are ``interval x #running-req`` (its weight when lines
    aggregate). ``accept rate`` changed meaning twice, so it is not used for counts; the version
    it reads as is recorded when it can be told (a rate above 1 is the first meaning).
    """
    tally = Tally()
    records = []
    for i, line in enumerate(text.splitlines(), 1):
        m = _DECODE.search(line)
        if m is None:
            tally.other += 1
            continue
        where = f"{source}:{i}"
        body = m.group(1)
        run = _RUNNING.search(body)
        acc = _ACC_LEN.search(body)
        if acc is None:
            if run is None:
                tally.bad(where, "a Decode batch line without #running-req")
            else:
                tally.other += 1  # a decode line of a serve without speculation
            continue
        length = as_number(acc.group(1))
        running = as_count(run.group(1)) if run else None
        if running == 0:
            tally.zero_draft += 1
            continue
        if length is None or running is None or not 1.0 <= length <= MAX_DEPTH + 1:
            tally.bad(where, f"accept len {acc.group(1)!r} with #running-req {run.group(1) if run else None!r} "
                             f"cannot be read (accept len counts the bonus token: 1..{MAX_DEPTH + 1})")
            continue
        rate = _ACC_RATE.search(body)
        if rate is not None and (as_number(rate.group(1)) or 0.0) > 1.0:
            tally.notes["accept_rate_meaning"] = "accepted with bonus over draft slots (first generation)"
        if body.rstrip().endswith(",") or "Decode batch." in line:
            tally.notes.setdefault("sglang_line", "older (`Decode batch.`, trailing comma)")
        records.append(Record("mean", where, mean_accepted=length - 1.0, n_steps=float(decode_log_interval * running)))
    tally.notes["steps_per_line"] = f"decode_log_interval {decode_log_interval} x #running-req"
    tally.records = len(records)
    return records, tally


_HISTOGRAMS = ("spec_correct_drafts_histogram", "spec_accept_histogram")
_ACCEPTED = ("spec_num_correct_drafts", "spec_accepted_drafts", "spec_accept_token_num")
_PROPOSED = ("spec_num_proposed_drafts", "spec_proposed_drafts", "spec_draft_token_num")


def parse_requests(text: str, source: str):
    """Records of per-request ``meta_info``, every field generation.

    A ``*_histogram`` (index j = verify steps that accepted exactly j) gives a ``"steps"`` record.
    SGLang grows it to the largest accepted run + 1, not to the depth: the depth is proposed
    drafts over ``spec_verify_ct`` (``spec_num_proposed_drafts``, 0.5.16+;
    ``spec_draft_token_num``, 0.5.10), else ``--depth`` (the record is marked as not telling it).
    Otherwise accepted drafts over ``spec_verify_ct`` steps give a mean; failing those,
    ``spec_accept_length - 1`` or (first generation) ``completion_tokens / spec_verify_ct - 1``,
    both ``completion_tokens / spec_verify_ct`` underneath and biased high by the prefill's token
    (recorded in ``[meta] source_fields``).
    """
    def find(doc):
        metas = [d["meta_info"] for d in walk(doc) if isinstance(d.get("meta_info"), dict)]
        if not metas and isinstance(doc, dict) and any(k.startswith("spec_") for k in doc):
            metas = [doc]
        return metas

    tally = Tally()
    records = block_records(text, source, tally, find, lambda meta, where: _meta(meta, where, tally), "meta_info")
    return records, tally


def _first(meta, names):
    for name in names:
        if name in meta:
            return name, meta[name]
    return None, None


def _meta(meta, where, tally):
    verify = as_count(meta.get("spec_verify_ct"))
    name, acc = _first(meta, _ACCEPTED)
    _, proposed = _first(meta, _PROPOSED)
    if verify == 0:
        tally.zero_draft += 1
        return None
    depth = variable = None
    if verify and as_count(proposed) is not None:
        if as_count(proposed) % verify:
            variable = (f"proposed drafts {proposed} over {verify} verify steps is not whole: the depth varied (with "
                        "topk > 1 the count is tree nodes, which no chain import reads)")
        else:
            depth = as_count(proposed) // verify
    hname, hist = _first(meta, _HISTOGRAMS)
    if hist is not None:
        tally.notes["fields"] = hname
        if isinstance(hist, list) and variable is None and depth is not None and len(hist) > depth + 1:
            tally.bad(where, f"{hname} has {len(hist)} entries for {depth} drafts per step (proposed / verify "
                             "steps): counts that contradict each other")
            return None
        rec = histogram_record(hist, depth, where, tally)
        if rec is None:
            return None
        total = sum(rec.steps.values())
        if verify is not None and verify != total:
            tally.bad(where, f"spec_verify_ct {verify} but {hname} counts {total} steps: counts that contradict "
                             "each other")
            return None
        if as_count(acc) is not None and as_count(acc) != sum(a * c for (_, a), c in rec.steps.items()):
            tally.bad(where, f"{name} {acc} is not the accepted drafts {hname} counts: counts that contradict "
                             "each other")
            return None
        rec.depth_told = False  # SGLang grows the histogram to the largest run + 1: the depth comes from elsewhere
        rec.depth = depth
        rec.variable = variable
        return rec
    if verify and as_count(acc) is not None:
        if depth is not None and as_count(acc) > verify * depth:
            tally.bad(where, f"{name} {acc} is more than {verify} steps x {depth} drafts")
            return None
        if variable is not None and as_count(acc) > as_count(proposed):
            tally.bad(where, f"{name} {acc} is more than the {proposed} proposed drafts")
            return None
        tally.notes["fields"] = name
        return Record("mean", where, mean_accepted=as_count(acc) / verify, n_steps=verify, depth=depth)
    length = as_number(meta.get("spec_accept_length"))
    if length is not None and 1.0 <= length <= MAX_DEPTH + 1:
        tally.notes["fields"] = ("spec_accept_length (completion tokens / verify steps: biased high by the prefill "
                                 "token)")
        return Record("mean", where, mean_accepted=length - 1.0, n_steps=verify, depth=depth)
    tokens = as_count(meta.get("completion_tokens"))
    if verify and tokens is not None and tokens >= verify:
        tally.notes["fields"] = "spec_verify_ct (accept length biased high by the prefill token)"
        return Record("mean", where, mean_accepted=tokens / verify - 1.0, n_steps=verify)
    if any(k.startswith("spec_") for k in meta):
        tally.bad(where, "meta_info has spec_ fields but no histogram, accepted count or accept length")
    else:
        tally.other += 1
    return None


def parse_server_info(text: str, source: str):
    """``"mean"`` records of ``/server_info``: one per ``internal_states`` entry (per data-parallel
    rank), ``avg_spec_accept_length - 1`` accepted drafts per step since the server started. The
    steps behind it are not reported."""
    tally = Tally()
    records = []
    for n, doc in enumerate(json_documents(text, source, tally)):
        if not isinstance(doc, dict) or not isinstance(doc.get("internal_states"), list):
            tally.bad(f"{source} document {n + 1}", "no internal_states list")
            continue
        depth = None
        for d in walk(doc):
            if as_count(d.get("speculative_num_steps")) is not None:
                depth = as_count(d.get("speculative_num_steps"))
                break
        tree = stated_tree(doc)
        if tree is not None:
            tally.notes["tree"] = tree
        for i, state in enumerate(doc["internal_states"]):
            where = f"{source} internal_states[{i}]"
            length = as_number(state.get("avg_spec_accept_length")) if isinstance(state, dict) else None
            if length is None:
                tally.bad(where, "no avg_spec_accept_length")
                continue
            if length <= 1.0:
                tally.zero_draft += 1
                continue
            records.append(Record("mean", where, mean_accepted=length - 1.0, n_steps=None, depth=depth))
    tally.records = len(records)
    return records, tally


def stated_tree(doc):
    """The draft tree a ``/server_info`` document's server arguments state, as ``calib import
    --tree`` takes it (``"sglang:TOPK,STEPS,DRAFT_TOKENS"``, ``?`` for a setting not stated), or
    None for a chain (``speculative_eagle_topk`` 1 or not stated). A top-k stated but not a count
    >= 1 (``0``, ``-2``, ``true``, ``1e400``) is ``?``: no chain is assumed from it."""
    found, unreadable = {}, set()
    for d in walk(doc):
        for name in ("speculative_eagle_topk", "speculative_num_steps", "speculative_num_draft_tokens"):
            if name not in found and d.get(name) is not None:
                value = as_count(d[name])
                if value is None or value < 1:  # stated, but no setting SGLang takes: not a chain's absence
                    unreadable.add(name)
                else:
                    found[name] = value
    topk = found.get("speculative_eagle_topk")
    if (topk is None and "speculative_eagle_topk" not in unreadable) or (topk is not None and topk <= 1):
        return None
    return "sglang:" + ",".join(str(found.get(n, "?")) for n in ("speculative_eagle_topk", "speculative_num_steps",
                                                                  "speculative_num_draft_tokens"))


TELEMETRY = (
    Format("sglang-log", "SGLang `Decode batch` log lines", ("Decode batch",), parse_log,
           options=("decode_log_interval",)),
    Format("sglang-request", "SGLang per-request `meta_info` (JSON or JSON Lines)",
           ("spec_verify_ct", "spec_accept", "spec_num_correct_drafts", "spec_correct_drafts", "spec_accepted_drafts"),
           parse_requests),
    Format("sglang-server-info", "SGLang /server_info JSON", ("internal_states",), parse_server_info),
)
"""SGLang's telemetry formats (the registry in :mod:`specsim.interop` collects them)."""


# -- the adaptive speculation config a schedule is served with -----------------------------------
DEFAULT_METHOD = "EAGLE3"


def export_config(c, method, max_num_seqs, draft_model) -> EngineConfig:
    deepest = deepest_depth(c, "SGLang")
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



# SGLang's EAGLE tree flags, as server arguments (JSON) and on a launch line.
TREE_FLAGS = (("speculative_eagle_topk", "--speculative-eagle-topk"),
              ("speculative_num_steps", "--speculative-num-steps"),
              ("speculative_num_draft_tokens", "--speculative-num-draft-tokens"))


def tree_settings(text, source):
    """``(topk, steps, draft_tokens)`` of the EAGLE tree an SGLang server's settings state in
    ``text`` (server arguments as JSON, or a launch line with the flags), or None where the
    top-k is 1 or not stated (a chain: :func:`parse_config` reads it). The numbers are checked
    as SGLang's tree takes them (``specsim.tree.tree_from_sglang``: top-k 1..16, steps 1..64,
    no more draft tokens than top-k and steps make), refused naming the flag."""
    values = {}
    if text.lstrip().startswith(("{", "[")):
        try:
            doc = json.loads(text)
        except (ValueError, RecursionError):  # too deep: a recursion per level
            return None  # the schedule reader says what is wrong with it
        for d in walk(doc):
            for name, _ in TREE_FLAGS:
                if name not in values and name in d:
                    values[name] = d[name]
    else:
        for name, flag in TREE_FLAGS:
            m = re.search(rf"{re.escape(flag)}(?:=|\s+)(\S+)", text)
            if m:
                values[name] = m.group(1)
    if "speculative_eagle_topk" not in values:
        return None
    numbers = []
    for name, flag in TREE_FLAGS:
        if name not in values:
            raise PolicyError(f"{source}: {flag} is not stated beside --speculative-eagle-topk: an EAGLE tree needs "
                              "all three of --speculative-eagle-topk, --speculative-num-steps and "
                              "--speculative-num-draft-tokens")
        v = as_count(values[name])
        if v is None:
            raise PolicyError(f"{source}: {flag} {show(values[name])} is not a whole number >= 0")
        numbers.append(v)
    topk, steps, tokens = numbers
    if topk == 0:
        raise PolicyError(f"{source}: --speculative-eagle-topk 0 drafts no candidate: use 1 (a chain) or more (a "
                          "tree)")
    if topk == 1:
        return None
    try:  # the flags' checks (a table of the right shape stands in for the calibration's)
        tree_from_sglang(topk, steps, tokens, np.full((min(max(steps, 1), MAX_TREE_DEPTH),
                                                      min(max(topk, 1), MAX_TREE_RANKS)), 0.5 / max(topk, 1)))
    except TreeError as e:
        raise PolicyError(f"{source}: {e}") from None
    return topk, steps, tokens


def parse_config(text, source):
    doc = load_json(text, source, "SGLang adaptive")
    if not isinstance(doc, dict):
        raise PolicyError(f"{source}: an SGLang adaptive config is a JSON object of batch-size slots")
    slots = []
    if not any(k.strip().isdigit() for k in doc) and is_int(doc.get("speculative_num_steps")):
        # static steps (what a constant schedule exports): the server arguments
        k = doc["speculative_num_steps"]
        if k < 0:
            raise PolicyError(f"{source}: speculative_num_steps must be >= 0, got {k}")
        return ((1, None, k),)
    for key, entry in doc.items():
        if digits_int(key) is None:
            if key.strip().isdigit():  # digits of another script ("²"), or more than 19 of them
                raise PolicyError(f"{source}: batch-size slot {show(key)} is not a plain decimal batch size")
            continue  # controller settings (strategy, ema_alpha, ...), as SGLang skips them
        if not isinstance(entry, dict):
            raise PolicyError(f"{source}: slot {key!r} is {entry!r}; SGLang's loader needs "
                              f"{{\"candidate_steps\": [...]}} (a bare list crashes it with AttributeError)")
        steps = entry.get("candidate_steps")
        if not isinstance(steps, list) or not steps or not all(is_int(s) and s >= 0 for s in steps):
            raise PolicyError(f"{source}: slot {key!r}: candidate steps must be a non-empty list of whole "
                              f"numbers >= 0, got {steps!r}")
        if len(set(steps)) != 1:
            raise PolicyError(f"{source}: slot {key!r} lists candidates {sorted(set(steps))}; SGLang chooses among "
                              "them at run time from its acceptance average, which a fixed schedule cannot say: "
                              "simulate the controller with the policy sglang-adaptive:FILE, or give each slot one "
                              "candidate to pin its depth")
        slots.append((digits_int(key), steps[0]))
    if not slots:
        raise PolicyError(f"{source}: no batch-size slot (a key like \"1\" with its candidate steps)")
    _check_reached([k for k in doc if digits_int(k) is not None], source)
    slots.sort()
    out = []
    for i, (lo, k) in enumerate(slots):
        # Widths below the smallest key use the smallest slot.
        first = 1 if i == 0 else max(lo, 1)
        end = slots[i + 1][0] - 1 if i + 1 < len(slots) else None
        if end is not None and end < first:
            continue  # a slot no batch size reaches
        out.append((first, end, k))
    return tuple(out)



def _check_reached(keys, source) -> None:
    """Refuse batch-size slot ``keys`` (their text) that no batch reaches, whose candidates would
    be dropped without a word: two keys naming one size (``"1"`` and ``"01"``), or ``"0"``
    beside ``"1"`` (a batch holds at least one request)."""
    by_size = {}
    for key in keys:
        by_size.setdefault(digits_int(key), []).append(key)
    twice = next((names for names in by_size.values() if len(names) > 1), None)
    if twice:
        raise PolicyError(f"{source}: batch-size slots {', '.join(map(show, twice))} name the same batch size: give "
                          "it once")
    if 0 in by_size and 1 in by_size:
        raise PolicyError(f"{source}: batch-size slot {show(by_size[0][0])} is never used: no batch is smaller than 1 "
                          f"and slot {show(by_size[1][0])} covers batch size 1; delete slot {show(by_size[0][0])}")


def cuda_graph_sizes(text, where="--cuda-graph-bs"):
    """SGLang's CUDA-graph capture batch sizes from ``1,2,4,8``: sorted, distinct, >= 1."""
    parts = [p.strip() for p in str(text).split(",") if p.strip()]
    if not parts or not all(digits_int(p) is not None for p in parts):
        raise PolicyError(f"{where}: CUDA-graph batch sizes must be whole numbers such as 1,2,4,8,16, got {text!r}")
    sizes = sorted({int(p) for p in parts})
    if sizes[0] < 1 or sizes[-1] > MAX_WIDTH:
        raise PolicyError(f"{where}: CUDA-graph batch sizes must lie in 1..{MAX_WIDTH}, got {text!r}")
    return tuple(sizes)


def pad_to_graphs(ranges, sizes) -> tuple:
    """The schedule SGLang serves from slot ``ranges`` with CUDA graphs captured at ``sizes``: a
    batch is padded up to the next capture size before its slot is looked up (a batch wider than
    every capture size runs without a graph, unpadded)."""
    c = canonical(ranges)
    top = max(max(sizes), c[-1][0]) + 1
    depths = []
    for w in range(1, top + 1):
        padded = next((s for s in sizes if s >= w), w)
        depths.append(depth_at(c, padded))
    return ranges_from_depths(depths)


# -- the adaptive controller's config (the sglang-adaptive:FILE policy) ---------------------------

ADAPTIVE_DEFAULTS = {"ema_alpha": 0.2, "update_interval": 5, "warmup_batches": 10, "down_hysteresis": 0.0,
                     "up_hysteresis": -0.25, "candidate_steps": [1, 3, 7]}
"""SGLang's adaptive controller settings and their defaults (``adaptive_spec_params.py``); the
top-level ``candidate_steps`` are the candidates of a file without batch-size slots."""


class AdaptiveConfig(NamedTuple):
    """An SGLang adaptive speculation config as its controller reads it.

    ``slots``: ``((first_width, (candidate, ...)), ...)`` by first width, each candidate list
    sorted and distinct (the first slot covers every width below its key); the rest are the
    controller settings every slot shares."""

    slots: tuple
    ema_alpha: float
    update_interval: int
    warmup_batches: int
    down_hysteresis: float
    up_hysteresis: float

    @property
    def deepest(self) -> int:
        """The deepest candidate of any slot (the ``--speculative-num-steps`` specsim starts it at)."""
        return max(c[-1] for _, c in self.slots)


def _candidates(value, source, where):
    if not isinstance(value, list) or not value or not all(is_int(s) and s >= 0 for s in value):
        raise PolicyError(f"{source}: {where}candidate_steps must be a non-empty list of whole numbers >= 0, "
                          f"got {value!r}")
    return tuple(sorted(set(value)))


def parse_adaptive(text, source) -> AdaptiveConfig:
    """Read the file ``--speculative-adaptive-config`` names, every setting checked (an unknown key
    is refused rather than skipped: a misspelt setting would silently run at its default)."""
    doc = load_json(text, source, "SGLang adaptive")
    if not isinstance(doc, dict):
        raise PolicyError(f"{source}: an SGLang adaptive config is a JSON object (settings and batch-size slots)")
    known = ", ".join(ADAPTIVE_DEFAULTS)
    settings = dict(ADAPTIVE_DEFAULTS)
    slots = []
    for key, value in doc.items():
        if key.strip().isdigit() and digits_int(key) is None:  # another script's digits, or 20 and more
            raise PolicyError(f"{source}: batch-size slot {show(key)} is not a plain decimal batch size")
        if digits_int(key) is not None:
            if not isinstance(value, dict):
                raise PolicyError(f"{source}: slot {key!r} is {value!r}; SGLang's loader needs "
                                  f"{{\"candidate_steps\": [...]}} (a bare list crashes it with AttributeError)")
            extra = sorted(set(value) - {"candidate_steps"})
            if extra or "candidate_steps" not in value:
                raise PolicyError(f"{source}: slot {key!r} needs exactly one key, candidate_steps"
                                  + (f" (got {', '.join(map(repr, extra))})" if extra else ""))
            slots.append((digits_int(key), _candidates(value["candidate_steps"], source, f"slot {key!r}: ")))
            continue
        if key not in ADAPTIVE_DEFAULTS:
            raise PolicyError(f"{source}: unknown key {key!r}: an adaptive config holds {known} and batch-size "
                              "slots (digit keys)")
        settings[key] = value
    a = settings["ema_alpha"]
    if not is_number(a) or not 0.0 < a <= 1.0:
        raise PolicyError(f"{source}: ema_alpha must be a number in (0, 1], got {a!r}")
    for name, low in (("update_interval", 1), ("warmup_batches", 0)):
        if not is_int(settings[name]) or settings[name] < low:
            raise PolicyError(f"{source}: {name} must be a whole number >= {low}, got {settings[name]!r}")
    for name in ("down_hysteresis", "up_hysteresis"):
        h = settings[name]
        if not is_finite(h):
            raise PolicyError(f"{source}: {name} must be a finite number, got {h!r}")
    top = _candidates(settings["candidate_steps"], source, "")
    _check_reached([k for k in doc if digits_int(k) is not None], source)
    if not slots:
        slots = [(1, top)]
    slots.sort()
    out = []
    for i, (lo, cands) in enumerate(slots):
        first = 1 if i == 0 else max(lo, 1)
        if i + 1 < len(slots) and slots[i + 1][0] <= first:
            continue  # a slot no batch size reaches (refused above)
        out.append((first, cands))
    return AdaptiveConfig(tuple(out), float(a), settings["update_interval"], settings["warmup_batches"],
                          float(settings["down_hysteresis"]), float(settings["up_hysteresis"]))


def slot_by_width(cfg: AdaptiveConfig, max_width: int, sizes=()) -> list:
    """The slot index each width 0..max_width uses (-1 at width 0): the width padded up to the
    next CUDA-graph capture size in ``sizes`` (unpadded beyond them), then the slot with the
    largest first width <= it."""
    out = [-1]
    for w in range(1, max_width + 1):
        padded = next((s for s in sizes if s >= w), w)
        out.append(max(i for i, (lo, _) in enumerate(cfg.slots) if i == 0 or lo <= padded))
    return out
