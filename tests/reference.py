"""Plain, slow, obviously-correct versions of specsim's kernels, written from SPEC's text.

Each section is independent of the package's code: tests compare the kernels with these.
"""

from __future__ import annotations

import math

import numpy as np


# --- planner (§4) -------------------------------------------------------------------------------

def ref_cell(widths, costs, n, k):
    """SPEC §1.3 cell(n, k) over plain lists: ``widths[i]`` -> ``costs[i][k] = [vms, vj, dms, dj]``."""
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


def ref_bucket(edges, lp):
    lp = np.float32(lp)
    for i, e in enumerate(edges):
        if lp <= np.float32(e):
            return i
    return len(edges) - 1


def ref_prior(priors, j):
    return priors[min(max(j - 1, 0), len(priors) - 1)]


def ref_p(edges, p_accept, priors, lps, j):
    """P(accept) of 1-based draft j of a chain with confidences ``lps``; NaN/absent -> prior."""
    if j - 1 < len(lps) and not math.isnan(lps[j - 1]):
        return p_accept[ref_bucket(edges, lps[j - 1])]
    return ref_prior(priors, j)


def ref_propose_depth(widths, costs, priors, n, slack, max_seqs):
    """SPEC §4.1, line by line."""
    if n > max_seqs:
        return 0
    max_k = len(costs[0]) - 1

    def tokens(k):
        total, run = 0.0, 1.0
        for j in range(1, k + 1):
            run *= ref_prior(priors, j)
            total += run
        return n * (1 + total)

    def step(k):
        c = ref_cell(widths, costs, n, k)
        return c[0] + c[2], c[1] + c[3]

    r = min(1, max_k)
    reference = tokens(r) / step(r)[0]
    best = None
    for k in range(max_k + 1):
        ms, j = step(k)
        if tokens(k) / ms < (1 - slack) * reference:
            continue
        eff = tokens(k) / j
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
            run *= ref_prior(priors, j)
            total += run
        c = ref_cell(widths, costs, n, k)
        rate = n * (1 + total) / (c[0] + c[2])
        if best is None or rate > best[1]:
            best = (k, rate)
    return best[0]


def ref_sequence_depths(widths, costs, edges, p_accept, priors, confidences, known, k_max, row_budget, slack):
    """SPEC §4.2, line by line: a full stable sort and a cost re-derived for every prefix."""
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
        v_lo = ref_cell(widths, costs, n, lo)[field]
        v_hi = ref_cell(widths, costs, n, hi)[field]
        return v_lo + (v_hi - v_lo) * f + ref_cell(widths, costs, n, k_max)[field + 2]

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
