"""Summaries of simulation results: per-policy figures, per-request CSV (docs/simulation.md, "Results").

Definitions
-----------
- ``makespan_s``: first arrival to last finish. ``tokens_per_s`` = output tokens / makespan.
- ``energy_j``: decode steps + prefill steps + idle gaps; ``j_per_token`` = energy / output
  tokens; ``mean_power_w`` = energy / makespan.
- ``mean_width``: sequences per decode step. ``depth_histogram``: sequence-steps by the number
  of drafts verified. ``accepted_per_step``: accepted drafts that became tokens, per sequence
  per decode step (so a decode step emits ``1 + accepted_per_step`` tokens per sequence).
- TTFT = first token - arrival; TPOT = (finish - first token) / (tokens - 1), over requests
  with more than one token; E2E = finish - arrival. Percentiles interpolate linearly.
- Queueing delay = first admission - arrival (before any prefill), p50/p90/p99.
- ``preemptions``: running requests evicted to free KV blocks; ``recomputed_tokens``: prefill
  tokens beyond each prompt once (what preemptions cost); ``drafts_cut``: drafts dropped
  because the step's token budget ran out.
- KV utilisation: blocks held over the capacity; ``mean`` integrates over time from the first
  arrival to the end (idle gaps count as empty), ``peak`` is the most held in any step. With
  unlimited KV the fractions are None and the block counts remain.
- SLO attainment: the fraction of requests whose TTFT is at most the TTFT target and whose TPOT
  is at most the TPOT target (a one-token request has no TPOT and meets that target).
"""

from __future__ import annotations

import io

import numpy as np

PERCENTILES = (50, 90, 99)
CSV_COLUMNS = ("policy", "slack", "request", "arrival_s", "prompt_tokens", "output_tokens", "first_token_s",
               "finish_s", "ttft_s", "tpot_s", "e2e_s")


def _percentiles(values) -> dict:
    v = np.asarray(values, dtype=np.float64)
    v = v[~np.isnan(v)]
    if v.shape[0] == 0:
        return {f"p{q}": None for q in PERCENTILES} | {"mean": None}
    ps = np.percentile(v, PERCENTILES)
    return {f"p{q}": float(p) for q, p in zip(PERCENTILES, ps)} | {"mean": float(v.mean())}


def policy_slack(result):
    """The slack a result's policy used, or None for policies that do not read it."""
    return result.options["slack"] if result.policy_spec.reads_slack else None


def label(result) -> str:
    """``policy`` or ``policy@slack`` for the planner policies that read the slack."""
    s = policy_slack(result)
    return result.policy if s is None else f"{result.policy}@{s:g}"


def slo_attainment(result, slo_ttft_s=None, slo_tpot_s=None) -> dict:
    """Fractions of requests meeting the TTFT target, the TPOT target, and both."""
    n = result.requests
    ok_ttft = np.ones(n, dtype=bool)
    ok_tpot = np.ones(n, dtype=bool)
    if slo_ttft_s is not None:
        ok_ttft = result.ttft_s <= slo_ttft_s
    if slo_tpot_s is not None:
        tpot = result.tpot_s
        ok_tpot = np.isnan(tpot) | (tpot <= slo_tpot_s)
    frac = (lambda m: float(m.mean()) if n else None)  # noqa: E731
    return {"ttft_target_s": slo_ttft_s, "tpot_target_s": slo_tpot_s, "ttft_attainment": frac(ok_ttft),
            "tpot_attainment": frac(ok_tpot), "attainment": frac(ok_ttft & ok_tpot)}


def kv_utilisation(result) -> dict:
    """KV-cache use: blocks (mean over time, peak) and the same as fractions of the capacity."""
    kv = result.kv
    start = float(result.arrival_s[0]) if result.requests else 0.0
    span = result.end_s - start
    mean_blocks = kv["block_s"] / span if span > 0 else 0.0
    cap = kv["capacity_blocks"]
    return {"block_size": kv["block_size"], "capacity_blocks": cap, "mean_blocks": mean_blocks,
            "peak_blocks": kv["peak_blocks"], "mean": mean_blocks / cap if cap else None,
            "peak": kv["peak_blocks"] / cap if cap else None}


def summarize(result, slo_ttft_s=None, slo_tpot_s=None) -> dict:
    """One policy's JSON-ready summary (see the module docstring for every definition)."""
    c, e = result.counters, result.energy
    tokens = int(result.output_tokens.sum())
    start = float(result.arrival_s[0]) if result.requests else 0.0
    makespan = float(np.nanmax(result.finish_s)) - start if result.requests else 0.0
    energy = result.energy_j
    ratio = (lambda a, b: a / b if b > 0 else None)  # noqa: E731
    return {
        "policy": result.policy,
        "label": label(result),
        "slack": policy_slack(result),
        "requests": result.requests,
        "output_tokens": tokens,
        "prompt_tokens": int(result.prompt_tokens.sum()),
        "makespan_s": makespan,
        "tokens_per_s": ratio(tokens, makespan),
        "energy_j": energy,
        "j_per_token": ratio(energy, tokens),
        "mean_power_w": ratio(energy, makespan),
        "mean_width": ratio(c["sequence_steps"], c["decode_steps"]),
        "depth_histogram": {str(k): int(v) for k, v in enumerate(result.depth_histogram) if v},
        "accepted_per_step": ratio(c["accepted_drafts"], c["sequence_steps"]),
        "acceptance_rate": ratio(c["accepted_drafts"], c["verified_rows"]),
        "ttft_s": _percentiles(result.ttft_s),
        "tpot_s": _percentiles(result.tpot_s),
        "e2e_s": _percentiles(result.e2e_s),
        "queue_s": _percentiles(result.queue_s),
        "preemptions": c["preemptions"],
        "recomputed_tokens": c["recomputed_tokens"],
        "drafts_cut": c["drafts_cut"],
        "kv": kv_utilisation(result),
        "slo": slo_attainment(result, slo_ttft_s, slo_tpot_s),
        "steps": dict(c),
        "energy_breakdown": dict(e),
    }


def requests_csv(results) -> str:
    """Per-request rows of every result, policy after policy, as CSV text (floats round-trip;
    TPOT is empty for one-token requests)."""
    out = io.StringIO()
    out.write(",".join(CSV_COLUMNS) + "\n")
    for r in results:
        slack = policy_slack(r)
        head = f"{r.policy},{'' if slack is None else repr(slack)}"
        cols = [_text(a) for a in (r.arrival_s, r.first_token_s, r.finish_s, r.ttft_s, r.tpot_s, r.e2e_s)]
        ints = [list(map(str, a.tolist())) for a in (r.prompt_tokens, r.output_tokens)]
        for i, (a, f, fin, ttft, tpot, e2e) in enumerate(zip(*cols)):
            out.write(f"{head},{i},{a},{ints[0][i]},{ints[1][i]},{f},{fin},{ttft},{tpot},{e2e}\n")
    return out.getvalue()


def _text(values):
    return ["" if v != v else repr(v) for v in values.tolist()]
