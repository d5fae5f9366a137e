"""vLLM's speculative-decoding telemetry: log lines, ``/metrics`` scrapes, bench summaries and
per-request metrics (formats and their versions: ``docs/telemetry.md``, "vLLM")."""

from __future__ import annotations

import re

from specsim.calibration.telemetry._records import (
    MAX_DEPTH, Record, Tally, as_count, as_number, block_records, histogram_record, walk,
)

_NUM = r"(-?[0-9.]+(?:[eE][-+]?[0-9]+)?|nan|inf)"
_V1 = re.compile(r"SpecDecoding metrics:\s*(.*)$")
_V0 = re.compile(r"Speculative metrics:\s*(.*)$")
_PER_POS = re.compile(r"Per-position acceptance rate:\s*(.*?),\s*Avg Draft acceptance rate")
# Builds that end the line with the list (or put another field after it): a run of numbers.
_PER_POS_RUN = re.compile(r"Per-position acceptance rate:\s*((?:[0-9.]+|nan)(?:\s*,\s*(?:[0-9.]+|nan))*)")
_FIELD = {
    "mean_len": re.compile(r"Mean acceptance length:\s*" + _NUM),
    "accepted": re.compile(r"Accepted:\s*([0-9]+)\s*tokens"),
    "drafted": re.compile(r"Drafted:\s*([0-9]+)\s*tokens"),
    "rate": re.compile(r"Draft acceptance rate:\s*" + _NUM),
    "v0_k": re.compile(r"Number of speculative tokens:\s*([0-9]+)"),
    "v0_accepted": re.compile(r"Number of accepted tokens:\s*([0-9]+)"),
    "v0_drafted": re.compile(r"Number of draft tokens:\s*([0-9]+)"),
    "v0_emitted": re.compile(r"Number of emitted tokens:\s*([0-9]+)"),
}


def parse_log(text: str, source: str):
    """Records of vLLM's periodic speculative-decoding log lines, every generation.

    Current lines (with per-position rates) give ``"marginal"`` records: steps ``N = Drafted /
    K`` (every step drafts the full ``K``, the list's length) and accepted drafts at position
    ``j`` ``round(rate_j * N)``. Early V1 lines (a rate, accepted and drafted only) and V0 lines
    give ``"mean"`` records. Lines that drafted nothing are skipped and counted.
    """
    tally = Tally()
    records = []
    v0_lines = []
    for i, line in enumerate(text.splitlines(), 1):
        where = f"{source}:{i}"
        m = _V1.search(line)
        if m:
            rec = _v1_line(m.group(1), where, tally)
        elif _V0.search(line):
            rec = None
            v0 = _v0_line(_V0.search(line).group(1), where, tally)
            if v0 is not None:
                v0_lines.append(v0)
        else:
            tally.other += 1
            continue
        if rec is not None:
            records.append(rec)
    records += _v0_records(v0_lines, tally)
    tally.records = len(records)
    return records, tally


def _v1_line(body, where, tally):
    fields = {k: r.search(body) for k, r in _FIELD.items()}
    if not (fields["accepted"] and fields["drafted"]):
        tally.bad(where, "a SpecDecoding metrics line without `Accepted: N tokens, Drafted: N tokens`")
        return None
    accepted, drafted = int(fields["accepted"].group(1)), int(fields["drafted"].group(1))
    if drafted == 0:
        tally.zero_draft += 1
        return None
    if accepted > drafted:
        tally.bad(where, f"accepted {accepted} > drafted {drafted}")
        return None
    pp = _PER_POS.search(body) or _PER_POS_RUN.search(body)
    if pp is None:  # the early V1 generation: a rate and two counts, no per-position list
        tally.notes["generation"] = "vllm-v1-early"
        return Record("mean", where, accepted_tokens=accepted, drafted_tokens=drafted)
    rates = [as_number(v) for v in pp.group(1).split(",")]
    if not rates or len(rates) > MAX_DEPTH or any(r is None or not 0.0 <= r <= 1.0 for r in rates):
        tally.bad(where, f"per-position rates {pp.group(1)!r} are not numbers in [0, 1]")
        return None
    k = len(rates)
    n_steps = drafted / k
    if drafted % k:
        tally.notes["lines_with_partial_depth"] = tally.notes.get("lines_with_partial_depth", 0) + 1
    n = max(int(round(n_steps)), 1)
    acc = [min(int(round(r * n)), n) for r in rates]
    for j in range(1, k):  # rates are rounded to 3 decimals: keep the counts a non-increasing run
        acc[j] = min(acc[j], acc[j - 1])
    tally.notes["generation"] = "vllm-v1"
    if fields["mean_len"] and as_number(fields["mean_len"].group(1)) is not None:
        mal = float(fields["mean_len"].group(1))
        mean_a = accepted / n_steps
        # Until mid-2025 the mean acceptance length left out the bonus token; later it has it.
        bonus = abs(mal - (1.0 + mean_a)) <= abs(mal - mean_a)
        tally.notes["mean_acceptance_length"] = "with bonus token" if bonus else "without bonus token (before mid-2025)"
    return Record("marginal", where, accepted=acc, reached=[n] * k, depth=k)


def _v0_line(body, where, tally):
    vals = {k: _FIELD[k].search(body) for k in ("v0_k", "v0_accepted", "v0_drafted", "v0_emitted")}
    if not all(vals.values()):
        tally.bad(where, "a Speculative metrics line without its four token counts")
        return None
    return where, *(int(v.group(1)) for v in vals.values())


def _v0_records(lines, tally):
    """V0 lines count since the server started: a line's interval is its difference from the
    previous one (a drop means a restart: that line counts from zero)."""
    if not lines:
        return []
    tally.notes["generation"] = "vllm-v0"
    out = []
    prev = (0, 0, 0)
    for where, k, acc, drafted, emitted in lines:
        cur = (acc, drafted, emitted)
        if any(c < p for c, p in zip(cur, prev)):
            tally.resets += 1
            prev = (0, 0, 0)
        d_acc, d_drafted, d_emitted = (c - p for c, p in zip(cur, prev))
        prev = cur
        if d_drafted == 0:
            tally.zero_draft += 1
            continue
        n_steps = d_emitted - d_acc  # every step emits its accepted drafts and one more token
        if n_steps <= 0 or d_acc > d_drafted:
            tally.bad(where, f"accepted {d_acc}, drafted {d_drafted}, emitted {d_emitted} do not add up")
            continue
        out.append(Record("mean", where, mean_accepted=d_acc / n_steps, n_steps=n_steps, depth=k or None))
    return out


# -- Prometheus text exposition -------------------------------------------------------------
_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)\s*(?:\{(.*)\})?\s+(\S+)(?:\s+-?[0-9]+)?\s*$")
_LABEL = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"\s*,?')
PROM = {
    "drafts": "vllm:spec_decode_num_drafts",
    "draft_tokens": "vllm:spec_decode_num_draft_tokens",
    "accepted_tokens": "vllm:spec_decode_num_accepted_tokens",
    "accepted_pos": "vllm:spec_decode_num_accepted_tokens_per_pos",
    "draft_pos": "vllm:spec_decode_num_draft_tokens_per_pos",
}
_BY_NAME = {v: k for k, v in PROM.items()}


def parse_scrape(text: str, source: str):
    """One ``/metrics`` scrape: ``{(counter, labels): value}`` of vLLM's speculative counters.

    ``labels`` is a sorted tuple of ``(name, value)``; ``_created`` series (timestamps) and other
    metrics are skipped; comments are skipped; a line that is not a sample is garbage.
    """
    tally = Tally()
    series = {}
    for i, line in enumerate(text.splitlines(), 1):
        s = line.strip()
        if not s or s.startswith("#"):
            continue
        m = _SAMPLE.match(s)
        if m is None:
            tally.bad(f"{source}:{i}", "not a Prometheus sample `name{labels} value`")
            continue
        name = m.group(1)
        base = name[:-6] if name.endswith("_total") else name
        if base not in _BY_NAME:
            tally.other += 1
            continue
        labels = _labels(m.group(2) or "")
        value = as_number(m.group(3))
        if labels is None or value is None or value < 0:
            tally.bad(f"{source}:{i}", f"the sample of {name} cannot be read")
            continue
        key = (_BY_NAME[base], labels)
        series[key] = series.get(key, 0.0) + value
    return series, tally


def _labels(text):
    out, pos = [], 0
    while pos < len(text.rstrip()):
        m = _LABEL.match(text, pos)
        if m is None:
            return None
        out.append((m.group(1), m.group(2)))
        pos = m.end()
    return tuple(sorted(out))


def scrapes_record(counts, where, tally):
    """A ``"marginal"`` record from one scrape's counters (counts since start) or their
    increments between two scrapes, summed over engines and every label but ``position``."""
    totals = {}
    for (name, labels), value in counts.items():
        tkey = (name, dict(labels).get("position"))
        totals[tkey] = totals.get(tkey, 0.0) + value
    drafts = totals.get(("drafts", None))
    acc_pos = {int(p): v for (n, p), v in totals.items() if n == "accepted_pos" and p is not None and p.isdigit()}
    draft_pos = {int(p): v for (n, p), v in totals.items() if n == "draft_pos" and p is not None and p.isdigit()}
    if drafts is None or not acc_pos:
        tally.bad(where, "no vllm:spec_decode_num_drafts or no per-position accepted counters in the scrape")
        return None
    if drafts == 0:
        tally.zero_draft += 1
        return None
    k = max(acc_pos) + 1
    if k > MAX_DEPTH:
        tally.bad(where, f"per-position counters up to position {k - 1}: at most {MAX_DEPTH} positions")
        return None
    acc = [int(round(acc_pos.get(j, 0.0))) for j in range(k)]
    if draft_pos:
        tally.notes["denominators"] = "per-position draft tokens"
        reached = [int(round(draft_pos.get(j, 0.0))) for j in range(k)]
    else:
        tally.notes["denominators"] = "drafts"
        reached = [int(round(drafts))] * k
    if any(a > r for a, r in zip(acc, reached)):
        tally.bad(where, f"per-position accepted {acc} exceed their drafts {reached}")
        return None
    return Record("marginal", where, accepted=acc, reached=reached, depth=k)


def parse_prometheus(texts, sources):
    """Records from one or more scrapes of vLLM's ``/metrics``: one scrape gives the counts since
    the server started; several give the counts between the first and the last."""
    tally = Tally()
    scrapes = []
    for text, source in zip(texts, sources):
        series, t = parse_scrape(text, source)
        tally.merge(t)
        if not series:
            tally.bad(source, "no vllm:spec_decode_* counter in the scrape")
            continue
        scrapes.append(series)
    if not scrapes:
        return [], tally
    if len(scrapes) > 1:
        records = _diff_records(scrapes, sources, tally)
        tally.notes["scrapes"] = len(scrapes)
    else:
        rec = scrapes_record(scrapes[0], sources[0], tally)
        records = [rec] if rec is not None else []
        tally.notes["scrapes"] = 1
    tally.records = len(records)
    return records, tally


def _diff_records(scrapes, sources, tally):
    """One record per consecutive pair of scrapes. A series lower in the later scrape was reset
    by a restart: its later value is what it counted since (what it counted between the earlier
    scrape and the restart is lost); each such series is counted in ``resets``."""
    out = []
    for i in range(1, len(scrapes)):
        inc = {}
        for key, value in scrapes[i].items():
            before = scrapes[i - 1].get(key, 0.0)
            if value < before:
                tally.resets += 1
                before = 0.0
            inc[key] = value - before
        rec = scrapes_record(inc, f"{sources[i - 1]} -> {sources[i]}", tally)
        if rec is not None:
            out.append(rec)
    return out


# -- vllm bench serve summary --------------------------------------------------------------
_RULE = re.compile(r"^\s*-{3,}.*Speculative Decoding.*-{3,}\s*$", re.IGNORECASE)
_KV = re.compile(r"^\s*([^:]+?):\s*" + _NUM + r"\s*$")


def parse_bench(text: str, source: str):
    """Records of ``vllm bench serve`` summaries: one ``"marginal"`` record per block, accepted
    drafts at position ``i`` ``round(percent_i / 100 * Drafts)``."""
    tally = Tally()
    records = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        if not _RULE.match(lines[i]):
            tally.other += 1
            i += 1
            continue
        start = i
        fields, positions = {}, {}
        i += 1
        while i < len(lines) and not lines[i].strip().startswith("=") and not _RULE.match(lines[i]):
            m = _KV.match(lines[i])
            if m:
                label = m.group(1).strip()
                if label.lower().startswith("position "):
                    idx = as_count(label.split()[1])
                    if idx is not None:
                        positions[idx] = as_number(m.group(2))
                else:
                    fields[label] = as_number(m.group(2))
            i += 1
        rec = _bench_block(fields, positions, f"{source}:{start + 1}", tally)
        if rec is not None:
            records.append(rec)
    tally.records = len(records)
    return records, tally


def _bench_block(fields, positions, where, tally):
    drafts = as_count(fields.get("Drafts"))
    if drafts is None or not positions or sorted(positions) != list(range(len(positions))) or len(positions) > MAX_DEPTH:
        tally.bad(where, "a Speculative Decoding block without `Drafts` or its `Position i:` lines")
        return None
    if drafts == 0:
        tally.zero_draft += 1
        return None
    rates = [positions[j] for j in range(len(positions))]
    if any(r is None or not 0.0 <= r <= 100.0 for r in rates):
        tally.bad(where, f"per-position acceptance {rates} is not percentages")
        return None
    acc = [int(round(r / 100.0 * drafts)) for r in rates]
    for j in range(1, len(acc)):
        acc[j] = min(acc[j], acc[j - 1])
    return Record("marginal", where, accepted=acc, reached=[drafts] * len(acc), depth=len(acc))


# -- per-request metrics --------------------------------------------------------------------
def request_records(text: str, source: str, block_key="speculative_decoding", accepted_key="num_accepted_draft_tokens",
                    tally=None):
    """Records of per-request speculative-decoding blocks (vLLM's, and TensorRT-LLM's with its
    own count names): per-step arrays, histograms by draft length, a histogram, else a mean."""
    def find(doc):
        blocks = [d[block_key] for d in walk(doc) if isinstance(d.get(block_key), dict)]
        if not blocks and isinstance(doc, dict) and ("acceptance_histogram" in doc or "num_spec_steps" in doc):
            blocks = [doc]
        return blocks

    tally = tally or Tally()
    records = block_records(text, source, tally, find,
                            lambda block, where: _request_block(block, where, accepted_key, tally), "block")
    return records, tally


def _request_block(block, where, accepted_key, tally):
    depth = as_count(block.get("num_spec_tokens"))
    accepted, drafted = block.get("per_step_accepted"), block.get("per_step_drafted")
    if isinstance(accepted, list) and isinstance(drafted, list):
        a = [as_count(v) for v in accepted]
        d = [as_count(v) for v in drafted]
        if (len(a) != len(d) or any(x is None for x in a + d) or any(x > y for x, y in zip(a, d))
                or max(d, default=0) > MAX_DEPTH):
            tally.bad(where, "per_step_accepted and per_step_drafted are not matching lists of counts, accepted <= drafted")
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
    by_len = block.get("acceptance_histogram_by_draft_length")
    if isinstance(by_len, dict) and by_len:
        merged = None
        for key, hist in by_len.items():
            k = as_count(key)
            if k is None:
                tally.bad(where, f"draft length {key!r} is not a count")
                return None
            rec = histogram_record(hist, k, where, Tally() if merged else tally)
            if rec is None:
                continue
            if merged is None:
                merged = rec
            else:
                for s, c in rec.steps.items():
                    merged.steps[s] = merged.steps.get(s, 0) + c
                merged.windows.update(rec.windows)
        if merged is None:
            tally.zero_draft += 1
        return merged
    if "acceptance_histogram" in block:
        return histogram_record(block["acceptance_histogram"], depth, where, tally)
    n_steps = as_count(block.get("num_spec_steps"))
    acc = as_count(block.get(accepted_key))
    if n_steps is None or acc is None:
        tally.bad(where, f"a speculative-decoding block without a histogram, num_spec_steps or {accepted_key}")
        return None
    if n_steps == 0:
        tally.zero_draft += 1
        return None
    return Record("mean", where, mean_accepted=acc / n_steps, n_steps=n_steps, depth=depth)
