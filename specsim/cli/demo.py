"""``specsim demo``: the main job on built-in defaults, no files needed."""

from __future__ import annotations

import threading
import time

from specsim.cli._common import count, real, whole
from specsim.errors import ScheduleError, SpecsimError
from specsim._checks import rate_scale_problem
from specsim.demo import (
    DEMO_RATE_SCALE, DEMO_REQUESTS, DEMO_SLO_TPOT_S, DEMO_SLO_TTFT_S, DEMO_TUNE_ATTAINMENT, DEMO_TUNE_ROUNDS,
    answer, demo_inputs, demo_outputs, run_demo, tree_answer, tune_demo,
)
from specsim.sim.options import ServerOptions
from specsim.sim.metrics import overload_lines
from specsim.sim.slo import SLO
from specsim.sim.report import comparison_table
from specsim.sim.verdict import reruns, same_run_lines, verdicts


def register(sub, groups):
    p = sub.add_parser(
        "demo",
        help="simulate the draft-depth policies and SGLang's adaptive controller on built-in defaults (no files, no GPU)",
        description="Serve a synthetic conversation trace (shaped like the public Azure 2023 one, at twice its "
                    "rate) on a modelled H200 running Llama-3.1-8B with an EAGLE drafter, under fixed, schedule, "
                    "goodput, propose, sequence and load-aware policies, SGLang's adaptive controller, SGLang's default EAGLE "
                    "tree, tree:auto and plain decoding; print them side by side, say where trees pay, and write "
                    "the inputs, results and a plot to --out.",
    )
    p.add_argument("--out", default="specsim-demo", metavar="DIR",
                   help="folder for the table, calibration, trace, results and plot it used (default specsim-demo)")
    p.add_argument("--requests", type=count, default=DEMO_REQUESTS, help=f"requests to simulate (default {DEMO_REQUESTS})")
    p.add_argument("--seed", type=whole, default=0, help="seed of the trace and of the draft outcomes (default 0)")
    p.add_argument("--rate-scale", type=real, default=DEMO_RATE_SCALE, metavar="X",
                   help=f"traffic relative to the public trace's rate (default {DEMO_RATE_SCALE:g}: twice it)")
    p.add_argument("--no-plot", action="store_true", help="skip the plot even when matplotlib is installed")
    p.add_argument("--no-tune", action="store_true", help="skip tuning a width -> depth schedule for the trace")
    p.set_defaults(func=cmd_demo)


def cmd_demo(args):
    if not args.out.strip():
        # An empty name would put the demo's files (trace.csv, table.toml, ...) in the current folder.
        raise SpecsimError("--out: the folder name is empty; give a folder (default specsim-demo)")
    if args.requests < 1:
        raise SpecsimError(f"--requests must be >= 1, got {args.requests}")
    if args.seed < 0:
        raise SpecsimError(f"--seed must be >= 0, got {args.seed}")
    problem = rate_scale_problem(args.rate_scale, "--rate-scale")
    if problem:
        raise SpecsimError(problem)
    start = time.monotonic()
    if not args.no_plot:
        _load_matplotlib_meanwhile()
    outputs = demo_outputs(args.out, tuned=not args.no_tune)  # every output checked before any work
    inputs = demo_inputs(args.requests, args.seed, args.rate_scale)
    tuned = None if args.no_tune else _tune(inputs, args, outputs)
    # The policies the closing lines name are rows of the table and series of the plot.
    extra = () if tuned is None or isinstance(tuned, str) else (tuned[0].policy, tuned[0].best_fixed)
    summaries, results, inputs = run_demo(args.requests, args.seed, out=args.out, plot=not args.no_plot,
                                          rate_scale=args.rate_scale, extra_policies=extra, inputs=inputs,
                                          outputs=outputs)
    table, read = inputs["table"], inputs["trace"]
    r = read.requests
    print(f"specsim demo: {r.shape[0]} requests ({int(r['output_tokens'].sum())} output tokens over "
          f"{read.span_s:.0f} s), shaped like the Azure 2023 conversation trace at {args.rate_scale:g}x its rate")
    print(f"  served by a modelled {table.key.box_class} running {table.key.recipe} (roofline, not measured), "
          f"calibration from published EAGLE acceptance rates")
    print()
    print(comparison_table(summaries))
    for line in overload_lines(summaries):
        print(line)
    print(f"(SLO: TTFT <= {DEMO_SLO_TTFT_S} s and TPOT <= {DEMO_SLO_TPOT_S} s)")
    print()
    _verdicts(summaries, results, inputs, args.seed)
    written = [p.name for p in inputs["written"]]
    why = ""
    if "plot.png" not in written:
        why = ("; no plot: --no-plot" if args.no_plot else
               "; no plot: matplotlib is not installed (pip install 'specsim-llm[plot]')")
    print(f"{_names(written)} written to {args.out}/ ({time.monotonic() - start:.1f} s{why}). Start from them:")
    print(f"  specsim simulate --trace {args.out}/trace.csv --table {args.out}/table.toml "
          f"--calibration {args.out}/calibration.toml --policy sequence --seed {args.seed} "
          f"--slo-ttft-s {DEMO_SLO_TTFT_S} --slo-tpot-s {DEMO_SLO_TPOT_S}")
    if tuned is not None:
        _tuned(tuned, args)
    return 0


def _load_matplotlib_meanwhile() -> None:
    """Import matplotlib for the plot in a background thread while the demo compiles and runs:
    about half a second of the plot's time, overlapped with a first run's compile, whose LLVM
    part releases the GIL (cold demo 13.7-14.0 s -> 13.1-13.7 s, runs interleaved; warm the
    same). The plot's own import waits for it under the import lock; where matplotlib is
    missing or broken the plot says so, so this says nothing."""
    def load():
        try:
            import matplotlib  # optional (the plot extra): loaded only when a figure is drawn

            matplotlib.use("Agg")
            import matplotlib.pyplot  # noqa: F401
        except Exception:  # reported where the plot is drawn
            pass

    threading.Thread(target=load, name="specsim-matplotlib", daemon=True).start()


def _names(names) -> str:
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


def _tune(inputs, args, outputs):
    """Tune a schedule for the demo's trace: ``(result, vllm config, seconds)``, or the reason none
    was tuned (a string)."""
    start = time.monotonic()
    try:
        result, vllm = tune_demo(inputs, args.seed, out=args.out, outputs=outputs)
    except ScheduleError as e:
        return str(e)
    return result, vllm, time.monotonic() - start


def _tuned(tuned, args):
    """The demo's last paragraph: a schedule tuned for its trace, the policies it is weighed
    against (each a row of the table above), and what to serve on vLLM."""
    print()
    if isinstance(tuned, str):
        print(f"no schedule tuned: {tuned}")
        return
    result, vllm, seconds = tuned
    held = {s.policy: s for s in result.holdout}
    others = f"the best fixed depth within the SLO, {result.best_fixed}, {held[result.best_fixed].mean:.4f}; " + \
        ", ".join(f"{p} {held[p].mean:.4f}" for p in ("propose", "sequence"))
    print(f"tuned schedule for this trace, least J/token with {100 * DEMO_TUNE_ATTAINMENT:g}% of requests within "
          f"the SLO ({result.evaluations} simulations, {seconds:.1f} s; {DEMO_TUNE_ROUNDS} rounds, "
          "where specsim tune goes on until no move helps):")
    print(f"  {result.policy}")
    print(f"  {held[result.policy].mean:.4f} J/token on the held-out last quarter of the trace, unseen seeds "
          f"(vs {others}); the table's rows of these policies are the whole trace")
    print(f"  {result.verdict()}")
    for line in result.reach_lines():
        print(f"  {line}")
    print(f"  in {args.out}/schedule.toml; specsim schedule export turns it into a TensorRT-LLM or SGLang config")
    if vllm is not None:
        _, why = result.recommended_for("vllm")
        if why:
            print(f"vLLM: {why}")
        print(f"vLLM: --speculative-config '{vllm.text.strip()}'")


def _verdicts(summaries, results, inputs, seed):
    """Say in words what the table shows: which policies were the same run, the cheapest and the
    fastest policy when the lead clears the draft-outcome noise (else a tie), where trees pay
    against the chains, and plain decoding."""
    rerun = reruns(inputs["trace"].requests, inputs["table"], inputs["calibration"], results,
                   ServerOptions(seed=seed), SLO(DEMO_SLO_TTFT_S, DEMO_SLO_TPOT_S))
    names = ("lowest energy", "lowest p99 TPOT")
    found = dict(zip(names, verdicts(names, summaries, rerun, seed, early=False)))  # the answer reads every seed
    lead = answer(summaries, rerun, seed, found)
    if lead is not None:
        print(lead["line"])
    for line in same_run_lines(summaries):
        print(line)
    for v in found.values():
        if v is not None:
            print(v["line"])
    trees = tree_answer(summaries, results, rerun, seed, inputs)
    if trees is not None:
        print(trees["line"])
    plain = next((s for s in summaries if s["policy"] == "fixed:0" and s["j_per_token"] is not None), None)
    if plain is not None:
        print(f"plain decoding: {plain['tokens_per_s']:.0f} tok/s, {plain['j_per_token']:.4f} J/token, "
              f"p99 TPOT {plain['tpot_s']['p99'] * 1000:.1f} ms")
