"""The one decorator every Numba kernel in specsim uses.

``cache=True`` keeps compiled code on disk between processes; ``error_model="numpy"`` lets a
division by zero give inf/NaN instead of raising from inside a kernel; no fastmath, because the
planner's answers are compared for exact equality with the plain-Python reference.
Nothing compiles here: Numba compiles a kernel on its first call.
"""

from __future__ import annotations

import numba


def jit(fn=None, **options):
    """``numba.njit`` with specsim's defaults; usable bare or with extra options."""
    opts = {"cache": True, "error_model": "numpy", "nogil": True}
    opts.update(options)
    if fn is None:
        return lambda f: numba.njit(**opts)(f)
    return numba.njit(**opts)(fn)
