"""Numba kernel of a fleet: several serving replicas behind a router, advanced in one time-ordered
simulation (see docs/fleets.md).

Each replica is exactly the single-server engine (:func:`specsim.sim._engine_kernels.simulate_nb`)
fed the requests routed to it: its state lives in one row of the fleet's 2-D arrays, and the fleet
advances it one step at a time. Between steps the kernel routes every arrival that is due, so a
router decides on the replicas' live state (outstanding requests, KV in use) at that moment.

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
from specsim.sim._engine_kernels import F_T, I_ACTIVE, I_FINISHED, I_NEXT, simulate_nb

# Router codes.
ROUND_ROBIN, LEAST_OUTSTANDING, LEAST_KV = range(3)
# Return codes of fleet_nb.
DONE, GROW, PAUSED = range(3)
# Slots of FleetState.cursor.
C_NEXT, C_STEPS, C_LAST = range(3)
N_CURSOR = 3


class GroupArrays(NamedTuple):
    """One replica group's inputs to the engine kernel and its step scratch (shared by the
    group's replicas, which step one at a time). Every field has the same type in every group,
    so a tuple of groups is indexable at run time.

    Built by ``specsim.sim.fleet._group_arrays``; the fields are the engine kernel's arguments
    of the same names (see :func:`specsim.sim._engine_kernels.simulate_nb`).
    """

    widths: np.ndarray
    costs: np.ndarray
    edges: np.ndarray
    cells: np.ndarray
    p_accept: np.ndarray
    priors: np.ndarray
    occ_cdf: np.ndarray
    conf_values: np.ndarray
    depth_memo: np.ndarray
    wcs: np.ndarray
    acc_digits: np.ndarray
    per_sequence: bool
    slack: float
    max_batch: int
    k_cap: int
    row_budget: int
    prefill_ms_per_token: float
    prefill_j_per_token: float
    idle_w: float
    seed: np.uint64
    conf: np.ndarray
    n_conf: np.ndarray
    known: np.ndarray
    vdepth: np.ndarray
    verdict: np.ndarray
    gains: np.ndarray
    owner: np.ndarray
    counts: np.ndarray
    wc: np.ndarray


class FleetState(NamedTuple):
    """Everything the fleet kernel writes. Sized only by ``specsim.sim.fleet._fleet_state`` (and
    grown there, row capacity doubled, when the kernel returns ``GROW``).

    R replicas, C request rows per replica, B = the widest group's batch cap, K = the deepest
    group's ``max_k``, L = the step-log capacity.

    arrival_s : float64 (R, C); prompt_tokens, output_tokens : int64 (R, C)
        The requests routed to each replica, in routing (= arrival) order.
    request : int64 (R, C)
        The trace index of each routed request.
    emitted : int64 (R, C); first_s, finish_s : float64 (R, C)
        The engine's per-request state of each replica.
    routed : int64 (R,)
        Requests routed to each replica so far.
    istate : int64 (R, N_ISTATE); fstate : float64 (R, N_FSTATE)
        The engine's counters and clock of each replica.
    active : int64 (R, B); depth_hist : int64 (R, K + 1)
    log_t, log_depth : float64 (R, L); log_width, log_tokens : int64 (R, L)
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
    prompt_tokens: np.ndarray
    output_tokens: np.ndarray
    request: np.ndarray
    emitted: np.ndarray
    first_s: np.ndarray
    finish_s: np.ndarray
    routed: np.ndarray
    istate: np.ndarray
    fstate: np.ndarray
    active: np.ndarray
    depth_hist: np.ndarray
    log_t: np.ndarray
    log_width: np.ndarray
    log_depth: np.ndarray
    log_tokens: np.ndarray
    assignment: np.ndarray
    cursor: np.ndarray
    tree_t: np.ndarray
    tree_r: np.ndarray


@jit
def next_start_nb(st, r):
    """When replica ``r``'s next step starts, or +inf when it has nothing to do."""
    if st.istate[r, I_ACTIVE] > 0:
        return st.fstate[r, F_T]
    nxt = st.istate[r, I_NEXT]
    if nxt < st.routed[r]:
        a = st.arrival_s[r, nxt]
        t = st.fstate[r, F_T]
        return a if a > t else t
    return np.inf


@jit
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


@jit
def kv_in_use_nb(st, r):
    """Tokens held in KV by replica ``r``'s running sequences: prompt + emitted of each (what a
    server reports as cache in use; waiting requests hold none yet)."""
    used = 0
    for s in range(st.istate[r, I_ACTIVE]):
        i = st.active[r, s]
        used += st.prompt_tokens[r, i] + st.emitted[r, i]
    return used


@jit
def route_nb(router, st, kv_capacity, index):
    """The replica trace request ``index`` goes to.

    ``round_robin``: ``index % R``. ``least_outstanding``: fewest routed and unfinished requests
    (running + waiting). ``least_kv``: most free KV tokens, ``kv_capacity[r]`` minus
    :func:`kv_in_use_nb`. Ties go to the first tied replica after the one chosen last (in
    replica order, wrapping), so that equally loaded replicas take turns, as round robin would.
    """
    n_rep = st.routed.shape[0]
    if router == ROUND_ROBIN:
        return index % n_rep
    start = (st.cursor[C_LAST] + 1) % n_rep
    best = start
    if router == LEAST_OUTSTANDING:
        best_v = st.routed[start] - st.istate[start, I_FINISHED]
        for j in range(1, n_rep):
            r = (start + j) % n_rep
            v = st.routed[r] - st.istate[r, I_FINISHED]
            if v < best_v:
                best_v = v
                best = r
        return best
    best_v = kv_capacity[start] - kv_in_use_nb(st, start)
    for j in range(1, n_rep):
        r = (start + j) % n_rep
        v = kv_capacity[r] - kv_in_use_nb(st, r)
        if v > best_v:
            best_v = v
            best = r
    return best


@jit
def step_replica_nb(grp, st, r):
    """Advance replica ``r`` by one engine step (after an idle jump to its first waiting
    arrival, if nothing is running)."""
    c = st.routed[r]
    mb = grp.max_batch
    kd = grp.costs.shape[1]
    simulate_nb(st.arrival_s[r, :c], st.prompt_tokens[r, :c], st.output_tokens[r, :c],
                grp.widths, grp.costs, grp.edges, grp.cells, grp.p_accept, grp.priors, grp.occ_cdf,
                grp.conf_values, grp.depth_memo, grp.per_sequence, grp.wcs, grp.acc_digits,
                grp.slack, mb, grp.k_cap, grp.row_budget,
                grp.prefill_ms_per_token, grp.prefill_j_per_token, grp.idle_w, grp.seed, 1,
                st.istate[r], st.fstate[r], st.active[r, :mb], st.emitted[r, :c], st.first_s[r, :c],
                st.finish_s[r, :c], st.depth_hist[r, :kd],
                st.log_t[r], st.log_width[r], st.log_depth[r], st.log_tokens[r],
                grp.conf, grp.n_conf, grp.known, grp.vdepth, grp.verdict, grp.gains, grp.owner, grp.counts,
                grp.wc)


@jit
def fleet_nb(arrival_s, prompt_tokens, output_tokens, router, groups, group_of, kv_capacity, st, step_limit):
    """Run a request trace through a fleet of replicas behind a router.

    Parameters
    ----------
    arrival_s : ndarray(float64, ndim=1), shape (N,)
        Sorted ascending.
    prompt_tokens, output_tokens : ndarray(int64, ndim=1), shape (N,)
    router : int
        ``ROUND_ROBIN``, ``LEAST_OUTSTANDING`` or ``LEAST_KV``.
    groups : tuple of GroupArrays
    group_of : ndarray(int64, ndim=1), shape (R,)
        Each replica's group.
    kv_capacity : ndarray(int64, ndim=1), shape (R,)
        KV tokens each replica can hold (``least_kv`` only).
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
            r = route_nb(router, st, kv_capacity, i)
            c = st.routed[r]
            if c == cap:
                return GROW
            if c == 0:
                # A replica's clock starts at its first request, as a single server's does.
                st.fstate[r, F_T] = arrival_s[i]
            st.arrival_s[r, c] = arrival_s[i]
            st.prompt_tokens[r, c] = prompt_tokens[i]
            st.output_tokens[r, c] = output_tokens[i]
            st.request[r, c] = i
            st.routed[r] = c + 1
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
