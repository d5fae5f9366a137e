"""The analytic cost model: a roofline per forward pass, turned into a cost table (docs/tables.md).

One forward pass over ``rows`` tokens of ``seqs`` sequences, each with ``context`` tokens of KV
cache, on ``tp`` GPUs in tensor parallel, costs

- weights: bytes read over memory bandwidth, or matrix FLOPs over the dense matrix rate of the
  weights' format, whichever binds;
- attention: KV-cache bytes over bandwidth, or its FLOPs over the bf16 rate, whichever binds;
- tensor-parallel all-reduces (two per layer, ring: ``2(tp-1)`` hop latencies plus
  ``2(tp-1)/tp`` of the activations over the link);
- host overhead: a fixed cost per forward pass and, for the target's pass, a cost per sequence
  (scheduling, sampling, bookkeeping on the CPU).

Bandwidth and matrix rates are derated by the efficiencies of :class:`Overheads`. A verify step at
width ``n`` and depth ``k`` is one pass over ``n(k+1)`` rows; its ``k`` draft steps are ``k``
chained drafter passes over ``n`` rows. Energy is board power times time, summed over the ``tp``
GPUs: idle power for the whole step, plus the dynamic power (TDP - idle) for the share of the step
the GPU streams memory (weighted by ``Overheads.memory_power``) or multiplies (communication and
host time count as idle). Power therefore stays between idle and TDP.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from specsim import __version__
from specsim.costmodel.specs import (DTYPE_BYTES, DrafterSpec, GpuSpec, ModelSpec, digest,
                                     drafter_spec, gpu_spec, model_spec)
from specsim.errors import CostModelError

DEFAULT_WIDTHS = (1, 2, 4, 8, 16, 32, 64, 128, 256)
DEFAULT_CONTEXT_TOKENS = 2048


@dataclass(frozen=True)
class Overheads:
    """What the serving stack adds to the roofline: a few global constants.

    The defaults are calibrated once, globally, on the Splitwise profiles of Llama-2-70B decode on
    A100 and H100 at tensor parallel 2, 4 and 8 and batch 1-64 (vLLM-era eager serving, fp16):
    a coarse grid over ``memory_efficiency``, ``step_ms``, ``seq_ms`` and ``hop_us`` that
    minimised the mean relative error of the plain-decode step time (``matrix_efficiency`` is set,
    not fitted: those steps never bind on compute), and ``memory_power`` set so the modelled A100
    mean power has no bias against the same profiles' average power. No point is fitted on its
    own; Bloom-176B from the same profiles and a GB10 table from another serve are held out and
    their errors reported by the tests.

    Attributes
    ----------
    memory_efficiency : float
        Fraction of datasheet bandwidth that weight and KV streaming reaches.
    matrix_efficiency : float
        Fraction of the dense matrix rate that GEMMs and attention reach.
    step_ms : float
        Host/launch overhead of one target forward pass.
    seq_ms : float
        Host overhead per sequence per target forward pass.
    draft_step_ms : float
        Host/launch overhead of one drafter pass. Not calibrated (no public drafter profiles):
        an assumption of a small, graph-captured launch.
    hop_us : float
        Latency of one hop of a ring all-reduce.
    memory_power : float
        Share of the dynamic power (TDP - idle) a kernel draws while streaming memory at the
        derated bandwidth; saturating the tensor cores draws the rest. Calibrated on the
        Splitwise A100 average-power profiles of the same runs.
    """

    memory_efficiency: float = 0.7
    matrix_efficiency: float = 0.6
    step_ms: float = 5.0
    seq_ms: float = 0.25
    draft_step_ms: float = 0.5
    hop_us: float = 10.0
    memory_power: float = 0.8

    def __post_init__(self):
        problems = []
        for f in ("memory_efficiency", "matrix_efficiency", "memory_power"):
            v = getattr(self, f)
            if not 0.0 < v <= 1.0:
                problems.append(f"{f} = {v!r} must be in (0, 1]")
        for f in ("step_ms", "seq_ms", "draft_step_ms", "hop_us"):
            v = getattr(self, f)
            if not (np.isfinite(v) and v >= 0.0):
                problems.append(f"{f} = {v!r} must be >= 0")
        if problems:
            raise CostModelError("the stack overheads are refused", problems)


class _Net(NamedTuple):
    """One network's forward pass reduced to the numbers the roofline needs (per box, not per GPU)."""

    fixed_bytes: float        # weights every pass reads whatever the rows
    expert_bytes: float       # all routed experts of all MoE layers
    expert_fraction: float    # experts_per_token / experts (0 for dense)
    matrix_s_per_row: float   # seconds of matrix work per row at 100% of the rates, whole box
    kv_bytes_per_token: float  # per sequence per context token
    attn_flops_per_token: float  # per row per context token
    allreduces: int
    hidden: int
    kv_heads: int


def _target_net(gpu: GpuSpec, m: ModelSpec) -> _Net:
    wbytes, hbytes = DTYPE_BYTES[m.dtype], DTYPE_BYTES[m.lm_head_dtype]
    layer_active = m.always_params + m.moe_layers * m.experts_per_token * m.expert_params
    matrix = (2.0 * layer_active / (gpu.matrix_tflops(m.dtype) * 1e12)
              + 2.0 * m.head_params / (gpu.matrix_tflops(m.lm_head_dtype) * 1e12))
    return _Net(
        fixed_bytes=m.always_params * wbytes + m.head_params * hbytes,
        expert_bytes=m.moe_layers * m.experts * m.expert_params * wbytes,
        expert_fraction=m.experts_per_token / m.experts if m.experts else 0.0,
        matrix_s_per_row=matrix,
        kv_bytes_per_token=m.kv_bytes_per_token,
        attn_flops_per_token=4.0 * m.kv_layer_count * m.heads * m.head_dim,
        allreduces=2 * m.layers,
        hidden=m.hidden,
        kv_heads=m.kv_heads,
    )


def _drafter_net(gpu: GpuSpec, m: ModelSpec, d: DrafterSpec) -> _Net:
    dtype = d.dtype or m.dtype
    wbytes = DTYPE_BYTES[dtype]
    moe = d.moe and m.experts > 0
    if moe:
        layer_always = m.attention_params + m.mlp_matrices * m.hidden * m.shared_intermediate + m.hidden * m.experts
        layer_experts = m.experts * m.expert_params
        layer_active = layer_always + m.experts_per_token * m.expert_params
    else:
        intermediate = m.intermediate or m.expert_intermediate * max(m.experts_per_token, 1)
        layer_always = m.attention_params + m.mlp_matrices * m.hidden * intermediate
        layer_experts = 0
        layer_active = layer_always
    fuse = d.fuse_inputs * m.hidden * m.hidden
    if d.draft_vocab:
        head_params, head_dtype = d.draft_vocab * m.hidden, dtype
    else:
        head_params, head_dtype = m.head_params, m.lm_head_dtype
    matrix = (2.0 * (d.layers * layer_active + fuse) / (gpu.matrix_tflops(dtype) * 1e12)
              + 2.0 * head_params / (gpu.matrix_tflops(head_dtype) * 1e12))
    return _Net(
        fixed_bytes=(d.layers * layer_always + fuse) * wbytes + head_params * DTYPE_BYTES[head_dtype],
        expert_bytes=d.layers * layer_experts * wbytes,
        expert_fraction=m.experts_per_token / m.experts if moe else 0.0,
        matrix_s_per_row=matrix,
        kv_bytes_per_token=2.0 * d.layers * m.kv_heads * m.head_dim * DTYPE_BYTES[m.kv_dtype],
        attn_flops_per_token=4.0 * d.layers * m.heads * m.head_dim,
        allreduces=2 * d.layers,
        hidden=m.hidden,
        kv_heads=m.kv_heads,
    )


def _pass_seconds(net: _Net, gpu: GpuSpec, ov: Overheads, tp: int, rows, seqs, context):
    """Seconds of one pass; arrays broadcast.

    Returns
    -------
    busy_s : ndarray(float64)
        Roofline time of the weight and attention kernels (the binding side of each).
    comm_s : ndarray(float64)
        Tensor-parallel all-reduce time.
    active_s : ndarray(float64)
        Busy seconds weighted by how much of the dynamic (TDP - idle) power they draw.
    """
    rows = np.asarray(rows, dtype=np.float64)
    seqs = np.asarray(seqs, dtype=np.float64)
    bandwidth = gpu.bandwidth_gbs * 1e9 * ov.memory_efficiency
    bf16 = gpu.bf16_tflops * 1e12 * ov.matrix_efficiency
    # Expected share of routed experts that at least one of `rows` tokens picks, routing uniform.
    touched = 1.0 - (1.0 - net.expert_fraction) ** rows
    weight_bytes = (net.fixed_bytes + net.expert_bytes * touched) / tp
    weights_mem_s = weight_bytes / bandwidth
    weights_flop_s = rows * net.matrix_s_per_row / (tp * ov.matrix_efficiency)
    # KV heads are split over the TP ranks, replicated once tp exceeds them.
    kv_bytes = seqs * context * net.kv_bytes_per_token / min(tp, net.kv_heads)
    attn_mem_s = kv_bytes / bandwidth
    attn_flop_s = rows * context * net.attn_flops_per_token / (tp * bf16)
    busy_s = np.maximum(weights_mem_s, weights_flop_s) + np.maximum(attn_mem_s, attn_flop_s)
    # Streaming memory draws a share of the dynamic power, saturating the tensor cores the rest.
    share = ov.memory_power
    active_s = share * (weights_mem_s + attn_mem_s) + (1.0 - share) * (weights_flop_s + attn_flop_s)
    active_s = np.minimum(active_s, busy_s)
    if tp > 1:
        link = gpu.link_gbs * 1e9
        per_reduce = 2 * (tp - 1) * ov.hop_us * 1e-6 + 2.0 * (tp - 1) / tp * rows * net.hidden * 2.0 / link
        comm_s = net.allreduces * per_reduce
    else:
        comm_s = np.zeros_like(rows)
    return busy_s, comm_s, active_s


def _energy_j(gpu: GpuSpec, tp: int, active_s, total_s):
    """Joules over the ``tp`` GPUs: idle power all step, plus the dynamic power while active."""
    return (gpu.idle_w * total_s + (gpu.tdp_w - gpu.idle_w) * active_s) * tp


def step_costs(gpu, model, drafter, *, tp: int = 1, context_tokens: int = DEFAULT_CONTEXT_TOKENS,
               widths=DEFAULT_WIDTHS, max_k: int = 8, overheads=None):
    """Modelled cost of every (width, depth) cell, as a table's flat cost array.

    Parameters
    ----------
    gpu : GpuSpec
    model : ModelSpec
    drafter : DrafterSpec
    tp : int
        Tensor-parallel GPUs the target and drafter are split over.
    context_tokens : int
        KV-cache tokens per sequence (prompt plus generated so far).
    widths : array_like of int, shape (W,)
        Batch widths, >= 1.
    max_k : int
        Deepest draft depth.
    overheads : Overheads, optional

    Returns
    -------
    ndarray(float64, ndim=3), shape (W, max_k + 1, 4)
        ``(verify_ms, verify_j, draft_ms, draft_j)``; the draft costs are exactly 0 at ``k = 0``.
    """
    ov = overheads or Overheads()
    n = np.asarray(widths, dtype=np.float64).reshape(-1, 1)
    k = np.arange(max_k + 1, dtype=np.float64).reshape(1, -1)

    target = _target_net(gpu, model)
    rows = n * (k + 1.0)
    busy, comm, active = _pass_seconds(target, gpu, ov, tp, rows, n, context_tokens)
    verify_s = busy + comm + (ov.step_ms + ov.seq_ms * n) * 1e-3
    verify_j = _energy_j(gpu, tp, active, verify_s)

    draft = _drafter_net(gpu, model, drafter)
    dbusy, dcomm, dactive = _pass_seconds(draft, gpu, ov, tp, n, n, context_tokens)
    dstep_s = dbusy + dcomm + ov.draft_step_ms * 1e-3
    dstep_j = _energy_j(gpu, tp, dactive, dstep_s)

    from specsim.table._types import COST_FIELDS, DRAFT_J, DRAFT_MS, VERIFY_J, VERIFY_MS

    out = np.empty((n.shape[0], max_k + 1, len(COST_FIELDS)))
    out[:, :, VERIFY_MS] = verify_s * 1e3
    out[:, :, VERIFY_J] = verify_j
    out[:, :, DRAFT_MS] = k * (dstep_s * 1e3)
    out[:, :, DRAFT_J] = k * dstep_j
    return out


def plain_decode_ms(gpu, model, *, tp: int = 1, context_tokens, batch, overheads=None):
    """Modelled ms of plain decode steps (k = 0) for many (batch, context) points at once.

    Parameters
    ----------
    batch, context_tokens : array_like of float, broadcast together
        Sequences per step and KV tokens per sequence.

    Returns
    -------
    ndarray(float64)
    """
    ov = overheads or Overheads()
    gpu, model = gpu_spec(gpu), model_spec(model)
    batch = np.asarray(batch, dtype=np.float64)
    busy, comm, _ = _pass_seconds(_target_net(gpu, model), gpu, ov, tp, batch, batch,
                                  np.asarray(context_tokens, dtype=np.float64))
    return (busy + comm) * 1e3 + ov.step_ms + ov.seq_ms * batch


def plain_decode_power_w(gpu, model, *, tp: int = 1, context_tokens, batch, overheads=None):
    """Modelled mean board power per GPU of plain decode steps, broadcast like :func:`plain_decode_ms`."""
    ov = overheads or Overheads()
    gpu, model = gpu_spec(gpu), model_spec(model)
    batch = np.asarray(batch, dtype=np.float64)
    busy, comm, active = _pass_seconds(_target_net(gpu, model), gpu, ov, tp, batch, batch,
                                       np.asarray(context_tokens, dtype=np.float64))
    total_s = busy + comm + (ov.step_ms + ov.seq_ms * batch) * 1e-3
    return _energy_j(gpu, tp, active, total_s) / (total_s * tp)


def model_table(gpu, model, drafter, *, tp: int = 1, context_tokens: int = DEFAULT_CONTEXT_TOKENS,
                widths=DEFAULT_WIDTHS, max_k: int = 8, dtype=None, overheads=None, specs=None):
    """A modelled cost table: every width at every depth ``0..=max_k``, never marked as measured.

    Parameters
    ----------
    gpu, model, drafter : str or spec
        Names of built-in specs (or of specs in ``specs``), or spec objects.
    tp : int
        Tensor-parallel GPUs; the box class is ``gpu`` with ``-tpN`` appended when ``tp > 1``.
    context_tokens : int
        KV-cache tokens per sequence the costs assume.
    widths : sequence of int
        Batch widths, >= 1, distinct.
    max_k : int
        Deepest draft depth, >= 0.
    dtype : str, optional
        Override of the target's weight format (e.g. ``"fp8"``).
    overheads : Overheads, optional
    specs : dict, optional
        User specs as :func:`specsim.costmodel.load_specs` returns them.

    Returns
    -------
    CostTable
        Key: box class, recipe ``model/drafter-dtype`` and ``model:`` digests of the spec values;
        ``[meta] energy_source = "model"`` and the specs that made it.

    Raises
    ------
    CostModelError
        Unknown names (listing the known ones), bad arguments, or a model that does not fit.
    """
    from specsim.table import SCHEMA, Cell, CostTable, TableKey

    specs = specs or {}
    g = gpu_spec(gpu, specs.get("gpu"))
    m = model_spec(model, specs.get("model"))
    d = drafter_spec(drafter, specs.get("drafter"))
    ov = overheads or Overheads()
    if dtype is not None:
        if dtype not in DTYPE_BYTES:
            raise CostModelError(f"dtype {dtype!r} is not one of {', '.join(DTYPE_BYTES)}")
        m = dataclasses.replace(m, dtype=dtype)
    widths, tp, context_tokens, max_k = _check_args(widths, tp, context_tokens, max_k, m)
    _check_fits(g, m, d, tp, context_tokens, max(widths), max_k)

    costs = step_costs(g, m, d, tp=tp, context_tokens=context_tokens, widths=widths, max_k=max_k, overheads=ov)
    cells = [Cell(int(n), kk, *map(float, costs[i, kk])) for i, n in enumerate(widths) for kk in range(max_k + 1)]

    stack = dataclasses.asdict(ov)
    key = TableKey(
        SCHEMA,
        g.name if tp == 1 else f"{g.name}-tp{tp}",
        f"{m.name}/{d.name}-{m.dtype}",
        {
            "verify": "model:" + digest(g, m, tp=tp, context_tokens=context_tokens, stack=stack),
            "draft": "model:" + digest(g, m, d, tp=tp, context_tokens=context_tokens, stack=stack),
        },
    )
    meta = {
        "energy_source": "model",
        "cost_source": "model",
        "note": "analytic roofline estimate (specsim.costmodel), not a measurement",
        "gpu": g.name,
        "gpu_source": g.source or "user spec",
        "model": m.name,
        "model_source": m.source or "user spec",
        "drafter": d.name,
        "drafter_source": d.source or "user spec",
        "dtype": m.dtype,
        "tp": tp,
        "context_tokens": context_tokens,
        **{f"stack_{name}": value for name, value in stack.items()},
        **serving_meta(g, m, d, tp),
        "tool": f"specsim {__version__}",
    }
    text = CostTable.render(key, cells, meta=meta)
    return CostTable.parse(text, f"<modelled table {key.box_class} {key.recipe}>")


# vLLM's default share of GPU memory the engine claims (weights, then KV cache).
GPU_MEMORY_UTILIZATION = 0.9
# Share of the dense matrix rate a long prefill sustains (compute bound, unlike decode).
PREFILL_UTILISATION = 0.6


def serving_meta(g, m, d, tp: int) -> dict:
    """What a serving simulation needs beyond the step costs, from the same specs (written to a
    modelled table's ``[meta]``; see docs/simulation.md, "Prefill cost" and "KV cache").

    - ``kv_capacity_tokens``: KV tokens (target and drafter caches together) that fit in
      ``GPU_MEMORY_UTILIZATION`` of the GPUs' memory beside the weights.
    - ``prefill_ms_per_token``/``prefill_j_per_token``: the target's matrix work per token at
      ``PREFILL_UTILISATION`` of the dense rate, at full board power.
    - ``prefill_ms_per_step``/``prefill_j_per_step``: one read of the weights at the memory
      bandwidth, the floor every prefill step pays, at full board power.
    - ``idle_w``: the GPUs' idle power.
    """
    target, draft = _target_net(g, m), _drafter_net(g, m, d)
    weights = (target.fixed_bytes + target.expert_bytes + draft.fixed_bytes + draft.expert_bytes) / tp
    per_token = target.kv_bytes_per_token + draft.kv_bytes_per_token
    free = g.memory_gb * 1e9 * GPU_MEMORY_UTILIZATION - weights
    token_s = target.matrix_s_per_row / (tp * PREFILL_UTILISATION)
    step_s = weights / (g.bandwidth_gbs * 1e9)
    out = {
        "prefill_ms_per_token": token_s * 1e3, "prefill_j_per_token": token_s * g.tdp_w * tp,
        "prefill_ms_per_step": step_s * 1e3, "prefill_j_per_step": step_s * g.tdp_w * tp,
        "idle_w": float(g.idle_w * tp),
    }
    if free > 0 and per_token > 0:
        from specsim._checks import COUNT_MAX

        out["kv_capacity_tokens"] = int(min(free * min(tp, m.kv_heads) // per_token, COUNT_MAX))
    return out


def _check_args(widths, tp, context_tokens, max_k, m):
    from specsim._checks import MAX_DEPTH, MAX_MODEL_WIDTHS, MAX_WIDTH, few, int_problem, show

    problems = []
    try:
        widths = [int(w) for w in widths]
    except (TypeError, ValueError):
        raise CostModelError(f"widths {show(widths)} are not a list of integers") from None
    if not widths:
        problems.append("widths is empty: give at least one batch width, e.g. 1,2,4,8")
    if len(widths) > MAX_MODEL_WIDTHS:
        problems.append(f"{len(widths):,} widths; at most {MAX_MODEL_WIDTHS:,} (docs/limits.md)")
    bad = [w for w in widths if not 1 <= w <= MAX_WIDTH]
    if bad:
        problems.append(f"every width must be >= 1 and <= {MAX_WIDTH:,} (docs/limits.md), got {few(bad)}")
    if len(set(widths)) != len(widths):
        problems.append(f"widths repeat: {few(sorted({w for w in widths if widths.count(w) > 1}))}")
    p = int_problem(tp, "tp", 1)
    if p:
        problems.append(p)
    elif m.heads % tp:
        problems.append(f"tp = {tp} does not divide {m.name}'s {m.heads} attention heads")
    problems += [p for p in (int_problem(context_tokens, "context_tokens"),
                             int_problem(max_k, "max_k", 0, MAX_DEPTH, "the deepest draft depth")) if p]
    if problems:
        raise CostModelError("the modelled table's arguments are refused", problems)
    return sorted(widths), int(tp), int(context_tokens), int(max_k)


def _check_fits(g, m, d, tp, context_tokens, widest, max_k):
    """Refuse a configuration whose weights and KV cache at the widest width overflow the GPUs."""
    target, draft = _target_net(g, m), _drafter_net(g, m, d)
    weights = (target.fixed_bytes + target.expert_bytes + draft.fixed_bytes + draft.expert_bytes) / tp
    per_seq = (context_tokens + max_k + 1) * (target.kv_bytes_per_token + draft.kv_bytes_per_token)
    kv = widest * per_seq / min(tp, m.kv_heads)
    capacity = g.memory_gb * 1e9
    if weights > capacity:
        need = int(np.ceil(weights * tp / capacity))
        raise CostModelError(
            f"{m.name} with {d.name} needs {weights * tp / 1e9:.1f} GB of {m.dtype} weights, more than "
            f"{tp} x {g.name} ({g.memory_gb:g} GB each) hold: use --tp {max(need, tp + 1)} or more, or a smaller dtype"
        )
    if weights + kv > capacity:
        fits = int((capacity - weights) * min(tp, m.kv_heads) // per_seq)
        raise CostModelError(
            f"at width {widest} and {context_tokens} context tokens the KV cache ({kv / 1e9:.1f} GB per GPU) and "
            f"weights ({weights / 1e9:.1f} GB per GPU) overflow {g.name}'s {g.memory_gb:g} GB: "
            f"at most {fits} sequences fit; lower the widths or --context-tokens, or raise --tp"
        )
