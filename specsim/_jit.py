"""The one decorator every Numba kernel in specsim uses.

``cache=True`` keeps compiled code on disk between processes; ``error_model="numpy"`` lets a
division by zero give inf/NaN instead of raising from inside a kernel; no fastmath, because the
planner's answers are compared for exact equality with the plain-Python reference.
Nothing compiles here: Numba compiles a kernel on its first call.

``internal=True`` marks a kernel that only other kernels call. Numba then builds no CPython
wrapper for it: the code that turns each Python argument into native values and back, which for
a bundle of a dozen arrays is large, and which LLVM otherwise optimises and compiles for every
kernel, called from Python or not (about a quarter of the engine's first compile). An internal
kernel called from Python crashes the interpreter, so no Python code calls one (a test checks).
"""

from __future__ import annotations

import numba


def jit(fn=None, *, internal=False, **options):
    """``numba.njit`` with specsim's defaults; usable bare or with extra options."""
    opts = {"cache": True, "error_model": "numpy", "nogil": True}
    if internal:
        opts.update(no_cpython_wrapper=True, no_cfunc_wrapper=True)
    opts.update(options)
    if fn is None:
        return lambda f: numba.njit(**opts)(f)
    return numba.njit(**opts)(fn)
