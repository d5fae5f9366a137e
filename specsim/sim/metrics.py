"""Summaries of simulation results: per-policy figures, per-request CSV (docs/simulation.md, "Results").

Definitions
-----------
- ``makespan_s``: first arrival to last finish. ``tokens_per_s`` = output tokens / makespan.
- ``energy_j``: decode steps + prefill steps + idle gaps; ``j_per_token`` = energy / output
  tokens; ``mean_power_w`` = energy / makespan.
- ``mean_width``: sequences per decode step. ``depth_histogram``: sequence-steps by the number
  of drafts verified. ``accepted_per_step``: accepted drafts that became tokens, per sequence
  per decode step (so a decode step emits ``1 + accepted_per_step`` tokens per sequence).
  ``nodes_per_sequence``: draft nodes verified per sequence per decode step (a chain's drafts, a
  tree's nodes: docs/simulation.md#draft-trees).
- TTFT = first token - arrival; TPOT = (finish - first token) / (tokens - 1), over requests
  with more than one token; E2E = finish - arrival. Percentiles interpolate linearly.
- Queueing delay = first admission - arrival (before any prefill), p50/p90/p99.
- ``preemptions``: running requests evicted to free KV blocks; ``recomputed_tokens``: prefill
  tokens beyond each prompt once (what preemptions cost); ``drafts_cut``: drafts dropped
  because the step's token budget ran out.
- KV utilisation: blocks held over the capacity; ``mean`` integrates over time from the first
  arrival to the end (idle gaps count as empty), ``peak`` is the most held in any step. With
  unlimited KV the fractions are None and the block counts remain.
- Overload (``overload``): the requests are split into quarters by arrival (equal counts) and the
  median queueing delay of each quarter is fitted by least squares against the quarter's median
  arrival time. The slope, ``growth`` (seconds of queueing per second of arrivals), is about
  ``offered / served - 1`` when the arrivals outrun the server (a request arriving at ``t``
  waits for the backlog ``(offered - served) t`` to be served), and about 0 when it keeps up;
  ``served_fraction = 1 / (1 + growth)`` estimates the share of the offered rate served.
  ``flag`` is set when ``growth`` is at least :data:`OVERLOAD_GROWTH` and the last quarter's
  median delay exceeds the first's by at least :data:`OVERLOAD_MIN_S`: the queue grew through
  the run, so the latency percentiles describe the backlog more than the policy. Fewer than
  :data:`OVERLOAD_MIN_REQUESTS` requests: not measured (None).
- SLO attainment: the fraction of requests whose TTFT is at most the TTFT target and whose TPOT
  is at most the TPOT target (a one-token request has no TPOT and meets that target).
"""

from __future__ import annotations

import io

import numpy as np

from specsim.sim.figures import percentiles, run_rates
from specsim.sim.slo import slo_attainment

# Overload: the least growth of queueing delay (s per s of arrivals), the least rise from the
# first quarter of arrivals to the last (s), the fewest requests to measure it on.
OVERLOAD_GROWTH = 0.05
OVERLOAD_MIN_S = 1.0
OVERLOAD_MIN_REQUESTS = 8
CSV_COLUMNS = ("policy", "slack", "request", "arrival_s", "prompt_tokens", "output_tokens", "first_token_s",
               "finish_s", "ttft_s", "tpot_s", "e2e_s")


def policy_slack(result):
    """The slack a result's policy used, or None for policies that do not read it."""
    return result.options["slack"] if result.policy_spec.reads_slack else None


def label(result) -> str:
    """``policy`` or ``policy@slack`` for the planner policies that read the slack."""
    return result.policy_spec.at_slack(result.options["slack"])


def queue_growth(arrival_s, queue_s) -> dict:
    """How queueing delay grew through a run (see the module docstring, "Overload").

    Returns ``flag``, ``growth`` (s of delay per s of arrivals), ``first_quarter_s`` and
    ``last_quarter_s`` (median delays), ``served_fraction`` (``1 / (1 + growth)``, at most 1: the
    share of the offered rate served when overloaded); all None below
    :data:`OVERLOAD_MIN_REQUESTS` requests.
    """
    arrival = np.asarray(arrival_s, dtype=np.float64)
    queue = np.asarray(queue_s, dtype=np.float64)
    keep = ~np.isnan(queue)
    arrival, queue = arrival[keep], queue[keep]
    n = arrival.shape[0]
    none = {"flag": None, "growth": None, "first_quarter_s": None, "last_quarter_s": None, "served_fraction": None}
    if n < OVERLOAD_MIN_REQUESTS:
        return none
    quarters = np.array_split(np.argsort(arrival, kind="stable"), 4)
    x = np.array([np.median(arrival[q]) for q in quarters])
    y = np.array([np.median(queue[q]) for q in quarters])
    dx = x - x.mean()
    if not (dx * dx).sum() > 0:
        return none
    growth = float((dx * (y - y.mean())).sum() / (dx * dx).sum())
    flag = bool(growth >= OVERLOAD_GROWTH and y[-1] - y[0] >= OVERLOAD_MIN_S)
    return {"flag": flag, "growth": growth, "first_quarter_s": float(y[0]), "last_quarter_s": float(y[-1]),
            "served_fraction": float(1.0 / (1.0 + max(growth, 0.0)))}


def overload(result) -> dict:
    """:func:`queue_growth` of one result's requests."""
    return queue_growth(result.arrival_s, result.queue_s)


def overload_line(label: str, over: dict):
    """The one line that says a run was overloaded, or None when it was not."""
    if not over or not over.get("flag"):
        return None
    return (f"overloaded: {label}: queueing delay grew {over['growth']:.3f} s per s of arrivals (median "
            f"{over['first_quarter_s']:.2f} s in the first quarter of arrivals, {over['last_quarter_s']:.2f} s in "
            f"the last); the server kept up with about {100 * over['served_fraction']:.0f}% of the offered rate, "
            "so its latency percentiles measure the backlog, not the policy")


def overload_lines(summaries) -> list:
    """The overload line of every summary that has one, in order."""
    lines = (overload_line(s["label"], s.get("overload")) for s in summaries)
    return [line for line in lines if line]


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


def summarize(result, slo=None) -> dict:
    """One policy's JSON-ready summary (see the module docstring for every definition), its
    ``slo`` entry measured against ``slo`` (an :class:`~specsim.sim.slo.SLO`; None: no targets)."""
    c, e = result.counters, result.energy
    tokens = int(result.output_tokens.sum())
    makespan = result.makespan_s
    energy = result.energy_j
    ratio = (lambda a, b: a / b if b > 0 else None)  # noqa: E731
    tokens_per_s, j_per_token = run_rates(tokens, makespan, energy)
    return {
        "policy": result.policy,
        "label": label(result),
        "slack": policy_slack(result),
        "requests": result.requests,
        "output_tokens": tokens,
        "prompt_tokens": int(result.prompt_tokens.sum()),
        "makespan_s": makespan,
        "tokens_per_s": tokens_per_s,
        "energy_j": energy,
        "j_per_token": j_per_token,
        "mean_power_w": ratio(energy, makespan),
        "mean_width": ratio(c["sequence_steps"], c["decode_steps"]),
        "depth_histogram": {str(k): int(v) for k, v in enumerate(result.depth_histogram) if v},
        "accepted_per_step": ratio(c["accepted_drafts"], c["sequence_steps"]),
        "nodes_per_sequence": ratio(c["verified_rows"], c["sequence_steps"]),
        "acceptance_rate": ratio(c["accepted_drafts"], c["verified_rows"]),
        "ttft_s": percentiles(result.ttft_s),
        "tpot_s": percentiles(result.tpot_s),
        "e2e_s": percentiles(result.e2e_s),
        "queue_s": percentiles(result.queue_s),
        "overload": overload(result),
        "preemptions": c["preemptions"],
        "recomputed_tokens": c["recomputed_tokens"],
        "drafts_cut": c["drafts_cut"],
        "kv": kv_utilisation(result),
        "slo": slo_attainment(result, slo),
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
