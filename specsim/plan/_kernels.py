"""Numba kernels of the depth planner (SPEC §4).

Every ratio, interpolation, product and sum is computed in float64 in the order SPEC §4 writes
it, so answers are bit-identical to the plain reference; the speed comes from doing less work,
never from reassociating arithmetic.

Inputs are the table's flat arrays (``widths int64[W]``, ``costs float64[W, K + 1, 4]``), the
calibration's (``edges float32[B]``, ``p_accept float64[B]``, ``priors float64[P]``) and
``cum_priors float64[K + 1]`` with ``cum_priors[k] = sum_{j<=k} prod_{t<=j} prior(t)``.
"""

from __future__ import annotations

import numpy as np

from specsim.plan._types import SORT_BUCKETS

from specsim._jit import jit
from specsim.calibration._kernels import bucket_fast_nb
from specsim.table._kernels import bracket_nb

VMS, VJ, DMS, DJ = 0, 1, 2, 3


@jit
def cum_priors_nb(priors, max_k, out):
    """``out[k] = sum_{j=1..k} prod_{t<=j} prior(t)`` for k = 0..max_k (running, left to right)."""
    run = 1.0
    total = 0.0
    out[0] = 0.0
    last = priors.shape[0] - 1
    for j in range(1, max_k + 1):
        i = j - 1 if j - 1 < last else last
        run *= priors[i]
        total += run
        out[j] = total


@jit
def width_costs_nb(widths, costs, n, out):
    """Interpolate every depth's four costs at width ``n`` into ``out float64[K + 1, 4]``.

    The same arithmetic as ``cell_into_nb``, bracketing the width once for all depths.
    """
    a, b = bracket_nb(widths, n)
    if a == b or b < 0 or a < 0:
        src = a if b < 0 or a == b else b
        for k in range(costs.shape[1]):
            for f in range(4):
                out[k, f] = costs[src, k, f]
        return
    t = (n - widths[a]) / (widths[b] - widths[a])
    for k in range(costs.shape[1]):
        for f in range(4):
            p = costs[a, k, f]
            out[k, f] = p + (costs[b, k, f] - p) * t


@jit
def propose_depth_nb(widths, costs, cum_priors, n, slack, max_seqs, scratch):
    """One draft depth for a batch of width ``n`` before drafting (SPEC §4.1).

    ``scratch`` is ``float64[K + 1, 4]`` workspace (overwritten).
    """
    if n > max_seqs:
        return 0
    max_k = costs.shape[1] - 1
    width_costs_nb(widths, costs, n, scratch)
    r = 1 if max_k >= 1 else 0
    nf = float(n)
    reference = nf * (1.0 + cum_priors[r]) / (scratch[r, VMS] + scratch[r, DMS])
    floor_rate = (1.0 - slack) * reference
    best_k = -1
    best = 0.0
    for k in range(max_k + 1):
        tokens = nf * (1.0 + cum_priors[k])
        if tokens / (scratch[k, VMS] + scratch[k, DMS]) < floor_rate:
            continue
        eff = tokens / (scratch[k, VJ] + scratch[k, DJ])
        if best_k < 0 or eff > best:
            best = eff
            best_k = k
    return r if best_k < 0 else best_k


@jit
def goodput_depth_nb(widths, costs, cum_priors, n, max_seqs, scratch):
    """The depth with the most expected tokens per ms at width ``n``; energy ignored.

    What throughput-only planners optimise (vLLM's dynamic speculation, SmartSpec): ties keep
    the shallower depth, and above the speculation cap the batch plain-decodes.
    """
    if n > max_seqs:
        return 0
    width_costs_nb(widths, costs, n, scratch)
    nf = float(n)
    best_k = 0
    best = -1.0
    for k in range(costs.shape[1]):
        rate = nf * (1.0 + cum_priors[k]) / (scratch[k, VMS] + scratch[k, DMS])
        if rate > best:
            best = rate
            best_k = k
    return best_k


@jit
def propose_table_nb(widths, costs, cum_priors, slack, max_seqs, out, scratch):
    """``out[n] = propose_depth(n)`` for n = 0..len(out) - 1 (a Planner's memo)."""
    for n in range(out.shape[0]):
        out[n] = propose_depth_nb(widths, costs, cum_priors, n, slack, max_seqs, scratch)


@jit
def propose_many_nb(memo, widths, costs, cum_priors, slack, max_seqs, ns, out, scratch):
    """Depths for an array of widths: the memo where it reaches, the kernel beyond."""
    top = memo.shape[0]
    for i in range(ns.shape[0]):
        n = ns[i]
        if n < top:
            out[i] = memo[n]
        else:
            out[i] = propose_depth_nb(widths, costs, cum_priors, n, slack, max_seqs, scratch)


@jit
def row_cost_nb(vc, n, rows, max_k, sunk):
    """Verify cost of ``rows`` draft rows over ``n`` sequences, plus the sunk draft cost.

    ``vc`` holds one verify cost per depth at width ``n``; the depth ``rows / n`` falls between
    two integer depths and the cost is interpolated between them (SPEC §4.2). This is the exact
    arithmetic; the scan below only calls it when a cheaper bound cannot decide. The serving
    simulator prices per-sequence steps with it, so it charges the cost the planner optimised.
    """
    depth = rows / n
    lo = np.floor(depth)
    hi = np.ceil(depth)
    f = depth - lo
    ilo = int(lo) if lo < max_k else max_k
    ihi = int(hi) if hi < max_k else max_k
    v = vc[ilo] + (vc[ihi] - vc[ilo]) * f
    return v + sunk


# The size above which a bucket of the counting sort is heap-sorted apart.
SMALL_BUCKET = 32
# Relative width of the bounds that decide comparisons without dividing (see _scan_nb).
TOL = 1e-9
GUARD = 1e-12


@jit
def _insertion_desc(ordered, start, stop):
    for t in range(start + 1, stop):
        x = ordered[t]
        q = t - 1
        while q >= start and ordered[q] < x:
            ordered[q + 1] = ordered[q]
            q -= 1
        ordered[q + 1] = x


@jit
def _sift_down_min(a, start, root, end):
    """Restore a min-heap on ``a[start:end]`` (heap index ``root``, 0-based from ``start``)."""
    while True:
        child = 2 * root + 1
        if child >= end - start:
            return
        if child + 1 < end - start and a[start + child + 1] < a[start + child]:
            child += 1
        if a[start + child] < a[start + root]:
            x = a[start + root]
            a[start + root] = a[start + child]
            a[start + child] = x
            root = child
        else:
            return


@jit
def _heapsort_desc(a, start, stop):
    """Sort ``a[start:stop]`` descending in place: O(m log m) for a crowded bucket. (Written out
    rather than ndarray.sort, whose generic quicksort costs seconds of compilation.)"""
    m = stop - start
    for root in range(m // 2 - 1, -1, -1):
        _sift_down_min(a, start, root, stop)
    for end in range(m - 1, 0, -1):
        x = a[start]
        a[start] = a[start + end]
        a[start + end] = x
        _sift_down_min(a, start, 0, start + end)


@jit
def sort_gains_desc_nb(gains, count, ordered, counts):
    """``ordered[:count]`` = ``gains[:count]`` sorted descending (gains are >= 0).

    A counting sort on the leading bits of the float64 pattern (non-negative doubles order as
    their bit patterns) into about two buckets per value, then one insertion pass that only
    has to fix order inside buckets: linear time for the gains a planner sees, where a
    comparison sort of n * K values would dominate the call. A crowded bucket (values packed
    far closer than their spread) is sorted on its own instead. ``counts`` is
    ``int64[2 * SORT_BUCKETS + 1]`` workspace.
    """
    if count <= SMALL_BUCKET:
        for t in range(count):
            ordered[t] = gains[t]
        _insertion_desc(ordered, 0, count)
        return
    bits = gains[:count].view(np.int64)
    umin = bits[0]
    umax = bits[0]
    for e in range(1, count):
        u = bits[e]
        umin = min(umin, u)
        umax = max(umax, u)
    limit = 2 * count if count < SORT_BUCKETS else 2 * SORT_BUCKETS
    shift = 20
    while (umax >> shift) - (umin >> shift) >= limit:
        shift += 1
    base = umin >> shift
    nb = (umax >> shift) - base + 1
    for b in range(nb):
        counts[b] = 0
    crowded = 0
    for e in range(count):
        b = (bits[e] >> shift) - base
        c = counts[b] + 1
        counts[b] = c
        crowded = max(crowded, c)
    # Bucket b starts after every bucket above it: descending order.
    pos = 0
    for b in range(nb - 1, -1, -1):
        c = counts[b]
        counts[b] = pos
        pos += c
    for e in range(count):
        b = (bits[e] >> shift) - base
        ordered[counts[b]] = gains[e]
        counts[b] += 1
    if crowded <= SMALL_BUCKET:
        _insertion_desc(ordered, 0, count)
        return
    # counts[b] is now the end of bucket b.
    start = 0
    for b in range(nb - 1, -1, -1):
        stop = counts[b]
        size = stop - start
        if size > SMALL_BUCKET:
            _heapsort_desc(ordered, start, stop)
        elif size > 1:
            _insertion_desc(ordered, start, stop)
        start = stop


@jit
def sequence_depths_nb(arrays, conf, n_conf, known, k_max, row_budget, slack, out, ws):
    """How many of each sequence's drafts to verify, after drafting (SPEC §4.2).

    Parameters
    ----------
    arrays : PlanArrays
        The table and calibration (see ``plan._types.plan_arrays``).
    conf : ndarray(float32, ndim=2), shape (n, m)
        Top-1 log-probabilities of each sequence's drafts; NaN or columns past ``n_conf`` are
        unmeasured and take the position prior. C-contiguous.
    n_conf, known : ndarray(int64, ndim=1), shape (n,)
        Real confidences and drafts available per sequence.
    k_max, row_budget : int
    slack : float
    out : ndarray(int64, ndim=1), shape (n,)
        Modified in place: the depths.
    ws : PlanWorkspace
        Scratch for at least ``n`` sequences (see ``plan._types.plan_workspace``); overwritten.

    Returns
    -------
    int
        Total draft rows planned.
    """
    widths, costs, edges, cells, p_accept, priors = arrays
    gains, owner, counts, wc = ws
    n = conf.shape[0]
    max_k = costs.shape[1] - 1
    kk = k_max if k_max < max_k else max_k
    if kk < 0:
        kk = 0
    for i in range(n):
        out[i] = 0
    if n == 0:
        return 0
    base_rows = 0
    for i in range(n):
        cap = known[i] if known[i] < kk else kk
        if cap >= 1:
            base_rows += 1
    if base_rows > row_budget:
        return 0

    # Base tokens and every extra row's gain, in sequence order then depth order. The position
    # probabilities are SPEC §2.2's (NaN or absent: the prior), buckets through the coarse index.
    bits = conf.view(np.int32)
    m = conf.shape[1]
    last_prior = priors.shape[0] - 1
    base_tokens = float(n)
    extras = 0
    for i in range(n):
        cap = known[i] if known[i] < kk else kk
        if cap < 1:
            continue
        out[i] = 1
        real = n_conf[i] if n_conf[i] < m else m
        if real > cap:
            real = cap
        # Position 1 feeds the base tokens; positions 2..cap are the extra rows' gains. Positions
        # with a real confidence come first, then the ones that take the prior: two tight loops.
        run = priors[0]
        if real >= 1:
            lp = conf[i, 0]
            if lp == lp:
                run = p_accept[bucket_fast_nb(edges, cells, lp, bits[i, 0])]
        base_tokens += run
        for j in range(2, real + 1):
            lp = conf[i, j - 1]
            if lp == lp:
                p = p_accept[bucket_fast_nb(edges, cells, lp, bits[i, j - 1])]
            else:
                p = priors[j - 1 if j - 1 < last_prior else last_prior]
            run *= p
            gains[extras] = run
            owner[extras] = i
            extras += 1
        for j in range(real + 1 if real >= 1 else 2, cap + 1):
            run *= priors[j - 1 if j - 1 < last_prior else last_prior]
            gains[extras] = run
            owner[extras] = i
            extras += 1
    take_max = row_budget - base_rows
    if take_max > extras:
        take_max = extras
    if take_max <= 0:
        return base_rows

    # Equal gains are equal values, so the running sums do not depend on how ties are ordered;
    # the tie order matters only when rows are assigned, below.
    ordered = gains[extras:2 * extras]
    sort_gains_desc_nb(gains, extras, ordered, counts)
    width_costs_nb(widths, costs, n, wc)
    best_take = _scan_nb(wc, n, max_k, kk, base_tokens, base_rows, take_max, ordered, slack)
    if best_take == 0:
        return base_rows

    # Rows strictly above the cut gain are all in; of the rows equal to it, the first ones in
    # (sequence, depth) order fill the remaining places: the stable order of SPEC §4.2.
    cut = ordered[best_take - 1]
    ties = 0
    for t in range(best_take):
        if ordered[t] == cut:
            ties += 1
    for e in range(extras):
        g = gains[e]
        if g > cut:
            out[owner[e]] += 1
        elif g == cut and ties > 0:
            out[owner[e]] += 1
            ties -= 1
    return base_rows + best_take


@jit
def _scan_nb(wc, n, max_k, kk, base_tokens, base_rows, take_max, ordered, slack):
    """The best prefix of the descending gains (SPEC §4.2's scan), 0 for none.

    Every prefix is visited. Rows advance through depth segments ``[lo, lo + 1)``, inside which
    a row cost is affine in ``rem / n``; each comparison is first decided from bounds on the
    cost, built with multiplications only. When a bound cannot decide (a near-tie), the exact
    SPEC arithmetic decides, so the answer is bit for bit the plain scan's.
    """
    vms = wc[:, VMS]
    vj = wc[:, VJ]
    sunk_ms = wc[kk, DMS]
    sunk_j = wc[kk, DJ]
    reference = base_tokens / row_cost_nb(vms, n, base_rows, max_k, sunk_ms)
    floor_rate = (1.0 - slack) * reference
    floor_lo = floor_rate * (1.0 - GUARD)
    floor_hi = floor_rate * (1.0 + GUARD)
    inv_n = 1.0 / n

    lo = base_rows // n
    rem = base_rows - lo * n
    best_take = 0
    best_tokens = base_tokens
    best_rows = base_rows
    # Bounds on the best prefix's exact joules, and the exact tokens/J once a tie needs it.
    d = vj[lo + 1] - vj[lo] if lo < max_k else 0.0
    est = vj[lo] + sunk_j + d * (rem * inv_n)
    tol = TOL * (abs(vj[lo]) + abs(d) + abs(sunk_j))
    best_j_lo = est - tol
    best_j_hi = est + tol
    best_exact = -1.0

    tokens = base_tokens
    take = 0
    while take < take_max:
        # One depth segment: the row costs are a + d * rem / n for rem in (rem, n].
        nxt = lo + 1 if lo < max_k else max_k
        a_ms = vms[lo] + sunk_ms
        d_ms = vms[nxt] - vms[lo]
        tol_ms = TOL * (abs(vms[lo]) + abs(d_ms) + abs(sunk_ms))
        a_j = vj[lo] + sunk_j
        d_j = vj[nxt] - vj[lo]
        tol_j = TOL * (abs(vj[lo]) + abs(d_j) + abs(sunk_j))
        stop = n - rem
        if stop > take_max - take:
            stop = take_max - take
        for step in range(1, stop + 1):
            tokens += ordered[take + step - 1]
            f = (rem + step) * inv_n
            ms = a_ms + d_ms * f
            if tokens < floor_lo * (ms - tol_ms):
                continue
            rows = base_rows + take + step
            if not tokens > floor_hi * (ms + tol_ms):
                if tokens / row_cost_nb(vms, n, rows, max_k, sunk_ms) < floor_rate:
                    continue
            j = a_j + d_j * f
            if tokens * best_j_lo > best_tokens * (j + tol_j) * (1.0 + GUARD):
                better = True
            elif tokens * best_j_hi < best_tokens * (j - tol_j) * (1.0 - GUARD):
                better = False
            else:
                if best_exact < 0.0:
                    best_exact = best_tokens / row_cost_nb(vj, n, best_rows, max_k, sunk_j)
                better = tokens / row_cost_nb(vj, n, rows, max_k, sunk_j) > best_exact
            if better:
                best_take = take + step
                best_tokens = tokens
                best_rows = rows
                best_j_lo = j - tol_j
                best_j_hi = j + tol_j
                best_exact = -1.0
        take += stop
        rem += stop
        if rem == n:
            rem = 0
            lo += 1
    return best_take


@jit
def sequence_depths_many_nb(arrays, conf, n_conf, known, offsets, k_max, row_budget, slack, out, ws):
    """:func:`sequence_depths_nb` for many batches laid end to end.

    ``offsets int64[B + 1]``: batch ``b`` is rows ``offsets[b]:offsets[b + 1]`` of ``conf``,
    ``n_conf``, ``known`` and ``out``; ``k_max`` and ``row_budget`` are ``int64[B]``.
    """
    for b in range(offsets.shape[0] - 1):
        s = offsets[b]
        e = offsets[b + 1]
        sequence_depths_nb(arrays, conf[s:e], n_conf[s:e], known[s:e], k_max[b], row_budget[b], slack, out[s:e], ws)
