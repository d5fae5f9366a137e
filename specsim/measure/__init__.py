"""Measuring cost tables (docs/measure.md): a timed, metered sweep of verify and draft steps.

``bench`` runs a sweep end to end; the parts (backends, meters, workloads, the harness, merging)
are usable on their own. Nothing here imports CuPy or NVML until a run asks for them.
"""

from specsim.measure.backends import CupyBackend, NumpyBackend, box_class_from_name, open_backend
from specsim.measure.harness import SweepInterrupted, SweepSettings, measure_cell, partial_path, run_sweep
from specsim.measure.merge import merge_files, merge_tables
from specsim.measure.meters import AssumedPowerMeter, NvmlMeter, RaplMeter, open_meter
from specsim.measure.recipes import BUILTIN, Recipe, load_recipe, parse_recipe
from specsim.measure.workloads import CallableWorkload, ProxyWorkload, canonical_json, plan_digest

__all__ = [
    "BUILTIN", "AssumedPowerMeter", "CallableWorkload", "CupyBackend", "NumpyBackend", "NvmlMeter",
    "ProxyWorkload", "RaplMeter", "Recipe", "SweepInterrupted", "SweepSettings", "bench",
    "box_class_from_name", "canonical_json", "load_recipe", "measure_cell", "merge_files", "merge_tables",
    "open_backend", "open_meter", "parse_recipe", "partial_path", "plan_digest", "run_sweep",
]


def bench(workload, widths, max_k, out, *, backend="numpy", device=0, meter="auto", assume_power_w=None,
          settings=None, box_class=None, resume=False, progress=True, log=None):
    """Measure a cost table and write it to ``out``.

    Parameters
    ----------
    workload : CallableWorkload, Recipe or str
        The user's step functions, or a recipe (file or built-in name) to run as a proxy.
    widths : sequence of int
    max_k : int
    out : path
    backend : {"numpy", "cupy"}
    device : int
        CUDA device for the cupy backend.
    meter : {"auto", "nvml", "rapl", "assumed"}
    assume_power_w : float, optional
        Power to assume where no meter is readable (the table then says ``energy_source = "assumed"``).
    settings : SweepSettings, optional

    Returns
    -------
    CostTable
    """
    be = open_backend(backend, device)
    if not isinstance(workload, CallableWorkload):
        workload = ProxyWorkload(workload, be)
    m, note = open_meter(meter, be, assume_power_w)
    if note and log:
        log(note)
    try:
        return run_sweep(workload, be, m, widths, max_k, out, box_class=box_class,
                         settings=settings or SweepSettings(), resume=resume, progress=progress, log=log)
    finally:
        m.close()
