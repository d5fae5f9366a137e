"""``specsim calib import`` (serving engines' telemetry -> calibration) and ``specsim calib
drift`` (live outcomes against a calibration); registered by :mod:`specsim.cli.calib`."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from specsim.cli._common import count, nonneg_float, print_json, require_matplotlib, width
from specsim.errors import CalibrationError, printable
from specsim._io import Outputs
from specsim.calibration import AcceptanceCalibration, online
from specsim.calibration.drift import DISPERSION_KEY, MAX_DISPERSION, DriftSettings, plot_drift, with_dispersion
from specsim.calibration.logs import DRAFT_COLUMNS, STEP_COLUMNS, read_log
from specsim.calibration.spread import SPREAD_MODES, records_data, resolve_spread
from specsim._checks import MIN_SPREAD_REQUESTS
from specsim.calibration.tree_check import check_tree_telemetry, format_tree_check
from specsim.calibration.from_telemetry import ASSUMPTIONS, calibration_from, identify, record_batches, render_windows
from specsim.cli._drafter import drafter_flags, drafter_key
from specsim.interop import FORMATS, engine_schedule, read_telemetry
from specsim.sim.replay import load_acceptance_file
from specsim.studies.schedule_file import load_schedule

IMPORT_EPILOG = """\
formats (--from; detected from the content when not given):
{formats}

What a source identifies decides what is written: accept-run histograms and per-position counts
give per-position priors (fitted as `calib fit` does, MIN_OUTCOMES rule included); a mean
acceptance alone does not, and is refused unless --assume constant-rate (one conditional rate at
every position matching the mean; --depth K when the source does not tell the drafts per step).
Lines that drafted nothing are skipped and counted; lines that look like the format but cannot be
read are ignored and counted (--strict refuses them). [meta] records the source, the assumption
and the counts, and, from five records with per-position outcomes on, how much more than binomial
chance each position's rate varied between them (interval_dispersion, which `calib drift`
allows for). See docs/telemetry.md.

Telemetry from a draft-tree run (--tree ENGINE:SETTINGS, the tree the serve ran) holds means over
nodes, not per-rank data: it never fits a calibration. It checks one (--calibration CAL, with a
[tree] table): the tree's mean acceptance length as CAL's a[d][r] predicts it against the measured
one, with its 95% interval; nothing is written (-o is refused), exit 0 either way. SGLang's
/server_info states its tree (speculative_eagle_topk above 1): then --tree is not needed. SETTINGS:
  sglang:TOPK,STEPS,DRAFT_TOKENS       --speculative-eagle-topk, -num-steps, -num-draft-tokens
  vllm:'[(0,), (1,), (0, 0)]'          speculative_config.speculative_token_tree
  trtllm:MAX_TOPK,MAX_DRAFT_LEN[,MAX_TOTAL_DRAFT_TOKENS]   the dynamic tree's fields
"""


def register(csub):
    p = csub.add_parser(
        "import", help="import vLLM / SGLang / TensorRT-LLM speculative-decoding telemetry as a calibration",
        epilog=IMPORT_EPILOG.format(formats="\n".join(f"  {k:<20} {v}" for k, v in FORMATS.items())),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("files", nargs="+", metavar="FILE", help="telemetry files of one format, in the order written")
    p.add_argument("--from", dest="fmt", choices=tuple(FORMATS), metavar="NAME", help="the format (default: detect)")
    p.add_argument("--assume", choices=ASSUMPTIONS, help="assumption for a mean-only source (constant-rate)")
    p.add_argument("--depth", type=count, metavar="K", help="drafts per verify step, when the source does not say")
    p.add_argument("--strict", action="store_true", help="refuse lines that look like the format but cannot be read")
    shallow = p.add_mutually_exclusive_group()
    shallow.add_argument("--schedule", metavar="FILE",
                         help="the width -> depth schedule the serve ran (a schedule TOML, or ENGINE:FILE such as "
                              "vllm:config.json): where the depth varied, keep the positions its shallowest depth "
                              "reached")
    shallow.add_argument("--min-depth", type=count, metavar="K",
                         help="the shallowest depth the serve drafted: where the depth varied, keep positions 1..K")
    p.add_argument("--decode-log-interval", type=count, metavar="N",
                   help="sglang-log: the serve's --decode-log-interval (decode steps per line; default 40)")

    drafter_flags(p)
    p.add_argument("-o", "--output", metavar="OUT.toml", help="calibration file to write (needed unless --tree)")
    p.add_argument("--tree", metavar="ENGINE:SETTINGS",
                   help="the files come from a draft-tree run with these settings (see below): check --calibration's "
                        "a[d][r] against them instead of fitting")
    p.add_argument("--calibration", metavar="CAL",
                   help="--tree, or telemetry that states its tree: the calibration (with a [tree] table) to check")
    p.add_argument("--json", action="store_true", help="--tree: print the check as JSON")
    p.add_argument("--windows-out", metavar="W.toml",
                   help="also write the accept-run windows and traces (an acceptance file replay and simulate read)")
    spread_flag(p, "a per-request format (vllm-request, sglang-request, trtllm-request)")
    p.set_defaults(func=cmd_import)


def spread_flag(p, source):
    """``--request-spread auto|require|off`` (docs/calibration.md#per-request-spread)."""
    p.add_argument("--request-spread", choices=SPREAD_MODES, default="off",
                   help=f"fit how acceptance differs per request from {source}: auto fits when there are at least "
                        f"{MIN_SPREAD_REQUESTS} requests (else notes why not), require refuses otherwise, off "
                        "(default) never")


def note_spread(note):
    """Print ``resolve_spread``'s note, if any, to stderr."""
    if note:
        print(f"specsim: note: {note}", file=sys.stderr)


def cmd_import(args):
    if args.tree is not None:
        return _check_tree(args, args.tree)
    if args.output is None:
        read = read_telemetry(args.files, args.fmt, args.strict, args.decode_log_interval)
        stated = _stated_tree(args, read[2])
        if stated is not None:
            return _check_tree(args, stated, read)
        raise CalibrationError("the following arguments are required: -o/--output (or --tree ENGINE:SETTINGS with "
                               "--calibration CAL, to check a calibration against a tree run)")
    with Outputs([("FILE", f) for f in args.files]) as out:
        out.declare(args.output, "-o")
        out.declare(args.windows_out, "--windows-out")
        drafter = drafter_key(args)
        min_depth = args.min_depth if args.schedule is None else shallowest_depth(args.schedule)
        fmt, records, tally = read_telemetry(args.files, args.fmt, args.strict, args.decode_log_interval)
        stated = _stated_tree(args, tally)
        if stated is not None:
            return _check_tree(args, stated, (fmt, records, tally))  # refuses: -o is given
        for flag, given in (("--calibration", args.calibration), ("--json", args.json)):
            if given:
                raise CalibrationError(f"{flag} applies to --tree only (checking a calibration against a tree run)")
        names = [Path(f).name for f in args.files]
        ident = identify(fmt, records, tally, args.assume, args.depth, names, min_depth)
        cal = calibration_from(ident, drafter, ", ".join(names))
        if ident.steps is not None:
            cal = with_dispersion(cal, record_batches(fmt, records, args.depth, min_depth))
        spread, note = None, ""
        if args.request_spread != "off":
            data, why = records_data(fmt, records, args.depth, ", ".join(names))
            spread, note = resolve_spread(args.request_spread, data, why)
            cal = cal.with_spread(spread)
        windows = render_windows(ident, fmt) if args.windows_out else None
        out.text(args.output, cal.render())
        if windows is not None:
            out.text(args.windows_out, windows)
    if tally.garbage:  # once, naming the first (--strict refuses them all, listed)
        more = f" (and {tally.garbage - 1} more)" if tally.garbage > 1 else ""
        print(f"specsim: warning: skipped {printable(tally.problems[0])}{more}; --strict refuses such lines", file=sys.stderr)
    m = ident.meta
    priors = ", ".join(f"{p:.3f}" for p in cal.priors)
    print(f"wrote {args.output}: {fmt}, {m['records_used']} records ({m['zero_draft_skipped']} without drafts "
          f"skipped, {m['garbage_ignored']} unreadable ignored, {m['counter_resets']} counter resets), "
          f"{m['steps']} steps; assumption {m['assumption']}; priors [{priors}]")
    if DISPERSION_KEY in cal.meta:
        print(f"between-record over-dispersion by position (variance over binomial chance, upper 90% bound; "
              f"calib drift allows for it): [{', '.join(f'{v:.2f}' for v in cal.meta[DISPERSION_KEY])}]")
    note_spread(note)
    if windows is not None:
        print(f"wrote {args.windows_out}: windows at depth {', '.join(str(d) for d in sorted(ident.windows))}")
    return 0


def _stated_tree(args, tally):
    """The tree settings the telemetry states (SGLang's /server_info: its server arguments), or
    None; refused when it states a tree but not all of its settings."""
    stated = tally.notes.get("tree")
    if stated is not None and ("?" in stated or stated == "mixed"):
        raise CalibrationError(f"{', '.join(map(str, args.files))} state a draft-tree run ({stated}) but not all of "
                               "its settings (?: not stated, or not a whole number >= 1): give them with --tree ENGINE:SETTINGS and --calibration CAL (a tree "
                               "run's telemetry checks a calibration, it never fits one)")
    return stated


def _check_tree(args, setting, read=None):
    """``calib import --tree``, or telemetry that states its tree: a draft-tree run checks a
    calibration's a[d][r] and fits nothing (docs/telemetry.md#telemetry-from-draft-trees).
    ``read``: the telemetry already read."""
    stated = "" if setting == args.tree else f"the telemetry states a draft-tree run ({setting}): "
    fitting = [flag for flag, v in (("-o", args.output), ("--windows-out", args.windows_out),
                                    ("--assume", args.assume), ("--schedule", args.schedule),
                                    ("--min-depth", args.min_depth), ("--depth", args.depth)) if v is not None]
    if args.request_spread != "off":
        fitting.append("--request-spread")
    if fitting:
        raise CalibrationError(f"{stated or '--tree: '}telemetry from a tree run holds means over nodes, not per-rank "
                               f"data, so nothing is fitted from it: drop {', '.join(fitting)} (the tree settings give "
                               "the depth)")
    if args.calibration is None:
        raise CalibrationError(f"{stated or '--tree: '}give --calibration CAL, the calibration whose a[d][r] the run "
                               "checks (a tree run's telemetry never fits one)")
    drafter = drafter_key(args)
    cal = AcceptanceCalibration.load(args.calibration)
    if cal.drafter != drafter:
        raise CalibrationError(f"{args.calibration} was fitted on another drafter than the one given: a calibration "
                               "is checked only against its own drafter's runs")
    fmt, records, _ = read or read_telemetry(args.files, args.fmt, args.strict, args.decode_log_interval)
    check = check_tree_telemetry(cal, setting, records, ", ".join(str(f) for f in args.files))
    if args.json:
        print_json({"format": fmt, **check.as_dict()})
    else:
        print(format_tree_check(check))
    return 0


def shallowest_depth(text) -> int:
    """The shallowest depth that drafts in a schedule: a schedule TOML, or ``ENGINE:FILE``."""
    ranges = engine_schedule(text)
    if ranges is None:
        ranges = load_schedule(text).ranges
    depths = [k for _, _, k in ranges if k > 0]
    if not depths:
        raise CalibrationError(f"--schedule {text}: the schedule never drafts, so no telemetry came from it")
    return min(depths)


DRIFT_EPILOG = """\
inputs (exactly one), replayed in serve order against CAL:
  --acceptance FILE --trace NAME   an acceptance trace (one digit per verify step)
  --drafts-log FILE                per-draft log as `calib fit` reads it (one step per step id)
  --steps-log FILE                 per-step log (drafts, accepted), --width chains per step
  --from-log FILE...               serving telemetry as `calib import` reads it (one step per log
                                   line, scrape interval or request); mean-only sources are refused

Each pool of buckets and each fitted position of CAL runs a two-sided CUSUM; an alarm names the
stream, which way its acceptance moved and by how much (calibrated and observed rates, from the
step the change began to the alarm). A position's evidence is divided by the over-dispersion CAL
records for it ([meta] interval_dispersion, written by `calib import`: real traffic varies more
than binomial chance between intervals), or by --dispersion. Exit 0 either way; the verdict is
printed (and written with --json). See docs/telemetry.md.
"""


def register_drift(csub):
    p = csub.add_parser("drift", help="test live outcomes against a calibration (CUSUM per pool and position)",
                        epilog=DRIFT_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("calibration", metavar="CAL", help="calibration TOML the serve plans with")
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--acceptance", metavar="FILE", help="acceptance file with [[trace]] entries")
    src.add_argument("--drafts-log", metavar="FILE", help="per-draft log (CSV or JSON Lines)")
    src.add_argument("--steps-log", metavar="FILE", help="per-step log (CSV or JSON Lines)")
    src.add_argument("--from-log", nargs="+", metavar="FILE", help="serving telemetry files of one format")
    p.add_argument("--trace", metavar="NAME", help="--acceptance: the [[trace]] to replay")
    p.add_argument("--from", dest="fmt", choices=tuple(FORMATS), metavar="NAME", help="--from-log: the format")
    p.add_argument("--depth", type=count, metavar="K", help="--from-log: drafts per step where the source does not say")
    shallow = p.add_mutually_exclusive_group()
    shallow.add_argument("--schedule", metavar="FILE",
                         help="--from-log: the schedule the serve ran; where the depth varied, replay the positions "
                              "its shallowest depth reached")
    shallow.add_argument("--min-depth", type=count, metavar="K",
                         help="--from-log: the shallowest depth the serve drafted")
    p.add_argument("--width", type=width, default=1, metavar="N", help="--acceptance/--steps-log: chains per step")
    p.add_argument("--shift", type=nonneg_float, default=0.4, metavar="LOGODDS",
                   help="the change each CUSUM is tuned for, in log-odds (default 0.4)")
    p.add_argument("--threshold", type=nonneg_float, default=10.0, metavar="NATS",
                   help="alarm threshold (default 10; false-alarm rates: docs/telemetry.md)")
    p.add_argument("--dispersion", type=nonneg_float, metavar="PHI",
                   help=f"over-dispersion factor for every stream, 1..{MAX_DISPERSION:g} (variance over the "
                        "binomial's; 1 = the plain binomial test; default: what CAL records per position)")
    p.add_argument("--plot", metavar="PNG", help="write the monitored statistics over time (needs matplotlib)")
    p.add_argument("--json", metavar="OUT", help="write the verdict as JSON")
    p.set_defaults(func=cmd_drift)


def cmd_drift(args):
    inputs = [("CAL", args.calibration)] + [("--from-log", f) for f in (args.from_log or [])] + [
        (flag, v) for flag, v in (("--acceptance", args.acceptance), ("--drafts-log", args.drafts_log),
                                  ("--steps-log", args.steps_log)) if v]
    with Outputs(inputs) as out:
        out.declare(args.plot, "--plot")
        out.declare(args.json, "--json")
        if args.trace is not None and not args.acceptance:
            raise CalibrationError("--trace goes with --acceptance FILE")
        if args.width < 1:
            raise CalibrationError("--width must be at least 1 chain per step")
        if args.plot:
            require_matplotlib("--plot", args.plot)
        settings = DriftSettings(shift=args.shift, threshold=args.threshold, dispersion=args.dispersion)
        cal = AcceptanceCalibration.load(args.calibration)
        if cal.drafter.synthetic:
            raise CalibrationError(f"{args.calibration} is a what-if calibration (a synthetic drafter key, from rates "
                                   "asked about): a drift test compares a served drafter's outcomes with the "
                                   "calibration fitted on that drafter")
        rep, hist, what = _replay_drift(args, cal, settings)
        print(f"{what} against {args.calibration}")
        print(rep.format(), end="")
        if args.json:
            out.text(args.json, json.dumps(rep.to_dict(), indent=2, allow_nan=False) + "\n")
        if args.plot:
            plot_drift(rep, hist, out.path(args.plot), title=what)
    for path in out.written:
        print(f"wrote {path}")
    return 0


def _replay_drift(args, cal, settings):
    import numpy as np

    if args.acceptance:
        afile = load_acceptance_file(args.acceptance)
        if args.trace is None:
            if len(afile.traces) != 1:
                raise CalibrationError(f"--acceptance needs --trace NAME; traces in {args.acceptance}: "
                                       f"{', '.join(afile.traces) or 'none'}")
            args.trace = next(iter(afile.traces))
        t = afile.trace(args.trace)
        a = np.minimum(t.accepted.astype(np.int64), t.k_logged)
        d = np.full(a.shape[0], t.k_logged, dtype=np.int64)
        rep, hist = online.monitor_runs(cal, d, a, settings, args.width, history=True)
        return rep, hist, f"trace {t.name} ({a.shape[0]} verify steps at k_logged {t.k_logged}, width {args.width})"
    if args.drafts_log:
        cols = read_log(args.drafts_log, DRAFT_COLUMNS)
        rep, hist = online.monitor_drafts(cal, *(cols[c] for c in DRAFT_COLUMNS), settings=settings, history=True)
        return rep, hist, f"per-draft log {Path(args.drafts_log).name}"
    if args.steps_log:
        cols = read_log(args.steps_log, STEP_COLUMNS)
        rep, hist = online.monitor_runs(cal, cols["drafts"], cols["accepted"], settings, args.width, history=True)
        return rep, hist, f"per-step log {Path(args.steps_log).name} (width {args.width})"

    fmt, records, _ = read_telemetry(args.from_log, args.fmt)
    min_depth = args.min_depth if args.schedule is None else shallowest_depth(args.schedule)
    batches = record_batches(fmt, records, args.depth, min_depth)
    rep, hist = online.monitor_steps(cal, batches, settings, history=True)
    return rep, hist, f"{fmt} telemetry, {len(batches)} records"
