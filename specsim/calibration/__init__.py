"""Acceptance calibrations: format, queries and fitting (SPEC §2-§3)."""

from specsim.calibration._types import DrafterKey
from specsim.calibration.calibration import AcceptanceCalibration, conditional_priors

__all__ = ["AcceptanceCalibration", "DrafterKey", "conditional_priors"]
