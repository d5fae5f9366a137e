"""Plain, slow, obviously-correct versions of specsim's kernels, for tests to compare against.

Each section follows SPEC's text line by line, in plain Python over lists and dicts, with no
Numba and no vectorising. Append new sections at the end, each under its own heading.
"""

from __future__ import annotations

import math

import numpy as np

# --- core (§1-§2) ------------------------------------------------------------------------------

COSTS = ("verify_ms", "verify_j", "draft_ms", "draft_j")


def ref_cell(cells, n, k):
    """SPEC §1.3 ``cell(n, k)`` over a list of ``(n, k, vms, vj, dms, dj)`` tuples.

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
    """SPEC §1.2: the set of ``(rule, cell index or None)`` a grid breaks; empty when valid."""
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
    """``x`` rounded to float32 (as the seed stores edges and confidences), back as a Python float."""
    return float(np.float32(x))


def ref_bucket(edges, lp):
    """SPEC §2.2: the first ``i`` with ``lp <= edges[i]`` in float32; the last bucket above all."""
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
    """SPEC §2.2: ``sum_{j=1..k} prod_{t=1..j} p_t``, folded left to right."""
    run, total = 1.0, 0.0
    for j in range(1, k + 1):
        run *= ref_p_position(edges, p_accept, priors, lps, j)
        total += run
    return total


def ref_calibration_rules(edges, p_accept, priors):
    """SPEC §2.1: the set of rules broken (edges compared as float32)."""
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
    """SPEC §2.2: ``c_j = m_j / m_{j-1}`` (``m_0 = 1``) clamped to [0, 1], 0 after a zero marginal."""
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
