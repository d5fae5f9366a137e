"""One forward pass priced operator by operator: the roofline under the cost model (docs/tables.md).

One forward pass over ``tokens`` rows of ``seqs`` sequences, each with ``context`` tokens of KV
cache, on ``tp`` GPUs in tensor parallel, is priced operator by operator
(:func:`forward_breakdown`):

- linear: every layer's non-attention operators -- the QKV and output projections, the MLP's up
  (gate and up, for a gated MLP), activation and down projections, two norms, the rotary
  embedding and the residual add -- each a GEMM or an elementwise kernel;
- attention: each KV layer's cache reads and score/value FLOPs, one kernel per layer;
- communication: two tensor-parallel all-reduces of the activations per layer (ring: ``2(tp-1)``
  hop latencies plus ``2(tp-1)/tp`` of the bytes over the link);
- head: the embedding lookup, the final norm and the LM head GEMM;
- host: what the serving engine's CPU side adds per pass and per sequence (:class:`Overheads`).

A GEMM moves its weights and activations over memory and does ``2 * rows * in * out`` FLOPs; its
time is a launch floor plus the two times blended, ``(mem^p + flop^p)^(1/p)`` (``p`` large is the
plain roofline's max; ``p`` near 1 their sum, which is what mid-size GEMMs measure). Elementwise
kernels stream their bytes at the elementwise fraction of the bandwidth. The fractions of the
datasheet rates, the floor, ``p`` and the all-reduce hop latency and link fraction are the
:class:`Achieved` constants of the GPU's class, fitted on measured per-operator times
(docs/tables.md#the-roofline-against-measurements). A model with multi-head latent attention (MLA)
is priced in the absorbed form decode runs (:func:`_mla_linear`).

Energy is board power times time, summed over the ``tp`` GPUs: idle power for the whole step, plus
the dynamic power (TDP - idle) for the share of the step the GPU streams memory (weighted by
``Overheads.memory_power``) or multiplies (launch floors, communication and host time count as
idle). Power therefore stays between idle and TDP. :mod:`specsim.costmodel.roofline` turns these
passes into a speculative step's price and a cost table.

Why one module of this size: the operators of a pass, the networks they run and the energy split
share one set of units and one operator list; split, each half would re-state them.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from specsim.costmodel.engines import engine_profile
from specsim.costmodel.specs import DTYPE_BYTES, DrafterSpec, GpuSpec, ModelSpec, gpu_spec, model_spec
from specsim.errors import CostModelError
from specsim._checks import COUNT_MAX, int_problem, is_number, number_float, show

# Bytes of one activation or KV element the kernels move besides the weights (bf16/fp16).
ACTIVATION_BYTES = 2.0


@dataclass(frozen=True)
class Achieved:
    """What one GPU class reaches of its datasheet, fitted on measured per-operator times.

    Attributes
    ----------
    matrix_efficiency : float
        Fraction of the dense matrix rate a large GEMM sustains.
    memory_efficiency : float
        Fraction of the memory bandwidth a GEMM's weight stream (and attention's KV stream) reaches.
    elementwise_efficiency : float
        Fraction of the memory bandwidth norms, activations, rotary embeddings and adds reach.
    op_floor_us : float
        Time of the shortest kernel: what every operator costs however small it is.
    blend : float
        ``p`` of the blend ``(mem^p + flop^p)^(1/p)`` of a GEMM's two times, >= 1.
    hop_us : float
        Latency of one hop of a ring all-reduce.
    link_efficiency : float
        Fraction of the per-GPU link bandwidth an all-reduce's bytes reach.
    source : str
        What it was fitted on.
    """

    matrix_efficiency: float
    memory_efficiency: float
    elementwise_efficiency: float
    op_floor_us: float
    blend: float
    hop_us: float
    link_efficiency: float
    source: str = ""

    def __post_init__(self):
        problems = []
        for f in ("matrix_efficiency", "memory_efficiency", "elementwise_efficiency", "link_efficiency"):
            v = getattr(self, f)
            if not 0.0 < v <= 1.0:
                problems.append(f"{f} = {v!r} must be in (0, 1]")
        for f in ("op_floor_us", "hop_us"):
            v = getattr(self, f)
            if not (math.isfinite(v) and v >= 0.0):
                problems.append(f"{f} = {v!r} must be >= 0")
        if not (math.isfinite(self.blend) and self.blend >= 1.0):
            problems.append(f"blend = {self.blend!r} must be >= 1")
        if problems:
            raise CostModelError("the achieved fractions are refused", problems)

    def constants(self) -> dict:
        """The numeric fields, for a table's ``[meta]`` and its digests."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "source"}


# Fitted by ``python -m tests.costmodel.roofline_fit`` on the measured per-operator medians of the shipped
# profiles (tests/data/vidur: Llama-2-7B, Llama-2-70B and Llama-3-8B on A100, Llama-2-7B and
# Llama-2-70B on H100, tensor parallel 1-8, 1-4,096 tokens) and their all-reduce times.
ACHIEVED = {
    "ampere": Achieved(matrix_efficiency=0.7096, memory_efficiency=0.7969, elementwise_efficiency=0.7314,
                       op_floor_us=4.0078, blend=1.5546, hop_us=3.375, link_efficiency=0.4763,
                       source="fitted on vidur per-operator profiles (A100-80GB SXM: Llama-2-7B, Llama-2-70B, "
                              "Llama-3-8B; TP 1-8; 1-4,096 tokens) and all-reduce times (a100_dgx)"),
    "hopper": Achieved(matrix_efficiency=0.7322, memory_efficiency=0.9339, elementwise_efficiency=0.6195,
                       op_floor_us=3.7945, blend=1.4182, hop_us=2.432, link_efficiency=0.6646,
                       source="fitted on vidur per-operator profiles (H100 SXM: Llama-2-7B, Llama-2-70B; TP 1-8; "
                              "1-4,096 tokens) and all-reduce times (h100_dgx)"),
}


def _mean_achieved(classes) -> Achieved:
    """The geometric mean of the fitted classes: the stand-in for a class nothing was fitted on."""
    fields = [f.name for f in dataclasses.fields(Achieved) if f.name != "source"]
    mean = {f: float(np.exp(np.mean([np.log(max(getattr(a, f), 1e-12)) for a in classes]))) for f in fields}
    return Achieved(**mean, source="no profile of this GPU class: the geometric mean of the fitted classes ("
                    + ", ".join(sorted(ACHIEVED)) + ")")


UNFITTED_ACHIEVED = _mean_achieved(ACHIEVED.values())


def achieved_for(gpu: GpuSpec) -> Achieved:
    """The fitted constants of ``gpu``'s class (``GpuSpec.arch``), or :data:`UNFITTED_ACHIEVED`."""
    return ACHIEVED.get(gpu.arch, UNFITTED_ACHIEVED)


@dataclass(frozen=True)
class Overheads:
    """What the serving engine's host side adds to every forward pass, and how power splits.

    Two engines are modelled (:data:`HOST_OVERHEADS`): ``cuda-graph`` (the default: decode
    replays a captured graph, so no per-kernel launch reaches the step time; the scheduler,
    input preparation and sampling remain) and ``eager`` (every kernel launched from Python;
    calibrated on the Splitwise profiles of Llama-2-70B decode, vLLM-era eager serving).

    Attributes
    ----------
    engine : str
        Which engine the figures describe.
    step_ms : float
        Host overhead of one target forward pass.
    seq_ms : float
        Host overhead per sequence per target forward pass.
    draft_step_ms : float
        Host/launch overhead of one drafter pass. Not calibrated (no public drafter profiles).
    memory_power : float
        Share of the dynamic power (TDP - idle) a kernel draws while streaming memory; saturating
        the tensor cores draws the rest. Calibrated (``python -m tests.costmodel.roofline_fit``) so the
        modelled mean power of the Splitwise A100 decode runs has no bias against their profiled
        average power.
    """

    engine: str = "cuda-graph"
    step_ms: float = 1.0
    seq_ms: float = 0.01
    draft_step_ms: float = 0.1
    memory_power: float = 0.91

    def __post_init__(self):
        problems = []
        if not 0.0 < self.memory_power <= 1.0:
            problems.append(f"memory_power = {self.memory_power!r} must be in (0, 1]")
        for f in ("step_ms", "seq_ms", "draft_step_ms"):
            v = getattr(self, f)
            if not (np.isfinite(v) and v >= 0.0):
                problems.append(f"{f} = {v!r} must be >= 0")
        if problems:
            raise CostModelError("the stack overheads are refused", problems)

    @classmethod
    def named(cls, engine: str) -> "Overheads":
        """The overheads of ``engine``, one of :data:`HOST_OVERHEADS`."""
        try:
            return HOST_OVERHEADS[engine]
        except KeyError:
            raise CostModelError(f"unknown overheads {engine!r}: use one of {', '.join(HOST_OVERHEADS)}") from None


HOST_OVERHEADS = {
    "cuda-graph": Overheads(),
    "eager": Overheads("eager", step_ms=15.013, seq_ms=0.1804, draft_step_ms=0.5),
}


class ForwardBreakdown(NamedTuple):
    """Milliseconds of each part of one forward pass (floats, or arrays broadcast like the inputs)."""

    linear_ms: object     # every layer's non-attention operators
    attention_ms: object  # KV reads and attention FLOPs of every KV layer
    comm_ms: object       # tensor-parallel all-reduces
    head_ms: object       # embedding lookup, final norm, LM head
    host_ms: object       # the engine's host overhead
    padding_ms: object = 0.0  # the rows an engine's CUDA graph pads the pass to (``engine``)
    engine_ms: object = 0.0   # the engine's per-step and per-verify-row parts of a verify pass (``engine``)

    @property
    def total_ms(self):
        return (self.linear_ms + self.attention_ms + self.comm_ms + self.head_ms + self.host_ms + self.padding_ms
                + self.engine_ms)


class _Net(NamedTuple):
    """One network's shape as the roofline prices it (whole model, before tensor parallelism)."""

    dense_layers: int
    moe_layers: int
    kv_layers: int
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int         # dense layers' MLP
    up_matrices: int          # 2 for a gated MLP (gate and up), 1 for a plain one
    experts: int
    experts_per_token: int
    expert_intermediate: int
    shared_intermediate: int
    weight_dtype: str
    fuse_inputs: int          # a drafter's fusing projection, fuse_inputs * hidden -> hidden (0 = none)
    head_rows: int            # the LM head's vocabulary
    head_dtype: str
    kv_bytes: float           # bytes of one KV element
    mla: tuple = ()           # MLA: (kv_lora_rank, q_lora_rank, rope_head_dim, v_head_dim); () = none
    # How an engine runs the net (roofline._engine_nets); the defaults are the passes alone.
    qkv_inputs: int = 1       # widths of ``hidden`` the first layer's QKV reads (EAGLE-3: [embedding; feature])
    vocab_parallel: bool = False  # the embedding's all-reduce and the LM head's gather priced on tp > 1
    vocab_map: int = 0        # the target vocabulary a draft vocabulary's logits are mapped into (0 = none)
    allreduce: object = None  # the engine's CustomAllReduce for the activations' all-reduces (None: NCCL's ring)


def _mla(m: ModelSpec) -> tuple:
    return (m.kv_lora_rank, m.q_lora_rank, m.rope_head_dim, m.v_head_dim) if m.kv_lora_rank else ()


def _target_net(m: ModelSpec) -> _Net:
    return _Net(m.layers - m.moe_layers, m.moe_layers, m.kv_layer_count, m.hidden, m.heads, m.kv_heads,
                m.head_dim, m.intermediate, m.mlp_matrices - 1, m.experts, m.experts_per_token,
                m.expert_intermediate, m.shared_intermediate, m.dtype, 0, m.vocab, m.lm_head_dtype,
                DTYPE_BYTES[m.kv_dtype], _mla(m))


def _draft_model(d: DrafterSpec, models=None):
    """The model spec a drafter of kind ``"model"`` names (from ``models`` first, then the built-ins),
    its weight format overridden by the drafter's ``dtype``; None for other kinds."""
    if d.kind != "model":
        return None
    dm = model_spec(d.model, models)
    return dataclasses.replace(dm, dtype=d.dtype) if d.dtype else dm


def _drafter_net(m: ModelSpec, d: DrafterSpec, models=None):
    """The network one draft pass runs, or None for a drafter with no draft pass (n-gram)."""
    if d.kind == "ngram":
        return None
    if d.kind == "model":
        return _target_net(_draft_model(d, models))
    dtype = d.dtype or m.dtype
    moe = d.moe and m.experts > 0
    intermediate = m.intermediate or m.expert_intermediate * max(m.experts_per_token, 1)
    head_rows, head_dtype = (d.draft_vocab, dtype) if d.draft_vocab else (m.vocab, m.lm_head_dtype)
    return _Net(0 if moe else d.layers, d.layers if moe else 0, d.layers, m.hidden, m.heads, m.kv_heads,
                m.head_dim, intermediate, m.mlp_matrices - 1, m.experts if moe else 0,
                m.experts_per_token if moe else 0, m.expert_intermediate, m.shared_intermediate if moe else 0,
                dtype, d.fuse_inputs, head_rows, head_dtype, DTYPE_BYTES[m.kv_dtype], _mla(m))


def _local_dims(net: _Net, tp: int):
    """Per-GPU query and KV widths: heads split over the ranks, KV heads replicated past their count."""
    q = net.heads * net.head_dim / tp
    kv = max(net.kv_heads / tp, 1.0) * net.head_dim
    return q, kv


def _weight_params(net: _Net) -> tuple:
    """Whole-model weights: (always read, all routed experts, LM head), in parameters."""
    h, q, kv = net.hidden, net.heads * net.head_dim, net.kv_heads * net.head_dim
    attention = h * (q + 2 * kv) + q * h
    if net.mla:
        rank, ql, rope, vd = net.mla
        qpart = h * ql + ql * q if ql else h * q
        attention = qpart + h * (rank + rope) + rank * net.heads * (net.head_dim - rope + vd) + net.heads * vd * h
    dense_mlp = (net.up_matrices + 1) * h * net.intermediate
    shared = (net.up_matrices + 1) * h * net.shared_intermediate + h * net.experts
    layers = net.dense_layers + net.moe_layers
    always = layers * attention + net.dense_layers * dense_mlp + net.moe_layers * shared + net.fuse_inputs * h * h
    experts = net.moe_layers * net.experts * (net.up_matrices + 1) * h * net.expert_intermediate
    return always, experts, net.head_rows * h


class _Clock:
    """Sums the roofline time of kernels, and the memory and FLOP seconds behind them (for energy)."""

    def __init__(self, gpu: GpuSpec, ach: Achieved, shape):
        self.gpu, self.ach = gpu, ach
        self.bandwidth = gpu.bandwidth_gbs * 1e9
        self.floor_s = ach.op_floor_us * 1e-6
        self.time_s = np.zeros(shape)
        self.mem_s = np.zeros(shape)
        self.flop_s = np.zeros(shape)

    def gemm(self, count, weight_bytes, act_bytes, flops, dtype):
        mem = (weight_bytes + act_bytes) / (self.bandwidth * self.ach.memory_efficiency)
        flop = flops / (self.gpu.matrix_tflops(dtype) * 1e12 * self.ach.matrix_efficiency)
        p = self.ach.blend
        self.time_s = self.time_s + count * (self.floor_s + (mem ** p + flop ** p) ** (1.0 / p))
        self.mem_s = self.mem_s + count * mem
        self.flop_s = self.flop_s + count * flop

    def stream(self, count, nbytes):
        mem = nbytes / (self.bandwidth * self.ach.elementwise_efficiency)
        self.time_s = self.time_s + count * (self.floor_s + mem)
        self.mem_s = self.mem_s + count * mem

    def take(self):
        out = (self.time_s, self.mem_s, self.flop_s)
        self.time_s = np.zeros_like(self.time_s)
        self.mem_s = np.zeros_like(self.mem_s)
        self.flop_s = np.zeros_like(self.flop_s)
        return out


def _linear(clock: _Clock, net: _Net, tp: int, rows):
    """Every layer's non-attention operators, as the per-operator profiles time them."""
    a, w = ACTIVATION_BYTES, DTYPE_BYTES[net.weight_dtype]
    h, dt = net.hidden, net.weight_dtype
    q, kv = _local_dims(net, tp)
    layers = net.dense_layers + net.moe_layers
    if layers and net.mla:
        _mla_linear(clock, net, tp, rows, layers)
    elif layers:
        qkv = q + 2 * kv
        if net.qkv_inputs == 1:
            clock.gemm(layers, h * qkv * w, rows * (h + qkv) * a, 2.0 * rows * h * qkv, dt)
        else:  # the first layer attends over [normed embedding; normed feature]
            x = net.qkv_inputs * h
            clock.gemm(1, x * qkv * w, rows * (x + qkv) * a, 2.0 * rows * x * qkv, dt)
            clock.gemm(layers - 1, h * qkv * w, rows * (h + qkv) * a, 2.0 * rows * h * qkv, dt)
            clock.stream(net.qkv_inputs - 1, 2.0 * rows * h * a)   # the embedding's own norm
        clock.gemm(layers, q * h * w, rows * (q + h) * a, 2.0 * rows * q * h, dt)
        clock.stream(2 * layers, 2.0 * rows * h * a)                 # input and post-attention norms
        clock.stream(layers, 2.0 * rows * (q + kv) * a)              # rotary embedding of q and k
        clock.stream(layers, 3.0 * rows * h * a)                     # residual add
    up = net.up_matrices
    if net.dense_layers:
        i = net.intermediate / tp
        clock.gemm(net.dense_layers, h * up * i * w, rows * (h + up * i) * a, 2.0 * rows * h * up * i, dt)
        clock.stream(net.dense_layers, rows * (up + 1) * i * a)      # activation (and gating)
        clock.gemm(net.dense_layers, i * h * w, rows * (i + h) * a, 2.0 * rows * i * h, dt)
    if net.moe_layers:
        n = net.moe_layers
        clock.gemm(n, h * net.experts * w, rows * (h + net.experts) * a, 2.0 * rows * h * net.experts, dt)
        if net.shared_intermediate:
            s = net.shared_intermediate / tp
            clock.gemm(n, h * up * s * w, rows * (h + up * s) * a, 2.0 * rows * h * up * s, dt)
            clock.stream(n, rows * (up + 1) * s * a)
            clock.gemm(n, s * h * w, rows * (s + h) * a, 2.0 * rows * s * h, dt)
        # Routed experts (grouped GEMMs): the experts at least one row picks, routing uniform.
        e = net.expert_intermediate / tp
        touched = net.experts * (1.0 - (1.0 - net.experts_per_token / net.experts) ** rows)
        picks = rows * net.experts_per_token
        clock.gemm(n, touched * h * up * e * w, picks * (h + up * e) * a, 2.0 * picks * h * up * e, dt)
        clock.stream(n, picks * (up + 1) * e * a)
        clock.gemm(n, touched * e * h * w, picks * (e + h) * a, 2.0 * picks * e * h, dt)
    if net.fuse_inputs:
        f = net.fuse_inputs * h
        clock.gemm(1, f * h / tp * w, rows * (f + h / tp) * a, 2.0 * rows * f * h / tp, dt)
    return clock.take()


def _mla_linear(clock: _Clock, net: _Net, tp: int, rows, layers):
    """MLA's projections per layer, in the absorbed form decode runs: the fused down-projection to
    the query bottleneck, the latent and its rotary part (every rank, unsplit); per local head the
    query up-projection, the key up-projection absorbed into the query (non-rotary part -> latent)
    and the value up-projection absorbed into the output (latent -> value); the output projection."""
    a, w, h, dt = ACTIVATION_BYTES, DTYPE_BYTES[net.weight_dtype], net.hidden, net.weight_dtype
    rank, ql, rope, vd = net.mla
    heads = net.heads / tp
    nope = net.head_dim - rope
    down = ql + rank + rope
    clock.gemm(layers, h * down * w, rows * (h + down) * a, 2.0 * rows * h * down, dt)
    qin, qout = (ql or h), heads * net.head_dim
    clock.gemm(layers, qin * qout * w, rows * (qin + qout) * a, 2.0 * rows * qin * qout, dt)
    clock.gemm(layers, heads * nope * rank * w, rows * heads * (nope + rank) * a, 2.0 * rows * heads * nope * rank, dt)
    clock.gemm(layers, heads * rank * vd * w, rows * heads * (rank + vd) * a, 2.0 * rows * heads * rank * vd, dt)
    clock.gemm(layers, heads * vd * h * w, rows * (heads * vd + h) * a, 2.0 * rows * heads * vd * h, dt)
    clock.stream(2 * layers, 2.0 * rows * h * a)                   # input and post-attention norms
    clock.stream(layers, 2.0 * rows * (heads + 1.0) * rope * a)    # rotary part of the queries and the key
    clock.stream(layers, 3.0 * rows * h * a)                       # residual add


def _attention(clock: _Clock, net: _Net, tp: int, rows, seqs, context):
    """Each KV layer's cache reads (K and V of every sequence's context) and FLOPs, one kernel.
    MLA: every rank reads each sequence's latent (``kv_lora_rank + rope_head_dim`` a token) once,
    and its heads attend over it (scores over the latent and its rotary part, values over the latent)."""
    if net.mla:
        rank, _, rope, _ = net.mla
        heads = net.heads / tp
        clock.gemm(net.kv_layers, 0.0, seqs * context * (rank + rope) * net.kv_bytes,
                   2.0 * rows * context * heads * (2 * rank + rope), "bf16")
        return clock.take()
    q, kv = _local_dims(net, tp)
    clock.gemm(net.kv_layers, 0.0, seqs * context * 2.0 * kv * net.kv_bytes, 4.0 * rows * context * q, "bf16")
    return clock.take()


def _head(clock: _Clock, net: _Net, tp: int, rows, sampled):
    """The embedding lookup and the final norm over ``rows``, the LM head GEMM (vocabulary split over
    the ranks) over the ``sampled`` rows; with a vocabulary map, the draft logits written into a
    target-vocabulary row (filled, scattered into) and its argmax read."""
    a, h = ACTIVATION_BYTES, net.hidden
    v = net.head_rows / tp
    clock.stream(2, 2.0 * rows * h * a)
    clock.gemm(1, h * v * DTYPE_BYTES[net.head_dtype], sampled * (h + v) * a, 2.0 * sampled * h * v, net.head_dtype)
    if net.vocab_map:
        clock.stream(2, sampled * net.vocab_map * a)          # the -inf fill and the argmax
        clock.stream(1, sampled * net.head_rows * 2.0 * a)    # the scatter
    return clock.take()


def _comm_s(gpu: GpuSpec, ach: Achieved, net: _Net, tp: int, rows, sampled):
    """Two all-reduces of the activations per layer -- NCCL's ring, or the engine's own all-reduce
    where it runs one (``net.allreduce``, :class:`~specsim.costmodel.engines.CustomAllReduce`) --;
    for a vocabulary-parallel net, also the embedding's all-reduce (priced as the layers' are) and
    the gather of the ``sampled`` rows' logits shards (NCCL's ring)."""
    if tp <= 1:
        return np.zeros_like(rows)
    link = gpu.link_gbs * 1e9 * ach.link_efficiency
    per_reduce = 2 * (tp - 1) * ach.hop_us * 1e-6 + 2.0 * (tp - 1) / tp * rows * net.hidden * ACTIVATION_BYTES / link
    if net.allreduce is not None:
        own, nccl = net.allreduce.seconds(tp, rows, rows * net.hidden * ACTIVATION_BYTES, gpu.link_gbs,
                                          gpu.interconnect)
        per_reduce = np.where(nccl, per_reduce, own)
    layers = 2 * (net.dense_layers + net.moe_layers) * per_reduce
    if not net.vocab_parallel:
        return layers
    gather = (tp - 1) * ach.hop_us * 1e-6 + (tp - 1) / tp * sampled * net.head_rows * ACTIVATION_BYTES / link
    return layers + per_reduce + gather


class _Pass(NamedTuple):
    linear_s: np.ndarray
    attention_s: np.ndarray
    comm_s: np.ndarray
    head_s: np.ndarray
    active_s: np.ndarray   # busy seconds weighted by the share of the dynamic power they draw


def _pass(net: _Net, gpu: GpuSpec, ach: Achieved, ov: Overheads, tp: int, rows, seqs, context,
          sampled=None) -> _Pass:
    """Device seconds of one pass by part; arrays broadcast. ``sampled``: the rows the LM head
    computes logits for (None: every row)."""
    sampled = np.asarray(rows if sampled is None else sampled, dtype=np.float64)
    rows = np.asarray(rows, dtype=np.float64)
    seqs = np.asarray(seqs, dtype=np.float64)
    context = np.asarray(context, dtype=np.float64)
    shape = np.broadcast_shapes(rows.shape, seqs.shape, context.shape)
    clock = _Clock(gpu, ach, shape)
    linear, lm, lf = _linear(clock, net, tp, rows)
    attention, am, af = _attention(clock, net, tp, rows, seqs, context)
    head, hm, hf = _head(clock, net, tp, rows, sampled)
    comm = np.broadcast_to(_comm_s(gpu, ach, net, tp, rows, sampled), shape)
    busy = linear + attention + head
    share = ov.memory_power
    active = np.minimum(share * (lm + am + hm) + (1.0 - share) * (lf + af + hf), busy)
    return _Pass(linear, attention, comm, head, active)


def _as_result(x):
    x = np.asarray(x, dtype=np.float64)
    return float(x) if x.ndim == 0 else x


def forward_breakdown(gpu, model, *, tokens, seqs, context, tp: int = 1, overheads=None, achieved=None,
                      specs=None, engine=None) -> ForwardBreakdown:
    """Milliseconds of each part of one target forward pass.

    Parameters
    ----------
    gpu, model : str or spec
        Names of built-in specs (or of specs in ``specs``), or spec objects.
    tokens : array_like of float
        Rows the pass computes (decoded tokens, verified drafts, prefill tokens).
    seqs : array_like of float
        Sequences those rows belong to (each reads its KV cache once per layer).
    context : array_like of float
        Mean KV-cache tokens per sequence. ``tokens``, ``seqs`` and ``context`` broadcast.
    tp : int
        Tensor-parallel GPUs.
    overheads : Overheads or str, optional
        Host overheads (default: the ``cuda-graph`` engine); a name of :data:`HOST_OVERHEADS`.
    achieved : Achieved, optional
        Achieved fractions (default: the GPU class's fitted ones, :func:`achieved_for`).
    specs : dict, optional
        User specs as :func:`specsim.costmodel.load_specs` returns them.
    engine : str or EngineProfile, optional
        A serving engine's profile (:data:`~specsim.costmodel.engines.ENGINE_PROFILES`): the pass
        runs as the engine runs a verify pass -- at its CUDA-graph size (the rows that adds priced
        in ``padding_ms``), its LM head over the rows given, and on ``tp > 1`` the embedding's
        all-reduce and the logits' gather in ``comm_ms``, the all-reduces run by the engine's own
        kernels on NVLink GPUs (``EngineProfile.allreduce``) -- and a pass of more rows than
        sequences pays the engine's per-step and per-verify-row parts (``engine_ms``).

    Returns
    -------
    ForwardBreakdown
        ``linear_ms``, ``attention_ms``, ``comm_ms``, ``head_ms``, ``host_ms``, ``padding_ms``,
        ``engine_ms`` and ``total_ms``.
    """
    specs = _specs(specs)
    g, m = gpu_spec(gpu, specs.get("gpu")), model_spec(model, specs.get("model"))
    tokens, seqs, context, tp = _pass_args(m, tokens=tokens, seqs=seqs, context=context, tp=tp)
    ov = _overheads(overheads)
    ach = _achieved(achieved, g)
    eng = engine_profile(engine)
    net = _target_net(m) if eng is None else _target_net(m)._replace(vocab_parallel=True, allreduce=eng.allreduce)
    p = _pass(net, g, ach, ov, int(tp), tokens, seqs, context)
    host = (ov.step_ms + ov.seq_ms * np.asarray(seqs, dtype=np.float64)) * np.ones_like(p.linear_s)
    padding, engine_ms = np.zeros_like(p.linear_s), np.zeros_like(p.linear_s)
    if eng is not None:
        padded = _pass(net, g, ach, ov, int(tp), eng.padded(tokens, seqs), seqs, context, tokens)
        padding = _device_s(padded) - _device_s(p)
        engine_ms = engine_ms + (tokens > seqs) * (eng.step_ms + eng.verify_row_us * 1e-3 * tokens)
    return ForwardBreakdown(*(_as_result(x) for x in (p.linear_s * 1e3, p.attention_s * 1e3, p.comm_s * 1e3,
                                                      p.head_s * 1e3, host, padding * 1e3, engine_ms)))


def _pass_args(m, *, tp, **amounts):
    """A pass's amounts (``tokens``, ``seqs``, ``context``: numbers or arrays of them, each
    finite in ``0..COUNT_MAX``, broadcasting together) as float64 arrays, then ``tp`` (a whole
    number >= 1 dividing the model's attention heads); else CostModelError naming the argument."""
    out = []
    for name, value in amounts.items():
        arr = None
        if not isinstance(value, (str, bytes, bool, np.bool_)):
            try:
                raw = np.asarray(value)
            except (TypeError, ValueError):
                raw = None
            if raw is not None and raw.dtype.kind in "iuf":
                arr = raw.astype(np.float64)
            elif raw is not None and raw.dtype.kind == "O" and raw.size and all(is_number(x) for x in raw.flat):
                arr = np.array([number_float(x) for x in raw.flat]).reshape(raw.shape)
        if arr is None:
            raise CostModelError(f"{name} = {show(value)} must be a number or an array of numbers")
        bad = ~((arr >= 0.0) & (arr <= COUNT_MAX))  # NaN fails too
        if bad.any():
            v = arr[bad].flat[0]
            raise CostModelError(f"{name} = {v:g} must be a finite number in 0..{COUNT_MAX:,}")
        out.append(arr)
    try:
        np.broadcast_shapes(*(a.shape for a in out))
    except ValueError:
        raise CostModelError(f"{', '.join(amounts)} of shapes {', '.join(str(a.shape) for a in out)} do not "
                             "broadcast together") from None
    problem = int_problem(tp, "tp", 1)
    if problem:
        raise CostModelError(problem)
    if m.heads % tp:
        raise CostModelError(f"tp = {tp} does not divide {m.name}'s {m.heads} attention heads")
    return (*out, int(tp))


def _overheads(overheads) -> Overheads:
    if overheads is None:
        return HOST_OVERHEADS["cuda-graph"]
    if isinstance(overheads, str):
        return Overheads.named(overheads)
    if not isinstance(overheads, Overheads):
        raise CostModelError(f"overheads = {show(overheads)} must be an Overheads or one of the names "
                             f"{', '.join(HOST_OVERHEADS)}")
    return overheads


def _achieved(achieved, gpu: GpuSpec) -> Achieved:
    """``achieved`` checked (an :class:`Achieved`), or the GPU class's fitted fractions for None."""
    if achieved is None:
        return achieved_for(gpu)
    if not isinstance(achieved, Achieved):
        raise CostModelError(f"achieved = {show(achieved)} must be an Achieved (or None: the GPU class's fitted "
                             "fractions)")
    return achieved


def _specs(specs) -> dict:
    """User specs as :func:`~specsim.costmodel.load_specs` returns them (None: none)."""
    if specs is None:
        return {}
    if not isinstance(specs, dict):
        raise CostModelError(f"specs = {show(specs)} must be a dict such as load_specs returns ({{'gpu': {{name: "
                             "GpuSpec}}, ...}})")
    return specs


def _device_s(p: _Pass):
    return p.linear_s + p.attention_s + p.comm_s + p.head_s


def _energy_j(gpu: GpuSpec, tp: int, active_s, total_s):
    """Joules over the ``tp`` GPUs: idle power all step, plus the dynamic power while active."""
    return (gpu.idle_w * total_s + (gpu.tdp_w - gpu.idle_w) * active_s) * tp




def plain_decode_ms(gpu, model, *, tp: int = 1, context_tokens, batch, overheads=None, achieved=None):
    """Modelled ms of plain decode steps (k = 0) for many (batch, context) points at once.

    Parameters
    ----------
    batch, context_tokens : array_like of float, broadcast together
        Sequences per step and KV tokens per sequence.

    Returns
    -------
    ndarray(float64)
    """
    batch, context_tokens, tp = _pass_args(model_spec(model), batch=batch, context_tokens=context_tokens, tp=tp)
    return np.asarray(forward_breakdown(gpu, model, tokens=batch, seqs=batch, context=context_tokens, tp=tp,
                                        overheads=overheads, achieved=achieved).total_ms)


def plain_decode_power_w(gpu, model, *, tp: int = 1, context_tokens, batch, overheads=None, achieved=None):
    """Modelled mean board power per GPU of plain decode steps, broadcast like :func:`plain_decode_ms`."""
    ov = _overheads(overheads)
    gpu, model = gpu_spec(gpu), model_spec(model)
    batch, context_tokens, tp = _pass_args(model, batch=batch, context_tokens=context_tokens, tp=tp)
    p = _pass(_target_net(model), gpu, _achieved(achieved, gpu), ov, tp, batch, batch, context_tokens)
    total_s = _device_s(p) + (ov.step_ms + ov.seq_ms * batch) * 1e-3
    return _energy_j(gpu, tp, p.active_s, total_s) / (total_s * tp)



def _weight_bytes(net) -> float:
    if net is None:
        return 0.0
    always, experts, head = _weight_params(net)
    return (always + experts) * DTYPE_BYTES[net.weight_dtype] + head * DTYPE_BYTES[net.head_dtype]


def _kv_bytes_per_token(net) -> float:
    """KV-cache bytes one token adds, over all KV layers (none without a draft pass)."""
    if net is None:
        return 0.0
    if net.mla:
        return net.kv_layers * (net.mla[0] + net.mla[2]) * net.kv_bytes
    return 2.0 * net.kv_layers * net.kv_heads * net.head_dim * net.kv_bytes


def _matrix_s_per_row(g: GpuSpec, net: _Net) -> float:
    """Seconds of matrix work per row at 100% of the dense rates, whole box."""
    always, experts, head = _weight_params(net)
    active = always + (experts * net.experts_per_token / net.experts if net.experts else 0.0)
    return (2.0 * active / (g.matrix_tflops(net.weight_dtype) * 1e12)
            + 2.0 * head / (g.matrix_tflops(net.head_dtype) * 1e12))

