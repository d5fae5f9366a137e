"""Numba kernel of a fleet: several serving replicas behind a router, advanced in one time-ordered
simulation (see docs/fleets.md).

Each replica is exactly the single-server engine fed the requests routed to it: its bundles
(requests, state, step log) are views of one row of the fleet's 2-D arrays, and the fleet
advances it with the engine's own :func:`~specsim.sim._engine_kernels.step_nb`, one step at a
time. Between steps the kernel routes every arrival that is due, so a router decides on the
replicas' live state (outstanding requests, KV in use) at that moment.

Event order: the next event is the earliest of (a) the next unrouted arrival and (b) the start
of the next step of a busy replica (the end of its previous step; for a replica with nothing
running, the arrival of its first waiting request). An arrival at or before that start is routed
first, so a step admits exactly the arrivals a single server fed the same requests would admit.
Ties between replicas go to the lower index.

Like the engine kernel, every piece of state lives in arrays the caller owns, so a call can stop
(after ``step_limit`` steps, or when a replica's request rows are full) and be called again.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from specsim._jit import jit
from specsim.sim._engine_kernels import idle_until_nb, step_nb
from specsim.sim._schedule_kernels import push_back_nb

# As the engine's: no reference counting (nothing here allocates; counting every array of every
# bundle handed to the engine each step would cost more than the step), and the small helpers
# inlined into the driver by LLVM (compiled once each, as the engine's ``step_part``).
kernel = jit(_nrt=False)
part = jit(_nrt=False, forceinline=True, internal=True)  # called by fleet_nb only
from specsim.sim.bundles import ReplicaState, Requests, StepLog

# Router codes.
ROUND_ROBIN, LEAST_OUTSTANDING, LEAST_KV = range(3)
# Every router: its name (fleet files, --router, grid axes) -> the code route_nb reads.
ROUTER_CODES = {"round_robin": ROUND_ROBIN, "least_outstanding": LEAST_OUTSTANDING, "least_kv": LEAST_KV}
# Return codes of fleet_nb.
DONE, GROW, PAUSED = range(3)
# Slots of FleetState.cursor.
C_NEXT, C_STEPS, C_LAST = range(3)
N_CURSOR = 3


class Group(NamedTuple):
    """One replica group's engine bundles (``tab``, ``cal``, ``srv``: see
    :mod:`specsim.sim.bundles`), its step scratch ``ws`` and per-sequence planner workspace
    ``plan`` (None unless the fleet's policy plans per sequence), shared by the group's replicas,
    which step one at a time, its step-log capacity ``log_size`` and its draft trees ``tree``
    (:class:`~specsim.sim.bundles.TreeArrays` of a tree policy, else None). Every field has the
    same type in every group (a fleet runs one policy, so every group has trees or none; a group
    without context pricing beside one with it holds an empty context axis, not None), so a
    tuple of groups is indexable at run time. Built by ``specsim.sim.fleet.fleet._group``."""

    tab: tuple
    cal: tuple
    srv: tuple
    ws: tuple
    plan: object
    log_size: int
    tree: object


class FleetState(NamedTuple):
    """Everything the fleet kernel writes. Sized only by ``specsim.sim.fleet.fleet._fleet_state`` (and
    grown there, request rows doubled, when the kernel returns ``GROW``).

    R replicas, C request rows per replica, S = the widest group's ``max_num_seqs``, K = the
    deepest group's ``max_k``, L = the step-log capacity, N requests in the trace.

    arrival_s, first_s, finish_s, sched_s : float64 (R, C)
    prompt, output, emitted, prefilled, target, blocks, decode_iters : int64 (R, C)
        Row ``r`` is replica ``r``'s :class:`~specsim.sim.bundles.Requests`: the requests routed
        to it in routing (= arrival) order, as the engine reads and writes them.
    request : int64 (R, C)
        The trace index of each routed request.
    routed : int64 (R,)
        Requests routed to each replica so far.
    rec : STATE_DT (R,); running : int64 (R, S); queue : int64 (R, C); depth_hist : int64 (R, K + 1)
        Row ``r`` is replica ``r``'s :class:`~specsim.sim.bundles.ReplicaState` (its queue holds
        row indices).
    log_t_s, log_depth : float64 (R, L); log_width, log_tokens, log_kv_blocks, log_prefill_tokens : int64 (R, L)
        Row ``r`` is replica ``r``'s :class:`~specsim.sim.bundles.StepLog`.
    assignment : int64 (N,)
        The replica each trace request was routed to.
    cursor : int64 (N_CURSOR,)
        The next trace request to route; steps taken; the replica chosen last (-1 before any).
    tree_t : float64 (2P,); tree_r : int64 (2P,)
        A tournament tree over the replicas' next step starts (P = the smallest power of two
        >= R; leaf ``P + r`` is replica ``r``, node ``i`` holds the earlier of its children,
        ties to the lower replica): the next replica to step in O(1), updated in O(log R).
    """

    arrival_s: np.ndarray
    prompt: np.ndarray
    output: np.ndarray
    emitted: np.ndarray
    prefilled: np.ndarray
    target: np.ndarray
    blocks: np.ndarray
    first_s: np.ndarray
    finish_s: np.ndarray
    sched_s: np.ndarray
    decode_iters: np.ndarray
    request: np.ndarray
    routed: np.ndarray
    rec: np.ndarray
    running: np.ndarray
    queue: np.ndarray
    depth_hist: np.ndarray
    log_t_s: np.ndarray
    log_width: np.ndarray
    log_depth: np.ndarray
    log_tokens: np.ndarray
    log_kv_blocks: np.ndarray
    log_prefill_tokens: np.ndarray
    assignment: np.ndarray
    cursor: np.ndarray
    tree_t: np.ndarray
    tree_r: np.ndarray


@part
def replica_requests_nb(st, r):
    """Replica ``r``'s Requests bundle: views of its rows."""
    c = st.routed[r]
    return Requests(st.arrival_s[r, :c], st.prompt[r, :c], st.output[r, :c], st.emitted[r, :c],
                    st.prefilled[r, :c], st.target[r, :c], st.blocks[r, :c], st.first_s[r, :c],
                    st.finish_s[r, :c], st.sched_s[r, :c], st.decode_iters[r, :c])


@part
def replica_state_nb(grp, st, r):
    """Replica ``r``'s ReplicaState bundle: views of its rows, cut to its group's sizes."""
    return ReplicaState(st.rec[r:r + 1], st.running[r, :grp.ws.take.shape[0]], st.queue[r],
                        st.depth_hist[r, :grp.tab.costs.shape[1]])


@part
def replica_log_nb(grp, st, r):
    """Replica ``r``'s StepLog bundle: views of its rows, cut to its group's log size."""
    n = grp.log_size
    return StepLog(st.log_t_s[r, :n], st.log_width[r, :n], st.log_depth[r, :n], st.log_tokens[r, :n],
                   st.log_kv_blocks[r, :n], st.log_prefill_tokens[r, :n])


@part
def next_start_nb(st, r):
    """When replica ``r``'s next step starts (for an idle replica, the arrival of the first
    request waiting for it), or +inf when it has nothing to do."""
    s = st.rec[r]
    if s.n_running > 0:
        return s.t_s
    if s.q_len > 0:
        a = st.arrival_s[r, st.queue[r, s.q_head]]
        return a if a > s.t_s else s.t_s
    return np.inf


@part
def tree_update_nb(st, r):
    """Refresh replica ``r``'s leaf and the path above it after its state changed."""
    p = st.tree_t.shape[0] // 2
    i = p + r
    st.tree_t[i] = next_start_nb(st, r)
    st.tree_r[i] = r
    i //= 2
    while i >= 1:
        a, b = 2 * i, 2 * i + 1
        # The left subtree holds the lower replica indices: it wins ties.
        w = a if st.tree_t[a] <= st.tree_t[b] else b
        st.tree_t[i] = st.tree_t[w]
        st.tree_r[i] = st.tree_r[w]
        i //= 2


@part
def route_nb(router, st, kv_tokens, block_size, index):
    """The replica trace request ``index`` goes to.

    ``round_robin``: ``index % R``. ``least_outstanding``: fewest routed and unfinished requests
    (running + waiting). ``least_kv``: most free KV tokens, ``kv_tokens[r]`` (capacity) minus
    the blocks replica ``r`` holds now times ``block_size[r]``. Ties go to the first tied
    replica after the one chosen last (in replica order, wrapping), so equally loaded replicas
    take turns, as round robin would.
    """
    n_rep = st.routed.shape[0]
    if router == ROUND_ROBIN:
        return index % n_rep
    start = (st.cursor[C_LAST] + 1) % n_rep
    best = start
    if router == LEAST_OUTSTANDING:
        best_v = st.routed[start] - st.rec[start].finished
        for j in range(1, n_rep):
            r = (start + j) % n_rep
            v = st.routed[r] - st.rec[r].finished
            if v < best_v:
                best_v = v
                best = r
        return best
    best_v = kv_tokens[start] - st.rec[start].kv_used * block_size[start]
    for j in range(1, n_rep):
        r = (start + j) % n_rep
        v = kv_tokens[r] - st.rec[r].kv_used * block_size[r]
        if v > best_v:
            best_v = v
            best = r
    return best


@part
def step_replica_nb(grp, st, r):
    """Advance replica ``r`` by one engine step, after moving an idle replica's clock to the
    arrival of its first waiting request (as the single-server driver does)."""
    rs = replica_state_nb(grp, st, r)
    s = rs.rec[0]
    if s.n_running == 0:
        idle_until_nb(grp.srv, rs, st.arrival_s[r, st.queue[r, s.q_head]])
    step_nb(replica_requests_nb(st, r), grp.tab, grp.cal, grp.srv, rs, replica_log_nb(grp, st, r), grp.ws,
            grp.plan, grp.tree)


@kernel
def fleet_nb(arrival_s, prompt, output, router, groups, group_of, kv_tokens, block_size, st, step_limit):
    """Run a request trace through a fleet of replicas behind a router.

    Parameters
    ----------
    arrival_s : ndarray(float64, ndim=1), shape (N,)
        Sorted ascending.
    prompt, output : ndarray(int64, ndim=1), shape (N,)
    router : int
        ``ROUND_ROBIN``, ``LEAST_OUTSTANDING`` or ``LEAST_KV``.
    groups : tuple of Group
    group_of : ndarray(int64, ndim=1), shape (R,)
        Each replica's group.
    kv_tokens, block_size : ndarray(int64, ndim=1), shape (R,)
        Each replica's KV capacity in tokens and tokens per block (``least_kv`` only).
    st : FleetState
        Modified in place.
    step_limit : int
        Return ``PAUSED`` after this many replica steps; call again to continue.

    Returns
    -------
    int
        ``DONE``; ``GROW`` when the replica a request is routed to has no free request row (grow
        the state and call again: nothing was routed); or ``PAUSED``.
    """
    n_req = arrival_s.shape[0]
    cap = st.arrival_s.shape[1]
    steps = 0
    while True:
        best_t = st.tree_t[1]
        best = st.tree_r[1] if best_t < np.inf else -1
        i = st.cursor[C_NEXT]
        if i < n_req and (best < 0 or arrival_s[i] <= best_t):
            r = route_nb(router, st, kv_tokens, block_size, i)
            c = st.routed[r]
            if c == cap:
                return GROW
            if c == 0:
                # A replica's clock starts at its first request, as a single server's does.
                st.rec[r].t_s = arrival_s[i]
            st.arrival_s[r, c] = arrival_s[i]
            st.prompt[r, c] = prompt[i]
            st.output[r, c] = output[i]
            st.target[r, c] = prompt[i]
            st.request[r, c] = i
            st.routed[r] = c + 1
            push_back_nb(replica_state_nb(groups[group_of[r]], st, r), c)
            st.assignment[i] = r
            st.cursor[C_LAST] = r
            st.cursor[C_NEXT] = i + 1
            tree_update_nb(st, r)
            continue
        if best < 0:
            return DONE
        if steps >= step_limit:
            return PAUSED
        step_replica_nb(groups[group_of[best]], st, best)
        tree_update_nb(st, best)
        steps += 1
        st.cursor[C_STEPS] += 1
