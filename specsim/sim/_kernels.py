"""Numba kernels of the simulation domain: acceptance-trace replay (SPEC §5)."""

from __future__ import annotations

import numpy as np

from specsim._jit import jit


@jit
def replay_nb(accepted, width, depth, budget, step_ms, step_j):
    """Replay an acceptance trace at one width and depth until ``budget`` tokens (SPEC §5).

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
    n_entries = accepted.shape[0]
    tokens = np.int64(0)
    steps = np.int64(0)
    ms = 0.0
    joules = 0.0
    cursor = np.int64(0)
    while tokens < budget:
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
    return tokens, steps, ms, joules, cursor
