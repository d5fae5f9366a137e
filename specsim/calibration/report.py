"""Reliability report of a fitted calibration: how much each fitted number can be trusted.

Per pool: the buckets it spans, reached drafts, rate, binomial standard error and 95% Wilson
interval. Per position: the prior and its count. The Brier score of the calibration on the data it
was fitted on and, when asked, on held-out data. Per depth and rank of a draft-tree calibration:
the rate and, with counts, its 95% Wilson interval. As a dict (JSON-ready), as text, or as a
reliability diagram (PNG; needs matplotlib).
"""

from __future__ import annotations

import io

from specsim.calibration.fit import MIN_OUTCOMES, position_counts
from specsim.errors import SpecsimError
from specsim._io import atomic_write_bytes
from specsim._stats import stderr, wilson
from specsim._text import format_grid


def brier(calibration, counts):
    """Brier scores of a calibration on counts: ``{"buckets": .., "priors": .., ...}``.

    ``buckets``: mean squared error of ``p_given_lp`` over the reached drafts binned in the
    counts' buckets (the counts must use the calibration's edges). ``priors``: of the position
    priors over every reached position of every step (positions past the last fitted prior take
    the last, as the planner does). None where there is nothing to score.
    """
    sse = 0.0
    n = 0
    for p, a, r in zip(calibration.p_accept.tolist(), counts.accepted, counts.rejected):
        sse += a * (1.0 - p) ** 2 + r * p * p
        n += a + r
    out = {"buckets": sse / n if n else None, "drafts": n}
    sse = 0.0
    n = 0
    for j, acc, reached in position_counts(counts.steps):
        if not reached:
            continue
        p = calibration.prior(j)
        sse += acc * (1.0 - p) ** 2 + (reached - acc) * p * p
        n += reached
    out.update(priors=sse / n if n else None, position_outcomes=n)
    return out


def build_report(calibration, fit=None, holdout=None) -> dict:
    """The reliability report as a JSON-ready dict.

    Parameters
    ----------
    calibration : AcceptanceCalibration
    fit : CalibrationFit, optional
        The fit that made it; without one (rates imported) only the calibration is described.
    holdout : FitCounts, optional
        Held-out counts binned with the same edges, scored with the calibration.
    """
    d = calibration.drafter
    edges = [float(e) for e in calibration.edges]
    report = {
        "drafter": {"weights_sha256": d.weights_sha256, "vocab": d.vocab, "quantization": d.quantization,
                    "context": d.context},
        "edges": edges,
        "p_accept": calibration.p_accept.tolist(),
        "prior_by_position": calibration.priors.tolist(),
        "fitted": fit is not None,
    }
    if calibration.rank_acceptance is not None:
        report["tree"] = tree_view(calibration)
    if fit is None:
        return report
    c = fit.counts
    report["source"] = c.source
    report["totals"] = {
        "buckets": len(c.edges), "reached_drafts": c.reached, "accepted_drafts": sum(c.accepted),
        "nonfinite_confidences": c.nonfinite, "unreached_drafts": c.unreached, "steps": c.step_count,
    }
    report["pools"] = [
        {"buckets": [p.first, p.last], "above": edges[p.first - 1] if p.first > 0 else None,
         "up_to": edges[p.last], "accepted": p.accepted, "reached": p.reached, "rate": p.rate,
         "stderr": stderr(p.accepted, p.reached), "wilson95": list(wilson(p.accepted, p.reached))}
        for p in fit.pools
    ]
    pool_of = {i: k for k, p in enumerate(fit.pools) for i in range(p.first, p.last + 1)}
    report["buckets"] = [
        {"bucket": i, "up_to": edges[i], "accepted": a, "reached": a + r,
         "observed": a / (a + r) if a + r else None, "p_accept": float(calibration.p_accept[i]), "pool": pool_of[i]}
        for i, (a, r) in enumerate(zip(c.accepted, c.rejected))
    ]
    report["positions"] = [
        {"position": p.position, "prior": p.prior, "accepted": p.accepted, "reached": p.reached,
         "stderr": stderr(p.accepted, p.reached), "wilson95": list(wilson(p.accepted, p.reached))}
        for p in fit.positions
    ]
    report["priors_stop"] = (
        None if fit.stop is None else {"position": fit.stop.position, "reached": fit.stop.reached}
    )
    report["brier"] = brier(calibration, c)
    if holdout is not None:
        report["holdout"] = {
            "source": holdout.source, "reached_drafts": holdout.reached, "steps": holdout.step_count,
            "nonfinite_confidences": holdout.nonfinite, "brier": brier(calibration, holdout),
            "pools": [
                _observed(sum(holdout.accepted[p.first:p.last + 1]),
                          sum(holdout.accepted[p.first:p.last + 1]) + sum(holdout.rejected[p.first:p.last + 1]))
                for p in fit.pools
            ],
        }
    return report


def format_report(report: dict) -> str:
    """The report as plain text."""
    d = report["drafter"]
    lines = [f"drafter sha256 {d['weights_sha256']}  vocab {d['vocab']}  {d['quantization']}  "
             f"context {str(d['context']).lower()}"]
    if not report["fitted"]:
        lines.append("imported from acceptance rates: no counts, so no intervals or Brier score")
        lines.append(f"one bucket: P(accept) {report['p_accept'][0]:.4f} (the rate per reached draft)")
        lines.append(format_grid(["position", "prior (cond.)"],
                                 [[j, f"{p:.4f}"] for j, p in enumerate(report["prior_by_position"], 1)]))
        return "\n".join(lines + _tree_lines(report)) + "\n"
    t = report["totals"]
    lines.append(
        f"fitted from {report['source']}: {t['reached_drafts']} reached drafts ({t['accepted_drafts']} accepted) "
        f"in {t['buckets']} buckets, {t['steps']} verify steps"
    )
    if t["nonfinite_confidences"] or t["unreached_drafts"]:
        lines.append(f"counted apart, not binned: {t['nonfinite_confidences']} reached drafts with a non-finite "
                     f"confidence, {t['unreached_drafts']} drafts after their chain's first rejection")
    lines.append("")
    lines.append(f"pools (each >= {MIN_OUTCOMES} reached drafts, the most confident first):")
    lines.append(format_grid(
        ["pool", "buckets", "log-prob range", "reached", "accepted", "rate", "std.err", "95% Wilson"],
        [[k, f"{p['buckets'][0]}..{p['buckets'][1]}", _range(p["above"], p["up_to"]), p["reached"], p["accepted"],
          f"{p['rate']:.4f}", f"{p['stderr']:.4f}", f"[{p['wilson95'][0]:.4f}, {p['wilson95'][1]:.4f}]"]
         for k, p in enumerate(report["pools"])]))
    lines.append("")
    lines.append("buckets:")
    held = report.get("holdout")
    lines.append(format_grid(
        ["bucket", "up to", "reached", "observed", "P(accept)", "pool"],
        [[b["bucket"], f"{b['up_to']:g}", b["reached"], _num(b["observed"]), f"{b['p_accept']:.4f}", b["pool"]]
         for b in report["buckets"]]))
    lines.append("")
    lines.append(f"position priors (each >= {MIN_OUTCOMES} reached steps):")
    lines.append(format_grid(
        ["position", "prior", "accepted", "reached", "std.err", "95% Wilson"],
        [[p["position"], f"{p['prior']:.4f}", p["accepted"], p["reached"], f"{p['stderr']:.4f}",
          f"[{p['wilson95'][0]:.4f}, {p['wilson95'][1]:.4f}]"] for p in report["positions"]]))
    stop = report["priors_stop"]
    if stop is not None:
        lines.append(f"priors stop at position {stop['position']}: {stop['reached']} reached steps < {MIN_OUTCOMES}; "
                     "deeper positions take the last prior")
    lines.append("")
    b = report["brier"]
    lines.append(f"Brier score in sample: buckets {_num(b['buckets'])} over {b['drafts']} drafts, "
                 f"priors {_num(b['priors'])} over {b['position_outcomes']} reached positions")
    if held is not None:
        hb = held["brier"]
        lines.append(f"Brier score held out:  buckets {_num(hb['buckets'])} over {hb['drafts']} drafts, "
                     f"priors {_num(hb['priors'])} over {hb['position_outcomes']} reached positions")
        lines.append(format_grid(
            ["pool", "fitted rate", "held-out reached", "held-out rate", "95% Wilson"],
            [[k, f"{p['rate']:.4f}", h["reached"], _num(h["observed"]),
              "-" if h["wilson95"] is None else f"[{h['wilson95'][0]:.4f}, {h['wilson95'][1]:.4f}]"]
             for k, (p, h) in enumerate(zip(report["pools"], held["pools"]))]))
    return "\n".join(lines + _tree_lines(report)) + "\n"


def _tree_lines(report):
    """The report's depth x rank view (docs/calibration.md#draft-trees), when the calibration has one."""
    if report.get("tree") is None:
        return []
    return ["", format_tree_view(report["tree"])]


def tree_view(cal) -> dict | None:
    """The depth x rank view of a calibration's rank acceptance, JSON-ready: per cell the rate and,
    with counts, matched, reached and the 95% Wilson interval; None without a rank acceptance."""
    a = cal.rank_acceptance
    if a is None:
        return None
    tc = cal.tree_counts
    cells = []
    for d in range(a.shape[0]):
        for r in range(a.shape[1]):
            cell = {"depth": d + 1, "rank": r + 1, "rate": float(a[d, r])}
            if tc is not None:
                m, n = tc.matched[d][r], tc.reached[d]
                cell.update(matched=m, reached=n, wilson95=list(wilson(m, n)))
            cells.append(cell)
    return {"depths": a.shape[0], "ranks": a.shape[1], "source": tc.source if tc is not None else None,
            "reached": list(tc.reached) if tc is not None else None, "cells": cells}


def format_tree_view(view: dict) -> str:
    """The depth x rank view as text: one row per depth, one column per rank (rate, and with
    counts its 95% Wilson interval)."""
    counted = view["reached"] is not None
    head = (f"draft trees: P(the target's token at depth d is the rank-r candidate), {view['depths']} depths x "
            f"{view['ranks']} ranks" + (f", from {view['source']}" if view["source"] else "")
            + ("" if counted else " (no counts, so no intervals)"))
    rows = []
    for d in range(view["depths"]):
        cells = view["cells"][d * view["ranks"]:(d + 1) * view["ranks"]]
        row = [d + 1] + ([view["reached"][d]] if counted else [])
        for c in cells:
            row.append(f"{c['rate']:.4f}" + (f" [{c['wilson95'][0]:.4f}, {c['wilson95'][1]:.4f}]" if counted else ""))
        row.append(f"{sum(c['rate'] for c in cells):.4f}")
        rows.append(row)
    heads = ["depth"] + (["reached"] if counted else []) + [f"rank {r}" + (" (95% Wilson)" if counted else "")
                                                            for r in range(1, view["ranks"] + 1)] + ["any rank"]
    return head + "\n" + format_grid(heads, rows)


def plot_reliability(report: dict, path) -> None:
    """Write a reliability diagram (PNG): observed vs fitted rate per bucket, and occupancy.

    Raises
    ------
    SpecsimError
        When matplotlib is not installed, or the report has no counts (rates imported).
    """
    require_matplotlib()
    # optional (the plot extra): loaded only when a figure is drawn
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    if not report["fitted"]:
        raise SpecsimError("a reliability diagram needs counts; a calibration imported from rates has none")
    fig = Figure(figsize=(9, 4.2))
    FigureCanvasAgg(fig)
    ax, bx = fig.subplots(1, 2)
    ax.plot([0, 1], [0, 1], color="0.6", lw=1, ls="--", label="perfect calibration")
    total = max(1, report["totals"]["reached_drafts"])
    for b in report["buckets"]:
        if b["observed"] is None:
            continue
        lo, hi = wilson(b["accepted"], b["reached"])
        # Marker area grows with the bucket's share of reached drafts.
        ax.errorbar(b["p_accept"], b["observed"], yerr=[[b["observed"] - lo], [hi - b["observed"]]], fmt="o",
                    color="C0", ms=3 + 6 * (b["reached"] / total) ** 0.5, capsize=2)
    ax.plot([], [], "o", color="C0", label="bucket (in sample)")
    held = report.get("holdout")
    if held is not None:
        for p, h in zip(report["pools"], held["pools"]):
            if h["observed"] is not None:
                lo, hi = h["wilson95"]
                ax.errorbar(p["rate"], h["observed"], yerr=[[h["observed"] - lo], [hi - h["observed"]]], fmt="s",
                            color="C3", ms=5, capsize=2)
        ax.plot([], [], "s", color="C3", label="pool (held out)")
    ax.set(xlim=(0, 1), ylim=(0, 1), xlabel="fitted P(accept)", ylabel="observed acceptance",
           title="reliability (95% Wilson intervals)")
    ax.legend(loc="upper left", fontsize=8)
    labels = [f"≤{b['up_to']:g}" for b in report["buckets"]]
    bx.bar(range(len(labels)), [b["reached"] for b in report["buckets"]], color="C0")
    bx.set_xticks(range(len(labels)), labels, rotation=45, fontsize=7)
    bx.set(xlabel="confidence bucket (top-1 log-prob)", ylabel="reached drafts", title="bucket occupancy")
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110)
    atomic_write_bytes(path, buf.getvalue())


def require_matplotlib() -> None:
    """Refuse, saying how to fix it, where matplotlib is not installed."""
    try:
        import matplotlib  # noqa: F401
    except ImportError as e:
        raise SpecsimError(
            "a reliability diagram needs matplotlib, which is not installed: "
            "pip install 'specsim-llm[plot]' (or drop --plot)"
        ) from e


def _observed(accepted, reached):
    return {"accepted": accepted, "reached": reached, "observed": accepted / reached if reached else None,
            "wilson95": list(wilson(accepted, reached)) if reached else None}


def _range(above, up_to):
    low = "-inf" if above is None else f"{above:g}"
    return f"({low}, {up_to:g}]"


def _num(x):
    return "-" if x is None else f"{x:.4f}"
