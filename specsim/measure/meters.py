"""Energy meters: cumulative joule counters read around a window of repeated steps.

- :class:`NvmlMeter`: NVML's total-energy counter (millijoules since the driver loaded; Volta and
  newer), summed over the devices a run uses. It updates every ~10-100 ms, so a window must be
  long (>= 1 s, docs/measure.md#the-energy-window) for one update period to be a small error.
- :class:`RaplMeter`: Linux RAPL package counters (``/sys/class/powercap/intel-rapl:N``), in
  microjoules, wrapping at ``max_energy_range_uj``; often readable by root only.
- :class:`AssumedPowerMeter`: no meter, a constant power the user states; joules are that power
  times elapsed time, and the table says so (``[meta] energy_source = "assumed"``).
"""

from __future__ import annotations

import importlib
import re
import time
from pathlib import Path

from specsim.errors import MeasureError
from specsim._checks import MAX_POWER_W, check_number

POWERCAP = Path("/sys/class/powercap")


class NvmlMeter:
    """NVML total-energy counter of one or more GPUs, summed, in joules.

    Parameters
    ----------
    pci_bus_ids : list of str, optional
        Devices by PCI bus id (as CUDA reports it), which is stable when ``CUDA_VISIBLE_DEVICES``
        renumbers devices.
    indices : list of int, optional
        Devices by NVML index, when no bus ids are given. Default: device 0.

    Raises
    ------
    MeasureError
        When nvidia-ml-py is missing, NVML cannot start, a device is not found, or a device does
        not report total energy; NVML's own error is chained (``from``).
    """

    source = "nvml"

    def __init__(self, pci_bus_ids=None, indices=None):
        self._nvml = nvml = _import_pynvml()
        self._started = False
        try:
            nvml.nvmlInit()
        except nvml.NVMLError as e:
            raise MeasureError(f"NVML cannot start ({e}): is the NVIDIA driver loaded?") from e
        self._started = True
        try:
            self.handles, self.labels = [], []
            if pci_bus_ids:
                for bus in pci_bus_ids:
                    self.handles.append(self._call(f"finding the GPU at PCI bus {bus}",
                                                   nvml.nvmlDeviceGetHandleByPciBusId, str(bus)))
                    self.labels.append(f"PCI bus {bus}")
            else:
                for i in indices if indices is not None else [0]:
                    self.handles.append(self._call(f"finding GPU {i}", nvml.nvmlDeviceGetHandleByIndex, int(i)))
                    self.labels.append(f"GPU {i}")
            if not self.handles:
                raise MeasureError("NvmlMeter needs at least one device")
            for handle, label in zip(self.handles, self.labels):
                try:
                    nvml.nvmlDeviceGetTotalEnergyConsumption(handle)
                except nvml.NVMLError_NotSupported as e:
                    raise MeasureError(
                        f"{label} does not report total energy through NVML ({e}); the counter needs a "
                        "Volta or newer GPU. Pass --assume-power-w W to write joules from an assumed power"
                    ) from e
                except nvml.NVMLError as e:
                    raise MeasureError(f"NVML failed reading the energy counter of {label}: {e}") from e
        except BaseException:
            self.close()
            raise

    def _call(self, what, fn, *args):
        try:
            return fn(*args)
        except self._nvml.NVMLError as e:
            raise MeasureError(f"NVML failed {what}: {e}") from e

    def read_j(self) -> float:
        """Energy consumed since the driver loaded, summed over the devices, in joules."""
        fn = self._nvml.nvmlDeviceGetTotalEnergyConsumption
        total_mj = 0
        for handle, label in zip(self.handles, self.labels):
            total_mj += self._call(f"reading the energy counter of {label}", fn, handle)
        return total_mj / 1000.0

    def describe(self) -> dict:
        """``[meta]`` fields: the source, the devices and the driver."""
        nvml = self._nvml
        names = [_text(self._call("reading a device name", nvml.nvmlDeviceGetName, h)) for h in self.handles]
        driver = _text(self._call("reading the driver version", nvml.nvmlSystemGetDriverVersion))
        return {"energy_source": self.source, "energy_devices": names, "nvidia_driver": driver}

    def close(self) -> None:
        if self._started:
            self._started = False
            try:
                self._nvml.nvmlShutdown()
            except self._nvml.NVMLError:
                pass  # nothing to release that a failed shutdown would keep


class RaplMeter:
    """Linux RAPL energy of the CPU packages, summed, in joules, across counter wraparounds.

    Parameters
    ----------
    root : path, optional
        The powercap folder (default ``/sys/class/powercap``).

    Raises
    ------
    MeasureError
        When no package zone exists or its counter is not readable (often root-only).
    """

    source = "rapl"

    def __init__(self, root=POWERCAP):
        root = Path(root)
        zones = sorted(p for p in root.glob("intel-rapl:*") if re.fullmatch(r"intel-rapl:\d+", p.name))
        if not zones:
            raise MeasureError(f"no RAPL zone under {root} (not Linux, not an Intel/AMD CPU, or powercap absent)")
        # Sub-zones (core, uncore, dram) are parts of a package, and a psys zone contains the
        # packages: count packages only, where the zones name them.
        packages = [z for z in zones if _read_text(z / "name", "").startswith("package")]
        self.zones = packages or zones
        self._max_uj, self._last_uj = [], []
        for z in self.zones:
            try:
                self._last_uj.append(int((z / "energy_uj").read_text()))
            except (OSError, ValueError) as e:
                raise MeasureError(
                    f"RAPL counter {z / 'energy_uj'} is not readable ({getattr(e, 'strerror', None) or e}); "
                    "it is often root-only: run with permission to read it, or pass --assume-power-w W"
                ) from e
            try:
                self._max_uj.append(int((z / "max_energy_range_uj").read_text()))
            except (OSError, ValueError):
                self._max_uj.append(None)
        self._total_uj = 0

    def read_j(self) -> float:
        """Energy since this meter was opened, in joules (reads must come once per wrap period)."""
        for i, z in enumerate(self.zones):
            try:
                raw = int((z / "energy_uj").read_text())
            except (OSError, ValueError) as e:
                raise MeasureError(f"cannot read RAPL counter {z / 'energy_uj'}: {e}") from e
            last = self._last_uj[i]
            if raw >= last:
                self._total_uj += raw - last
            elif self._max_uj[i] is not None:
                self._total_uj += self._max_uj[i] - last + raw
            else:
                raise MeasureError(f"RAPL counter {z / 'energy_uj'} went back and its max_energy_range_uj "
                                   "is unreadable, so the wraparound cannot be undone")
            self._last_uj[i] = raw
        return self._total_uj / 1e6

    def describe(self) -> dict:
        return {"energy_source": self.source, "energy_devices": [_read_text(z / "name", z.name) for z in self.zones]}

    def close(self) -> None:
        pass


class AssumedPowerMeter:
    """No meter: a constant ``power_w`` the user states, integrated over wall time."""

    source = "assumed"

    def __init__(self, power_w: float, clock=time.perf_counter):
        power_w = check_number(power_w, "--assume-power-w", MeasureError, 0.0, MAX_POWER_W, low_open=True, unit="W")
        self.power_w = power_w
        self._clock = clock

    def read_j(self) -> float:
        return self.power_w * self._clock()

    def describe(self) -> dict:
        return {"energy_source": self.source, "assumed_power_w": self.power_w}

    def close(self) -> None:
        pass


METERS = ("auto", "nvml", "rapl", "assumed")


def open_meter(kind: str, backend, assume_power_w=None, powercap_root=None):
    """The energy meter for a run.

    ``auto`` picks NVML for a GPU backend and RAPL for the CPU; when that meter cannot be read,
    it falls back to ``assume_power_w`` if one is given, and otherwise refuses, because a table
    without measured joules must say that its joules are assumed.

    Returns
    -------
    meter, note : (object, str or None)
        ``note`` says why an assumed power stands in for a meter, or that a given power is unused.
    """
    if kind not in METERS:
        raise MeasureError(f"unknown meter {kind!r}: use one of {', '.join(METERS)}")
    if kind == "assumed":
        if assume_power_w is None:
            raise MeasureError("--meter assumed needs --assume-power-w W (the power to assume, in watts)")
        return AssumedPowerMeter(assume_power_w), None
    if kind == "auto":
        kind = "nvml" if backend.name == "cupy" else "rapl"
        try:
            meter = _open_real(kind, backend, powercap_root)
        except MeasureError as e:
            if assume_power_w is None:
                raise MeasureError(
                    "no energy meter is readable here, so a table with measured joules cannot be written",
                    [str(e), "pass --assume-power-w W to write joules from an assumed constant power "
                             "(the table then records energy_source = \"assumed\")"],
                ) from e
            note = f"no {kind} meter ({e.headline}); joules assume {assume_power_w} W"
            return AssumedPowerMeter(assume_power_w), note
        note = None if assume_power_w is None else f"--assume-power-w is unused: the {kind} meter is readable"
        return meter, note
    return _open_real(kind, backend, powercap_root), None


def _open_real(kind, backend, powercap_root):
    if kind == "nvml":
        if backend.name != "cupy":
            raise MeasureError("the NVML meter measures GPUs; a numpy run uses the CPU (use rapl or assumed)")
        return NvmlMeter(pci_bus_ids=backend.meter_targets())
    return RaplMeter(POWERCAP if powercap_root is None else powercap_root)


def idle_power_w(meter, seconds: float, align_s: float = 0.25) -> float:
    """Mean power over about ``seconds`` of doing nothing, in watts.

    Both readings are taken just after the counter updates (polled for at most ``align_s``), so
    a counter that updates every 100 ms does not make a 1 s reading 10 % wrong.
    """
    e0, t0 = _next_update(meter, align_s)
    time.sleep(seconds)
    e1, t1 = _next_update(meter, align_s)
    return (e1 - e0) / (t1 - t0)


def _next_update(meter, limit_s):
    first = meter.read_j()
    start = time.perf_counter()
    while True:
        value, now = meter.read_j(), time.perf_counter()
        if value != first or now - start > limit_s:
            return value, now
        time.sleep(0.001)


def _import_pynvml():
    try:
        return importlib.import_module("pynvml")
    except ImportError as e:
        raise MeasureError("the NVML meter needs nvidia-ml-py (import name pynvml), which is not installed: "
                           "pip install nvidia-ml-py, or pass --assume-power-w W") from e


def _text(value) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _read_text(path, default):
    try:
        return path.read_text().strip()
    except OSError:
        return default
