"""Plain, slow, obviously-correct versions of specsim's kernels, for tests to compare against.

Each section follows the rules of docs/ line by line, in plain Python over lists and dicts, with no
Numba and no vectorising. Append new sections at the end, each under its own heading.
"""

from __future__ import annotations

import math

import numpy as np

# --- core: tables and calibrations ------------------------------------------------------------------------------

COSTS = ("verify_ms", "verify_j", "draft_ms", "draft_j")


def ref_cell(cells, n, k):
    """``cell(n, k)`` over a list of ``(n, k, vms, vj, dms, dj)`` tuples.

    Returns the four costs as a tuple, or None when ``k > max_k``.
    """
    by_key = {(c[0], c[1]): tuple(c[2:6]) for c in cells}
    max_k = max(c[1] for c in cells)
    if k > max_k:
        return None
    widths = sorted({c[0] for c in cells})
    below = [w for w in widths if w <= n]
    above = [w for w in widths if w >= n]
    a = max(below) if below else None
    b = min(above) if above else None
    if a is not None and b is not None and a == b:
        return by_key[(a, k)]
    if a is not None and b is not None:
        t = (n - a) / (b - a)
        p, q = by_key[(a, k)], by_key[(b, k)]
        return tuple(p[f] + (q[f] - p[f]) * t for f in range(4))
    return by_key[(a if a is not None else b, k)]


def ref_table_rules(cells, schema=1):
    """The set of ``(rule, cell index or None)`` a grid breaks; empty when valid."""
    broken = set()
    if schema != 1:
        broken.add(("schema", None))
    if not cells:
        broken.add(("no_cells", None))
        return broken
    seen = set()
    for i, (n, k, vms, vj, dms, dj) in enumerate(cells):
        if n == 0:
            broken.add(("n0", i))
        if not all(math.isfinite(v) for v in (vms, vj, dms, dj)):
            broken.add(("not_finite", i))
        if not (vms > 0 and vj > 0):
            broken.add(("verify_not_positive", i))
        if k == 0 and not (dms == 0 and dj == 0):
            broken.add(("draft_not_zero_at_k0", i))
        if k > 0 and not (dms > 0 and dj > 0):
            broken.add(("draft_not_positive", i))
        if (n, k) in seen:
            broken.add(("duplicate", i))
        seen.add((n, k))
    max_k = max(c[1] for c in cells)
    for n in {c[0] for c in cells}:
        for k in range(max_k + 1):
            if (n, k) not in seen:
                broken.add(("missing_depth", None))
    return broken


def f32(x):
    """``x`` rounded to float32 (as metrale stores edges and confidences), back as a Python float."""
    return float(np.float32(x))


def ref_bucket(edges, lp):
    """docs/calibration.md#queries: the first ``i`` with ``lp <= edges[i]`` in float32; the last bucket above all."""
    lp = f32(lp)
    for i, e in enumerate(edges):
        if lp <= f32(e):
            return i
    return len(edges) - 1


def ref_p_given_lp(edges, p_accept, lp):
    return p_accept[ref_bucket(edges, lp)]


def ref_prior(priors, j):
    return priors[min(max(j - 1, 0), len(priors) - 1)]


def ref_p_position(edges, p_accept, priors, lps, j):
    """P(accept) of 1-based draft ``j``: calibrated where a confidence exists (NaN = none), else the prior."""
    if j <= len(lps) and not math.isnan(lps[j - 1]):
        return ref_p_given_lp(edges, p_accept, lps[j - 1])
    return ref_prior(priors, j)


def ref_expected_accepted(edges, p_accept, priors, lps, k):
    """docs/calibration.md#queries: ``sum_{j=1..k} prod_{t=1..j} p_t``, folded left to right."""
    run, total = 1.0, 0.0
    for j in range(1, k + 1):
        run *= ref_p_position(edges, p_accept, priors, lps, j)
        total += run
    return total


def ref_calibration_rules(edges, p_accept, priors):
    """docs/formats.md#acceptance-calibration: the set of rules broken (edges compared as float32)."""
    broken = set()
    e32 = [f32(e) for e in edges]
    if not edges:
        broken.add("edges_empty")
    if len(p_accept) != len(edges):
        broken.add("length")
    if any(not e32[i] < e32[i + 1] for i in range(len(e32) - 1)):
        broken.add("not_ascending")
    if e32 and e32[-1] < 0:
        broken.add("last_negative")
    if any(not 0.0 <= p <= 1.0 for p in list(p_accept) + list(priors)):
        broken.add("not_probability")
    if not priors:
        broken.add("priors_empty")
    return broken


def ref_conditional_priors(marginals):
    """docs/calibration.md#queries: ``c_j = m_j / m_{j-1}`` (``m_0 = 1``) clamped to [0, 1], 0 after a zero marginal."""
    out = []
    before = 1.0
    zero_seen = False
    for m in marginals:
        if zero_seen:
            out.append(0.0)
            continue
        out.append(min(max(m / before, 0.0), 1.0))
        if m == 0.0:
            zero_seen = True
        before = m
    return out


# --- planner (docs/planner.md) -------------------------------------------------------------------

def plan_ref_cell(widths, costs, n, k):
    """The table lookup cell(n, k) over plain lists: ``widths[i]`` -> ``costs[i][k] = [vms, vj, dms, dj]``."""
    max_k = len(costs[0]) - 1
    if k > max_k:
        return None
    below = [w for w in widths if w <= n]
    above = [w for w in widths if w >= n]
    a = max(below) if below else None
    b = min(above) if above else None
    at = lambda w: list(costs[widths.index(w)][k])  # noqa: E731
    if a is not None and b is not None and a == b:
        return at(a)
    if a is not None and b is not None:
        t = (n - a) / (b - a)
        return [p + (q - p) * t for p, q in zip(at(a), at(b))]
    return at(a if a is not None else b)


def plan_ref_bucket(edges, lp):
    lp = np.float32(lp)
    for i, e in enumerate(edges):
        if lp <= np.float32(e):
            return i
    return len(edges) - 1


def plan_ref_prior(priors, j):
    return priors[min(max(j - 1, 0), len(priors) - 1)]


def ref_p(edges, p_accept, priors, lps, j):
    """P(accept) of 1-based draft j of a chain with confidences ``lps``; NaN/absent -> prior."""
    if j - 1 < len(lps) and not math.isnan(lps[j - 1]):
        return p_accept[plan_ref_bucket(edges, lps[j - 1])]
    return plan_ref_prior(priors, j)


def ref_propose_depth(widths, costs, priors, n, slack, max_seqs, idle_w=0.0):
    """propose_depth as docs/planner.md words it, line by line; with ``idle_w``, each step's
    energy is counted above that idle power (load-aware while no request waits)."""
    if n > max_seqs:
        return 0
    max_k = len(costs[0]) - 1

    def tokens(k):
        total, run = 0.0, 1.0
        for j in range(1, k + 1):
            run *= plan_ref_prior(priors, j)
            total += run
        return n * (1 + total)

    def step(k):
        c = plan_ref_cell(widths, costs, n, k)
        return c[0] + c[2], c[1] + c[3]

    r = min(1, max_k)
    reference = tokens(r) / step(r)[0]
    best = None
    for k in range(max_k + 1):
        ms, j = step(k)
        if tokens(k) / ms < (1 - slack) * reference:
            continue
        eff = tokens(k) / (j - idle_w * ms / 1000.0)
        if best is None or eff > best[1]:
            best = (k, eff)
    return r if best is None else best[0]


def ref_goodput_depth(widths, costs, priors, n, max_seqs):
    if n > max_seqs:
        return 0
    best = None
    for k in range(len(costs[0])):
        total, run = 0.0, 1.0
        for j in range(1, k + 1):
            run *= plan_ref_prior(priors, j)
            total += run
        c = plan_ref_cell(widths, costs, n, k)
        rate = n * (1 + total) / (c[0] + c[2])
        if best is None or rate > best[1]:
            best = (k, rate)
    return best[0]


def ref_explain(widths, costs, priors, n, slack, max_seqs):
    """Per depth: (k, tokens, step_ms, step_j, feasible) at width n, and propose's choice."""
    max_k = len(costs[0]) - 1
    rows = []
    for k in range(max_k + 1):
        total, run = 0.0, 1.0
        for j in range(1, k + 1):
            run *= plan_ref_prior(priors, j)
            total += run
        c = plan_ref_cell(widths, costs, n, k)
        rows.append([k, n * (1 + total), c[0] + c[2], c[1] + c[3]])
    r = min(1, max_k)
    floor = (1 - slack) * (rows[r][1] / rows[r][2])
    for row in rows:
        row.append(row[1] / row[2] >= floor)
    return [tuple(row) for row in rows], ref_propose_depth(widths, costs, priors, n, slack, max_seqs)


def ref_sequence_depths(widths, costs, edges, p_accept, priors, confidences, known, k_max, row_budget, slack):
    """sequence_depths as docs/planner.md words it, line by line: a full stable sort and a cost re-derived for every prefix."""
    n = len(confidences)
    max_k = len(costs[0]) - 1
    k_max = min(k_max, max_k)
    caps = [min(d, k_max) for d in known]
    depth = [min(c, 1) for c in caps]
    base_rows = sum(depth)
    if n == 0 or base_rows > row_budget:
        return [0] * n
    p = lambda i, j: ref_p(edges, p_accept, priors, confidences[i], j)  # noqa: E731
    base_tokens = float(n)
    for i in range(n):
        if depth[i] == 1:
            base_tokens += p(i, 1)
    extras = []
    for i in range(n):
        if depth[i] < 1:
            continue
        run = p(i, 1)
        for j in range(2, caps[i] + 1):
            run *= p(i, j)
            extras.append((run, i, j))
    order = sorted(range(len(extras)), key=lambda e: -extras[e][0])  # stable

    def cost(rows, field):
        d = rows / n
        lo, hi = min(math.floor(d), max_k), min(math.ceil(d), max_k)
        f = d - math.floor(d)
        v_lo = plan_ref_cell(widths, costs, n, lo)[field]
        v_hi = plan_ref_cell(widths, costs, n, hi)[field]
        return v_lo + (v_hi - v_lo) * f + plan_ref_cell(widths, costs, n, k_max)[field + 2]

    reference = base_tokens / cost(base_rows, 0)
    best_take, best = 0, base_tokens / cost(base_rows, 1)
    tokens = base_tokens
    for take in range(1, min(row_budget - base_rows, len(extras)) + 1):
        tokens += extras[order[take - 1]][0]
        rows = base_rows + take
        if tokens / cost(rows, 0) < (1 - slack) * reference:
            continue
        eff = tokens / cost(rows, 1)
        if eff > best:
            best_take, best = take, eff
    for e in order[:best_take]:
        depth[extras[e][1]] += 1
    return depth


# --- fitting (docs/calibration.md#fitting) -------------------------------------------------------------------------------
REF_MIN_OUTCOMES = 100


class RefRefused(Exception):
    """The reference refuses the input."""


def _is_count(v):
    if isinstance(v, bool):
        return False
    if isinstance(v, (int, np.integer)):
        return v >= 0
    if isinstance(v, (float, np.floating)):
        return math.isfinite(v) and float(v).is_integer() and v >= 0
    return False


def ref_fit(edges, accepted, rejected, steps):
    """docs/calibration.md#fitting fit: ``(p_accept, priors)`` as lists of floats, or raises RefRefused."""
    edges, accepted, rejected = list(edges), list(accepted), list(rejected)
    if len(edges) == 0:
        raise RefRefused("no edges")
    if len(accepted) != len(edges) or len(rejected) != len(edges):
        raise RefRefused("lengths differ")
    if not all(_is_count(v) for v in accepted + rejected):
        raise RefRefused("bad count")
    accepted = [int(v) for v in accepted]
    rejected = [int(v) for v in rejected]
    for key, c in steps.items():
        if not isinstance(key, tuple) or len(key) != 2:
            raise RefRefused("bad step key")
        d, a = key
        if not (_is_count(d) and _is_count(a) and _is_count(c)) or a > d:
            raise RefRefused("bad step")
    # The result must also be a valid calibration (docs/formats.md#acceptance-calibration): edges ascending as float32, last >= 0.
    if not all(isinstance(e, (int, float, np.number)) and not isinstance(e, bool) for e in edges):
        raise RefRefused("edge not a number")
    e32 = [np.float32(e) for e in edges]
    if any(not e32[i] < e32[i + 1] for i in range(len(e32) - 1)) or e32[-1] < 0 or math.isnan(e32[-1]):
        raise RefRefused("bad edges")

    # Pools: buckets from the last (most confident) down, each pool closing at >= 100 reached.
    pools = []
    open_pool = []
    open_reached = 0
    for b in reversed(range(len(edges))):
        open_pool.append(b)
        open_reached += accepted[b] + rejected[b]
        if open_reached >= REF_MIN_OUTCOMES:
            pools.append(open_pool)
            open_pool = []
            open_reached = 0
    if not pools:
        raise RefRefused("no pool")
    pools[-1] = pools[-1] + open_pool  # the low-end remainder joins the last closed pool
    p_accept = [None] * len(edges)
    for pool in pools:
        acc = sum(accepted[b] for b in pool)
        reached = sum(accepted[b] + rejected[b] for b in pool)
        for b in pool:
            p_accept[b] = acc / reached

    # Priors: position j reached by steps with d >= j and a >= j - 1.
    priors = []
    max_d = max([d for (d, a) in steps], default=0)
    for j in range(1, max_d + 1):
        reached = sum(int(c) for (d, a), c in steps.items() if d >= j and a >= j - 1)
        if reached < REF_MIN_OUTCOMES:
            break
        priors.append(sum(int(c) for (d, a), c in steps.items() if d >= j and a >= j) / reached)
    if not priors:
        raise RefRefused("no prior")
    return p_accept, priors


def fit_ref_bucket(edges, lp):
    """docs/calibration.md#queries bucket: first edge with lp <= edge, comparing float32 values; else the last."""
    with np.errstate(over="ignore"):
        lp = np.float32(lp)
    for i, e in enumerate(edges):
        if lp <= np.float32(e):
            return i
    return len(edges) - 1


def ref_bin_drafts(edges, rows, held_out_steps=()):
    """Bin per-draft rows ``(step, seq, position, confidence, accepted)``.

    Returns ``{group: (accepted, rejected, steps, nonfinite, unreached)}`` for groups "fit" and
    "held" (steps whose id is in ``held_out_steps``), or raises RefRefused for a broken chain.
    """
    chains = {}
    for step, seq, pos, conf, acc in rows:
        chains.setdefault((int(step), int(seq)), []).append((int(pos), float(conf), int(bool(acc))))
    out = {}
    for group in ("fit", "held"):
        out[group] = ([0] * len(edges), [0] * len(edges), {}, 0, 0)
    for (step, seq), chain in chains.items():
        chain.sort()
        if [p for p, _, _ in chain] != list(range(1, len(chain) + 1)):
            raise RefRefused(f"chain ({step}, {seq}) has positions {[p for p, _, _ in chain]}")
        group = "held" if step in held_out_steps else "fit"
        acc_b, rej_b, steps, nonfinite, unreached = out[group]
        reached = True
        run = 0
        for pos, conf, acc in chain:
            if not reached:
                unreached += 1
                continue
            if math.isfinite(conf):
                b = fit_ref_bucket(edges, conf)
                if acc:
                    acc_b[b] += 1
                else:
                    rej_b[b] += 1
            else:
                nonfinite += 1
            if acc:
                run += 1
            else:
                reached = False
        steps[(len(chain), run)] = steps.get((len(chain), run), 0) + 1
        out[group] = (acc_b, rej_b, steps, nonfinite, unreached)
    return out


def ref_conditional(rates, form="marginal"):
    """docs/calibration.md#queries: conditional rates from marginal ones, clamped to [0, 1], 0 after a zero marginal."""
    rates = [float(r) for r in rates]
    if form == "conditional":
        return rates
    out = []
    previous = 1.0
    after_zero = False
    for m in rates:
        out.append(0.0 if after_zero else min(1.0, max(0.0, m / previous)))
        if m == 0.0:
            after_zero = True
        previous = m
    return out


def ref_rate_per_reached(conditional):
    """Acceptance per reached draft of a chain of len(conditional) drafts with these rates."""
    reach = [1.0]
    for c in conditional:
        reach.append(reach[-1] * c)
    return sum(reach[1:]) / sum(reach[:-1])


def ref_steps_from_windows(rows):
    """Rows ``[accepted k, .., accepted 1, rejected]`` -> ``{(k, a): count}``."""
    steps = {}
    for row in rows:
        k = len(row) - 1
        for a in range(k + 1):
            steps[(k, a)] = steps.get((k, a), 0) + row[k - a]
    return steps


def ref_one_bucket_counts(steps):
    """Reached drafts of a step histogram: a accepted, plus one rejected when a < d."""
    accepted = sum(a * c for (d, a), c in steps.items())
    rejected = sum(c for (d, a), c in steps.items() if a < d)
    return accepted, rejected


def ref_wilson(k, n, z=1.959963984540054):
    p = k / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return centre - half, centre + half


# --- online calibration and drift (docs/telemetry.md) -------------------------------------------

def ref_online_step(edges, confidences, n_conf, accepted_run):
    """One scheduler step's counts, draft by draft: ``(accepted, rejected, steps, nonfinite)``
    with bucket lists, a ``(d, a) -> count`` dict and the NaN-confidence count. A sequence's
    reached drafts are positions ``1..min(a + 1, d)``; a sequence with no draft adds nothing."""
    b = len(edges)
    acc, rej, steps, nonfinite = [0] * b, [0] * b, {}, 0
    for row, d, a in zip(confidences, n_conf, accepted_run):
        d, a = int(d), int(a)
        if d == 0:
            continue
        for j in range(min(a + 1, d)):
            lp = row[j]
            if math.isnan(float(lp)):
                nonfinite += 1
                continue
            i = ref_bucket(edges, lp)
            if j < a:
                acc[i] += 1
            else:
                rej[i] += 1
        steps[(d, a)] = steps.get((d, a), 0) + 1
    return acc, rej, steps, nonfinite


def ref_online_counts(edges, batches, window=None, half_life=None):
    """Running counts after every batch: every step kept, the last ``window`` steps, or each
    step weighted ``2 ** (-age / half_life)`` (age 0 for the latest)."""
    per_step = [ref_online_step(edges, *b) for b in batches]
    if window is not None:
        per_step = per_step[-window:]
    n = len(per_step)
    b = len(edges)
    acc, rej, steps, nonfinite = [0.0] * b, [0.0] * b, {}, 0.0
    for t, (a_, r_, s_, nf) in enumerate(per_step):
        w = 1.0 if half_life is None else 2.0 ** (-(n - 1 - t) / half_life)
        for i in range(b):
            acc[i] += w * a_[i]
            rej[i] += w * r_[i]
        for k, c in s_.items():
            steps[k] = steps.get(k, 0.0) + w * c
        nonfinite += w * nf
    return acc, rej, steps, nonfinite


def ref_cusum(rates, shift, threshold, outcomes, dispersion=None):
    """Two-sided binomial CUSUM per stream, one step at a time.

    ``rates[m]`` is stream m's in-control rate (clamped to [0.001, 0.999]); ``outcomes`` is a
    list of steps, each a list of ``(n, k)`` per stream (outcomes, acceptances). The one-sided
    statistics (log-odds moved down, up by ``shift``) add ``k * log(p1 / p0) + (n - k) *
    log((1 - p1) / (1 - p0))`` and floor at 0 until the first time they exceed ``threshold``
    (then they are kept as they are); with ``dispersion``, stream m's ratios are divided by
    ``dispersion[m]``. Returns ``(stats, alarms)``: the final ``[down, up]`` statistics and
    ``{(m, direction): (start step, alarm step)}``."""
    stats = [[0.0, 0.0] for _ in rates]
    start = {}
    alarms = {}
    for t, step in enumerate(outcomes):
        for m, (n, k) in enumerate(step):
            if n == 0:
                continue
            p0 = min(max(rates[m], 1e-3), 1 - 1e-3)
            lo = math.log(p0 / (1 - p0))
            for dr, sign in ((0, -1.0), (1, 1.0)):
                p1 = 1 / (1 + math.exp(-(lo + sign * shift)))
                phi = 1.0 if dispersion is None else dispersion[m]
                s = stats[m][dr] + (k * math.log(p1 / p0) + (n - k) * math.log((1 - p1) / (1 - p0))) / phi
                latched = (m, dr) in alarms
                if s <= 0 and not latched:
                    stats[m][dr] = 0.0
                    continue
                if stats[m][dr] == 0 and not latched:
                    start[(m, dr)] = t
                stats[m][dr] = max(s, 0.0)
                if s > threshold and not latched:
                    alarms[(m, dr)] = (start[(m, dr)], t)
    return stats, alarms


# --- traces and replay ---------------------------------------------------------

import csv as _csv
import datetime as _dt
import json as _json
from decimal import Decimal as _Decimal


def ref_datetime_ns(text):
    """Nanoseconds since 1970 UTC of ``YYYY-MM-DD HH:MM:SS[.frac][Z|+HH:MM]`` via ``datetime``.

    The fraction is read as a decimal string, truncated to 9 digits (as the kernel does).
    """
    text = text.strip()
    base, offset = text[:19], 0
    rest = text[19:]
    frac = ""
    if rest.startswith("."):
        i = 1
        while i < len(rest) and rest[i].isdigit():
            i += 1
        frac, rest = rest[1:i], rest[i:]
    if rest == "Z":
        rest = ""
    if rest:
        sign = 1 if rest[0] == "+" else -1
        hh, mm = rest[1:].replace(":", "")[:2], rest[1:].replace(":", "")[2:]
        offset = sign * (int(hh) * 3600 + int(mm) * 60)
    moment = _dt.datetime.strptime(base.replace("T", " "), "%Y-%m-%d %H:%M:%S").replace(tzinfo=_dt.timezone.utc)
    secs = int((moment - _dt.datetime(1970, 1, 1, tzinfo=_dt.timezone.utc)).total_seconds()) - offset
    return secs * 1_000_000_000 + int((frac + "000000000")[:9] or 0)


def ref_requests(times, prompts, outputs, divisor=1):
    """Skip zero-token rows, sort stably by time, re-base to the first: ``(arrival_s, p, o)`` rows.

    ``times`` are exact values (ints or Decimals); arrivals come back as exact Decimals.
    """
    rows = [(t, p, o) for t, p, o in zip(times, prompts, outputs) if p > 0 and o > 0]
    rows.sort(key=lambda r: r[0])  # list.sort is stable
    if not rows:
        return []
    t0 = rows[0][0]
    return [(_Decimal(t - t0) / _Decimal(divisor), p, o) for t, p, o in rows]


def _ref_count(text):
    value = _Decimal(text.strip())
    if value != value.to_integral_value() or value < 0:
        raise ValueError(f"{text!r} is not a token count")
    return int(value)


def ref_read_csv(path, time_col, prompt_col, output_col, unit="s"):
    """A CSV trace read with the ``csv`` module: ``(rows, zero_token_count)``; unit ``datetime`` or seconds-based."""
    with open(path, newline="", encoding="utf-8-sig") as f:
        reader = _csv.DictReader(f)
        times, prompts, outputs = [], [], []
        for row in reader:
            if unit == "datetime":
                times.append(ref_datetime_ns(row[time_col]))
            else:
                times.append(_Decimal(row[time_col].strip()))
            prompts.append(_ref_count(row[prompt_col]))
            outputs.append(_ref_count(row[output_col]))
    divisor = {"datetime": 10**9, "s": 1, "ms": 1000, "us": 10**6, "ns": 10**9}[unit]
    zero = sum(1 for p, o in zip(prompts, outputs) if p == 0 or o == 0)
    return ref_requests(times, prompts, outputs, divisor), zero


def ref_read_mooncake(path):
    """A Mooncake JSONL trace read with the ``json`` module: ``(rows, zero_token_count)``."""
    times, prompts, outputs = [], [], []
    with open(path, encoding="utf-8") as f:
        for line in f:
            if not line.strip():
                continue
            obj = _json.loads(line)
            times.append(_Decimal(str(obj["timestamp"])))
            prompts.append(int(obj["input_length"]))
            outputs.append(int(obj["output_length"]))
    zero = sum(1 for p, o in zip(prompts, outputs) if p == 0 or o == 0)
    return ref_requests(times, prompts, outputs, 1000), zero


def ref_replay(digits, width, depth, budget, step_ms, step_j):
    """The replay loop over a list of digits: ``(tokens, steps, ms, joules)``.

    Costs are added once per step, in step order (the kernel's order, so sums compare exactly).
    """
    tokens = steps = cursor = 0
    ms = joules = 0.0
    while tokens < budget:
        if depth == 0:
            tokens += width
        else:
            for _ in range(width):
                a = digits[cursor % len(digits)]
                tokens += 1 + min(a, depth)
                cursor += 1
        ms += step_ms
        joules += step_j
        steps += 1
    return tokens, steps, ms, joules


def ref_trace_priors(digits, k_logged):
    """Conditional acceptance by position: #(a >= j) / #(a >= j - 1), entries clamped to k_logged."""
    a = [min(d, k_logged) for d in digits]
    out = []
    for j in range(1, k_logged + 1):
        reached = sum(1 for x in a if x >= j - 1)
        out.append(sum(1 for x in a if x >= j) / reached if reached else 0.0)
    return out


# -- fleets: replicas behind a router ----------------------------------------------------------------

class _RefReplica:
    """One single server of fixed depth ``k``, stepped one step at a time (the engine's model:
    admit first come first served, a prefill step over the admitted, else a decode step)."""

    def __init__(self, widths, costs, p_accept, occ_cdf, k, max_batch, prefill_ms, prefill_j, seed, spread_sd=0.0,
                 centre=None):
        self.widths, self.costs, self.p_accept, self.occ_cdf = widths, costs, p_accept, occ_cdf
        # The per-request spread: each bucket's centre, and the shift sd * z of the request at each row.
        self.spread_sd, self.centre = spread_sd, centre if spread_sd else None
        self.k, self.max_batch, self.prefill_ms, self.prefill_j, self.seed = k, max_batch, prefill_ms, prefill_j, seed
        self.reqs, self.first, self.finish, self.emitted, self.active = [], [], [], [], []
        self.blocks = []
        self.t, self.nxt = None, 0

    def add(self, request):
        if self.t is None:
            self.t = request[0]
        self.reqs.append(request)
        self.blocks.append(0)
        self.first.append(math.nan)
        self.finish.append(math.nan)
        self.emitted.append(0)

    def next_start(self):
        if self.active:
            return self.t
        if self.nxt < len(self.reqs):
            return max(self.t, self.reqs[self.nxt][0])
        return math.inf

    def outstanding(self):
        return sum(1 for i in range(len(self.reqs)) if math.isnan(self.finish[i]))

    def kv_used(self):
        """KV blocks (16 tokens) held by running requests: each holds blocks for its prompt,
        then for prompt + emitted + this step's drafts at every decode step, until it finishes."""
        return sum(self.blocks[i] for i in self.active)

    def step(self):
        from tests.reference_engine import ref_draft_accepted, ref_request_z

        while True:
            new = []
            while self.nxt < len(self.reqs) and len(self.active) < self.max_batch and self.reqs[self.nxt][0] <= self.t:
                self.active.append(self.nxt)
                new.append(self.nxt)
                self.nxt += 1
            if new:
                self.t = self.t + self.prefill_ms * sum(self.reqs[i][1] for i in new) / 1000.0
                for i in new:
                    self.blocks[i] = -(-self.reqs[i][1] // 16)
                    self.emitted[i] = 1
                    self.first[i] = self.t
                    if self.reqs[i][2] == 1:
                        self.finish[i] = self.t
                self.active = [i for i in self.active if self.emitted[i] < self.reqs[i][2]]
                return
            if not self.active:
                self.t = max(self.t, self.reqs[self.nxt][0])
                continue
            n = len(self.active)
            c = plan_ref_cell(self.widths, self.costs, n, self.k)
            self.t = self.t + (c[0] + c[2]) / 1000.0
            for i in self.active:
                e = self.emitted[i]
                self.blocks[i] = max(self.blocks[i], -(-(self.reqs[i][1] + e + self.k) // 16))
                need = self.reqs[i][2] - e - 1
                acc = 0
                for j in range(1, min(self.k, need) + 1):
                    shift = self.spread_sd * ref_request_z(self.seed, i) if self.centre else 0.0
                    if not ref_draft_accepted(self.occ_cdf, self.p_accept, self.seed, i, e + j - 1, j, self.centre,
                                              shift):
                        break
                    acc += 1
                self.emitted[i] = e + 1 + acc
                if self.emitted[i] == self.reqs[i][2]:
                    self.finish[i] = self.t
            self.active = [i for i in self.active if self.emitted[i] < self.reqs[i][2]]
            return


def ref_fleet(requests, replicas, router, widths, costs, p_accept, occ_cdf, k, *, max_batch=8, prefill_ms=0.0,
              prefill_j=0.0, seed=0, spread_sd=0.0, centre=None):
    """A fleet of ``replicas`` identical fixed-depth servers behind ``router``, one event at a time:
    route every arrival due at or before the earliest next step start (ties to the lower
    replica), else step that replica. Routers break ties by taking turns. Returns (assignment, first, finish) in trace order."""
    reps = [_RefReplica(widths, costs, p_accept, occ_cdf, k, max_batch, prefill_ms, prefill_j, seed, spread_sd, centre)
            for _ in range(replicas)]
    assignment, where = [], []
    nxt, last = 0, -1
    while True:
        starts = [r.next_start() for r in reps]
        best = min(range(replicas), key=lambda r: (starts[r], r))
        if nxt < len(requests) and (starts[best] == math.inf or requests[nxt][0] <= starts[best]):
            # Ties go to the first tied replica after the last one chosen.
            after = [(last + 1 + j) % replicas for j in range(replicas)]
            if router == "round_robin":
                r = nxt % replicas
            elif router == "least_outstanding":
                r = min(after, key=lambda x: (reps[x].outstanding(), after.index(x)))
            else:
                r = min(after, key=lambda x: (reps[x].kv_used(), after.index(x)))
            last = r
            assignment.append(r)
            where.append(len(reps[r].reqs))
            reps[r].add(requests[nxt])
            nxt += 1
            continue
        if starts[best] == math.inf:
            break
        reps[best].step()
    first = [reps[r].first[i] for r, i in zip(assignment, where)]
    finish = [reps[r].finish[i] for r, i in zip(assignment, where)]
    return assignment, first, finish


# --- the engine's draws (specsim/sim/_draw_kernels.py) ------------------------------------------------

def ref_occupancy_bucket(occ_cdf, u, position):
    """The bucket a draw ``u`` in [0, 1) falls in at draft ``position`` (1-based): scan row
    ``position - 1`` (the last row past the end) for the first cumulative weight above ``u``,
    the last bucket at most."""
    row = occ_cdf[min(position - 1, len(occ_cdf) - 1)]
    b = 0
    while b < len(row) - 1 and u >= row[b]:
        b += 1
    return b


# --- tables: the context axis ---------------------------------------------------------------------------------

def ref_context_cell(contexts, grids, n, k, c):
    """``cell(n, k)`` at context ``c`` over ``grids[i]``, a list of ``(n, k, vms, vj, dms, dj)``
    cells measured at ``contexts[i]`` (ascending): each measured width's costs linear in context
    between the two contexts around ``c`` (the nearest outside them), then linear in width as
    :func:`ref_cell`. None when ``k > max_k``."""
    lo_i = max((i for i, x in enumerate(contexts) if x <= c), default=None)
    hi_i = min((i for i, x in enumerate(contexts) if x >= c), default=None)
    if lo_i is None:
        lo_i = hi_i
    if hi_i is None or contexts[lo_i] == c:
        hi_i = lo_i
    t = 0.0 if lo_i == hi_i else (c - contexts[lo_i]) / (contexts[hi_i] - contexts[lo_i])
    by_key = [{(x[0], x[1]): tuple(x[2:6]) for x in g} for g in grids]

    def at_context(key):
        p = by_key[lo_i][key]
        if lo_i == hi_i:
            return p
        q = by_key[hi_i][key]
        return tuple(p[f] + (q[f] - p[f]) * t for f in range(4))

    cells = [(w, kk) + at_context((w, kk)) for (w, kk) in by_key[0]]
    return ref_cell(cells, n, k)


# --- draft trees (docs/planner.md#draft-trees) ------------------------------------------------------------------

def ref_tree_key(path, product):
    """The best-tree order's sort key: larger product first, then the rank path from the root
    (the first differing rank lower first, a path before its extensions: tuple order)."""
    return (-product, tuple(path))


def ref_greedy_order(a, nodes, max_depth):
    """The best-tree order by a plain greedy over lists: the frontier is every child of a taken
    node (and of the root) not yet taken; take its first by :func:`ref_tree_key`, ``nodes``
    times. Returns ``(parents, ranks, products)`` as lists; a path's product is
    ``a[0][r1 - 1] * a[1][r2 - 1] * ...``, multiplied from the root."""
    a = [list(map(float, row)) for row in a]
    depth_limit = min(len(a), max_depth)
    ranks_n = len(a[0])
    taken = []  # (path, product)
    index = {}
    frontier = {(r,): a[0][r - 1] for r in range(1, ranks_n + 1)}
    while len(taken) < nodes and frontier:
        path = min(frontier, key=lambda p: ref_tree_key(p, frontier[p]))
        product = frontier.pop(path)
        index[path] = len(taken)
        taken.append((path, product))
        if len(path) < depth_limit:
            for r in range(1, ranks_n + 1):
                frontier[path + (r,)] = product * a[len(path)][r - 1]
    parents = [index[p[:-1]] if len(p) > 1 else -1 for p, _ in taken]
    return parents, [p[-1] for p, _ in taken], [v for _, v in taken]


def ref_all_paths_order(a, nodes, max_depth):
    """The same order by sorting every path of depth <= min(D, max_depth) (small tables only):
    a second, independent route to the best tree. Returns the first ``nodes`` as
    ``[(path, product)]``."""
    a = [list(map(float, row)) for row in a]
    depth_limit = min(len(a), max_depth)
    paths = []
    level = [((), 1.0)]
    for d in range(depth_limit):
        level = [(p + (r,), (a[0][r - 1] if d == 0 else v * a[d][r - 1])) for p, v in level
                 for r in range(1, len(a[0]) + 1)]
        paths += level
    return sorted(paths, key=lambda e: ref_tree_key(*e))[:nodes]


def ref_expected_tokens(a, parents, ranks):
    """1 + the sum over nodes of each node's path product, summed in node order."""
    products = []
    depths = []
    for p, r in zip(parents, ranks):
        d = 1 if p < 0 else depths[p] + 1
        depths.append(d)
        products.append(float(a[0][r - 1]) if p < 0 else products[p] * float(a[d - 1][r - 1]))
    total = 0.0
    for v in products:
        total += v
    return 1.0 + total


def ref_level_passes(parents):
    """Per level 1..D, the nodes one level up that have children (the root for level 1)."""
    depths = []
    for p in parents:
        depths.append(1 if p < 0 else depths[p] + 1)
    if not depths:
        return []
    out = [0] * max(depths)
    out[0] = 1
    for i, d in enumerate(depths):
        if i in parents:
            out[d] += 1
    return out


def ref_tree_price(widths, costs, n, parents, ranks, factor):
    """``[verify_ms, verify_j, draft_ms, draft_j]`` of one step of the tree at width ``n``
    (docs/planner.md#pricing) over plain lists (``plan_ref_cell``'s table)."""
    nodes = len(parents)
    passes = ref_level_passes(parents)
    depth = len(passes)
    cell = plan_ref_cell(widths, costs, n, nodes)
    if all(r == 1 for r in ranks) and all(c == 1 for c in ref_level_sizes(parents)):
        return list(cell)
    draft_ms = draft_j = 0.0
    base = min(n, widths[-1])
    for rows in sorted(set(passes)):
        share = passes.count(rows) / depth
        c = plan_ref_cell(widths, costs, base * rows, depth)
        draft_ms += c[2] * share
        draft_j += c[3] * share
    return [cell[0] * factor, cell[1] * factor, draft_ms, draft_j]


def ref_level_sizes(parents):
    depths = []
    for p in parents:
        depths.append(1 if p < 0 else depths[p] + 1)
    return [depths.count(d) for d in range(1, max(depths, default=0) + 1)]


def ref_propose_tree(widths, costs, priors, a, n, slack, max_seqs, max_nodes, max_depth, factor, price=None):
    """Planner.propose_tree as docs/planner.md#draft-trees words it: ``(kind, parents, ranks)``
    of the candidate kept; ``a`` None for a calibration without a [tree] table. ``price(parents,
    ranks) -> (ms, J)``: a branching tree's step price, where not ``ref_tree_price`` on
    ``widths``, ``costs`` (the engine's plan at a live context prices trees as its step does)."""
    max_k = len(costs[0]) - 1
    if n > max_seqs:
        return "plain", [], []

    def chain_tokens(k):
        total, run = 0.0, 1.0
        for j in range(1, k + 1):
            run *= plan_ref_prior(priors, j)
            total += run
        return n * (1 + total)

    def chain_step(k):
        c = plan_ref_cell(widths, costs, n, k)
        return c[0] + c[2], c[1] + c[3]

    r = min(1, max_k)
    floor = (1 - slack) * (chain_tokens(r) / chain_step(r)[0])
    best = None  # (tokens per J, kind, parents, ranks)
    for k in range(min(max_k, max_depth) + 1):
        ms, j = chain_step(k)
        if chain_tokens(k) / ms < floor:
            continue
        eff = chain_tokens(k) / j
        if best is None or eff > best[0]:
            best = (eff, "plain" if k == 0 else "chain", list(range(-1, k - 1)), [1] * k)
    if best is None:
        best = (0.0, "chain" if r else "plain", list(range(-1, r - 1)), [1] * r)
    if a is not None:
        for nodes in range(2, min(max_nodes, max_k) + 1):
            parents, ranks, _ = ref_greedy_order(a, nodes, max_depth)
            if len(parents) < nodes:
                break
            if all(x == 1 for x in ranks) and all(c == 1 for c in ref_level_sizes(parents)):
                continue
            if price is None:
                vms, vj, dms, dj = ref_tree_price(widths, costs, n, parents, ranks, factor)
                ms, j = vms + dms, vj + dj
            else:
                ms, j = price(parents, ranks)
            tokens = n * ref_expected_tokens(a, parents, ranks)
            if tokens / ms < floor:
                continue
            if tokens / j > best[0]:
                best = (tokens / j, "tree", parents, ranks)
    return best[1], best[2], best[3]
