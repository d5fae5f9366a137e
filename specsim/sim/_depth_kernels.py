"""Numba kernels of the engine's depths: a step's drafts, the per-sequence planner, SGLang's controller."""

from __future__ import annotations

import numpy as np

from specsim.plan._kernels import DJ, DMS, VJ, VMS, _propose_nb, _sequence_depths_nb, goodput_depth_nb
from specsim.plan._types import PlanArrays
from specsim.sim._draw_kernels import (
    STREAM_ACCEPT, STREAM_BUCKET, bucket_of_nb, draft_hash_nb, entry_nb, half_uniform_nb, request_key_nb, spread_p_nb,
)
from specsim.sim._schedule_kernels import _find_decoding, step_part
from specsim.table._kernels import context_bracket_nb


@step_part
def _draw_sequence_drafts(req, cal, ws, j, r, d, key):
    """Draw request ``r``'s ``d`` drafts (decoding index ``j``): confidences for the planner,
    verdicts kept for later."""
    e = req.emitted[r]
    rkey = request_key_nb(key, r)
    ws.known[j] = d
    ws.n_conf[j] = d
    if cal.digits.shape[0] > 0:
        digit = cal.digits[entry_nb(rkey, e, cal.digits.shape[0])]
        ws.n_conf[j] = 0
        for i in range(1, d + 1):
            ws.verdict[j, i - 1] = i <= digit
        return
    if cal.shift.shape[0] > 0:
        shift = cal.shift[r]
        for i in range(1, d + 1):
            h = draft_hash_nb(rkey, e + i - 1, i)
            b = bucket_of_nb(cal.occ_cdf, half_uniform_nb(h, STREAM_BUCKET), i)
            ws.conf[j, i - 1] = cal.conf_values[b]
            ws.verdict[j, i - 1] = half_uniform_nb(h, STREAM_ACCEPT) < spread_p_nb(cal.centre[b], shift)
        return
    for i in range(1, d + 1):
        h = draft_hash_nb(rkey, e + i - 1, i)
        b = bucket_of_nb(cal.occ_cdf, half_uniform_nb(h, STREAM_BUCKET), i)
        ws.conf[j, i - 1] = cal.conf_values[b]
        # The verdict is drawn now and kept: the planner sees only the confidence.
        ws.verdict[j, i - 1] = half_uniform_nb(h, STREAM_ACCEPT) < cal.p_accept[b]


@step_part
def _plan_arrays(contexts, tab, cal, ws):
    """The per-sequence planner's arrays: the step costs at this width and the live context
    (``ws.grid``) with context pricing, else the table's (``contexts`` None: Numba compiles that
    case alone; an empty array picks it at run time)."""
    if contexts is None:
        return PlanArrays(tab.widths, tab.costs, cal.edges, cal.cells, cal.p_accept, cal.priors)
    if contexts.shape[0] > 0:
        return PlanArrays(ws.grid_width, ws.grid, cal.edges, cal.cells, cal.p_accept, cal.priors)
    return PlanArrays(tab.widths, tab.costs, cal.edges, cal.cells, cal.p_accept, cal.priors)


@step_part
def _plan_sequence(req, tab, cal, srv, st, ws, plan, n, k, key):
    """The sequence policy's depths: draft ``min(k, left - 1)`` each, then the planner (``plan``:
    its workspace)."""
    o = srv.rec[0]
    _find_decoding(req, st, ws, n)  # ws.slot[:n]: the decoding sequences, in running order
    kd = np.int64(0)  # not the literal 0 (see schedule_running_nb)
    for j in range(n):
        r = st.running[ws.slot[j]]
        need = req.output[r] - req.emitted[r] - 1
        d = k if k < need else need
        _draw_sequence_drafts(req, cal, ws, j, r, d, key)
        if d > kd:
            kd = d
    if kd > 0:
        # The planner's kernel, its confidences looked up through the calibration's cells
        # (cal.cell_p) as the Planner's are; with context pricing it reads the
        # step costs at this width and the live context (ws.grid, built by plan_depths_nb).
        arrays = _plan_arrays(tab.contexts, tab, cal, ws)
        _sequence_depths_nb(arrays, cal.cell_p, ws.conf[:n], ws.n_conf[:n], ws.known[:n], kd, o.row_budget,
                            o.slack, ws.vdepth[:n], plan)
    else:
        for j in range(n):
            ws.vdepth[j] = 0
    return kd


@step_part
def _adaptive_start(srv, st):
    """Every slot's controller at its start: ``--speculative-num-steps`` clamped to the slot's
    candidates, snapped to the nearest (ties to the larger), the EMA at that depth - 1."""
    s = st.rec[0]
    init = srv.rec[0].initial_steps
    for m in range(srv.n_cand.shape[0]):
        last = srv.n_cand[m] - 1
        cur = init
        if cur < srv.cand[m, 0]:
            cur = srv.cand[m, 0]
        if cur > srv.cand[m, last]:
            cur = srv.cand[m, last]
        best = 0
        for i in range(last + 1):
            if abs(srv.cand[m, i] - cur) <= abs(srv.cand[m, best] - cur):
                best = i
        s.ctl_index[m] = best
        s.ctl_ema[m] = srv.cand[m, best] - 1.0
        s.ctl_count[m] = 0
    s.ctl_ready = 1


@step_part
def adaptive_depth_nb(srv, st, n):
    """The depth SGLang's adaptive controller serves a batch of width ``n`` at: its slot's current
    candidate (the slot is remembered for :func:`adapt_nb`)."""
    s = st.rec[0]
    if s.ctl_ready == 0:
        _adaptive_start(srv, st)
    m = srv.slot_of[n]
    s.ctl_slot = m
    return srv.cand[m, s.ctl_index[m]]


@step_part
def adapt_nb(srv, st, mean_accepted):
    """SGLang's ``AdaptiveStepSlot`` after a verify batch of its slot: the EMA takes the batch's
    mean accepted drafts; past the warm-up, every ``update_interval`` batches the depth steps down
    while the EMA is at most the next lower candidate - 0.5 + ``down_hysteresis``, then up while
    it is above the current candidate - 0.5 + ``up_hysteresis``. The new depth serves from the
    next batch."""
    o = srv.rec[0]
    s = st.rec[0]
    m = s.ctl_slot
    ema = (1.0 - o.ema_alpha) * s.ctl_ema[m] + o.ema_alpha * mean_accepted
    s.ctl_ema[m] = ema
    count = s.ctl_count[m] + 1
    s.ctl_count[m] = count
    if count <= o.warmup_batches or (count - o.warmup_batches) % o.update_interval != 0:
        return
    i = s.ctl_index[m]
    while i > 0 and ema <= srv.cand[m, i - 1] - 0.5 + o.down_hysteresis:
        i -= 1
    while i < srv.n_cand[m] - 1 and ema > srv.cand[m, i] - 0.5 + o.up_hysteresis:
        i += 1
    s.ctl_index[m] = i


@step_part
def _context_grid(tab, st, ws, n):
    """The step costs at width ``n`` and the batch's mean context into ``ws.grid`` (one width):
    linear in context between the measured contexts around it, as the step is priced."""
    s = st.rec[0]
    lo, hi, t = context_bracket_nb(tab.contexts, s.ctx_tokens / s.ctx_seqs)
    ws.grid_width[0] = n
    for k in range(ws.grid.shape[1]):
        for f in range(4):
            p = tab.cwcs[lo, n, k, f]
            ws.grid[0, k, f] = p if lo == hi else p + (tab.cwcs[hi, n, k, f] - p) * t


@step_part
def _live_depth(srv, ws, n, waiting):
    """The planner's depth (``propose``, ``goodput``'s, or ``load-aware``'s: above idle power while
    nobody ``waiting``) at width ``n`` on ``ws.grid``, clamped as ``depth_by_width`` clamps the
    memo: the speculation cap, ``k_cap``, and for uniform policies ``row_budget // n`` rows."""
    o = srv.rec[0]
    if n > o.spec_cap:
        return 0
    if o.live_depth == 2:
        d = goodput_depth_nb(ws.grid_width, ws.grid, srv.cum_priors, n, o.spec_cap, ws.scratch)
    else:
        # propose's rule; load-aware's counts the energy above idle power while nobody waits
        idle_w = o.idle_w if o.live_depth == 3 and not waiting else 0.0
        d = _propose_nb(ws.grid_width, ws.grid, srv.cum_priors, n, o.slack, o.spec_cap, idle_w, ws.scratch)
    if d > o.k_cap:
        d = o.k_cap
    if o.per_sequence == 0 and d > o.row_budget // n:
        d = o.row_budget // n
    return d


@step_part
def auto_tree_nb(tab, srv, st, ws, tree, n):
    """``tree:auto``'s nodes per sequence at width ``n`` > 0 and the batch's mean context (on a
    table with a context axis: ``ws.grid`` holds the step costs there, :func:`_context_grid`), and
    the step's ``kind_at`` code: ``Planner.propose_tree``'s rule (``plan._trees.choose_tree``) at
    that context. Candidates in order: plain and the chains k = 0..min(max_k, deepest) from
    ``ws.grid``, then the branching prefixes of at most ``tree.auto[1]`` nodes, each priced as the
    step is (its prices at the two measured contexts around the mean, linear between them); the
    kept one has the most tokens per joule among those at least ``1 - slack`` times as fast as the
    depth-1 chain, a later one replacing it only with strictly more. Clamped as the memo is: the
    speculation cap, ``k_cap`` and ``row_budget // n``."""
    o = srv.rec[0]
    if n > o.spec_cap:
        return np.int64(0), np.int64(0)
    grid = ws.grid[0]
    cum = srv.cum_priors
    max_k = grid.shape[0] - 1
    nf = float(n)
    r = 1 if max_k >= 1 else 0
    floor_rate = (1.0 - o.slack) * (nf * (1.0 + cum[r]) / (grid[r, VMS] + grid[r, DMS]))
    best_eff = 0.0
    best = -1
    is_tree = False
    top = max_k if max_k < tree.auto[2] else tree.auto[2]
    for k in range(top + 1):
        tokens = nf * (1.0 + cum[k])
        if tokens / (grid[k, VMS] + grid[k, DMS]) < floor_rate:
            continue
        eff = tokens / (grid[k, VJ] + grid[k, DJ])
        if best < 0 or eff > best_eff:
            best_eff = eff
            best = k
    if best < 0:  # no depth keeps the floor: propose's fallback, depth r
        best_eff = 0.0
        best = r
    s = st.rec[0]
    lo, hi, t = context_bracket_nb(tab.contexts, s.ctx_tokens / s.ctx_seqs)
    for i in range(tree.shape_nodes.shape[0]):
        v = tree.shape_nodes[i]
        if v > tree.auto[1]:
            break
        p = tree.prices[lo, n, v]
        ms = p[VMS] + p[DMS]
        joules = p[VJ] + p[DJ]
        if lo != hi:
            q = tree.prices[hi, n, v]
            ms += (q[VMS] + q[DMS] - ms) * t
            joules += (q[VJ] + q[DJ] - joules) * t
        tokens = nf * tree.shape_expected[i]
        if tokens / ms < floor_rate:
            continue
        eff = tokens / joules
        if eff > best_eff:
            best_eff = eff
            best = v
            is_tree = True
    if best > o.k_cap:
        best = o.k_cap
    if best > o.row_budget // n:
        best = o.row_budget // n
    return best, (tree.kind_of[best] if is_tree else np.int64(0))


@step_part
def _context_depth(contexts, tab, srv, st, ws, n, waiting, k):
    """The depth ``k`` of the memo, or with context pricing (``contexts`` a non-empty array) the
    step costs at width ``n`` > 0 and the batch's mean context put in ``ws.grid`` and, for the
    planner's policies, their depth there. ``contexts`` None (no context pricing): Numba compiles
    none of it (docs/simulation.md, "What a run does not use")."""
    if contexts is None:
        return k
    if contexts.shape[0] == 0:
        return k
    _context_grid(tab, st, ws, n)
    if srv.rec[0].live_depth != 0:
        return _live_depth(srv, ws, n, waiting)
    return k


@step_part
def _context_tree(contexts, tab, srv, st, ws, tree, n, k, kind):
    """``(k, kind)``: a tree policy's nodes and ``kind_at`` code at width ``n`` > 0 as the memo
    gives them, or ``tree:auto``'s at the batch's mean context (:func:`auto_tree_nb`, only with
    context pricing: ``contexts`` None compiles none of it)."""
    if contexts is None:
        return k, kind
    if tree.auto[0] == 0:
        return k, kind
    k, kind = auto_tree_nb(tab, srv, st, ws, tree, n)
    if st.rec[0].gate_off != 0:
        k = 0
    return k, kind


@step_part
def plan_depths_nb(req, tab, cal, srv, st, ws, plan, tree, n, key):
    """Draft and verify depths of the ``n`` decoding sequences (``ws.slot[:n]``).

    Uniform policies verify ``depth_memo[n]`` drafts each (``idle_memo[n]`` while no request
    waits in the queue: ``load-aware``'s other plan, the same array for every other policy), which
    :func:`schedule_running_nb` reads from the returned depth (no pass over the sequences); the
    sequence policy drafts
    ``min(k, left - 1)`` each and lets the planner pick how many to verify within ``row_budget``.
    With context pricing the planner's policies (``propose``, ``goodput``, ``sequence``, and
    ``tree:auto``: :func:`auto_tree_nb`) plan on the step costs at the batch's mean context
    instead of the memo's reference grid.

    Returns
    -------
    int
        The drafted depth ``kd`` (the deepest any sequence drafted); for the sequence policy
        ``ws.vdepth[:n]`` and ``ws.known[:n]`` (drafted per sequence) are written.
    """
    waiting = st.rec[0].q_len > 0
    k = srv.depth_memo[n] if waiting else srv.idle_memo[n]
    if n > 0:
        k = _context_depth(tab.contexts, tab, srv, st, ws, n, waiting, k)
    if srv.rec[0].adaptive != 0 and n > 0:
        c = adaptive_depth_nb(srv, st, n)
        k = c if c < k else k  # depth_memo holds the server's caps
    if st.rec[0].gate_off != 0:
        k = 0  # the speculation gate switched speculation off for the rest of the run
    if tree is not None:
        # Dropped like ``plan`` where ``tree`` is None: a tree policy's step verifies the first k
        # nodes of its order (a tree) where its width plans one; tree:auto on a table with a
        # context axis plans the step at the batch's mean context.
        kind = tree.kind_at[n]
        if n > 0:
            k, kind = _context_tree(tab.contexts, tab, srv, st, ws, tree, n, k, kind)
        tree.step[0] = kind if k > 0 else 0
    if plan is not None:
        # Numba drops this branch while compiling an engine whose ``plan`` is None (no run of it
        # plans per sequence), so the per-sequence planner compiles only where it runs.
        if srv.rec[0].per_sequence != 0:
            return _plan_sequence(req, tab, cal, srv, st, ws, plan, n, k, key)
    return k
