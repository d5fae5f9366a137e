"""specsim's main job on built-in defaults: no files, no GPU.

A modelled cost table (Llama-3.1-8B + EAGLE one-layer drafter on one H200, from the roofline in
:mod:`specsim.costmodel`), a calibration from published EAGLE acceptance rates
(:mod:`specsim.demo_inputs`), and a synthetic request trace shaped like the public Azure
LLM inference conversation trace of November 2023, served under specsim's draft-depth policies,
SGLang's own adaptive controller on its default settings, and plain decoding as the baseline.

The question it answers is the simulator's typical what-if: the conversation traffic doubled
(:data:`DEMO_RATE_SCALE`). At the trace's own rate one modelled H200 idles at a batch of about
seven and every policy serves the same tokens; at twice the rate it is near capacity, plain
decoding falls behind, and the policies differ in energy and tail latency.

Trace shape, from the public trace (Patel et al., "Splitwise: Efficient generative LLM inference
using phase splitting", ISCA 2024; Azure/AzurePublicDataset, AzureLLMInferenceTrace_conv):
19,366 requests over about 3,500 s (5.53 requests/s), inter-arrival coefficient of variation
1.09; prompt tokens median 1,020 (log-spread 0.99), output tokens median 129 (log-spread 0.86).
The medians are the published ones; rate, burstiness and spreads were measured on the public CSV.

Server: the modelled table's ``[meta]`` carries what the engine needs beyond step costs (see
:func:`specsim.costmodel.roofline.serving_meta`): a prefill cost per step (one read of the
weights) and per token (the H200's dense BF16 rate at 60% utilisation), at full board power;
the KV capacity that fits beside the weights; the H200's idle power. The engine schedules as vLLM
does (token budget 8192, chunked prefill). All of it is modelled; nothing here is a measurement.
"""

from __future__ import annotations

import json
from pathlib import Path

from specsim.errors import ScheduleError
from specsim._io import Outputs
from specsim._stats import paired_noise
from specsim.demo_inputs import demo_calibration, demo_table
from specsim.interop.sglang import parse_adaptive
from specsim.policy.policy import Policy, policy_runs
from specsim.sim.metrics import requests_csv, summarize
from specsim.sim.engine import simulate_runs
from specsim.sim.options import META_COSTS, ServerOptions
from specsim.sim.report import plot as draw
from specsim.sim.slo import SLO
from specsim.sim.verdict import FIGURES, NOISE_SEEDS, mark_same_runs
from specsim.studies.tune import tune
from specsim.traces import LogNormalLengths, summary as trace_summary, synthetic_trace

# Public conversation-trace shape (see the module docstring).
CONV_RATE_PER_S = 5.53
CONV_ARRIVAL_CV = 1.09
CONV_PROMPT_MEDIAN, CONV_PROMPT_SIGMA = 1020.0, 0.99
CONV_OUTPUT_MEDIAN, CONV_OUTPUT_SIGMA = 129.0, 0.86

DEMO_POLICIES = ("fixed:0", "fixed:3", "schedule:1-16=4,17-64=3,65-128=2,129-=1", "goodput", "propose",
                 "sequence", "load-aware")
# SGLang's adaptive controller as the engine runs it with an empty --speculative-adaptive-config
# (its defaults: candidates 1, 3 and 7), written beside the other inputs so a run can be repeated.
SGLANG_ADAPTIVE_FILE = "sglang-adaptive.json"
SGLANG_ADAPTIVE_CONFIG = "{}\n"
DEMO_RATE_SCALE = 2.0
DEMO_REQUESTS = 3000
DEMO_SLO_TTFT_S = 1.0
DEMO_SLO_TPOT_S = 0.05


def demo_trace(requests: int = DEMO_REQUESTS, seed: int = 0, rate_scale: float = DEMO_RATE_SCALE):
    """A seeded synthetic trace with the public conversation trace's shapes, its arrivals
    compressed ``rate_scale`` times (1 = the published rate)."""
    return synthetic_trace(
        requests, CONV_RATE_PER_S, arrival="gamma", cv=CONV_ARRIVAL_CV,
        prompt=LogNormalLengths(CONV_PROMPT_MEDIAN, CONV_PROMPT_SIGMA),
        output=LogNormalLengths(CONV_OUTPUT_MEDIAN, CONV_OUTPUT_SIGMA), seed=seed, rate_scale=rate_scale,
    )


def demo_server(table=None) -> dict:
    """The demo box's serving figures as the engine resolves them from ``table``'s ``[meta]``
    (default: the demo's table), as :class:`~specsim.sim.options.ServerOptions` keywords."""
    if table is None:
        table = demo_table()
    resolved = ServerOptions().resolved(table)
    names = META_COSTS + ("kv_capacity_tokens", "kv_block_size", "max_num_batched_tokens", "chunked_prefill",
                          "max_num_seqs")
    return {name: resolved[name] for name in names}


def demo_inputs(requests: int = DEMO_REQUESTS, seed: int = 0, rate_scale: float = DEMO_RATE_SCALE) -> dict:
    """What the demo serves: ``table``, ``calibration``, ``trace`` (a TraceRead), ``server`` (the
    table's serving figures) and ``rate_scale``."""
    table = demo_table()
    return {"table": table, "calibration": demo_calibration(), "trace": demo_trace(requests, seed, rate_scale),
            "server": demo_server(table), "rate_scale": rate_scale}


# The files a tuned demo adds beside OUTPUT_FILES.
TUNED_FILES = ("schedule.toml", "vllm-speculative-config.json")


def demo_outputs(out, tuned: bool = True) -> Outputs:
    """The demo's outputs in folder ``out``, every one declared (checked) before any work: pass
    it to :func:`tune_demo` and :func:`run_demo`, which write them all together at the end."""
    outputs = Outputs()
    for name in OUTPUT_FILES + (TUNED_FILES if tuned else ()):
        outputs.declare(Path(out) / name, "--out")
    return outputs


def run_demo(requests: int = DEMO_REQUESTS, seed: int = 0, out=None, plot=True, progress=None,
             rate_scale: float = DEMO_RATE_SCALE, extra_policies=(), inputs=None, outputs=None):
    """Simulate the demo and return ``(summaries, results, inputs)``; with ``out``, write the
    table, calibration, trace, results and (with matplotlib) a plot there, and list the files
    written in ``inputs["written"]`` (and what the plot drew in ``inputs["plot"]``).

    ``extra_policies``: more policies to serve beside :data:`DEMO_POLICIES` and SGLang's
    controller (the demo adds the tuned schedule and the best fixed depth it names), each once.
    ``inputs``: :func:`demo_inputs`' dict, when already made. ``outputs``: :func:`demo_outputs`'
    for ``out``, when made before other work (its staged files are written with these).
    """
    if out is not None and outputs is None:
        # Every file is checked before the work and all are replaced together after it.
        outputs = demo_outputs(out, tuned=False)
    inputs = dict(inputs) if inputs is not None else demo_inputs(requests, seed, rate_scale)
    table, cal, read = inputs["table"], inputs["calibration"], inputs["trace"]
    base = ServerOptions(seed=seed)
    policies = list(DEMO_POLICIES) + [str(p) for p in extra_policies if str(p) not in DEMO_POLICIES]
    plan = policy_runs(list(dict.fromkeys(policies)) + [demo_adaptive()], [0.0])
    results = simulate_runs(read.requests, table, cal, plan, base, progress=progress)
    summaries = [summarize(r, SLO(DEMO_SLO_TTFT_S, DEMO_SLO_TPOT_S)) for r in results]
    mark_same_runs(results, summaries)
    if outputs is not None:
        with outputs:
            write_outputs(Path(out), summaries, results, inputs, requests_csv(results), plot, outputs)
        # The files actually written (no plot.png without matplotlib or with plot=False), in the
        # order of OUTPUT_FILES then TUNED_FILES.
        order = {name: i for i, name in enumerate(OUTPUT_FILES + TUNED_FILES)}
        inputs["written"] = sorted((Path(p) for p in outputs.written), key=lambda p: order.get(p.name, len(order)))
    return summaries, results, inputs


def demo_adaptive() -> Policy:
    """SGLang's adaptive controller on its defaults, as ``sglang-adaptive:sglang-adaptive.json``
    reads it from the demo folder."""
    cfg = parse_adaptive(SGLANG_ADAPTIVE_CONFIG, SGLANG_ADAPTIVE_FILE)
    return Policy("sglang-adaptive", adaptive=cfg, source=SGLANG_ADAPTIVE_FILE)


OUTPUT_FILES = ("table.toml", "calibration.toml", "trace.csv", SGLANG_ADAPTIVE_FILE, "requests.csv", "results.json",
                "plot.png")


def write_outputs(out: Path, summaries, results, inputs, per_request_csv, plot, outputs=None) -> list:
    """Write what the demo used and what it found into ``out``; returns the files written.

    ``outputs``: an :class:`specsim._io.Outputs` on which every name of :data:`OUTPUT_FILES` in
    ``out`` is declared; the files are staged on it (written when its ``with`` block ends).
    Without one, they are written here, all together.
    """
    if outputs is None:
        outputs = Outputs()
        for name in OUTPUT_FILES:
            outputs.declare(out / name, "the demo folder")
        with outputs:
            return write_outputs(out, summaries, results, inputs, per_request_csv, plot, outputs)
    read = inputs["trace"]
    r = read.requests
    lines = ["arrival_s,prompt_tokens,output_tokens"]
    lines += [f"{a!r},{p},{o}" for a, p, o in zip(r["arrival_s"].tolist(), r["prompt_tokens"].tolist(),
                                                  r["output_tokens"].tolist())]
    if plot:
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            plot = False
    drawn = draw(results, summaries, outputs.path(out / "plot.png")) if plot else None
    files = {
        "table.toml": inputs["table"].to_text(),
        "calibration.toml": inputs["calibration"].render(),
        "trace.csv": "\n".join(lines) + "\n",
        SGLANG_ADAPTIVE_FILE: SGLANG_ADAPTIVE_CONFIG,
        "requests.csv": per_request_csv,
        "results.json": json.dumps({
            "policies": summaries,
            "trace": trace_summary(read),
            "server": inputs["server"],
            "rate_scale": inputs["rate_scale"],
            "slo": {"ttft_s": DEMO_SLO_TTFT_S, "tpot_s": DEMO_SLO_TPOT_S},
            "plot": None if drawn is None else {"series": drawn["series"], "legends": drawn["legends"],
                                                "titles": drawn["titles"]},
            "note": "modelled table, published-rate calibration, synthetic trace: a demonstration, not a measurement",
        }, indent=2, allow_nan=False) + "\n",
    }
    written = []
    for name, text in files.items():
        outputs.text(out / name, text)
        written.append(out / name)
    if drawn is not None:
        inputs["plot"] = drawn
        written.append(out / "plot.png")
    return written


DEMO_TUNE_SEEDS = 2
DEMO_TUNE_ROUNDS = 3
# Share of requests a tuned schedule must keep within the demo's SLO.
DEMO_TUNE_ATTAINMENT = 0.97


def tune_demo(inputs, seed: int = 0, out=None, outputs=None):
    """Tune a width -> depth schedule for the demo's trace: least energy per token with
    :data:`DEMO_TUNE_ATTAINMENT` of the requests within the demo's SLO, by a short search (at most
    :data:`DEMO_TUNE_ROUNDS` rounds of moves, threads in this process). With ``out``, write
    ``schedule.toml`` and (when vLLM can take it) ``vllm-speculative-config.json`` there (staged on
    ``outputs``, :func:`demo_outputs`, when given: written with the rest of the demo). The vLLM
    config is the tuned per-batch schedule only when its gain clears the noise and what a per-batch
    list costs vLLM (:meth:`TuneResult.recommended_for`), else the plain static setting.

    Returns
    -------
    (TuneResult, EngineConfig or None)
    """
    result = tune(inputs["trace"], inputs["table"], inputs["calibration"],
                  options=ServerOptions(seed=seed, **inputs["server"]), seeds=DEMO_TUNE_SEEDS,
                  slo=SLO(DEMO_SLO_TTFT_S, DEMO_SLO_TPOT_S, DEMO_TUNE_ATTAINMENT),
                  max_rounds=DEMO_TUNE_ROUNDS, executor="threads",
                  names={"trace": "trace.csv", "table": "table.toml", "calibration": "calibration.toml"})
    try:
        vllm = result.export("vllm")
    except ScheduleError:
        vllm = None  # the tuned schedule never speculates: there is no speculative config to write
    if out is not None:
        staged = outputs if outputs is not None else demo_outputs(out)
        staged.text(Path(out) / "schedule.toml", result.to_toml())
        if vllm is not None:
            staged.text(Path(out) / "vllm-speculative-config.json", vllm.text)
        if outputs is None:
            with staged:
                pass
    return result, vllm


# The figures the demo's answer weighs, best first in each: (verdict name, label, unit, scale).
ANSWER_FIGURES = (("lowest p99 TPOT", "p99 TPOT", "ms", 1000.0), ("lowest energy", "energy", "J/token", 1.0))


def answer(summaries, rerun, seed: int, verdicts: dict) -> dict:
    """The demo's lead line: for each figure of :data:`ANSWER_FIGURES`, the best speculative run
    against plain decoding (``fixed:0``), paired over the verdicts' draft-outcome seeds, and
    whether the speculative policies differ beyond the noise (``verdicts``: :func:`verdict` by
    name). Returns ``line`` and, per figure, ``figures[label]``: ``best``, ``plain``, ``value``,
    ``plain_value`` (in the unit shown), ``real`` (the gain over plain decoding clears the noise)
    and ``tie`` (the speculative policies' lead does not); None without a plain-decoding row."""
    plain = next((i for i, s in enumerate(summaries) if s["policy"] == "fixed:0" and s.get("same_as") is None), None)
    if plain is None:
        return None
    figures = {}
    for name, shown, unit, scale in ANSWER_FIGURES:
        get = FIGURES[name][0]
        pool = [i for i, s in enumerate(summaries) if i != plain and s.get("same_as") is None and get(s) is not None]
        if not pool or get(summaries[plain]) is None:
            continue
        best = min(pool, key=lambda i: get(summaries[i]))
        diffs = [get(summaries[best]) - get(summaries[plain])]
        for k in range(1, NOISE_SEEDS + 1):
            other = (seed + k) % (1 << 64)
            diffs.append(get(rerun(best, other)) - get(rerun(plain, other)))
        mean, half = paired_noise(diffs)
        v = verdicts.get(name)
        figures[shown] = {"best": summaries[best]["label"], "value": scale * get(summaries[best]),
                          "plain_value": scale * get(summaries[plain]), "unit": unit,
                          "real": bool(mean < 0 and -mean > half), "tie": v is None or not v["clear"],
                          "leader": None if v is None else v["leader"]}
    real = [(k, f) for k, f in figures.items() if f["real"]]
    none = [k for k, f in figures.items() if not f["real"]]
    parts = []
    for k, f in real:
        digits = ".1f" if f["unit"] == "ms" else ".4f"
        change = 100.0 * (f["value"] / f["plain_value"] - 1.0) if f["plain_value"] else float("nan")
        parts.append(f"{k} {format(f['plain_value'], digits)} -> {format(f['value'], digits)} {f['unit']} "
                     f"({change:+.0f}%, {f['best']})")
    line = "answer: against plain decoding, " + (
        "the real gain is in " + " and ".join(parts) if parts else "no figure gains beyond the draft-outcome noise")
    if none and real:
        line += f"; {' and '.join(none)}: no gain beyond the noise"
    ties = [k for k, f in figures.items() if f["tie"]]
    leads = [f"{f['leader']} leads in {k}" for k, f in figures.items() if not f["tie"]]
    if ties:
        line += (f". Between the speculative policies, {' and '.join(ties)} differences are within the noise: "
                 "a tie, not a winner")
    if leads:
        line += (". " if not ties else "; ") + ", ".join(leads) + " beyond the noise"
    return {"line": line + ".", "figures": figures}
