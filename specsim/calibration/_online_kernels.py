"""Numba kernels of the online calibration and its drift monitor (``docs/telemetry.md``).

One call folds one scheduler step's outcomes into running counts and, when a drift monitor is
attached, into its CUSUM statistics. Every buffer is sized by :func:`online_buffers` only; the
kernels allocate nothing.

The state is bundled as a few flat arrays, not a NamedTuple: Numba unboxes a NamedTuple field by
field through Python on every call (about 10 µs for the bundles here), which alone would be twice
the per-step budget of a scheduler loop. The running counts, where the step began and the
window's ring are the rows of one matrix (:attr:`OnlineBuffers.flows`), so a call unboxes one
array for the three.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from specsim._jit import jit
from specsim.calibration._kernels import bucket_fast_nb

OK = -1  # a kernel returns OK, or the first bad row
BAD_LENGTH = -2  # n_conf or accepted_run has another length than the confidences' rows
# A row whose verified confidences include one above 0 (past rounding) comes back as
# ``BAD_CONFIDENCE - row``: a log-probability is at most 0, +inf included.
BAD_CONFIDENCE = -3
LOGPROB_SLACK = 1e-3  # specsim._checks.LOGPROB_SLACK, a compile-time constant here

# Columns of the monitor's float state, per stream and direction.
STAT, N_SINCE, K_SINCE, N_STEP, K_STEP = 0, 1, 2, 3, 4
# Columns of its int state.
START, ALARM = 0, 1


class OnlineBuffers(NamedTuple):
    """Everything an online calibration writes, sized by :func:`online_buffers`.

    flows : float64 (2 + W, S), ``S = 2 B + (D + 1)**2 + 1``
        Row 0, :attr:`counts`: reached drafts per bucket accepted ``[0, B)``, rejected
        ``[B, 2B)``, verify steps by ``(drafts d, accepted a)`` at ``2B + d (D + 1) + a``, and
        non-finite confidences last; whole numbers unless a half-life decays them. Row 1,
        :attr:`before`: the counts as the current step began (its own counts are the
        difference). Rows ``2..``, :attr:`ring`: the last ``W`` steps' own counts (``W = 0``
        without a sliding window), step ``t`` in row ``2 + t % W``.
    mon_f : float64 (M, 2, 5)
        Per monitored stream and direction (0 down, 1 up): statistic, outcomes and acceptances
        since the current excursion began, and this step's outcomes and acceptances.
    mon_i : int64 (M, 2, 2)
        Per stream and direction: the step the excursion began, the step of the alarm (-1: none).
    """

    flows: np.ndarray
    mon_f: np.ndarray
    mon_i: np.ndarray

    @property
    def counts(self) -> np.ndarray:
        return self.flows[0]

    @property
    def before(self) -> np.ndarray:
        return self.flows[1]

    @property
    def ring(self) -> np.ndarray:
        return self.flows[2:]


def online_buffers(n_buckets: int, max_depth: int, window: int, n_streams: int) -> OnlineBuffers:
    """The one place an online calibration's buffers are sized."""
    size = 2 * n_buckets + (max_depth + 1) ** 2 + 1
    mon_i = np.zeros((n_streams, 2, 2), dtype=np.int64)
    mon_i[:, :, ALARM] = -1
    return OnlineBuffers(np.zeros((2 + window, size)), np.zeros((n_streams, 2, 5)), mon_i)


@jit(inline="always")
def cusum_step_nb(llr, mon_f, mon_i, step, threshold):
    """Close one step for every stream: its outcomes ``n`` with ``k`` accepted move each one-sided
    statistic by ``k * llr[accepted] + (n - k) * llr[rejected]``, floored at 0 until an alarm
    latches it. The step a statistic leaves 0 is where its excursion (the change) began."""
    for m in range(llr.shape[0]):
        n = mon_f[m, 0, N_STEP]
        if n == 0.0:
            continue
        k = mon_f[m, 0, K_STEP]
        mon_f[m, 0, N_STEP] = 0.0
        mon_f[m, 0, K_STEP] = 0.0
        for dr in range(2):
            prev = mon_f[m, dr, STAT]
            s = prev + k * llr[m, dr, 1] + (n - k) * llr[m, dr, 0]
            latched = mon_i[m, dr, ALARM] >= 0
            if s <= 0.0 and not latched:
                mon_f[m, dr, STAT] = 0.0
                continue
            if prev == 0.0 and not latched:
                mon_i[m, dr, START] = step
                mon_f[m, dr, N_SINCE] = 0.0
                mon_f[m, dr, K_SINCE] = 0.0
            mon_f[m, dr, STAT] = s if s > 0.0 else 0.0
            if latched:
                continue  # the alarm's outcomes are those up to it
            mon_f[m, dr, N_SINCE] += n
            mon_f[m, dr, K_SINCE] += k
            if s > threshold:
                mon_i[m, dr, ALARM] = step


@jit(inline="always")
def _tally_step_nb(counts, before, nb, side, pool_of_bucket, mon_f):
    """This step's outcomes per monitored stream, from the counts it added: per pool, its
    buckets' reached drafts; per position ``j``, the steps with ``d >= j`` and ``a >= j - 1``
    (``a >= j`` accepted). Differences are rounded: decayed counts are not whole numbers."""
    n_streams = mon_f.shape[0]
    first_pos = 0
    if pool_of_bucket.shape[0] == nb:
        first_pos = pool_of_bucket[nb - 1] + 1
        for b in range(nb):
            acc = np.floor(counts[b] - before[b] + 0.5)
            rej = np.floor(counts[nb + b] - before[nb + b] + 0.5)
            g = pool_of_bucket[b]
            mon_f[g, 0, N_STEP] += acc + rej
            mon_f[g, 0, K_STEP] += acc
    if first_pos >= n_streams:
        return
    for d in range(1, side):
        for a in range(d + 1):
            k = 2 * nb + d * side + a
            c = np.floor(counts[k] - before[k] + 0.5)
            if c == 0.0:
                continue
            reach = a + 1 if a < d else d
            for j in range(reach):
                m = first_pos + j
                if m >= n_streams:
                    break
                mon_f[m, 0, N_STEP] += c
                if j < a:
                    mon_f[m, 0, K_STEP] += c


@jit
def online_update_nb(edges, cells, conf, n_conf, accepted_run, decay, flows, pool_of_bucket, llr, mon_f, mon_i, step,
                     threshold):
    """Fold one step's outcomes into the running counts (and the drift monitor).

    Sequence ``i`` verified ``n_conf[i]`` drafts with confidences ``conf[i, :n_conf[i]]`` and
    accepted the first ``accepted_run[i]`` of them. Its reached drafts are positions
    ``1..min(a + 1, d)``: accepted below ``a + 1``, the one at ``a + 1`` rejected. A sequence with
    no draft adds nothing.

    Parameters
    ----------
    edges : ndarray(float32, ndim=1), shape (B,)
    cells : ndarray(int64, ndim=1)
        The coarse bucket index of ``edges`` (``calibration.bucket_cells``).
    conf : ndarray(float32, ndim=2), shape (n, m)
    n_conf, accepted_run : ndarray(int64, ndim=1), shape (n,)
    decay : float
        Factor every running count is multiplied by first (1.0: none).
    flows, mon_f, mon_i : see :class:`OnlineBuffers`
    pool_of_bucket : ndarray(int64, ndim=1), shape (B,) or (0,)
        Monitored pool of each bucket; empty: no pool streams. Position ``j`` is stream
        ``pools + j - 1``.
    llr : ndarray(float64, ndim=3), shape (M, 2, 2)
        Log-likelihood ratio per stream, direction and outcome (rejected 0, accepted 1).
    step : int
        This step's index (for the monitor's start and alarm steps).
    threshold : float
        Alarm when a statistic exceeds it.

    Returns
    -------
    int
        ``OK`` (-1); ``BAD_LENGTH`` (-2) when ``n_conf`` or ``accepted_run`` has another length
        than ``conf`` has rows; the first row with ``n_conf`` outside ``0..=min(m, D)`` or an
        accepted run outside ``0..=n_conf``; or ``BAD_CONFIDENCE - i`` for the first row ``i``
        whose verified confidences hold one above 0 (a positive or infinite log-probability).
        Nothing is changed unless ``OK``.
    """
    n = conf.shape[0]
    nb = edges.shape[0]
    counts = flows[0]
    size = counts.shape[0]
    side = _side_nb(nb, size)
    if n_conf.shape[0] != n or accepted_run.shape[0] != n:
        return BAD_LENGTH
    for i in range(n):
        d = n_conf[i]
        if d < 0 or d > conf.shape[1] or d >= side or accepted_run[i] < 0 or accepted_run[i] > d:
            return i
        for j in range(d):
            if conf[i, j] > LOGPROB_SLACK:  # NaN (unknown) compares False and passes
                return BAD_CONFIDENCE - i
    _begin_step_nb(flows, step, decay)
    bits = conf.view(np.int32)
    for i in range(n):
        d = n_conf[i]
        if d == 0:
            continue
        a = accepted_run[i]
        reach = a + 1 if a < d else d
        for j in range(reach):
            c = conf[i, j]
            if np.isnan(c):
                counts[size - 1] += 1.0
            else:
                b = bucket_fast_nb(edges, cells, c, bits[i, j])
                counts[b if j < a else nb + b] += 1.0
        counts[2 * nb + d * side + a] += 1.0
    _end_step_nb(flows, nb, side, pool_of_bucket, llr, mon_f, mon_i, step, threshold)
    return OK


@jit(inline="always")
def _side_nb(nb, size):
    """``D + 1`` from the size of ``counts`` (``2 B + (D + 1)**2 + 1``)."""
    side = 1
    while (side + 1) * (side + 1) + 2 * nb + 1 <= size:
        side += 1
    return side


@jit(inline="always")
def _ring_row_nb(flows, step):
    """The row of ``flows`` that holds step ``step``'s own counts in the window (-1: no window)."""
    window = flows.shape[0] - 2
    return 2 + step % window if window > 0 else -1


@jit(inline="always")
def _begin_step_nb(flows, step, decay):
    """Decay the counts, drop the step leaving the window, and remember where this step began."""
    row = _ring_row_nb(flows, step)
    counts, before, leaving = flows[0], flows[1], flows[max(row, 0)]
    for s in range(counts.shape[0]):
        c = counts[s] * decay
        if row >= 0:
            c -= leaving[s]
        counts[s] = c
        before[s] = c


@jit(inline="always")
def _end_step_nb(flows, nb, side, pool_of_bucket, llr, mon_f, mon_i, step, threshold):
    """Keep this step's own counts in the window and move the drift monitor by them."""
    row = _ring_row_nb(flows, step)
    if row >= 0:
        counts, before, own = flows[0], flows[1], flows[row]
        for s in range(counts.shape[0]):
            own[s] = counts[s] - before[s]
    if llr.shape[0] > 0:
        _tally_step_nb(flows[0], flows[1], nb, side, pool_of_bucket, mon_f)
        cusum_step_nb(llr, mon_f, mon_i, step, threshold)


@jit
def online_add_steps_nb(nb, hist, decay, flows, pool_of_bucket, llr, mon_f, mon_i, step, threshold):
    """Fold one step given as a histogram of chains without confidences (telemetry).

    Parameters
    ----------
    nb : int
        Buckets of the calibration.
    hist : ndarray(int64, ndim=2), shape (D + 1, D + 1)
        Chains of this step by ``(drafts d, accepted run a)``, ``a <= d``; ``D`` as the buffers.
    Other parameters as :func:`online_update_nb`.

    Returns
    -------
    int
        ``OK`` (-1), or ``d * (D + 1) + a`` of the first cell with a negative count or ``a > d``.
    """
    counts = flows[0]
    side = _side_nb(nb, counts.shape[0])
    for d in range(side):
        for a in range(side):
            if hist[d, a] < 0 or (a > d and hist[d, a] != 0):
                return d * side + a
    _begin_step_nb(flows, step, decay)
    size = counts.shape[0]
    for d in range(1, side):
        for a in range(d + 1):
            c = hist[d, a]
            if c == 0:
                continue
            counts[2 * nb + d * side + a] += c
            # Reached drafts without a confidence are counted apart, as a NaN confidence is.
            counts[size - 1] += c * (a + 1 if a < d else d)
    _end_step_nb(flows, nb, side, pool_of_bucket, llr, mon_f, mon_i, step, threshold)
    return OK
