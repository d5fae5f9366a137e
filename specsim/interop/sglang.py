"""SGLang's speculative-decoding telemetry: the ``Decode batch`` log line, per-request
``meta_info`` and ``/server_info`` (formats and versions: ``docs/telemetry.md``, "SGLang")."""

from __future__ import annotations

import re

from specsim.interop._records import (
    Format, Record, Tally, as_count, as_number, block_records, histogram_record, json_documents, walk,
)

DECODE_LOG_INTERVAL = 40
"""SGLang's default ``decode_log_interval``: decode steps between two ``Decode batch`` lines."""

_DECODE = re.compile(r"Decode batch[.,]?\s*(?:\[\d+\])?[.,]?\s*(.*)$")
_RUNNING = re.compile(r"#running-req:\s*([0-9]+)")
_ACC_LEN = re.compile(r"accept len:\s*([-0-9.eE+]+|nan)")
_ACC_RATE = re.compile(r"accept rate:\s*([-0-9.eE+]+|nan)")


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
        if length is None or running is None or length < 1.0:
            tally.bad(where, f"accept len {acc.group(1)!r} with #running-req {run.group(1) if run else None!r} "
                             "cannot be read (accept len counts the bonus token: >= 1)")
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
        rec.depth_told = depth is not None
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
    if length is not None and length >= 1.0:
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


TELEMETRY = (
    Format("sglang-log", "SGLang `Decode batch` log lines", ("Decode batch",), parse_log,
           options=("decode_log_interval",)),
    Format("sglang-request", "SGLang per-request `meta_info` (JSON or JSON Lines)",
           ("spec_verify_ct", "spec_accept", "spec_num_correct_drafts", "spec_correct_drafts", "spec_accepted_drafts"),
           parse_requests),
    Format("sglang-server-info", "SGLang /server_info JSON", ("internal_states",), parse_server_info),
)
"""SGLang's telemetry formats (the registry in :mod:`specsim.interop` collects them)."""
