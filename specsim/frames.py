"""Results as pandas DataFrames (``.to_frame()``), for analysis where users analyse results.

pandas is imported only here, only when a frame is asked for; without it the call raises a
:class:`~specsim.errors.SpecsimError` that says how to install it.
"""

from __future__ import annotations

from specsim.errors import SpecsimError

def pandas():
    """The pandas module, or a SpecsimError naming the fix."""
    try:
        import pandas as pd  # optional: loaded only when a frame is asked for
    except ImportError:
        raise SpecsimError(".to_frame() needs pandas: pip install pandas") from None
    return pd


def requests_frame(result, extra=None):
    """One row per request of a :class:`~specsim.sim.result.SimResult`, in trace order.

    Columns: ``policy``, ``request`` (index in the result's requests), ``arrival_s``,
    ``prompt_tokens``, ``output_tokens``, ``scheduled_s`` (first admission), ``first_token_s``,
    ``finish_s``, ``queue_s``, ``ttft_s``, ``tpot_s`` (NaN for one-token requests), ``e2e_s``,
    then ``extra`` (name -> array of the same length).
    """
    import numpy as np

    pd = pandas()
    n = result.requests
    data = {"policy": [result.policy] * n, "request": np.arange(n, dtype=np.int64),
            "arrival_s": result.arrival_s, "prompt_tokens": result.prompt_tokens,
            "output_tokens": result.output_tokens, "scheduled_s": result.scheduled_s,
            "first_token_s": result.first_token_s, "finish_s": result.finish_s, "queue_s": result.queue_s,
            "ttft_s": result.ttft_s, "tpot_s": result.tpot_s, "e2e_s": result.e2e_s}
    data.update(extra or {})
    return pd.DataFrame(data)


def rows_frame(rows, columns=None):
    """A DataFrame of flat dict rows (sweep results, capacity probes, per-replica rows)."""
    pd = pandas()
    return pd.DataFrame(list(rows), columns=list(columns) if columns is not None else None)
