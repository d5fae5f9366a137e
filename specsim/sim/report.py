"""Reports of simulation results: a side-by-side terminal table and a figure (matplotlib,
imported only when a figure is drawn)."""

from __future__ import annotations

import io

import numpy as np

from specsim.errors import SimulationError
from specsim.sim.metrics import label
from specsim._io import atomic_write_bytes
from specsim._text import format_grid


def _f(value, spec):
    return "-" if value is None else format(value, spec)


def comparison_table(summaries) -> str:
    """Policies side by side: throughput, energy, batch, acceptance, latency and SLO."""
    header = ["policy", "tok/s", "J/tok", "W", "width", "nodes", "acc/step", "queue p99", "TTFT p50", "TTFT p99", "TPOT p50",
              "TPOT p99", "E2E p99", "preempt", "KV peak", "SLO"]
    rows = []
    for s in summaries:
        slo = s["slo"]["attainment"]
        checked = s["slo"]["ttft_target_s"] is not None or s["slo"]["tpot_target_s"] is not None
        rows.append([
            s["label"] + (f" = {s['same_as']}" if s.get("same_as") else ""), _f(s["tokens_per_s"], ".1f"), _f(s["j_per_token"], ".4f"), _f(s["mean_power_w"], ".1f"),
            _f(s["mean_width"], ".2f"), _f(s.get("nodes_per_sequence"), ".2f"), _f(s["accepted_per_step"], ".3f"),
            _f(s["queue_s"]["p99"], ".3f"),
            _f(s["ttft_s"]["p50"], ".3f"), _f(s["ttft_s"]["p99"], ".3f"),
            _f(s["tpot_s"]["p50"], ".4f"), _f(s["tpot_s"]["p99"], ".4f"), _f(s["e2e_s"]["p99"], ".2f"),
            str(s["preemptions"]), "-" if s["kv"]["peak"] is None else f"{100 * s['kv']['peak']:.0f}%",
            f"{100 * slo:.1f}%" if checked and slo is not None else "-",
        ])
    same = "; A = B: A was the same run as B (the same depth at every width it met)" \
        if any(s.get("same_as") for s in summaries) else ""
    return (format_grid(header, rows) + "\n(latencies in seconds; nodes = draft nodes verified per sequence per step "
            "(a chain's drafts, a tree's nodes); acc/step = accepted drafts per sequence per step; "
            f"KV peak = most KV blocks held / capacity{same})")


def _cdf(ax, values, name, colour=None):
    v = np.sort(values[~np.isnan(values)])
    if v.shape[0]:
        ax.plot(v, np.arange(1, v.shape[0] + 1) / v.shape[0], label=name, color=colour)


def _distinct_series(results, summaries):
    """``(result, name)`` per distinct run: a run that was the same as an earlier one (its
    summary's ``same_as``) is drawn once, under both names (``fixed:3 = goodput``)."""
    names = {}
    for r, s in zip(results, summaries):
        first = s.get("same_as") or s["label"]
        names.setdefault(first, [r, []])[1].append(s["label"])
    return [(r, " = ".join(labels)) for r, labels in names.values()]


# A figure's range below this share of its value gets a note: the axis spans little.
NARROW_RANGE = 0.03


def _narrow_range_note(ax, xs, ys) -> None:
    """Say on the axes when the points span under :data:`NARROW_RANGE` of their value on an axis,
    since matplotlib stretches any range to the full axis."""
    notes = []
    for name, values in (("tokens/s", xs), ("J/token", ys)):
        v = [x for x in values if x is not None]
        if len(v) > 1 and max(v) > 0 and (max(v) - min(v)) / max(v) < NARROW_RANGE:
            notes.append(f"{name} spans only {100 * (max(v) - min(v)) / max(v):.2g}%")
    if notes:
        ax.text(0.02, 0.02, "; ".join(notes) + " of its value", transform=ax.transAxes, fontsize=8,
                color="dimgrey", va="bottom")


def _moving_mean(values, share=0.01):
    """A centred moving mean over about ``share`` of the points (at least 1), same length."""
    w = max(1, int(values.shape[0] * share))
    if w == 1:
        return values
    kernel = np.ones(w) / w
    padded = np.concatenate([np.full(w // 2, values[0]), values, np.full(w - 1 - w // 2, values[-1])])
    return np.convolve(padded, kernel, mode="valid")


def _kv_panel(ax, results, colours=None):
    """KV blocks held over time: as a share of the capacity when there is one (``colours``: one
    per result, the figure's colour of its run)."""
    capped = all(r.kv["capacity_blocks"] for r in results)
    for i, r in enumerate(results):
        if r.step_t_s.shape[0]:
            held = r.step_kv_blocks.astype(float)
            if capped:
                held = held / r.kv["capacity_blocks"]
            ax.plot(r.step_t_s, held, linewidth=1.0, label=label(r), color=None if colours is None else colours[i])
    ax.set_xlabel("time (s)")
    ax.set_ylabel("KV utilisation" if capped else "KV blocks held")
    ax.set_title("KV cache over time (step log)")


def _efficiency_panel(ax, summaries, colour_of) -> None:
    """The first panel: J/token against tokens/s per run, in its series' colour (``colour_of``:
    label -> colour); the points of one policy at several slacks joined by a grey line and
    labelled by slack."""
    by_policy = {}
    for s in summaries:
        by_policy.setdefault(s["policy"], []).append(s)
    slack_labels = False
    for name, group in by_policy.items():
        pts = [(g["tokens_per_s"], g["j_per_token"], g["slack"], g["label"]) for g in group
               if g["tokens_per_s"] is not None]
        if not pts:
            continue
        pts.sort(key=lambda p: (p[2] is not None, p[2]))
        if len(pts) > 1:  # one policy at several slacks: its points joined, each labelled by its slack
            ax.plot([p[0] for p in pts], [p[1] for p in pts], color="lightgrey", linewidth=1.0, zorder=1)
        for x, y, sl, lab in pts:
            ax.plot([x], [y], marker="o", linestyle="none", color=colour_of[lab], zorder=2)
            if sl is not None and len(pts) > 1:
                slack_labels = True
                ax.annotate(f"{sl:g}", (x, y), textcoords="offset points", xytext=(4, 4), fontsize=8)
    ax.ticklabel_format(useOffset=False, style="plain")
    ax.set_xlabel("tokens/s")
    ax.set_ylabel("J/token")
    ax.set_title("energy per token vs throughput" + (" (labels: slack)" if slack_labels else ""))
    _narrow_range_note(ax, [s["tokens_per_s"] for s in summaries], [s["j_per_token"] for s in summaries])


def plot(results, summaries, path) -> dict:
    """Write a six-panel figure to ``path`` (format from its suffix, e.g. ``.png``).

    Panels: J/token against tokens/s per run (points of one policy at several slacks joined
    by a grey line and labelled by slack), TTFT and TPOT CDFs, the verified depth (rows / width)
    over time, KV-cache use over time, and the queueing-delay CDF. Time series come from each
    run's step log. Each distinct run has one colour in every panel and one figure legend names
    them; a dashed line marks an SLO target, labelled on the axes.

    Returns what was drawn: ``series`` (the legend's names, one per distinct run), ``colours``,
    ``legends`` (how many legends the figure has: 1), ``titles`` (per panel) and
    ``slack_labels`` (the slack labels on the first panel).
    """
    try:  # matplotlib is optional (the plot extra) and heavy: loaded only when a figure is drawn
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib.ticker import NullFormatter
    except ImportError as e:
        raise SimulationError("--plot needs matplotlib: pip install 'specsim-llm[plot]'") from e

    fig, axes = plt.subplots(3, 2, figsize=(12, 13))
    shown = _distinct_series(results, summaries)
    # One colour per distinct run, the same in every panel, so one legend names them all.
    colour = {name: f"C{i % 10}" for i, (_, name) in enumerate(shown)}
    series_of = {}
    for r, s in zip(results, summaries):
        first = s.get("same_as") or s["label"]
        series_of[s["label"]] = next(name for _, name in shown if name.split(" = ")[0] == first)
    _efficiency_panel(axes[0, 0], summaries, {label: colour[name] for label, name in series_of.items()})
    slo = summaries[0]["slo"] if summaries else {}
    targets = {"ttft_s": slo.get("ttft_target_s"), "tpot_s": slo.get("tpot_target_s")}
    for ax, attr, title in ((axes[0, 1], "ttft_s", "TTFT"), (axes[1, 0], "tpot_s", "TPOT"),
                            (axes[2, 1], "queue_s", "queueing delay")):
        lows = []
        for r, name in shown:
            v = getattr(r, attr)
            _cdf(ax, v, name, colour[name])
            v = v[~np.isnan(v)]
            lows.append(v.min() if v.shape[0] else 1.0)
        if targets.get(attr) is not None:
            ax.axvline(targets[attr], linestyle="--", color="grey", linewidth=1.0)
            ax.text(targets[attr], 0.02, f" SLO {targets[attr]:g} s", color="dimgrey", fontsize=8,
                    transform=ax.get_xaxis_transform(), va="bottom")
        if lows and min(lows) > 0:
            ax.set_xscale("log")
        else:
            ax.set_xscale("symlog", linthresh=1e-3)
        ax.xaxis.set_minor_formatter(NullFormatter())  # minor labels collide on short decades
        ax.set_xlabel(f"{title} (s)")
        ax.set_ylabel("fraction of requests")
        ax.set_title(f"{title} CDF" + (" (dashed: the SLO target)" if targets.get(attr) is not None else ""))
    ax = axes[1, 1]
    for r, name in shown:
        if r.step_t_s.shape[0]:
            ax.plot(r.step_t_s, _moving_mean(r.step_mean_depth), linewidth=1.0, label=name, color=colour[name])
    ax.set_xlabel("time (s)")
    ax.set_ylabel("verified drafts per sequence")
    ax.set_title("depth over time (moving mean of the step log)")
    _kv_panel(axes[2, 0], [r for r, _ in shown], [colour[name] for _, name in shown])
    for a in (axes[1, 1], axes[2, 0]):
        if a.get_legend() is not None:
            a.get_legend().remove()
    # One legend for every panel (each run has one colour throughout), below them, off the data.
    from matplotlib.lines import Line2D  # optional and heavy, as above: only with a figure

    handles = [Line2D([], [], color=colour[name], marker="o", label=name) for _, name in shown]
    fig.legend(handles=handles, loc="lower center", ncol=min(4, max(1, len(shown))), fontsize=8, frameon=False)
    drawn = {"series": [name for _, name in shown], "colours": [colour[name] for _, name in shown],
             "legends": len(fig.legends) + sum(a.get_legend() is not None for a in axes.flat),
             "titles": [a.get_title() for a in axes.flat],
             "slack_labels": [t.get_text() for t in axes[0, 0].texts if t.get_text() and "spans only" not in t.get_text()]}
    fig.tight_layout(rect=(0, 0.03 + 0.015 * ((len(shown) + 3) // 4), 1, 1))
    buf = io.BytesIO()
    suffix = str(path).rsplit(".", 1)[-1].lower() if "." in str(path) else "png"
    fig.savefig(buf, format=suffix, dpi=110)
    plt.close(fig)
    atomic_write_bytes(path, buf.getvalue())
    return drawn
