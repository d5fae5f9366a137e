"""Measuring cost tables (docs/measure.md): a timed, metered sweep of verify and draft steps.

``bench`` runs a sweep end to end; the parts (backends, meters, workloads, the harness, merging)
are usable on their own. Nothing here imports CuPy or NVML until a run asks for them.
"""

import dataclasses
from pathlib import Path

from specsim.errors import MeasureError
from specsim.measure.backends import CupyBackend, NumpyBackend, box_class_from_name, open_backend
from specsim.measure.harness import (
    SweepDevice, SweepInterrupted, SweepRun, SweepSettings, measure_cell, measure_table, partial_path,
)
from specsim.measure.merge import merge_files, merge_tables
from specsim.measure.meters import AssumedPowerMeter, NvmlMeter, RaplMeter, open_meter
from specsim.measure.recipes import BUILTIN, Recipe, load_recipe, parse_recipe
from specsim.measure.workloads import CallableWorkload, ProxyWorkload, canonical_json, plan_digest
from specsim._io import atomic_write_text
from specsim.table import CostTable

__all__ = [
    "BUILTIN", "AssumedPowerMeter", "CallableWorkload", "CupyBackend", "NumpyBackend", "NvmlMeter",
    "ProxyWorkload", "RaplMeter", "Recipe", "SweepDevice", "SweepInterrupted", "SweepRun", "SweepSettings", "bench",
    "box_class_from_name", "canonical_json", "context_path", "load_recipe", "measure_cell", "measure_table", "merge_files",
    "merge_tables", "open_backend", "open_meter", "parse_recipe", "partial_path", "plan_digest",
]


def bench(workload, widths, max_k, out, *, device=SweepDevice(), settings=None, box_class=None, run=SweepRun(),
          contexts=None):
    """Measure a cost table and write it to ``out``.

    Parameters
    ----------
    workload : CallableWorkload, Recipe or str
        The user's step functions, or a recipe (file or built-in name) to run as a proxy.
    widths : sequence of int
    max_k : int
    out : path
    device : SweepDevice
        The backend (``numpy`` or ``cupy``) and its CUDA device, the meter (``auto``, ``nvml``,
        ``rapl``, ``assumed``) and the power to assume where no meter is readable.
    settings : SweepSettings, optional
    box_class : str, optional
        Default: derived from the device name.
    run : SweepRun
        Resume, progress and where the notes go.
    contexts : sequence of int, optional
        Measure the grid at each of these contexts (KV tokens each sequence attends over,
        ascending, each >= 1; a recipe only): the recipe's ``context`` is replaced by each in turn,
        so the attention reads grow with it, and the table gets a context axis
        (docs/tables.md#context) whose reference is the recipe's own context when listed, else
        the smallest. Each context's sweep is kept beside ``out`` (``OUT.context-C.toml`` and its
        partial file) until the table is written; ``run.resume`` continues them.

    Returns
    -------
    CostTable
    """
    be = open_backend(device.backend, device.device)
    settings = settings or SweepSettings()
    if contexts is not None:
        return _bench_contexts(workload, contexts, be, (widths, max_k), out, device, settings, box_class, run)
    if not isinstance(workload, CallableWorkload):
        workload = ProxyWorkload(workload, be)
    m, note = open_meter(device.meter, be, device.assume_power_w)
    if note and run.log:
        run.log(note)
    try:
        return measure_table(workload, be, m, widths, max_k, out, box_class=box_class, settings=settings, run=run)
    finally:
        m.close()


def context_path(out, context: int):
    """Where ``bench --contexts`` keeps the sweep at ``context`` until the table is written."""
    out = Path(out)
    return out.with_name(f"{out.name}.context-{context}.toml")


def _bench_contexts(workload, contexts, be, grid, out, device, settings, box_class, run):
    """:func:`bench` with ``contexts``; ``grid`` = ``(widths, max_k)``."""
    widths, max_k = grid
    resume, log = run.resume, run.log
    if isinstance(workload, CallableWorkload):
        raise MeasureError("contexts need a recipe: a callable workload's steps set their own context")
    contexts = list(contexts)
    bad = [c for c in contexts if isinstance(c, bool) or not isinstance(c, int) or c < 1]
    if not contexts or bad:
        raise MeasureError(f"contexts must be integers >= 1 (KV tokens per sequence), got {contexts}")
    if any(b <= a for a, b in zip(contexts, contexts[1:])):
        raise MeasureError(f"contexts {contexts} are not strictly ascending: list each once, smallest first")
    recipe = load_recipe(workload)
    tables = {}
    for c in contexts:
        path = context_path(out, c)
        if resume and path.exists() and not partial_path(path).exists():
            tables[c] = CostTable.load(path)
            if log:
                log(f"context {c}: kept sweep {path}")
            continue
        if path.exists() and not resume:
            raise MeasureError(f"{path} holds the sweep at context {c} of an unfinished run: pass --resume to "
                               "continue it, or delete it to start again")
        if log:
            log(f"context {c}: measuring")
        m, note = open_meter(device.meter, be, device.assume_power_w)
        if note and log:
            log(note)
        try:
            tables[c] = measure_table(ProxyWorkload(dataclasses.replace(recipe, context=c), be), be, m, widths, max_k,
                                      path, box_class=box_class, settings=settings, run=run,
                                      meta={"context_tokens": c})
        finally:
            m.close()
    reference = recipe.context if recipe.context in tables else contexts[0]
    table = CostTable.from_contexts(tables, reference=reference, source=str(out))
    atomic_write_text(out, table.to_text())
    for c in contexts:
        context_path(out, c).unlink()
    return CostTable.load(out)
