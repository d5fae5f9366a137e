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

from specsim._checks import int_problem, is_finite, is_int, is_number, number_float, number_problem
from specsim.costmodel.specs import LINK_DOMAIN_GPUS, interconnect_problem
from specsim.errors import CostModelError

ENGINE_PARAMETERS = ("step_ms", "draft_pass_ms", "verify_row_us", "sampled_token_us")
"""The fitted figures of an :class:`EngineProfile`, in the order the fit reports them."""
GRAPH_UNITS = ("tokens", "sequences")
"""What an engine's CUDA-graph sizes count: a pass's rows (vLLM) or its sequences (SGLang)."""


@dataclass(frozen=True)
class CustomAllReduce:
    """An engine's own all-reduce over peer links, which it runs instead of NCCL's ring for the
    small messages of decode (docs/tables.md#engine-profiles).

    Every rank writes its activations where its peers can read them and waits on flags. A
    one-shot all-reduce has each rank read every peer's message and add them: ``(tp - 1)`` times
    the message's bytes over the links. A two-shot one reduces a ``1/tp`` slice on each rank, then
    gathers the slices: ``2 (tp - 1) / tp`` of the bytes, a second barrier. Each takes a fixed
    latency ``*_us + *_peer_us x (tp - 1)`` (launch, flags, a barrier per peer) plus its bytes at
    ``link_efficiency`` of the GPU's per-direction link rate. Which one runs, and whether the
    engine hands the message to NCCL instead, is the engine's rule (the fields below the figures).

    Attributes
    ----------
    oneshot_us, oneshot_peer_us : float
        A one-shot all-reduce's fixed latency and what each peer adds to it, microseconds.
    twoshot_us, twoshot_peer_us : float
        The same for a two-shot all-reduce.
    link_efficiency : float
        Fraction of the GPU's per-direction link rate (``GpuSpec.link_gbs``) the bytes reach.
    world_sizes : tuple of int
        Tensor-parallel sizes the engine's kernels run at; others go to NCCL.
    oneshot_bytes : tuple of (int, float)
        ``(largest tp, bytes)`` steps, ascending by tp: at the first step whose tp is >= the pass's,
        a message of fewer bytes runs one-shot, a larger one two-shot (``inf``: always one-shot).
    oneshot_rows : int
        A message of more rows (tokens) than this runs two-shot (0: no limit by rows).
    nccl_rows : tuple of (int, int)
        ``(largest tp, rows)`` steps as ``oneshot_bytes``: a message of more rows goes to NCCL
        (no step for a tp: no limit by rows).
    max_bytes : float
        Messages of this many bytes or more go to NCCL.
    source : str
        Where the rule and the figures come from.
    """

    oneshot_us: float
    oneshot_peer_us: float
    twoshot_us: float
    twoshot_peer_us: float
    link_efficiency: float
    world_sizes: tuple = (2, 4, 6, 8)
    oneshot_bytes: tuple = ()
    oneshot_rows: int = 0
    nccl_rows: tuple = ()
    max_bytes: float = math.inf
    source: str = ""

    def __post_init__(self):
        problems = []
        for f in ("oneshot_us", "oneshot_peer_us", "twoshot_us", "twoshot_peer_us"):
            v = getattr(self, f)
            if not (is_finite(v) and v >= 0.0):
                problems.append(f"{f} = {v!r} must be a finite number >= 0")
        e = self.link_efficiency
        if not (is_number(e) and 0.0 < e <= 1.0):
            problems.append(f"link_efficiency = {e!r} must be in (0, 1]")
        sizes = self.world_sizes
        if not isinstance(sizes, tuple) or not sizes or not all(is_int(w) and w >= 2 for w in sizes):
            problems.append(f"world_sizes = {sizes!r} must be a tuple of whole numbers >= 2")
        for f in ("oneshot_bytes", "nccl_rows"):
            steps = getattr(self, f)
            if not isinstance(steps, tuple) or not all(
                    isinstance(st, tuple) and len(st) == 2 and is_int(st[0]) and _number(st[1]) and st[1] >= 0
                    for st in steps) or [st[0] for st in steps] != sorted({st[0] for st in steps}):
                problems.append(f"{f} = {steps!r} must be (tp, limit) pairs ascending by tp, limits >= 0")
        if not (is_int(self.oneshot_rows) and self.oneshot_rows >= 0):
            problems.append(f"oneshot_rows = {self.oneshot_rows!r} must be a whole number >= 0")
        if not (_number(self.max_bytes) and self.max_bytes > 0):
            problems.append(f"max_bytes = {self.max_bytes!r} must be a number > 0")
        if problems:
            raise CostModelError("the custom all-reduce is refused", problems)

    def seconds(self, tp: int, rows, message_bytes, link_gbs: float, interconnect: str = "nvswitch"):
        """Seconds of one all-reduce of ``rows`` rows (``message_bytes`` bytes, arrays broadcast)
        on ``tp`` GPUs whose links carry ``link_gbs`` GB/s a direction, and where NCCL runs it
        instead (a bool array): those cells' seconds are NaN, for the caller's NCCL price.

        The engines run their own kernels only where every GPU reaches every other over NVLink
        (``interconnect`` ``nvswitch``, or an ``nvlink-bridge`` pair at ``tp = 2``); on PCIe
        (vLLM and SGLang would take two GPUs with working P2P, at latencies these NVLink figures
        do not price), over a network, and on AMD's Infinity Fabric (``xgmi``: both run their
        ROCm build there, but no published latency prices it), NCCL (or RCCL) runs it."""
        problems = [p for p in (int_problem(tp, "tp", 1), number_problem(link_gbs, "link_gbs", 0.0, low_open=True),
                                interconnect_problem(interconnect)) if p]
        if problems:
            raise CostModelError("the all-reduce's arguments are refused", problems)
        tp, link_gbs = int(tp), number_float(link_gbs)
        rows = np.asarray(rows, dtype=np.float64)
        size = np.asarray(message_bytes, dtype=np.float64)
        link = link_gbs * 1e9 * self.link_efficiency
        oneshot = (self.oneshot_us + self.oneshot_peer_us * (tp - 1)) * 1e-6 + (tp - 1) * size / link
        twoshot = (self.twoshot_us + self.twoshot_peer_us * (tp - 1)) * 1e-6 + 2.0 * (tp - 1) / tp * size / link
        one = size < _step(self.oneshot_bytes, tp, math.inf)
        if self.oneshot_rows:
            one = one & (rows <= self.oneshot_rows)
        linked = interconnect == "nvswitch" or (interconnect == "nvlink-bridge"
                                                and tp <= LINK_DOMAIN_GPUS["nvlink-bridge"])
        nccl = (not linked or tp not in self.world_sizes) | (size >= self.max_bytes) \
            | (rows > _step(self.nccl_rows, tp, math.inf))
        nccl = np.broadcast_to(nccl, np.broadcast_shapes(rows.shape, size.shape))
        return np.where(nccl, np.nan, np.where(one, oneshot, twoshot)), nccl

    def constants(self) -> dict:
        """The figures and the rule, for a table's ``[meta]`` and its digests."""
        def steps(pairs):
            return ",".join(f"{t}:{'any' if math.isinf(v) else f'{v:g}'}" for t, v in pairs) or "none"
        return {"oneshot_us": float(self.oneshot_us), "oneshot_peer_us": float(self.oneshot_peer_us),
                "twoshot_us": float(self.twoshot_us), "twoshot_peer_us": float(self.twoshot_peer_us),
                "link_efficiency": float(self.link_efficiency),
                "world_sizes": ",".join(map(str, self.world_sizes)), "oneshot_bytes": steps(self.oneshot_bytes),
                "oneshot_rows": int(self.oneshot_rows), "nccl_rows": steps(self.nccl_rows),
                "max_bytes": "any" if math.isinf(self.max_bytes) else f"{self.max_bytes:g}"}


def _number(v) -> bool:
    return is_number(v) and not math.isnan(number_float(v))


def _step(steps, tp: int, default: float) -> float:
    """The limit of the first ``(largest tp, limit)`` step whose tp is >= ``tp`` (``default``: none)."""
    return next((float(v) for t, v in steps if tp <= t), default)


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
    allreduce : CustomAllReduce or None
        The engine's own all-reduce on GPUs whose peers are all linked (``GpuSpec.interconnect``
        ``nvswitch``, or an ``nvlink-bridge`` pair at ``tp = 2``); None, or other GPUs: NCCL's
        ring as the roofline prices it.
    """

    name: str
    step_ms: float = 0.0
    draft_pass_ms: float = 0.0
    verify_row_us: float = 0.0
    sampled_token_us: float = 0.0
    graph_sizes: tuple = ()
    source: str = ""
    graph_unit: str = "tokens"
    allreduce: CustomAllReduce | None = None

    def __post_init__(self):
        problems = []
        for f in ENGINE_PARAMETERS:
            v = getattr(self, f)
            if not (is_finite(v) and v >= 0.0):
                problems.append(f"{f} = {v!r} must be a finite number >= 0")
        sizes = self.graph_sizes
        if any(not is_int(s) or s < 1 for s in sizes) or list(sizes) != sorted(set(sizes)):
            problems.append(f"graph_sizes = {sizes!r} must be ascending distinct whole numbers >= 1")
        if self.graph_unit not in GRAPH_UNITS:
            problems.append(f"graph_unit = {self.graph_unit!r} must be one of {', '.join(GRAPH_UNITS)}")
        if self.allreduce is not None and not isinstance(self.allreduce, CustomAllReduce):
            problems.append(f"allreduce = {self.allreduce!r} must be a CustomAllReduce or None")
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
        if self.allreduce is not None:
            out |= {f"allreduce_{k}": v for k, v in self.allreduce.constants().items()}
        return out


# vLLM V1's default CUDA-graph capture sizes (``VllmConfig._set_cudagraph_sizes``: 1, 2, 4, then
# every multiple of 8 up to 512), as token counts per pass.
VLLM_GRAPH_SIZES = (1, 2, 4) + tuple(range(8, 513, 8))
# SGLang's capture batch sizes with speculative decoding (``ServerArgs._generate_cuda_graph_batch_sizes``:
# 1-8, then 10-32 by 2, 40-64 by 4, 72-256 by 8), to the ``cuda_graph_max_bs`` of 256 it picks
# for large-memory GPUs; sequences per pass, each with its rows (verify: the draft tokens + 1).
SGLANG_GRAPH_SIZES = tuple(range(1, 9)) + tuple(range(10, 33, 2)) + tuple(range(40, 65, 4)) + tuple(range(72, 257, 8))

# The one-shot / two-shot all-reduce's latency over NVLink, fitted by ``python -m
# benchmarks.fit_published`` (median |error| 4.8%, 18 points) on the latencies SGLang PR #2904
# (2025-01-15) published for TensorRT-LLM's custom all-reduce kernels as sgl-kernel carries them
# (``trt_reduce``: one launch, the input copied in the kernel) on H100s at tp 2, 4 and 8, 8 KiB to
# 4 MiB (tests/data/published-sd/allreduce_sglang_pr2904_h100.csv). Each is the wall time of
# back-to-back calls outside CUDA graphs, so an upper bound for a graph-captured decode step.
# vLLM's and SGLang's kernels are the same design (one-shot: every rank reads its peers' buffers;
# two-shot: reduce-scatter, then all-gather, over the same buffers); inside CUDA graphs their
# inputs are registered buffers and they run as one launch too (the same PR measured vLLM's 4-6 us
# slower outside graphs, where its input is first copied into the registered buffer). Measured on
# H100s; every NVSwitch GPU takes these latencies with its own link rate.
PEER_ALLREDUCE_FIGURES = dict(oneshot_us=3.493, oneshot_peer_us=0.226, twoshot_us=7.707, twoshot_peer_us=0.223,
                              link_efficiency=0.613)
_PEER_SOURCE = ("latencies: TensorRT-LLM's custom all-reduce kernels on H100, tp 2-8 (sglang PR #2904), fitted by "
                "benchmarks/fit_published.py")
# vLLM (vllm/distributed/device_communicators/custom_all_reduce.py, ``CustomAllreduce``): tp 2, 4,
# 6 or 8 (``_SUPPORTED_WORLD_SIZES``), on GPUs that are all NVLink-connected (``fully_connected``;
# at tp = 2 any P2P pair), messages below ``max_size`` = 8 MiB (``should_custom_ar``; later
# releases on Hopper cap it at 256 KiB at tp 8 and hand larger messages to a symmetric-memory
# all-reduce, ``CUSTOM_ALL_REDUCE_MAX_SIZES``); the kernel (csrc/custom_all_reduce.cuh,
# ``CustomAllreduce::allreduce``, ``REDUCE_CASE``) runs one-shot (``cross_device_reduce_1stage``)
# at tp 2, below 512 KiB at tp <= 4 and below 256 KiB at tp <= 8, two-shot above.
VLLM_ALLREDUCE = CustomAllReduce(**PEER_ALLREDUCE_FIGURES, world_sizes=(2, 4, 6, 8),
                                 oneshot_bytes=((2, math.inf), (4, 512 * 1024), (8, 256 * 1024)), max_bytes=8192 * 1024,
                                 source="rule: vLLM's CustomAllreduce (custom_all_reduce.py, custom_all_reduce.cuh); "
                                        + _PEER_SOURCE)
# SGLang on CUDA runs vLLM's (python/sglang/srt/distributed/device_communicators/custom_all_reduce.py,
# adapted from vLLM v0.6.4.post1: the same world sizes, full-NVLink test and 8 MiB ``_MAX_CAR_SIZE``;
# sgl-kernel's custom_all_reduce.cuh keeps vLLM's ``REDUCE_CASE`` thresholds).
SGLANG_ALLREDUCE = dataclasses.replace(VLLM_ALLREDUCE, source="rule: SGLang's CustomAllreduce (vLLM's, adapted); "
                                                              + _PEER_SOURCE)
# TensorRT-LLM's PyTorch backend (cpp/tensorrt_llm/thop/allreduceOp.cpp, ``AllreduceOp``): with the
# AUTO strategy a message goes to NCCL when it exceeds the IPC workspace (8 MB above tp 2,
# ``getMaxRequiredWorkspaceSize``), or the GPUs lack P2P or NVLink (``ifFallbackToNCCL``); else
# ``selectImplementation`` picks MIN_LATENCY at tp <= 2, and above tp 2 MIN_LATENCY up to 128 tokens
# and NCCL beyond (``ALLREDUCE_AUTO_HEURISTIC_MIN_LATENCY_THRESHOLD_TOKEN_NUM``, default 128).
# MIN_LATENCY runs the fused all-reduce kernels one-shot up to ``kOneShotMaxToken`` = 128 tokens
# (allReduceFusionKernels.h), two-shot above; its kernels are built for 2, 4, 8 and 16 ranks
# (``allreduce_fusion_op``'s dispatch on ``nranks``).
TRTLLM_ALLREDUCE = CustomAllReduce(**PEER_ALLREDUCE_FIGURES, world_sizes=(2, 4, 8, 16), oneshot_rows=128,
                                   nccl_rows=((2, math.inf), (16, 128)), max_bytes=8e6,
                                   source="rule: TensorRT-LLM's AllreduceOp AUTO strategy (allreduceOp.cpp); "
                                          + _PEER_SOURCE)

# Fitted by ``python -m benchmarks.fit_published`` on the published vLLM sets R02 (EAGLE and
# EAGLE-3 on an RTX 3090, batch 2-56) and R10 (EAGLE-1 and EAGLE-3 on an H100, batch 1, K = 2-7):
# docs/tables.md#engine-profiles gives the fit, its held-out errors and the command.
_VLLM = EngineProfile("vllm", step_ms=0.867, draft_pass_ms=0.286, verify_row_us=5.711, sampled_token_us=3.759,
                      graph_sizes=VLLM_GRAPH_SIZES, allreduce=VLLM_ALLREDUCE,
                      source="fitted on published vLLM measurements (R02: EAGLE-3 paper Table 5, RTX 3090; "
                             "R10: EAGLE-1 and EAGLE-3, H100; sources in docs/tables.md#engine-profiles) by "
                             "benchmarks/fit_published.py")
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
                                  allreduce=SGLANG_ALLREDUCE,
                                  source="host figures: vLLM's (no SGLang set supports a fit; "
                                         "docs/tables.md#engine-profiles); CUDA graphs: SGLang's capture batch sizes "
                                         "with speculative decoding"),
    "trtllm": dataclasses.replace(_VLLM, name="trtllm", graph_sizes=(), graph_unit="sequences",
                                  allreduce=TRTLLM_ALLREDUCE,
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
