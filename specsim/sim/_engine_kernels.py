"""Numba kernels of the serving simulation (SPEC §6): one kernel runs a whole request trace.

All loop state lives in arrays the caller owns (``istate``, ``fstate``, the active slots and the
per-request arrays), so :func:`simulate_nb` can stop after ``step_limit`` steps and be called
again to resume where it stopped: the result does not depend on where it was cut (progress
lines on long runs), and nothing is allocated per step.

Random draws are counter-based: every uniform number is a splitmix64 hash of (seed, request,
output-token index, draft position, stream), never a position in a shared stream, so a draft
meets the same confidence and the same verdict under every policy (common random numbers) and
the result does not depend on the order anything is computed in.
"""

from __future__ import annotations

import numpy as np

from specsim._jit import jit
from specsim.plan._kernels import DJ, DMS, VJ, VMS, goodput_depth_nb, row_cost_nb, sequence_depths_nb
from specsim.plan._types import PlanArrays, PlanWorkspace

# splitmix64 (Steele, Lea, Flood; OOPSLA 2014) finaliser constants and the golden-ratio increment.
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
GOLDEN = np.uint64(0x9E3779B97F4A7C15)
# Odd multipliers that spread a key field over all 64 bits before it is mixed in.
_C_REQUEST = np.uint64(0xD6E8FEB86659FD93)
_C_DRAFT = np.uint64(0xA0761D6478BD642F)
_S30, _S27, _S31, _S32, _S8 = np.uint64(30), np.uint64(27), np.uint64(31), np.uint64(32), np.uint64(8)
_LOW32 = np.uint64(0xFFFFFFFF)
_S11 = np.uint64(11)
_U32 = 1.0 / 4294967296.0  # 2 ** -32
# Draft positions are packed into the low 8 bits of the draft key.
MAX_POSITION = 255

# Draw streams: which half of a draft's hash answers which question.
STREAM_BUCKET = 0  # the high 32 bits: the confidence bucket
STREAM_ACCEPT = 1  # the low 32 bits: the verdict

# istate slots
I_NEXT, I_ACTIVE, I_FINISHED, I_DECODE_STEPS, I_PREFILL_STEPS, I_SEQ_STEPS, I_EMITTED, I_ACCEPTED, \
    I_DRAFTED, I_ROWS, I_LOG_COUNT, I_LOG_STRIDE, I_STEP_INDEX, I_SPEC_STEPS = range(14)
N_ISTATE = 14
# fstate slots
F_T, F_DECODE_J, F_PREFILL_J, F_IDLE_J, F_DECODE_S, F_PREFILL_S, F_IDLE_S = range(7)
N_FSTATE = 7


@jit
def mix64_nb(z):
    """The splitmix64 finaliser of a uint64 (a bijection that spreads every input bit)."""
    z = (z ^ (z >> _S30)) * _M1
    z = (z ^ (z >> _S27)) * _M2
    return z ^ (z >> _S31)


@jit
def seed_key_nb(seed):
    """The hash state a run starts from: ``mix64(seed + GOLDEN)`` (``seed`` a uint64)."""
    return mix64_nb(np.uint64(seed) + GOLDEN)


@jit
def request_key_nb(key, request):
    """The hash state of one request: ``mix64(key ^ request * C_REQUEST)``."""
    return mix64_nb(np.uint64(key) ^ (np.uint64(request) * _C_REQUEST))


@jit
def draft_hash_nb(rkey, token, position):
    """The 64-bit hash of one draft: ``mix64(rkey ^ (token << 8 | position) * C_DRAFT)``.

    ``token`` is the output-token index the draft would produce, ``position`` its 1-based place
    in the chain (<= MAX_POSITION, so the packing is one-to-one). One finaliser round per draft:
    the engine draws millions of them, and its two halves answer the two questions.
    """
    x = (np.uint64(token) << _S8) | np.uint64(position)
    return mix64_nb(np.uint64(rkey) ^ (x * _C_DRAFT))


@jit
def _entry(rkey, token, n_digits):
    """The acceptance-trace entry of a step state: a hash of (request, token) with position 0,
    which no draft uses, so it is independent of every draft's draws."""
    return np.int64((draft_hash_nb(rkey, token, 0) >> _S11) % np.uint64(n_digits))


@jit
def half_uniform_nb(h, stream):
    """The uniform number in [0, 1) of one stream of a draft hash (32 bits of resolution)."""
    if stream == STREAM_BUCKET:
        return float(h >> _S32) * _U32
    return float(h & _LOW32) * _U32


@jit
def uniform_nb(key, request, token, position, stream):
    """A uniform number in [0, 1) that is a pure function of its arguments.

    Parameters
    ----------
    key : uint64
        :func:`seed_key_nb` of the run's seed.
    request, token, position, stream : int
        Request index, output-token index the draft would produce, 1-based draft position
        (<= MAX_POSITION), and the stream (``STREAM_BUCKET`` or ``STREAM_ACCEPT``).
    """
    return half_uniform_nb(draft_hash_nb(request_key_nb(key, request), token, position), stream)


@jit
def bucket_of_nb(occ_cdf, u, position):
    """Inverse CDF of position ``position``'s occupancy row at ``u``.

    ``occ_cdf float64[J, B]``: row ``j - 1`` is position ``j``'s cumulative bucket weights, the
    last entry exactly 1; positions past J use the last row.
    """
    row = position - 1 if position - 1 < occ_cdf.shape[0] else occ_cdf.shape[0] - 1
    last = occ_cdf.shape[1] - 1
    b = 0
    while b < last and u >= occ_cdf[row, b]:
        b += 1
    return b


@jit
def goodput_table_nb(widths, costs, cum_priors, max_seqs, out, scratch):
    """``out[n] = goodput_depth(n)`` for n = 0..len(out) - 1."""
    for n in range(out.shape[0]):
        out[n] = goodput_depth_nb(widths, costs, cum_priors, n, max_seqs, scratch)


@jit
def _remove_finished(active, n_active, output, emitted):
    """Drop finished sequences from the active slots, keeping admission order."""
    w = 0
    for s in range(n_active):
        r = active[s]
        if emitted[r] < output[r]:
            active[w] = r
            w += 1
    return w


@jit
def _log_step(istate, log_t, log_width, log_depth, log_tokens, t, width, depth, tokens):
    """Record every ``stride``-th decode step; when the log is full keep every other entry and
    double the stride, so the log always spans the whole run in at most its capacity."""
    step = istate[I_STEP_INDEX]
    istate[I_STEP_INDEX] = step + 1
    cap = log_t.shape[0]
    if cap == 0:
        return
    stride = istate[I_LOG_STRIDE]
    if step % stride != 0:
        return
    count = istate[I_LOG_COUNT]
    if count == cap:
        half = 0
        for i in range(0, count, 2):
            log_t[half] = log_t[i]
            log_width[half] = log_width[i]
            log_depth[half] = log_depth[i]
            log_tokens[half] = log_tokens[i]
            half += 1
        count = half
        stride *= 2
        istate[I_LOG_STRIDE] = stride
        if step % stride != 0:
            istate[I_LOG_COUNT] = count
            return
    log_t[count] = t
    log_width[count] = width
    log_depth[count] = depth
    log_tokens[count] = tokens
    istate[I_LOG_COUNT] = count + 1


@jit
def simulate_nb(arrival_s, prompt_tokens, output_tokens,
                widths, costs, edges, cells, p_accept, priors, occ_cdf, conf_values,
                depth_memo, per_sequence, wcs, acc_digits,
                slack, max_batch, k_cap, row_budget,
                prefill_ms_per_token, prefill_j_per_token, idle_w, seed, step_limit,
                istate, fstate, active, emitted, first_s, finish_s, depth_hist,
                log_t, log_width, log_depth, log_tokens,
                conf, n_conf, known, vdepth, verdict, gains, owner, counts, wc):
    """Run a request trace through a continuous-batching decode server (SPEC §6).

    Each iteration admits arrived requests first-come first-served up to ``max_batch``; if any
    were admitted, one prefill step over them emits their first tokens; otherwise one decode
    step over every active sequence; with nothing active, time jumps to the next arrival and
    idle energy accrues.

    Parameters
    ----------
    arrival_s : ndarray(float64, ndim=1), shape (N,)
        Sorted ascending.
    prompt_tokens, output_tokens : ndarray(int64, ndim=1), shape (N,)
        ``output_tokens >= 1``.
    widths, costs : the table's flat arrays (``int64[W]``, ``float64[W, K + 1, 4]``).
    edges, cells, p_accept, priors : the calibration's arrays and its coarse bucket index.
    occ_cdf : ndarray(float64, ndim=2), shape (J, B)
        Cumulative bucket occupancy per draft position (see :func:`bucket_of_nb`).
    conf_values : ndarray(float32, ndim=1), shape (B,)
        The confidence the planner sees for a draft drawn in each bucket (inside that bucket).
    depth_memo : ndarray(int64, ndim=1), shape (max_batch + 1,)
        Draft depth by batch width, already clamped: the verify depth of a uniform policy, or
        the drafting depth of the per-sequence policy.
    per_sequence : bool
        True for ``sequence``: drafts ``min(k, left - 1)`` each, then §4.2 picks verify depths.
    wcs : ndarray(float64, ndim=3), shape (max_batch + 1, K + 1, 4)
        The table's costs interpolated at every width.
    acc_digits : ndarray(int64, ndim=1), shape (L,)
        Empty: draft outcomes come from the calibration. Otherwise a replayed acceptance trace
        (SPEC §5): each (request, token index) step state takes the entry its hash picks, and
        draft ``j`` is accepted when ``j <= entry``; the planner then sees no confidences.
    slack : float
    max_batch, k_cap, row_budget : int
        ``k_cap = min(k_max, max_k)``.
    prefill_ms_per_token, prefill_j_per_token, idle_w : float
    seed : uint64
    step_limit : int
        Return after this many steps (prefill and decode); call again to continue.
    istate : ndarray(int64, ndim=1), shape (N_ISTATE,)
    fstate : ndarray(float64, ndim=1), shape (N_FSTATE,)
    active : ndarray(int64, ndim=1), shape (max_batch,)
    emitted : ndarray(int64, ndim=1), shape (N,)
    first_s, finish_s : ndarray(float64, ndim=1), shape (N,)
    depth_hist : ndarray(int64, ndim=1), shape (K + 1,)
        Sequence-steps by verified depth.
    log_t, log_depth : ndarray(float64, ndim=1), shape (L,)
    log_width, log_tokens : ndarray(int64, ndim=1), shape (L,)
        The step log (see :func:`_log_step`).
    conf : ndarray(float32, ndim=2), shape (max_batch, max(K, 1))
    n_conf, known, vdepth : ndarray(int64, ndim=1), shape (max_batch,)
    verdict : ndarray(bool, ndim=2), shape (max_batch, max(K, 1))
        Whether each drafted draft is accepted (``sequence`` only).
    gains, owner, counts, wc : the planner's workspaces (see ``sequence_depths_nb``).
        Everything from ``istate`` on is modified in place.

    Returns
    -------
    bool
        True when every request has finished.
    """
    n_req = arrival_s.shape[0]
    n_digits = acc_digits.shape[0]
    max_k = costs.shape[1] - 1
    key = seed_key_nb(seed)
    plan = PlanArrays(widths, costs, edges, cells, p_accept, priors)
    ws = PlanWorkspace(gains, owner, counts, wc)
    steps = 0
    while steps < step_limit:
        t = fstate[F_T]
        nxt = istate[I_NEXT]
        n_active = istate[I_ACTIVE]

        # Admission, first come first served.
        new = 0
        ptok = 0
        while nxt < n_req and n_active < max_batch and arrival_s[nxt] <= t:
            active[n_active] = nxt
            ptok += prompt_tokens[nxt]
            n_active += 1
            new += 1
            nxt += 1
        istate[I_NEXT] = nxt

        if new > 0:
            ms = prefill_ms_per_token * ptok
            t = t + ms / 1000.0
            fstate[F_PREFILL_J] += prefill_j_per_token * ptok
            fstate[F_PREFILL_S] += ms / 1000.0
            for s in range(n_active - new, n_active):
                r = active[s]
                emitted[r] = 1
                first_s[r] = t
                if output_tokens[r] == 1:
                    finish_s[r] = t
                    istate[I_FINISHED] += 1
            istate[I_EMITTED] += new
            istate[I_PREFILL_STEPS] += 1
            n_active = _remove_finished(active, n_active, output_tokens, emitted)
            istate[I_ACTIVE] = n_active
            fstate[F_T] = t
            steps += 1
            continue

        if n_active == 0:
            if nxt >= n_req:
                return True
            a = arrival_s[nxt]
            if a > t:
                gap = a - t
                fstate[F_IDLE_J] += idle_w * gap
                fstate[F_IDLE_S] += gap
                fstate[F_T] = a
            continue

        # Decode step over every active sequence.
        n = n_active
        k = depth_memo[n]
        if per_sequence:
            kd = 0
            for s in range(n):
                r = active[s]
                need = output_tokens[r] - emitted[r] - 1
                d = k if k < need else need
                known[s] = d
                n_conf[s] = d
                e = emitted[r]
                rkey = request_key_nb(key, r)
                if n_digits > 0:
                    digit = acc_digits[_entry(rkey, e, n_digits)]
                    n_conf[s] = 0
                    for j in range(1, d + 1):
                        verdict[s, j - 1] = j <= digit
                    if d > kd:
                        kd = d
                    continue
                for j in range(1, d + 1):
                    h = draft_hash_nb(rkey, e + j - 1, j)
                    b = bucket_of_nb(occ_cdf, half_uniform_nb(h, STREAM_BUCKET), j)
                    conf[s, j - 1] = conf_values[b]
                    # The verdict is drawn now and kept: the planner sees only the confidence.
                    verdict[s, j - 1] = half_uniform_nb(h, STREAM_ACCEPT) < p_accept[b]
                if d > kd:
                    kd = d
            if kd > 0:
                rows = sequence_depths_nb(plan, conf[:n], n_conf[:n], known[:n], kd, row_budget, slack,
                                          vdepth[:n], ws)
            else:
                rows = 0
                for s in range(n):
                    vdepth[s] = 0
            ms = row_cost_nb(wcs[n, :, VMS], n, rows, max_k, wcs[n, kd, DMS])
            joules = row_cost_nb(wcs[n, :, VJ], n, rows, max_k, wcs[n, kd, DJ])
            if kd > 0:
                istate[I_SPEC_STEPS] += 1
            drafted = 0
            for s in range(n):
                drafted += known[s]
            istate[I_DRAFTED] += drafted
        else:
            rows = n * k
            ms = wcs[n, k, VMS] + wcs[n, k, DMS]
            joules = wcs[n, k, VJ] + wcs[n, k, DJ]
            for s in range(n):
                vdepth[s] = k
            if k > 0:
                istate[I_SPEC_STEPS] += 1
            istate[I_DRAFTED] += rows

        t = t + ms / 1000.0
        fstate[F_DECODE_J] += joules
        fstate[F_DECODE_S] += ms / 1000.0
        step_tokens = 0
        step_accepted = 0
        done_now = 0
        for s in range(n):
            r = active[s]
            v = vdepth[s]
            depth_hist[v] += 1
            e = emitted[r]
            need = output_tokens[r] - e - 1
            lim = v if v < need else need
            acc = 0
            if per_sequence:
                while acc < lim and verdict[s, acc]:
                    acc += 1
            elif n_digits > 0:
                digit = acc_digits[_entry(request_key_nb(key, r), e, n_digits)]
                acc = digit if digit < lim else lim
            else:
                rkey = request_key_nb(key, r)
                while acc < lim:
                    j = acc + 1
                    h = draft_hash_nb(rkey, e + acc, j)
                    b = bucket_of_nb(occ_cdf, half_uniform_nb(h, STREAM_BUCKET), j)
                    if half_uniform_nb(h, STREAM_ACCEPT) < p_accept[b]:
                        acc += 1
                    else:
                        break
            emitted[r] = e + 1 + acc
            step_tokens += 1 + acc
            step_accepted += acc
            if e + 1 + acc == output_tokens[r]:
                finish_s[r] = t
                done_now += 1
        istate[I_ACCEPTED] += step_accepted
        istate[I_FINISHED] += done_now
        istate[I_EMITTED] += step_tokens
        istate[I_ROWS] += rows
        istate[I_DECODE_STEPS] += 1
        istate[I_SEQ_STEPS] += n
        _log_step(istate, log_t, log_width, log_depth, log_tokens, t, n, rows / n, step_tokens)
        istate[I_ACTIVE] = _remove_finished(active, n, output_tokens, emitted) if done_now else n
        fstate[F_T] = t
        steps += 1
    return istate[I_FINISHED] == n_req and istate[I_NEXT] == n_req

