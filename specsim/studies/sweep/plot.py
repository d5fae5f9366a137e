"""The sweep's picture: energy per token against throughput for every point, p99 TPOT as colour,
and the Pareto front (no other point is both faster and cheaper), one panel per traffic level
(``rate_scale``): points served different traffic are not rivals."""

from __future__ import annotations

import io

from specsim.errors import SpecsimError
from specsim._checks import is_finite, is_number, show
from specsim._io import atomic_write_bytes


def pareto_front(rows):
    """Indices of the rows no other row beats on both tokens/s (higher) and J/token (lower)."""
    pts = [(r.get("tokens_per_s"), r.get("j_per_token")) for r in rows]
    front = []
    for i, (x, y) in enumerate(pts):
        if x is None or y is None:
            continue
        dominated = any(
            xo is not None and yo is not None and xo >= x and yo <= y and (xo > x or yo < y)
            for j, (xo, yo) in enumerate(pts) if j != i
        )
        if not dominated:
            front.append(i)
    return sorted(front, key=lambda i: pts[i][0])


def pareto_plot(rows, path) -> None:
    """Write the Pareto plot of sweep result rows to ``path`` (PNG)."""
    try:
        import matplotlib  # optional (the plot extra): loaded only when a figure is drawn

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise SpecsimError("the plot needs matplotlib: pip install 'specsim-llm[plot]'") from None

    for r in rows:
        for name in ("tokens_per_s", "j_per_token", "tpot_s_p99"):
            v = r.get(name)
            if v is not None and not is_number(v):
                raise SpecsimError(f"sweep point {show(r.get('point_id'))}: {name} = {show(v)} is not a number; "
                                   "the results file was edited: repair it or run the sweep into a new file")
    # Points without a finite throughput and energy have no place on the axes.
    rows = [r for r in rows if is_finite(r.get("tokens_per_s")) and is_finite(r.get("j_per_token"))]
    if not rows:
        raise SpecsimError("no sweep point has both tokens/s and J/token to plot")
    levels = sorted({float(r.get("rate_scale") if is_number(r.get("rate_scale")) else 1.0) for r in rows})
    fig, axes = plt.subplots(1, len(levels), figsize=(1.0 + 6.0 * len(levels), 5.5), dpi=120, squeeze=False)
    policies = sorted({str(r.get("policy")) for r in rows})
    markers = dict(zip(policies, "osD^v<>ph*" * 10))
    colour = [float(r["tpot_s_p99"]) if is_finite(r.get("tpot_s_p99")) else float("nan") for r in rows]
    vmin = min((c for c in colour if c == c), default=0.0)
    vmax = max((c for c in colour if c == c), default=1.0)
    sc = None
    for ax, level in zip(axes[0], levels):
        idx_level = [i for i, r in enumerate(rows)
                     if float(r.get("rate_scale") if is_number(r.get("rate_scale")) else 1.0) == level]
        for pol in policies:
            idx = [i for i in idx_level if str(rows[i].get("policy")) == pol]
            if not idx:
                continue
            sc = ax.scatter([rows[i]["tokens_per_s"] for i in idx], [rows[i]["j_per_token"] for i in idx],
                            c=[colour[i] for i in idx], cmap="viridis", vmin=vmin, vmax=vmax, marker=markers[pol],
                            s=46, edgecolors="black", linewidths=0.4, label=pol)
        sub = [rows[i] for i in idx_level]
        front = pareto_front(sub)
        ax.plot([sub[i]["tokens_per_s"] for i in front], [sub[i]["j_per_token"] for i in front], "--",
                color="crimson", lw=1.2, label="Pareto front")
        ax.set_xlabel("throughput (output tokens/s)")
        ax.set_ylabel("energy (J per output token)")
        ax.set_title(f"traffic x{level:g}: {len(sub)} points (lower right is better)", fontsize=10)
        ax.grid(alpha=0.3)
    handles = {}
    for ax in axes[0]:
        for h, lab in zip(*ax.get_legend_handles_labels()):
            handles.setdefault(lab, h)
    fig.legend(list(handles.values()), list(handles), fontsize=8, loc="lower center",
               ncol=min(6, len(handles)), frameon=False)
    if sc is not None:
        fig.colorbar(sc, ax=list(axes[0]), label="p99 TPOT (s)")
    fig.subplots_adjust(bottom=0.2)

    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    plt.close(fig)
    atomic_write_bytes(path, buf.getvalue())
