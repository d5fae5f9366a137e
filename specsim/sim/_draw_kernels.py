"""Numba kernels of the draft-outcome model: counter-based random draws.

Every uniform number is a splitmix64 hash of (seed, request, output-token index, draft position,
stream), never a position in a shared stream, so a draft meets the same confidence and the same
verdict under every policy (common random numbers) and the result does not depend on the order
anything is computed in. A request's spread factor ``z`` (docs/calibration.md#per-request-spread)
is a hash of (seed, request) alone, so every policy sees the same ``z`` for the same request.
"""

from __future__ import annotations

import numpy as np

from specsim._checks import MAX_DEPTH
from specsim._jit import jit

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
# Draft positions are packed into the low 8 bits of the draft key: the deepest depth must fit.
assert MAX_DEPTH < 256

# The token index of a request's spread draw: beyond every output token (at most 2**24), with
# position 0, so it is no draft's hash and no acceptance-trace entry's.
SPREAD_TOKEN = np.uint64(1 << 40)
_TWO_PI = 2.0 * np.pi

# Draw streams: which half of a draft's hash answers which question.
# (int64 values, not Python ints: a kernel called with a literal compiles once more for it)
STREAM_BUCKET = np.int64(0)  # the high 32 bits: the confidence bucket
STREAM_ACCEPT = np.int64(1)  # the low 32 bits: the verdict

@jit(internal=True)
def mix64_nb(z):
    """The splitmix64 finaliser of a uint64 (a bijection that spreads every input bit)."""
    z = (z ^ (z >> _S30)) * _M1
    z = (z ^ (z >> _S27)) * _M2
    return z ^ (z >> _S31)


@jit
def seed_key_nb(seed):
    """The hash state a run starts from: ``mix64(seed + GOLDEN)`` (``seed`` a uint64)."""
    return mix64_nb(np.uint64(seed) + GOLDEN)


@jit(internal=True)
def request_key_nb(key, request):
    """The hash state of one request: ``mix64(key ^ request * C_REQUEST)``."""
    return mix64_nb(np.uint64(key) ^ (np.uint64(request) * _C_REQUEST))


@jit(internal=True)
def draft_hash_nb(rkey, token, position):
    """The 64-bit hash of one draft: ``mix64(rkey ^ (token << 8 | position) * C_DRAFT)``.

    ``token`` is the output-token index the draft would produce, ``position`` its 1-based place
    in the chain (<= MAX_DEPTH, so the packing is one-to-one). One finaliser round per draft:
    the engine draws millions of them, and its two halves answer the two questions.
    """
    x = (np.uint64(token) << _S8) | np.uint64(position)
    return mix64_nb(np.uint64(rkey) ^ (x * _C_DRAFT))


@jit(internal=True)
def entry_nb(rkey, token, n_digits):
    """The acceptance-trace entry of a step state: a hash of (request, token) with position 0,
    which no draft uses, so it is independent of every draft's draws."""
    return np.int64((draft_hash_nb(rkey, token, np.int64(0)) >> _S11) % np.uint64(n_digits))


@jit(internal=True)
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
        (<= MAX_DEPTH), and the stream (``STREAM_BUCKET`` or ``STREAM_ACCEPT``).
    """
    return half_uniform_nb(draft_hash_nb(request_key_nb(key, request), token, position), stream)


@jit(internal=True)
def bucket_of_nb(occ_cdf, u, position):
    """Inverse CDF of position ``position``'s occupancy row at ``u``.

    ``occ_cdf float64[J, B]``: row ``j - 1`` is position ``j``'s cumulative bucket weights
    (nondecreasing), the last entry exactly 1; positions past J use the last row. The bucket is
    the first whose weight passes ``u`` (the last at most): on a nondecreasing row, how many of
    the entries before the last ``u`` reaches. Counted without a branch: a scan that stops at the
    bucket mispredicts its exit on almost every draft, which cost about a third of a drafting
    step (docs/simulation.md, "Speed").
    """
    row = position - 1 if position - 1 < occ_cdf.shape[0] else occ_cdf.shape[0] - 1
    b = np.int64(0)
    for i in range(occ_cdf.shape[1] - 1):
        b += np.int64(u >= occ_cdf[row, i])
    return b


@jit
def request_z_nb(key, request):
    """Request ``request``'s standard normal spread factor: Box-Muller on the two 32-bit halves
    of the hash of (``key``, request, ``SPREAD_TOKEN``, position 0), ``sqrt(-2 ln u1) cos(2 pi u2)``
    with ``u1`` in (0, 1) (the high half, plus a half step) and ``u2`` in [0, 1) (the low half)."""
    h = draft_hash_nb(request_key_nb(key, request), SPREAD_TOKEN, np.int64(0))
    u1 = (float(h >> _S32) + 0.5) * _U32
    u2 = float(h & _LOW32) * _U32
    return np.sqrt(-2.0 * np.log(u1)) * np.cos(_TWO_PI * u2)


@jit
def request_shifts_nb(seed, sd, out):
    """Every request's log-odds shift ``sd * z_r`` into ``out float64[N]`` (request ``r`` at
    ``out[r]``) for a run with ``seed`` (uint64)."""
    key = seed_key_nb(seed)
    for r in range(out.shape[0]):
        out[r] = sd * request_z_nb(key, r)


@jit
def spread_p_nb(centre, shift):
    """P(accept) of a draft of a request shifted by ``shift`` whose rate's centre is ``centre``:
    ``1 / (1 + exp(-(centre + shift)))`` (0 at a centre of -inf, 1 at +inf)."""
    return 1.0 / (1.0 + np.exp(-(centre + shift)))
