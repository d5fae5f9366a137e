"""``specsim trace show``: read a request trace and summarise it; shared trace options.

:func:`add_trace_options` and :func:`trace_from_args` are for every command that reads a
request trace (``simulate`` too), so the options mean the same everywhere.
"""

from __future__ import annotations

from specsim.cli._common import count, print_json, real
from specsim._text import format_grid
from specsim.errors import TraceError
from specsim.traces import parse_synthetic, read_trace, summary, synthetic_trace


def add_trace_options(p):
    """Add the request-trace options (format, columns, unit, rate scale, limit, window, bad rows)."""
    p.add_argument("--format", choices=("azure2023", "azure2024", "mooncake", "burstgpt", "csv", "synthetic"),
                   help="trace format (default: detected from the file's first line)")
    p.add_argument("--columns", metavar="arrival=COL,prompt=COL,output=COL", help="format csv: the columns to read")
    p.add_argument("--arrival-unit", choices=("s", "ms", "us", "ns", "datetime"),
                   help="format csv: what the arrival column holds (default s)")
    p.add_argument("--synthetic", metavar="PARAMS",
                   help="format synthetic: requests=N,rate=R[,arrival=poisson|gamma][,cv=C]"
                        "[,prompt=lognormal:MEDIAN:SIGMA|empirical][,output=...][,seed=S]; "
                        "empirical lengths are resampled from the trace FILE when one is given")
    p.add_argument("--rate-scale", type=real, default=1.0, metavar="X",
                   help="divide arrivals by X (2 = twice the traffic; default 1), after --window and --limit")
    p.add_argument("--limit", type=count, metavar="N",
                   help="keep the first N requests by arrival (after --window, before --rate-scale)")
    p.add_argument("--window", metavar="START:END",
                   help="keep arrivals in [START, END) seconds from the trace start (END may be empty), in the "
                        "file's own time: applied before --limit and --rate-scale")
    p.add_argument("--skip-bad-rows", action="store_true", help="skip and count rows that cannot be parsed")


def _window(text):
    if text is None:
        return None
    start, sep, end = text.partition(":")
    try:
        return float(start), (float(end) if end.strip() else None)
    except ValueError:
        raise TraceError(f"--window {text!r} is not START:END in seconds (e.g. 0:600 or 1800:)") from None


def trace_from_args(args, path):
    """The :class:`TraceRead` the options and ``path`` (None for a synthetic trace without one) name."""
    opts = {"rate_scale": args.rate_scale, "limit": args.limit, "window": _window(args.window)}
    if args.format == "synthetic" or args.synthetic is not None:
        if args.synthetic is None:
            raise TraceError("format synthetic needs --synthetic requests=N,rate=R,...")
        source = read_trace(path, skip_bad_rows=args.skip_bad_rows) if path else None
        return synthetic_trace(**parse_synthetic(args.synthetic, source), **opts)
    if path is None:
        raise TraceError("give a trace file (or --format synthetic with --synthetic PARAMS)")
    return read_trace(path, args.format, columns=args.columns, arrival_unit=args.arrival_unit,
                      skip_bad_rows=args.skip_bad_rows, **opts)


def register(sub, groups):
    trace = sub.add_parser("trace", help="read and summarise request traces")
    tsub = trace.add_subparsers(dest="trace_command", metavar="ACTION")
    tsub.required = True
    groups["trace"] = tsub
    p = tsub.add_parser("show", help="read a request trace and print its size, span, rate and token counts")
    p.add_argument("file", nargs="?", help="trace file (optional for --format synthetic)")
    add_trace_options(p)
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    p.set_defaults(func=cmd_show)


def cmd_show(args):
    read = trace_from_args(args, args.file)
    s = summary(read)
    if args.json:
        print_json(s)
        return 0
    print(f"{s['source']} ({s['format']}): {s['requests']} requests over {s['span_s']:.3f} s "
          f"({s['rate_per_s']:.3f} req/s)")
    print(f"  rows {s['rows']}, skipped zero-token {s['skipped_zero_token']}, skipped bad {s['skipped_bad']}, "
          f"outside window/limit {s['dropped_by_window_or_limit']}")
    if read.bad_lines:
        print(f"  first bad lines: {', '.join(map(str, read.bad_lines))}")
    rows = [[c, s[c]["sum"], f"{s[c]['mean']:.1f}", f"{s[c]['p50']:.0f}", f"{s[c]['p99']:.0f}", s[c]["max"]]
            for c in ("prompt_tokens", "output_tokens")]
    print(format_grid(["tokens", "sum", "mean", "p50", "p99", "max"], rows))
    return 0
