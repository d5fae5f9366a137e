"""Numba kernels of the serving engine's step and driver: one replica advanced one step at a time.

:func:`step_nb` advances one replica (one server) by one step: it schedules the step (running
requests first, then admissions from the waiting queue: :mod:`specsim.sim._schedule_kernels`,
with the depths of :mod:`specsim.sim._depth_kernels`), prices it, and applies its outcome
(:mod:`specsim.sim._outcome_kernels`). :func:`run_nb` is the single-replica driver: it feeds
arrivals into the queue, steps, and jumps idle gaps. A fleet driver can interleave several
replicas in time order by calling :func:`step_nb` and :func:`idle_until_nb` on each replica's state.

Every kernel takes bundles (:mod:`specsim.sim.bundles`): ``req`` (the requests), ``tab`` (the
cost table), ``cal`` (the draft-outcome model), ``srv`` (the server), ``st`` (one replica's
state), ``log`` (its step log), ``ws`` (per-step scratch), ``plan`` (the per-sequence
planner's workspace, or None where no run plans per sequence) and ``tree`` (a tree policy's
trees, or None for every other policy: docs/simulation.md#draft-trees). All loop state lives in
them, so a run can stop after any step and resume with the same result. See docs/simulation.md for the
scheduling rules and the price of a step.
"""

from __future__ import annotations

from specsim.sim._depth_kernels import adapt_nb, plan_depths_nb
from specsim.sim._draw_kernels import seed_key_nb
from specsim.sim._outcome_kernels import apply_nb, decode_cost_nb, prefill_cost_nb, tree_cost_nb
from specsim.sim._schedule_kernels import admit_nb, kernel, push_back_nb, schedule_running_nb, step_part


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
def _decode_part_nb(tab, srv, st, ws, tree, n, k):
    """(ms, J) of the scheduled step's decode part: the chain's price (:func:`decode_cost_nb`)
    or, for a step that verifies a branching tree, the tree's (:func:`tree_cost_nb`). A step is
    cut when it scheduled fewer than the ``n`` decoding sequences planned or, under a uniform
    policy, fewer rows than ``n * k``."""
    tally = ws.tally[0]  # counted as the step was scheduled
    n_sched = tally.decoding
    rows = tally.rows
    cut = n_sched != n or (srv.rec[0].per_sequence == 0 and rows != n * k)
    if tree is not None and tree.step[0] == 1:
        return tree_cost_nb(tab, st, tree, n_sched, rows, k, cut)
    return decode_cost_nb(tab, srv, st, n_sched, rows, k, cut)


@step_part
def _price_nb(srv, st, ws, k, dms, dj):
    """Price the scheduled step whose decode part costs ``dms`` ms and ``dj`` J
    (:func:`_decode_part_nb`) and count it. Returns ``(ms, decoding sequences, rows, prefill
    tokens)``. A mixed step costs its decode part ``d`` plus its prefill part ``p``, less, when
    priced as one forward pass, the part the two share: ``min(d, p, p_fixed)`` with ``p_fixed``
    the prefill cost's per-step fixed part (time and energy alike). The saving is taken from the
    prefill part, which then pays only its tokens' marginal cost. Takes no table: its one
    compiled signature serves tables with a context axis and without."""
    s = st.rec[0]
    tally = ws.tally[0]  # counted as the step was scheduled
    n_sched = tally.decoding
    rows = tally.rows
    drafted = tally.drafted
    ptok = tally.prefill_tokens
    prefill = tally.prefills > 0
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
    dms, dj = _decode_part_nb(tab, srv, st, ws, tree, n, k)
    ms, n_sched, rows, ptok = _price_nb(srv, st, ws, k, dms, dj)
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
