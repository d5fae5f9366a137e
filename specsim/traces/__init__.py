"""Request traces: readers of public trace formats, their parse kernels, seeded synthetic
traces, the request record type and a trace's summary."""

from specsim.traces._types import REQUEST_DT, TraceRead
from specsim.traces.readers import FORMATS, detect_format, parse_columns, read_trace
from specsim.traces.summary import summary
from specsim.traces.synthetic import EmpiricalLengths, LogNormalLengths, parse_synthetic, synthetic_trace

__all__ = [
    "FORMATS", "REQUEST_DT", "EmpiricalLengths", "LogNormalLengths", "TraceRead", "detect_format", "parse_columns",
    "parse_synthetic", "read_trace", "summary", "synthetic_trace",
]
