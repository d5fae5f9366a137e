"""One exception family for everything specsim refuses.

Every refusal a user can cause (a bad file, a mismatched key, an impossible option) raises a
subclass of :class:`SpecsimError`; the command line turns it into a message on stderr and exit
code 2. Anything else escaping is a bug.
"""

from __future__ import annotations


class SpecsimError(Exception):
    """Base class: a refusal with a message that says what, where and how to fix it.

    Parameters
    ----------
    message : str
        The headline.
    problems : sequence of str, optional
        Every individual problem found; listed one per line under the headline.
    """

    def __init__(self, message: str, problems=()):
        self.problems = list(problems)
        self.headline = message
        text = message
        if self.problems:
            text += "\n" + "\n".join(f"  - {p}" for p in self.problems)
        super().__init__(text)


class TableError(SpecsimError):
    """A cost table that is malformed or breaks a rule of SPEC §1.2."""


class CalibrationError(SpecsimError):
    """An acceptance calibration that is malformed, breaks §2.1, or cannot be fitted (§3)."""


class KeyMismatchError(SpecsimError):
    """A table or calibration loaded under a key it was not measured or fitted under."""


class PlanError(SpecsimError):
    """Planner inputs out of range (slack, widths, shapes)."""


class TraceError(SpecsimError):
    """A request or acceptance trace that cannot be read."""


class SimulationError(SpecsimError):
    """Simulation options that cannot run."""


class PolicyError(SimulationError):
    """A policy string that cannot be parsed, or a policy that cannot run on the given inputs."""


class MeasureError(SpecsimError):
    """A measurement that cannot run here (no GPU, no meter, NVML failure) or bad sweep input."""


class CostModelError(SpecsimError):
    """A hardware, model or drafter spec that is unknown or malformed, or a modelled table that cannot be built."""


class SpecsimWarning(UserWarning):
    """Base class of specsim's warnings: input that is used, but not as written."""


class TraceWarning(SpecsimWarning):
    """A trace value that was clamped or reinterpreted (e.g. an accepted run above ``k_logged``)."""


class ScheduleError(PolicyError):
    """A width-to-depth schedule that cannot be read, written in an engine's format, or tuned."""
