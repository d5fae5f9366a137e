"""specsim: plan, simulate and measure the cost of speculative decoding in LLM serving.

Public names are loaded on first use (PEP 562), so ``import specsim`` imports neither Numba nor
any optional dependency and compiles nothing.
"""

from __future__ import annotations

import importlib

__version__ = "0.2.0"

# public name -> module that defines it
_EXPORTS = {
    "SpecsimError": "specsim.errors",
    "TableError": "specsim.errors",
    "CalibrationError": "specsim.errors",
    "KeyMismatchError": "specsim.errors",
    "PlanError": "specsim.errors",
    "TreeError": "specsim.errors",
    "TraceError": "specsim.errors",
    "SimulationError": "specsim.errors",
    "MeasureError": "specsim.errors",
    "CostModelError": "specsim.errors",
    "PolicyError": "specsim.errors",
    "SpecsimWarning": "specsim.errors",
    "TraceWarning": "specsim.errors",
    "SCHEMA": "specsim.table",
    "Cell": "specsim.table",
    "CostTable": "specsim.table",
    "KeyMismatch": "specsim.table",
    "TableKey": "specsim.table",
    "DrafterKey": "specsim.calibration",
    "AcceptanceCalibration": "specsim.calibration",
    "conditional_priors": "specsim.calibration",
    "Planner": "specsim.plan",
    "SpecCostState": "specsim.plan",
    "propose_depth": "specsim.plan",
    "sequence_depths": "specsim.plan",
    "goodput_depth": "specsim.plan",
    "TreePlan": "specsim.plan",
    "Tree": "specsim.tree",
    "best_tree": "specsim.tree",
    "expected_tokens": "specsim.tree",
    "model_table": "specsim.costmodel",
    "bench": "specsim.measure",
    "CallableWorkload": "specsim.measure",
    "ProxyWorkload": "specsim.measure",
    "Recipe": "specsim.measure",
    "SweepSettings": "specsim.measure",
    "SweepInterrupted": "specsim.measure",
    "merge_tables": "specsim.measure",
    "plan_digest": "specsim.measure",
    "MIN_OUTCOMES": "specsim.calibration.fit",
    "fit_calibration": "specsim.calibration.fit",
    "OnlineCalibration": "specsim.calibration.online",
    "DriftSettings": "specsim.calibration.drift",
    "REQUEST_DT": "specsim.traces",
    "TraceRead": "specsim.traces",
    "read_trace": "specsim.traces",
    "detect_format": "specsim.traces",
    "synthetic_trace": "specsim.traces",
    "LogNormalLengths": "specsim.traces",
    "EmpiricalLengths": "specsim.traces",
    "Policy": "specsim.sim",
    "parse_policy": "specsim.sim",
    "AcceptanceTrace": "specsim.sim",
    "load_acceptance_file": "specsim.sim",
    "replay": "specsim.sim",
    "ReplayResult": "specsim.sim",
    "simulate": "specsim.sim",
    "SimResult": "specsim.sim",
    "ServerOptions": "specsim.sim",
    "SLO": "specsim.sim.slo",
    "capacity": "specsim.studies.capacity",
    "CapacityResult": "specsim.studies.capacity",
    "Fleet": "specsim.sim.fleet",
    "load_fleet": "specsim.sim.fleet",
    "simulate_fleet": "specsim.sim.fleet",
    "FleetResult": "specsim.sim.fleet",
    "run_sweep": "specsim.studies.sweep",
    "load_grid": "specsim.studies.sweep",
    "StudyInputs": "specsim.studies.inputs",
    "Executor": "specsim._executor",
    "ExecutorChoice": "specsim._executor",
    "tune": "specsim.studies.tune",
    "TuneResult": "specsim.studies.tune_result",
    "TuneSettings": "specsim.studies.tune",
    "ScheduleError": "specsim.errors",
    "export_schedule": "specsim.interop",
    "load_schedule": "specsim.studies.schedule_file",
    "read_policy": "specsim.interop",
}

__all__ = sorted(_EXPORTS) + ["__version__"]


def __getattr__(name):
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'specsim' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__():
    return __all__
