"""Numba kernels of the depth planner (docs/planner.md).

Every ratio, interpolation, product and sum is computed in float64 in the order docs/planner.md
writes it, so answers are bit-identical to the plain reference; the speed comes from doing less work,
never from reassociating arithmetic.

Inputs are the table's flat arrays (``widths int64[W]``, ``costs float64[W, K + 1, 4]``), the
calibration's (``edges float32[B]``, ``p_accept float64[B]``, ``priors float64[P]``) and
``cum_priors float64[K + 1]`` with ``cum_priors[k] = sum_{j<=k} prod_{t<=j} prior(t)``.

Why one module of this size: the batch-depth and per-sequence kernels share the gain, cost and
scan helpers whose arithmetic must stay bit-identical between them; split, one arithmetic would
live in two files.
"""

from __future__ import annotations

import numpy as np

from specsim._jit import jit
from specsim.plan._sort import bucket_gains_desc_nb, sort_buckets_nb
from specsim.table._kernels import bracket_nb, context_row_nb

# The cost axis of a table, defined once in specsim.table._types.
from specsim.table._types import DRAFT_J as DJ, DRAFT_MS as DMS, VERIFY_J as VJ, VERIFY_MS as VMS
# Unsigned subscripts in hot loops: Numba skips negative-index wraparound for them.
U = np.uintp


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


@jit(forceinline=True)
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


@jit(forceinline=True, internal=True)
def _propose_nb(widths, costs, cum_priors, n, slack, max_seqs, idle_w, scratch):
    """The propose rule at width ``n`` with each step's energy counted above ``idle_w`` watts:
    the most tokens per ``(verify_j + draft_j) - idle_w * (verify_ms + draft_ms) / 1000`` among
    the depths that keep the speed floor (``idle_w = 0``: the propose rule itself)."""
    if n > max_seqs:
        return 0
    width_costs_nb(widths, costs, n, scratch)
    return _choose_nb(scratch, cum_priors, n, slack, idle_w)


@jit(forceinline=True, internal=True)
def _choose_nb(row, cum_priors, n, slack, idle_w):
    """The propose rule's choice at width ``n`` among its depths' costs ``row`` (float64[K + 1, 4],
    the grid interpolated at ``n``), energy counted above ``idle_w`` watts."""
    max_k = row.shape[0] - 1
    r = 1 if max_k >= 1 else 0
    nf = float(n)
    reference = nf * (1.0 + cum_priors[r]) / (row[r, VMS] + row[r, DMS])
    floor_rate = (1.0 - slack) * reference
    best_k = -1
    best = 0.0
    for k in range(max_k + 1):
        tokens = nf * (1.0 + cum_priors[k])
        ms = row[k, VMS] + row[k, DMS]
        if tokens / ms < floor_rate:
            continue
        eff = tokens / ((row[k, VJ] + row[k, DJ]) - idle_w * ms / 1000.0)
        if best_k < 0 or eff > best:
            best = eff
            best_k = k
    return r if best_k < 0 else best_k


@jit
def propose_depth_nb(widths, costs, cum_priors, n, slack, max_seqs, scratch):
    """One draft depth for a batch of width ``n`` before drafting (docs/planner.md).

    ``scratch`` is ``float64[K + 1, 4]`` workspace (overwritten).
    """
    return _propose_nb(widths, costs, cum_priors, n, slack, max_seqs, 0.0, scratch)


@jit
def propose_at_context_nb(widths, contexts, context_costs, c, cum_priors, n, slack, max_seqs):
    """``propose_depth_nb`` on the table's grid at context ``c``, in one call: the grid is
    interpolated in context exactly as ``CostTable.at_context`` interpolates it (only where width
    ``n`` reads it), so the depth is the one planning on that table gives. Its workspace, the
    depths' costs at ``n`` (``float64[K + 1, 4]``), is sized here from ``context_costs`` and made
    in the kernel: a call from Python makes no array."""
    if n > max_seqs:
        return 0
    row = np.empty((context_costs.shape[2], 4))
    context_row_nb(widths, contexts, context_costs, c, n, row)
    return _choose_nb(row, cum_priors, n, slack, 0.0)


@jit
def above_idle_table_nb(widths, costs, cum_priors, slack, max_seqs, idle_w, out, scratch):
    """``out[n]``: the propose rule at every width with step energy counted above ``idle_w``
    watts (the ``load-aware`` policy's depth while no request waits; docs/planner.md)."""
    for n in range(out.shape[0]):
        out[n] = _propose_nb(widths, costs, cum_priors, n, slack, max_seqs, idle_w, scratch)


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
def goodput_table_nb(widths, costs, cum_priors, max_seqs, out, scratch):
    """``out[n] = goodput_depth(n)`` for n = 0..len(out) - 1."""
    for n in range(out.shape[0]):
        out[n] = goodput_depth_nb(widths, costs, cum_priors, n, max_seqs, scratch)


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
    two integer depths and the cost is interpolated between them (docs/planner.md). This is the exact
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


# Relative width of the bounds that decide comparisons without dividing (see _scan_nb).
TOL = 1e-9
GUARD = 1e-12


@jit(forceinline=True, internal=True)
def _caps_nb(n_conf, known, kk, m, caps, reals, out):
    """Per sequence: ``caps[i] = min(known[i], kk)`` and ``reals[i]``, its positions with a real
    confidence (at most ``m`` and the cap); both clamped to >= 0; ``out[i]``, its first draft's
    row (1 where the cap is at least 1). Returns the base rows."""
    base_rows = 0
    for i in range(n_conf.shape[0]):
        ui = U(i)
        cap = known[ui]
        cap = cap if cap < kk else kk
        cap = cap if cap > 0 else 0
        real = n_conf[ui]
        real = real if real < m else m
        real = real if real < cap else cap
        caps[ui] = cap
        reals[ui] = real if real > 0 else 0
        first = 1 if cap > 0 else 0
        out[ui] = first
        base_rows += first
    return base_rows


@jit(forceinline=True, internal=True)
def _bucket_p(edges, cells, p_accept, last, lp, b):
    """``p_accept`` of the bucket of ``lp`` (not NaN; ``b`` its bit pattern) through the coarse
    index ``cells`` (``calibration.bucket_cells``): the bucket of the lowest float of the cell,
    then a step up per edge below ``lp`` (rarely one, never more than the edges in the cell)."""
    q = cells[U((((b ^ ((b >> 31) & 0x7FFFFFFF)) >> 20) + 2048))]
    while q < last and lp > edges[U(q)]:
        q += 1
    return p_accept[U(q)]


@jit(forceinline=True, internal=True)
def _cell_p(cell_p, b):
    """``cell_p``'s entry for the coarse cell of bit pattern ``b``: the probability of every value
    in the cell, or -1 where the cell spans more than one bucket or holds NaN (then the caller
    looks the value up with :func:`_bucket_p`, or takes the prior for NaN)."""
    return cell_p[U((((b ^ ((b >> 31) & 0x7FFFFFFF)) >> 20) + 2048))]


@jit(forceinline=True)
def _first_gains_nb(arrays, cell_p, conf, caps, reals, strided, stride):
    """The base tokens and every sequence's first extra row's gain (its second draft's), which
    goes to ``strided[i * stride]``: two probability lookups per sequence, where every gain would
    take one per draft. Often enough to prove that no extra row pays (``_no_prefix_reaches``), and
    then the deeper gains are never looked up.

    A sequence's gains never increase with depth (each probability is at most 1, and rounding a
    product is monotone), so its first extra row's gain is its greatest and bounds each of the
    others.

    Returns
    -------
    (float, int, float, float)
        ``n + sum_i p(i, 1)`` over sequences with a first draft (left to right), the number of
        extra rows, the greatest gain and ``sum_i (cap_i - 1) * gain(i, 2)``, at least the sum of
        every gain (up to rounding: only ever used as a bound). Zeros when there is no extra row.
    """
    n = conf.shape[0]
    bits = conf.view(np.int32)
    edges, cells, p_accept, priors = arrays.edges, arrays.cells, arrays.p_accept, arrays.priors
    last = edges.shape[0] - 1
    table = cell_p.shape[0] > 0
    prior_1 = priors[0]
    prior_2 = priors[1 if priors.shape[0] > 1 else 0]
    base_tokens = float(n)
    extras = 0
    highest = -1.0
    bound = 0.0
    for i in range(n):
        ui = U(i)
        cap = caps[ui]
        if cap < 1:
            continue
        real = reals[ui]
        g = prior_1
        if real >= 1:
            b = bits[ui, U(0)]
            g = _cell_p(cell_p, b) if table else -1.0
            if g < 0.0:
                lp = conf[ui, U(0)]
                g = _bucket_p(edges, cells, p_accept, last, lp, b) if lp == lp else prior_1  # NaN: the prior
        base_tokens += g
        if cap < 2:
            continue
        p = prior_2
        if real >= 2:
            b = bits[ui, U(1)]
            p = _cell_p(cell_p, b) if table else -1.0
            if p < 0.0:
                lp = conf[ui, U(1)]
                p = _bucket_p(edges, cells, p_accept, last, lp, b) if lp == lp else prior_2
        g = g * p
        strided[U(i * stride)] = g
        extras += cap - 1
        highest = g if g > highest else highest
        bound += g * (cap - 1)
    if extras == 0:
        return base_tokens, 0, 0.0, 0.0
    return base_tokens, extras, highest, bound


@jit(forceinline=True)
def _gains_nb(arrays, cell_p, conf, caps, reals, strided, stride, compact):
    """Every extra row's gain, after :func:`_first_gains_nb` wrote each sequence's first.

    Walks sequence by sequence, each sequence's running product in a register, its caps and
    counts read once: a sequence's lookups do not wait on each other (only its products do), and
    the next sequence's products are independent of this one's, so the CPU overlaps them. Row
    ``(i, j)``'s gain goes to ``strided[i * stride + j - 2]`` (for assigning depths) and to the
    next free place of ``compact`` (for sorting; both written in order). Subscripts are unsigned
    (``U``) because Numba then skips its negative-index wraparound: here that is most of the work.

    Returns
    -------
    (float, float)
        The least gain and the sum of every gain in the order written (only ever used as a bound:
        it is not the sum in descending order). ``(2.0, 0.0)`` when there is none.
    """
    n = conf.shape[0]
    bits = conf.view(np.int32)
    edges, cells, p_accept, priors = arrays.edges, arrays.cells, arrays.p_accept, arrays.priors
    last = edges.shape[0] - 1
    table = cell_p.shape[0] > 0
    last_prior = priors.shape[0] - 1
    extras = 0
    lowest = 2.0
    total = 0.0
    for i in range(n):
        ui = U(i)
        cap = caps[ui]
        if cap < 2:
            continue
        real = reals[ui]
        row = i * stride - 2
        g = strided[U(row + 2)]
        compact[U(extras)] = g
        extras += 1
        total += g
        for j in range(3, cap + 1):
            uj = U(j - 1)
            if j <= real:
                b = bits[ui, uj]
                p = _cell_p(cell_p, b) if table else -1.0
                if p < 0.0:
                    lp = conf[ui, uj]
                    if lp == lp:
                        p = _bucket_p(edges, cells, p_accept, last, lp, b)
                    else:
                        p = priors[U(j - 1 if j - 1 < last_prior else last_prior)]
            else:
                p = priors[U(j - 1 if j - 1 < last_prior else last_prior)]
            g = g * p
            strided[U(row + j)] = g
            compact[U(extras)] = g
            extras += 1
            total += g
        lowest = g if g < lowest else lowest
    return lowest, total


@jit(forceinline=True, internal=True)
def _assign_nb(strided, stride, caps, ordered, best_take, out):
    """Depths from the best prefix of the sorted gains (out[i] already holds the first draft).

    Rows strictly above the cut gain are all in; of the rows equal to it, the first ones in
    (sequence, depth) order fill the remaining places: the stable order the rules ask for. A
    sequence's gains never increase with depth, so its walk stops at its first row below the cut.
    """
    cut = ordered[best_take - 1]
    t = best_take - 1
    while t > 0 and ordered[t - 1] == cut:
        t -= 1
    ties = best_take - t
    for i in range(caps.shape[0]):
        d = out[U(i)]
        row = i * stride - 2
        for j in range(2, caps[U(i)] + 1):
            g = strided[U(row + j)]
            if g > cut:
                d += 1
            elif g == cut and ties > 0:
                d += 1
                ties -= 1
            else:
                break
        out[U(i)] = d


@jit(internal=True)
def sequence_depths_nb(arrays, conf, n_conf, known, k_max, row_budget, slack, out, ws):
    """How many of each sequence's drafts to verify, after drafting (docs/planner.md).

    The in-kernel entry point: other kernels (the serving simulator) call it directly. Inputs
    are trusted (Python callers go through ``Planner``, which checks them), but out-of-range
    counts are clamped, never used as indices.

    Parameters
    ----------
    arrays : PlanArrays
        The table and calibration (``plan._types.plan_arrays``).
    conf : ndarray(float32, ndim=2), shape (n, m)
        Top-1 log-probabilities of each sequence's drafts; NaN or columns past ``n_conf`` are
        unmeasured and take the position prior. C-contiguous.
    n_conf, known : ndarray(int64, ndim=1), shape (n,)
        Real confidences and drafts available per sequence.
    k_max, row_budget : int
        Deepest verify depth; most draft rows in the batch.
    slack : float
        In [0, 1).
    out : ndarray(int64, ndim=1), shape (n,)
        Modified in place: the depths.
    ws : PlanWorkspace
        Scratch for at least ``n`` sequences (``plan._types.plan_workspace``); overwritten.

    Returns
    -------
    int
        Total draft rows planned.
    """
    return _sequence_depths_nb(arrays, arrays.p_accept[:0], conf, n_conf, known, k_max, row_budget, slack, out, ws)


@jit(internal=True)
def _sequence_depths_nb(arrays, cell_p, conf, n_conf, known, k_max, row_budget, slack, out, ws):
    """:func:`sequence_depths_nb`, its probabilities looked up through ``cell_p``
    (``calibration.cell_probabilities`` of the calibration; empty: through ``arrays.cells``
    alone), as the Planner's kernel does."""
    n = conf.shape[0]
    m = conf.shape[1]
    max_k = arrays.costs.shape[1] - 1
    kk = k_max if k_max < max_k else max_k
    kk = kk if kk > 0 else 0
    if n == 0:
        return 0
    stride = max_k if max_k > 1 else 1
    g = ws.gains
    strided = g[:n * stride]
    compact = g[n * stride:2 * n * stride]
    ordered = g[2 * n * stride:3 * n * stride]
    o = ws.owner
    keys = o[:n * stride]
    caps = o[n * stride:n * stride + n]
    reals = o[n * stride + n:n * stride + 2 * n]

    base_rows = _caps_nb(n_conf, known, kk, m, caps, reals, out)
    if base_rows > row_budget:
        for i in range(n):
            out[U(i)] = 0
        return 0
    base_tokens, extras, highest, bound = _first_gains_nb(arrays, cell_p, conf, caps, reals, strided, stride)
    take_max = row_budget - base_rows
    take_max = take_max if take_max < extras else extras
    if take_max <= 0:
        return base_rows

    width_costs_nb(arrays.widths, arrays.costs, n, ws.wc)
    # No prefix can beat the first drafts alone: skip the deeper lookups, the sort and the scan.
    base_eff = base_tokens / row_cost_nb(ws.wc[:, VJ], n, base_rows, max_k, ws.wc[kk, DJ])
    rest = bound * (1.0 + BOUND_SLACK) + 1e-300
    if _no_prefix_reaches(ws.wc, n, max_k, kk, base_tokens, base_rows, take_max, highest, rest, base_eff):
        return base_rows
    lowest, total = _gains_nb(arrays, cell_p, conf, caps, reals, strided, stride, compact)
    # The same with the sum of the gains, tighter than the first bound's.
    rest = total * (1.0 + BOUND_SLACK) + 1e-300
    if _no_prefix_reaches(ws.wc, n, max_k, kk, base_tokens, base_rows, take_max, highest, rest, base_eff):
        return base_rows
    # Equal gains are equal values, so the running sums do not depend on how ties are ordered;
    # the tie order matters only when rows are assigned. The scan sorts the buckets as it
    # reaches them: those past where it stops are never sorted.
    buckets = bucket_gains_desc_nb(compact, extras, ordered, ws.counts, keys, lowest, highest)
    best_take = _scan_nb(ws.wc, n, max_k, kk, base_tokens, base_rows, take_max, ordered, slack, rest, ws.counts,
                         buckets)
    if best_take == 0:
        return base_rows
    _assign_nb(strided, stride, caps, ordered, best_take, out)
    return base_rows + best_take


# Relative slack of the bounds of _no_prefix_reaches: far above any rounding of a sum of
# gains (at most count * 2**-53 relative), far below any difference that decides an answer.
BOUND_SLACK = 1e-9


@jit(forceinline=True)
def _no_prefix_reaches(wc, n, max_k, kk, tokens0, rows0, count, highest, rest, target):
    """True when no prefix of the next ``count`` rows (after ``rows0`` rows holding ``tokens0``
    tokens) can reach ``target`` tokens/J: those rows then need no sorting or scanning.

    Any ``t`` of those rows add at most ``min(t * highest, rest)`` tokens (``highest`` the
    largest of their gains, ``rest`` at least their sum) and, inside a depth segment, cost at
    least the segment's affine lower bound on joules. Their ratio is monotone between the ends
    of a segment and the kink ``t = rest / highest``, so those points bound every prefix. Every
    bound is loosened by ``BOUND_SLACK``: a comparison too close to call answers False, and the
    exact scan decides.
    """
    vj = wc[:, VJ]
    sunk_j = wc[kk, DJ]
    limit = target * (1.0 - BOUND_SLACK)
    kink = rest / highest if highest > 0.0 else 0.0
    inv_n = 1.0 / n
    lo = rows0 // n
    rem = rows0 - lo * n
    take = 0
    while take < count:
        nxt = lo + 1 if lo < max_k else max_k
        a_j = vj[lo] + sunk_j
        d_j = vj[nxt] - vj[lo]
        tol_j = TOL * (abs(vj[lo]) + abs(d_j) + abs(sunk_j))
        stop = n - rem
        if stop > count - take:
            stop = count - take
        for point in range(3):
            if point == 0:
                t = float(take + 1)
            elif point == 1:
                t = float(take + stop)
            else:
                t = kink
                if not take + 1 < t < take + stop:
                    continue
            extra = t * highest
            extra = extra if extra < rest else rest
            tokens = (tokens0 + extra) * (1.0 + BOUND_SLACK)
            joules = a_j + d_j * ((rem + t - take) * inv_n) - tol_j
            if joules <= 0.0 or tokens >= limit * joules:
                return False
        take += stop
        rem += stop
        if rem == n:
            rem = 0
            lo += 1
    return True


@jit(forceinline=True, internal=True)
def _scan_nb(wc, n, max_k, kk, base_tokens, base_rows, take_max, ordered, slack, total, counts, buckets):
    """The best prefix of the descending gains, 0 for none.

    ``ordered`` holds the gains in the ``buckets`` buckets of ``_sort.bucket_gains_desc_nb``
    (bounds in ``counts``; 0 buckets: sorted already); each depth segment sorts the buckets it
    reaches before reading them (``_sort.sort_buckets_nb``), so the gains past where the scan
    stops are never sorted.

    Every prefix is visited or bounded. Rows advance through depth segments ``[lo, lo + 1)``,
    inside which a row cost is affine in ``rem / n``; each comparison is first decided from
    bounds on the cost, built with multiplications only. When a bound cannot decide (a
    near-tie), the exact arithmetic of ``row_cost_nb`` decides, so the answer is bit for bit the
    plain scan's. At each later segment the rest is skipped when :func:`_no_prefix_reaches` proves
    none of it reaches the best's tokens/J so far (``total`` is at least the sum of all gains).
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
    take = np.int64(0)  # not a literal 0: sort_buckets_nb would compile once more for it
    unsorted = np.int64(0)  # the first bucket not sorted yet
    while take < take_max:
        stop = n - rem
        if stop > take_max - take:
            stop = take_max - take
        if take > 0:
            # At most what is left of the total, and at most the next (largest left) gain per row.
            unsorted = sort_buckets_nb(ordered, counts, buckets, unsorted, take)
            rest = total - (tokens - base_tokens) * (1.0 - BOUND_SLACK)
            if _no_prefix_reaches(wc, n, max_k, kk, tokens, base_rows + take, take_max - take, ordered[U(take)],
                                  rest, best_tokens / best_j_hi):
                break
        unsorted = sort_buckets_nb(ordered, counts, buckets, unsorted, take + stop - 1)
        # One depth segment: the row costs are a + d * rem / n for rem in (rem, n].
        nxt = lo + 1 if lo < max_k else max_k
        a_ms = vms[lo] + sunk_ms
        d_ms = vms[nxt] - vms[lo]
        tol_ms = TOL * (abs(vms[lo]) + abs(d_ms) + abs(sunk_ms))
        a_j = vj[lo] + sunk_j
        d_j = vj[nxt] - vj[lo]
        tol_j = TOL * (abs(vj[lo]) + abs(d_j) + abs(sunk_j))
        for step in range(1, stop + 1):
            tokens += ordered[U(take + step - 1)]
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
def sequence_depths_many_nb(arrays, cell_p, conf, n_conf, known, offsets, k_max, row_budget, slack, out, ws):
    """:func:`sequence_depths_nb` for many batches laid end to end, its probabilities looked up
    through ``cell_p`` (``calibration.cell_probabilities``) as the Planner's kernel does.

    ``offsets int64[B + 1]``: batch ``b`` is rows ``offsets[b]:offsets[b + 1]`` of ``conf``,
    ``n_conf``, ``known`` and ``out``; ``k_max`` and ``row_budget`` are ``int64[B]``.
    """
    for b in range(offsets.shape[0] - 1):
        s = offsets[b]
        e = offsets[b + 1]
        _sequence_depths_nb(arrays, cell_p, conf[s:e], n_conf[s:e], known[s:e], k_max[b], row_budget[b], slack,
                            out[s:e], ws)
