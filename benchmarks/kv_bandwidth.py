"""The KV cache read against the bandwidth paged decode attention reaches (docs/tables.md, "KV reads
against measured attention kernels").

Run: ``python -m benchmarks.kv_bandwidth [--out FILE.md]`` from the repository root. Prints:

- the published measurements of paged decode attention's achieved bandwidth (:data:`SOURCES`),
  each as GB/s and as a fraction of its GPU's datasheet bandwidth, beside the fraction the roofline
  reads the KV cache at today (the fitted weight-stream fraction of the GPU's class);
- specsim's plain decode step (Llama-3.1-8B, bf16, one H100 SXM, the default ``cuda-graph`` host
  overheads) against the step of inference-sim's "trained-physics" latency model, a model fitted
  on fifteen instrumented vLLM runs of other models on H100s (Llama-2-7B, Qwen2.5-7B,
  Mistral-Nemo, Yi-34B, Llama-3.1-70B, Llama-4-Scout; :func:`trained_physics_ms`), at batches
  1-128 and 1,000 and 4,000 tokens of context: as shipped, with only the KV read moved to the
  fraction that model's decode-memory coefficient implies (:data:`TRAINED_KV_FRACTION`), and with
  it at the measured FlashAttention-3 fraction (:func:`kernel_fraction`); then, at the widest
  batch and shortest context, how the two steps split once their KV reads agree;
- the context effect (docs/tables.md#the-context-effect: :data:`EFFECT`) as shipped and with the
  KV read of every pass moved to those fractions (:func:`effect_speedups`).

Nothing here is fitted: every figure is a transcription of a published number or arithmetic on
one, and the what-if column changes nothing in the shipped cost model.
"""

from __future__ import annotations

import argparse
import dataclasses
from typing import NamedTuple

GPU, MODEL = "h100-sxm", "llama-3.1-8b"
BATCHES = (1, 2, 4, 8, 16, 32, 64, 128)
CONTEXTS = (1000, 4000)


class Measured(NamedTuple):
    """One published measurement of paged decode attention's achieved bandwidth."""

    source: str        # where the number is printed
    kernel: str
    gpu: str           # a built-in GPU spec name
    seqs: int          # sequences in the batch
    q_per_kv: int      # query heads per KV head (1: multi-head attention)
    page: int          # KV block (page) size in tokens
    context: int       # KV tokens per sequence
    gbs: float         # achieved bandwidth as printed, GB/s


_ORT = "microsoft/onnxruntime pull request #21414, comment of 2024-08-29 ('FA2 - paged batch decode', H100 SMX)"
_FA = "Dao-AILab/flash-attention issue #1572, comment of 2025-04-11 (flash_attention_benchmark.py on an H100)"

# Transcribed from the benchmark output printed in each thread (text, not plots). The onnxruntime
# rows are Llama-3-70B's attention shape (64 query heads, 8 KV heads, head 128) at 64 sequences and
# 256-token pages; its "BWUtil" column is the GB/s over 3.35 TB/s. The flash-attention rows are
# FlashAttention-3 at batch 16, 32 query and 32 KV heads, head 128, 8-token pages, CUDA graph.
SOURCES = (
    Measured(_ORT, "FlashAttention-2 paged decode", GPU, 64, 8, 256, 32, 496.121),
    Measured(_ORT, "FlashAttention-2 paged decode", GPU, 64, 8, 256, 64, 822.119),
    Measured(_ORT, "FlashAttention-2 paged decode", GPU, 64, 8, 256, 128, 1239.0),
    Measured(_ORT, "FlashAttention-2 paged decode", GPU, 64, 8, 256, 256, 1589.0),
    Measured(_FA, "FlashAttention-3 paged decode", GPU, 16, 1, 8, 128, 1226.0),
    Measured(_FA, "FlashAttention-3 paged decode", GPU, 16, 1, 8, 2000, 1796.0),
    Measured(_FA, "FlashAttention-3 paged decode", GPU, 16, 1, 8, 4000, 1849.0),
)

# inference-sim/inference-sim at commit f90a1e3a6787da17c2cd463dab6fb2660b1b1760: defaults.yaml,
# ``trained_physics_coefficients.beta_coeffs`` (10-beta form plus beta_EP, "trained from iter29"),
# the step formula of sim/latency/trained_physics_model.go (``StepTime``) and the H100's peak
# bandwidth in hardware_config.json (``BwPeakTBs``: 3.35).
TRAINED_BETAS = (0.152128, 0.0, 1.36252915, 0.752037, 32.09546717, 4.41684444, 126.024825, 481.8613888, 0.0,
                 1.94710771, 0.752037)
TRAINED_PEAK_TBS = 3.35
TRAINED_SOURCE = ("inference-sim/inference-sim@f90a1e3a6787da17c2cd463dab6fb2660b1b1760: defaults.yaml "
                  "trained_physics_coefficients, sim/latency/trained_physics_model.go StepTime, "
                  "hardware_config.json H100")
# The decode-memory coefficient prices the KV bytes at peak bandwidth x beta: the fraction it implies.
TRAINED_KV_FRACTION = 1.0 / TRAINED_BETAS[9]
TRAINED_WEIGHT_FRACTION = 1.0 / TRAINED_BETAS[2]


def fraction(m: Measured) -> float:
    """``m``'s achieved bandwidth over its GPU's datasheet bandwidth."""
    from specsim.costmodel.specs import gpu_spec

    return m.gbs / gpu_spec(m.gpu).bandwidth_gbs


def kernel_fraction(context) -> float:
    """The FlashAttention-3 rows' fraction (the H100 sweep over context at one batch and page size),
    linear in context between the measured contexts, the nearest one's outside them."""
    import numpy as np

    rows = [m for m in SOURCES if m.kernel.startswith("FlashAttention-3")]
    return float(np.interp(context, [m.context for m in rows], [fraction(m) for m in rows]))


def trained_kv_ms(batch, context) -> float:
    """The KV term of :func:`trained_physics_ms` (its coefficient included), in ms."""
    from specsim.costmodel.specs import model_spec

    m = model_spec(MODEL)
    kv_bytes = m.layers * 2 * m.kv_heads * m.head_dim * 2.0 * batch * (context + 1)  # past tokens and the new one
    return TRAINED_BETAS[9] * kv_bytes / (TRAINED_PEAK_TBS * 1e12) * 1e3


def trained_physics_ms(batch, context) -> float:
    """inference-sim's trained-physics step for ``batch`` decoding sequences of ``context`` KV
    tokens each (no prefill), Llama-3.1-8B, bf16, one H100, in ms; its decode-compute coefficient
    is 0, so only the weight, KV, per-layer, per-request and per-step terms remain."""
    from specsim.costmodel.specs import model_spec

    b = TRAINED_BETAS
    m = model_spec(MODEL)
    layers, d, dkv, dff = m.layers, m.hidden, m.kv_heads * m.head_dim, m.intermediate
    weight_us = (layers * d * (2 * d + 2 * dkv) + layers * 3 * d * dff) * 2.0 / (TRAINED_PEAK_TBS * 1e6)
    return trained_kv_ms(batch, context) + (b[2] * weight_us + b[4] * layers + b[5] * batch + b[6]) / 1e3


def specsim_ms(batch, context, kv_fraction=None) -> float:
    """specsim's plain decode step (default host overheads); with ``kv_fraction``, its attention
    part priced with the KV stream at that fraction of the bandwidth, everything else as shipped."""
    from specsim.costmodel import forward_breakdown
    from specsim.costmodel.passes import achieved_for
    from specsim.costmodel.specs import gpu_spec

    shipped = forward_breakdown(GPU, MODEL, tokens=batch, seqs=batch, context=context)
    if kv_fraction is None:
        return shipped.total_ms
    ach = dataclasses.replace(achieved_for(gpu_spec(GPU)), memory_efficiency=kv_fraction)
    moved = forward_breakdown(GPU, MODEL, tokens=batch, seqs=batch, context=context, achieved=ach)
    return shipped.total_ms - shipped.attention_ms + moved.attention_ms


def agreement():
    """Rows ``(context, batch, trained ms, specsim ms, specsim ms with the KV read at the trained
    fraction, specsim ms with the KV read at the measured kernel's fraction)``."""
    return [(c, b, trained_physics_ms(b, c), specsim_ms(b, c), specsim_ms(b, c, TRAINED_KV_FRACTION),
             specsim_ms(b, c, kernel_fraction(c))) for c in CONTEXTS for b in BATCHES]


def split(batch, context):
    """``(trained KV ms, trained rest ms, specsim attention ms with the KV read at the trained
    fraction, specsim rest ms)``: where the two steps differ once the KV reads agree."""
    from specsim.costmodel import forward_breakdown

    t, kv = trained_physics_ms(batch, context), trained_kv_ms(batch, context)
    shipped = forward_breakdown(GPU, MODEL, tokens=batch, seqs=batch, context=context)
    moved = specsim_ms(batch, context, TRAINED_KV_FRACTION) - (shipped.total_ms - shipped.attention_ms)
    return kv, t - kv, moved, shipped.total_ms - shipped.attention_ms


# The context effect (docs/tables.md#the-context-effect): a vLLM serve on one H100 NVL, a 31B
# dense model at concurrency 256, 3 draft tokens; the tokens per step fitted at the first context.
EFFECT = ("h100-nvl", "qwen3-32b", "eagle3-1l", 256, 3, "vllm")
EFFECT_PUBLISHED = {400: "0.79x", 1900: "about 1.0x", 4000: "1.10x"}


def _attention_s(net, gpu, ach, rows, seqs, context) -> float:
    """Seconds of one pass's attention part (the roofline's own operator, at ``ach``)."""
    from specsim.costmodel import passes as R

    clock = R._Clock(gpu, ach, ())
    return float(R._attention(clock, net, 1, float(rows), float(seqs), float(context))[0])


def effect_speedups(kv_fraction=None) -> dict:
    """The context effect's modelled speedup at each published context: as shipped, or with the
    KV read of every pass (the verify pass and each draft pass) at ``kv_fraction`` of the
    bandwidth (a number, or a function of the context) and everything else as shipped."""
    from specsim.costmodel import Setup, step_costs
    from specsim.costmodel import passes as R
    from specsim.costmodel.engines import engine_profile
    from specsim.costmodel.specs import drafter_spec, gpu_spec, model_spec
    from specsim.table._types import DRAFT_MS, VERIFY_MS

    g, m, d = gpu_spec(EFFECT[0]), model_spec(EFFECT[1]), drafter_spec(EFFECT[2])
    n, k, eng = EFFECT[3], EFFECT[4], engine_profile(EFFECT[5])
    ach = R.achieved_for(g)
    target, draft = R._target_net(m), R._drafter_net(m, d)
    ratio = {}
    for c in EFFECT_PUBLISHED:
        f = kv_fraction(c) if callable(kv_fraction) else kv_fraction
        moved = ach if f is None else dataclasses.replace(ach, memory_efficiency=f)
        x = step_costs(Setup(g, m, d, context_tokens=c, engine=EFFECT[5]), widths=[n], max_k=k)
        plain, spec = x[0, 0, VERIFY_MS], x[0, k, VERIFY_MS] + x[0, k, DRAFT_MS]
        extra = {}
        for name, net, rows in (("plain", target, n), ("verify", target, n * (k + 1)), ("draft", draft, n)):
            rows = float(eng.padded(rows))
            extra[name] = (_attention_s(net, g, moved, rows, n, c) - _attention_s(net, g, ach, rows, n, c)) * 1e3
        ratio[c] = (plain + extra["plain"]) / (spec + extra["verify"] + k * extra["draft"])
    first = min(ratio)
    tokens = 0.79 / ratio[first]
    return {c: tokens * r for c, r in ratio.items()}


def render() -> str:
    from specsim.costmodel.passes import achieved_for
    from specsim.costmodel.specs import gpu_spec

    shipped = achieved_for(gpu_spec(GPU)).memory_efficiency
    out = ["| kernel | sequences | query heads per KV head | page | context | GB/s | of 3.35 TB/s |",
           "|---|---|---|---|---|---|---|"]
    for m in SOURCES:
        out.append(f"| {m.kernel} | {m.seqs} | {m.q_per_kv} | {m.page} | {m.context:,} | {m.gbs:,.0f} | "
                   f"{fraction(m):.1%} |")
    out += ["", f"KV fraction the trained-physics fit implies: {TRAINED_KV_FRACTION:.1%} "
            f"(weights: {TRAINED_WEIGHT_FRACTION:.1%}); the roofline reads the KV cache at {shipped:.1%}; "
            f"the FlashAttention-3 rows at 1,000 and 4,000 tokens: {kernel_fraction(1000):.1%}, "
            f"{kernel_fraction(4000):.1%}.", "",
            f"| context | batch | trained-physics ms | specsim ms | error | KV at {TRAINED_KV_FRACTION:.1%} | error "
            "| KV at the kernel's | error |",
            "|---|---|---|---|---|---|---|---|---|"]
    for c, b, t, s, w, k in agreement():
        out.append(f"| {c:,} | {b} | {t:.2f} | {s:.2f} | {s / t - 1:+.1%} | {w:.2f} | {w / t - 1:+.1%} | "
                   f"{k:.2f} | {k / t - 1:+.1%} |")
    kv, rest, att, lin = split(BATCHES[-1], CONTEXTS[0])
    out += ["", f"At batch {BATCHES[-1]} and {CONTEXTS[0]:,} tokens, KV reads at the same fraction: trained-physics "
            f"{kv:.2f} ms of KV and {rest:.2f} ms of the rest, specsim {att:.2f} ms of attention and {lin:.2f} ms "
            "of the rest."]
    shipped_fx, trained_fx = effect_speedups(), effect_speedups(TRAINED_KV_FRACTION)
    kernel_fx = effect_speedups(kernel_fraction)
    out += ["", f"| context tokens | published | modelled | KV at {TRAINED_KV_FRACTION:.1%} | KV at the kernel's |",
            "|---|---|---|---|---|"]
    for c, published in EFFECT_PUBLISHED.items():
        out.append(f"| {c:,} | {published} | {shipped_fx[c]:.2f}x | {trained_fx[c]:.2f}x | {kernel_fx[c]:.2f}x |")
    return "\n".join(out) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", help="also write the tables to this markdown file")
    args = ap.parse_args(argv)
    text = render()
    print(text, end="")
    if args.out:
        from specsim._io import atomic_write_text

        atomic_write_text(args.out, text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
