"""Value types of the acceptance calibration."""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import numpy as np


# The weights digest of a what-if calibration's drafter key: rates asked about, no drafter measured.
WHAT_IF_SHA256 = "what-if:synthetic-rates-no-drafter-weights"


@dataclass(frozen=True)
class DrafterKey:
    """The drafter a calibration was fitted on; a calibration is used only with an equal key."""

    weights_sha256: str
    vocab: int
    quantization: str
    context: bool

    @property
    def synthetic(self) -> bool:
        """A what-if key (:func:`what_if_key`): rates asked about, not any drafter's weights."""
        return self.weights_sha256 == WHAT_IF_SHA256


def what_if_key() -> DrafterKey:
    """The drafter key of a what-if calibration (``calib fit --rates ... --what-if``): clearly
    synthetic, equal only to another what-if key, refused where a served drafter's key is required
    (:meth:`specsim.plan.SpecCostState.load`, ``calib drift``)."""
    return DrafterKey(WHAT_IF_SHA256, 1, "what-if", False)


@dataclass(frozen=True)
class FitCounts:
    """What a calibration is fitted from (docs/calibration.md#fitting): bucket counts of reached drafts and steps.

    Counts are Python ints, so totals and the float64 divisions of the fit are exact at any size.

    Attributes
    ----------
    edges : tuple of float, length B
        Ascending log-probability upper bounds of the buckets.
    accepted, rejected : tuple of int, length B
        Reached drafts per bucket that the target accepted / rejected.
    steps : dict
        ``(drafts d, accepted a) -> count`` of verify steps (one sequence's chain each), ``a <= d``.
    nonfinite : int
        Reached drafts whose confidence was NaN or infinite: counted apart, not binned.
    unreached : int
        Logged drafts after their chain's first rejection: not reached, not binned.
    source : str
        Where the counts came from, for messages and reports.
    """

    edges: tuple
    accepted: tuple
    rejected: tuple
    steps: dict
    nonfinite: int = 0
    unreached: int = 0
    source: str = "<counts>"

    @property
    def reached(self) -> int:
        """Reached drafts in all buckets (non-finite confidences not included)."""
        return sum(self.accepted) + sum(self.rejected)

    @property
    def step_count(self) -> int:
        return sum(self.steps.values())


@dataclass(frozen=True)
class Pool:
    """Buckets ``first..=last`` (0-based, ascending confidence) fitted together to one rate."""

    first: int
    last: int
    accepted: int
    reached: int

    @property
    def rate(self) -> float:
        return self.accepted / self.reached


@dataclass(frozen=True)
class PositionPrior:
    """Draft position ``position`` (1-based): steps that reached it and accepted it."""

    position: int
    accepted: int
    reached: int

    @property
    def prior(self) -> float:
        return self.accepted / self.reached


@dataclass(frozen=True)
class RequestSpread:
    """How much acceptance differs from request to request (docs/calibration.md#per-request-spread).

    Request ``r`` draws ``z_r ~ N(0, 1)`` once; its acceptance probability is the calibration's,
    moved by ``logit_sd * z_r`` on the log-odds scale and recentred so the population mean stays
    the calibration's.

    Attributes
    ----------
    logit_sd : float
        The spread's standard deviation in log-odds, in ``[0, MAX_REQUEST_SPREAD]``.
    standard_error : float
        Its standard error (from the fit's 95% likelihood-ratio interval), >= 0.
    requests : int
        How many requests it was fitted on.
    source : str
        Where it was fitted from.
    """

    logit_sd: float
    standard_error: float
    requests: int
    source: str


@dataclass(frozen=True)
class TreeCounts:
    """The counts behind a calibration's rank acceptance (docs/calibration.md#draft-trees).

    Attributes
    ----------
    reached : tuple of int, length D
        ``reached[d - 1]``: verify steps whose accepted path reached depth ``d - 1`` and that drafted
        candidates for depth ``d`` under it.
    matched : tuple of tuple of int, shape (D, R)
        ``matched[d - 1][r - 1]``: those steps where the target's token at depth ``d`` was the
        rank-``r`` candidate.
    source : str
        Where the counts came from.
    """

    reached: tuple
    matched: tuple
    source: str = ""


class CalibrationArrays(NamedTuple):
    """A calibration's arrays as the simulated server's draws read them
    (:meth:`~specsim.calibration.AcceptanceCalibration.engine_arrays`): ``edges``, ``p_accept``
    and ``priors`` as the calibration holds them, ``cells`` the coarse bucket index over them
    (``bucket_cells(edges)``), ``cell_p`` each coarse cell's acceptance probability where the cell
    lies in one bucket (``cell_probabilities(edges, p_accept)``: the planner's one-load lookup of
    a confidence), and ``centre float64[B]``, each bucket's rate's centre under the
    calibration's request spread (empty without a spread or with a zero one)."""

    edges: np.ndarray
    cells: np.ndarray
    cell_p: np.ndarray
    p_accept: np.ndarray
    priors: np.ndarray
    centre: np.ndarray
