"""Simulation: the serving engine, the draft-outcome model, draft-depth policies, metrics,
reports, and acceptance-trace replay.

The request-trace names (``REQUEST_DT``, ``read_trace``, ...) live in :mod:`specsim.traces` and
are re-exported here so ``from specsim.sim import read_trace`` keeps working.
"""

from specsim.sim.engine import simulate
from specsim.sim.options import ServerOptions
from specsim.sim.result import SimResult
from specsim.policy.policy import Policy, parse_policy
from specsim.sim.replay import (
    AcceptanceFile, AcceptanceTrace, ReplayResult, load_acceptance_file, parse_acceptance_file, replay,
)
from specsim.traces import (
    FORMATS, REQUEST_DT, EmpiricalLengths, LogNormalLengths, TraceRead, detect_format, parse_columns, parse_synthetic,
    read_trace, synthetic_trace,
)

__all__ = [
    "FORMATS", "REQUEST_DT", "AcceptanceFile", "AcceptanceTrace", "EmpiricalLengths", "LogNormalLengths", "Policy",
    "ReplayResult", "ServerOptions", "SimResult", "TraceRead", "detect_format", "load_acceptance_file",
    "parse_acceptance_file", "parse_columns",
    "parse_policy", "parse_synthetic", "read_trace", "replay", "simulate", "synthetic_trace",
]
