"""The simulated server's bundles: the records and arrays its kernels read and write, and the
constructors that size them (the one place each buffer is sized)."""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from specsim._checks import MAX_ACCEPTANCE_WINDOW  # the gate ring's size, a size limit


# -- the engine's bundles ---------------------------------------------------------------------------
#
# The serving engine's kernels take these bundles instead of dozens of arrays. Scalars live in
# one-element structured arrays (a record Numba reads and writes by field name); arrays sit beside
# them in NamedTuples. Every buffer is sized once, in the ``new_*`` constructors below.

# The most batch-size slots SGLang's adaptive controller (the sglang-adaptive policy) is simulated
# with: the one place its per-slot state in STATE_DT is sized; the engine refuses more.
MAX_ADAPTIVE_SLOTS = 64

# Loop state of one replica (a server): time, queue, counters, energy, log bookkeeping.
STATE_DT = np.dtype([
    ("t_s", "f8"),             # simulated time
    ("fed", "i8"),             # single-replica driver: next request to put in the queue
    ("n_running", "i8"),       # running requests (slots 0..n_running-1, admission order)
    ("q_head", "i8"),          # waiting queue: a ring over ``ReplicaState.queue``
    ("q_len", "i8"),
    ("finished", "i8"),
    ("decode_steps", "i8"),    # steps with at least one decoding sequence
    ("prefill_steps", "i8"),   # steps with prefill work
    ("mixed_steps", "i8"),     # steps with both
    ("spec_steps", "i8"),      # decode steps that drafted
    ("seq_steps", "i8"),       # sequence-steps (decoding sequences summed over steps)
    ("emitted", "i8"),
    ("accepted", "i8"),
    ("drafted", "i8"),
    ("rows", "i8"),            # draft rows verified
    ("resumed", "i8"),         # recomputed prefills that finished and emitted a token
    ("preemptions", "i8"),
    ("prefill_tokens", "i8"),  # prompt and recomputed tokens prefilled
    ("drafts_cut", "i8"),      # drafts dropped because the token budget ran out
    ("kv_used", "i8"),         # KV blocks held now
    ("kv_peak", "i8"),
    ("log_count", "i8"),
    ("log_stride", "i8"),
    ("log_index", "i8"),       # logged-kind steps seen (the stride counts them)
    ("decode_j", "f8"), ("prefill_j", "f8"), ("idle_j", "f8"),
    ("decode_s", "f8"), ("prefill_s", "f8"), ("idle_s", "f8"),
    ("kv_block_s", "f8"),      # KV blocks held, integrated over simulated time
    ("ctx_tokens", "i8"),      # KV tokens of the decoding requests (prompt + emitted - 1 each), kept as they change
    ("ctx_seqs", "i8"),        # decoding requests counted in ctx_tokens
    ("ctx_priced", "f8"),      # the mean context each decode step was priced at, summed over decode steps
    # The speculation gate (TensorRT-LLM's acceptance window): completed requests recorded, the
    # ring of their accepted lengths (slot = recorded % window), and 1 once speculation is off.
    ("gate_seen", "i8"),
    ("gate_off", "i8"),
    ("gate_ring", "f8", (MAX_ACCEPTANCE_WINDOW,)),
    # SGLang's adaptive controller, one per slot: the candidate index it serves, its EMA of
    # accepted drafts and the verify batches it has seen; ``ctl_ready`` 0 until the first step
    # sets the start; ``ctl_slot`` the slot of the step being run.
    ("ctl_ready", "i8"),
    ("ctl_slot", "i8"),
    ("ctl_index", "i8", (MAX_ADAPTIVE_SLOTS,)),
    ("ctl_ema", "f8", (MAX_ADAPTIVE_SLOTS,)),
    ("ctl_count", "i8", (MAX_ADAPTIVE_SLOTS,)),
], align=True)

# The server's options as the kernels read them.
SERVER_DT = np.dtype([
    ("max_num_seqs", "i8"),
    ("max_num_batched_tokens", "i8"),
    ("k_cap", "i8"),
    ("row_budget", "i8"),
    ("per_sequence", "i8"),    # 1: the sequence policy (per-sequence verify depths)
    ("chunked", "i8"),         # 1: chunked prefill shares steps with decodes; 0: separate prefill steps
    ("block_size", "i8"),      # KV tokens per block
    ("kv_blocks", "i8"),       # KV capacity in blocks
    ("prefill_curve", "i8"),   # 1: prefill cost from the profiled curve; 0: affine
    ("one_pass", "i8"),        # 1: a mixed step shares the prefill's fixed part with its decode part
    ("seed", "u8"),
    ("slack", "f8"),
    ("prefill_ms_per_step", "f8"), ("prefill_j_per_step", "f8"),
    ("prefill_ms_per_token", "f8"), ("prefill_j_per_token", "f8"),
    ("live_depth", "i8"),      # with context pricing: 1 the planner's depth at the live context, 2 goodput's, 3 load-aware's (above idle while nobody waits); 0 the memos
    ("spec_cap", "i8"),        # speculation cap: wider batches plain-decode
    ("prefill_fixed_ms", "f8"), ("prefill_fixed_j", "f8"),  # the prefill cost's per-step fixed part
    ("idle_w", "f8"),
    ("acceptance_window", "i8"),     # the speculation gate's window in requests; 0: no gate
    ("acceptance_threshold", "f8"),  # its threshold on the window's mean accepted drafts per step
    ("adaptive", "i8"),              # 1: SGLang's adaptive controller picks the depth (Server.cand)
    ("initial_steps", "i8"),         # its --speculative-num-steps
    ("ema_alpha", "f8"),
    ("update_interval", "i8"),
    ("warmup_batches", "i8"),
    ("down_hysteresis", "f8"),
    ("up_hysteresis", "f8"),
], align=True)


class Requests(NamedTuple):
    """The requests and what happens to them, indexed by request (shared by every replica that
    serves them). All arrays shape (N,).

    ``arrival_s`` float64, ``prompt``/``output`` int64 are inputs; the rest are written:
    ``emitted`` tokens so far, ``prefilled``/``target`` prefill progress (a preempted request's
    target becomes prompt + emitted), ``blocks`` KV blocks held, ``first_s``/``finish_s``/
    ``sched_s`` (first admission) times, NaN until they happen, ``decode_iters`` decode steps the
    request took part in (the speculation gate's denominator; counted only in a run with a gate).
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


class TableArrays(NamedTuple):
    """A cost table as the engine reads it, its fields built by the table's side
    (:func:`specsim.plan.depth_table.engine_table`): ``widths int64[W]``, ``costs float64[W, K+1,
    4]``, and ``wcs float64[S+1, K+1, 4]``, the costs interpolated at every width 0..S. With
    context pricing on a table with a context axis, ``contexts int64[C]`` and ``cwcs float64[C,
    S+1, K+1, 4]`` (``wcs`` at each measured context); else both None, and the engine compiled
    for the run carries no context pricing (a fleet's group beside one that prices contexts
    holds both empty instead, C = 0: its groups share one type)."""

    widths: np.ndarray
    costs: np.ndarray
    wcs: np.ndarray
    contexts: np.ndarray
    cwcs: np.ndarray


class CalArrays(NamedTuple):
    """The draft-outcome model: calibration arrays (``edges``, ``cells``, ``cell_p``, ``p_accept``,
    ``priors``; ``cell_p float64[BUCKET_CELLS]`` is ``calibration.cell_probabilities``, the
    sequence planner's one-load lookup of the confidences it sees), ``occ_cdf float64[J, B]``,
    ``conf_values float32[B]`` (the confidence shown for each bucket), ``digits int64[L]``
    (a replayed acceptance trace; empty to draw from the calibration), and the per-request
    spread: ``centre float64[B]`` (each bucket's rate's centre) and ``shift float64[N]`` (each
    request's log-odds shift), both empty without a spread (the draws then use ``p_accept``)."""

    edges: np.ndarray
    cells: np.ndarray
    cell_p: np.ndarray
    p_accept: np.ndarray
    priors: np.ndarray
    occ_cdf: np.ndarray
    conf_values: np.ndarray
    digits: np.ndarray
    centre: np.ndarray
    shift: np.ndarray


class Server(NamedTuple):
    """The server: ``rec`` (SERVER_DT, shape (1,)), ``depth_memo int64[S+1]`` (the policy's
    depth at every width), ``idle_memo int64[S+1]`` (its depth while no request waits: the same
    array except for ``load-aware``), the profiled prefill curve ``curve_tokens``, ``curve_ms``,
    ``curve_j`` (float64[P]; empty for the affine model), the calibration's ``cum_priors``
    (float64[K+1]; the planner's, for depths at the live context) and, for SGLang's adaptive
    controller, ``slot_of int64[S+1]`` (the slot each width uses, after CUDA-graph padding; -1 at
    width 0), ``cand int64[M, C]`` (each slot's candidates, ascending, the first ``n_cand[m]``
    valid) and ``n_cand int64[M]``: M = 0 for every other policy; under ``sglang-adaptive``,
    ``depth_memo`` is the most the server's caps let a candidate run at each width."""

    rec: np.ndarray
    depth_memo: np.ndarray
    idle_memo: np.ndarray
    curve_tokens: np.ndarray
    curve_ms: np.ndarray
    curve_j: np.ndarray
    cum_priors: np.ndarray
    slot_of: np.ndarray
    cand: np.ndarray
    n_cand: np.ndarray


class ReplicaState(NamedTuple):
    """One replica's loop state: ``rec`` (STATE_DT, shape (1,)), ``running int64[S]`` (request
    ids in admission order), ``queue int64[max(N, 1)]`` (waiting requests, a ring) and
    ``depth_hist int64[K+1]`` (sequence-steps by verified depth)."""

    rec: np.ndarray
    running: np.ndarray
    queue: np.ndarray
    depth_hist: np.ndarray


class StepLog(NamedTuple):
    """The downsampled log of decode steps, all shape (L,): end time ``t_s``, decoding ``width``,
    verified rows per sequence ``depth``, decode ``tokens`` emitted, ``kv_blocks`` held and
    ``prefill_tokens`` in the step."""

    t_s: np.ndarray
    width: np.ndarray
    depth: np.ndarray
    tokens: np.ndarray
    kv_blocks: np.ndarray
    prefill_tokens: np.ndarray


# What one step scheduled, counted as it is scheduled (so pricing needs no pass over the slots):
# decoding sequences and their verified rows and drafted depths, prefill chunks and their tokens;
# ``all_decode``: the depth k when the running slots 0..decoding-1 all decode k drafts uncut
# (a uniform policy's step of decodes alone that the budget cannot cut: apply then reads no
# per-slot scratch for them), else -1; ``kv_later``: 1 when apply settles those slots' KV blocks
# (an unlimited cache).
TALLY_DT = np.dtype([
    ("all_decode", "i8"),
    ("kv_later", "i8"),
    ("decoding", "i8"),
    ("rows", "i8"),
    ("drafted", "i8"),
    ("prefills", "i8"),
    ("prefill_tokens", "i8"),
], align=True)


class Workspace(NamedTuple):
    """Per-step scratch for batches of up to S sequences (K = max(max_k, 1)): per running slot
    ``take`` (tokens scheduled) and ``dec_of`` (index among the decoding sequences, or -1); per
    decoding sequence ``slot``, ``conf float32[S, K]``, ``n_conf``, ``known``, ``vdepth``,
    ``verdict bool[S, K]``; ``grid_width``, ``grid`` and ``scratch``, the costs at the step's
    width and context the planner reads; ``tally`` (TALLY_DT, shape (1,)), the step's counts.
    The per-sequence planner's workspace is apart
    (``specsim.plan._types.PlanWorkspace``, or None for an engine that never plans per sequence,
    :func:`specsim.sim.engine.plan_workspace_for`), so every other kernel has one type of this."""

    take: np.ndarray
    dec_of: np.ndarray
    slot: np.ndarray
    conf: np.ndarray
    n_conf: np.ndarray
    known: np.ndarray
    vdepth: np.ndarray
    verdict: np.ndarray
    grid_width: np.ndarray  # int64[1]: the width of ``grid``
    grid: np.ndarray  # float64[1, K+1, 4]: the step costs at this step's width and context
    scratch: np.ndarray  # float64[K+1, 4]: the planner's
    tally: np.ndarray  # TALLY_DT[1]: what the step scheduled


class TreeArrays(NamedTuple):
    """A tree policy's draft trees as the engine reads them (None for every other policy, which
    then compiles without them). Every tree a run verifies is a prefix of one greedy order
    (``specsim.tree.greedy_order``) of M nodes: the first ``v`` nodes of it, ``v`` the step's
    nodes per sequence (the policy's at the width, or fewer where the token budget cut it).

    ``child int64[M + 1, R]``: node ``p``'s child of rank ``r`` at ``[p + 1, r - 1]`` (row 0: the
    root's), -1 where none; ``accept float64[D, R]``: the calibration's rank acceptance;
    ``centre float64[D, R]``: each cell's centre under the calibration's request spread (shape
    (0, 0) without one); ``kind_at int64[S + 1]``: the step at each width verifies a branching
    tree (1), a chain-shaped tree (2, priced as the chain) or the calibration's chain (0, the
    chain's own draws, as ``tree:auto`` plans chains); ``prices float64[C', S + 1, K + 1, 4]``:
    the branching tree of ``v`` nodes at each width, priced by ``specsim.tree.pricing`` at each
    measured context (C' = 1: the reference grid, without context pricing), NaN where no step
    reads it; ``factor float64[1]``: the tree-attention factor; ``step int64[1]``: this step's
    ``kind_at``, written as the step is planned.

    ``tree:auto`` on a table with a context axis plans each step at the batch's mean context, as
    the chain planner policies do: ``auto int64[3]`` (1 then, else 0; the most nodes; the deepest
    chain or tree), ``shape_nodes int64[T]`` and ``shape_expected float64[T]`` (the order's
    branching prefixes, the planner's tree candidates, ascending in nodes, and their expected
    tokens; empty otherwise), ``kind_of int64[M + 1]`` (the ``kind_at`` code of the order's
    first ``v`` nodes); ``prices`` then holds every branching prefix of at most the most nodes."""

    child: np.ndarray
    accept: np.ndarray
    centre: np.ndarray
    kind_at: np.ndarray
    prices: np.ndarray
    factor: np.ndarray
    step: np.ndarray
    auto: np.ndarray
    shape_nodes: np.ndarray
    shape_expected: np.ndarray
    kind_of: np.ndarray


# -- the constructors: each buffer sized here, once ------------------------------------------------

def new_requests(arrival, prompt, output):
    """The :class:`~specsim.sim.bundles.Requests` bundle of N requests, nothing done yet."""
    n = arrival.shape[0]
    return Requests(arrival, prompt, output, np.zeros(n, np.int64), np.zeros(n, np.int64), prompt.copy(),
                    np.zeros(n, np.int64), np.full(n, np.nan), np.full(n, np.nan), np.full(n, np.nan),
                    np.zeros(n, np.int64))


def new_state(n_requests: int, max_num_seqs: int, max_k: int, t0_s: float):
    """One replica's :class:`~specsim.sim.bundles.ReplicaState`: empty, its clock at ``t0_s``."""
    rec = np.zeros(1, dtype=STATE_DT)
    rec[0]["t_s"] = t0_s
    rec[0]["log_stride"] = 1
    return ReplicaState(rec, np.zeros(max_num_seqs, np.int64), np.zeros(max(n_requests, 1), np.int64),
                        np.zeros(max_k + 1, np.int64))


def new_log(size: int):
    """An empty :class:`~specsim.sim.bundles.StepLog` of ``size`` entries."""
    return StepLog(np.zeros(size), np.zeros(size, np.int64), np.zeros(size), np.zeros(size, np.int64),
                   np.zeros(size, np.int64), np.zeros(size, np.int64))


def new_workspace(max_num_seqs: int, max_k: int):
    """The per-step :class:`~specsim.sim.bundles.Workspace` for up to ``max_num_seqs`` sequences."""
    s, kw = max_num_seqs, max(max_k, 1)
    return Workspace(np.zeros(s, np.int64), np.zeros(s, np.int64), np.zeros(s, np.int64),
                     np.full((s, kw), np.nan, dtype=np.float32), np.zeros(s, np.int64), np.zeros(s, np.int64),
                     np.zeros(s, np.int64), np.zeros((s, kw), dtype=np.bool_), np.zeros(1, np.int64),
                     np.zeros((1, max_k + 1, 4)), np.zeros((max_k + 1, 4)), np.zeros(1, TALLY_DT))
