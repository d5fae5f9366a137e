"""Value types of the acceptance calibration."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class DrafterKey:
    """The drafter a calibration was fitted on; a calibration is used only with an equal key."""

    weights_sha256: str
    vocab: int
    quantization: str
    context: bool
