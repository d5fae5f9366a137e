"""The Planner's own entry into the per-sequence planner (docs/planner.md): its arrays packed
into one int64 buffer (``_types.pack_plan_arrays``) and unpacked as views, the checks of shapes,
ranges, workspace size, aliasing and confidences done inside the kernel, and the codes it returns
instead of rows when an input is out of range (``Planner.depths`` turns them into errors)."""

from __future__ import annotations

import numpy as np

from specsim._checks import LOGPROB_SLACK
from specsim._jit import jit
from specsim.plan._kernels import U, _sequence_depths_nb
from specsim.plan._types import PACK_HEADER, PlanArrays, workspace_views_nb


@jit(forceinline=True, internal=True)
def unpack_plan_nb(packed):
    """The :class:`PlanArrays` and the ``cell_p`` of ``_types.pack_plan_arrays``: views into
    ``packed``, no copy."""
    w = packed[0]
    kp1 = packed[1]
    b = packed[2]
    c = packed[3]
    p = packed[4]
    o = PACK_HEADER
    widths = packed[o:o + w]
    o += w
    costs = packed[o:o + w * kp1 * 4].view(np.float64).reshape((w, kp1, 4))
    o += w * kp1 * 4
    half = (b + 1) // 2
    edges = packed[o:o + half].view(np.float32)[:b]
    o += half
    cells = packed[o:o + c]
    o += c
    cell_p = packed[o:o + c].view(np.float64)
    o += c
    p_accept = packed[o:o + b].view(np.float64)
    o += b
    priors = packed[o:o + p].view(np.float64)
    return PlanArrays(widths, costs, edges, cells, p_accept, priors), cell_p


# The least float32 above LOGPROB_SLACK: a float32 confidence is above the slack exactly when it
# is at least this, a compare of float32s (twice the lanes of a vector compare in float64).
_ABOVE = np.float32(LOGPROB_SLACK)
ABOVE_SLACK_F32 = _ABOVE if float(_ABOVE) > LOGPROB_SLACK else np.nextafter(_ABOVE, np.float32(np.inf))

# Codes the Planner's kernel returns instead of rows when an input is out of range; the caller
# turns them into an error that names the argument (see ``Planner.depths``).
E_SHAPE_N_CONF = -1
E_SHAPE_KNOWN = -2
E_SHAPE_OUT = -3
E_K_MAX = -4
E_ROW_BUDGET = -5
E_WORKSPACE = -6
E_ALIAS = -7
# A confidence above 0 (beyond rounding): probabilities or logits where log-probabilities belong.
E_CONFIDENCE = -8
# Row i with a bad n_conf: E_ROW - 2i; with a bad known: E_ROW - 2i - 1.
E_ROW = -16


@jit(forceinline=True, internal=True)
def _overlaps(a, b):
    lo_a = a.ctypes.data
    lo_b = b.ctypes.data
    return lo_a < lo_b + b.nbytes and lo_b < lo_a + a.nbytes and a.nbytes > 0 and b.nbytes > 0


@jit(forceinline=True, internal=True)
def _check_rows_nb(conf, n_conf, known):
    """0, or the ``E_*`` code of the first row with ``n_conf[i]`` outside ``[0, m]`` or
    ``known[i] < 0``, or ``E_CONFIDENCE`` for a confidence in use above ``LOGPROB_SLACK`` (at
    least ``ABOVE_SLACK_F32``, the same test in float32).

    The loops that find nothing (the usual case) have no early exit, so they compile to vector
    compares: the counts in one pass, then, when every row's confidences are all real, the
    confidences as one flat array (a row of a few drafts is too short for a vector alone).
    """
    n = conf.shape[0]
    m = conf.shape[1]
    bad = False
    full = True
    for i in range(n):
        c = n_conf[U(i)]
        bad |= (c < 0) | (c > m) | (known[U(i)] < 0)
        full &= c == m
    if bad:
        for i in range(n):
            c = n_conf[U(i)]
            if c < 0 or c > m:
                return E_ROW - 2 * i
            if known[U(i)] < 0:
                return E_ROW - 2 * i - 1
    positive = False
    if full:
        flat = conf.reshape(n * m)
        for e in range(n * m):
            positive |= flat[U(e)] >= ABOVE_SLACK_F32
    else:
        for i in range(n):
            ui = U(i)
            for j in range(n_conf[ui]):
                positive |= conf[ui, U(j)] >= ABOVE_SLACK_F32
    return E_CONFIDENCE if positive else 0


@jit
def planner_depths_nb(packed, slack, conf, n_conf, known, k_max, row_budget, out, work, check):
    """``Planner.depths``' kernel: checks what is cheap to check here, then
    :func:`sequence_depths_nb` on ``unpack_plan_nb(packed)`` and the workspace in the buffer
    ``work`` (``_types.workspace_buffer``): two arguments where the bundles have ten arrays.

    Shapes, scalar ranges, the workspace's size and ``out`` overlapping an input are always
    checked (they guard memory); with ``check`` also every ``0 <= n_conf[i] <= m``,
    ``known[i] >= 0`` (without it such values are clamped) and every confidence in use at most
    ``LOGPROB_SLACK`` (a log-probability). Returns the planned rows, or one of
    the negative ``E_*`` codes.
    """
    n = conf.shape[0]
    if n_conf.shape[0] != n:
        return E_SHAPE_N_CONF
    if known.shape[0] != n:
        return E_SHAPE_KNOWN
    if out.shape[0] != n:
        return E_SHAPE_OUT
    if k_max < 0:
        return E_K_MAX
    if row_budget < 0:
        return E_ROW_BUDGET
    max_k = packed[1] - 1
    ws = workspace_views_nb(work, max_k)
    if ws.owner.shape[0] < n * ((max_k if max_k > 1 else 1) + 2):
        return E_WORKSPACE
    if _overlaps(out, conf) or _overlaps(out, n_conf) or _overlaps(out, known):
        return E_ALIAS
    if check:
        code = _check_rows_nb(conf, n_conf, known)
        if code < 0:
            return code
    arrays, cell_p = unpack_plan_nb(packed)
    return _sequence_depths_nb(arrays, cell_p, conf, n_conf, known, k_max, row_budget, slack, out, ws)
