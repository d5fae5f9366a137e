"""Measuring tables (docs/measure.md): sweep, resume, merge, meters, backends, digests.

CPU tests run the ``tiny`` recipe with millisecond windows; NVML and CuPy are exercised against
autospec mocks here, and for real in the ``gpu``-marked tests where a CUDA device exists.
"""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
import time
import types
from unittest import mock

import numpy as np
import pytest

from specsim.cli import main
from specsim.errors import MeasureError
from specsim.measure import (
    AssumedPowerMeter,
    CallableWorkload,
    CupyBackend,
    NumpyBackend,
    NvmlMeter,
    ProxyWorkload,
    RaplMeter,
    SweepInterrupted,
    SweepRun,
    SweepSettings,
    box_class_from_name,
    load_recipe,
    measure_table,
    merge_files,
    merge_tables,
    open_meter,
    parse_recipe,
    partial_path,
    plan_digest,
)
from specsim.measure import harness, meters
from specsim.measure.recipes import BUILTIN
from specsim.table import Cell, CostTable, TableKey
from tests.fixtures import ROOT

FAST = SweepSettings(min_window_s=0.003, repeats=3, warmup=1, idle_s=0.0, align_s=0.01)
REPO = ROOT


def sweep(tmp_path, widths=(1, 2), max_k=2, name="t.toml", workload=None, box_class="cpu-test", **kw):
    backend = NumpyBackend()
    workload = workload or ProxyWorkload("tiny", backend)
    out = tmp_path / name
    kw.setdefault("settings", FAST)
    run = SweepRun(kw.pop("resume", False), False, kw.pop("log", None))
    table = measure_table(workload, backend, AssumedPowerMeter(50.0), list(widths), max_k, out,
                          box_class=box_class, run=run, **kw)
    return table, out


# -- end to end on the CPU ------------------------------------------------------------------------
def test_tiny_recipe_end_to_end_writes_a_valid_table(tmp_path):
    table, out = sweep(tmp_path, widths=(1, 2, 4), max_k=2)
    back = CostTable.load(out)
    assert back == table
    assert back.widths.tolist() == [1, 2, 4] and back.max_k == 2
    assert back.key.box_class == "cpu-test" and back.key.recipe == BUILTIN["tiny"]["id"]
    assert set(back.key.plan_digests) == {"verify", "draft"}
    assert all(d.startswith("sha256:") and len(d) == 7 + 64 for d in back.key.plan_digests.values())
    assert back.meta["energy_source"] == "assumed" and back.meta["assumed_power_w"] == 50.0
    assert back.meta["backend"] == "numpy" and back.meta["clock"] == "perf_counter_ns"
    for c in back.cells:
        assert c.verify_ms > 0 and c.verify_j > 0
        extra = back.extras[(c.n, c.k)]
        assert extra["verify_samples"] == 3
        assert extra["verify_ms_p10"] <= c.verify_ms <= extra["verify_ms_p90"]
        assert extra["verify_window_s"] >= FAST.min_window_s
        if c.k == 0:
            assert c.draft_ms == 0.0 and c.draft_j == 0.0 and "draft_samples" not in extra
        else:
            assert c.draft_ms > 0 and c.draft_j > 0 and extra["draft_samples"] == 3
    # Assumed power: joules per step are the power times the window's wall time per step.
    x = back.extras[(1, 0)]
    assert back.cell(1, 0).verify_j == pytest.approx(50.0 * x["verify_window_ms"] / 1e3, rel=1e-2)
    assert not partial_path(out).exists()


def test_cli_bench_writes_a_table_and_prints_the_grid(tmp_path, capsys):
    out = tmp_path / "cli.toml"
    code = main(["bench", "--recipe", "tiny", "--widths", "1,2", "--max-k", "1", "--min-window-s", "0.003",
                 "--repeats", "3", "--warmup", "1", "--assume-power-w", "80", "--box-class", "laptop",
                 "--quiet", "-o", str(out)])
    assert code == 0
    printed = capsys.readouterr().out
    assert "box class laptop" in printed and "verify_ms" in printed
    table = CostTable.load(out)
    assert table.key.box_class == "laptop" and table.meta["energy_source"] == "assumed"
    assert len(table.cells) == 4


def test_cli_bench_reads_a_recipe_file(tmp_path):
    recipe = tmp_path / "mine.toml"
    recipe.write_text('layers = 1\nhidden = 32\nffn = 64\nheads = 2\nkv_heads = 1\nhead_dim = 16\n'
                      'context = 16\nvocab = 64\ndtype = "fp16"\ndrafter_layers = 1\n')
    out = tmp_path / "r.toml"
    assert main(["bench", "--recipe", str(recipe), "--widths", "1", "--max-k", "1", "--min-window-s", "0.003",
                 "--repeats", "2", "--assume-power-w", "10", "--quiet", "-o", str(out)]) == 0
    assert CostTable.load(out).key.recipe == "mine"


# -- joules need a meter or an explicit assumption -------------------------------------------------
def test_joules_are_refused_without_a_meter_or_an_assumption(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(meters, "POWERCAP", tmp_path / "no-powercap")
    with pytest.raises(MeasureError, match="no energy meter is readable") as err:
        open_meter("auto", NumpyBackend())
    assert any("--assume-power-w" in p for p in err.value.problems)
    out = tmp_path / "x.toml"
    code = main(["bench", "--recipe", "tiny", "--widths", "1", "--max-k", "0", "--quiet", "-o", str(out)])
    assert code == 2
    assert "--assume-power-w" in capsys.readouterr().err
    assert not out.exists() and not partial_path(out).exists()
    meter, note = open_meter("auto", NumpyBackend(), assume_power_w=120.0)
    assert isinstance(meter, AssumedPowerMeter) and meter.power_w == 120.0 and "120.0 W" in note
    with pytest.raises(MeasureError, match="needs --assume-power-w"):
        open_meter("assumed", NumpyBackend())
    with pytest.raises(MeasureError, match="NVML meter measures GPUs"):
        open_meter("nvml", NumpyBackend())
    for bad in (0.0, -5.0, float("nan"), float("inf")):
        with pytest.raises(MeasureError, match="assume-power-w"):
            AssumedPowerMeter(bad)


def test_a_counter_that_never_moves_is_refused(tmp_path):
    zone = tmp_path / "intel-rapl:0"
    zone.mkdir()
    (zone / "name").write_text("package-0\n")
    (zone / "energy_uj").write_text("1000\n")
    backend = NumpyBackend()
    with pytest.raises(MeasureError, match="did not advance"):
        measure_table(ProxyWorkload("tiny", backend), backend, RaplMeter(tmp_path), [1], 0, tmp_path / "o.toml",
                  box_class="b", settings=FAST, run=SweepRun(progress=False))


# -- RAPL ------------------------------------------------------------------------------------------
def make_zone(root, name, label, energy, max_range=None):
    zone = root / name
    zone.mkdir()
    (zone / "name").write_text(label + "\n")
    (zone / "energy_uj").write_text(f"{energy}\n")
    if max_range is not None:
        (zone / "max_energy_range_uj").write_text(f"{max_range}\n")
    return zone


def test_rapl_sums_packages_and_undoes_wraparound(tmp_path):
    p0 = make_zone(tmp_path, "intel-rapl:0", "package-0", 900, max_range=1000)
    p1 = make_zone(tmp_path, "intel-rapl:1", "package-1", 5_000_000, max_range=10**9)
    make_zone(tmp_path, "intel-rapl:0:0", "core", 1, max_range=1000)  # a part of package 0
    make_zone(tmp_path, "intel-rapl:2", "psys", 7, max_range=1000)  # contains the packages
    meter = RaplMeter(tmp_path)
    assert [z.name for z in meter.zones] == ["intel-rapl:0", "intel-rapl:1"]
    assert meter.read_j() == 0.0
    (p0 / "energy_uj").write_text("50\n")  # wrapped: 900 -> 1000 -> 0 -> 50 is 150 uJ
    (p1 / "energy_uj").write_text("6000000\n")
    assert meter.read_j() == pytest.approx((150 + 1_000_000) / 1e6)
    (p0 / "energy_uj").write_text("60\n")
    assert meter.read_j() == pytest.approx((160 + 1_000_000) / 1e6)
    assert meter.describe() == {"energy_source": "rapl", "energy_devices": ["package-0", "package-1"]}


def test_rapl_refuses_unreadable_or_missing_counters(tmp_path):
    with pytest.raises(MeasureError, match="no RAPL zone"):
        RaplMeter(tmp_path)
    zone = tmp_path / "intel-rapl:0"
    (zone / "energy_uj").mkdir(parents=True)  # a folder: reading it fails as an unreadable file does
    with pytest.raises(MeasureError, match="not readable") as err:
        RaplMeter(tmp_path)
    assert isinstance(err.value.__cause__, OSError)


def test_rapl_without_max_range_refuses_a_counter_going_back(tmp_path):
    zone = make_zone(tmp_path, "intel-rapl:0", "package-0", 500)
    meter = RaplMeter(tmp_path)
    (zone / "energy_uj").write_text("100\n")
    with pytest.raises(MeasureError, match="wraparound"):
        meter.read_j()


# -- NVML against autospec mocks -------------------------------------------------------------------
try:
    import pynvml
except ImportError:  # nvidia-ml-py is an optional dependency (the gpu extra)
    pynvml = None

NVML_FUNCTIONS = ("nvmlInit", "nvmlShutdown", "nvmlDeviceGetHandleByIndex", "nvmlDeviceGetHandleByPciBusId",
                  "nvmlDeviceGetTotalEnergyConsumption", "nvmlDeviceGetName", "nvmlSystemGetDriverVersion")


@pytest.fixture
def nvml():
    """Every NVML function the meter calls, replaced by an autospec mock (signatures checked)."""
    if pynvml is None:
        pytest.skip("nvidia-ml-py (pynvml) is not installed")
    mocks = {name: mock.create_autospec(getattr(pynvml, name)) for name in NVML_FUNCTIONS}
    with mock.patch.multiple(pynvml, **mocks):
        yield types.SimpleNamespace(**mocks)


def test_nvml_meter_sums_devices_in_joules(nvml):
    handles = {"0000:1B:00.0": "h0", "0000:3B:00.0": "h1"}
    nvml.nvmlDeviceGetHandleByPciBusId.side_effect = handles.__getitem__
    counters = {"h0": iter([1000, 1500, 4000]), "h1": iter([20, 520, 1020])}
    nvml.nvmlDeviceGetTotalEnergyConsumption.side_effect = lambda h: next(counters[h])
    nvml.nvmlDeviceGetName.side_effect = lambda h: "NVIDIA H200"
    nvml.nvmlSystemGetDriverVersion.return_value = "570.86"
    meter = NvmlMeter(pci_bus_ids=list(handles))
    nvml.nvmlInit.assert_called_once_with()
    assert meter.read_j() == pytest.approx((1500 + 520) / 1000)
    assert meter.read_j() == pytest.approx((4000 + 1020) / 1000)
    assert meter.describe() == {"energy_source": "nvml", "energy_devices": ["NVIDIA H200", "NVIDIA H200"],
                                "nvidia_driver": "570.86"}
    meter.close()
    meter.close()
    nvml.nvmlShutdown.assert_called_once_with()


def test_nvml_meter_by_index_defaults_to_device_zero(nvml):
    nvml.nvmlDeviceGetHandleByIndex.return_value = "h"
    nvml.nvmlDeviceGetTotalEnergyConsumption.return_value = 123456
    meter = NvmlMeter()
    nvml.nvmlDeviceGetHandleByIndex.assert_called_once_with(0)
    assert meter.read_j() == 123.456


def test_nvml_errors_are_wrapped(nvml):
    nvml.nvmlInit.side_effect = pynvml.NVMLError(pynvml.NVML_ERROR_DRIVER_NOT_LOADED)
    with pytest.raises(MeasureError, match="NVML cannot start .*Driver Not Loaded") as err:
        NvmlMeter()
    assert isinstance(err.value.__cause__, pynvml.NVMLError)
    nvml.nvmlShutdown.assert_not_called()

    nvml.nvmlInit.side_effect = None
    nvml.nvmlDeviceGetHandleByIndex.return_value = "h"
    nvml.nvmlDeviceGetTotalEnergyConsumption.side_effect = pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
    with pytest.raises(MeasureError, match="Volta or newer") as err:
        NvmlMeter()
    assert isinstance(err.value.__cause__, pynvml.NVMLError_NotSupported)
    nvml.nvmlShutdown.assert_called_once_with()  # a failed open releases NVML

    nvml.nvmlDeviceGetHandleByPciBusId.side_effect = pynvml.NVMLError(pynvml.NVML_ERROR_NOT_FOUND)
    with pytest.raises(MeasureError, match="PCI bus 0000:99:00.0: Not Found"):
        NvmlMeter(pci_bus_ids=["0000:99:00.0"])

    nvml.nvmlDeviceGetTotalEnergyConsumption.side_effect = [5000, pynvml.NVMLError(pynvml.NVML_ERROR_GPU_IS_LOST)]
    meter = NvmlMeter()
    with pytest.raises(MeasureError, match="energy counter of GPU 0: GPU is lost") as err:
        meter.read_j()
    assert isinstance(err.value.__cause__, pynvml.NVMLError)


def test_nvml_missing_library_is_a_clear_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)
    with pytest.raises(MeasureError, match="nvidia-ml-py"):
        NvmlMeter()


# -- CuPy against mocks ----------------------------------------------------------------------------
class _EventSpec:
    def record(self, stream=None): ...
    def synchronize(self): ...


class _DeviceSpec:
    pci_bus_id = ""
    mem_info = (0, 0)

    def __init__(self, device=None): ...
    def use(self): ...
    def synchronize(self): ...


def _get_elapsed_time(start_event, end_event): ...
def _is_available(): ...
def _get_device_count(): ...
def _get_device_properties(device): ...
def _runtime_get_version(): ...
def _driver_get_version(): ...


def fake_cupy(available=True, count=1, count_error=None, elapsed_ms=2.5):
    """A CuPy stand-in: NumPy arrays, autospec'd CUDA calls (no CUDA needed)."""
    runtime = types.SimpleNamespace(
        getDeviceCount=mock.create_autospec(_get_device_count, return_value=count, side_effect=count_error),
        getDeviceProperties=mock.create_autospec(_get_device_properties, return_value={"name": b"NVIDIA H200"}),
        runtimeGetVersion=mock.create_autospec(_runtime_get_version, return_value=12080),
        driverGetVersion=mock.create_autospec(_driver_get_version, return_value=12080),
    )
    device = mock.create_autospec(_DeviceSpec)
    device.return_value.pci_bus_id = "0000:1B:00.0"
    device.return_value.mem_info = (100 * 2**30, 141 * 2**30)
    cuda = types.SimpleNamespace(
        is_available=mock.create_autospec(_is_available, return_value=available),
        runtime=runtime, Device=device, Event=mock.create_autospec(_EventSpec),
        get_elapsed_time=mock.create_autospec(_get_elapsed_time, return_value=elapsed_ms),
    )
    module = types.ModuleType("cupy")
    module.__dict__.update({name: getattr(np, name) for name in dir(np) if not name.startswith("__")})
    module.__version__ = "13.3.0"
    module.cuda = cuda
    return module


def test_cupy_missing_is_named(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "cupy", None)
    with pytest.raises(MeasureError, match="CuPy, which is not installed"):
        CupyBackend()
    code = main(["bench", "--recipe", "tiny", "--widths", "1", "--max-k", "0", "--backend", "cupy",
                 "--assume-power-w", "100", "-o", "never.toml"])
    assert code == 2
    assert "CuPy, which is not installed" in capsys.readouterr().err


def test_cupy_without_device_or_driver_is_named():
    with pytest.raises(MeasureError, match="no CUDA device is visible"):
        CupyBackend(cupy=fake_cupy(available=False, count=0))
    err = RuntimeError("cudaErrorInsufficientDriver: CUDA driver version is insufficient for CUDA runtime version")
    with pytest.raises(MeasureError, match="cudaErrorInsufficientDriver.*driver") as info:
        CupyBackend(cupy=fake_cupy(available=False, count_error=err))
    assert info.value.__cause__ is err
    with pytest.raises(MeasureError, match="CUDA device 3 does not exist: 1 device"):
        CupyBackend(3, cupy=fake_cupy())


def test_cupy_backend_times_with_cuda_events():
    cp = fake_cupy(elapsed_ms=4.25)
    backend = CupyBackend(cupy=cp)
    cp.cuda.Device.return_value.use.assert_called_once_with()
    calls = []
    ms = backend.time_ms(lambda: calls.append(1), 5)
    assert ms.tolist() == [4.25] * 5 and len(calls) == 5
    assert cp.cuda.get_elapsed_time.call_count == 5
    event = cp.cuda.Event.return_value
    assert event.record.call_count == 10 and event.synchronize.call_count == 5
    assert backend.device_name() == "NVIDIA H200"
    assert backend.versions() == {"cupy": "13.3.0", "cuda_runtime": 12080}
    assert backend.compute_dtype("bf16") == "float16" and backend.meter_targets() == ["0000:1B:00.0"]


def test_cupy_path_end_to_end_with_nvml_mocks(tmp_path, nvml):
    cp = fake_cupy(elapsed_ms=3.0)
    backend = CupyBackend(cupy=cp)
    nvml.nvmlDeviceGetHandleByPciBusId.return_value = "h0"
    counter = itertools.count(10_000, 40)  # mJ; moves at every read
    nvml.nvmlDeviceGetTotalEnergyConsumption.side_effect = lambda h: next(counter)
    nvml.nvmlDeviceGetName.return_value = "NVIDIA H200"
    nvml.nvmlSystemGetDriverVersion.return_value = "570.86"
    meter, note = open_meter("auto", backend)
    assert isinstance(meter, NvmlMeter) and note is None
    nvml.nvmlDeviceGetHandleByPciBusId.assert_called_once_with("0000:1B:00.0")
    settings = SweepSettings(min_window_s=0.003, repeats=3, warmup=1, idle_s=0.002, align_s=0.01)
    out = tmp_path / "gpu.toml"
    table = measure_table(ProxyWorkload("tiny", backend), backend, meter, [1, 2], 1, out, settings=settings,
                          run=SweepRun(progress=False))
    meter.close()
    assert table.key.box_class == "h200"
    assert table.meta["energy_source"] == "nvml" and table.meta["nvidia_driver"] == "570.86"
    assert table.meta["backend"] == "cupy" and table.meta["pci_bus_id"] == "0000:1B:00.0"
    assert table.meta["idle_power_w"] > 0
    for c in table.cells:
        assert c.verify_ms == 3.0 and table.extras[(c.n, c.k)]["verify_ms_cv"] == 0.0
        assert c.verify_j > 0
        if c.k:
            assert c.draft_ms == 3.0 and c.draft_j > 0
    assert CostTable.load(out) == table
    # The same recipe on the CPU launches something else: another digest.
    numpy_digests = ProxyWorkload("tiny", NumpyBackend()).digests()
    assert all(numpy_digests[m] != table.key.plan_digests[m] for m in ("verify", "draft"))


def test_proxy_refuses_a_recipe_too_big_for_the_device():
    cp = fake_cupy()
    cp.cuda.Device.return_value.mem_info = (2**30, 2**31)
    workload = ProxyWorkload("llama-3.1-8b", CupyBackend(cupy=cp))
    with pytest.raises(MeasureError, match=r"needs about \d+\.\d GiB .* 1\.0 GiB free"):
        workload.prepare(32, 3)


# -- digests ---------------------------------------------------------------------------------------
def test_digest_changes_when_the_launch_changes(monkeypatch):
    backend = NumpyBackend()
    base = ProxyWorkload("tiny", backend).digests()
    assert base["verify"] != base["draft"]
    assert ProxyWorkload("tiny", backend).digests() == base
    tiny = dict(BUILTIN["tiny"])
    for field, value in [("hidden", 96), ("context", 128), ("layers", 3), ("vocab", 512), ("heads", 8),
                         ("kv_heads", 4), ("head_dim", 32), ("ffn", 256)]:
        changed = ProxyWorkload(load_recipe_dict(tiny | {field: value}), backend).digests()
        assert changed["verify"] != base["verify"], field
        if field != "layers":
            assert changed["draft"] != base["draft"], field
    # Each depth changes only its own mode's launch.
    more = ProxyWorkload(load_recipe_dict(tiny | {"drafter_layers": 2}), backend).digests()
    assert more["verify"] == base["verify"] and more["draft"] != base["draft"]
    deeper = ProxyWorkload(load_recipe_dict(tiny | {"layers": 3}), backend).digests()
    assert deeper["verify"] != base["verify"] and deeper["draft"] == base["draft"]
    # The recipe's name is not a launch: renaming keeps the digests.
    assert ProxyWorkload(load_recipe_dict(tiny | {"id": "other"}), backend).digests() == base
    # bf16 computes in float32 on NumPy, like fp32, so the launches (and digests) are the same...
    assert ProxyWorkload(load_recipe_dict(tiny | {"dtype": "bf16"}), backend).digests() == base
    # ...but not on CuPy, where it computes in float16.
    cp = CupyBackend(cupy=fake_cupy())
    assert (ProxyWorkload(load_recipe_dict(tiny | {"dtype": "bf16"}), cp).digests()
            != ProxyWorkload(load_recipe_dict(tiny), cp).digests())
    monkeypatch.setattr(NumpyBackend, "versions", lambda self: {"numpy": "0.0.1"})
    assert ProxyWorkload("tiny", NumpyBackend()).digests()["verify"] != base["verify"]


def load_recipe_dict(values):
    from specsim.measure import Recipe

    return Recipe(**values)


def test_plan_digest_is_canonical():
    assert plan_digest({"a": 1, "b": [1, 2]}) == plan_digest({"b": [1, 2], "a": 1})
    assert plan_digest({"a": 1}) != plan_digest({"a": 2})
    with pytest.raises(MeasureError, match="plain JSON"):
        plan_digest({"a": object()})
    with pytest.raises(MeasureError, match="plain JSON"):
        plan_digest({"a": float("nan")})


# -- user callables --------------------------------------------------------------------------------
def test_callable_workload_needs_a_digest_or_plan_per_mode():
    with pytest.raises(MeasureError, match="mode.s. draft"):
        CallableWorkload(lambda n, k: None, lambda n: None, "r", digests={"verify": "sha256:x"})
    w = CallableWorkload(lambda n, k: None, lambda n: None, "r", digests={"verify": "sha256:x"},
                         plans={"draft": {"gemm": [1, 2]}})
    assert w.digests() == {"verify": "sha256:x", "draft": plan_digest({"gemm": [1, 2]})}
    with pytest.raises(MeasureError, match="need a draft"):
        CallableWorkload(lambda n, k: None, None, "r", digests={"verify": "a", "draft": "b"}).prepare(4, 2)


def test_interrupt_inside_a_user_step_resumes_without_losing_or_repeating_a_cell(tmp_path):
    calls = []
    stop_at = {"cell": (2, 1)}

    def verify(n, k):
        if (n, k) == stop_at["cell"]:
            raise KeyboardInterrupt
        calls.append(("verify", n, k))
        np.dot(np.ones((8 * n, 16)), np.ones((16, 16)))

    def draft(n):
        np.dot(np.ones((n, 16)), np.ones((16, 16)))

    def workload():
        return CallableWorkload(verify, draft, "mine/real", plans={"verify": {"v": 1}, "draft": {"d": 1}})

    out = tmp_path / "user.toml"
    with pytest.raises(SweepInterrupted) as err:
        sweep(tmp_path, widths=(1, 2), max_k=1, name="user.toml", workload=workload())
    assert isinstance(err.value, KeyboardInterrupt)
    assert (err.value.done, err.value.total) == (3, 4) and "--resume" in str(err.value)
    assert not out.exists()
    _, kept = harness.read_partial(partial_path(out))
    assert sorted(kept) == [(1, 0), (1, 1), (2, 0)]

    stop_at["cell"] = None
    calls.clear()
    table, _ = sweep(tmp_path, widths=(1, 2), max_k=1, name="user.toml", workload=workload(), resume=True)
    assert {(n, k) for _, n, k in calls} == {(2, 1)}
    assert [(c.n, c.k) for c in table.cells] == [(1, 0), (1, 1), (2, 0), (2, 1)]
    for nk, (cell, _) in kept.items():
        assert table.cell(*nk) == cell  # kept, not measured again
    assert table.meta["sessions"] == 2 and table.key.recipe == "mine/real"


# -- interrupt and resume --------------------------------------------------------------------------
REAL_MEASURE_CELL = harness.measure_cell


def count_cells(monkeypatch, stop_after=None):
    """Record every cell the harness measures; raise KeyboardInterrupt once ``stop_after`` are done."""
    measured = []
    real = REAL_MEASURE_CELL

    def wrapped(workload, backend, meter, n, k, settings):
        if stop_after is not None and len(measured) == stop_after:
            raise KeyboardInterrupt
        measured.append((n, k))
        return real(workload, backend, meter, n, k, settings)

    monkeypatch.setattr(harness, "measure_cell", wrapped)
    return measured


def test_interrupted_sweep_resumes_without_losing_or_repeating_a_cell(tmp_path, monkeypatch):
    first = count_cells(monkeypatch, stop_after=4)
    with pytest.raises(SweepInterrupted) as err:
        sweep(tmp_path, widths=(1, 2, 3), max_k=2)
    out = tmp_path / "t.toml"
    assert err.value.done == 4 and err.value.partial == partial_path(out)
    assert not out.exists()
    header, kept = harness.read_partial(partial_path(out))
    assert sorted(kept) == first == [(1, 0), (1, 1), (1, 2), (2, 0)]
    assert header["grid"] == {"widths": [1, 2, 3], "max_k": 2}

    # Without --resume the kept sweep is not overwritten.
    with pytest.raises(MeasureError, match="pass --resume"):
        sweep(tmp_path, widths=(1, 2, 3), max_k=2)

    second = count_cells(monkeypatch)
    table, _ = sweep(tmp_path, widths=(1, 2, 3), max_k=2, resume=True)
    assert sorted(first + second) == [(n, k) for n in (1, 2, 3) for k in range(3)]
    assert not set(first) & set(second)
    for nk, (cell, extras) in kept.items():
        assert table.cell(*nk) == cell and table.extras[nk] == extras
    assert CostTable.load(out) == table and not partial_path(out).exists()


def test_resume_refuses_another_sweep_listing_the_differences(tmp_path, monkeypatch):
    count_cells(monkeypatch, stop_after=1)
    with pytest.raises(SweepInterrupted):
        sweep(tmp_path, widths=(1, 2), max_k=1)
    count_cells(monkeypatch)
    with pytest.raises(MeasureError, match="--resume refused") as err:
        sweep(tmp_path, widths=(1, 4), max_k=2, box_class="other", resume=True,
              settings=SweepSettings(min_window_s=0.005, repeats=3, warmup=1, idle_s=0.0))
    text = "\n".join(err.value.problems)
    assert "box_class: kept 'cpu-test', now 'other'" in text
    assert "grid widths: kept [1, 2], now [1, 4]" in text and "grid max_k: kept 1, now 2" in text
    assert "setting min_window_s" in text
    # The kept file is untouched by the refusal.
    assert sorted(harness.read_partial(partial_path(tmp_path / "t.toml"))[1]) == [(1, 0)]


def test_cli_interrupt_leaves_a_resumable_file_and_says_how(tmp_path, monkeypatch, capsys):
    count_cells(monkeypatch, stop_after=2)
    out = tmp_path / "c.toml"
    args = ["bench", "--recipe", "tiny", "--widths", "1,2", "--max-k", "1", "--min-window-s", "0.003",
            "--repeats", "2", "--warmup", "1", "--assume-power-w", "60", "--quiet", "-o", str(out)]
    assert main(args) == 130
    err = capsys.readouterr().err
    assert "2 of 4 cells" in err and "--resume" in err and str(partial_path(out)) in err
    measured = count_cells(monkeypatch)
    assert main(args + ["--resume"]) == 0
    assert measured == [(2, 0), (2, 1)]
    assert len(CostTable.load(out).cells) == 4


def test_interrupt_before_the_first_cell_says_nothing_was_kept(tmp_path):
    def prepare(max_n, max_k):
        raise KeyboardInterrupt

    w = CallableWorkload(lambda n, k: None, None, "r", digests={"verify": "a", "draft": "b"}, prepare=prepare)
    with pytest.raises(SweepInterrupted, match="before the sweep started") as err:
        sweep(tmp_path, widths=(1,), max_k=0, workload=w)
    assert err.value.done == 0 and not partial_path(tmp_path / "t.toml").exists()


def test_a_corrupt_partial_file_is_refused_with_its_line(tmp_path):
    p = tmp_path / "x.toml.partial.jsonl"
    header = '{"specsim_partial": 1, "key": {}, "grid": {}, "settings": {}, "meta": {}}'
    p.write_text(header + '\n{"cell": {"n": 1}, "extras": {}}\n')
    with pytest.raises(MeasureError, match=r"x.toml.partial.jsonl:2: not a measured cell"):
        harness.read_partial(p)
    p.write_text("not json\n")
    with pytest.raises(MeasureError, match=":1: the header line is not JSON"):
        harness.read_partial(p)


# -- merge -----------------------------------------------------------------------------------------
KEY = TableKey(1, "h200", "r/x", {"verify": "sha256:a", "draft": "sha256:b"})


def run_text(scale, key=KEY, widths=(1, 4), max_k=1, source="nvml", device="NVIDIA H200"):
    cells, extras = [], {}
    for n in widths:
        for k in range(max_k + 1):
            d = 0.0 if k == 0 else scale * (1 + k)
            cells.append(Cell(n, k, scale * n, 2 * scale * n, d, d / 2))
            extras[(n, k)] = {"verify_ms_cv": scale / 100, "verify_samples": 20, "note": f"run{scale}"}
    meta = {"energy_source": source, "device": device, "idle_power_w": 70.0 + scale, "repeats": 20}
    return CostTable.render(key, cells, meta=meta, extras=extras)


def test_merge_takes_the_median_of_every_field(tmp_path):
    paths = []
    for i, scale in enumerate((1.0, 3.0, 2.0)):
        paths.append(tmp_path / f"run{i}.toml")
        paths[-1].write_text(run_text(scale, device=f"NVIDIA H200 #{i}" if i == 2 else "NVIDIA H200"))
    out = tmp_path / "merged.toml"
    assert main(["table", "merge", *map(str, paths), "-o", str(out)]) == 0
    merged = CostTable.load(out)
    expected = CostTable.parse(run_text(2.0))
    assert merged.key == KEY and merged == expected  # every cost is the middle run's
    assert merged.extras[(4, 1)] == {"verify_ms_cv": 0.02, "verify_samples": 20}  # strings dropped
    assert merged.meta["idle_power_w"] == 72.0 and merged.meta["merged_runs"] == 3
    assert merged.meta["repeats"] == 20 and merged.meta["energy_source"] == "nvml"
    assert "device" not in merged.meta  # the runs disagree on it and it is not a number

    # An even number of runs: the median is the mean of the middle two, field by field.
    two = [CostTable.parse(run_text(s)) for s in (1.0, 2.0)]
    _, cells, _, _, _ = merge_tables(two)
    assert {(c.n, c.k): c.verify_ms for c in cells} == {(1, 0): 1.5, (1, 1): 1.5, (4, 0): 6.0, (4, 1): 6.0}


def test_merge_refuses_runs_of_different_sweeps_listing_every_difference(tmp_path):
    a = tmp_path / "a.toml"
    a.write_text(run_text(1.0))
    b = tmp_path / "b.toml"
    other_key = TableKey(1, "h100", "r/x", {"verify": "sha256:a", "draft": "sha256:c"})
    b.write_text(run_text(2.0, key=other_key, widths=(1, 8), max_k=2, source="assumed"))
    with pytest.raises(MeasureError, match="not one sweep") as err:
        merge_files([a, b], tmp_path / "m.toml")
    problems = err.value.problems
    assert any("box_class is 'h100'" in p and "'h200'" in p for p in problems)
    assert any("plan digest of mode 'draft'" in p for p in problems)
    assert any("lacks width(s) [4]" in p for p in problems)
    assert any("has width(s) [8]" in p for p in problems)
    assert any("depths 0..2" in p for p in problems)
    assert any("energy source 'assumed'" in p for p in problems)
    assert not (tmp_path / "m.toml").exists()


# -- recipes, names, settings ----------------------------------------------------------------------
def test_builtin_recipes_are_valid_and_real_shapes_are_as_published():
    for name in BUILTIN:
        assert load_recipe(name).id == BUILTIN[name]["id"]
    r = load_recipe("llama-3.1-8b")
    # 8.03 B parameters: 32 layers + embedding + LM head (the proxy ties them: one vocab matrix).
    params = r.weight_count(r.layers) + 2 * r.vocab * r.hidden
    assert 7.9e9 < params < 8.1e9
    with pytest.raises(MeasureError, match="built-in recipes: tiny"):
        load_recipe("gpt-9")


def test_recipe_files_are_checked_listing_every_problem(tmp_path):
    text = ('layers = 0\nhidden = 64\nffn = 1.5\nheads = 6\nkv_heads = 4\nhead_dim = 16\ncontext = 8\n'
            'vocab = 16\ndtype = "fp8"\nlayer = 2\n')
    with pytest.raises(MeasureError, match="the recipe is refused") as err:
        parse_recipe(text, "bad.toml")
    text_problems = "\n".join(err.value.problems)
    for needle in ("unknown field `layer`", "layers = 0", "ffn = 1.5", "dtype = 'fp8'",
                   "not a multiple of kv_heads", "`drafter_layers` is missing"):
        assert needle in text_problems
    path = tmp_path / "ok.toml"
    path.write_text('id = "m/x"\n' + "\n".join(f"{f} = {v}" for f, v in BUILTIN["tiny"].items()
                                               if f not in ("id", "dtype")) + '\ndtype = "fp16"\n')
    assert load_recipe(path).id == "m/x" and load_recipe(path).dtype == "fp16"


@pytest.mark.parametrize("name, box", [
    ("NVIDIA H200", "h200"),
    ("NVIDIA H100 80GB HBM3", "h100-80gb-hbm3"),
    ("NVIDIA GB10", "gb10"),
    ("NVIDIA GeForce RTX 4090", "geforce-rtx-4090"),
    ("AMD EPYC 7763 64-Core Processor", "amd-epyc-7763"),
    ("Intel(R) Xeon(R) Platinum 8480+ CPU @ 2.00GHz", "intel-xeon-platinum-8480"),
])
def test_box_class_from_device_names(name, box):
    assert box_class_from_name(name) == box


def test_box_class_needs_a_name():
    with pytest.raises(MeasureError, match="--box-class"):
        box_class_from_name("(R) CPU")


def test_sweep_input_is_checked(tmp_path):
    with pytest.raises(MeasureError, match="settings are refused") as err:
        SweepSettings(min_window_s=0.0, repeats=0, warmup=-1, cooldown_s=float("nan"))
    assert len(err.value.problems) == 4
    with pytest.raises(MeasureError, match="grid is refused") as err:
        sweep(tmp_path, widths=(0, 2, 2), max_k=-1)
    assert len(err.value.problems) == 3


def test_proxy_steps_have_the_recipe_shapes_and_stay_finite():
    backend = NumpyBackend()
    w = ProxyWorkload("tiny", backend)
    w.prepare(4, 3)
    assert w.verify(3, 2).shape == (9,)
    assert w.draft(4).shape == (4,)
    for _ in range(300):  # a long window of chained draft steps must not drift to overflow
        w.draft(4)
    assert np.isfinite(w._draft_x).all()
    with pytest.raises(MeasureError, match="outside the prepared"):
        w.verify(5, 0)
    w.close()
    with pytest.raises(MeasureError, match="prepare"):
        w.verify(1, 0)


def test_idle_power_goes_into_meta(tmp_path):
    class Ramp:  # a meter drawing a steady 40 W
        source = "rapl"

        def read_j(self):
            return 40.0 * time.perf_counter()

        def describe(self):
            return {"energy_source": "rapl"}

    backend = NumpyBackend()
    settings = SweepSettings(min_window_s=0.003, repeats=2, warmup=0, idle_s=0.02, align_s=0.01)
    table = measure_table(ProxyWorkload("tiny", backend), backend, Ramp(), [1], 0, tmp_path / "i.toml",
                          box_class="b", settings=settings, run=SweepRun(progress=False))
    assert table.meta["idle_power_w"] == pytest.approx(40.0, rel=1e-2)
    assert table.meta["energy_source"] == "rapl"


def test_idle_power_is_read_between_counter_updates(monkeypatch):
    class Clock:  # simulated time: sleeping advances it, every reading costs 10 us
        now = 0.0

        def sleep(self, dt):
            self.now += dt

        def perf_counter(self):
            self.now += 1e-5
            return self.now

    clock = Clock()
    monkeypatch.setattr(meters, "time", clock)

    class Coarse:  # 100 W, but the counter moves only every 100 ms (as NVML's may)
        def read_j(self):
            return 100.0 * (clock.now // 0.1) * 0.1

    clock.now = 0.05  # halfway between updates: an unaligned 0.25 s reading would say 120 W
    assert meters.idle_power_w(Coarse(), 0.25) == pytest.approx(100.0, rel=0.01)


def test_energy_window_ends_are_aligned_on_counter_updates(monkeypatch):
    class Clock:
        now = 0.033

        def perf_counter(self):
            return self.now

        def sleep(self, dt):
            self.now += dt

    clock = Clock()
    monkeypatch.setattr(harness, "time", clock)

    class Backend:  # every step takes 3 ms of simulated time
        def synchronize(self):
            pass

        def time_ms(self, fn, count):
            for _ in range(count):
                fn()
            return np.full(count, 3.0)

    def step():
        clock.now += 0.003

    class Coarse:  # 100 W, counter moves every 50 ms
        def read_j(self):
            return 100.0 * (clock.now // 0.05) * 0.05

    settings = SweepSettings(min_window_s=0.5, repeats=3, warmup=1, align_s=0.25)
    got = harness.measure_step(Backend(), Coarse(), step, settings)
    assert got["ms"] == 3.0 and got["samples"] == 3
    # 0.3 J per step, to within one step's energy at each end of a ~170-step window
    assert got["j"] == pytest.approx(0.3, rel=2 / 160)
    assert got["window_s"] >= 0.5 and got["window_ms"] == pytest.approx(3.0, rel=2 / 160)


# -- the GPU check script ----------------------------------------------------------------------------
def test_gpu_check_fails_clearly_without_a_gpu():
    try:
        import cupy

        if cupy.cuda.is_available():
            pytest.skip("a GPU is here: the gpu-marked test runs the check")
    except ImportError:
        pass
    env = dict(os.environ, PYTHONPATH=str(REPO))
    proc = subprocess.run([sys.executable, str(REPO / "benchmarks" / "gpu_check.py"), "--out", "unused.toml"],
                          capture_output=True, text=True, env=env, timeout=60)
    assert proc.returncode == 2
    assert "gpu_check: cannot run" in proc.stderr and ("CuPy" in proc.stderr or "CUDA" in proc.stderr)


# -- real GPU (skipped where CuPy or a CUDA device is missing) ----------------------------------------
def real_cupy():
    cp = pytest.importorskip("cupy")
    try:
        ok = cp.cuda.is_available()
    except Exception as e:  # a broken driver reads as no device
        pytest.skip(f"CUDA is not usable: {e}")
    if not ok:
        pytest.skip("cupy.cuda.is_available() is false: no CUDA device")
    return cp


@pytest.mark.gpu
def test_gpu_tiny_recipe_with_nvml(tmp_path):
    real_cupy()
    backend = CupyBackend()
    meter, _ = open_meter("auto", backend, assume_power_w=300.0)
    settings = SweepSettings(min_window_s=0.2, repeats=5, warmup=2, idle_s=0.2)
    try:
        table = measure_table(ProxyWorkload("tiny", backend), backend, meter, [1, 4], 2, tmp_path / "g.toml",
                          settings=settings, run=SweepRun(progress=False))
    finally:
        meter.close()
    assert CostTable.load(tmp_path / "g.toml") == table
    assert table.meta["backend"] == "cupy" and table.meta["clock"] == "cuda_events"
    assert all(c.verify_ms > 0 and c.verify_j > 0 for c in table.cells)


@pytest.mark.gpu
def test_gpu_nvml_counter_is_real():
    real_cupy()
    backend = CupyBackend()
    try:
        meter = NvmlMeter(pci_bus_ids=backend.meter_targets())
    except MeasureError as e:
        pytest.skip(f"NVML energy counter unavailable: {e}")
    try:
        e0 = meter.read_j()
        time.sleep(0.3)
        assert meter.read_j() > e0
    finally:
        meter.close()
