"""vLLM: its speculative-decoding telemetry (log lines, ``/metrics`` scrapes, bench results and
per-request metrics; formats and their versions: ``docs/telemetry.md``, "vLLM"), the
``--speculative-config`` a schedule is served with and read back from
(``num_speculative_tokens_per_batch_size``: inclusive ``[start_bs, end_bs, K]`` ranges from 1, no
overlap, a gap or the tail taking the K before it, every K clamped to ``num_speculative_tokens``;
docs/schedules.md#vllm), and a calibration as its synthetic rejection sampler.

Why one module of this size: one module per engine (the registry is :mod:`specsim.interop`), so
vLLM's telemetry readers, its config export and import sit together, each format beside its parser.
"""

from __future__ import annotations

import json
import re

from specsim._checks import MAX_DEPTH, digits_int, int_problem, is_int, name_problem, show
from specsim.errors import CalibrationError, PolicyError, TreeError
from specsim.interop._config import (
    COMMON_LIMITS, CONSTANT_NOTE, EngineConfig, constant_depth, deepest_depth, load_json,
)
from specsim.interop._records import (
    Format, Record, Tally, as_count, as_number, block_records, request_records, walk,
)
from specsim.calibration.calibration import rising_positions
from specsim.tree.engines import tree_from_vllm

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
    # The first V0 releases printed "Number of draft tokens tokens:" (and "emitted tokens tokens").
    "v0_drafted": re.compile(r"Number of draft tokens(?: tokens)?:\s*([0-9]+)"),
    "v0_emitted": re.compile(r"Number of emitted tokens(?: tokens)?:\s*([0-9]+)"),
}


def parse_log(text: str, source: str):
    """Records of vLLM's periodic speculative-decoding log lines, every generation.

    Current lines (with per-position rates) give ``"marginal"`` records: ``N`` drafting steps
    and ``round(rate_j * N)`` drafts accepted at position ``j`` (see :func:`_v1_line` for ``N``
    and the variable-depth test). Early V1 lines (a rate, accepted and drafted only) and V0
    lines give ``"mean"`` records. Lines that drafted nothing are skipped and counted.
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
    """One current (or early V1) line.

    vLLM divides every per-position count by the drafting steps ``N`` and prints
    ``1 + accepted / N`` as the mean length, neither of which it prints as a count. ``N`` is
    bounded twice: by the mean (2 decimals, ``accepted / (mean - 1)``) and by the rates (3
    decimals each, their sum is ``accepted / N``); the point taken is the middle of both bounds.
    At a fixed depth ``K`` (the list's length) ``Drafted = K x N``; a line whose ``Drafted / K``
    lies outside the bounds drafted fewer than ``K`` at some steps: its depth varied, and its
    positions past the shallowest depth divide by steps that never reached them (the record is
    marked ``variable``). Before mid-2025 the mean left out the bonus token: the rates' sum tells
    which meaning a line has.
    """
    fields = {k: r.search(body) for k, r in _FIELD.items()}
    if not (fields["accepted"] and fields["drafted"]):
        tally.bad(where, "a SpecDecoding metrics line without `Accepted: N tokens, Drafted: N tokens`")
        return None
    accepted, drafted = int(fields["accepted"].group(1)), int(fields["drafted"].group(1))
    if drafted == 0:
        tally.zero_draft += 1
        return None
    if accepted > drafted:
        tally.bad(where, f"accepted {accepted} > drafted {drafted}: counts that contradict each other")
        return None
    pp = _PER_POS.search(body) or _PER_POS_RUN.search(body)
    if pp is None:  # the early V1 generation: a rate and two counts, no per-position list
        tally.notes["generation"] = "vllm-v1-early"
        return Record("mean", where, accepted_tokens=accepted, drafted_tokens=drafted)
    rates = [as_number(v) for v in pp.group(1).split(",")]
    if not rates or len(rates) > MAX_DEPTH:
        tally.bad(where, f"{len(rates)} per-position rates: at most {MAX_DEPTH} positions")
        return None
    if any(r is None or not 0.0 <= r <= 1.0 for r in rates):
        tally.bad(where, f"per-position rates {pp.group(1)!r} are not numbers in [0, 1]")
        return None
    if _rising(rates, "per-position rate", where, tally):
        return None
    k = len(rates)
    mal = as_number(fields["mean_len"].group(1)) if fields["mean_len"] else None
    if fields["mean_len"] and mal is None:
        tally.bad(where, f"mean acceptance length {fields['mean_len'].group(1)!r} is not a finite number")
        return None
    steps = _step_bounds(accepted, rates, mal, tally)
    if steps is None:
        tally.bad(where, f"accepted {accepted}, mean acceptance length {mal}, rates summing to {sum(rates):.3f} "
                         "give no common number of drafting steps: counts that contradict each other")
        return None
    lo, hi = steps
    tally.notes["generation"] = "vllm-v1"
    if lo <= drafted / k <= hi and drafted % k == 0:
        n = drafted // k
        variable = None
    else:
        n = max(int(round(0.5 * (lo + min(hi, drafted)))), 1)
        variable = (f"Drafted {drafted} is not {k} (the per-position list's length) x the {n} drafting steps "
                    f"that accepted {accepted} and the mean length give ({lo:.0f}-{hi:.0f})")
    acc = [min(int(round(r * n)), n) for r in rates]
    for j in range(1, k):  # rates are rounded to 3 decimals: keep the counts a non-increasing run
        acc[j] = min(acc[j], acc[j - 1])
    return Record("marginal", where, accepted=acc, reached=[n] * k, depth=k, variable=variable)


def _step_bounds(accepted, rates, mal, tally):
    """The interval of drafting steps ``N`` a line's printed accepted count, rates (3 decimals)
    and mean length (2 decimals) allow; None when they allow none. Records in ``tally`` whether
    the mean counts the bonus token."""
    inf = float("inf")
    k = len(rates)
    s = sum(rates)
    half = 0.0005 * k + 1e-9  # printed to 3 decimals (plus the float error of the printing)
    lo = accepted / (s + half) if accepted else 0.0
    hi = accepted / (s - half) if s > half else inf
    if accepted == 0:
        return 0.0, inf
    if mal is not None:
        # With the bonus token the mean is 1 + sum of rates; without (before mid-2025) the sum.
        bonus = abs(mal - (1.0 + s)) <= abs(mal - s)
        tally.notes["mean_acceptance_length"] = "with bonus token" if bonus else "without bonus token (before mid-2025)"
        m = mal - 1.0 if bonus else mal
        lo = max(lo, accepted / (m + 0.005 + 1e-9))
        hi = min(hi, accepted / (m - 0.005 - 1e-9) if m > 0.005 + 1e-9 else inf)
    return (lo, hi) if lo <= hi + 1e-9 else None


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
    increments between two scrapes, summed over engines and every label but ``position``.

    No release exports a per-position draft count: every position divides by the drafts
    (``num_drafts``). When ``num_draft_tokens`` is not ``K x num_drafts`` (``K`` positions), the
    depth varied and the record is marked ``variable``.
    """
    totals = {}
    for (name, labels), value in counts.items():
        tkey = (name, dict(labels).get("position"))
        totals[tkey] = totals.get(tkey, 0.0) + value
    drafts = totals.get(("drafts", None))
    acc_pos = {int(p): v for (n, p), v in totals.items() if n == "accepted_pos" and digits_int(p) is not None}
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
    n = int(round(drafts))
    acc = [int(round(acc_pos.get(j, 0.0))) for j in range(k)]
    return marginal_record(acc, n, totals.get(("draft_tokens", None)), totals.get(("accepted_tokens", None)),
                           where, tally, ("num_draft_tokens", "num_drafts"))


def _rising(values, what, where, tally) -> bool:
    """Count ``where`` as unreadable when its marginal rates or counts rise along positions
    (refused under ``--strict``): their conditional rate would be clamped to 1, so the import
    would not be what the serve measured."""
    rises = rising_positions(values)
    if rises:
        j = rises[0]
        tally.bad(where, f"{what} {j} ({values[j - 1]:g}) is above position {j - 1}'s ({values[j - 2]:g}): a "
                         "draft cannot be accepted more often than the one before it, so marginal rates cannot rise "
                         "along positions (its conditional rate would be clamped to 1)")
    return bool(rises)


def marginal_record(acc, n, draft_tokens, accepted_tokens, where, tally, names):
    """A ``"marginal"`` record of ``acc[j]`` drafts accepted at position ``j + 1`` over ``n``
    drafting steps, checked: a count above the steps, counts rising along positions, or a total
    accepted that is not their sum are refused; ``draft_tokens`` other than ``K x n`` marks the
    depth variable. ``names`` are the source's names for the draft tokens and the steps."""
    k = len(acc)
    if any(a > n for a in acc):
        tally.bad(where, f"per-position accepted {acc} exceed the {n} drafting steps: counts that contradict each other")
        return None
    if _rising(acc, "accepted at position", where, tally):
        return None
    if accepted_tokens is not None and abs(accepted_tokens - sum(acc)) > 0.5 + 1e-6 * accepted_tokens:
        tally.bad(where, f"accepted tokens {accepted_tokens:g} are not the sum of the per-position counts {sum(acc)}: "
                         "counts that contradict each other")
        return None
    variable = None
    if draft_tokens is not None and int(round(draft_tokens)) != k * n:
        if draft_tokens > k * n + 0.5:
            tally.bad(where, f"{names[0]} {draft_tokens:g} is more than {k} positions x {names[1]} {n}: counts that "
                             "contradict each other")
            return None
        variable = f"{names[0]} {draft_tokens:g} is not {k} (positions) x {names[1]} {n}"
    return Record("marginal", where, accepted=acc, reached=[n] * k, depth=k, variable=variable)


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
    """Records of ``vllm bench serve`` results: the ``--save-result`` JSON (full-precision rates),
    or the printed summary's ``Speculative Decoding`` blocks (rates in percent, 2 decimals). One
    ``"marginal"`` record per result: accepted drafts at position ``i`` ``round(rate_i x Drafts)``."""
    tally = Tally()
    if text.lstrip().startswith(("{", "[")):
        records = block_records(text, source, tally, lambda doc: [d for d in walk(doc) if _BENCH_JSON[0] in d],
                                lambda d, where: _bench_json(d, where, tally), "result")
        return records, tally
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


_BENCH_JSON = ("spec_decode_per_position_acceptance_rates", "spec_decode_num_drafts", "spec_decode_draft_tokens",
               "spec_decode_accepted_tokens")


def _bench_json(doc, where, tally):
    rates, drafts, draft_tokens, accepted = (doc.get(k) for k in _BENCH_JSON)
    drafts = as_count(drafts)
    if not isinstance(rates, list) or drafts is None:
        tally.bad(where, "a bench result without spec_decode_num_drafts or its per-position rates list")
        return None
    if drafts == 0:
        tally.zero_draft += 1
        return None
    rates = [as_number(r) for r in rates]
    if not rates or len(rates) > MAX_DEPTH or any(r is None or r < 0 for r in rates):
        tally.bad(where, f"spec_decode_per_position_acceptance_rates is not 1..{MAX_DEPTH} finite rates")
        return None
    accepted = as_number(accepted)
    scale = 1.0
    if accepted is not None and sum(rates) > 0:
        # Rates as fractions or as percent: the one that gives back the accepted count.
        scale = min((1.0, 0.01), key=lambda f: abs(sum(rates) * f * drafts - accepted))
    if any(r * scale > 1.0 + 1e-9 for r in rates):
        tally.bad(where, f"per-position rates {rates} above 1")
        return None
    acc = [int(round(r * scale * drafts)) for r in rates]
    return marginal_record(acc, drafts, as_number(draft_tokens), accepted, where, tally,
                           ("spec_decode_draft_tokens", "spec_decode_num_drafts"))


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
    if _rising(rates, "per-position acceptance at position", where, tally):
        return None
    acc = [int(round(r / 100.0 * drafts)) for r in rates]
    # The printed rates carry 4 significant digits: the accepted count is checked to that precision.
    accepted = fields.get("Accepted tokens")
    if accepted is not None and abs(accepted - sum(acc)) > 0.00005 * drafts * len(acc) + 0.5:
        tally.bad(where, f"Accepted tokens {accepted:g} is not the sum of the per-position counts {sum(acc)}: counts "
                         "that contradict each other")
        return None
    return marginal_record(acc, drafts, fields.get("Draft tokens"), None, where, tally, ("Draft tokens", "Drafts"))


# -- a calibration the real engine can serve -----------------------------------------------------
def synthetic_config(cal, depth=None, method="eagle3", draft_model=None):
    """vLLM's ``--speculative-config`` that makes the real engine accept drafts at ``cal``'s
    rates: ``rejection_sample_method: "synthetic"`` with ``synthetic_acceptance_rates``, the
    per-position unconditional rates (the product of the conditional priors up to each
    position; a position past the fitted ones takes the last prior, as the simulator does).

    Parameters
    ----------
    cal : AcceptanceCalibration
    depth : int, optional
        ``num_speculative_tokens`` (default: the calibration's fitted positions).
    method, draft_model : str
        The speculative method and the drafter's weights (``model``) the engine loads.

    Returns
    -------
    dict
    """
    k = len(cal.priors) if depth is None else depth
    problem = int_problem(k, "the depth", 1, MAX_DEPTH) or name_problem(method, "method") \
        or (draft_model is not None and name_problem(draft_model, "draft_model"))
    if problem:
        raise CalibrationError(problem)
    rates, run = [], 1.0
    for j in range(1, k + 1):
        run *= cal.prior(j)
        rates.append(round(run, 6))
    cfg = {"method": method}
    if draft_model:
        cfg["model"] = draft_model
    cfg.update({"num_speculative_tokens": k, "rejection_sample_method": "synthetic",
                "synthetic_acceptance_rates": rates})
    return cfg


TELEMETRY = (
    Format("vllm-log", "vLLM `SpecDecoding metrics:` / V0 `Speculative metrics:` log lines",
           ("SpecDecoding metrics:", "Speculative metrics:"), parse_log),
    Format("vllm-prometheus", "vLLM /metrics text exposition (one scrape, or several: their difference)",
           ("vllm:spec_decode_",), parse_prometheus, whole=True),
    Format("vllm-bench", "`vllm bench serve` summary (Speculative Decoding block) or --save-result JSON",
           ("Speculative Decoding", "spec_decode_per_position_acceptance_rates"), parse_bench),
    Format("vllm-request", "vLLM per-request `speculative_decoding` metrics (JSON or JSON Lines)",
           ("num_spec_steps", "acceptance_histogram", "\"speculative_decoding\""), request_records),
)
"""vLLM's telemetry formats (the registry in :mod:`specsim.interop` collects them)."""


# -- the --speculative-config a schedule is served with ---------------------------------------
DEFAULT_METHOD = "eagle3"
"""Most current drafters are EAGLE-3 (vLLM's ``eagle`` means EAGLE-1); --method names another."""
PER_BATCH_METHODS = ("ngram", "eagle", "eagle3", "mtp", "draft_model", "dflash")
"""The methods whose per-batch depth vLLM honours (others fall back to the static K, warning)."""
PER_BATCH_COST = 0.14
"""What a per-batch list costs vLLM, as a share of throughput: on the V1 model runner any
``num_speculative_tokens_per_batch_size`` list turns FULL CUDA graphs into PIECEWISE
(``VllmConfig._maybe_override_dynamic_sd_cudagraph_mode`` in ``vllm/config/vllm.py``), about -14%
single-stream as vLLM's developers measured it. vLLM's main branch keeps full graphs on the V2
model runner; docs/schedules.md gives the sources and what was and was not confirmed. A tuned per-batch schedule is
exported only when its gain clears this and the noise (``schedule export --per-batch-cost``
overrides it)."""


def export_config(c, method, max_num_seqs, draft_model) -> EngineConfig:
    deepest = deepest_depth(c, "vLLM")
    cfg = {"method": method}
    if draft_model:
        cfg["model"] = draft_model
    cfg["num_speculative_tokens"] = deepest
    notes = list(COMMON_LIMITS)
    if constant_depth(c) is not None:
        notes.append(CONSTANT_NOTE + " (vLLM: any num_speculative_tokens_per_batch_size list turns FULL CUDA graphs "
                                     "into PIECEWISE, about -14% single-stream: docs/schedules.md)")
    else:
        entries = []
        for lo, hi, k in c:
            # vLLM keeps the last range's K for every wider batch, so any finite end is exact.
            entries.append([lo, hi if hi is not None else max(lo, max_num_seqs or lo), k])
        cfg["num_speculative_tokens_per_batch_size"] = entries
        notes += [
            f"batch sizes above {entries[-1][1]} keep depth {entries[-1][2]} (vLLM extends the last range)",
            "num_speculative_tokens_per_batch_size needs vLLM of about v0.24 or later: older releases refuse the "
            "unknown key at start-up",
            f"vLLM honours a per-batch depth only for methods {', '.join(PER_BATCH_METHODS)} on the V1 runner, "
            "and not with data parallelism: otherwise it serves num_speculative_tokens throughout, with a warning"
            + ("" if method in PER_BATCH_METHODS else f" (method {method!r} is not among them)"),
            "vLLM's batch size counts every scheduled request, prefill chunks included, where specsim's width counts "
            "decoding sequences: under chunked prefill the engine picks the depth of a wider batch",
            "any per-batch list turns vLLM's FULL CUDA graphs into PIECEWISE (about -14% single-stream: "
            "docs/schedules.md): the schedule must win more than that to pay",
        ]
    line = json.dumps(cfg, separators=(", ", ": "))
    if not draft_model:
        notes.append(f"method {method!r}: add \"model\" (the drafter's weights) for a method that has one")
    return EngineConfig("vllm", line + "\n", tuple(notes), f"vllm serve ... --speculative-config '{line}'")



def token_tree(text, source):
    """The ``speculative_token_tree`` a vLLM config sets (``specsim.tree.Tree``, checked as vLLM
    reads it, and against ``num_speculative_tokens``, which vLLM requires to equal its nodes), or
    None where it sets none (its ``num_speculative_tokens`` chain: :func:`parse_config`)."""
    doc = load_json(text, source, "vLLM")
    if isinstance(doc, dict) and isinstance(doc.get("speculative_config"), dict):
        doc = doc["speculative_config"]
    if not isinstance(doc, dict) or doc.get("speculative_token_tree") is None:
        return None
    try:
        tree = tree_from_vllm(doc["speculative_token_tree"])
    except TreeError as e:
        raise PolicyError(f"{source}: {e}") from None
    nst = doc.get("num_speculative_tokens")
    if nst is not None and (not is_int(nst) or nst != tree.nodes):
        raise PolicyError(f"{source}: num_speculative_tokens = {show(nst)} but speculative_token_tree has {tree.nodes} "
                          f"nodes: vLLM requires them equal (set num_speculative_tokens to {tree.nodes})")
    return tree


def parse_config(text, source):
    doc = load_json(text, source, "vLLM")
    if isinstance(doc, dict) and isinstance(doc.get("speculative_config"), dict):
        doc = doc["speculative_config"]
    if isinstance(doc, list):
        entries, nst = doc, None
    elif isinstance(doc, dict):
        entries, nst = doc.get("num_speculative_tokens_per_batch_size"), doc.get("num_speculative_tokens")
    else:
        raise PolicyError(f"{source}: expected the --speculative-config JSON object (or its "
                          "num_speculative_tokens_per_batch_size list)")
    if nst is not None and (not is_int(nst) or nst < (1 if entries is not None else 0)):
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
        if not isinstance(e, list) or len(e) != 3 or not all(is_int(v) for v in e):
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
