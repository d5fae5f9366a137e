"""What a serving engine adds to speculation's price, on top of the roofline's passes
(docs/tables.md#engine-profiles).

The roofline prices the passes a speculative step runs: one target pass over the verify rows and
one drafter pass per draft position. An engine pays more than those passes: host work and
launches around each draft pass, bookkeeping per speculative step (proposer inputs, the
rejection sampler's launch, metadata for the verify pass), work per verify row (rejection
sampling, per-row metadata) and per drafted token (sampling it, moving it between the drafter
and the verify batch), and CUDA-graph padding: a pass over ``rows`` tokens runs the graph
captured for the next size up. An :class:`EngineProfile` names each of these figures; the
figures of each engine are fitted on published measurements of that engine by
``python -m benchmarks.fit_published`` (docs/tables.md#engine-profiles, where the fit and its
held-out errors are reported).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from specsim.errors import CostModelError

ENGINE_PARAMETERS = ("step_ms", "draft_pass_ms", "verify_row_us", "sampled_token_us")
"""The fitted figures of an :class:`EngineProfile`, in the order the fit reports them."""


@dataclass(frozen=True)
class EngineProfile:
    """One serving engine's price of speculation beyond the roofline's passes.

    Attributes
    ----------
    name : str
        The engine (``--engine NAME``).
    step_ms : float
        Per speculative step (depth >= 1): the proposer's and verify pass's bookkeeping.
    draft_pass_ms : float
        Per draft pass: host work and launches around one drafter pass.
    verify_row_us : float
        Per verify row of a speculative step (``width x (depth + 1)``): rejection sampling and
        per-row metadata, in microseconds.
    sampled_token_us : float
        Per drafted token (``width x depth``): sampling it and handing it to the verify batch,
        in microseconds.
    graph_sizes : tuple of int
        Token counts the engine captures CUDA graphs for, ascending: a pass over ``rows`` tokens
        runs (and pays for) the next captured size up; past the largest, the pass runs eagerly
        at its own size. Empty: no padding.
    source : str
        Where the figures come from.
    """

    name: str
    step_ms: float = 0.0
    draft_pass_ms: float = 0.0
    verify_row_us: float = 0.0
    sampled_token_us: float = 0.0
    graph_sizes: tuple = ()
    source: str = ""

    def __post_init__(self):
        problems = []
        for f in ENGINE_PARAMETERS:
            v = getattr(self, f)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not (math.isfinite(v) and v >= 0.0):
                problems.append(f"{f} = {v!r} must be a finite number >= 0")
        sizes = self.graph_sizes
        if any(isinstance(s, bool) or not isinstance(s, int) or s < 1 for s in sizes) or \
                list(sizes) != sorted(set(sizes)):
            problems.append(f"graph_sizes = {sizes!r} must be ascending distinct whole numbers >= 1")
        if problems:
            raise CostModelError(f"the engine profile {self.name!r} is refused", problems)

    def padded(self, rows):
        """``rows`` (array_like) raised to the next captured graph size; past the largest, as given."""
        rows = np.asarray(rows, dtype=np.float64)
        if not self.graph_sizes:
            return rows
        sizes = np.asarray(self.graph_sizes, dtype=np.float64)
        i = np.minimum(np.searchsorted(sizes, rows), sizes.size - 1)
        return np.where(rows <= sizes[-1], np.maximum(sizes[i], rows), rows)

    def speculation_ms(self, n, k) -> dict:
        """Milliseconds of each engine part of a step at width ``n`` and depth ``k`` (arrays
        broadcast): ``step`` and ``verify_rows`` join the verify step, ``draft_passes`` and
        ``sampled_tokens`` its draft steps; all 0 at depth 0."""
        n = np.asarray(n, dtype=np.float64)
        k = np.asarray(k, dtype=np.float64)
        spec = (k > 0).astype(np.float64)
        return {
            "step": spec * self.step_ms + 0.0 * n,
            "verify_rows": spec * self.verify_row_us * 1e-3 * n * (k + 1.0),
            "draft_passes": self.draft_pass_ms * k + 0.0 * n,
            "sampled_tokens": self.sampled_token_us * 1e-3 * n * k,
        }

    def constants(self) -> dict:
        """The figures, for a table's ``[meta]`` and its digests."""
        return {**{f: float(getattr(self, f)) for f in ENGINE_PARAMETERS},
                "graph_sizes": ",".join(map(str, self.graph_sizes)) or "none"}


# vLLM V1's default CUDA-graph capture sizes (``VllmConfig._set_cudagraph_sizes``: 1, 2, 4, then
# every multiple of 8 up to 512), as token counts per pass.
VLLM_GRAPH_SIZES = (1, 2, 4) + tuple(range(8, 513, 8))

# Fitted by ``python -m benchmarks.fit_published`` on the published vLLM sets R02 (EAGLE and
# EAGLE-3 on an RTX 3090, batch 2-56) and R10 (EAGLE-1 and EAGLE-3 on an H100, batch 1, K = 2-7):
# docs/tables.md#engine-profiles gives the fit, its held-out errors and the command.
ENGINE_PROFILES = {
    "vllm": EngineProfile("vllm", step_ms=0.882, draft_pass_ms=0.277, verify_row_us=10.191, sampled_token_us=6.744,
                          graph_sizes=VLLM_GRAPH_SIZES,
                          source="fitted on published vLLM measurements (R02: EAGLE-3 paper Table 5, RTX 3090; "
                                 "R10: vLLM issue #20780, H100) by benchmarks/fit_published.py"),
}


def engine_profile(engine) -> EngineProfile | None:
    """The profile called ``engine`` (one of :data:`ENGINE_PROFILES`), a profile as given, or None."""
    if engine is None or isinstance(engine, EngineProfile):
        return engine
    try:
        return ENGINE_PROFILES[engine]
    except (KeyError, TypeError):
        raise CostModelError(f"unknown engine {engine!r}: profiles are fitted for {', '.join(ENGINE_PROFILES)} "
                             "(docs/tables.md#engine-profiles)") from None
