"""``specsim calib import`` (serving engines' telemetry -> calibration) and ``specsim calib
drift`` (live outcomes against a calibration); registered by :mod:`specsim.cli.calib`."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from specsim.cli._common import count

IMPORT_EPILOG = """\
formats (--from; detected from the content when not given):
{formats}

What a source identifies decides what is written: accept-run histograms and per-position counts
give per-position priors (fitted as `calib fit` does, MIN_OUTCOMES rule included); a mean
acceptance alone does not, and is refused unless --assume constant-rate (one conditional rate at
every position matching the mean; --depth K when the source does not tell the drafts per step).
Lines that drafted nothing are skipped and counted; lines that look like the format but cannot be
read are ignored and counted (--strict refuses them). [meta] records the source, the assumption
and the counts. See docs/telemetry.md.
"""


def register(csub):
    from specsim.calibration.telemetry import ASSUMPTIONS, FORMATS

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
    drafter_flags(p)
    p.add_argument("-o", "--output", required=True, metavar="OUT.toml", help="calibration file to write")
    p.add_argument("--windows-out", metavar="W.toml",
                   help="also write the accept-run windows and traces (an acceptance file replay and simulate read)")
    p.set_defaults(func=cmd_import)


def drafter_flags(p):
    """The drafter key flags, as ``calib fit`` takes them."""
    p.add_argument("--drafter-sha256", required=True, help="sha256 over the drafter's tensors as loaded")
    p.add_argument("--vocab", required=True, type=count, help="drafter vocabulary size")
    p.add_argument("--quantization", required=True, help="drafter quantization, e.g. bf16")
    p.add_argument("--context", required=True, choices=("true", "false"),
                   help="whether the drafter's prompt context was active")


def drafter_key(args):
    from specsim.calibration import DrafterKey
    from specsim.errors import CalibrationError

    if args.vocab < 1:
        raise CalibrationError(f"--vocab {args.vocab}: give the drafter's vocabulary size (at least 1)")
    for flag, value in (("--drafter-sha256", args.drafter_sha256), ("--quantization", args.quantization)):
        if not value.strip():
            raise CalibrationError(f"{flag} is empty: a calibration is used only with the drafter it was fitted on, "
                                   "so its key must name it")
    return DrafterKey(args.drafter_sha256, args.vocab, args.quantization, args.context == "true")


def refuse_overwrite(outputs, inputs):
    """Refuse before any work when an output path names an input file (or two outputs collide)."""
    from specsim.errors import SpecsimError

    seen = {}
    for flag, out in outputs:
        if not out:
            continue
        for name, path in inputs:
            if _same(out, path):
                raise SpecsimError(f"{flag} {out} is the input {name}: write elsewhere, inputs are never overwritten")
        for other_flag, other in seen.items():
            if _same(out, other):
                raise SpecsimError(f"{flag} and {other_flag} are the same file {out}: give two names")
        seen[flag] = out


def _same(a, b) -> bool:
    try:
        if os.path.exists(a) and os.path.exists(b):
            return os.path.samefile(a, b)
    except OSError:
        pass
    return Path(os.path.abspath(a)) == Path(os.path.abspath(b))


def cmd_import(args):
    from specsim._io import atomic_write_text
    from specsim.calibration.telemetry import identify, read_telemetry, render_windows
    from specsim.calibration.telemetry.identify import calibration_from

    refuse_overwrite([("-o", args.output), ("--windows-out", args.windows_out)],
                     [(f, f) for f in args.files])
    drafter = drafter_key(args)
    fmt, records, tally = read_telemetry(args.files, args.fmt, args.strict)
    names = [Path(f).name for f in args.files]
    ident = identify(fmt, records, tally, args.assume, args.depth, names)
    cal = calibration_from(ident, drafter, ", ".join(names))
    windows = render_windows(ident, fmt) if args.windows_out else None
    atomic_write_text(args.output, cal.render())
    if windows is not None:
        atomic_write_text(args.windows_out, windows)
    m = ident.meta
    priors = ", ".join(f"{p:.3f}" for p in cal.priors)
    print(f"wrote {args.output}: {fmt}, {m['records_used']} records ({m['zero_draft_skipped']} without drafts "
          f"skipped, {m['garbage_ignored']} unreadable ignored, {m['counter_resets']} counter resets), "
          f"{m['steps']} steps; assumption {m['assumption']}; priors [{priors}]")
    if windows is not None:
        print(f"wrote {args.windows_out}: windows at depth {', '.join(str(d) for d in sorted(ident.windows))}")
    return 0
