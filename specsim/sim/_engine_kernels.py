"""Numba kernels of the serving engine: one replica advanced one step at a time.

:func:`step_nb` advances one replica (one server) by one step: it schedules the step (running
requests first, then admissions from the waiting queue), prices it, and applies its outcome.
:func:`run_nb` is the single-replica driver: it feeds arrivals into the queue, steps, and jumps
idle gaps. A fleet driver can interleave several replicas in time order by calling
:func:`step_nb` and :func:`idle_until_nb` on each replica's state.

Every kernel takes bundles (:mod:`specsim.sim._types`): ``req`` (the requests), ``tab`` (the
cost table), ``cal`` (the draft-outcome model), ``srv`` (the server), ``st`` (one replica's
state), ``log`` (its step log), ``ws`` (per-step scratch), ``plan`` (the per-sequence
planner's workspace, or None where no run plans per sequence) and ``tree`` (a tree policy's
trees, or None for every other policy: docs/simulation.md#draft-trees). All loop state lives in
them, so a run can stop after any step and resume with the same result. See docs/simulation.md for the
scheduling rules and the price of a step.

Why one module of this size: ``step_nb``'s verbs and their helpers are one step of one server,
read top to bottom; the fleet steps these same functions, so there is no second engine.
"""

from __future__ import annotations

import numpy as np

from specsim._checks import NO_CAP
from specsim._jit import jit
from specsim.plan._kernels import (
    DJ, DMS, VJ, VMS, _propose_nb, goodput_depth_nb, row_cost_nb, sequence_depths_nb,
)
from specsim.plan._types import PlanArrays
from specsim.sim._draw_kernels import (
    STREAM_ACCEPT, STREAM_BUCKET, bucket_of_nb, draft_hash_nb, entry_nb, half_uniform_nb, request_key_nb, seed_key_nb,
    spread_p_nb,
)
from specsim.table._kernels import context_bracket_nb

# The engine's kernels are compiled without Numba's reference counting (they allocate nothing):
# with it, every call that hands a bundle of arrays to another kernel increfs and decrefs each
# array atomically, which cost ~0.4-0.9 us per call and made a step 15x slower or worse
# (measured; see docs/simulation.md, "Engine layout").
kernel = jit(_nrt=False)
# Every kernel here but run_nb is called by other kernels only: no CPython wrapper (specsim._jit).
inner = jit(_nrt=False, internal=True)
# The step's small helpers are inlined into it: a call passes its bundles as hundreds of scalar
# arguments, which cost more than the helper's work. LLVM inlines them (``forceinline``): Numba
# compiles each helper once. Numba's own inlining (``inline="always"``) copies and retypes a
# helper at every call site, which took the engine's first compile from ~35 s to ~90 s.
step_part = jit(_nrt=False, forceinline=True, internal=True)

NOT_DECODING = -1  # ws.dec_of of a running request that is prefilling
UNSCHEDULED = -1  # ws.take of a running request that does not run this step


# -- queue and KV blocks ---------------------------------------------------------------------------

@step_part
def push_back_nb(st, r):
    """Append request ``r`` to the replica's waiting queue (arrival order)."""
    s = st.rec[0]
    i = s.q_head + s.q_len  # below twice the capacity: a subtraction wraps it, not a division
    if i >= st.queue.shape[0]:
        i -= st.queue.shape[0]
    st.queue[i] = r
    s.q_len += 1


@inner
def _push_front(st, r):
    s = st.rec[0]
    s.q_head = (s.q_head if s.q_head > 0 else st.queue.shape[0]) - 1
    st.queue[s.q_head] = r
    s.q_len += 1


@step_part
def _pop_front(st):
    s = st.rec[0]
    r = st.queue[s.q_head]
    s.q_head = s.q_head + 1 if s.q_head + 1 < st.queue.shape[0] else 0
    s.q_len -= 1
    return r


@step_part
def blocks_for_nb(tokens, block_size):
    """KV blocks that hold ``tokens`` tokens."""
    return (tokens + block_size - 1) // block_size


@step_part
def _grow(req, st, o, r, tokens):
    """Extra blocks request ``r`` needs to hold ``tokens`` tokens (0 if it holds enough)."""
    if tokens <= req.blocks[r] * o.block_size:
        return 0  # the common case, without a division
    need = blocks_for_nb(tokens, o.block_size)
    return need - req.blocks[r] if need > req.blocks[r] else 0


@step_part
def _leave_context(req, s, r):
    """Take decoding request ``r`` out of the batch's context sum (it finished or was preempted)."""
    s.ctx_tokens -= req.prompt[r] + req.emitted[r] - 1
    s.ctx_seqs -= 1


@inner
def _preempt_last(req, st):
    """Preempt the most recently admitted running request: free its blocks, put it at the front
    of the queue, and make it recompute its prompt and emitted tokens as prefill."""
    s = st.rec[0]
    s.n_running -= 1
    r = st.running[s.n_running]
    if req.emitted[r] > 0 and req.prefilled[r] >= req.target[r]:
        _leave_context(req, s, r)
    s.kv_used -= req.blocks[r]
    req.blocks[r] = 0
    req.prefilled[r] = 0
    req.target[r] = req.prompt[r] + req.emitted[r]
    s.preemptions += 1
    _push_front(st, r)
    return r


# -- one step: the decoding sequences' depths --------------------------------------------------------

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
        # The planner's kernel; with context pricing it reads the
        # step costs at this width and the live context (ws.grid, built by plan_depths_nb).
        if tab.contexts.shape[0] > 0:
            arrays = PlanArrays(ws.grid_width, ws.grid, cal.edges, cal.cells, cal.p_accept, cal.priors)
        else:
            arrays = PlanArrays(tab.widths, tab.costs, cal.edges, cal.cells, cal.p_accept, cal.priors)
        sequence_depths_nb(arrays, ws.conf[:n], ws.n_conf[:n], ws.known[:n], kd, o.row_budget, o.slack,
                           ws.vdepth[:n], plan)
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
    if n > 0 and tab.contexts.shape[0] > 0:
        _context_grid(tab, st, ws, n)
        if srv.rec[0].live_depth != 0:
            k = _live_depth(srv, ws, n, waiting)
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
        if n > 0 and tree.auto[0] != 0:
            k, kind = auto_tree_nb(tab, srv, st, ws, tree, n)
            if st.rec[0].gate_off != 0:
                k = 0
        tree.step[0] = kind if k > 0 else 0
    if plan is not None:
        # Numba drops this branch while compiling an engine whose ``plan`` is None (no run of it
        # plans per sequence), so the per-sequence planner compiles only where it runs.
        if srv.rec[0].per_sequence != 0:
            return _plan_sequence(req, tab, cal, srv, st, ws, plan, n, k, key)
    return k


# -- one step: scheduling ------------------------------------------------------------------------------

@step_part
def _find_decoding(req, st, ws, n):
    """The running slots of the ``n`` requests that decode (prefill done, a token emitted) into
    ``ws.slot[:n]``, in running order, for the per-sequence planner (no pass when every running
    request decodes: each slot is its own). :func:`schedule_running_nb` writes every slot's
    scratch after it."""
    s = st.rec[0]
    if n == s.n_running:
        for j in range(n):
            ws.slot[j] = j
        return
    j = 0
    for i in range(s.n_running):
        r = st.running[i]
        if req.emitted[r] > 0 and req.prefilled[r] >= req.target[r]:
            ws.slot[j] = i
            j += 1


@step_part
def _allocate(req, st, o, i, tokens):
    """Give running slot ``i`` blocks for ``tokens`` tokens, preempting the most recently
    admitted running requests while the cache is full. Returns False when slot ``i`` itself
    had to be preempted."""
    s = st.rec[0]
    r = st.running[i]
    extra = _grow(req, st, o, r, tokens)
    if extra == 0:
        return True  # the common case: what it holds suffices (and the cache never holds more than it has)
    while extra > o.kv_blocks - s.kv_used:
        victim_slot = s.n_running - 1
        _preempt_last(req, st)
        if victim_slot == i:
            return False
    req.blocks[r] += extra
    s.kv_used += extra
    return True


@step_part
def _schedule_decodes(req, srv, st, ws, budget, k):
    """:func:`schedule_running_nb` when every running request decodes ``k`` drafts and the budget
    holds them all: each takes ``1 + k`` tokens, so only its KV blocks are left to settle. With
    an unlimited cache nobody can be preempted and nothing reads a step's blocks before its
    outcome, so :func:`apply_nb` settles them as it goes (``tally.kv_later``) and there is no
    pass here."""
    s = st.rec[0]
    o = srv.rec[0]
    tally = ws.tally[0]
    preempted = False
    i = np.int64(0)
    if o.kv_blocks == NO_CAP:
        i = s.n_running
        tally.kv_later = 1
    while i < s.n_running:
        r = st.running[i]
        n_before = s.n_running
        if not _allocate(req, st, o, i, req.prompt[r] + req.emitted[r] + k):
            preempted = True
            break
        preempted = preempted or s.n_running < n_before
        i += 1
    tally.all_decode = k
    tally.decoding = i
    tally.rows = i * k
    tally.drafted = i * k
    return budget - i * (1 + k), preempted


@step_part
def schedule_running_nb(req, srv, st, ws, budget, k):
    """Schedule the running requests in admission order within the token ``budget``.

    A decoding sequence (prefill done, a token emitted) takes ``1 + drafts`` tokens: ``k`` drafts
    under a uniform policy, its planned ``ws.vdepth`` under the sequence policy, cut to what the
    budget has left; a partly prefilled request takes the next chunk of its prefill. Each holds
    KV blocks for what it has computed plus this step's tokens (drafts as lookahead); when the
    cache is full the most recently admitted running request is preempted. Writes, per running
    slot, ``ws.take`` (``UNSCHEDULED`` past the budget) and ``ws.dec_of``, and per decoding
    sequence its verified depth ``ws.vdepth``: the one pass over the running requests before the
    step's outcome.

    Returns
    -------
    (int, bool)
        The budget left and whether anything was preempted.
    """
    s = st.rec[0]
    o = srv.rec[0]
    uniform = o.per_sequence == 0
    if uniform and s.n_running == s.ctx_seqs and s.n_running * (1 + k) <= budget:
        return _schedule_decodes(req, srv, st, ws, budget, k)
    preempted = False
    # Typed int64 from the start (not the literal 0): Numba types a call inside a loop at each
    # pass of its inference, so a literal start compiles the callee once more for it.
    i = np.int64(0)
    j = np.int64(0)
    # Counted in locals and added once (a local stays in a register): drafts the budget cut, and
    # the step's tally of decoding sequences, rows, drafts and prefill chunks.
    cut = np.int64(0)
    rows = np.int64(0)
    drafted = np.int64(0)
    prefills = np.int64(0)
    ptok = np.int64(0)
    while i < s.n_running and budget > 0:
        r = st.running[i]
        decoding = req.emitted[r] > 0 and req.prefilled[r] >= req.target[r]
        want = np.int64(0)
        if decoding:
            want = 1 + (k if uniform else ws.vdepth[j])
            take = want if want < budget else budget
            tokens = req.prompt[r] + req.emitted[r] + take - 1
        else:
            left = req.target[r] - req.prefilled[r]
            take = left if left < budget else budget
            tokens = req.prefilled[r] + take
        n_before = s.n_running
        if not _allocate(req, st, o, i, tokens):
            preempted = True
            break
        preempted = preempted or s.n_running < n_before
        if decoding:
            ws.dec_of[i] = j
            ws.vdepth[j] = take - 1
            cut += want - take
            rows += take - 1
            drafted += k if uniform else ws.known[j]
            j += 1
        else:
            ws.dec_of[i] = NOT_DECODING
            prefills += 1
            ptok += take
        ws.take[i] = take
        budget -= take
        i += 1
    for rest in range(i, s.n_running):  # past the budget: they wait
        ws.take[rest] = UNSCHEDULED
    s.drafts_cut += cut
    tally = ws.tally[0]
    tally.decoding += j
    tally.rows += rows
    tally.drafted += drafted
    tally.prefills += prefills
    tally.prefill_tokens += ptok
    return budget, preempted


@step_part
def admit_nb(req, srv, st, ws, budget, whole):
    """Admit waiting requests first come first served while slots, budget and KV blocks last.

    ``whole``: each admitted request prefills all of its target in this step (separate prefill
    steps: the first admission may pass the budget, later ones must fit it); otherwise it takes
    the next chunk the budget allows. A request is admitted only when its chunk's blocks fit.

    Returns
    -------
    int
        The budget left.
    """
    s = st.rec[0]
    o = srv.rec[0]
    first = True
    while s.q_len > 0 and s.n_running < o.max_num_seqs and (budget > 0 or whole):
        r = st.queue[s.q_head]
        left = req.target[r] - req.prefilled[r]
        if whole:
            if not first and left > budget:
                break
            take = left
        else:
            take = left if left < budget else budget
        extra = _grow(req, st, o, r, req.prefilled[r] + take)
        if extra > o.kv_blocks - s.kv_used:
            break
        _pop_front(st)
        req.blocks[r] += extra
        s.kv_used += extra
        if req.sched_s[r] != req.sched_s[r]:
            req.sched_s[r] = s.t_s
        i = s.n_running
        st.running[i] = r
        ws.dec_of[i] = NOT_DECODING
        ws.take[i] = take
        s.n_running = i + 1
        budget -= take
        first = False
        tally = ws.tally[0]
        tally.prefills += 1
        tally.prefill_tokens += take
    return budget


# -- one step: price and outcome -------------------------------------------------------------------------

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
    if tab.contexts.shape[0] == 0:
        return _decode_cost_at(tab.wcs, srv, n, rows, k, cut)
    s = st.rec[0]
    c = s.ctx_tokens / s.ctx_seqs
    s.ctx_priced += c
    lo, hi, t = context_bracket_nb(tab.contexts, c)
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
    if tab.contexts.shape[0] == 0:
        return _tree_cost_at(tab.wcs, tree.prices[0], tree, n, rows, k, cut)
    s = st.rec[0]
    c = s.ctx_tokens / s.ctx_seqs
    s.ctx_priced += c
    lo, hi, t = context_bracket_nb(tab.contexts, c)
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


@step_part
def _release_finished(req, st, first, done):
    """Drop the ``done`` finished requests from the running slots (keeping admission order),
    freeing their blocks; ``first``: the first slot that finished (the slots before it stay where
    they are). Past the last finished one the rest move up without being read."""
    s = st.rec[0]
    w = first
    i = first
    while done > 0:
        r = st.running[i]
        if req.emitted[r] < req.output[r]:
            st.running[w] = r
            w += 1
        else:
            s.kv_used -= req.blocks[r]
            req.blocks[r] = 0
            done -= 1
        i += 1
    for m in range(i, s.n_running):
        st.running[w] = st.running[m]
        w += 1
    s.n_running = w


@step_part
def log_step_nb(st, log, t, width, depth, tokens, prefill_tokens):
    """Record every ``stride``-th decode step; when the log is full keep every other entry and
    double the stride, so the log always spans the whole run in at most its capacity."""
    s = st.rec[0]
    step = s.log_index
    s.log_index = step + 1
    cap = log.t_s.shape[0]
    # The stride is a power of two (1, doubled): a mask, not a division, on every step.
    if cap == 0 or step & (s.log_stride - 1) != 0:
        return
    if s.log_count == cap:
        half = 0
        for i in range(0, cap, 2):
            log.t_s[half] = log.t_s[i]
            log.width[half] = log.width[i]
            log.depth[half] = log.depth[i]
            log.tokens[half] = log.tokens[i]
            log.kv_blocks[half] = log.kv_blocks[i]
            log.prefill_tokens[half] = log.prefill_tokens[i]
            half += 1
        s.log_count = half
        s.log_stride *= 2
        if step & (s.log_stride - 1) != 0:
            return
    c = s.log_count
    log.t_s[c] = t
    log.width[c] = width
    log.depth[c] = depth
    log.tokens[c] = tokens
    log.kv_blocks[c] = s.kv_used
    log.prefill_tokens[c] = prefill_tokens
    s.log_count = c + 1


# -- one step, one replica -------------------------------------------------------------------------------

@step_part
def _clear_tally(ws):
    """A new step's tally: nothing scheduled yet."""
    tally = ws.tally[0]
    tally.all_decode = -1
    tally.kv_later = 0
    tally.decoding = 0
    tally.rows = 0
    tally.drafted = 0
    tally.prefills = 0
    tally.prefill_tokens = 0


@step_part
def _schedule_nb(req, tab, cal, srv, st, ws, plan, tree, key):
    """Decide the step: which running requests run with how many tokens, which waiting ones are
    admitted. Returns ``(n, k)``: the decoding sequences planned and the drafted depth."""
    s = st.rec[0]
    o = srv.rec[0]
    n = s.ctx_seqs  # the decoding requests: kept as they change (apply, preemption), not counted
    _clear_tally(ws)
    budget = o.max_num_batched_tokens
    # Each verb has one call site: the helpers are inlined, and every copy costs compile time.
    separate = o.chunked == 0
    if separate:
        # Separate prefill steps: a step that can admit prefills the admitted alone.
        before = s.n_running
        admit_nb(req, srv, st, ws, budget, separate)  # whole prefills; a variable, not a literal: one compile
        if s.n_running > before:
            # The running wait for the admitted's prefill: apply_nb passes over the admitted alone
            # (no per-slot scratch is written for the others).
            return 0, 0
    k = plan_depths_nb(req, tab, cal, srv, st, ws, plan, tree, n, key)
    budget, preempted = schedule_running_nb(req, srv, st, ws, budget, k)
    if not separate and not preempted:
        admit_nb(req, srv, st, ws, budget, separate)  # chunked: separate is False here
    return n, k


@step_part
def _price_nb(tab, srv, st, ws, tree, n, k):
    """Price the scheduled step and count it. Returns ``(ms, decoding sequences, rows, prefill
    tokens)``. A mixed step costs its decode part ``d`` plus its prefill part ``p``, less, when
    priced as one forward pass, the part the two share: ``min(d, p, p_fixed)`` with ``p_fixed``
    the prefill cost's per-step fixed part (time and energy alike). The saving is taken from the
    prefill part, which then pays only its tokens' marginal cost."""
    s = st.rec[0]
    tally = ws.tally[0]  # counted as the step was scheduled
    n_sched = tally.decoding
    rows = tally.rows
    drafted = tally.drafted
    ptok = tally.prefill_tokens
    prefill = tally.prefills > 0
    cut = n_sched != n or (srv.rec[0].per_sequence == 0 and rows != n * k)
    if tree is not None and tree.step[0] == 1:
        dms, dj = tree_cost_nb(tab, st, tree, n_sched, rows, k, cut)
    else:
        dms, dj = decode_cost_nb(tab, srv, st, n_sched, rows, k, cut)
    pms = 0.0
    pj = 0.0
    if prefill:
        pms, pj = prefill_cost_nb(srv, ptok)
        if n_sched > 0 and srv.rec[0].one_pass != 0:
            pms -= min(dms, pms, srv.rec[0].prefill_fixed_ms)
            pj -= min(dj, pj, srv.rec[0].prefill_fixed_j)
        s.prefill_steps += 1
        s.prefill_tokens += ptok
    if n_sched > 0:
        s.decode_steps += 1
        s.seq_steps += n_sched
        s.rows += rows
        s.drafted += drafted
        if k > 0:
            s.spec_steps += 1
        if prefill:
            s.mixed_steps += 1
    s.decode_j += dj
    s.prefill_j += pj
    s.decode_s += dms / 1000.0
    s.prefill_s += pms / 1000.0
    return dms + pms, n_sched, rows, ptok


@step_part
def step_nb(req, tab, cal, srv, st, log, ws, plan, tree):
    """Advance one replica by one step.

    Schedules running requests first, then admissions (see :func:`schedule_running_nb` and
    :func:`admit_nb`), prices the step, moves time to its end and applies its outcome.

    Parameters
    ----------
    req : Requests
    tab : TableArrays
    cal : CalArrays
    srv : Server
    st : ReplicaState
        This replica's state; modified in place.
    log : StepLog
        This replica's step log; modified in place.
    ws : Workspace
        Scratch sized for ``max_num_seqs`` sequences (may be shared by replicas stepped in turn).
    plan : PlanWorkspace or None
        The per-sequence planner's workspace (shared likewise); None for an engine none of whose
        runs plans per sequence (the ``sequence`` policy), which then compiles without that planner.
    tree : TreeArrays or None
        A tree policy's trees; None for every other policy, whose engine then compiles without them.

    Returns
    -------
    bool
        False when the replica has nothing to do (no running and no waiting request): nothing
        changed, and the caller moves time on (:func:`idle_until_nb`).
    """
    s = st.rec[0]
    if s.n_running == 0 and s.q_len == 0:
        return False
    key = seed_key_nb(srv.rec[0].seed)
    n, k = _schedule_nb(req, tab, cal, srv, st, ws, plan, tree, key)
    ms, n_sched, rows, ptok = _price_nb(tab, srv, st, ws, tree, n, k)
    t = s.t_s + ms / 1000.0
    tokens, accepted, done, first_done = apply_nb(req, cal, srv, st, ws, tree, t, key)
    # The blocks the step held (settled by scheduling, or by apply: it frees none).
    if s.kv_used > s.kv_peak:
        s.kv_peak = s.kv_used
    s.kv_block_s += s.kv_used * (ms / 1000.0)
    s.emitted += tokens
    s.accepted += accepted
    if srv.rec[0].adaptive != 0 and n_sched > 0 and k > 0:
        adapt_nb(srv, st, accepted / n_sched)
    if n_sched > 0:
        log_step_nb(st, log, t, n_sched, rows / n_sched, tokens, ptok)
    if done > 0:
        _release_finished(req, st, first_done, done)
    s.t_s = t
    return True


@step_part
def idle_until_nb(srv, st, t):
    """Move an idle replica's clock to ``t``, accruing idle power over the gap."""
    s = st.rec[0]
    if t > s.t_s:
        gap = t - s.t_s
        s.idle_j += srv.rec[0].idle_w * gap
        s.idle_s += gap
        s.t_s = t


@kernel
def run_nb(req, tab, cal, srv, st, log, ws, plan, tree, step_limit):
    """The single-replica driver: put arrived requests in the queue, step, jump idle gaps.

    Returns after ``step_limit`` steps (call again to continue: the result does not depend on
    where a run is cut) or when every request has finished.

    Returns
    -------
    bool
        True when every request has finished.
    """
    s = st.rec[0]
    n_req = req.arrival_s.shape[0]
    steps = 0
    while steps < step_limit:
        while s.fed < n_req and req.arrival_s[s.fed] <= s.t_s:
            push_back_nb(st, s.fed)
            s.fed += 1
        if step_nb(req, tab, cal, srv, st, log, ws, plan, tree):
            steps += 1
            continue
        if s.fed >= n_req:
            return True
        idle_until_nb(srv, st, req.arrival_s[s.fed])
    return s.finished == n_req and s.fed == n_req
