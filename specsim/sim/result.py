"""What one run of the simulated server returns: :class:`SimResult`, its per-request arrays, its
counters, energy and KV figures and its downsampled step log (built by
:func:`specsim.sim.engine.collect`), with the views every report reads."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from specsim.frames import requests_frame
from specsim.policy.policy import Policy
from specsim.sim.metrics import summarize


@dataclass(frozen=True, eq=False)
class SimResult:
    """What one policy did on one trace.

    Per-request arrays are aligned with the input requests (sorted by arrival).

    Attributes
    ----------
    policy : str
        The policy's label, with the depths it actually ran (see :func:`simulate`).
    options : dict
        The server options with defaults resolved, JSON-ready
        (:meth:`ServerOptions.resolve`, :meth:`~specsim.sim.options.ResolvedOptions.to_dict`).
    policy_spec : Policy
        The policy as run (depths clamped to the server's cap).
    arrival_s, first_token_s, finish_s, scheduled_s : ndarray(float64, ndim=1), shape (N,)
        ``scheduled_s``: when the request was first admitted (its queueing delay ends).
    prompt_tokens, output_tokens : ndarray(int64, ndim=1), shape (N,)
    depth_histogram : ndarray(int64, ndim=1), shape (K + 1,)
        Sequence-steps by verified draft depth.
    counters : dict
        decode_steps, prefill_steps, mixed_steps, speculative_steps, sequence_steps,
        emitted_tokens, accepted_drafts, drafted, verified_rows, drafts_cut, preemptions,
        resumed (recomputed prefills that emitted a token), prefill_tokens, recomputed_tokens.
    energy : dict
        decode_j, prefill_j, idle_j; decode_s, prefill_s, idle_s (time in each state).
    kv : dict
        block_size, capacity_blocks (None: unlimited), peak_blocks, block_s (blocks held,
        integrated over time).
    end_s : float
        Simulated time when the last request finished.
    step_t_s, step_mean_depth : ndarray(float64, ndim=1), shape (L,)
    step_width, step_tokens, step_kv_blocks, step_prefill_tokens : ndarray(int64, ndim=1), shape (L,)
        The downsampled log of decode steps: end time, decoding width, verified rows / width,
        decode tokens emitted, KV blocks held, prefill tokens in the step.
    step_log_stride : int
        The log holds every ``stride``-th decode step.
    """

    policy: str
    options: dict
    policy_spec: Policy
    arrival_s: np.ndarray
    prompt_tokens: np.ndarray
    output_tokens: np.ndarray
    first_token_s: np.ndarray
    finish_s: np.ndarray
    scheduled_s: np.ndarray
    depth_histogram: np.ndarray
    counters: dict
    energy: dict
    kv: dict
    end_s: float
    step_t_s: np.ndarray
    step_width: np.ndarray
    step_mean_depth: np.ndarray
    step_tokens: np.ndarray
    step_kv_blocks: np.ndarray
    step_prefill_tokens: np.ndarray
    step_log_stride: int

    @property
    def requests(self) -> int:
        return int(self.arrival_s.shape[0])

    @property
    def ttft_s(self) -> np.ndarray:
        """Time to first token per request."""
        return self.first_token_s - self.arrival_s

    @property
    def queue_s(self) -> np.ndarray:
        """Queueing delay per request: arrival to first admission."""
        return self.scheduled_s - self.arrival_s

    @property
    def e2e_s(self) -> np.ndarray:
        """Arrival to last token per request."""
        return self.finish_s - self.arrival_s

    @property
    def tpot_s(self) -> np.ndarray:
        """Time per output token after the first: ``(finish - first) / (tokens - 1)``; NaN for
        one-token requests, which have none."""
        with np.errstate(invalid="ignore", divide="ignore"):
            out = (self.finish_s - self.first_token_s) / (self.output_tokens - 1)
        out[self.output_tokens <= 1] = np.nan
        return out

    @property
    def makespan_s(self) -> float:
        """First arrival to last finish (0 for an empty run): the span every rate is taken over."""
        return float(np.nanmax(self.finish_s)) - float(self.arrival_s[0]) if self.requests else 0.0

    @property
    def energy_j(self) -> float:
        e = self.energy
        return e["decode_j"] + e["prefill_j"] + e["idle_j"]

    def summary(self, slo=None) -> dict:
        """The JSON-ready summary (see :func:`specsim.sim.metrics.summarize`), SLO attainment
        against ``slo`` (an :class:`~specsim.sim.slo.SLO`; None: no targets)."""
        return summarize(self, slo)

    def to_frame(self):
        """One row per request as a pandas DataFrame (needs pandas; see
        :func:`specsim.frames.requests_frame` for the columns)."""
        return requests_frame(self)
