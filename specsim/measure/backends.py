"""Where steps run and how they are timed: NumPy on the CPU, CuPy on a CUDA GPU.

A backend gives the array module (``xp``) a proxy workload runs on, a timer (``perf_counter_ns``
around a call on the CPU; CUDA events on the GPU, which time the device's work, not the host's),
a synchronisation point, the device's name and the library versions that go into a plan digest.
"""

from __future__ import annotations

import importlib
import os
import platform
import re
import time
from pathlib import Path

import numpy as np

from specsim.errors import MeasureError

# What each recipe dtype computes in. CuPy has no bfloat16, so bf16 runs as float16 (same width,
# same tensor-core rate on Volta and newer); NumPy's float16 matmul has no BLAS path, so both
# half types run as float32 on the CPU. The dtype actually used goes into the plan digest.
COMPUTE_DTYPES = {
    "numpy": {"bf16": "float32", "fp16": "float32", "fp32": "float32"},
    "cupy": {"bf16": "float16", "fp16": "float16", "fp32": "float32"},
}


THREAD_VARIABLES = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")


def box_class_from_name(name: str) -> str:
    """A box class from a device or CPU model name: ``"NVIDIA H200"`` -> ``"h200"``.

    Vendor noise (``NVIDIA``, ``(R)``, ``(TM)``, ``CPU``, ``Processor``, core counts, clock speed)
    is dropped and the rest lower-cased and joined by ``-``.
    """
    s = str(name).lower()
    s = re.sub(r"@.*$", " ", s)
    s = re.sub(r"\((r|tm|c)\)", " ", s)
    s = re.sub(r"\b\d+-core\b", " ", s)
    s = re.sub(r"\b(nvidia|corporation|processor|cpu)\b", " ", s)
    s = re.sub(r"[^a-z0-9]+", "-", s).strip("-")
    if not s:
        raise MeasureError(f"cannot derive a box class from the device name {name!r}: pass --box-class")
    return s


def cpu_model() -> str:
    """The CPU's model name (from /proc/cpuinfo on Linux, else the platform's answer)."""
    try:
        for line in Path("/proc/cpuinfo").read_text(errors="replace").splitlines():
            field, _, value = line.partition(":")
            if field.strip() in ("model name", "Hardware", "cpu model") and value.strip():
                return value.strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown cpu"


class NumpyBackend:
    """Steps on the CPU through NumPy, timed by ``time.perf_counter_ns`` around each call."""

    name = "numpy"
    clock = "perf_counter_ns"

    def __init__(self):
        self.xp = np

    def synchronize(self) -> None:
        """Nothing to wait for: NumPy calls return when their work is done."""

    def time_ms(self, fn, count: int):
        """Wall ms of ``count`` separate calls of ``fn``, as ``ndarray(float64)`` of shape (count,)."""
        out = np.empty(count)
        for i in range(count):
            t0 = time.perf_counter_ns()
            fn()
            out[i] = (time.perf_counter_ns() - t0) / 1e6
        return out

    def device_name(self) -> str:
        return cpu_model()

    def compute_dtype(self, recipe_dtype: str) -> str:
        return COMPUTE_DTYPES["numpy"][recipe_dtype]

    def free_bytes(self):
        """Memory available for arrays (Linux ``MemAvailable``), or None where unknown."""
        try:
            for line in Path("/proc/meminfo").read_text().splitlines():
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
        except (OSError, ValueError, IndexError):
            pass
        return None

    def versions(self) -> dict:
        """Libraries whose code the launches run (part of every plan digest)."""
        out = {"numpy": np.__version__}
        try:
            blas = np.show_config(mode="dicts")["Build Dependencies"]["blas"]
            out["blas"] = f"{blas.get('name', '?')} {blas.get('version', '?')}"
        except Exception:  # older NumPy has no dict form; the BLAS is then unnamed
            pass
        return out

    def describe(self) -> dict:
        """``[meta]`` fields naming the device, the software and the BLAS thread settings.

        CPU timings depend strongly on BLAS threads (a threaded BLAS on a busy machine spins
        against other work), so the thread variables that are set are recorded.
        """
        threads = {f"env_{v.lower()}": os.environ[v] for v in THREAD_VARIABLES if v in os.environ}
        return ({"backend": self.name, "device": self.device_name(), "clock": self.clock, "cpus": os.cpu_count() or 0}
                | self.versions() | threads)

    def meter_targets(self):
        """What an energy meter should cover: the CPU packages (RAPL)."""
        return None


class CupyBackend:
    """Steps on one CUDA device through CuPy, timed by CUDA events around each call.

    Parameters
    ----------
    device : int
        CUDA device ordinal (as CUDA numbers them under ``CUDA_VISIBLE_DEVICES``).
    cupy : module, optional
        The CuPy module; imported when not given (tests pass a stand-in).

    Raises
    ------
    MeasureError
        Naming what is missing: CuPy itself, a CUDA device, or a working driver.
    """

    name = "cupy"
    clock = "cuda_events"

    def __init__(self, device: int = 0, cupy=None):
        cp = cupy if cupy is not None else _import_cupy()
        _check_cuda(cp, device)
        self.cupy = cp
        self.xp = cp
        self.device = int(device)
        try:
            cp.cuda.Device(self.device).use()
        except Exception as e:
            raise MeasureError(f"cannot select CUDA device {device}: {e}") from e

    def synchronize(self) -> None:
        self.cupy.cuda.Device(self.device).synchronize()

    def time_ms(self, fn, count: int):
        """Device ms of ``count`` separate calls of ``fn`` between two CUDA events each.

        The events are recorded on CuPy's current stream: work ``fn`` queues on another stream
        that does not synchronise with it is not timed.
        """
        cuda = self.cupy.cuda
        out = np.empty(count)
        for i in range(count):
            start, end = cuda.Event(), cuda.Event()
            start.record()
            fn()
            end.record()
            end.synchronize()
            out[i] = float(cuda.get_elapsed_time(start, end))
        return out

    def device_name(self) -> str:
        name = self.cupy.cuda.runtime.getDeviceProperties(self.device)["name"]
        return name.decode() if isinstance(name, bytes) else str(name)

    def pci_bus_id(self) -> str:
        return str(self.cupy.cuda.Device(self.device).pci_bus_id)

    def compute_dtype(self, recipe_dtype: str) -> str:
        return COMPUTE_DTYPES["cupy"][recipe_dtype]

    def free_bytes(self):
        return int(self.cupy.cuda.Device(self.device).mem_info[0])

    def versions(self) -> dict:
        rt = self.cupy.cuda.runtime
        return {"cupy": str(self.cupy.__version__), "cuda_runtime": int(rt.runtimeGetVersion())}

    def describe(self) -> dict:
        rt = self.cupy.cuda.runtime
        return ({"backend": self.name, "device": self.device_name(), "device_index": self.device,
                 "pci_bus_id": self.pci_bus_id(), "cuda_driver": int(rt.driverGetVersion()), "clock": self.clock}
                | self.versions())

    def meter_targets(self):
        """What an energy meter should cover: this device, by PCI bus id (stable across numberings)."""
        return [self.pci_bus_id()]


def _import_cupy():
    try:
        return importlib.import_module("cupy")
    except ImportError as e:
        raise MeasureError(
            "--backend cupy needs CuPy, which is not installed here: install the wheel for your CUDA "
            "(e.g. pip install cupy-cuda12x), or measure on the CPU with --backend numpy"
        ) from e


def _check_cuda(cp, device):
    """Refuse, naming the cause, unless CUDA device ``device`` can be used."""
    try:
        available = bool(cp.cuda.is_available())
    except Exception as e:
        raise MeasureError(f"CuPy cannot reach CUDA ({type(e).__name__}: {e}): check the NVIDIA driver") from e
    if not available:
        # is_available() hides the reason; asking for the count again names it.
        try:
            count = int(cp.cuda.runtime.getDeviceCount())
        except Exception as e:
            raise MeasureError(
                f"CuPy is installed but CUDA is not usable: {e} (no CUDA device, or an NVIDIA driver "
                "missing or too old for this CuPy's CUDA); measure on the CPU with --backend numpy"
            ) from e
        if count == 0:
            raise MeasureError("CuPy is installed but no CUDA device is visible (check the driver and "
                               "CUDA_VISIBLE_DEVICES); measure on the CPU with --backend numpy")
        raise MeasureError("CuPy reports CUDA as unavailable; check the NVIDIA driver")
    count = int(cp.cuda.runtime.getDeviceCount())
    if not 0 <= device < count:
        raise MeasureError(f"CUDA device {device} does not exist: {count} device(s) are visible (0..{count - 1})")


def open_backend(name: str, device: int = 0):
    """The backend called ``name`` (``numpy`` or ``cupy``)."""
    if name == "numpy":
        return NumpyBackend()
    if name == "cupy":
        return CupyBackend(device)
    raise MeasureError(f"unknown backend {name!r}: use numpy (CPU) or cupy (CUDA GPU)")
