"""Numba kernels of the engine's step price and outcome: what a step costs, which drafts are accepted, what it emits."""

from __future__ import annotations

import numpy as np

from specsim.plan._kernels import DJ, DMS, VJ, VMS, row_cost_nb
from specsim.sim._draw_kernels import (
    STREAM_ACCEPT, STREAM_BUCKET, bucket_of_nb, draft_hash_nb, entry_nb, half_uniform_nb, request_key_nb, spread_p_nb,
)
from specsim.sim._schedule_kernels import NOT_DECODING, UNSCHEDULED, _grow, _leave_context, inner, step_part
from specsim.table._kernels import context_bracket_nb


# -- price -----------------------------------------------------------------------------------------

@step_part
def prefill_cost_nb(srv, tokens):
    """(ms, J) of prefilling ``tokens`` tokens in one step: affine (a fixed cost per step with
    prefill, plus a cost per token) or the profiled curve (flat below its first point, linear
    between points, the last segment's slope beyond)."""
    o = srv.rec[0]
    if o.prefill_curve == 0:
        if tokens == 0:
            return o.prefill_ms_per_token * tokens, o.prefill_j_per_token * tokens
        return (o.prefill_ms_per_step + o.prefill_ms_per_token * tokens,
                o.prefill_j_per_step + o.prefill_j_per_token * tokens)
    if tokens == 0:
        return 0.0, 0.0
    x = srv.curve_tokens
    p = x.shape[0]
    if p == 1 or tokens <= x[0]:
        return srv.curve_ms[0], srv.curve_j[0]
    hi = 1
    while hi < p - 1 and x[hi] < tokens:
        hi += 1
    f = (tokens - x[hi - 1]) / (x[hi] - x[hi - 1])
    ms = srv.curve_ms[hi - 1] + (srv.curve_ms[hi] - srv.curve_ms[hi - 1]) * f
    joules = srv.curve_j[hi - 1] + (srv.curve_j[hi] - srv.curve_j[hi - 1]) * f
    return ms, joules


@step_part
def _decode_cost_at(wcs, srv, n, rows, k, cut):
    """(ms, J) of the decode part from ``wcs`` (the costs at every width, one context)."""
    if srv.rec[0].per_sequence == 0 and not cut:
        return wcs[n, k, VMS] + wcs[n, k, DMS], wcs[n, k, VJ] + wcs[n, k, DJ]
    max_k = wcs.shape[1] - 1
    ms = row_cost_nb(wcs[n, :, VMS], n, rows, max_k, wcs[n, k, DMS])
    joules = row_cost_nb(wcs[n, :, VJ], n, rows, max_k, wcs[n, k, DJ])
    return ms, joules


@step_part
def decode_cost_nb(tab, srv, st, n, rows, k, cut):
    """(ms, J) of verifying ``rows`` draft rows over ``n`` decoding sequences.

    A uniform step with nothing cut costs the table's ``cell(n, k)``. The sequence policy, and
    any step the budget or a preemption cut, costs the verify interpolated at ``rows / n`` plus
    the draft cost of the drafted depth ``k`` (the planner's row cost). With context pricing the
    step is priced so at the two measured contexts around the batch's mean context (its decoding
    requests' KV tokens, kept in the replica state) and interpolated linearly between them, the
    nearest context's price outside them; the mean is added to ``ctx_priced``.
    """
    if n == 0:
        return 0.0, 0.0
    return _context_decode_cost(tab.contexts, tab, srv, st, n, rows, k, cut)


@step_part
def _context_decode_cost(contexts, tab, srv, st, n, rows, k, cut):
    """:func:`decode_cost_nb` for ``n`` > 0. ``contexts``: the table's, None without context
    pricing, for which Numba compiles the reference grid's price alone (docs/simulation.md,
    "What a run does not use"); an empty array (a fleet's group beside one that prices
    contexts) prices so at run time."""
    if contexts is None:
        return _decode_cost_at(tab.wcs, srv, n, rows, k, cut)
    if contexts.shape[0] == 0:
        return _decode_cost_at(tab.wcs, srv, n, rows, k, cut)
    s = st.rec[0]
    c = s.ctx_tokens / s.ctx_seqs
    s.ctx_priced += c
    lo, hi, t = context_bracket_nb(contexts, c)
    ms, joules = _decode_cost_at(tab.cwcs[lo], srv, n, rows, k, cut)
    if lo == hi:
        return ms, joules
    ms_hi, j_hi = _decode_cost_at(tab.cwcs[hi], srv, n, rows, k, cut)
    return ms + (ms_hi - ms) * t, joules + (j_hi - joules) * t


@inner
def _accepted_spread(occ_cdf, centre, rkey, e, lim, shift):
    """:func:`accepted_nb`'s leading run under a per-request spread: each draft is accepted with
    its bucket's rate moved by the request's ``shift`` in log-odds (docs/calibration.md#per-request-spread).
    A call, not inlined, so the step without a spread carries none of its code."""
    acc = 0
    while acc < lim:
        i = acc + 1
        h = draft_hash_nb(rkey, e + acc, i)
        b = bucket_of_nb(occ_cdf, half_uniform_nb(h, STREAM_BUCKET), i)
        if half_uniform_nb(h, STREAM_ACCEPT) < spread_p_nb(centre[b], shift):
            acc += 1
        else:
            break
    return acc


@step_part
def accepted_nb(req, cal, srv, ws, j, r, v, key):
    """Drafts of decoding sequence ``j`` (request ``r``) accepted when ``v`` are verified: the
    leading run of accepted drafts, never more than the tokens the request has left."""
    e = req.emitted[r]
    need = req.output[r] - e - 1
    lim = v if v < need else need
    acc = 0
    if lim <= 0:
        return 0
    if srv.rec[0].per_sequence != 0:
        while acc < lim and ws.verdict[j, acc]:
            acc += 1
        return acc
    n_digits = cal.digits.shape[0]
    if n_digits > 0:
        digit = cal.digits[entry_nb(request_key_nb(key, r), e, n_digits)]
        return digit if digit < lim else lim
    rkey = request_key_nb(key, r)
    if cal.shift.shape[0] > 0:
        return _accepted_spread(cal.occ_cdf, cal.centre, rkey, e, lim, cal.shift[r])
    while acc < lim:
        i = acc + 1
        h = draft_hash_nb(rkey, e + acc, i)
        b = bucket_of_nb(cal.occ_cdf, half_uniform_nb(h, STREAM_BUCKET), i)
        if half_uniform_nb(h, STREAM_ACCEPT) < cal.p_accept[b]:
            acc += 1
        else:
            break
    return acc


@inner
def tree_accepted_nb(req, cal, tree, r, v, key):
    """Drafts of request ``r`` accepted when the first ``v`` nodes of the tree order are
    verified: from the root, at each depth ``d`` the target's rank is drawn from row ``d`` of the
    rank acceptance (no rank: the rest of the row) with the chain's draw at that position, and
    the walk moves to that child while the verified tree holds it, never past the tokens the
    request has left. Under a request spread every cell moves by the request's shift in
    log-odds (its centre's), the row scaled down to sum 1 where it passes it. A call, not
    inlined: chain steps carry none of its code."""
    e = req.emitted[r]
    need = req.output[r] - e - 1
    rkey = request_key_nb(key, r)
    a = tree.accept
    spread = tree.centre.shape[0] > 0
    shift = cal.shift[r] if spread else 0.0
    node = -1
    acc = 0
    while acc < need and acc < a.shape[0]:
        d = acc + 1
        u = half_uniform_nb(draft_hash_nb(rkey, e + acc, d), STREAM_ACCEPT)
        scale = 1.0
        if spread:
            total = 0.0
            for q in range(a.shape[1]):
                total += spread_p_nb(tree.centre[acc, q], shift)
            if total > 1.0:
                scale = 1.0 / total
        cum = 0.0
        rank = -1
        for q in range(a.shape[1]):
            cum += spread_p_nb(tree.centre[acc, q], shift) * scale if spread else a[acc, q]
            if u < cum:
                rank = q
                break
        if rank < 0:
            break
        nxt = tree.child[node + 1, rank]
        if nxt < 0 or nxt >= v:
            break
        node = nxt
        acc += 1
    return acc


@step_part
def _tree_cost_at(wcs, tp, tree, n, rows, k, cut):
    """(ms, J) of a branching tree step from ``tp`` (the tree prices at every width, one
    context) and ``wcs`` (the chain costs there): the tree's price; a step the budget or a
    preemption cut verifies its rows as the chain's cut step does, times the tree-attention
    factor, and drafts the tree at the width scheduled."""
    if not cut:
        return tp[n, k, VMS] + tp[n, k, DMS], tp[n, k, VJ] + tp[n, k, DJ]
    max_k = wcs.shape[1] - 1
    f = tree.factor[0]
    ms = row_cost_nb(wcs[n, :, VMS], n, rows, max_k, 0.0) * f + tp[n, k, DMS]
    joules = row_cost_nb(wcs[n, :, VJ], n, rows, max_k, 0.0) * f + tp[n, k, DJ]
    return ms, joules


@inner
def tree_cost_nb(tab, st, tree, n, rows, k, cut):
    """:func:`decode_cost_nb` for a step that verifies a branching tree of ``k`` nodes per
    sequence (docs/simulation.md#draft-trees): the same context interpolation, over the tree's
    prices."""
    if n == 0:
        return 0.0, 0.0
    return _context_tree_cost(tab.contexts, tab, st, tree, n, rows, k, cut)


@step_part
def _context_tree_cost(contexts, tab, st, tree, n, rows, k, cut):
    """:func:`tree_cost_nb` for ``n`` > 0; ``contexts`` as :func:`_context_decode_cost` reads it."""
    if contexts is None:
        return _tree_cost_at(tab.wcs, tree.prices[0], tree, n, rows, k, cut)
    if contexts.shape[0] == 0:
        return _tree_cost_at(tab.wcs, tree.prices[0], tree, n, rows, k, cut)
    s = st.rec[0]
    c = s.ctx_tokens / s.ctx_seqs
    s.ctx_priced += c
    lo, hi, t = context_bracket_nb(contexts, c)
    ms, joules = _tree_cost_at(tab.cwcs[lo], tree.prices[lo], tree, n, rows, k, cut)
    if lo == hi:
        return ms, joules
    ms_hi, j_hi = _tree_cost_at(tab.cwcs[hi], tree.prices[hi], tree, n, rows, k, cut)
    return ms + (ms_hi - ms) * t, joules + (j_hi - joules) * t


@step_part
def gate_nb(req, srv, st, r):
    """Record finished request ``r`` in the speculation gate (TensorRT-LLM's acceptance window):
    its accepted length ``max(0, output tokens / decode iterations - 1)`` enters a ring of the
    last ``acceptance_window`` requests; once that many have finished, a window mean below
    ``acceptance_threshold`` switches speculation off for the rest of the run. A request that
    never decoded (one output token) is not recorded."""
    o = srv.rec[0]
    s = st.rec[0]
    w = o.acceptance_window
    if w <= 0 or s.gate_off != 0 or req.decode_iters[r] == 0:
        return
    value = req.output[r] / req.decode_iters[r] - 1.0
    s.gate_ring[s.gate_seen % w] = value if value > 0.0 else 0.0
    s.gate_seen += 1
    if s.gate_seen < w:
        return
    total = 0.0
    for i in range(w):  # oldest first
        total += s.gate_ring[(s.gate_seen + i) % w]
    if total / w < o.acceptance_threshold:
        s.gate_off = 1


@step_part
def _finish(req, srv, st, r, t):
    req.finish_s[r] = t
    st.rec[0].finished += 1
    gate_nb(req, srv, st, r)


@step_part
def _apply_decodes(req, cal, srv, st, ws, tree, t, key, n_all, k_all):
    """:func:`apply_nb`'s pass over running slots ``0..n_all - 1``, which all decode ``k_all``
    drafts uncut (no per-slot scratch was written for them): the same outcome as the general
    pass, without its per-slot reads and branches. Plain decoding (``k_all`` 0) draws nothing.
    Returns ``(decode tokens, accepted drafts, requests finished, first slot that finished)``."""
    s = st.rec[0]
    o = srv.rec[0]
    kv_later = ws.tally[0].kv_later != 0
    bs = o.block_size
    # The blocks _schedule_decodes left to this pass (an unlimited cache). Each request's blocks
    # hold its previous step's tokens and the step adds at most 1 + k_all to them, so where that
    # fits one block a request needs at most one more: counted without a branch (a branch taken
    # once per block of each request, at no predictable slot, cost plain decoding a third of its
    # step). Blocks smaller than a step take the general rule.
    one_more = kv_later and 1 + k_all <= bs
    gated = o.acceptance_window > 0  # decode_iters is the speculation gate's alone
    grown = np.int64(0)
    accepted = 0
    done = 0
    first_done = np.int64(-1)
    for i in range(n_all):
        r = st.running[i]
        if one_more:
            b = req.blocks[r]
            more = np.int64(req.prompt[r] + req.emitted[r] + k_all > b * bs)
            req.blocks[r] = b + more
            grown += more
        elif kv_later:
            extra = _grow(req, st, o, r, req.prompt[r] + req.emitted[r] + k_all)
            if extra > 0:
                req.blocks[r] += extra
                grown += extra
        if gated:
            req.decode_iters[r] += 1
        if k_all == 0:
            acc = 0
        elif tree is not None and tree.step[0] != 0:
            acc = tree_accepted_nb(req, cal, tree, r, k_all, key)
        else:
            acc = accepted_nb(req, cal, srv, ws, i, r, k_all, key)
        e = req.emitted[r] + 1 + acc
        req.emitted[r] = e
        accepted += acc
        if e == req.output[r]:
            _leave_context(req, s, r)
            _finish(req, srv, st, r, t)
            if done == 0:
                first_done = i
            done += 1
    s.kv_used += grown
    st.depth_hist[k_all] += n_all  # every one verified k_all
    return n_all + accepted, accepted, done, first_done


@step_part
def apply_nb(req, cal, srv, st, ws, tree, t, key):
    """Apply the step that ends at ``t``: decoding sequences emit ``1 + accepted`` tokens,
    prefill chunks advance, a finished prefill emits a token (the first, or the next one after a
    recompute). Returns ``(decode tokens, accepted drafts, requests finished, the first running
    slot that finished)`` (that slot -1 when none did)."""
    s = st.rec[0]
    tally = ws.tally[0]
    # Slots 0..n_all - 1 decode k_all drafts each (no per-slot scratch was written).
    k_all = tally.all_decode
    n_all = tally.decoding if k_all >= 0 else 0
    gated = srv.rec[0].acceptance_window > 0  # decode_iters is the speculation gate's alone
    tokens = 0  # decode tokens emitted: they join the batch's context, added once after the pass
    accepted = 0
    done = 0
    first_done = np.int64(-1)
    start = n_all
    if n_all > 0:
        tokens, accepted, done, first_done = _apply_decodes(req, cal, srv, st, ws, tree, t, key, n_all, k_all)
    elif srv.rec[0].chunked == 0 and tally.prefills > 0:
        # A separate prefill step (nothing but prefills runs in a step that admits): the admitted,
        # the last slots, alone; the running before them wait (_schedule_nb).
        start = s.n_running - tally.prefills
    for i in range(start, s.n_running):
        r = st.running[i]
        take = ws.take[i]
        if take == UNSCHEDULED:
            continue
        j = ws.dec_of[i]
        if j != NOT_DECODING:
            v = ws.vdepth[j]
            st.depth_hist[v] += 1
            if gated:
                req.decode_iters[r] += 1
            if v == 0:
                acc = 0
            elif tree is not None and tree.step[0] != 0:
                acc = tree_accepted_nb(req, cal, tree, r, v, key)
            else:
                acc = accepted_nb(req, cal, srv, ws, j, r, v, key)
            req.emitted[r] += 1 + acc
            tokens += 1 + acc
            accepted += acc
        else:
            req.prefilled[r] += take
            if req.prefilled[r] < req.target[r]:
                continue
            if req.emitted[r] == 0:
                req.first_s[r] = t
            else:
                s.resumed += 1
            req.emitted[r] += 1
            s.emitted += 1
            # It decodes from the next step: its KV tokens join the batch's context.
            s.ctx_tokens += req.prompt[r] + req.emitted[r] - 1
            s.ctx_seqs += 1
        if req.emitted[r] == req.output[r]:
            _leave_context(req, s, r)
            _finish(req, srv, st, r, t)
            if done == 0:
                first_done = i
            done += 1
    s.ctx_tokens += tokens
    return tokens, accepted, done, first_done
