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

import pickle

import numba
from numba.core import caching


class _KernelIndex(caching.IndexDataCacheFile):
    """A kernel's on-disk cache index, read as Numba reads it but for one case. The index names
    its kernels' argument types (the bundles' NamedTuple classes) by module path; one written by
    another version of specsim can name a module or class that has moved since (``sim/_types.py``
    became ``sim/bundles.py``), and Numba would raise from unpickling it on the kernel's first
    call (``No module named 'specsim.sim._types'``). Such an index reads as empty: the kernel
    compiles and the index is written afresh."""

    def _load_index(self):
        try:
            return super()._load_index()
        except (ImportError, AttributeError, pickle.UnpicklingError, EOFError):
            return {}


def _tolerant(dispatcher):
    """``dispatcher`` with its cache index read by :class:`_KernelIndex` (left as Numba made it
    if a Numba version lays its cache out otherwise)."""
    index = getattr(getattr(dispatcher, "_cache", None), "_cache_file", None)
    if type(index) is caching.IndexDataCacheFile:
        index.__class__ = _KernelIndex
    return dispatcher


def jit(fn=None, *, internal=False, **options):
    """``numba.njit`` with specsim's defaults; usable bare or with extra options."""
    opts = {"cache": True, "error_model": "numpy", "nogil": True}
    if internal:
        opts.update(no_cpython_wrapper=True, no_cfunc_wrapper=True)
    opts.update(options)
    if fn is None:
        return lambda f: _tolerant(numba.njit(**opts)(f))
    return _tolerant(numba.njit(**opts)(fn))
