"""A request trace's size, span, rate and token counts, JSON-ready."""

from __future__ import annotations

import numpy as np


def summary(read) -> dict:
    """A JSON-ready summary of a :class:`~specsim.traces.TraceRead`.

    Returns
    -------
    dict
        source, format, rows, requests, skipped and dropped counts, ``span_s``, ``rate_per_s``
        (requests after the first per second of span) and per token column (``prompt_tokens``,
        ``output_tokens``) its sum, mean, p50, p99 and max.
    """
    r = read.requests
    n = int(r.shape[0])
    stats = {}
    for col in ("prompt_tokens", "output_tokens"):
        v = r[col]
        stats[col] = {"sum": int(v.sum()), "mean": float(v.mean()) if n else 0.0,
                      "p50": float(np.percentile(v, 50)) if n else 0.0,
                      "p99": float(np.percentile(v, 99)) if n else 0.0, "max": int(v.max()) if n else 0}
    return {"source": read.source, "format": read.format, "rows": read.rows, "requests": n,
            "skipped_zero_token": read.skipped_zero, "skipped_bad": read.skipped_bad,
            "bad_lines": list(read.bad_lines), "dropped_by_window_or_limit": read.dropped, "span_s": read.span_s,
            "rate_per_s": (n - 1) / read.span_s if read.span_s > 0 else 0.0, **stats}
