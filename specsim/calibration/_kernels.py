"""Numba kernels over a calibration's flat arrays (docs/calibration.md#queries).

A calibration is ``edges float32[B]`` (strictly ascending upper bounds), ``p_accept float64[B]``
and ``priors float64[P]`` (conditional, position 1 first). Confidences are float32 top-1
log-probabilities; NaN means "not measured" and takes the position prior.

The per-draft helpers are inlined into the batch loops (``inline="always"``): as separate calls
they cost several times the arithmetic they do.
"""

from __future__ import annotations

import numpy as np

from specsim._jit import jit


@jit(inline="always")
def bucket_nb(edges, lp):
    """Index of the first edge with ``lp <= edge`` (float32 compare); the last bucket above all.

    NaN lands in the last bucket, as metrale's lookup does. Counting the edges below ``lp`` gives the same
    index for strictly ascending edges and has no data-dependent branch.
    """
    last = edges.shape[0] - 1
    if np.isnan(lp):
        return last
    below = 0
    for i in range(edges.shape[0]):
        if lp > edges[i]:
            below += 1
    return below if below < last else last


@jit(inline="always")
def prior_nb(priors, j):
    """Prior of 1-based position ``j``; positions past the last fitted one take the last."""
    i = j - 1
    if i < 0:
        i = 0
    last = priors.shape[0] - 1
    if i > last:
        i = last
    return priors[i]


@jit
def buckets_nb(edges, conf, out):
    """Bucket index of every confidence of a matrix (-1 for NaN).

    Parameters
    ----------
    edges : ndarray(float32, ndim=1), shape (B,)
    conf : ndarray(float32, ndim=2), shape (n, m)
    out : ndarray(int64, ndim=2), shape (n, m)
        Modified in place.
    """
    for i in range(conf.shape[0]):
        for j in range(conf.shape[1]):
            lp = conf[i, j]
            out[i, j] = -1 if np.isnan(lp) else bucket_nb(edges, lp)


@jit
def p_matrix_nb(edges, p_accept, priors, conf, n_conf, out):
    """P(accept) of every draft position of a batch, the prior where unmeasured.

    Parameters
    ----------
    conf : ndarray(float32, ndim=2), shape (n, m)
    n_conf : ndarray(int64, ndim=1), shape (n,)
        How many entries of each row are real (at most m).
    out : ndarray(float64, ndim=2), shape (n, m_out)
        Modified in place; column ``j - 1`` holds position ``j``.
    """
    m = conf.shape[1]
    for i in range(out.shape[0]):
        for j in range(1, out.shape[1] + 1):
            p = -1.0
            if j <= n_conf[i] and j <= m:
                lp = conf[i, j - 1]
                if not np.isnan(lp):
                    p = p_accept[bucket_nb(edges, lp)]
            out[i, j - 1] = prior_nb(priors, j) if p < 0.0 else p


@jit(inline="always")
def expected_accepted_into_nb(edges, p_accept, priors, conf, n_conf, depths, depth, out):
    """Body of the two expected-acceptance kernels: per-row ``depths``, or ``depth`` for every
    row when ``depths`` is empty. Returns how many rows had an ``n_conf`` outside ``0..=m`` or a
    negative depth (such a row is still computed, reading nothing outside its row)."""
    n = conf.shape[0]
    m = conf.shape[1]
    last = edges.shape[0] - 1
    last_prior = priors.shape[0] - 1
    per_row = depths.shape[0] > 0
    deepest = depth
    bad = 0
    run = np.empty(n)
    for i in range(n):
        run[i] = 1.0
        out[i] = 0.0
        if n_conf[i] < 0 or n_conf[i] > m:
            bad += 1
        if per_row:
            if depths[i] < 0:
                bad += 1
            deepest = max(deepest, depths[i])
    # Buckets of every confidence, edge by edge over the flat matrix so the compare vectorises;
    # counting the edges below lp is bucket_nb's rule (NaN counts 0 here but takes the prior).
    size = n * m
    flat = conf.reshape(size)
    below = np.zeros(size, dtype=np.int32)
    for e in range(edges.shape[0]):
        edge = edges[e]
        for x in range(size):
            below[x] += flat[x] > edge
    # Position by position across rows: rows are independent, so their running products overlap
    # instead of waiting on one row's chain; each row still folds sum_j prod_{t<=j} p_t left to
    # right, exactly as docs/calibration.md#queries writes it.
    for j in range(1, deepest + 1):
        prior = priors[min(j - 1, last_prior)]
        for i in range(n):
            p = prior
            if j <= m:
                x = i * m + j - 1
                lp = flat[x]
                calibrated = p_accept[min(below[x], last)]
                p = calibrated if (j <= n_conf[i]) & (lp == lp) else prior
            active = j <= (depths[i] if per_row else depth)
            run[i] *= p if active else 1.0
            out[i] += run[i] if active else 0.0
    return bad


@jit
def expected_accepted_nb(edges, p_accept, priors, conf, n_conf, depths, out):
    """Expected accepted drafts of each row's chain: ``sum_j prod_{t<=j} p_t`` over ``j <= depth``.

    Parameters
    ----------
    edges : ndarray(float32, ndim=1), shape (B,)
        Strictly ascending.
    p_accept : ndarray(float64, ndim=1), shape (B,)
    priors : ndarray(float64, ndim=1), shape (P,)
    conf : ndarray(float32, ndim=2), shape (n, m), C-contiguous
    n_conf : ndarray(int64, ndim=1), shape (n,)
    depths : ndarray(int64, ndim=1), shape (n,)
        Drafts counted per row (may exceed m: positions past the confidences take priors).
    out : ndarray(float64, ndim=1), shape (n,)
        Modified in place.

    Returns
    -------
    int
        How many rows had ``n_conf`` outside ``0..=m`` or a negative depth (0 when all are valid).
    """
    return expected_accepted_into_nb(edges, p_accept, priors, conf, n_conf, depths, 0, out)


@jit
def expected_accepted_k_nb(edges, p_accept, priors, conf, n_conf, depth, out):
    """:func:`expected_accepted_nb` with one depth for every row (no depths array to build).

    Returns
    -------
    int
        How many rows had ``n_conf`` outside ``0..=m`` (a negative ``depth`` counts nothing).
    """
    return expected_accepted_into_nb(edges, p_accept, priors, conf, n_conf, np.empty(0, dtype=np.int64), depth, out)


# A coarse index over float32 values: cell c holds the floats whose order-preserving integer
# key (see ``float_key_nb``) shifted right by 20 is c - 2048. ``BUCKET_CELLS`` cells cover them all.
BUCKET_CELLS = 4096


@jit(internal=True)
def float_key_nb(bits):
    """An int32 that orders as the float32 whose bit pattern is ``bits`` (NaN excepted)."""
    return bits ^ ((bits >> 31) & 0x7FFFFFFF)


@jit
def bucket_fast_nb(edges, cells, lp, bits):
    """``bucket_nb(edges, lp)`` through the coarse index ``cells`` (see ``bucket_cells``).

    ``cells[c]`` is the bucket of the lowest float in cell c, so the answer is at most a step or
    two of comparisons beyond it; ``lp`` must not be NaN, ``bits`` is its bit pattern.
    """
    q = cells[(float_key_nb(bits) >> 20) + 2048]
    last = edges.shape[0] - 1
    while q < last and lp > edges[q]:
        q += 1
    return q
