"""What a study runs on, as one value: the trace, the server (a table, a calibration and server
options, or a fleet), the SLO, the draft-outcome seeds and the names of the files they came from.

The command line builds it from its flags; :func:`specsim.tune` and :func:`specsim.capacity`
take it with the study's own settings beside it.
"""

from __future__ import annotations

from dataclasses import dataclass, field


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
