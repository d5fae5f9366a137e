"""Acceptance calibrations: format, queries and fitting (docs/calibration.md).

Beside them: :mod:`.telemetry` turns serving engines' telemetry (read by
:mod:`specsim.interop`) into what it identifies,
:mod:`.online` keeps a calibration fitted from live outcomes and :mod:`.drift` tests live
outcomes against a calibration (docs/telemetry.md).
"""

from specsim.calibration._types import DrafterKey, FitCounts, PositionPrior, Pool, TreeCounts
from specsim.calibration.calibration import AcceptanceCalibration, conditional_priors
from specsim.calibration.fit import (
    DEFAULT_EDGES,
    MIN_OUTCOMES,
    CalibrationFit,
    calibration_from_rates,
    counts_from_steps,
    fit_calibration,
    fit_counts,
    load_counts,
    make_counts,
    steps_from_windows,
)

__all__ = [
    "DEFAULT_EDGES",
    "MIN_OUTCOMES",
    "AcceptanceCalibration",
    "CalibrationFit",
    "DrafterKey",
    "FitCounts",
    "Pool",
    "PositionPrior",
    "TreeCounts",
    "calibration_from_rates",
    "conditional_priors",
    "counts_from_steps",
    "fit_calibration",
    "fit_counts",
    "load_counts",
    "make_counts",
    "steps_from_windows",
]
