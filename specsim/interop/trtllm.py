"""TensorRT-LLM: its speculative-decoding telemetry (per-iteration ``specDecodingStats`` and
per-request blocks, ``docs/telemetry.md``, "TensorRT-LLM"), and the LLM-API options a schedule
is served with and read back from (``draft_len_schedule``, a map from batch-size upper bound to
draft length: ``{4: 4, 8: 2, 32: 1}`` is widths 1-4 -> 4, 5-8 -> 2, 9-32 -> 1 and wider -> 0;
the smallest key maps to ``max_draft_len``; docs/schedules.md#tensorrt-llm).

Why one module of this size: the house keeps one module per engine, so everything specsim reads
from or writes for TensorRT-LLM (its field spellings, iteration stats, per-request blocks and
options) has one home; each reader is short, and they share the spellings and checks above them."""

from __future__ import annotations

import json
import re

from typing import NamedTuple

import numpy as np

from specsim._checks import (
    COUNT_MAX, MAX_DEPTH, MAX_JSON_DEPTH, MAX_TREE_DEPTH, MAX_TREE_RANKS, MAX_WIDTH, check_gate, digits_int, is_int,
    is_number, latency_problem, show,
)
from specsim.errors import PolicyError, ScheduleError, SimulationError, TreeError
from specsim.interop._config import COMMON_LIMITS, CONSTANT_NOTE, EngineConfig, constant_depth, deepest_depth
from specsim.interop._records import (
    Format, Record, Tally, as_count, as_number, block_records, json_documents, request_records, walk,
)
from specsim.policy.schedule import policy_text, span
from specsim.tree.engines import tree_from_trtllm
from specsim._io import _bracket_depth

# An iteration's fields, in both of TensorRT-LLM's spellings (camelCase from the C++ serializer
# and ``/metrics``, snake_case from the Python bindings); the one home of these names, for the
# acceptance reader here and the cost-table import (:func:`iteration_stats`). An iteration holds
# its latency, its batch (``inflightBatchingStats``) and, in a speculative serve, its
# ``specDecodingStats`` block, which carries its own ``iterLatencyMS``: the draft's part of the
# iteration (``draftOverhead`` is that part over the iteration's latency).
LATENCY = ("iterLatencyMS", "iter_latency_ms")
BATCH = ("inflightBatchingStats", "inflight_batching_stats")
BATCH_FIELDS = {
    "gen": ("numGenRequests", "num_gen_requests"),
    "ctx": ("numContextRequests", "num_context_requests"),
    "ctx_tokens": ("numCtxTokens", "num_ctx_tokens"),
    "scheduled": ("numScheduledRequests", "num_scheduled_requests"),
    "kv_tokens": ("numGenKvTokens", "num_gen_kv_tokens"),
}
SPEC_STATS = ("specDecodingStats", "spec_decoding_stats")
SPEC_FIELDS = {
    "drafts": ("numDraftTokens", "num_draft_tokens"),
    "accepted": ("numAcceptedTokens", "num_accepted_tokens"),
    "requests": ("numRequestsWithDraftTokens", "num_requests_with_draft_tokens"),
    "length": ("acceptanceLength", "acceptance_length"),
    "overhead": ("draftOverhead", "draft_overhead"),
    "latency": LATENCY,
}


def parse_iterations(text: str, source: str):
    """``"mean"`` records of iteration stats: accepted drafts over the requests that drafted in
    that iteration (one verify step each); their drafted tokens over them give the depth."""
    tally = Tally()
    records = block_records(text, source, tally,
                            lambda doc: [d[k] for d in walk(doc) for k in SPEC_STATS if isinstance(d.get(k), dict)],
                            lambda s, where: _iteration(s, where, tally), "stats")
    return records, tally


def _get(stats, field):
    for name in SPEC_FIELDS[field]:
        if name in stats:
            return stats[name]
    return None


def _iteration(stats, where, tally):
    drafts, accepted, requests = (as_count(_get(stats, f)) for f in ("drafts", "accepted", "requests"))
    if requests == 0 or drafts == 0:
        tally.zero_draft += 1
        return None
    if None in (drafts, accepted, requests) or accepted > drafts:
        tally.bad(where, "specDecodingStats without numDraftTokens, numAcceptedTokens and numRequestsWithDraftTokens "
                         "(accepted <= drafted)")
        return None
    length = as_number(_get(stats, "length"))
    if length is not None:
        # acceptanceLength counts the step's own token: tells whether numAcceptedTokens does too.
        with_bonus = abs(length - accepted / requests) < abs(length - (1.0 + accepted / requests))
        if with_bonus:
            accepted = max(accepted - requests, 0)
            tally.notes["numAcceptedTokens"] = "includes the bonus token"
    depth = drafts // requests if drafts % requests == 0 else None
    return Record("mean", where, mean_accepted=accepted / requests, n_steps=requests, depth=depth)


def parse_requests(text: str, source: str):
    """Records of per-request ``speculative_decoding`` blocks (the PyTorch backend's names). The
    released block (``RequestPerfMetrics.speculative_decoding``) holds accepted and drafted tokens
    only: a mean whose steps are ``total_draft_tokens / depth`` (``--depth``). The payload with
    ``acceptance_histogram``, ``num_spec_steps`` and ``num_spec_tokens`` (null under
    ``draft_len_schedule``) is read as vLLM's is."""
    return request_records(text, source, keys=("total_accepted_draft_tokens", "total_draft_tokens"))


# -- iteration stats as timed steps (the cost-table import) -----------------------------------------
class Iteration(NamedTuple):
    """One iteration of TensorRT-LLM iteration stats, checked: its width (generation requests),
    what it prefilled, its depth (drafts per request that drafted; 0 without drafts), its latency
    and the draft's part of it, in ms, and the decode batch's KV tokens where the build reports
    them (``numGenKvTokens``, else None)."""

    where: str
    gen: int
    ctx: int
    ctx_tokens: int
    depth: int
    latency_ms: float
    draft_ms: float
    kv_tokens: int | None


DRAFT_AGREEMENT = 0.01
"""How far (a share of the iteration's latency) ``draftOverhead`` times the latency may lie from
the draft block's own ``iterLatencyMS`` when both are given (TensorRT-LLM computes the one from
the other; a wider gap is an edited or spliced file)."""


def _first(d, names):
    for n in names:
        if n in d:
            return n, d[n]
    return None, None


def _same(a, b):
    """Whether two spellings of a field give the same value (``1`` and ``1.0`` do; ``1`` and
    ``true`` do not, although Python counts them equal)."""
    return a == b and isinstance(a, bool) == isinstance(b, bool)


def _disagreement(iteration):
    """What is wrong when an iteration gives one field under both spellings with different values
    (None: it does not): which would be read is arbitrary, so neither is."""
    blocks = [(iteration, (LATENCY, BATCH, SPEC_STATS))]
    for names, fields in ((BATCH, BATCH_FIELDS), (SPEC_STATS, SPEC_FIELDS)):
        _, block = _first(iteration, names)
        if isinstance(block, dict):
            blocks.append((block, tuple(fields.values())))
    for d, spellings in blocks:
        for names in spellings:
            given = [(n, d[n]) for n in names if n in d]
            if any(not _same(given[0][1], v) for _, v in given[1:]):
                return (" and ".join(f"{n} = {show(v, 30)}" for n, v in given) +
                        " disagree: give the field under one spelling")
    return None


def _count(value, high=None):
    """A JSON count (an int, or an integral float such as ``12.0``) in ``0..high``, else None;
    a string or a boolean is not a count."""
    count = None if isinstance(value, str) else as_count(value)
    return count if count is not None and count <= (COUNT_MAX if high is None else high) else None


def _not_stats(doc):
    """Why a JSON Lines document cannot be iteration stats (None: it can, or is an empty list)."""
    if isinstance(doc, dict):
        return None
    if isinstance(doc, list):
        if all(isinstance(v, (dict, list)) for v in doc):
            return None
        return "a JSON array of non-objects, not iteration stats"
    kind = "null" if doc is None else "boolean" if isinstance(doc, bool) else \
        "string" if isinstance(doc, str) else "number"
    return f"a bare JSON {kind}, not iteration stats"


def _iteration_objects(doc):
    """The iterations of one JSON document, in document order: the objects holding an
    ``iterLatencyMS`` (either spelling), never looking inside one (its ``specDecodingStats``
    holds the draft's own ``iterLatencyMS``, which is not an iteration)."""
    stack = [doc]
    while stack:
        v = stack.pop()
        if isinstance(v, dict):
            if any(k in v for k in LATENCY):
                yield v
            else:
                stack.extend(reversed(list(v.values())))
        elif isinstance(v, list):
            stack.extend(reversed(v))


def _without_latency(doc, where) -> list:
    """An iteration of ``doc`` (an object with inflightBatchingStats, not inside an iteration)
    that holds no ``iterLatencyMS`` of its own: refused, since it would be left out of the fit
    without a word (a nested ``specDecodingStats`` latency is the draft's, not the iteration's)."""
    out, stack = [], [doc]
    while stack:
        v = stack.pop()
        if isinstance(v, dict):
            if any(k in v for k in LATENCY):
                continue
            name = next((k for k in BATCH if k in v), None)
            if name is not None:
                it = f" (iter {show(v['iter'], 30)})" if "iter" in v else ""
                out.append(f"{where}{it}: an iteration with {name} but no iterLatencyMS (iter_latency_ms): its "
                           "time is unknown (complete or delete the line)")
            stack.extend(reversed(list(v.values())))
        elif isinstance(v, list):
            stack.extend(reversed(v))
    return out


def _contradiction(drafts, accepted, requests, gen):
    if requests > gen:
        return f"numRequestsWithDraftTokens = {requests} exceeds numGenRequests = {gen}"
    if drafts and not requests:
        return f"numDraftTokens = {drafts} with numRequestsWithDraftTokens = 0"
    if requests and not drafts:
        return f"numRequestsWithDraftTokens = {requests} with numDraftTokens = 0"
    if requests and drafts % requests:
        return (f"numDraftTokens = {drafts} is not a whole number of drafts per request with drafts "
                f"({requests}): the iteration's depth is not whole")
    if accepted > drafts + requests:
        return f"numAcceptedTokens = {accepted} exceeds the drafts ({drafts}) plus one token per request ({requests})"
    return None


def _draft_ms(stats, latency, name):
    """The draft's part of an iteration that drafted, in ms, or what is wrong: the draft block's
    own ``iterLatencyMS`` where given, else ``draftOverhead`` times the iteration's latency; both
    given must agree within :data:`DRAFT_AGREEMENT` of the latency."""
    oname, share = _first(stats, SPEC_FIELDS["overhead"])
    lname, own = _first(stats, SPEC_FIELDS["latency"])
    if share is not None:
        ok = is_number(share) and 0.0 < share < 1.0
        if not ok:
            return None, (f"{oname} = {show(share)}: an iteration that drafts needs the share of its latency "
                          "spent drafting, in (0, 1)")
    if own is not None:
        bad = latency_problem(own, f"{SPEC_STATS[0]}.{lname} (the draft's time)")
        if bad:
            return None, bad
        if float(own) >= latency:
            return None, (f"{SPEC_STATS[0]}.{lname} = {show(own)} (the draft's time) is not below the iteration's "
                          f"{name} = {latency:g}")
        if share is not None and abs(float(own) - share * latency) > DRAFT_AGREEMENT * latency:
            return None, (f"{SPEC_STATS[0]}.{lname} = {show(own)} ms disagrees with {oname} x {name} = "
                          f"{share * latency:.6g} ms (TensorRT-LLM writes one as the other over the latency)")
        return float(own), None
    if share is None:
        return None, (f"{SPEC_FIELDS['overhead'][0]} = None: an iteration that drafts needs the draft's time "
                      f"({SPEC_STATS[0]}.iterLatencyMS) or its share of the latency (draftOverhead, in (0, 1))")
    return share * latency, None


def iteration_stats(text: str, source: str):
    """The iterations of TensorRT-LLM iteration stats (one JSON document, an array of iterations
    or JSON Lines; camelCase or snake_case), each value checked where it is read.

    Returns
    -------
    (list of Iteration, list of str, int)
        The iterations that read, one problem a line for each that did not (naming file, line
        and field), and how many iterations the file holds.
    """
    tally, lines = Tally(), []
    docs = json_documents(text, source, tally, lines)
    problems = [f"{p} (delete or complete the line)" for p in tally.problems]
    if len(docs) > 1 or tally.garbage:  # JSON Lines: every line is a document of iteration stats
        for doc, line in zip(docs, lines):
            why = _not_stats(doc)
            if why:
                problems.append(f"{source}:{line}: {why} (delete the line)")
    out, seen = [], 0
    for doc, line in zip(docs, lines):
        iters = list(_iteration_objects(doc))
        problems += _without_latency(doc, f"{source}:{line}")
        for i, it in enumerate(iters):
            seen += 1
            where = f"{source}:{line}" + (f" iteration {i + 1}" if len(iters) > 1 else "")
            if "iter" in it:
                where += f" (iter {show(it['iter'], 30)})"
            one, bad = _read_iteration(it, where)
            if bad:
                problems.append(f"{where}: {bad}")
            else:
                out.append(one)
    return out, problems, seen


def _read_iteration(it, where):
    """One iteration object as an :class:`Iteration`, or what is wrong with it."""
    bad = _disagreement(it)
    if bad:
        return None, bad
    name, raw = _first(it, LATENCY)
    bad = latency_problem(raw, name)
    if bad:
        return None, bad
    latency = float(raw)
    _, batch = _first(it, BATCH)
    counts = {}
    for f, names in BATCH_FIELDS.items():
        fname, v = _first(batch, names) if isinstance(batch, dict) else (None, None)
        if fname is not None:
            high = MAX_WIDTH if f == "gen" else None
            c = _count(v, high)
            if c is None:
                limit = f" in 0..{MAX_WIDTH:,}, the widest a table holds" if high else " >= 0"
                return None, f"{fname} = {show(v, 30)} is not a count (a JSON whole number{limit})"
            counts[f] = c
    if counts.get("gen") is None:
        return None, (f"no {BATCH[0]}.{BATCH_FIELDS['gen'][0]} ({BATCH_FIELDS['gen'][1]}): the iteration's width "
                      "is unknown")
    gen = counts["gen"]
    ctx, ctx_tokens, sched = counts.get("ctx") or 0, counts.get("ctx_tokens") or 0, counts.get("scheduled")
    if sched is not None and sched < gen + ctx:
        return None, f"numScheduledRequests = {sched} is fewer than numGenRequests + numContextRequests = {gen + ctx}"
    sname, stats = _first(it, SPEC_STATS)
    if stats is not None and not isinstance(stats, dict):
        return None, (f"{sname} = {show(stats, 30)} is not an object of draft counts (leave it out, or null, in an "
                      "iteration without speculation)")
    drafts = requests = 0
    draft_ms = 0.0
    if stats is not None:
        raws = [_first(stats, SPEC_FIELDS[f])[1] for f in ("drafts", "accepted", "requests")]
        drafts, accepted, requests = (_count(v) for v in raws)
        if None in (drafts, accepted, requests):
            got = ", ".join(f"{f} = {show(v, 30)}" for f, v in
                            zip(("numDraftTokens", "numAcceptedTokens", "numRequestsWithDraftTokens"), raws))
            return None, (f"{SPEC_STATS[0]} needs numDraftTokens, numAcceptedTokens and numRequestsWithDraftTokens "
                          f"as JSON whole numbers >= 0 ({got})")
        bad = _contradiction(drafts, accepted, requests, gen)
        if bad:
            return None, bad
        if drafts:
            if drafts // requests > MAX_DEPTH:
                return None, (f"numDraftTokens / numRequestsWithDraftTokens = {drafts // requests:,} drafts per "
                              f"request is beyond the deepest depth a table holds ({MAX_DEPTH})")
            draft_ms, bad = _draft_ms(stats, latency, name)
            if bad:
                return None, bad
            bad = (latency_problem(draft_ms, f"{name} x draftOverhead (draft time)")
                   or latency_problem(latency - draft_ms, f"{name} x (1 - draftOverhead) (verify time)"))
            if bad:
                return None, bad
    depth = drafts // requests if drafts else 0
    return Iteration(where, gen, ctx, ctx_tokens, depth, latency, draft_ms, counts.get("kv_tokens")), None


TELEMETRY = (
    Format("trtllm-iteration", "TensorRT-LLM per-iteration `specDecodingStats` (JSON or JSON Lines)",
           ("specDecodingStats", "spec_decoding_stats"), parse_iterations),
    Format("trtllm-request", "TensorRT-LLM per-request `speculative_decoding` blocks (JSON or JSON Lines)",
           ("total_accepted_draft_tokens",), parse_requests),
)
"""TensorRT-LLM's telemetry formats (the registry in :mod:`specsim.interop` collects them)."""


# -- the LLM-API options a schedule is served with ----------------------------------------------
DEFAULT_METHOD = "Eagle3"
KEYS = ("upper", "lower")
"""How a build reads ``draft_len_schedule`` keys: upper bounds (since PR #10860, about March
2026) or lower bounds with key 1 required (from PR #8194, October 2025, until then)."""


FLOOR_MODES = ("DraftTarget", "PARD", "SA")
"""TensorRT-LLM modes where open PR #16888 floors a depth-0 tier at 1 (tree modes too; one-model
MTP rejects 0)."""


def export_config(c, method, max_num_seqs, draft_model) -> EngineConfig:
    deepest = deepest_depth(c, "TensorRT-LLM")
    if constant_depth(c) is not None:
        notes = list(COMMON_LIMITS) + [CONSTANT_NOTE + " (TensorRT-LLM: max_draft_len without draft_len_schedule)"]
        return _config(c, notes, method, deepest, draft_model, [])
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
            if max_num_seqs is None:
                raise ScheduleError(
                    f"{policy_text(c)}: the last range {span((lo, hi, k))} speculates (depth {k}) but TensorRT-LLM "
                    "plain-decodes above its last key; give the serve's largest batch (--max-num-seqs) to end it there")
            hi = max(lo, max_num_seqs)
            notes.append(f"batch sizes above {hi} plain-decode in TensorRT-LLM: keep max_batch_size <= {hi}")
        schedule[hi] = k
    notes += ["draft_len_schedule needs a speculative mode with dynamic draft length (PyTorch backend); "
              "max_concurrency must stay unset (the two are exclusive)",
              "keys are upper bounds in builds since PR #10860 (about March 2026); builds from PR #8194 until then "
              "read them as lower bounds and give other depths: serve a current build",
              "a dynamic draft length costs CUDA-graph coverage (graphs per draft length): the schedule must win "
              "more than that to pay"]
    if any(k == 0 for k in schedule.values()) and (method in FLOOR_MODES or method.upper() == "MTP"):
        notes.append(f"decoding_type {method}: a depth-0 tier is floored at 1 (open PR #16888; one-model MTP "
                     "rejects 0): the engine drafts where this schedule plain-decodes")
    elif any(k == 0 for k in schedule.values()):
        notes.append("a depth-0 tier is floored at 1 in DraftTarget, PARD, SA and tree modes (open PR #16888) and "
                     "rejected by one-model MTP")
    return _config(c, notes, method, deepest, draft_model,
                   ["  draft_len_schedule:"] + [f"    {bound}: {k}" for bound, k in schedule.items()])


def _config(c, notes, method, deepest, draft_model, schedule_lines) -> EngineConfig:
    """The LLM-API YAML of a schedule: see :func:`yaml_config`; ``schedule_lines`` are none for a
    constant schedule."""
    return yaml_config("docs/schedules.md", f"Schedule: {policy_text(c)}", notes, method, deepest, draft_model,
                       schedule_lines)


def yaml_config(doc, what, notes, method, deepest, draft_model, extra_lines) -> EngineConfig:
    """The LLM-API YAML specsim writes (a schedule, a tree): a header naming ``doc`` and ``what``
    it serves, the notes, ``speculative_config`` with the draft length and model, then
    ``extra_lines`` (more fields of ``speculative_config``)."""
    lines = [f"# TensorRT-LLM LLM-API options written by specsim ({doc}):",
             "# trtllm-serve MODEL --extra_llm_api_options THIS.yaml, or LLM(..., **options).",
             f"# {what}"]
    lines += [f"# Note: {n}" for n in notes]
    lines += ["speculative_config:", f"  decoding_type: {_yaml_scalar(method)}", f"  max_draft_len: {deepest}"]
    if draft_model:
        lines.append(f"  speculative_model_dir: {_yaml_scalar(draft_model)}")
    lines += extra_lines
    return EngineConfig("trtllm", "\n".join(lines) + "\n", tuple(notes),
                        "trtllm-serve MODEL --extra_llm_api_options FILE")



def _yaml_scalar(text) -> str:
    text = str(text)
    if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_./-]*", text) and text.lower() not in ("true", "false", "null", "yes", "no"):
        return text
    return json.dumps(text)



def dynamic_tree(text, source):
    """``(max_topk, max_draft_len, max_total_draft_tokens)`` of the dynamic tree a TensorRT-LLM
    config turns on (``use_dynamic_tree: true`` with ``dynamic_tree_max_topK`` and
    ``max_draft_len``; the budget defaults to their product), checked as
    ``specsim.tree.tree_from_trtllm`` takes them, or None where it turns none on."""
    doc = read_yaml(text, source)
    sc = doc.get("speculative_config", doc) if isinstance(doc, dict) else None
    if not isinstance(sc, dict) or sc.get("use_dynamic_tree") is not True:
        return None
    values = []
    for name in ("dynamic_tree_max_topK", "max_draft_len", "max_total_draft_tokens"):
        v = sc.get(name)
        if v is None and name != "max_total_draft_tokens":
            raise PolicyError(f"{source}: use_dynamic_tree needs {name} in speculative_config")
        if v is not None and (not is_int(v) or v < 0):
            raise PolicyError(f"{source}: {name} = {show(v)} is not a whole number >= 0")
        values.append(v)
    topk, depth, budget = values
    if topk == 0:
        raise PolicyError(f"{source}: dynamic_tree_max_topK = 0 drafts no candidate: give 1 or more")
    try:  # the fields' checks (a table of the right shape stands in for the calibration's)
        tree_from_trtllm(topk, depth, budget, np.full((min(max(depth, 1), MAX_TREE_DEPTH),
                                                      min(max(topk, 1), MAX_TREE_RANKS)), 0.5 / max(topk, 1)))
    except TreeError as e:
        raise PolicyError(f"{source}: {e}") from None
    return topk, depth, topk * depth if budget is None else budget


def parse_config(text, source, keys=None):
    doc = read_yaml(text, source)
    if not isinstance(doc, dict):
        raise PolicyError(f"{source}: expected LLM-API options (a mapping with speculative_config)")
    sc = doc.get("speculative_config", doc)
    if not isinstance(sc, dict):
        raise PolicyError(f"{source}: speculative_config is not a mapping")
    sched, mdl, mc = sc.get("draft_len_schedule"), sc.get("max_draft_len"), sc.get("max_concurrency")
    if mdl is not None and (not is_int(mdl) or mdl < 0):
        raise PolicyError(f"{source}: max_draft_len must be a whole number >= 0, got {mdl!r}")
    if sched is not None and mc is not None:
        raise PolicyError(f"{source}: max_concurrency and draft_len_schedule are exclusive in TensorRT-LLM")
    if sched is None:
        if mdl is None:
            raise PolicyError(f"{source}: no draft_len_schedule and no max_draft_len in speculative_config")
        if mc is not None:
            if not is_int(mc) or mc < 1:
                raise PolicyError(f"{source}: max_concurrency must be a whole number >= 1, got {mc!r}")
            return ((1, mc, mdl),)
        return ((1, None, mdl),)
    if not isinstance(sched, dict) or not sched:
        raise PolicyError(f"{source}: draft_len_schedule must be a non-empty map of batch size -> draft length")
    items = []
    for key, v in sched.items():
        b = digits_int(key) if isinstance(key, str) else key
        b = key if b is None else b
        if not is_int(b) or b < 1 or not is_int(v) or v < 0:
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




GATE_KEYS = ("acceptance_window", "acceptance_length_threshold")
"""``speculative_config`` keys of TensorRT-LLM's speculation gate (window in requests, threshold on
their mean accepted drafts per step)."""


def parse_gate(text, source):
    """The speculation gate a TensorRT-LLM config sets: ``(window, threshold)``, or None when
    either key is missing (TensorRT-LLM then never switches speculation off). A window <= 0 is
    kept: it never switches off either."""
    doc = read_yaml(text, source)
    sc = doc.get("speculative_config", doc) if isinstance(doc, dict) else None
    if not isinstance(sc, dict) or any(k not in sc for k in GATE_KEYS):
        return None
    window, threshold = (sc[k] for k in GATE_KEYS)
    try:
        return check_gate(window, threshold, f"{source}: speculative_config ", GATE_KEYS)
    except SimulationError as e:
        raise PolicyError(str(e)) from None


# -- a small YAML reader for LLM-API options ---------------------------------------------------------

def read_yaml(text: str, source: str):
    """Parse LLM-API options: with PyYAML when it is installed, else the block-mapping subset
    those files use (nested ``key: value`` mappings, ``{a: b}`` flow maps, comments)."""
    depth = _bracket_depth(text)
    if depth > MAX_JSON_DEPTH:
        raise PolicyError(f"{source}: the options nest lists or maps {depth} deep; at most {MAX_JSON_DEPTH} "
                          "(docs/limits.md)")
    try:
        import yaml  # optional: loaded only to read a YAML file
    except ImportError:
        return _yaml_subset(text, source)
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise PolicyError(f"{source}: not valid YAML: {e}") from None
    except (ValueError, RecursionError, OverflowError) as e:
        # PyYAML's own limits: integers of thousands of digits, nesting past the stack.
        raise PolicyError(f"{source}: cannot read it as LLM-API options ({str(e)[:120]})") from None


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
