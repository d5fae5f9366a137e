"""What a serving engine adds to speculation's price, on top of the roofline's passes
(docs/tables.md#engine-profiles).

The roofline prices the passes a speculative step runs: one target pass over the verify rows and
one drafter pass per draft position. An engine pays more than those passes: host work and
launches around each draft pass, bookkeeping per speculative step (proposer inputs, the
rejection sampler's launch, metadata for the verify pass), work per verify row (rejection
sampling, per-row metadata) and per drafted token (sampling it, moving it between the drafter
and the verify batch), and CUDA-graph padding: a pass runs the graph captured for the next size
up (vLLM captures token counts, SGLang batch sizes). An :class:`EngineProfile` names each of these
figures; the figures of each engine are fitted on published measurements of that engine by
``python -m benchmarks.fit_published`` where its sets can support a fit (docs/tables.md#engine-profiles,
where the fit, its held-out errors and each default's source are reported).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import numpy as np

from specsim.errors import CostModelError

ENGINE_PARAMETERS = ("step_ms", "draft_pass_ms", "verify_row_us", "sampled_token_us")
"""The fitted figures of an :class:`EngineProfile`, in the order the fit reports them."""
GRAPH_UNITS = ("tokens", "sequences")
"""What an engine's CUDA-graph sizes count: a pass's rows (vLLM) or its sequences (SGLang)."""


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
        Sizes the engine captures CUDA graphs for, ascending: a pass runs (and pays for) the next
        captured size up; past the largest, the pass runs eagerly at its own size. Empty: no
        padding.
    graph_unit : str
        What ``graph_sizes`` count: ``"tokens"`` (a pass's rows: vLLM) or ``"sequences"`` (its
        batch size, each sequence keeping its rows: SGLang's verify and draft graphs).
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
    graph_unit: str = "tokens"

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
        if self.graph_unit not in GRAPH_UNITS:
            problems.append(f"graph_unit = {self.graph_unit!r} must be one of {', '.join(GRAPH_UNITS)}")
        if problems:
            raise CostModelError(f"the engine profile {self.name!r} is refused", problems)

    def padded(self, rows, seqs=None):
        """The rows a pass over ``rows`` rows of ``seqs`` sequences (array_like, broadcast; None:
        one row a sequence) computes: the count the graph sizes measure raised to the next
        captured size (past the largest, as given), the rows a sequence keeping its share."""
        rows = np.asarray(rows, dtype=np.float64)
        if not self.graph_sizes:
            return rows
        if self.graph_unit == "sequences" and seqs is not None:
            seqs = np.asarray(seqs, dtype=np.float64)
            return np.where(seqs > 0, rows * self._raised(seqs) / np.maximum(seqs, 1.0), rows)
        return self._raised(rows)

    def _raised(self, count):
        sizes = np.asarray(self.graph_sizes, dtype=np.float64)
        i = np.minimum(np.searchsorted(sizes, count), sizes.size - 1)
        return np.where(count <= sizes[-1], np.maximum(sizes[i], count), count)

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
        out = {**{f: float(getattr(self, f)) for f in ENGINE_PARAMETERS},
               "graph_sizes": ",".join(map(str, self.graph_sizes)) or "none"}
        if self.graph_unit != "tokens":  # only then: a vLLM table keeps its digests
            out["graph_unit"] = self.graph_unit
        return out


# vLLM V1's default CUDA-graph capture sizes (``VllmConfig._set_cudagraph_sizes``: 1, 2, 4, then
# every multiple of 8 up to 512), as token counts per pass.
VLLM_GRAPH_SIZES = (1, 2, 4) + tuple(range(8, 513, 8))
# SGLang's capture batch sizes with speculative decoding (``ServerArgs._generate_cuda_graph_batch_sizes``:
# 1-8, then 10-32 by 2, 40-64 by 4, 72-256 by 8), to the ``cuda_graph_max_bs`` of 256 it picks
# for large-memory GPUs; sequences per pass, each with its rows (verify: the draft tokens + 1).
SGLANG_GRAPH_SIZES = tuple(range(1, 9)) + tuple(range(10, 33, 2)) + tuple(range(40, 65, 4)) + tuple(range(72, 257, 8))

# Fitted by ``python -m benchmarks.fit_published`` on the published vLLM sets R02 (EAGLE and
# EAGLE-3 on an RTX 3090, batch 2-56) and R10 (EAGLE-1 and EAGLE-3 on an H100, batch 1, K = 2-7):
# docs/tables.md#engine-profiles gives the fit, its held-out errors and the command.
_VLLM = EngineProfile("vllm", step_ms=0.867, draft_pass_ms=0.286, verify_row_us=5.711, sampled_token_us=3.759,
                      graph_sizes=VLLM_GRAPH_SIZES,
                      source="fitted on published vLLM measurements (R02: EAGLE-3 paper Table 5, RTX 3090; "
                             "R10: vLLM issue #20780, H100) by benchmarks/fit_published.py")
# No SGLang or TensorRT-LLM set supports a fit of the host figures (docs/tables.md#engine-profiles):
# SGLang's R03 (DeepSeek-V3 MTP on MI300X) fits its per-step figures to 0 and asks per-row figures
# for what the roofline misses of MoE verify passes; TensorRT-LLM's R09 is one point, R07's n-gram
# speedups exceed what its acceptance length allows, R08 gives no acceptance length. Both take
# vLLM's host figures, a documented default, with their own CUDA graphs. TensorRT-LLM's
# CudaGraphConfig captures batch sizes 1-31, 32, 64 and 128 with ``enable_padding`` off by
# default: a batch runs at its own size, no padding.
ENGINE_PROFILES = {
    "vllm": _VLLM,
    "sglang": dataclasses.replace(_VLLM, name="sglang", graph_sizes=SGLANG_GRAPH_SIZES, graph_unit="sequences",
                                  source="host figures: vLLM's (no SGLang set supports a fit; "
                                         "docs/tables.md#engine-profiles); CUDA graphs: SGLang's capture batch sizes "
                                         "with speculative decoding"),
    "trtllm": dataclasses.replace(_VLLM, name="trtllm", graph_sizes=(), graph_unit="sequences",
                                  source="host figures: vLLM's (no TensorRT-LLM set supports a fit; "
                                         "docs/tables.md#engine-profiles); no graph padding (CudaGraphConfig "
                                         "enable_padding defaults to off)"),
}


def engine_profile(engine) -> EngineProfile | None:
    """The profile called ``engine`` (one of :data:`ENGINE_PROFILES`), a profile as given, or None."""
    if engine is None or isinstance(engine, EngineProfile):
        return engine
    try:
        return ENGINE_PROFILES[engine]
    except (KeyError, TypeError):
        raise CostModelError(f"unknown engine {engine!r}: profiles exist for {', '.join(ENGINE_PROFILES)} "
                             "(docs/tables.md#engine-profiles)") from None
