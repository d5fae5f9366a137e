"""Fitting the roofline's achieved fractions (specsim.costmodel.roofline.ACHIEVED) and the eager
engine's host overheads on the shipped measurements, so the constants are reproducible.

- Per GPU class, the GEMM and elementwise fractions, the launch floor and the blend exponent
  minimise the mean absolute log error of the modelled per-layer non-attention time against the
  measured medians (tests/data/vidur/compute: every model, tensor-parallel size and token count
  1-4,096 of that class).
- Per GPU class, the all-reduce hop latency and link fraction are a relative least-squares fit
  of the ring model to the single-node all-reduce medians (tests/data/vidur/network).
- The eager host overheads (a cost per pass and one per sequence) are a relative least-squares
  fit of the Splitwise Llama-2-70B decode token times, less the modelled device time.

Run ``python -m tests.costmodel.roofline_fit`` to print the constants and their errors; the tests call
:func:`fit_class` with a model held out and check it.
"""

from __future__ import annotations

import csv
import dataclasses
from collections import defaultdict
from typing import NamedTuple

import numpy as np

from tests.fixtures import ROOT

DATA = ROOT / "tests" / "data"
# The profiled GPUs and the built-in spec each is priced with.
PROFILED_GPUS = {"a100": ("ampere", "a100-80gb", "a100_dgx"), "h100": ("hopper", "h100-sxm", "h100_dgx")}
# The per-layer operators the profiles time (the embedding, once per pass, is left out).
LAYER_OPS = ("input_layernorm", "attn_pre_proj", "attn_rope", "attn_post_proj", "post_attention_layernorm",
             "mlp_up_proj", "mlp_act", "mlp_down_proj", "add")
MAX_TOKENS = 4096


class Profile(NamedTuple):
    """One model on one GPU class at one tensor-parallel size: measured per-layer ms by token count."""

    arch: str
    gpu: str
    model: str
    tp: int
    spec: object          # ModelSpec of one layer, from the file's shape columns
    tokens: np.ndarray
    measured_ms: np.ndarray


def load_profiles(data=DATA) -> list:
    """Every (GPU, model, TP) profile; repeated token counts are reduced to their median."""
    from specsim.costmodel import ModelSpec

    out = []
    for gpu_dir in sorted((data / "vidur" / "compute").iterdir()):
        arch, gpu, _ = PROFILED_GPUS[gpu_dir.name]
        for path in sorted(gpu_dir.glob("*/*/mlp.csv")):
            groups, shape = defaultdict(list), None
            with open(path, newline="") as f:
                for r in csv.DictReader(f):
                    tokens = int(r["num_tokens"])
                    if tokens > MAX_TOKENS:
                        continue
                    total = sum(float(r[f"time_stats.{op}.median"]) for op in LAYER_OPS)
                    groups[int(r["num_tensor_parallel_workers"]), tokens].append(total)
                    shape = r
            heads, hidden = int(shape["n_head"]), int(shape["n_embd"])
            spec = ModelSpec(path.parent.name, layers=1, hidden=hidden, heads=heads,
                             kv_heads=int(shape["n_kv_head"]), head_dim=hidden // heads,
                             intermediate=int(shape["n_expanded_embd"]), vocab=int(shape["vocab_size"]),
                             mlp_matrices=3 if shape["use_gated_mlp"] == "True" else 2, dtype="fp16",
                             kv_dtype="fp16")
            for tp in sorted({tp for tp, _ in groups}):
                tokens = np.array(sorted(t for p, t in groups if p == tp), dtype=np.float64)
                ms = np.array([np.median(groups[tp, int(t)]) for t in tokens])
                out.append(Profile(arch, gpu, path.parent.name, tp, spec, tokens, ms))
    return out


def modelled_layer_ms(p: Profile, achieved) -> np.ndarray:
    """The roofline's non-attention time of one layer at the profile's token counts."""
    from specsim.costmodel import forward_breakdown

    b = forward_breakdown(p.gpu, p.spec, tokens=p.tokens, seqs=p.tokens, context=0.0, tp=p.tp, achieved=achieved)
    return np.asarray(b.linear_ms)


def relative_errors(profiles, achieved_of) -> np.ndarray:
    """|modelled - measured| / measured over every point of ``profiles``."""
    return np.concatenate([np.abs(modelled_layer_ms(p, achieved_of(p)) / p.measured_ms - 1.0) for p in profiles])


# Fitted compute fields: (name, lowest, highest); searched in log space.
_COMPUTE = (("matrix_efficiency", 0.05, 1.0), ("memory_efficiency", 0.05, 1.0),
            ("elementwise_efficiency", 0.02, 1.0), ("op_floor_us", 0.1, 50.0), ("blend", 1.0, 8.0))


def fit_compute(profiles, start=None, rounds: int = 60) -> dict:
    """The compute fields minimising the mean |log(modelled / measured)| over ``profiles`` (a
    pattern search: each field stepped up and down in log space, the step halved when none helps)."""
    from specsim.costmodel.passes import Achieved

    names = [n for n, _, _ in _COMPUTE]
    low = np.log([lo for _, lo, _ in _COMPUTE])
    high = np.log([hi for _, _, hi in _COMPUTE])
    x = np.log(start) if start is not None else np.log([0.7, 0.8, 0.4, 4.0, 2.0])
    logs = [np.log(p.measured_ms) for p in profiles]

    def loss(v):
        a = Achieved(*np.exp(v), hop_us=0.0, link_efficiency=1.0)
        return float(np.mean(np.concatenate([np.abs(np.log(modelled_layer_ms(p, a)) - m)
                                             for p, m in zip(profiles, logs)])))

    best, step = loss(x), 0.5
    for _ in range(rounds):
        improved = False
        for i in range(len(x)):
            for sign in (1.0, -1.0):
                y = x.copy()
                y[i] = np.clip(y[i] + sign * step, low[i], high[i])
                v = loss(y)
                if v < best - 1e-12:
                    x, best, improved = y, v, True
        if not improved:
            step /= 2.0
            if step < 1e-3:
                break
    return dict(zip(names, (float(round(v, 4)) for v in np.exp(x))))


def load_allreduce(arch_dir: str, data=DATA):
    """Single-node all-reduce medians: (workers, bytes, ms) arrays."""
    rows = []
    with open(data / "vidur" / "network" / arch_dir / "all_reduce.csv", newline="") as f:
        for r in csv.DictReader(f):
            rows.append((int(r["num_workers"]), float(r["size"]), float(r["time_stats.all_reduce.median"])))
    a = np.array(rows)
    return a[:, 0], a[:, 1], a[:, 2]


def allreduce_ms(workers, nbytes, hop_us, link_gbs):
    """The roofline's ring all-reduce: ``2(n-1)`` hops plus ``2(n-1)/n`` of the bytes over the link."""
    return (2 * (workers - 1) * hop_us * 1e-6 + 2 * (workers - 1) / workers * nbytes / (link_gbs * 1e9)) * 1e3


def fit_network(gpu: str, arch_dir: str, data=DATA) -> dict:
    """Hop latency and link fraction of a relative least-squares fit to the all-reduce medians."""
    from specsim.costmodel import gpu_spec

    link = gpu_spec(gpu).link_gbs * 1e9
    n, size, ms = load_allreduce(arch_dir, data)
    t = ms * 1e-3
    a = np.stack([2 * (n - 1), 2 * (n - 1) / n * size / link], axis=1) / t[:, None]
    (hop_s, inv_eff), *_ = np.linalg.lstsq(a, np.ones_like(t), rcond=None)
    return {"hop_us": float(round(hop_s * 1e6, 3)), "link_efficiency": float(round(min(1.0, 1.0 / inv_eff), 4))}


def fit_class(arch: str, profiles, data=DATA, start=None):
    """The :class:`Achieved` of ``arch`` from its ``profiles`` and its all-reduce times."""
    from specsim.costmodel.passes import Achieved

    gpu, arch_dir = next((g, d) for a, g, d in PROFILED_GPUS.values() if a == arch)
    mine = [p for p in profiles if p.arch == arch]
    return Achieved(**fit_compute(mine, start), **fit_network(gpu, arch_dir, data))


# -- eager host overheads on the Splitwise decode profiles --------------------------------------
SPLITWISE_GPU = {"a100-80gb": "a100-80gb", "h100-80gb": "h100-sxm"}
SPLITWISE_MODEL = {"llama2-70b": "llama-2-70b", "bloom-176b": "bloom-176b"}


def splitwise_points(data=DATA) -> dict:
    """Median decode token time of each Splitwise configuration: ``{(model, hw, tp, batch, prompt,
    tokens): ms}`` (the power-capped H100 rows repeat the H100's times and are left out)."""
    groups = defaultdict(list)
    with open(data / "splitwise" / "perf_model.csv", newline="") as f:
        for r in csv.DictReader(f):
            if r["hardware"] not in SPLITWISE_GPU:
                continue
            key = (r["model"], r["hardware"], int(r["tensor_parallel"]), int(r["batch_size"]),
                   int(r["prompt_size"]), int(r["token_size"]))
            groups[key].append(float(r["token_time"]))
    return {k: float(np.median(v)) for k, v in groups.items()}


def fit_eager(data=DATA, model: str = "llama2-70b") -> dict:
    """``step_ms`` and ``seq_ms`` of a relative least-squares fit of the decode token times, less
    the modelled device time (context: the prompt plus half the generated tokens)."""
    from specsim.costmodel import Overheads, plain_decode_ms

    zero = Overheads("none", step_ms=0.0, seq_ms=0.0, draft_step_ms=0.0)
    points = [(k, v) for k, v in splitwise_points(data).items() if k[0] == model]
    measured = np.array([v for _, v in points])
    device = np.array([float(plain_decode_ms(SPLITWISE_GPU[hw], SPLITWISE_MODEL[m], tp=tp, batch=b,
                                             context_tokens=p + t / 2, overheads=zero))
                       for (m, hw, tp, b, p, t), _ in points])
    batch = np.array([k[3] for k, _ in points], dtype=np.float64)
    a = np.stack([np.ones_like(batch), batch], axis=1) / measured[:, None]
    (step, seq), *_ = np.linalg.lstsq(a, (measured - device) / measured, rcond=None)
    return {"step_ms": float(round(max(step, 0.0), 3)), "seq_ms": float(round(max(seq, 0.0), 4))}


def fit_memory_power(data=DATA) -> float:
    """``memory_power`` (to 0.01) that leaves the modelled mean power of the Splitwise A100 decode
    runs (eager engine) without bias against their profiled average power (normalised by TDP)."""
    from specsim.costmodel import HOST_OVERHEADS, gpu_spec, plain_decode_power_w

    runs = defaultdict(list)
    with open(data / "splitwise" / "perf_model.csv", newline="") as f:
        for r in csv.DictReader(f):
            if r["hardware"] == "a100-80gb" and float(r["average_power"]) > 0:
                runs[r["model"], int(r["tensor_parallel"]), int(r["batch_size"]), int(r["prompt_size"]),
                     int(r["token_size"])].append(float(r["average_power"]))
    groups = defaultdict(lambda: ([], [], []))   # (model, tp) -> batches, contexts, measured
    for (m, tp, b, p, t), powers in runs.items():
        for power in powers:
            g = groups[m, tp]
            g[0].append(b)
            g[1].append(p + t / 2)
            g[2].append(power)
    tdp = gpu_spec("a100-80gb").tdp_w

    def bias(share):
        ov = dataclasses.replace(HOST_OVERHEADS["eager"], memory_power=share)
        ratios = [plain_decode_power_w("a100-80gb", SPLITWISE_MODEL[m], tp=tp, batch=np.array(b, dtype=np.float64),
                                       context_tokens=np.array(c), overheads=ov) / tdp / np.array(w)
                  for (m, tp), (b, c, w) in groups.items()]
        return float(np.mean(np.concatenate(ratios) - 1.0))

    grid = np.round(np.arange(0.5, 1.0001, 0.01), 2)
    return float(grid[int(np.argmin([abs(bias(v)) for v in grid]))])


def main():
    from specsim.costmodel.passes import ACHIEVED

    profiles = load_profiles()
    for arch in sorted({p.arch for p in profiles}):
        a = fit_class(arch, profiles)
        fields = ", ".join(f"{k}={v!r}" for k, v in dataclasses.asdict(a).items() if k != "source")
        err = relative_errors([p for p in profiles if p.arch == arch], lambda p: a)
        print(f"{arch}: Achieved({fields})  median |rel err| {np.median(err):.3f}")
    err = relative_errors(profiles, lambda p: ACHIEVED[p.arch])
    print(f"shipped constants: median |rel err| {np.median(err):.3f} over {err.size} points")
    print("eager:", fit_eager(), "memory_power:", fit_memory_power())


if __name__ == "__main__":
    main()
