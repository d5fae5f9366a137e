"""``specsim calib ...``: show (and fit) acceptance calibrations."""

from __future__ import annotations

from specsim.cli._common import format_grid, print_json


def register(sub, groups):
    calib = sub.add_parser("calib", help="show and fit acceptance calibrations")
    csub = calib.add_subparsers(dest="calib_command", metavar="ACTION")
    csub.required = True
    groups["calib"] = csub
    p = csub.add_parser("show", help="print a calibration's drafter, buckets and priors")
    p.add_argument("file", help="calibration TOML")
    p.add_argument("--json", action="store_true", help="print as JSON")
    p.set_defaults(func=cmd_show)


def cmd_show(args):
    from specsim.calibration import AcceptanceCalibration

    cal = AcceptanceCalibration.load(args.file)
    d = cal.drafter
    if args.json:
        print_json({
            "drafter": {"weights_sha256": d.weights_sha256, "vocab": d.vocab, "quantization": d.quantization,
                        "context": d.context},
            "edges": [float(e) for e in cal.edges],
            "p_accept": cal.p_accept.tolist(),
            "prior_by_position": cal.priors.tolist(),
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
    return 0
