"""Record types of request traces."""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

# One request of a traffic trace: arrival in seconds from the trace start, prompt and output
# token counts. Every trace reader returns an array of this dtype, sorted by arrival (stable).
REQUEST_DT = np.dtype(
    [("arrival_s", "f8"), ("prompt_tokens", "i8"), ("output_tokens", "i8")],
    align=True,
)


class TraceRead(NamedTuple):
    """A request trace as read, with what was left out and why.

    Attributes
    ----------
    requests : ndarray(REQUEST_DT, ndim=1)
        Sorted by ``arrival_s`` (stable); the first arrival is 0 unless a window starts earlier.
    format : str
        The reader used (``azure2023``, ``azure2024``, ``mooncake``, ``burstgpt``, ``csv``,
        ``synthetic``).
    source : str
        The file read (or a description of the generator).
    rows : int
        Data rows met (good, zero-token and bad), before the window and limit.
    skipped_zero : int
        Rows skipped because their prompt or output token count was 0.
    skipped_bad : int
        Rows that could not be parsed, skipped under ``skip_bad_rows``.
    bad_lines : tuple of int
        1-based line numbers of the first bad rows skipped (at most 20).
    dropped : int
        Good rows outside the time window or past the request limit.
    """

    requests: np.ndarray
    format: str
    source: str
    rows: int
    skipped_zero: int = 0
    skipped_bad: int = 0
    bad_lines: tuple = ()
    dropped: int = 0

    @property
    def span_s(self) -> float:
        """Seconds from the first to the last arrival (0 for fewer than two requests)."""
        a = self.requests["arrival_s"]
        return float(a[-1] - a[0]) if a.shape[0] > 1 else 0.0


class ParsedRows(NamedTuple):
    """A reader's rows before :func:`specsim.traces.readers.finish_trace` sorts and cuts them.

    Attributes
    ----------
    times : ndarray(float64 or int64, ndim=1), shape (R,)
        Arrivals in the reader's unit (``datetime``: int64 nanoseconds since any epoch).
    prompt, output : ndarray(int64, ndim=1), shape (R,)
    skipped_bad : int
        Rows that could not be parsed (skipped).
    bad_lines : tuple of int
        1-based line numbers of the first of them.
    """

    times: np.ndarray
    prompt: np.ndarray
    output: np.ndarray
    skipped_bad: int = 0
    bad_lines: tuple = ()


class TraceCut(NamedTuple):
    """What part of a trace to keep, and how fast to replay it.

    Attributes
    ----------
    rate_scale : float
        Arrivals are divided by this (> 0): 2 compresses the trace to twice the request rate.
    limit : int or None
        Keep the first ``limit`` requests by arrival.
    window : (float, float or None) or None
        Keep arrivals in ``[start_s, end_s)`` seconds from the trace start (before rate scaling),
        re-based to ``start_s``.
    """

    rate_scale: float = 1.0
    limit: int = None
    window: tuple = None
