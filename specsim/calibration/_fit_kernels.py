"""Numba kernels that bin raw draft and step logs into fitting counts (docs/calibration.md#fitting).

A per-draft log is flat arrays, one entry per logged draft: ``step int64``, ``seq int64``,
``position int64`` (1-based), ``conf float32`` (top-1 log-probability), ``accepted int8`` (0/1).
A chain is the rows of one ``(step, seq)``: one sequence's drafts in one verify step. Kernels
return status codes (``OK`` or a ``BAD_*`` code with the offending row), never raise.
"""

from __future__ import annotations

import numpy as np

from specsim._jit import jit
from specsim.calibration._kernels import bucket_nb

OK = 0
BAD_START = 1  # a chain's first row is not position 1
BAD_NEXT = 2  # a row's position is not the previous row's + 1 (a gap or a repeat)
BAD_STEP = 3  # a step with accepted > drafts, or negative values


@jit
def drafts_sorted_nb(step, seq, position):
    """Whether rows are in ascending ``(step, seq, position)`` order, so no sort is needed."""
    for i in range(1, step.shape[0]):
        if step[i] != step[i - 1]:
            if step[i] < step[i - 1]:
                return False
        elif seq[i] != seq[i - 1]:
            if seq[i] < seq[i - 1]:
                return False
        elif position[i] < position[i - 1]:
            return False
    return True


@jit
def chain_order_nb(step, seq, position, step_min, seq_min, seq_span, n_slots, order):
    """Rows in ``(step, seq, position)`` order without a comparison sort, for dense ids.

    Each chain gets slot ``(step - step_min) * seq_span + (seq - seq_min)`` (< ``n_slots``); a
    counting sort over slots, then each row's position, places every row directly.

    Parameters
    ----------
    step, seq, position : ndarray(int64, ndim=1), shape (n,)
    order : ndarray(int64, ndim=1), shape (n,)
        Filled in place with row indices.

    Returns
    -------
    (status, row) : (int, int)
        ``(OK, -1)``; ``(BAD_START, row)`` for a position < 1; ``(BAD_NEXT, row)`` for a
        position past its chain's row count (a gap) or one already taken (a repeat).
    """
    n = step.shape[0]
    start = np.zeros(n_slots + 1, dtype=np.int64)
    for i in range(n):
        start[(step[i] - step_min) * seq_span + (seq[i] - seq_min) + 1] += 1
    for s in range(n_slots):
        start[s + 1] += start[s]
    for i in range(n):
        order[i] = -1
    for i in range(n):
        s = (step[i] - step_min) * seq_span + (seq[i] - seq_min)
        p = position[i]
        if p < 1:
            return BAD_START, i
        if p > start[s + 1] - start[s]:
            return BAD_NEXT, i
        dst = start[s] + p - 1
        if order[dst] != -1:
            return BAD_NEXT, i
        order[dst] = i
    return OK, -1


@jit
def bin_drafts_nb(edges, step, seq, position, conf, accepted, order, holdout_from,
                  acc_out, rej_out, steps_out, apart_out):
    """Bin a per-draft log into reached-draft bucket counts and a step histogram.

    A draft is reached when every draft before it in its chain was accepted; rows after a
    chain's first rejection are counted apart as unreached and not binned. A reached draft with
    a NaN (non-finite) confidence is counted apart too; it still counts in its chain's accepted run.

    Parameters
    ----------
    edges : ndarray(float32, ndim=1), shape (B,)
    step, seq, position : ndarray(int64, ndim=1), shape (n,)
    conf : ndarray(float32, ndim=1), shape (n,)
        NaN where the logged confidence was not finite.
    accepted : ndarray(int8, ndim=1), shape (n,)
        1 accepted, 0 rejected.
    order : ndarray(int64, ndim=1), shape (n,)
        The row visiting order: rows in ``(step, seq, position)`` order.
    holdout_from : int
        Chains whose step id is ``>= holdout_from`` go to group 1 (held out), others to group 0.
    acc_out, rej_out : ndarray(int64, ndim=2), shape (2, B)
        Reached drafts per group and bucket, accepted / rejected. Added to in place.
    steps_out : ndarray(int64, ndim=3), shape (2, D + 1, D + 1)
        Chains per group by ``(drafts, accepted run)``; ``D`` >= the longest chain. Added to.
    apart_out : ndarray(int64, ndim=2), shape (2, 2)
        Per group: ``[non-finite reached drafts, unreached drafts]``. Added to in place.

    Returns
    -------
    (status, row) : (int, int)
        ``(OK, -1)``, or a ``BAD_*`` code and the index of the first offending row.
    """
    n = order.shape[0]
    d = 0
    run = 0
    alive = True
    g = 0
    for r in range(n):
        i = order[r]
        if r == 0 or step[i] != step[order[r - 1]] or seq[i] != seq[order[r - 1]]:
            if r > 0:
                steps_out[g, d, run] += 1
            if position[i] != 1:
                return BAD_START, i
            d = 0
            run = 0
            alive = True
            g = 1 if step[i] >= holdout_from else 0
        elif position[i] != d + 1:
            return BAD_NEXT, i
        d += 1
        if alive:
            c = conf[i]
            if not np.isnan(c):
                b = bucket_nb(edges, c)
                if accepted[i] != 0:
                    acc_out[g, b] += 1
                else:
                    rej_out[g, b] += 1
            else:
                apart_out[g, 0] += 1
            if accepted[i] != 0:
                run += 1
            else:
                alive = False
        else:
            apart_out[g, 1] += 1
    if n > 0:
        steps_out[g, d, run] += 1
    return OK, -1


@jit
def bin_steps_nb(drafts, accepted, steps_out):
    """Histogram of a per-step log by ``(drafts, accepted run)``.

    Parameters
    ----------
    drafts, accepted : ndarray(int64, ndim=1), shape (n,)
    steps_out : ndarray(int64, ndim=2), shape (D + 1, D + 1)
        ``D`` >= every ``drafts``. Added to in place.

    Returns
    -------
    (status, row) : (int, int)
        ``(OK, -1)`` or ``(BAD_STEP, row)`` for a negative value or ``accepted > drafts``.
    """
    for i in range(drafts.shape[0]):
        d = drafts[i]
        a = accepted[i]
        if a < 0 or a > d:
            return BAD_STEP, i
        steps_out[d, a] += 1
    return OK, -1
