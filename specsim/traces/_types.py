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
