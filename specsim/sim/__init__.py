"""Simulation: request traces, acceptance-trace replay and draft-depth policies (SPEC §5-§6)."""

from specsim.sim._types import REQUEST_DT, ReplayResult, TraceRead
from specsim.sim.engine import ServerOptions, SimResult, simulate
from specsim.sim.policy import Policy, parse_policy
from specsim.sim.replay import AcceptanceFile, AcceptanceTrace, load_acceptance_file, parse_acceptance_file, replay
from specsim.sim.synthetic import EmpiricalLengths, LogNormalLengths, parse_synthetic, synthetic_trace
from specsim.sim.traces import FORMATS, detect_format, parse_columns, read_trace

__all__ = [
    "FORMATS", "REQUEST_DT", "AcceptanceFile", "AcceptanceTrace", "EmpiricalLengths", "LogNormalLengths", "Policy",
    "ReplayResult", "ServerOptions", "SimResult", "TraceRead", "detect_format", "load_acceptance_file",
    "parse_acceptance_file", "parse_columns",
    "parse_policy", "parse_synthetic", "read_trace", "replay", "simulate", "synthetic_trace",
]
