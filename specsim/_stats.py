"""The noise statistics: Wilson's interval of a binomial rate, the Student t quantile and the
paired difference's 95% interval (docs/simulation.md, "Verdicts"; docs/calibration.md)."""

from __future__ import annotations

import math

import numpy as np

Z95 = 1.959963984540054  # two-sided 95% normal quantile
# Two-sided 95% Student t quantiles by degrees of freedom (1 + NOISE_SEEDS seeds -> 3).
_T95 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145,
        2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048,
        2.045, 2.042)


def wilson(accepted: int, reached: int, z: float = Z95):
    """Wilson score interval ``(low, high)`` of a binomial rate; None for no observations."""
    if reached <= 0:
        return None
    p = accepted / reached
    z2 = z * z
    centre = (p + z2 / (2 * reached)) / (1 + z2 / reached)
    half = z / (1 + z2 / reached) * math.sqrt(p * (1 - p) / reached + z2 / (4 * reached * reached))
    # At 0 or n successes the bound is exactly 0 or 1; rounding would leave a speck.
    low = 0.0 if accepted == 0 else max(0.0, centre - half)
    high = 1.0 if accepted == reached else min(1.0, centre + half)
    return (low, high)


def stderr(accepted: int, reached: int):
    """Binomial standard error ``sqrt(p (1 - p) / n)`` of the rate; None for no observations."""
    if reached <= 0:
        return None
    p = accepted / reached
    return math.sqrt(p * (1 - p) / reached)


def t95(dof: int) -> float:
    """The two-sided 95% Student t quantile at ``dof`` >= 1 degrees of freedom (tabulated to 30,
    Cornish-Fisher beyond, within 0.001 of the exact value)."""
    if dof < 1:
        raise ValueError(f"degrees of freedom must be >= 1, got {dof}")
    if dof <= len(_T95):
        return _T95[dof - 1]
    z = 1.959964
    return z + (z ** 3 + z) / (4 * dof) + (5 * z ** 5 + 16 * z ** 3 + 3 * z) / (96 * dof * dof)


def paired_noise(diffs) -> tuple:
    """``(mean, half_width)`` of paired differences (one per seed): the mean and its 95% interval's
    half-width by Student t; the half-width is nan with fewer than two."""
    d = np.asarray(diffs, dtype=np.float64)
    mean = float(d.mean())
    if d.shape[0] < 2:
        return mean, float("nan")
    return mean, float(t95(d.shape[0] - 1) * d.std(ddof=1) / math.sqrt(d.shape[0]))
