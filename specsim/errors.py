"""One exception family for everything specsim refuses.

Every refusal a user can cause (a bad file, a mismatched key, an impossible option) raises a
subclass of :class:`SpecsimError`; the command line turns it into a message on stderr and exit
code 2. Anything else escaping is a bug.
"""

from __future__ import annotations

import re


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
        super().__init__(screenful(message, self.problems))


# A refusal fits on one screen: the first problems, each cut to a few lines, then a count.
MAX_PROBLEMS_SHOWN = 10
MAX_LINE_CHARS = 300
MAX_HEADLINE_LINES = 30


_CONTROL = None


def printable(text, newlines: bool = False) -> str:
    """``text`` with its control characters (escape, carriage return, NUL, C1 codes) written as
    Python escapes (``\\x1b``, ``\\r``), so a user-given name cannot repaint or rewrite the terminal
    it is printed on. ``newlines=True`` keeps line breaks (a message's own lines). Every line of
    a refusal (:func:`clip`), every table cell and every warning passes through here."""
    global _CONTROL
    if _CONTROL is None:
        _CONTROL = (re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f]"), re.compile("[\x00-\x1f\x7f-\x9f]"))
    return _CONTROL[0 if newlines else 1].sub(lambda m: repr(m.group())[1:-1], str(text))


def clip(text: str, limit: int = MAX_LINE_CHARS) -> str:
    """``text`` cut in the middle to at most about ``limit`` characters, saying how much went;
    control characters but line breaks escaped (:func:`printable`)."""
    text = printable(text, newlines=True)
    if len(text) <= limit:
        return text
    keep = limit // 2
    return f"{text[:keep]} … ({len(text) - 2 * keep:,} characters) … {text[-keep:]}"


def screenful(message: str, problems=()) -> str:
    """The headline and the first :data:`MAX_PROBLEMS_SHOWN` problems, one a line, then
    ``… and N more``; every line clipped, so no refusal runs past a screen."""
    head = str(message).split("\n")
    lines = [clip(line, 2 * MAX_LINE_CHARS) for line in head[:MAX_HEADLINE_LINES]]
    if len(head) > MAX_HEADLINE_LINES:
        lines.append(f"  … and {len(head) - MAX_HEADLINE_LINES:,} more lines")
    shown = list(problems[:MAX_PROBLEMS_SHOWN]) if isinstance(problems, (list, tuple)) else list(problems)
    extra = len(problems) - len(shown) if isinstance(problems, (list, tuple)) else 0
    lines += [f"  - {clip(p)}" for p in shown]
    if extra > 0:
        lines.append(f"  … and {extra:,} more")
    return "\n".join(lines)


class OutputError(SpecsimError):
    """An output file that cannot be written: a folder, an unwritable place, or one of the inputs."""


class TableError(SpecsimError):
    """A cost table that is malformed or breaks a validation rule (docs/tables.md#validation)."""


class CalibrationError(SpecsimError):
    """An acceptance calibration that is malformed, breaks a rule of its format, or cannot be fitted
    (docs/formats.md#acceptance-calibration, docs/calibration.md#fitting)."""


class KeyMismatchError(SpecsimError):
    """A table or calibration loaded under a key it was not measured or fitted under."""


class PlanError(SpecsimError):
    """Planner inputs out of range (slack, widths, shapes)."""


class TreeError(PlanError):
    """A draft tree, or an engine's tree settings, that cannot be built, counted or priced
    (docs/planner.md#draft-trees)."""


class TraceError(SpecsimError):
    """A request or acceptance trace that cannot be read."""


class SimulationError(SpecsimError):
    """Simulation options that cannot run."""


class PolicyError(SimulationError):
    """A policy string that cannot be parsed, or a policy that cannot run on the given inputs."""


class GridError(SimulationError):
    """A sweep grid, or a sweep results file, that cannot be used."""


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
