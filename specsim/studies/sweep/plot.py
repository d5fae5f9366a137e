"""The sweep's picture: energy per token against throughput for every point, p99 TPOT as colour,
and the Pareto front (no other point is both faster and cheaper)."""

from __future__ import annotations

from specsim.errors import SpecsimError


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
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise SpecsimError("the plot needs matplotlib: pip install 'specsim[plot]'") from None
    from specsim._io import atomic_write_bytes

    from specsim._checks import is_finite, is_number, show

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
    fig, ax = plt.subplots(figsize=(8, 5.5), dpi=120)
    policies = sorted({str(r.get("policy")) for r in rows})
    markers = "osD^v<>ph*"
    colour = [float(r["tpot_s_p99"]) if is_finite(r.get("tpot_s_p99")) else float("nan") for r in rows]
    vmin = min((c for c in colour if c == c), default=0.0)
    vmax = max((c for c in colour if c == c), default=1.0)
    sc = None
    for m, pol in zip(markers * 10, policies):
        idx = [i for i, r in enumerate(rows) if str(r.get("policy")) == pol]
        sc = ax.scatter([rows[i]["tokens_per_s"] for i in idx], [rows[i]["j_per_token"] for i in idx],
                        c=[colour[i] for i in idx], cmap="viridis", vmin=vmin, vmax=vmax, marker=m, s=46,
                        edgecolors="black", linewidths=0.4, label=pol)
    front = pareto_front(rows)
    ax.plot([rows[i]["tokens_per_s"] for i in front], [rows[i]["j_per_token"] for i in front], "--",
            color="crimson", lw=1.2, label="Pareto front")
    if sc is not None:
        fig.colorbar(sc, ax=ax, label="p99 TPOT (s)")
    ax.set_xlabel("throughput (output tokens/s)")
    ax.set_ylabel("energy (J per output token)")
    ax.set_title(f"{len(rows)} sweep points: lower right is better")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="best")
    fig.tight_layout()
    import io

    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    plt.close(fig)
    atomic_write_bytes(path, buf.getvalue())
