"""Numba kernels of the engine's scheduling: the waiting queue, KV blocks, what runs in a step."""

from __future__ import annotations

import numpy as np

from specsim._checks import NO_CAP
from specsim._jit import jit

# The engine's kernels are compiled without Numba's reference counting (they allocate nothing):
# with it, every call that hands a bundle of arrays to another kernel increfs and decrefs each
# array atomically, which cost ~0.4-0.9 us per call and made a step 15x slower or worse
# (measured; see docs/simulation.md, "Engine layout").
kernel = jit(_nrt=False)
# Every engine kernel but run_nb is called by other kernels only: no CPython wrapper (specsim._jit).
inner = jit(_nrt=False, internal=True)
# The step and its helpers are inlined into the drivers (run_nb, the fleet's): a call passes its
# bundles as hundreds of scalar arguments, which cost more than a helper's work (the step called
# once a step cost plain decoding a sixth of its time). LLVM inlines them (``forceinline``): Numba
# compiles each once. Numba's own inlining (``inline="always"``) copies and retypes a
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


# -- running requests and admissions ---------------------------------------------------------------

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
