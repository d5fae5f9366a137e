"""specsim's main job on built-in defaults: no files, no GPU.

A modelled cost table (Llama-3.1-8B + EAGLE one-layer drafter on one H200, from the roofline in
:mod:`specsim.costmodel`), a calibration from published EAGLE acceptance rates
(:mod:`specsim.costmodel.defaults`), and a synthetic request trace shaped like the public Azure
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
from specsim.costmodel.defaults import demo_calibration, demo_table
from specsim.interop.sglang import parse_adaptive
from specsim.policy.policy import Policy, policy_runs
from specsim.sim.metrics import requests_csv, summarize
from specsim.sim.engine import simulate_runs
from specsim.sim.options import META_COSTS, ServerOptions
from specsim.sim.report import plot as draw
from specsim.sim.slo import SLO
from specsim.sim.verdict import mark_same_runs
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


def run_demo(requests: int = DEMO_REQUESTS, seed: int = 0, out=None, plot=True, progress=None,
             rate_scale: float = DEMO_RATE_SCALE):
    """Simulate the demo and return ``(summaries, results, inputs)``; with ``out``, write the
    table, calibration, trace, results and (with matplotlib) a plot there, and list the files
    written in ``inputs["written"]``."""
    outputs = None
    if out is not None:
        # Every file is checked before the work and all are replaced together after it.

        outputs = Outputs()
        for name in OUTPUT_FILES:
            outputs.declare(Path(out) / name, "--out")
    table, cal = demo_table(), demo_calibration()
    read = demo_trace(requests, seed, rate_scale)
    server = demo_server(table)
    base = ServerOptions(seed=seed)
    plan = policy_runs(list(DEMO_POLICIES) + [demo_adaptive()], [0.0])
    results = simulate_runs(read.requests, table, cal, plan, base, progress=progress)
    summaries = [summarize(r, SLO(DEMO_SLO_TTFT_S, DEMO_SLO_TPOT_S)) for r in results]
    mark_same_runs(results, summaries)
    inputs = {"table": table, "calibration": cal, "trace": read, "server": server, "rate_scale": rate_scale}
    if outputs is not None:
        with outputs:
            # The files actually written (no plot.png without matplotlib or with plot=False).
            inputs["written"] = write_outputs(Path(out), summaries, results, inputs, requests_csv(results), plot,
                                              outputs)
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
            "note": "modelled table, published-rate calibration, synthetic trace: a demonstration, not a measurement",
        }, indent=2, allow_nan=False) + "\n",
    }
    written = []
    for name, text in files.items():
        outputs.text(out / name, text)
        written.append(out / name)
    if plot:
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            plot = False
    if plot:
        draw(results, summaries, outputs.path(out / "plot.png"))
        written.append(out / "plot.png")
    return written


DEMO_TUNE_SEEDS = 2
DEMO_TUNE_ROUNDS = 3
# Share of requests a tuned schedule must keep within the demo's SLO.
DEMO_TUNE_ATTAINMENT = 0.97


def tune_demo(inputs, seed: int = 0, out=None):
    """Tune a width -> depth schedule for the demo's trace: least energy per token with
    :data:`DEMO_TUNE_ATTAINMENT` of the requests within the demo's SLO, by a short search (at most
    :data:`DEMO_TUNE_ROUNDS` rounds of moves, threads in this process). With ``out``, write
    ``schedule.toml`` and (when vLLM can take it) ``vllm-speculative-config.json`` there.

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
        with Outputs() as outputs:
            outputs.text(outputs.declare(Path(out) / "schedule.toml", "--out"), result.to_toml())
            if vllm is not None:
                outputs.text(outputs.declare(Path(out) / "vllm-speculative-config.json", "--out"), vllm.text)
    return result, vllm
