"""Fit each engine's price of speculation on published measurements, and test it on what was held out
(docs/tables.md#engine-profiles).

Run: ``python -m benchmarks.fit_published`` from the repository root. Reads the published sets in
tests/data/published-sd (see its README), prices every point with the roofline's passes as the
engine runs them (:func:`specsim.costmodel.step_parts` with the engine's graph sizes and its
figures at 0) plus the engine's figures, and prints:

- vLLM's figures fitted on both its sets (what :data:`specsim.costmodel.ENGINE_PROFILES` ships);
- per vLLM set, the median |error| of the predicted ratio with the figures fitted on the other
  set -- held out --, with the passes alone, and with the shipped figures;
- where an R02 speedup falls below 1.0x, the batch step it crosses at, measured and predicted,
  and the planner's depth by batch;
- R10's two drafters apart, with the figures fitted on R02: each one's errors, its measured steps'
  growth a draft pass beside its passes', and its measured step at the smallest K;
- SGLang's R03 curves priced with the sglang profile, whose host figures are vLLM's (a documented
  default: R03 cannot fit SGLang's own -- its per-step figures, fitted on it with the per-row
  figures held at vLLM's, come out at 0, since fixed host work per step is invisible beside
  DeepSeek-V3's 20-40 ms steps; freed, the per-row figures it asks for stand for what the roofline
  misses of MoE verify passes, not for host work), with the passes alone and with that fit;
- TensorRT-LLM's one usable point (R09), priced with its profile (whose figures are vLLM's too:
  no TensorRT-LLM set supports a fit) and with the passes alone;
- the engines' own all-reduce (:class:`specsim.costmodel.engines.CustomAllReduce`): its one-shot
  and two-shot latency figures fitted on the published latencies of TensorRT-LLM's custom
  all-reduce kernels on H100s at tp 2, 4 and 8 (``allreduce_sglang_pr2904_h100.csv``), with each
  point's error, and how far the model lies below vLLM's kernel measured with its input copy.

A point's ratio is what its set measures against the same engine without speculation:

- R10 (vLLM, H100, batch 1, K = 2..7, acceptance length given): TPOT with speculation over TPOT
  without, predicted as ``step(1, K) / (acceptance_length x step(1, 0))``;
- R02 (vLLM, RTX 3090, K = 2, batch 2..56) and R03 (SGLang, DeepSeek-V3 MTP on 8 MI300Xs, 2 draft
  steps, concurrency 1..64, mean end-to-end latency without over with): no acceptance length. One
  tokens-per-step figure per curve is fitted at its smallest batch, so that point is exact and
  only the shape over batch is tested: ``speedup(b) = speedup(b0) x r(b) / r(b0)`` with
  ``r(b) = step(b, 0) / step(b, K)``;
- R09 (TensorRT-LLM, Llama-3.3-70B EAGLE-3 on 8 H200s, concurrency 4, K = 3, acceptance length
  given): tokens per user per second against plain decoding, ``acceptance_length x step(n, 0) /
  step(n, K)``.

The fit minimises the squared relative error of the ratios over the training points, the figures
kept >= 0 (projected Gauss-Newton, a small ridge toward 0 so that a figure no training set can
tell apart stays at 0). Everything is deterministic: the same data give the same figures.
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import sys
from pathlib import Path
from typing import NamedTuple

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data" / "published-sd"
FITTED_ENGINES = ("vllm",)
# MT-bench prompts and answers: a few hundred tokens of KV per sequence on average.
CONTEXT_TOKENS = 512
# R03's mean KV tokens per sequence: 1k in, 1k out (random) and ShareGPT's shorter turns.
R03_CONTEXT_TOKENS = {"random 1k/1k": 1536, "ShareGPT": 512}
OTHER_CONTEXT_TOKENS = 1024  # R09 does not state its lengths
# A figure's scale for the ridge (ms, ms, us, us): 1% of a unit costs as much as a 1% error.
RIDGE_SCALE = np.array([1.0, 1.0, 10.0, 10.0])
RIDGE = 0.01
NAMES = ("step_ms", "draft_pass_ms", "verify_row_us", "sampled_token_us")


class Point(NamedTuple):
    set: str
    engine: str
    group: str          # the curve a tokens-per-step figure is fitted on (no acceptance length), else the point
    gpu: str
    model: str
    drafter: str
    tp: int
    context: int
    width: int
    depth: int
    measured: float     # the ratio the set measures
    acceptance_length: float  # 0 where the set does not give it


def _drafter(method: str) -> str:
    return "eagle3-1l" if "EAGLE-3" in method or "EAGLE3" in method else "eagle-1l"


def read_points(data=DATA) -> list:
    """Every usable point of the shipped sets of the fitted engines (see the module docstring)."""
    points = []
    with open(data / "R02_eagle3_paper_vllm_rtx3090.csv", newline="") as f:
        for row in csv.DictReader(f):
            points.append(Point("R02", "vllm", f"R02 {row['method']}", "rtx3090", "llama-3.1-8b",
                                _drafter(row["method"]), 1, CONTEXT_TOKENS, int(row["batch_or_concurrency"]), 2,
                                float(row["value"]), 0.0))
    with open(data / "R10_vllm_eagle1_eagle3_ksweep_bs1.csv", newline="") as f:
        for row in csv.DictReader(f):
            if row["metric"] != "TPOT":  # the throughput rows give no acceptance length
                continue
            k = int(row["spec_tokens"])
            points.append(Point("R10", "vllm", f"R10 {row['method'].split(' ')[0]} K={k}", "h100-sxm",
                                "llama-3.1-8b", _drafter(row["method"]), 1, CONTEXT_TOKENS, 1, k,
                                float(row["value"]) / float(row["baseline_value"]), float(row["acceptance_length"])))
    with open(data / "R03_sglang_mi300x_dsv3_mtp.csv", newline="") as f:
        for row in csv.DictReader(f):
            curve = row["method"].split(":")[0]
            points.append(Point("R03", "sglang", f"R03 {curve}", "mi300x", "deepseek-v3", "mtp-1l", 8,
                                R03_CONTEXT_TOKENS[curve], int(row["batch_or_concurrency"]), 2,
                                float(row["baseline_value"]) / float(row["value"]), 0.0))
    return points


class Priced(NamedTuple):
    """The roofline's parts of each point's steps: what the engine figures add to is linear."""

    plain_ms: np.ndarray    # step(width, 0), graph padding included
    spec_ms: np.ndarray     # step(width, depth), passes only
    terms: np.ndarray       # (points, 4): what each engine figure multiplies at (width, depth)


def passes_only(engine: str):
    """``engine``'s shipped profile with its figures at 0: the passes as it runs them."""
    from specsim.costmodel.engines import ENGINE_PROFILES

    return dataclasses.replace(ENGINE_PROFILES[engine], **{n: 0.0 for n in NAMES})


def _step_ms(parts, i: int, k: int) -> float:
    return float(parts.verify_s[i, k] + k * parts.draft_pass_s[i, 0] + parts.draft_extend_s[i, k]
                 + parts.draft_fuse_s[i, k]) * 1e3


def price(points) -> Priced:
    from specsim.costmodel import Setup, step_parts

    by_setup = {}
    for p in points:
        by_setup.setdefault((p.engine, p.gpu, p.model, p.drafter, p.tp, p.context), set()).add((p.width, p.depth))
    parts = {}
    for (engine, gpu, model, drafter, tp, context), cells in by_setup.items():
        widths = sorted({w for w, _ in cells})
        setup = Setup(gpu, model, drafter, tp=tp, context_tokens=context, engine=passes_only(engine))
        parts[engine, gpu, model, drafter, tp, context] = (widths, step_parts(setup, widths=widths,
                                                                              max_k=max(k for _, k in cells)))
    plain, spec, terms = [], [], []
    for p in points:
        widths, pp = parts[p.engine, p.gpu, p.model, p.drafter, p.tp, p.context]
        i = widths.index(p.width)
        plain.append(pp.verify_s[i, 0] * 1e3)
        spec.append(_step_ms(pp, i, p.depth))
        n, k = p.width, p.depth
        terms.append([1.0, k, 1e-3 * n * (k + 1), 1e-3 * n * k])
    return Priced(np.array(plain), np.array(spec), np.array(terms))


def predict(points, priced: Priced, figures) -> np.ndarray:
    """Each point's predicted ratio under engine ``figures`` (step, draft pass, verify row, token)."""
    step = priced.spec_ms + priced.terms @ np.asarray(figures, dtype=np.float64)
    ratio = priced.plain_ms / step  # speedup per step, before tokens per step
    out = np.empty(len(points))
    first = {}
    for i, p in enumerate(points):
        if p.acceptance_length:
            out[i] = step[i] / (p.acceptance_length * priced.plain_ms[i])
        else:
            j = first.setdefault(p.group, min((q.width, q.measured, m) for m, q in enumerate(points)
                                              if q.group == p.group)[2])
            out[i] = points[j].measured * ratio[i] / ratio[j]
    return out


def fit(points, priced: Priced, use, fixed=None) -> np.ndarray:
    """Engine figures >= 0 minimising the squared relative error over the points ``use`` (a mask);
    ``fixed``: figures held at given values (NaN: fitted), default none."""
    use = np.asarray(use, dtype=bool)
    measured = np.array([p.measured for p in points])
    fixed = np.full(4, np.nan) if fixed is None else np.asarray(fixed, dtype=np.float64)
    free = np.isnan(fixed)

    def residuals(x):
        r = predict(points, priced, x)[use] / measured[use] - 1.0
        return np.concatenate([r, RIDGE * x[free] / RIDGE_SCALE[free]])

    x = np.where(free, 0.0, fixed)
    for _ in range(200):
        r = residuals(x)
        jac = np.zeros((r.size, 4))
        for j in np.flatnonzero(free):
            h = 1e-6 * RIDGE_SCALE[j]
            e = np.zeros(4)
            e[j] = h
            jac[:, j] = (residuals(x + e) - r) / h
        step = np.linalg.lstsq(jac, -r, rcond=None)[0] * free
        new = np.maximum(x + step, 0.0)
        if np.sum(residuals(new) ** 2) >= np.sum(r ** 2) - 1e-15:
            # A step that does not improve: halve it along the projected direction.
            for _ in range(30):
                step = step / 2.0
                new = np.maximum(x + step, 0.0)
                if np.sum(residuals(new) ** 2) < np.sum(r ** 2):
                    break
            else:
                break
        x = new
    return x


def tested(points):
    """The points an error counts: every point with an acceptance length, the others beyond their
    curve's smallest batch (where the tokens-per-step figure is fitted)."""
    smallest = {}
    for p in points:
        smallest[p.group] = min(smallest.get(p.group, p.width), p.width)
    return np.array([bool(p.acceptance_length) or p.width != smallest[p.group] for p in points])


def crossovers(points, values):
    """(group, last batch above 1.0x, first batch below) for each curve that falls below 1.0x."""
    out = []
    for g in sorted({p.group for p in points}):
        curve = sorted((p.width, v) for p, v in zip(points, values) if p.group == g and not p.acceptance_length)
        below = [i for i, (_, v) in enumerate(curve) if v < 1.0]
        if below and below[0] > 0:
            out.append((g, curve[below[0] - 1][0], curve[below[0]][0]))
    return out


def plan_choices(points, group: str, figures) -> list:
    """The planner's depth (``goodput``: the most expected tokens per ms) at each batch of an R02
    curve, on the modelled table of its set with vLLM ``figures``, under a calibration whose chain
    of two gives the curve's tokens per step at its smallest batch (priors ``(a, a)``, ``1 + a +
    a^2`` tokens a step): ``[(batch, depth)]``. Depth 1 is on offer too, although the set
    measured only depth 2 against plain decoding."""
    from specsim.calibration import AcceptanceCalibration
    from specsim.costmodel import model_table
    from specsim.demo_inputs import DEMO_EDGES, demo_drafter_key, demo_p_accept
    from specsim.plan.planner import goodput_depth

    curve = sorted((p for p in points if p.group == group), key=lambda p: p.width)
    engine = dataclasses.replace(passes_only("vllm"), **dict(zip(NAMES, map(float, figures))))
    table = model_table(curve[0].gpu, curve[0].model, curve[0].drafter, widths=[p.width for p in curve],
                        max_k=curve[0].depth, context_tokens=curve[0].context, engine=engine)
    plain, spec = table.cell(curve[0].width, 0), table.cell(curve[0].width, curve[0].depth)
    tokens = curve[0].measured * (spec.verify_ms + spec.draft_ms) / plain.verify_ms
    a = (np.sqrt(4.0 * tokens - 3.0) - 1.0) / 2.0
    cal = AcceptanceCalibration(demo_drafter_key(), DEMO_EDGES, demo_p_accept(), (a,) * curve[0].depth)
    return [(p.width, goodput_depth(table, cal, p.width)) for p in curve]


def r10_drafters(points, priced: Priced, figures, data=DATA) -> list:
    """R10's two drafters apart, with vLLM ``figures`` (those fitted without R10): ``[(drafter,
    points, smallest and largest |error|, the measured step's growth a draft pass, the passes'
    growth a draft pass, the smallest K and the measured step there)]``, in ms. A measured step is the
    TPOT times the acceptance length; a growth is the least-squares slope over K; the passes are
    priced as vLLM runs them (its figures at 0)."""
    with open(data / "R10_vllm_eagle1_eagle3_ksweep_bs1.csv", newline="") as f:
        (plain_ms,) = {float(row["baseline_value"]) for row in csv.DictReader(f) if row["metric"] == "TPOT"}
    predicted = predict(points, priced, figures)
    rows = []
    for drafter in sorted({p.drafter for p in points if p.set == "R10"}):
        mine = [i for i, p in enumerate(points) if p.set == "R10" and p.drafter == drafter]
        depth = np.array([points[i].depth for i in mine], dtype=np.float64)
        measured = np.array([points[i].measured for i in mine])
        step_ms = measured * np.array([points[i].acceptance_length for i in mine]) * plain_ms
        error = np.abs(predicted[mine] / measured - 1.0)
        rows.append((drafter, len(mine), float(error.min()), float(error.max()),
                     float(np.polyfit(depth, step_ms, 1)[0]), float(np.polyfit(depth, priced.spec_ms[mine], 1)[0]),
                     int(depth.min()), float(step_ms[np.argmin(depth)])))
    return rows


def sglang_checks(points, priced: Priced) -> tuple:
    """R03 priced with the shipped sglang profile (its host figures vLLM's: R03 cannot fit
    SGLang's own, see the module docstring), with the passes alone, and with the per-step figures
    fitted on R03 itself (the per-row figures vLLM's): ``(those per-step figures, [(curve,
    points, shipped, passes alone, fitted on R03)])``, the errors as the median |error| of each
    curve's shape."""
    from specsim.costmodel.engines import ENGINE_PROFILES

    measured = np.array([p.measured for p in points])
    mine = np.array([p.engine == "sglang" for p in points])
    shipped = [getattr(ENGINE_PROFILES["sglang"], n) for n in NAMES]
    own = fit(points, priced, mine, [np.nan, np.nan, *shipped[2:]])
    rows = []
    counted = tested(points)
    for g in sorted({p.group for p in points if p.engine == "sglang"}):
        m = counted & np.array([p.group == g for p in points])
        errors = [float(np.median(np.abs(predict(points, priced, x)[m] / measured[m] - 1.0)))
                  for x in (shipped, np.zeros(4), own)]
        rows.append((g, int(m.sum()), *errors))
    return own[:2], rows


def trtllm_checks(data=DATA) -> list:
    """R09's Llama-3.3-70B point (Llama-3.1-70B's shape; the Llama-4-Maverick row is an FP8 MoE
    model without a spec here), priced with the shipped trtllm profile and with the passes alone:
    ``[(set, what, published, with the trtllm profile, passes alone)]``, the last three as text."""
    from specsim.costmodel import Setup, step_costs
    from specsim.costmodel.engines import ENGINE_PROFILES

    out = []
    with open(data / "R09_trtllm_eagle3_h200_conc4.csv", newline="") as f:
        for row in csv.DictReader(f):
            if not row["model"].startswith("Llama-3.3-70B"):
                continue
            n, k, length = int(row["batch_or_concurrency"]), _leading(row["spec_tokens"]), float(row["acceptance_length"])
            published = float(row["value"])
            shown = []
            for engine in (ENGINE_PROFILES["trtllm"], passes_only("trtllm")):
                c = step_costs(Setup("h200", "llama-3.1-70b", "eagle3-1l", tp=8, context_tokens=OTHER_CONTEXT_TOKENS,
                                     engine=engine), widths=[n], max_k=k)
                r = length * c[0, 0, 0] / (c[0, k, 0] + c[0, k, 2])
                shown.append(f"{r:.2f}x ({100 * (r / published - 1):+.0f}%)")
            out.append(("R09", f"EAGLE-3, Llama-3.3-70B, 8x H200, concurrency {n}, K = {k}: speedup",
                        f"{published:.2f}x", *shown))
    return out


ALLREDUCE_DATA = "allreduce_sglang_pr2904_h100.csv"
ALLREDUCE_NAMES = ("oneshot_us", "oneshot_peer_us", "twoshot_us", "twoshot_peer_us", "link_efficiency")
H100_LINK_GBS = 450.0  # the h100-sxm spec's per-direction NVLink rate


def read_allreduce(data=DATA) -> dict:
    """The published all-reduce latencies: ``{kernel: [(tp, message bytes, seconds)]}``."""
    out = {}
    with open(data / ALLREDUCE_DATA, newline="") as f:
        for row in csv.DictReader(f):
            out.setdefault(row["kernel"], []).append((int(row["tp"]), float(row["message_bytes"]),
                                                      float(row["latency_ms"]) * 1e-3))
    return out


def measured_rule(**figures):
    """The custom all-reduce the measurements ran: sgl-kernel's TensorRT-LLM kernels pick one-shot
    at tp 2, below 1 MiB at tp <= 4 and below 512 KiB above (its ``SelectImplementation``)."""
    from specsim.costmodel.engines import CustomAllReduce

    return CustomAllReduce(**figures, world_sizes=(2, 4, 6, 8), oneshot_bytes=((2, np.inf), (4, 1 << 20), (8, 1 << 19)))


def fit_allreduce(data=DATA):
    """The latency figures (:data:`ALLREDUCE_NAMES`) minimising the squared relative error over the
    TensorRT-LLM kernel's points: ``(figures, [(kernel, tp, bytes, measured s, model s)])``."""
    sets = read_allreduce(data)
    trt = next(v for k, v in sets.items() if k.startswith("TensorRT-LLM"))
    tp, size, t = (np.array(c, dtype=np.float64) for c in zip(*trt))

    low, high = np.array([0.0, 0.0, 0.0, 0.0, 1e-6]), np.array([np.inf] * 4 + [1.0])

    def model(x, tp_, size_):  # the figures kept where a CustomAllReduce takes them while the fit steps
        rule = measured_rule(**dict(zip(ALLREDUCE_NAMES, np.clip(x, low, high))))
        return np.array([float(rule.seconds(int(a), 1.0, b, H100_LINK_GBS)[0]) for a, b in zip(tp_, size_)])

    x = np.array([3.0, 0.3, 6.0, 0.5, 0.6])
    for _ in range(100):
        r = model(x, tp, size) / t - 1.0
        jac = np.empty((r.size, x.size))
        for j in range(x.size):
            h = 1e-6 * max(abs(x[j]), 1.0)
            e = np.zeros(x.size)
            e[j] = h
            jac[:, j] = ((model(x + e, tp, size) / t - 1.0) - r) / h
        step = np.linalg.lstsq(jac, -r, rcond=None)[0]
        x = x + step
        if np.max(np.abs(step)) < 1e-10:
            break
    figures = dict(zip(ALLREDUCE_NAMES, map(float, x)))
    points = [(k, int(a), b, c, float(model(x, [a], [b])[0])) for k, v in sets.items() for a, b, c in v]
    return figures, points


def _leading(text: str) -> int:
    return int(text.split()[0])


class Report(NamedTuple):
    figures: dict                     # engine -> figures fitted on all its points
    held_out: dict                    # (engine, set or curve) -> (held out, passes alone, fitted on all; points)
    held_out_figures: dict            # (engine, set or curve) -> figures fitted without it
    crossing: list                    # (group, measured (above, below), predicted held out (above, below))
    plans: dict                       # R02 curve -> [(batch, depth the planner picks)], figures held out
    r10: list                         # r10_drafters(), figures held out
    sglang: tuple                     # sglang_checks()
    others: list                      # trtllm_checks()
    allreduce: tuple                  # fit_allreduce()


def run(data=DATA) -> Report:
    points = read_points(data)
    priced = price(points)
    measured = np.array([p.measured for p in points])
    counted = tested(points)
    figures, held, held_figures = {}, {}, {}
    predicted_all = np.empty(len(points))
    for engine in FITTED_ENGINES:
        mine = np.array([p.engine == engine for p in points])
        figures[engine] = fit(points, priced, mine)
        alone = predict(points, priced, np.zeros(4))
        fitted = predict(points, priced, figures[engine])
        sets = sorted({p.set for p in points if p.engine == engine})
        # One set: hold out each curve of it instead.
        unit = (lambda p: p.set) if len(sets) > 1 else (lambda p: p.group)
        for u in sorted({unit(p) for p in points if p.engine == engine}):
            out = mine & np.array([unit(p) == u for p in points])
            x = fit(points, priced, mine & ~out)
            pred = predict(points, priced, x)
            predicted_all[out] = pred[out]
            m = out & counted
            held[engine, u] = tuple(float(np.median(np.abs(v[m] / measured[m] - 1.0)))
                                    for v in (pred, alone, fitted)) + (int(m.sum()),)
            held_figures[engine, u] = x
    vllm = [i for i, p in enumerate(points) if p.set == "R02"]
    r02 = [points[i] for i in vllm]
    measured_cross = {g: (a, b) for g, a, b in crossovers(r02, measured[vllm])}
    predicted_cross = {g: (a, b) for g, a, b in crossovers(r02, predicted_all[vllm])}
    crossing = [(g, measured_cross[g], predicted_cross.get(g)) for g in sorted(measured_cross)]
    plans = {g: plan_choices(points, g, held_figures["vllm", "R02"]) for g in sorted({p.group for p in r02})}
    r10 = r10_drafters(points, priced, held_figures["vllm", "R10"], data)
    return Report(figures, held, held_figures, crossing, plans, r10, sglang_checks(points, priced), trtllm_checks(data),
                  fit_allreduce(data))


def render(report: Report) -> str:
    lines = []
    for engine, x in report.figures.items():
        lines.append(f"engine {engine}, fitted on all its sets: " + ", ".join(f"{n} = {v:.3f}" for n, v in zip(NAMES, x)))
    lines += ["", "| engine | held out | points | median abs error, held out | passes alone | fitted on all | "
              "figures fitted without it |", "|---|---|---|---|---|---|---|"]
    for (engine, u), (err, alone, fitted, n) in report.held_out.items():
        x = report.held_out_figures[engine, u]
        lines.append(f"| {engine} | {u} | {n} | {100 * err:.1f}% | {100 * alone:.1f}% | {100 * fitted:.1f}% | "
                     + ", ".join(f"{v:.3f}" for v in x) + " |")
    lines += ["", "| curve | measured crossover | predicted, held out |", "|---|---|---|"]
    for g, m, p in report.crossing:
        shown = "none (stays above 1.0x)" if p is None else f"batch {p[0]} -> {p[1]}"
        lines.append(f"| {g} | batch {m[0]} -> {m[1]} | {shown} |")
    lines += ["", "| curve | planner's depth by batch (figures held out) |", "|---|---|"]
    for g, choices in report.plans.items():
        lines.append(f"| {g} | " + ", ".join(f"{b}: {k}" for b, k in choices) + " |")
    lines += ["", "| R10 drafter | points | error, figures fitted on R02 | measured step, growth a draft pass | "
              "passes, growth a draft pass | measured step at the smallest K |", "|---|---|---|---|---|---|"]
    for drafter, n, low, high, measured, passes, k, first in report.r10:
        lines.append(f"| {drafter} | {n} | {100 * low:.1f}-{100 * high:.1f}% | {measured:.2f} ms | {passes:.2f} ms | "
                     f"{first:.2f} ms (K = {k}) |")
    own, rows = report.sglang
    lines += ["", "per-step figures fitted on R03 (per-row figures vLLM's): "
              + ", ".join(f"{n} = {v:.3f}" for n, v in zip(NAMES, own)), "",
              "| SGLang curve | points | sglang profile (vLLM's figures) | passes alone | per-step figures fitted on R03 |",
              "|---|---|---|---|---|"]
    for g, n, shipped, alone, fitted in rows:
        lines.append(f"| {g} | {n} | {100 * shipped:.1f}% | {100 * alone:.1f}% | {100 * fitted:.1f}% |")
    lines += ["", "| TensorRT-LLM set | compared | published | trtllm profile | passes alone |", "|---|---|---|---|---|"]
    for row in report.others:
        lines.append("| " + " | ".join(row) + " |")
    lines += ["", *render_allreduce(*report.allreduce)]
    return "\n".join(lines)


def render_allreduce(figures, points) -> list:
    """The all-reduce fit's figures, its median |error| and each point, measured / model (µs)."""
    trt = [(m, f) for k, _, _, m, f in points if k.startswith("TensorRT-LLM")]
    err = float(np.median([abs(f / m - 1.0) for m, f in trt]))
    sizes = sorted({b for _, _, b, _, _ in points})
    lines = [f"all-reduce figures fitted on TensorRT-LLM's kernel, median abs error {100 * err:.1f}% over "
             f"{len(trt)} points:", ", ".join(f"{n} = {v:.3f}" for n, v in figures.items()), "",
             "| kernel | tp | " + " | ".join(f"{b / 1024:g} KiB" for b in sizes) + " |",
             "|---|---|" + "---|" * len(sizes)]
    for kernel in dict.fromkeys(k for k, *_ in points):
        for tp in sorted({t for k, t, *_ in points if k == kernel}):
            cells = {b: (m, f) for k, t, b, m, f in points if k == kernel and t == tp}
            lines.append(f"| {kernel.split(' (')[0]} | {tp} | " + " | ".join(
                f"{1e6 * cells[b][0]:.1f} / {1e6 * cells[b][1]:.1f}" for b in sizes) + " |")
    return lines


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.parse_args(argv)
    print(render(run()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
