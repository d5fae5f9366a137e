"""An SLO: latency targets and the share of requests that must meet them, checked once.

A request meets the SLO when its TTFT is at most ``ttft_s`` and its TPOT at most ``tpot_s`` (a
one-token request has no TPOT and meets that target); ``attainment`` is the share of requests a
run must have meeting it. Every command and study takes one :class:`SLO`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import numpy as np

from specsim._checks import number_problem
from specsim.errors import SimulationError

# What the flags and the fields are called, for messages that name what the user wrote.
FIELD_NAMES = {"ttft_s": "ttft_s", "tpot_s": "tpot_s", "attainment": "attainment"}
FLAG_NAMES = {"ttft_s": "--slo-ttft-s", "tpot_s": "--slo-tpot-s", "attainment": "--attainment"}


@dataclass(frozen=True)
class SLO:
    """Latency targets (seconds, either or both) and the attainment target.

    Attributes
    ----------
    ttft_s, tpot_s : float or None
        Time to first token and time per output token targets, seconds >= 0.
    attainment : float or None
        Share of requests in (0, 1] that must meet both targets; None leaves it to the study
        (``tune``'s and ``capacity``'s defaults). It needs a latency target.

    Raises
    ------
    SimulationError
        A target that is not a finite number >= 0, an attainment outside (0, 1], or an
        attainment without a latency target.
    """

    ttft_s: Optional[float] = None
    tpot_s: Optional[float] = None
    attainment: Optional[float] = None

    def __post_init__(self):
        problem = slo_problem(self.ttft_s, self.tpot_s, self.attainment, FIELD_NAMES)
        if problem:
            raise SimulationError(problem)
        for name in ("ttft_s", "tpot_s", "attainment"):
            value = getattr(self, name)
            if value is not None:
                object.__setattr__(self, name, float(value))

    @property
    def has_targets(self) -> bool:
        """Whether a latency target is set (without one every request meets the SLO)."""
        return self.ttft_s is not None or self.tpot_s is not None

    def target(self, default: float) -> float:
        """The attainment target, ``default`` where none was given."""
        return default if self.attainment is None else self.attainment

    def met(self, result) -> dict:
        """Shares of ``result``'s requests meeting the TTFT target, the TPOT target and both
        (:func:`slo_attainment`)."""
        return slo_attainment(result, self)

    def to_dict(self) -> dict:
        return {"ttft_s": self.ttft_s, "tpot_s": self.tpot_s, "attainment": self.attainment}


def slo_problem(ttft_s, tpot_s, attainment, names=FIELD_NAMES):
    """What is wrong with these SLO values (``names`` says what to call each), or None."""
    for key, value in (("ttft_s", ttft_s), ("tpot_s", tpot_s)):
        problem = value is not None and number_problem(value, names[key], 0.0)
        if problem:
            return f"{problem} (a number of seconds)"
    if attainment is not None:
        problem = number_problem(attainment, names["attainment"], 0.0, 1.0, low_open=True)
        if problem:
            return f"{problem} (the share of requests that must meet the targets, e.g. 0.99)"
        if ttft_s is None and tpot_s is None:
            return (f"an attainment target ({names['attainment']}) needs an SLO: give "
                    f"{names['ttft_s']} and/or {names['tpot_s']}")
    return None


# No targets: every request meets it.
NO_SLO = SLO()


def as_slo(slo) -> SLO:
    """``slo`` as an :class:`SLO` (None: no targets)."""
    if slo is None:
        return NO_SLO
    if not isinstance(slo, SLO):
        raise SimulationError(f"slo must be an SLO (specsim.SLO(ttft_s=..., tpot_s=..., attainment=...)), "
                              f"got {type(slo).__name__}")
    return slo


def slo_attainment(result, slo=None) -> dict:
    """Fractions of ``result``'s requests meeting ``slo``'s TTFT target, its TPOT target, and both
    (``slo`` an :class:`SLO`; None: no targets, so every request meets it)."""
    slo = as_slo(slo)
    n = result.requests
    ok_ttft = np.ones(n, dtype=bool)
    ok_tpot = np.ones(n, dtype=bool)
    if slo.ttft_s is not None:
        ok_ttft = result.ttft_s <= slo.ttft_s
    if slo.tpot_s is not None:
        tpot = result.tpot_s
        ok_tpot = np.isnan(tpot) | (tpot <= slo.tpot_s)
    frac = (lambda m: float(m.mean()) if n else None)  # noqa: E731
    return {"ttft_target_s": slo.ttft_s, "tpot_target_s": slo.tpot_s, "ttft_attainment": frac(ok_ttft),
            "tpot_attainment": frac(ok_tpot), "attainment": frac(ok_ttft & ok_tpot)}
