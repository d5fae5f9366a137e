"""What a study runs on, as one value: the trace, the server (a table, a calibration and server
options, or a fleet), the SLO, the draft-outcome seeds and the names of the files they came from.

The command line builds it from its flags; :func:`specsim.tune` and :func:`specsim.capacity`
take it with the study's own settings beside it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from specsim.calibration.calibration import AcceptanceCalibration
from specsim.sim.fleet import Fleet
from specsim.table.cost_table import CostTable


@dataclass(frozen=True)
class StudyInputs:
    """The inputs a study simulates, given once.

    Attributes
    ----------
    requests : ndarray(REQUEST_DT, ndim=1) or TraceRead
        The trace, sorted by arrival.
    table : CostTable, optional
    calibration : AcceptanceCalibration, optional
        One replica's; ``capacity`` takes a ``fleet`` instead.
    options : ServerOptions, optional
        The simulated server (its ``seed`` is the first draft-outcome seed); default
        ``ServerOptions()``.
    slo : SLO, optional
        Latency targets and the share of requests that must meet them.
    seeds : int, optional
        Draft-outcome seeds per evaluation (default: the study's own, ``tune`` 2, ``capacity`` 3).
    fleet : Fleet, optional
        ``capacity`` only: the unit of replicas the search multiplies, instead of ``table``,
        ``calibration`` and ``options``.
    names : dict
        ``trace``, ``table``, ``calibration`` file names to record in what the study writes.
    """

    requests: object
    table: object = None
    calibration: object = None
    options: object = None
    slo: object = None
    seeds: int = None
    fleet: object = None
    names: dict = field(default_factory=dict)

    def seeds_or(self, default: int):
        """:attr:`seeds`, or the study's ``default`` when none was given."""
        return default if self.seeds is None else self.seeds


def inputs_problem(inputs, study: str) -> str | None:
    """What is wrong with ``inputs`` for ``study`` (``"tune"`` or ``"capacity"``), or None: not a
    :class:`StudyInputs`, a ``table``, ``calibration`` or ``fleet`` of the wrong type, or ``names``
    that are not a dict of file names (text or None). Which of them a study needs, and the trace's
    own columns, each study checks itself."""
    if not isinstance(inputs, StudyInputs):
        return (f"{study} takes a StudyInputs (requests, table, calibration{' or fleet' if study == 'capacity' else ''}"
                f", ...), got {type(inputs).__name__}")
    for name, cls in (("table", CostTable), ("calibration", AcceptanceCalibration), ("fleet", Fleet)):
        value = getattr(inputs, name)
        if value is not None and not isinstance(value, cls):
            article = "an" if cls.__name__[0] in "AEIOU" else "a"
            return f"StudyInputs.{name} must be {article} {cls.__name__} (or None), got {type(value).__name__}"
    names = inputs.names
    if names is not None and (not isinstance(names, dict)
                              or not all(isinstance(v, str) or v is None for v in names.values())):
        return (f"StudyInputs.names must be a dict of file names (trace, table, calibration: text or None), got "
                f"{type(names).__name__}" + (f" {names!r:.60}" if isinstance(names, dict) else ""))
    return None
