"""Numba kernels of the simulation domain: acceptance-trace replay (docs/replay.md)."""

from __future__ import annotations

import numpy as np

from specsim._jit import jit


@jit
def replay_nb(accepted, width, depth, budget, step_ms, step_j):
    """Replay an acceptance trace at one width and depth until ``budget`` tokens (docs/replay.md).

    Parameters
    ----------
    accepted : ndarray(int8, ndim=1), shape (L,)
        Accepted run of every logged verify step, in serve order; L >= 1.
    width : int
        Streams per step (>= 1).
    depth : int
        Drafts per stream per step; 0 = plain decode (no trace entry is used).
    budget : int
        Stop after the first step that brings the total to ``budget`` tokens or more.
    step_ms, step_j : float
        Cost of one step at this width and depth (``step_j`` NaN when unknown).

    Returns
    -------
    (tokens, steps, ms, joules, cursor) : (int64, int64, float64, float64, int64)
        ``cursor`` is the next trace entry a further step would use.
    """
    counts = np.zeros(3, dtype=np.int64)
    sums = np.zeros(2, dtype=np.float64)
    replay_steps_nb(accepted, width, depth, budget, step_ms, step_j, counts, sums, np.int64(-1))
    return counts[0], counts[1], sums[0], sums[1], counts[2]


@jit
def replay_steps_nb(accepted, width, depth, budget, step_ms, step_j, counts, sums, max_steps):
    """At most ``max_steps`` steps (-1: no limit) of :func:`replay_nb`, continuing from and
    updating its state in place, so a long replay runs in chunks (progress, Ctrl-C between them).

    Parameters
    ----------
    counts : ndarray(int64), shape (3,)
        ``tokens, steps, cursor`` so far.
    sums : ndarray(float64), shape (2,)
        ``ms, joules`` so far.

    Returns
    -------
    bool
        Whether the budget is reached.
    """
    n_entries = accepted.shape[0]
    tokens = counts[0]
    steps = counts[1]
    cursor = counts[2]
    ms = sums[0]
    joules = sums[1]
    done = np.int64(0)
    while tokens < budget and done != max_steps:
        if depth == 0:
            tokens += width
        else:
            for _ in range(width):
                a = np.int64(accepted[cursor])
                tokens += 1 + (a if a < depth else depth)
                cursor += 1
                if cursor == n_entries:
                    cursor = 0
        ms += step_ms
        joules += step_j
        steps += 1
        done += 1
    counts[0] = tokens
    counts[1] = steps
    counts[2] = cursor
    sums[0] = ms
    sums[1] = joules
    return tokens >= budget
