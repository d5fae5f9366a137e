"""A speculative step priced from its passes, and the cost table built from those prices (docs/tables.md).

A verify step at width ``n`` and depth ``k`` is one target pass over ``n(k+1)`` rows; its ``k``
draft steps are ``k`` chained drafter passes over ``n`` rows (a head on the target's hidden
states, a separate draft model, or, for n-gram, no pass), each priced by
:mod:`specsim.costmodel.passes`. An engine profile (:mod:`specsim.costmodel.engines`) adds what a
serving engine pays beyond the passes: per speculative step, draft pass, verify row and drafted
token, and CUDA-graph padding. What one modelled serve is priced on -- the specs, tensor
parallelism, context, host overheads, achieved fractions and engine profile -- travels as one
:class:`Setup` value.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from specsim import __version__
from specsim.costmodel.engines import EngineProfile, engine_profile
from specsim.costmodel.passes import (ACTIVATION_BYTES, Achieved, Overheads, _achieved, _Clock, _device_s,
                                      _draft_model, _drafter_net, _energy_j, _kv_bytes_per_token, _matrix_s_per_row,
                                      _overheads, _pass, _specs, _target_net, _weight_bytes)
from specsim.costmodel.specs import (DTYPE_BYTES, DrafterSpec, GpuSpec, ModelSpec, digest, drafter_spec, gpu_spec,
                                     model_spec)
from specsim.errors import CostModelError
from specsim._checks import COUNT_MAX, MAX_DEPTH, MAX_MODEL_WIDTHS, MAX_WIDTH, few, int_problem, is_int, show
from specsim.table import Cell, CostTable, SCHEMA, TableKey
from specsim.table._types import COST_FIELDS, DRAFT_J, DRAFT_MS, VERIFY_J, VERIFY_MS

DEFAULT_WIDTHS = (1, 2, 4, 8, 16, 32, 64, 128, 256)
DEFAULT_CONTEXT_TOKENS = 2048


@dataclass(frozen=True)
class Setup:
    """One modelled serve: what every pass of its steps is priced on.

    Built-in names are accepted for ``gpu``, ``model``, ``drafter``, ``overheads`` and
    ``engine`` and resolved on construction; the fields then hold the spec values.

    Attributes
    ----------
    gpu : GpuSpec
    model : ModelSpec
        The target.
    drafter : DrafterSpec
    tp : int
        Tensor-parallel GPUs the target and drafter are split over.
    context_tokens : int
        KV-cache tokens per sequence (prompt plus generated so far).
    overheads : Overheads
        Host overheads (default ``cuda-graph``; a name of :data:`~specsim.costmodel.passes.HOST_OVERHEADS`).
    achieved : Achieved
        Achieved fractions (None: the GPU class's fitted ones).
    engine : EngineProfile or None
        A serving engine's price of speculation on top of the passes (docs/tables.md#engine-profiles);
        None: the passes alone.
    models : dict or None
        User model specs by name, where a separate draft model (a drafter of kind ``"model"``) is
        looked up before the built-ins.
    """

    gpu: GpuSpec
    model: ModelSpec
    drafter: DrafterSpec
    tp: int = 1
    context_tokens: int = DEFAULT_CONTEXT_TOKENS
    overheads: Overheads = None
    achieved: Achieved = None
    engine: EngineProfile = None
    models: dict = None

    def __post_init__(self):
        gpu = gpu_spec(self.gpu)
        resolved = {"gpu": gpu, "model": model_spec(self.model, self.models),
                    "drafter": drafter_spec(self.drafter), "overheads": _overheads(self.overheads),
                    "achieved": _achieved(self.achieved, gpu), "engine": engine_profile(self.engine)}
        problems = [p for p in (int_problem(self.tp, "tp", 1), int_problem(self.context_tokens, "context_tokens"))
                    if p]
        if not problems and resolved["model"].heads % self.tp:
            problems.append(f"tp = {self.tp} does not divide {resolved['model'].name}'s "
                            f"{resolved['model'].heads} attention heads")
        if problems:
            raise CostModelError("the setup is refused", problems)
        for name, value in resolved.items():
            object.__setattr__(self, name, value)
        object.__setattr__(self, "tp", int(self.tp))
        object.__setattr__(self, "context_tokens", int(self.context_tokens))

    @property
    def draft_model(self):
        """The model spec a drafter of kind ``"model"`` runs (its ``dtype`` applied), else None."""
        return _draft_model(self.drafter, self.models)


def step_costs(setup: Setup, *, widths=DEFAULT_WIDTHS, max_k: int = 8):
    """Modelled cost of every (width, depth) cell, as a table's flat cost array.

    With an engine profile (``setup.engine``, docs/tables.md#engine-profiles) the passes run as
    the engine runs them (:func:`step_parts`); the engine's per-step and per-verify-row parts join
    the verify step, its per-draft-pass and per-drafted-token parts the draft steps (host time:
    idle power).

    Parameters
    ----------
    setup : Setup
        The specs and stack the passes are priced on.
    widths : array_like of int, shape (W,)
        Batch widths, >= 1.
    max_k : int
        Deepest draft depth.

    Returns
    -------
    ndarray(float64, ndim=3), shape (W, max_k + 1, 4)
        ``(verify_ms, verify_j, draft_ms, draft_j)``; the draft costs are exactly 0 at ``k = 0``.
    """
    parts = step_parts(setup, widths=widths, max_k=max_k)
    gpu, tp = setup.gpu, setup.tp
    k = np.arange(max_k + 1, dtype=np.float64).reshape(1, -1)
    verify_s = parts.verify_s + parts.verify_engine_s
    extra_s = parts.draft_extend_s + parts.draft_fuse_s
    out = np.empty((parts.verify_s.shape[0], max_k + 1, len(COST_FIELDS)))
    out[:, :, VERIFY_MS] = verify_s * 1e3
    out[:, :, VERIFY_J] = _energy_j(gpu, tp, parts.verify_active_s, verify_s)
    out[:, :, DRAFT_MS] = k * (parts.draft_pass_s * 1e3) + parts.draft_engine_s * 1e3 + extra_s * 1e3
    out[:, :, DRAFT_J] = k * _energy_j(gpu, tp, parts.draft_active_s, parts.draft_pass_s) + \
        _energy_j(gpu, tp, 0.0, parts.draft_engine_s) + _energy_j(gpu, tp, parts.draft_extra_active_s, extra_s)
    return out


class StepParts(NamedTuple):
    """Seconds of each part of every (width, depth) step (arrays of shape ``(W, max_k + 1)``,
    the draft pass's ``(W, 1)``): what :func:`step_costs` adds up, and ``[meta]`` shows."""

    verify_s: np.ndarray          # the verify pass (device and the stack's host overheads), padded rows included
    verify_padding_s: np.ndarray  # of which the rows the engine's CUDA graph pads the pass to
    verify_active_s: np.ndarray   # its busy seconds weighted by the share of dynamic power they draw
    verify_engine_s: np.ndarray   # the engine's per-step and per-verify-row parts
    draft_pass_s: np.ndarray      # one drafter pass (device and the stack's draft overhead), padding included
    draft_active_s: np.ndarray
    draft_engine_s: np.ndarray    # the engine's per-draft-pass and per-drafted-token parts, all k passes
    draft_extend_s: np.ndarray    # engine: the first draft pass's layers over the verified rows, beyond a pass
    draft_fuse_s: np.ndarray      # engine: an EAGLE-3 drafter's fused target features, once per step
    draft_extra_active_s: np.ndarray  # the busy seconds of those two, weighted as ``verify_active_s``
    engine_ms: dict               # the engine's parts by name (ms), or {}


def step_parts(setup: Setup, *, widths=DEFAULT_WIDTHS, max_k: int = 8) -> StepParts:
    """The parts :func:`step_costs` prices, by (width, depth) (same arguments).

    Without an engine, a step is one target pass over ``n(k+1)`` rows and ``k`` drafter passes
    over ``n`` rows. An engine (docs/tables.md#engine-profiles) runs them as the engines' EAGLE
    and MTP proposers do: each pass at its CUDA-graph size, the LM heads over the rows they sample
    only; the first draft pass runs the drafter's layers over every verified row (to write their
    KV and features) and samples one row per sequence; the embedding's all-reduce and the logits'
    gather on ``tp > 1``, and the all-reduces by the engine's own kernels where the GPUs' NVLink
    allows (``EngineProfile.allreduce``); a drafter with its own vocabulary maps its logits into the target's; and
    an EAGLE-3 drafter (``fuse_inputs > 2``) has the target keep that many layers' hidden states,
    fuses them once per step over the verified rows (a replicated projection), and attends over
    [embedding; feature] in its layer.
    """
    if not isinstance(setup, Setup):
        raise CostModelError(f"setup must be a Setup (specsim.costmodel.Setup(gpu, model, drafter, ...)), got "
                             f"{type(setup).__name__}")
    widths, problems = _width_list(widths)
    problems += [p for p in (_max_k_problem(max_k),) if p]
    if problems:
        raise CostModelError("the modelled steps' arguments are refused", problems)
    max_k = int(max_k)
    gpu, ov, ach, eng = setup.gpu, setup.overheads, setup.achieved, setup.engine
    tp, context_tokens = setup.tp, setup.context_tokens
    n = np.asarray(widths, dtype=np.float64).reshape(-1, 1)
    k = np.arange(max_k + 1, dtype=np.float64).reshape(1, -1)
    rows = n * (k + 1.0)
    host = (ov.step_ms + ov.seq_ms * n) * 1e-3
    if eng is None:
        target, draft_net = _target_net(setup.model), _drafter_net(setup.model, setup.drafter, setup.models)
        verify = _pass(target, gpu, ach, ov, tp, rows, n, context_tokens)
        verify_s = _device_s(verify) + host
        zero = np.zeros_like(verify_s)
        if draft_net is None:  # n-gram: no draft pass, the host's lookup only
            dstep_s, dactive_s = np.full_like(n, ov.draft_step_ms * 1e-3), np.zeros_like(n)
        else:
            draft = _pass(draft_net, gpu, ach, ov, tp, n, n, context_tokens)
            dstep_s, dactive_s = _device_s(draft) + ov.draft_step_ms * 1e-3, draft.active_s
        return StepParts(verify_s, zero, verify.active_s, zero, dstep_s, dactive_s, zero, zero, zero, zero, {})

    target, draft_net, fused = _engine_nets(setup)
    verify = _pass(target, gpu, ach, ov, tp, eng.padded(rows), n, context_tokens, rows)
    verify_s = _device_s(verify) + host
    padding = verify_s - (_device_s(_pass(target, gpu, ach, ov, tp, rows, n, context_tokens, rows)) + host)
    spec = (k > 0).astype(np.float64)
    extend, fuse, extra_active = (np.zeros_like(verify_s) for _ in range(3))
    if draft_net is None:  # n-gram: no draft pass, the host's lookup only
        dstep_s, dactive_s = np.full_like(n, ov.draft_step_ms * 1e-3), np.zeros_like(n)
    else:
        draft = _pass(draft_net, gpu, ach, ov, tp, eng.padded(n), n, context_tokens, n)
        dstep_s, dactive_s = _device_s(draft) + ov.draft_step_ms * 1e-3, draft.active_s
        first = _pass(draft_net, gpu, ach, ov, tp, eng.padded(rows), n, context_tokens, n)
        extend = spec * (_device_s(first) - _device_s(draft))
        extra_active = spec * (first.active_s - draft.active_s)
        if fused:
            fuse_s, fuse_active = _fused_features(setup, target, fused, rows)
            fuse, extra_active = spec * fuse_s, extra_active + spec * fuse_active
    ms = {name: np.broadcast_to(v, verify_s.shape) for name, v in eng.speculation_ms(n, k).items()}
    if draft_net is None:
        ms["draft_passes"] = np.zeros_like(verify_s)  # no pass to pay for
    return StepParts(verify_s, padding, verify.active_s, (ms["step"] + ms["verify_rows"]) * 1e-3, dstep_s,
                     dactive_s, (ms["draft_passes"] + ms["sampled_tokens"]) * 1e-3, extend, fuse, extra_active, ms)


def _engine_nets(setup: Setup):
    """The target's and drafter's nets as an engine runs them (see :func:`step_parts`), and the
    number of target layers an EAGLE-3 drafter fuses (0 for others)."""
    m, d = setup.model, setup.drafter
    ar = setup.engine.allreduce
    target = _target_net(m)._replace(vocab_parallel=True, allreduce=ar)
    draft = _drafter_net(m, d, setup.models)
    if draft is None:
        return target, None, 0
    draft = draft._replace(vocab_parallel=True, vocab_map=m.vocab if draft.head_rows != m.vocab else 0, allreduce=ar)
    if d.kind == "head" and d.fuse_inputs > 2:  # EAGLE-3: the fusing projection leaves the pass
        return target, draft._replace(fuse_inputs=0, qkv_inputs=2), d.fuse_inputs
    return target, draft, 0


def _fused_features(setup: Setup, target, fused: int, rows):
    """Seconds (and busy seconds, weighted) of an EAGLE-3 drafter's per-step inputs over ``rows``:
    the target adds the residual into each of ``fused`` layers' hidden states and concatenates
    them; the drafter's projection (``fused x hidden -> hidden``, replicated on every rank) fuses
    them."""
    a, h = ACTIVATION_BYTES, target.hidden
    w, dt = DTYPE_BYTES[setup.drafter.dtype or setup.model.dtype], setup.drafter.dtype or setup.model.dtype
    clock = _Clock(setup.gpu, setup.achieved, np.shape(rows))
    clock.stream(fused, 3.0 * rows * h * a)
    clock.stream(1, 2.0 * fused * rows * h * a)
    clock.gemm(1, fused * h * h * w, rows * (fused + 1) * h * a, 2.0 * rows * fused * h * h, dt)
    time_s, mem_s, flop_s = clock.take()
    share = setup.overheads.memory_power
    return time_s, np.minimum(share * mem_s + (1.0 - share) * flop_s, time_s)


def model_table(gpu, model, drafter, *, tp: int = 1, context_tokens: int = DEFAULT_CONTEXT_TOKENS,
                widths=DEFAULT_WIDTHS, max_k: int = 8, overheads=None, specs=None, engine=None):
    """A modelled cost table: every width at every depth ``0..=max_k``, never marked as measured.

    Parameters
    ----------
    gpu, model, drafter : str or spec
        Names of built-in specs (or of specs in ``specs``), or spec objects. Another weight format
        of the target (e.g. ``"fp8"``) is a model value: ``model_spec(name, dtype="fp8")``.
    tp : int
        Tensor-parallel GPUs; the box class is ``gpu`` with ``-tpN`` appended when ``tp > 1``.
    context_tokens : int
        KV-cache tokens per sequence the costs assume.
    widths : sequence of int
        Batch widths, >= 1, distinct.
    max_k : int
        Deepest draft depth, >= 0.
    overheads : Overheads or str, optional
        Host overheads: ``"cuda-graph"`` (the default) or ``"eager"`` (``HOST_OVERHEADS``), or
        an :class:`Overheads`.
    specs : dict, optional
        User specs as :func:`specsim.costmodel.load_specs` returns them.
    engine : str or EngineProfile, optional
        A serving engine's price of speculation on top of the passes (``"vllm"``; see
        :class:`Setup`); ``[meta]`` then gives its figures (``engine_*``) and each part of the
        widest, deepest step (``step_parts_*``). None: the passes alone, as before.

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
    specs = _specs(specs)
    g = gpu_spec(gpu, specs.get("gpu"))
    m = model_spec(model, specs.get("model"))
    d = drafter_spec(drafter, specs.get("drafter"))
    ov = _overheads(overheads)
    eng = engine_profile(engine)
    widths, tp, context_tokens, max_k = _check_args(widths, tp, context_tokens, max_k, m)
    models = specs.get("model")
    dm = _draft_model(d, models)
    if dm is not None and dm.vocab != m.vocab:
        raise CostModelError(f"drafter {d.name!r}: its draft model {dm.name!r} has a vocabulary of {dm.vocab:,} "
                             f"tokens, {m.name!r} one of {m.vocab:,}: a draft model drafts in its target's vocabulary")
    if dm is not None and tp > 1 and dm.heads % tp:
        raise CostModelError(f"tp = {tp} does not divide the draft model {dm.name}'s {dm.heads} attention heads")
    _check_fits(g, m, d, tp, context_tokens, max(widths), max_k, models)
    setup = Setup(g, m, d, tp, context_tokens, ov, None, eng, models)
    ach = setup.achieved

    costs = step_costs(setup, widths=widths, max_k=max_k)
    cells = [Cell(int(n), kk, *map(float, costs[i, kk])) for i, n in enumerate(widths) for kk in range(max_k + 1)]

    stack = dataclasses.asdict(ov) | {f"achieved_{name}": value for name, value in ach.constants().items()}
    if eng is not None:  # only then: a table without an engine keeps its digests
        stack |= {"engine_profile": eng.name} | {f"engine_{name}": value for name, value in eng.constants().items()}
        if eng.allreduce is not None:  # where its all-reduce runs depends on the GPUs' links
            stack["engine_interconnect"] = g.interconnect
    key = TableKey(
        SCHEMA,
        g.name if tp == 1 else f"{g.name}-tp{tp}",
        f"{m.name}/{d.name}-{m.dtype}",
        {
            "verify": "model:" + digest(g, m, tp=tp, context_tokens=context_tokens, stack=stack),
            "draft": "model:" + digest(g, m, d, *([dm] if dm is not None else []), tp=tp,
                                       context_tokens=context_tokens, stack=stack),
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
        "stack_achieved_source": ach.source,
        **({"draft_model": dm.name, "draft_model_source": dm.source or "user spec"} if dm is not None else {}),
        **(_engine_meta(setup, widths, max_k) if eng is not None else {}),
        **serving_meta(g, m, d, tp, models),
        "tool": f"specsim {__version__}",
    }
    text = CostTable.render(key, cells, meta=meta)
    return CostTable.parse(text, f"<modelled table {key.box_class} {key.recipe}>")


def _engine_meta(setup: Setup, widths, max_k: int) -> dict:
    """``[meta]`` of an engine's table: its source, and each part of the widest width's deepest step
    (ms), so a user sees where a step's milliseconds go."""
    parts = step_parts(setup, widths=[widths[-1]], max_k=max_k)
    at = (0, max_k)
    shown = {
        "verify_pass": parts.verify_s[at] - parts.verify_padding_s[at],
        "graph_padding": parts.verify_padding_s[at],
        "draft_passes": max_k * parts.draft_pass_s[0, 0],  # at their graph size
        "draft_extend": parts.draft_extend_s[at],  # the first pass's layers over the verified rows
        "draft_fuse": parts.draft_fuse_s[at],      # an EAGLE-3 drafter's fused target features
    }
    out = {"engine_source": setup.engine.source, "step_parts_at": f"width {widths[-1]}, depth {max_k}"}
    for name, seconds in shown.items():
        out[f"step_parts_{name}_ms"] = float(seconds) * 1e3
    for name, ms in parts.engine_ms.items():
        out[f"step_parts_engine_{name}_ms"] = float(ms[at])
    return out


# vLLM's default share of GPU memory the engine claims (weights, then KV cache).
GPU_MEMORY_UTILIZATION = 0.9
# Share of the dense matrix rate a long prefill sustains (compute bound, unlike decode).
PREFILL_UTILISATION = 0.6


def serving_meta(g, m, d, tp: int, models=None) -> dict:
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
    target, draft = _target_net(m), _drafter_net(m, d, models)
    weights = (_weight_bytes(target) + _weight_bytes(draft)) / tp
    per_token = _kv_bytes_per_token(target) + _kv_bytes_per_token(draft)
    free = g.memory_gb * 1e9 * GPU_MEMORY_UTILIZATION - weights
    token_s = _matrix_s_per_row(g, target) / (tp * PREFILL_UTILISATION)
    step_s = weights / (g.bandwidth_gbs * 1e9)
    out = {
        "prefill_ms_per_token": token_s * 1e3, "prefill_j_per_token": token_s * g.tdp_w * tp,
        "prefill_ms_per_step": step_s * 1e3, "prefill_j_per_step": step_s * g.tdp_w * tp,
        "idle_w": float(g.idle_w * tp),
    }
    if free > 0 and per_token > 0:
        out["kv_capacity_tokens"] = int(min(free * min(tp, m.kv_heads) // per_token, COUNT_MAX))
    return out


def _width_list(widths) -> tuple:
    """``(widths as a list of int, problems)``: refused at once when not a list of integers, else
    the problems of an empty list, too many widths, or one outside ``1..MAX_WIDTH``."""
    try:
        items = list(widths.tolist() if isinstance(widths, np.ndarray) else widths)
    except TypeError:
        items = None
    if items is None or isinstance(widths, (str, bytes)) or not all(is_int(w) for w in items):
        # int() would cut 1.5 to 1 and read "3" as 3
        raise CostModelError(f"widths {show(widths)} are not a list of integers") from None
    widths, problems = [int(w) for w in items], []
    if not widths:
        problems.append("widths is empty: give at least one batch width, e.g. 1,2,4,8")
    if len(widths) > MAX_MODEL_WIDTHS:
        problems.append(f"{len(widths):,} widths; at most {MAX_MODEL_WIDTHS:,} (docs/limits.md)")
    bad = [w for w in widths if not 1 <= w <= MAX_WIDTH]
    if bad:
        problems.append(f"every width must be >= 1 and <= {MAX_WIDTH:,} (docs/limits.md), got {few(bad)}")
    return widths, problems


def _max_k_problem(max_k):
    return int_problem(max_k, "max_k", 0, MAX_DEPTH, "the deepest draft depth")


def _check_args(widths, tp, context_tokens, max_k, m):
    widths, problems = _width_list(widths)
    if len(set(widths)) != len(widths):
        problems.append(f"widths repeat: {few(sorted({w for w in widths if widths.count(w) > 1}))}")
    p = int_problem(tp, "tp", 1)
    if p:
        problems.append(p)
    elif m.heads % tp:
        problems.append(f"tp = {tp} does not divide {m.name}'s {m.heads} attention heads")
    problems += [p for p in (int_problem(context_tokens, "context_tokens"), _max_k_problem(max_k)) if p]
    if problems:
        raise CostModelError("the modelled table's arguments are refused", problems)
    return sorted(widths), int(tp), int(context_tokens), int(max_k)


def _check_fits(g, m, d, tp, context_tokens, widest, max_k, models=None):
    """Refuse a configuration whose weights and KV cache at the widest width overflow the GPUs."""
    target, draft = _target_net(m), _drafter_net(m, d, models)
    weights = (_weight_bytes(target) + _weight_bytes(draft)) / tp
    per_seq = (context_tokens + max_k + 1) * (_kv_bytes_per_token(target) + _kv_bytes_per_token(draft))
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
