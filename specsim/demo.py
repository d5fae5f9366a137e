"""specsim's main job on built-in defaults: no files, no GPU.

A modelled cost table (Llama-3.1-8B + EAGLE one-layer drafter on one H200, from the roofline in
:mod:`specsim.costmodel`), a calibration from published EAGLE acceptance rates
(:mod:`specsim.demo_inputs`), and a synthetic request trace shaped like the public Azure
LLM inference conversation trace of November 2023, served under specsim's draft-depth policies,
SGLang's own adaptive controller on its default settings, SGLang's default EAGLE tree and
``tree:auto`` (plain, a chain or a tree by the planner at each width), and plain decoding as the
baseline.

The question it answers is the simulator's typical what-if: the conversation traffic doubled
(:data:`DEMO_RATE_SCALE`). At the trace's own rate one modelled H200 idles at a batch of about
seven and every policy serves the same tokens; at twice the rate it is near capacity, plain
decoding falls behind, and the policies differ in energy and tail latency.

Trace shape, from the public trace (Patel et al., "Splitwise: Efficient generative LLM inference
using phase splitting", ISCA 2024; Azure/AzurePublicDataset, AzureLLMInferenceTrace_conv):
19,366 requests over about 3,500 s (5.53 requests/s), inter-arrival coefficient of variation
1.09; prompt tokens median 1,020 (log-spread 0.99), output tokens median 129 (log-spread 0.86).
The medians are the published ones; rate, burstiness and spreads were measured on the public CSV.

Trees: the calibration carries a ``[tree]`` table (:func:`specsim.demo_inputs.demo_tree_calibration`,
the one ``examples/tree-cal.toml`` holds): the chain priors as each depth's rank-1 acceptance and
an illustrative, not published, 0.10, 0.04, 0.02 for ranks 2..4. So the chains' rows are those of
the published rates, and the trees' rows say what trees would do for a drafter of that rank
shape; fit a drafter's own with ``calib fit --drafts-log``. SGLang's tree is its automatic
default for Llama with EAGLE (5 steps, top-k 4, 8 draft tokens), written beside the other inputs
as :data:`SGLANG_TREE_FILE` so a run can be repeated with ``sglang:FILE``.

Server: the modelled table's ``[meta]`` carries what the engine needs beyond step costs (see
:func:`specsim.costmodel.roofline.serving_meta`): a prefill cost per step (one read of the
weights) and per token (the H200's dense BF16 rate at 60% utilisation), at full board power;
the KV capacity that fits beside the weights; the H200's idle power. The engine schedules as vLLM
does (token budget 8192, chunked prefill). All of it is modelled; nothing here is a measurement.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from specsim.errors import ScheduleError
from specsim._io import Outputs
from specsim._stats import paired_noise
from specsim.demo_inputs import demo_table, demo_tree_calibration
from specsim.interop import sglang_tree_policy
from specsim.interop.sglang import parse_adaptive
from specsim.policy.policy import Policy, parse_policy, policy_runs
from specsim.sim.metrics import requests_csv, summarize
from specsim.sim.engine import prepare, simulate_runs
from specsim.sim.options import META_COSTS, ServerOptions
from specsim.sim.report import plot as draw
from specsim.sim.slo import SLO
from specsim.sim.trees import BRANCHING
from specsim.sim.verdict import FIGURES, NOISE_SEEDS, mark_same_runs
from specsim.studies.inputs import StudyInputs
from specsim.studies.tune import TuneSettings, tune
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
# SGLang's EAGLE tree as the engine sets it by itself for Llama (its automatic defaults: 5 steps,
# top-k 4, 8 draft tokens, the root among them), written beside the other inputs likewise.
SGLANG_TREE_FILE = "sglang-eagle-tree.json"
SGLANG_TREE_CONFIG = ('{"speculative_num_steps": 5, "speculative_eagle_topk": 4, '
                      '"speculative_num_draft_tokens": 8}\n')
# The tree policies served after the chains: SGLang's tree (demo_sglang_tree) and this.
DEMO_TREE_POLICIES = ("tree:auto",)
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
    resolved = ServerOptions().resolve(table)
    names = META_COSTS + ("kv_capacity_tokens", "kv_block_size", "max_num_batched_tokens", "chunked_prefill",
                          "max_num_seqs")
    return {name: getattr(resolved, name) for name in names}


def demo_inputs(requests: int = DEMO_REQUESTS, seed: int = 0, rate_scale: float = DEMO_RATE_SCALE) -> dict:
    """What the demo serves: ``table``, ``calibration``, ``trace`` (a TraceRead), ``server`` (the
    table's serving figures) and ``rate_scale``."""
    table = demo_table()
    return {"table": table, "calibration": demo_tree_calibration(), "trace": demo_trace(requests, seed, rate_scale),
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

    ``extra_policies``: more policies to serve beside :data:`DEMO_POLICIES`, SGLang's
    controller and the trees (the demo adds the tuned schedule and the best fixed depth it
    names), each once; the chains come first, then SGLang's controller, then SGLang's tree and
    :data:`DEMO_TREE_POLICIES`.
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
    plan = policy_runs(list(dict.fromkeys(policies)) + [demo_adaptive(), demo_sglang_tree(), *DEMO_TREE_POLICIES],
                       [0.0])
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


def demo_sglang_tree() -> Policy:
    """SGLang's default EAGLE tree for Llama, as ``sglang:sglang-eagle-tree.json`` reads it from
    the demo folder (its tree built from the calibration's ``[tree]`` table)."""
    return sglang_tree_policy(SGLANG_TREE_CONFIG, SGLANG_TREE_FILE, label=f"sglang:{SGLANG_TREE_FILE}")


OUTPUT_FILES = ("table.toml", "calibration.toml", "trace.csv", SGLANG_ADAPTIVE_FILE, SGLANG_TREE_FILE, "requests.csv",
                "results.json", "plot.png")


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
        SGLANG_TREE_FILE: SGLANG_TREE_CONFIG,
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
    study = StudyInputs(inputs["trace"], inputs["table"], inputs["calibration"],
                        ServerOptions(seed=seed, **inputs["server"]),
                        SLO(DEMO_SLO_TTFT_S, DEMO_SLO_TPOT_S, DEMO_TUNE_ATTAINMENT), DEMO_TUNE_SEEDS,
                        names={"trace": "trace.csv", "table": "table.toml", "calibration": "calibration.toml"})
    result = tune(study, settings=TuneSettings(max_rounds=DEMO_TUNE_ROUNDS), executor="threads")
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


def auto_tree_widths(inputs, seed: int = 0) -> tuple:
    """The widths at which ``tree:auto`` verifies a branching tree on the demo's server (as the
    engine plans it: per width, the demo's table having no context axis), as ``(first, last)``
    ranges, and the engine's ``kind_at`` array."""
    p = prepare(inputs["trace"].requests[:1], inputs["table"], inputs["calibration"], parse_policy("tree:auto"),
                ServerOptions(seed=seed))
    return _ranges(np.flatnonzero(p.tree.kind_at == BRANCHING).tolist()), p.tree.kind_at


def _ranges(widths) -> tuple:
    out = []
    for w in widths:
        if out and out[-1][1] == w - 1:
            out[-1][1] = w
        else:
            out.append([w, w])
    return tuple((a, b) for a, b in out)


def tree_answer(summaries, results, rerun, seed: int, inputs) -> dict:
    """The demo's closing word on trees: for each figure of :data:`ANSWER_FIGURES`, the best tree
    run against the best chain run (speculative, not a tree), their difference paired over the
    verdicts' draft-outcome seeds (as :func:`answer` pairs), and where ``tree:auto`` plans
    branching trees (:func:`auto_tree_widths`) and what share of its logged decode steps ran there.
    Returns ``line`` and ``figures[label]``: ``tree``, ``chain``, ``value``, ``chain_value`` (in
    the unit shown), ``change`` (%), ``mean``, ``half`` (paired, in the figure's own unit) and
    ``pays`` (the tree is below the chain beyond the noise); None without a tree and a chain row."""
    kinds = [r.policy_spec.kind for r in results]
    distinct = [i for i, s in enumerate(summaries) if s.get("same_as") is None]
    trees = [i for i in distinct if kinds[i] == "tree"]
    chains = [i for i in distinct if kinds[i] != "tree" and summaries[i]["policy"] != "fixed:0"]
    picks = []
    for name, shown, unit, scale in ANSWER_FIGURES:
        get = FIGURES[name][0]
        t = [i for i in trees if get(summaries[i]) is not None]
        c = [i for i in chains if get(summaries[i]) is not None]
        if t and c:
            picks.append((get, shown, unit, scale, min(t, key=lambda i: get(summaries[i])),
                          min(c, key=lambda i: get(summaries[i]))))
    prefetch = getattr(rerun, "prefetch", None)
    if prefetch is not None:  # every rerun at once, in threads (as the verdicts' are)
        prefetch(list(dict.fromkeys((i, (seed + k) % (1 << 64)) for *_, a, b in picks for i in (a, b)
                                    for k in range(1, NOISE_SEEDS + 1))))
    figures = {}
    for get, shown, unit, scale, best_t, best_c in picks:
        diffs = [get(summaries[best_t]) - get(summaries[best_c])]
        for k in range(1, NOISE_SEEDS + 1):
            other = (seed + k) % (1 << 64)
            diffs.append(get(rerun(best_t, other)) - get(rerun(best_c, other)))
        mean, half = paired_noise(diffs)
        value, chain_value = scale * get(summaries[best_t]), scale * get(summaries[best_c])
        figures[shown] = {"tree": summaries[best_t]["label"], "chain": summaries[best_c]["label"], "value": value,
                          "chain_value": chain_value, "unit": unit, "mean": mean, "half": half,
                          "change": 100.0 * (value / chain_value - 1.0) if chain_value else float("nan"),
                          "pays": bool(mean < 0 and -mean > half)}
    if not figures:
        return None
    parts = []
    for k, f in figures.items():
        digits = ".1f" if f["unit"] == "ms" else ".4f"
        said = ("pays, beyond the noise" if f["pays"] else
                "costs more, beyond the noise" if f["mean"] > 0 and f["mean"] > f["half"] else "within the noise")
        parts.append(f"{k} {format(f['chain_value'], digits)} -> {format(f['value'], digits)} {f['unit']} "
                     f"({f['change']:+.1f}%, {f['tree']} against {f['chain']}): {said}")
    line = "trees: against the best chain, " + "; ".join(parts)
    ranges, kind_at = auto_tree_widths(inputs, seed)
    auto = next((i for i, r in enumerate(results) if str(r.policy_spec) == "tree:auto"), None)
    if not ranges:
        line += ". tree:auto plans no branching tree at any width on this box (chains or plain only)"
    else:
        where = ", ".join(f"{a}" if a == b else f"{a}-{b}" for a, b in ranges)
        line += f". tree:auto plans branching trees at widths {where} (chains or plain elsewhere)"
        if auto is not None:
            w = results[auto].step_width
            w = w[w > 0]
            if w.shape[0]:
                share = float((kind_at[np.minimum(w, kind_at.shape[0] - 1)] == BRANCHING).mean())
                line += f"; {100.0 * share:.0f}% of its decode steps on this traffic were at those widths"
    return {"line": line + ".", "figures": figures}
