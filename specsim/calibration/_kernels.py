"""Numba kernels over a calibration's flat arrays (SPEC §2.2).

A calibration is ``edges float32[B]`` (ascending upper bounds), ``p_accept float64[B]`` and
``priors float64[P]`` (conditional, position 1 first). Confidences are float32 top-1
log-probabilities; NaN means "not measured" and takes the position prior.
"""

from __future__ import annotations

import numpy as np

from specsim._jit import jit


@jit
def bucket_nb(edges, lp):
    """Index of the first edge with ``lp <= edge`` (float32 compare); the last bucket above all.

    Edges are strictly ascending, so that index is the number of edges below ``lp``; counting
    them without a branch is faster than the search on the scheduler's hot path. NaN is below
    nothing and lands in bucket 0, which is the last (and only) bucket exactly when the
    calibration has one edge; callers treat NaN as unmeasured before asking.
    """
    count = 0
    for i in range(edges.shape[0]):
        count += lp > edges[i]
    last = edges.shape[0] - 1
    return count if count < last else last


@jit
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
def p_draft_nb(edges, p_accept, priors, conf, i, n_conf_i, j):
    """P(accept) of draft ``j`` (1-based) of row ``i`` of ``conf``, which has ``n_conf_i`` real entries."""
    if j <= n_conf_i and j <= conf.shape[1]:
        lp = conf[i, j - 1]
        if not np.isnan(lp):
            return p_accept[bucket_nb(edges, lp)]
    return prior_nb(priors, j)


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
    for i in range(out.shape[0]):
        for j in range(1, out.shape[1] + 1):
            out[i, j - 1] = p_draft_nb(edges, p_accept, priors, conf, i, n_conf[i], j)


@jit
def expected_accepted_nb(edges, p_accept, priors, conf, n_conf, depths, out):
    """Expected accepted drafts of each row's chain: ``sum_j prod_{t<=j} p_t`` over ``j <= depth``.

    Parameters
    ----------
    conf : ndarray(float32, ndim=2), shape (n, m)
    n_conf : ndarray(int64, ndim=1), shape (n,)
    depths : ndarray(int64, ndim=1), shape (n,)
        Drafts counted per row (may exceed m: positions past the confidences take priors).
    out : ndarray(float64, ndim=1), shape (n,)
        Modified in place.
    """
    for i in range(conf.shape[0]):
        run = 1.0
        total = 0.0
        for j in range(1, depths[i] + 1):
            run *= p_draft_nb(edges, p_accept, priors, conf, i, n_conf[i], j)
            total += run
        out[i] = total


# A coarse index over float32 values: cell c holds the floats whose order-preserving integer
# key (see ``float_key_nb``) shifted right by 20 is c - 2048. ``BUCKET_CELLS`` cells cover them all.
BUCKET_CELLS = 4096


@jit
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
