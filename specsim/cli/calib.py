"""``specsim calib ...``: show and fit acceptance calibrations."""

from __future__ import annotations

import argparse
import json
import sys

from specsim.cli import calib_live
from specsim.cli._common import (
    count, float_list, method_name, print_json, real, require_matplotlib as require_plot_format,
)
from specsim.cli._drafter import drafter_flags, drafter_key
from specsim._text import format_grid
from specsim.errors import CalibrationError
from specsim import _toml
from specsim._checks import MAX_TREE_DEPTH, is_int
from specsim._io import Outputs, read_input
from specsim.calibration import AcceptanceCalibration
from specsim.calibration.calibration import rising_positions
from specsim.calibration.fit import (
    COUNTS_FORMAT, DEFAULT_EDGES, calibration_from_rates, check_count_sizes, counts_from_steps, fit_counts,
    load_counts, render_counts, steps_from_windows,
)
from specsim.calibration.logs import load_drafts_log, load_steps_log
from specsim.calibration.report import build_report, format_report, format_tree_view, plot_reliability, tree_view
from specsim.calibration.spread import resolve_spread
from specsim.calibration.tree_fit import rank_acceptance_from_counts, rank_rates_table
from specsim.interop.vllm import synthetic_config


def register(sub, groups):
    calib = sub.add_parser("calib", help="show and fit acceptance calibrations")
    csub = calib.add_subparsers(dest="calib_command", metavar="ACTION")
    csub.required = True
    groups["calib"] = csub
    p = csub.add_parser("show", help="print a calibration's drafter, buckets and priors")
    p.add_argument("file", help="calibration TOML")
    p.add_argument("--json", action="store_true", help="print as JSON")
    p.set_defaults(func=cmd_show)
    register_fit(csub)
    p = csub.add_parser(
        "export", help="write a calibration as an engine setting that serves drafts at its acceptance",
        description="Write vLLM's --speculative-config with rejection_sample_method \"synthetic\" and "
                    "synthetic_acceptance_rates (the calibration's per-position unconditional rates), so the real "
                    "engine accepts drafts at this calibration's acceptance and can be timed there. See "
                    "docs/telemetry.md#a-calibration-the-engine-can-serve.")
    p.add_argument("file", help="calibration TOML")
    p.add_argument("--to", required=True, choices=("vllm-synthetic",), help="the setting to write")
    p.add_argument("--depth", type=count, metavar="K",
                   help="num_speculative_tokens (default: the calibration's fitted positions)")
    p.add_argument("--method", default="eagle3", metavar="NAME", type=method_name, help="the speculative method (default eagle3)")
    p.add_argument("--draft-model", metavar="PATH", help="the drafter's weights (vLLM `model`)")
    p.add_argument("-o", "--out", metavar="FILE", help="write the JSON here (default: print it)")
    p.set_defaults(func=cmd_export)
    calib_live.register(csub)
    calib_live.register_drift(csub)


def cmd_show(args):
    cal = AcceptanceCalibration.load(args.file)
    d = cal.drafter
    if args.json:
        print_json({
            "drafter": {"weights_sha256": d.weights_sha256, "vocab": d.vocab, "quantization": d.quantization,
                        "context": d.context},
            "edges": [float(e) for e in cal.edges],
            "p_accept": cal.p_accept.tolist(),
            "prior_by_position": cal.priors.tolist(),
            **({"request_spread": spread_dict(cal.spread)} if cal.spread is not None else {}),
            **({"tree": tree_view(cal)} if cal.rank_acceptance is not None else {}),
        })
        return 0
    print(f"drafter sha256 {d.weights_sha256}  vocab {d.vocab}  {d.quantization}  context {str(d.context).lower()}")
    rows, low = [], "-inf"
    for e, p in zip(cal.edges, cal.p_accept):
        rows.append([f"({low}, {float(e):g}]", f"{p:.4f}"])
        low = f"{float(e):g}"
    print(format_grid(["log-prob bucket", "P(accept)"], rows))
    run, total = 1.0, 0.0
    prow = []
    for j, p in enumerate(cal.priors, 1):
        run *= p
        total += run
        prow.append([j, f"{p:.4f}", f"{run:.4f}", f"{total:.4f}"])
    print(format_grid(["position", "prior (cond.)", "P(reached+acc.)", "E[accepted] to here"], prow))
    sp = cal.spread
    if sp is not None:
        print(f"request spread: logit_sd {sp.logit_sd:g} +- {sp.standard_error:g} from {sp.requests} requests "
              f"({sp.source})")
    if cal.rank_acceptance is not None:
        print(format_tree_view(tree_view(cal)))
    return 0


def spread_dict(sp) -> dict:
    """A request spread as JSON-ready fields."""
    return {"logit_sd": sp.logit_sd, "standard_error": sp.standard_error, "requests": sp.requests,
            "source": sp.source}


def cmd_export(args):
    with Outputs({"CAL": args.file}) as out:
        out.declare(args.out, "-o")
        cal = AcceptanceCalibration.load(args.file)
        cfg = synthetic_config(cal, args.depth, args.method, args.draft_model)
        line = json.dumps(cfg, separators=(", ", ": "))
        if args.out:
            out.text(args.out, line + "\n")
    print(f"specsim: use: vllm serve ... --speculative-config '{line}'", file=sys.stderr)
    print("specsim: note: vLLM then accepts drafts at these rates whatever the drafter proposes: time the engine at "
          "the widths and depths a cost table needs and write those step times as the table", file=sys.stderr)
    if args.out:
        print(f"wrote {args.out}", file=sys.stderr)
    else:
        print(line)
    return 0


FIT_EPILOG = """\
inputs (exactly one):
  --counts FILE       fitting counts, TOML or JSON (see below)
  --drafts-log FILE   one row per draft: step, sequence, position, confidence, accepted
                      (CSV with a header, or JSON Lines for .jsonl/.ndjson/.json); rows after a
                      chain's first rejection are not reached and are counted apart; with
                      `rank` (and `parent`) columns, one row per node of a draft tree: also
                      writes the [tree] table a[d][r] (docs/calibration.md#draft-trees)
  --steps-log FILE    one row per verify step: drafts, accepted (the accepted run); gives a
                      one-bucket calibration (confidence ignored)
  --rates R1,R2,..    per-position acceptance rates (--rates-form marginal, vLLM style, or
                      conditional); gives a one-bucket calibration, no counts
  --windows FILE      TOML with `windows` rows of step counts [accepted k, .., accepted 1,
                      rejected], at top level or in [[run]] tables (all summed, or --run NAME)
  --rank-rates A1,..  with any of them, or alone with --tree-depths D: a draft tree's rank
                      acceptance, the same at every depth (docs/calibration.md#draft-trees)

{counts}
"""


def register_fit(csub):
    p = csub.add_parser(
        "fit", help="fit a calibration from counts, logs, rates or step histograms (docs/calibration.md#fitting)",
        epilog=FIT_EPILOG.format(counts=COUNTS_FORMAT), formatter_class=_RawEpilog,
    )
    src = p.add_mutually_exclusive_group()
    src.add_argument("--counts", metavar="FILE", help="fitting counts (TOML or JSON)")
    src.add_argument("--drafts-log", metavar="FILE", help="per-draft log (CSV or JSON Lines)")
    src.add_argument("--steps-log", metavar="FILE", help="per-step log (CSV or JSON Lines)")
    src.add_argument("--rates", type=float_list, metavar="R1,R2,..", help="per-position acceptance rates")
    src.add_argument("--windows", metavar="FILE", help="TOML with accept-run histograms (`windows`)")
    p.add_argument("--rank-rates", type=float_list, metavar="A1,A2,..",
                   help="draft trees: P(the target's token is the rank-r candidate), rank 1 first, the same at "
                        "every depth (Sequoia's acceptance vector); writes the [tree] table. With another input, "
                        "or alone (then the chain priors are A1 at every depth)")
    p.add_argument("--tree-depths", type=count, metavar="D",
                   help="--rank-rates: depths of the [tree] table, 1..64 (default: the calibration's position "
                        "priors, at most 64; needed when --rank-rates is the only input)")
    p.add_argument("--rates-form", choices=("marginal", "conditional"), default="marginal",
                   help="--rates are marginal P(j accepted) (default, as vLLM reports) or conditional")
    p.add_argument("--run", metavar="NAME", help="--windows: use only the [[run]] with this name")
    p.add_argument("--edges", type=float_list, metavar="E1,E2,..",
                   help="--drafts-log: bucket edges, written --edges=E1,E2,.. since they start with a minus (default " + ",".join(f"{e:g}" for e in DEFAULT_EDGES) + ")")
    p.add_argument("--holdout", type=real, default=0.0, metavar="FRACTION",
                   help="--drafts-log: hold out this fraction of the latest steps and score the fit on them")
    drafter_flags(p, what_if=True)
    p.add_argument("-o", "--output", required=True, metavar="OUT.toml", help="calibration file to write")
    p.add_argument("--counts-out", metavar="FILE", help="also write the binned counts (TOML counts file)")
    p.add_argument("--report", action="store_true", help="print the reliability report")
    p.add_argument("--json", action="store_true", help="print the reliability report as JSON")
    p.add_argument("--plot", metavar="PNG", help="write a reliability diagram (needs matplotlib)")
    calib_live.spread_flag(p, "a --drafts-log with a `request` column")
    p.set_defaults(func=cmd_fit)


def cmd_fit(args):
    inputs = {"--counts": args.counts, "--drafts-log": args.drafts_log, "--steps-log": args.steps_log,
              "--windows": args.windows}
    with Outputs(inputs) as out:
        out.declare(args.output, "-o")
        out.declare(args.counts_out, "--counts-out")
        out.declare(args.plot, "--plot")
        _fit(args, out)
    return 0


def _fit(args, out):
    if getattr(args, "what_if", False) and args.rates is None:
        raise CalibrationError("--what-if goes with --rates: a calibration fitted from logs or counts measured a real "
                               "drafter, so name it (--drafter-sha256, --vocab, --quantization, --context)")
    drafter = drafter_key(args)
    sources = (args.counts, args.drafts_log, args.steps_log, args.rates, args.windows)
    alone = all(v is None for v in sources)
    if alone and args.rank_rates is None:
        raise CalibrationError("one of the arguments --counts --drafts-log --steps-log --rates --windows is required "
                               "(or --rank-rates with --tree-depths)")
    if args.tree_depths is not None and args.rank_rates is None:
        raise CalibrationError("--tree-depths applies to --rank-rates only (a log with ranks has its own depths)")
    if args.tree_depths is not None and not 1 <= args.tree_depths <= MAX_TREE_DEPTH:
        raise CalibrationError(f"--tree-depths {args.tree_depths:,}: give 1..{MAX_TREE_DEPTH} (docs/limits.md)")
    if alone and args.tree_depths is None:
        raise CalibrationError("--rank-rates as the only input needs --tree-depths D: how deep the trees go (the "
                               "chain priors are then the rank-1 rate at each of the D depths)")
    if args.holdout and not args.drafts_log:
        raise CalibrationError("--holdout needs --drafts-log: only a per-draft log can be split by step")
    if args.edges is not None and not args.drafts_log:
        raise CalibrationError("--edges applies to --drafts-log only (a counts file carries its own edges)")
    if args.counts_out and args.rates is not None:
        raise CalibrationError("--counts-out needs counts: --rates has none")
    if args.plot:
        # before anything is written; the shared check also refuses a format matplotlib lacks

        require_plot_format("--plot", args.plot)
    fit = holdout = per_request = tree = None
    if alone:
        cal = calibration_from_rates(drafter, [args.rank_rates[0]] * args.tree_depths,
                                     "conditional")
    elif args.rates is not None:
        cal = calibration_from_rates(drafter, args.rates, args.rates_form)
        _warn_rising_marginals(args.rates, args.rates_form)
    else:
        if args.counts:
            counts = load_counts(args.counts)
        elif args.drafts_log:
            counts, holdout, per_request, tree = load_drafts_log(args.drafts_log, args.edges or DEFAULT_EDGES,
                                                                 args.holdout, requests=True, tree=True)
        elif args.steps_log:
            counts = load_steps_log(args.steps_log)
        else:
            counts = counts_from_steps(_read_windows(args.windows, args.run), source=args.windows)
        fit = fit_counts(drafter, check_count_sizes(counts))
        cal = fit.calibration
        if tree is not None:
            cal = cal.with_rank_acceptance(rank_acceptance_from_counts(tree), tree)
    if args.rank_rates is not None:
        if tree is not None:
            raise CalibrationError(f"{args.drafts_log} has ranks, so its [tree] table is fitted from them: drop "
                                   "--rank-rates (or the log's rank column)")
        depths = args.tree_depths if args.tree_depths is not None else min(len(cal.priors), MAX_TREE_DEPTH)
        cal = cal.with_rank_acceptance(rank_rates_table(args.rank_rates, depths))
    source = (args.counts or args.drafts_log or args.steps_log or args.windows
              or ("--rates" if args.rates is not None else "--rank-rates"))
    note = ""
    if args.request_spread != "off":
        if per_request is None:
            why = (f"{args.drafts_log} has no `request` column" if args.drafts_log else
                   f"{source} has no per-request data (a --drafts-log with a `request` column has)")
        else:
            why = ""
        spread, note = resolve_spread(args.request_spread, per_request, why)
        cal = cal.with_spread(spread)
    report = build_report(cal, fit, holdout)
    try:
        text = cal.render()
    except CalibrationError as e:
        raise CalibrationError(f"{source}: the calibration fitted from it cannot be written: {e.headline}",
                               e.problems) from None
    out.text(args.output, text)
    if args.counts_out:
        out.text(args.counts_out, render_counts(fit.counts))
    if args.plot:
        plot_reliability(report, out.path(args.plot))
    if args.json:
        print_json(report)
    elif args.report:
        print(format_report(report), end="")
    else:
        what = (f"{len(fit.pools)} pools over {len(cal.edges)} buckets from {fit.counts.reached} reached drafts"
                if fit else "one bucket from the rank-1 rate" if alone else f"one bucket from {args.rates_form} rates")
        a = cal.rank_acceptance
        trees = "" if a is None else f", a [tree] table of {a.shape[0]} depths x {a.shape[1]} ranks"
        print(f"wrote {args.output}: {what}, {len(cal.priors)} position priors{trees}")
    calib_live.note_spread(note)


def _warn_rising_marginals(rates, form):
    """Say where marginal rates rise: their conditional rate is above 1 and is clamped to 1
    (docs/calibration.md#marginal-and-conditional-rates), so the calibration is not what was given."""
    if form != "marginal":
        return
    for j in rising_positions(rates):
        m, before = rates[j - 1], rates[j - 2]
        taken = "is clamped to 1" if before > 0 else "is taken as 0 after a zero rate"
        print(f"specsim: warning: --rates position {j} ({m:g}) is above position {j - 1}'s ({before:g}): "
              f"a draft cannot be accepted more often than the one before it; its conditional rate "
              f"{taken} (are these conditional rates? --rates-form conditional)", file=sys.stderr)


def _read_windows(path, run):
    raw = read_input(path, "the windows file", CalibrationError)
    doc = _toml.loads(raw, "the windows file", path, CalibrationError)
    runs = doc.get("run", [])
    if not isinstance(runs, list):
        runs = []
    traces = doc.get("trace", [])
    if not isinstance(traces, list):
        traces = []
    # Windows sit at top level, in [[run]] tables, or in the [[trace]] tables `calib import` writes.
    tables = ([("", doc)] if "windows" in doc else []) + [
        (r.get("name", f"run {i}"), r) for i, r in enumerate(runs + traces) if isinstance(r, dict) and "windows" in r
    ]
    if run is not None:
        tables = [(name, t) for name, t in tables if name == run]
        if not tables:
            raise CalibrationError(f"{path}: no [[run]] or [[trace]] named {run!r} with windows")
    if not tables:
        raise CalibrationError(f"{path}: no `windows` array at top level or in any [[run]] or [[trace]] table")
    rows = []
    for name, t in tables:
        if not isinstance(t["windows"], list):
            raise CalibrationError(f"{path}: {name or 'top-level'} windows is not an array of rows")
        rows += t["windows"]
    steps = steps_from_windows(rows, source=str(path))
    k_logged = doc.get("k_logged")
    depth = max(d for d, _ in steps)
    if is_int(k_logged) and k_logged != depth:
        raise CalibrationError(f"{path}: k_logged = {k_logged} but the windows have {depth + 1} counts per row "
                               f"(k = {depth}): each row is [accepted k, .., accepted 1, rejected]")
    return steps


_RawEpilog = argparse.RawDescriptionHelpFormatter
