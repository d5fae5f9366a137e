"""Checking and converting the planner's inputs at the Python boundary.

The kernels trust their inputs; everything a caller can get wrong is refused here with a
:class:`~specsim.errors.PlanError` that names the argument and the bad value. The ``Planner``'s
fast path does not come here: its kernel is compiled for the exact types only, so any other
type fails dispatch at once and the call is redone through these checks.
"""

from __future__ import annotations

import numpy as np

from specsim._checks import INT64_MAX
from specsim.errors import PlanError

I64 = np.dtype(np.int64)


def _is_int(value) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))


def count_arg(value, name: str) -> int:
    """A non-negative whole number that fits in int64 (a width, a cap on widths)."""
    if not _is_int(value):
        raise PlanError(f"{name} must be a non-negative integer, got {value!r} ({type(value).__name__})")
    value = int(value)
    if value < 0:
        raise PlanError(f"{name} must be a non-negative integer, got {value}")
    if value > INT64_MAX:
        raise PlanError(f"{name} = {value} is beyond the planner's range (at most 2**63 - 1)")
    return value


def cap_arg(value, name: str) -> int:
    """A non-negative upper bound (``k_max``, ``row_budget``): values past int64 mean "no bound"
    and are clamped to 2**63 - 1, which bounds nothing a batch can reach."""
    if not _is_int(value):
        raise PlanError(f"{name} must be a non-negative integer, got {value!r} ({type(value).__name__})")
    value = int(value)
    if value < 0:
        raise PlanError(f"{name} must be >= 0, got {value}")
    return min(value, INT64_MAX)


def confidences_arg(value) -> np.ndarray:
    """``confidences`` as a C-contiguous float32 matrix ``(n, m)`` (real numbers are converted)."""
    arr = value if isinstance(value, np.ndarray) else _asarray(value, "confidences")
    if arr.dtype.kind not in "fiu" or arr.dtype.kind == "b":
        raise PlanError(f"confidences must hold real numbers (log-probabilities), got dtype {arr.dtype}")
    if arr.ndim != 2:
        raise PlanError(f"confidences must be a 2-D array (sequences, drafts), got shape {arr.shape}")
    return _writable(np.ascontiguousarray(arr, dtype=np.float32))


def _writable(arr):
    # The kernel is compiled for writable arrays only; a read-only input is copied, not refused.
    return arr if arr.flags.writeable else arr.copy()


def counts_arg(value, n: int, name: str, upper=None) -> np.ndarray:
    """A C-contiguous int64 vector of ``n`` counts, each >= 0 (and <= ``upper`` when given);
    counts past int64 are clamped to 2**63 - 1 when there is no upper bound."""
    arr = value if isinstance(value, np.ndarray) else _asarray(value, name)
    if arr.dtype == object:
        return _counts_from_objects(arr, n, name, upper)
    if arr.dtype.kind not in "iu" and arr.size:
        raise PlanError(f"{name} must hold integers, got dtype {arr.dtype}")
    _check_shape(arr, n, name)
    if arr.shape[0]:
        low = int(arr.min())
        if low < 0:
            i = int(np.argmin(arr))
            raise PlanError(f"{name}[{i}] = {low} is negative")
        high = int(arr.max())
        if upper is not None and high > upper:
            i = int(np.argmax(arr))
            raise PlanError(f"{name}[{i}] = {high} is more than the {upper} columns of confidences")
        if high > INT64_MAX:
            arr = np.minimum(arr, np.uint64(INT64_MAX))
    return _writable(np.ascontiguousarray(arr, dtype=np.int64))


def _counts_from_objects(arr, n, name, upper):
    _check_shape(arr, n, name)
    values = []
    for i, v in enumerate(arr.tolist()):
        if not _is_int(v):
            raise PlanError(f"{name}[{i}] = {v!r} is not an integer")
        if v < 0:
            raise PlanError(f"{name}[{i}] = {v} is negative")
        if upper is not None and v > upper:
            raise PlanError(f"{name}[{i}] = {v} is more than the {upper} columns of confidences")
        values.append(min(int(v), INT64_MAX))
    return np.array(values, dtype=np.int64).reshape(n)


def _check_shape(arr, n, name):
    if arr.ndim != 1 or arr.shape[0] != n:
        raise PlanError(f"{name} must be a 1-D array with one entry per sequence ({n}), got shape {arr.shape}")


def _asarray(value, name):
    try:
        arr = np.asarray(value)
    except (ValueError, TypeError) as e:
        raise PlanError(f"{name} is not an array of numbers ({e})") from None
    if arr.dtype.kind in "US":
        raise PlanError(f"{name} must hold numbers, got text")
    return arr


def out_arg(out, n: int, inputs) -> np.ndarray:
    """``out``: a writable C-contiguous int64 vector of ``n`` entries sharing no memory with
    ``inputs`` (name -> array)."""
    if not isinstance(out, np.ndarray):
        raise PlanError(f"out must be a numpy int64 array, got {type(out).__name__}")
    if out.dtype != I64 or out.ndim != 1:
        raise PlanError(f"out must be a 1-D int64 array, got dtype {out.dtype} and shape {out.shape}")
    if out.shape[0] != n:
        raise PlanError(f"out has {out.shape[0]} entries for {n} sequences")
    if not out.flags.c_contiguous:
        raise PlanError("out must be contiguous (it is filled in place)")
    if not out.flags.writeable:
        raise PlanError("out is read-only")
    for name, arr in inputs.items():
        if isinstance(arr, np.ndarray) and np.shares_memory(out, arr):
            raise PlanError(f"out shares memory with {name}: give a separate array")
    return out
