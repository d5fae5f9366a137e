"""A cost table against published speculative-serving measurements (``specsim table compare``):
how far to trust a modelled table for an engine (docs/tables.md#against-published-measurements).

A published set is a CSV with one measurement a row (the columns of tests/data/published-sd:
``method``, ``spec_tokens``, ``batch_or_concurrency``, ``metric``, ``value``, ``baseline_value``,
``acceptance_length``; others are kept out). A row is compared when its metric is a speedup
(``... speedup ...``: ``value`` is the speedup) or a TPOT (``value`` and ``baseline_value`` in
ms: the speedup is ``baseline / value``), its ``spec_tokens`` and ``batch_or_concurrency`` start
with a whole number (the depth and the batch) and the table holds that depth and batch. The
table's speedup at batch ``b`` and depth ``k`` is ``tokens x step(b, 0) / step(b, k)``, with
``tokens`` the row's acceptance length where given (in 1..k+1), else fitted at the smallest
batch of its curve (a method at one depth), so that point is exact and only the shape over batch
is tested.
"""

from __future__ import annotations

import io
import re
from typing import NamedTuple

from specsim._checks import few, plain_decimal
from specsim._io import atomic_write_bytes, csv_rows, decode_text, read_input
from specsim.errors import TableError

COLUMNS = ("method", "spec_tokens", "batch_or_concurrency", "metric", "value")
"""The columns a published set must have (``baseline_value`` and ``acceptance_length`` too where
its rows need them)."""


class Published(NamedTuple):
    """One comparable row of a published set."""

    line: int
    method: str
    depth: int
    batch: int
    speedup: float
    acceptance_length: float | None
    setup: tuple = ("", "", "")  # the row's gpu, model and tp columns, as written ("" where absent)


class Compared(NamedTuple):
    method: str
    depth: int
    batch: int
    published: float
    predicted: float
    fitted: bool          # the curve's tokens per step were fitted at this point


def _leading_int(text: str):
    m = re.match(r"\s*([0-9]{1,9})(?![0-9.])", text)
    return int(m.group(1)) if m else None


MAX_PUBLISHED = 1e9
"""Largest value a published row may give (a speedup, a TPOT in ms, an acceptance length): far
past any real one, and far from the floats' end, so that no ratio of two overflows."""


def _number(text: str):
    v = plain_decimal(text)  # NaN for other scripts' digits and `4_0`, which float() reads
    return v if 1.0 / MAX_PUBLISHED <= v <= MAX_PUBLISHED else None


def _looks_numeric(text: str) -> bool:
    """``text`` is meant as a number (it starts like one), not a note such as ``not reported``."""
    t = text.strip()
    return bool(t) and (t[0] in "-+." or t[0].isdigit())


def read_published(path) -> tuple:
    """``(rows, skipped)`` of a published set: the comparable rows, and ``(line, why)`` of the
    rest. A file without the :data:`COLUMNS`, or with no comparable row, is refused."""
    text = decode_text(read_input(path, "the published set", TableError), "the published set", path, TableError)
    header, rows = csv_rows(text, "the published set", path, TableError)
    names = [h.strip().lower() for h in header or []]
    missing = [c for c in COLUMNS if c not in names]
    if missing:
        raise TableError(f"{path}: the published set has no {', '.join(missing)} column (columns: method, "
                         "spec_tokens, batch_or_concurrency, metric, value, baseline_value, acceptance_length)")
    col = {n: i for i, n in enumerate(names)}

    def get(row, name):
        i = col.get(name)
        return row[i].strip() if i is not None and i < len(row) else ""

    def setup(row):
        return get(row, "gpu"), get(row, "model"), get(row, "tp")

    out, skipped = [], []
    for line, row in rows:
        if not "".join(row).strip():
            continue
        metric = get(row, "metric").lower()
        value = _number(get(row, "value"))
        depth, batch = _leading_int(get(row, "spec_tokens")), _leading_int(get(row, "batch_or_concurrency"))
        length = _number(get(row, "acceptance_length"))
        stated = get(row, "acceptance_length")
        if value is None:
            skipped.append((line, f"value {get(row, 'value')[:30]!r} is not a number in {1 / MAX_PUBLISHED:g}.."
                                  f"{MAX_PUBLISHED:g}"))
        elif depth is None or batch is None or depth < 1 or batch < 1:
            skipped.append((line, "spec_tokens or batch_or_concurrency does not start with a whole number >= 1"))
        elif _looks_numeric(stated) and not (length is not None and 1.0 <= length <= depth + 1):
            # a step emits its bonus token and at most one token per draft: anything else is no
            # acceptance length of this depth, and would scale the prediction by it
            skipped.append((line, f"acceptance_length {stated[:30]!r} is not a number in 1..{depth + 1} (a step "
                                  f"of {depth} drafts emits 1 to {depth + 1} tokens)"))
        elif "speedup" in metric and "slowdown" not in metric:
            out.append(Published(line, get(row, "method"), depth, batch, value, length, setup(row)))
        elif metric == "tpot":
            base = _number(get(row, "baseline_value"))
            if base is None:
                skipped.append((line, "a TPOT without a baseline_value"))
            else:
                out.append(Published(line, get(row, "method"), depth, batch, base / value, length, setup(row)))
        else:
            skipped.append((line, f"metric {get(row, 'metric')!r} is not a speedup or a TPOT"))
    if not out:
        why = "; ".join(f"line {line}: {w}" for line, w in skipped[:3])
        raise TableError(f"{path}: no row of the published set can be compared (a speedup or a TPOT at a whole "
                         f"depth and batch){': ' + why if why else ''}")
    return out, skipped


def compare(table, rows) -> tuple:
    """``(compared, skipped)``: each row against ``table`` (see the module docstring); rows at a
    depth beyond the table or a batch outside its widths, or alone on a curve without an
    acceptance length, are skipped."""
    curves, skipped = {}, []
    for r in rows:
        if r.depth > table.max_k:
            skipped.append((r.line, f"depth {r.depth} is beyond the table's max_k = {table.max_k}"))
            continue
        low, high = int(table.widths[0]), int(table.widths[-1])
        if not low <= r.batch <= high:  # the table would answer with its edge width's costs
            skipped.append((r.line, f"batch {r.batch} is outside the table's widths {low}..{high}"))
            continue
        curves.setdefault((r.method, r.depth), []).append(r)
    out = []
    for (method, depth), curve in curves.items():
        curve.sort(key=lambda r: (r.batch, r.line))
        ratio = []
        for r in curve:
            plain, spec = table.cell(r.batch, 0), table.cell(r.batch, depth)
            ratio.append(plain.verify_ms / (spec.verify_ms + spec.draft_ms))
        first = curve[0]
        if first.acceptance_length is None and len(curve) < 2:
            skipped.append((first.line, "no acceptance length and no other batch to fit tokens per step on"))
            continue
        for r, x in zip(curve, ratio):
            if r.acceptance_length is not None:
                out.append(Compared(method, depth, r.batch, r.speedup, r.acceptance_length * x, False))
            else:
                tokens = first.speedup / ratio[0]
                out.append(Compared(method, depth, r.batch, r.speedup, tokens * x, r is first))
    return out, skipped


def _squeezed(text: str) -> str:
    """``text`` lower-cased, all but its letters and digits left out: so that "RTX 3090" holds
    ``rtx3090`` and "Llama-3.1-8B-Instruct" holds ``llama-3.1-8b``."""
    return re.sub(r"[^0-9a-z]", "", text.lower())


def setup_mismatches(table, rows) -> list:
    """What ``rows`` were measured on that ``table`` does not model, a line each: another GPU
    (the first part of the table's GPU name, ``h100`` of ``h100-sxm``, is not in the row's
    ``gpu``), another model (the table's model name is not in the row's ``model``) or another
    tensor-parallel degree (the row's ``tp`` starts with another whole number). Only what the
    table's ``[meta]`` names is checked (a modelled table names all three). The sets write these
    columns as free text, so a mismatch is a warning for the user to read, never a refusal: a
    table's error against such rows includes the hardware's or the model's difference."""
    meta = getattr(table, "meta", None) or {}
    gpu, model, tp = meta.get("gpu"), meta.get("model"), meta.get("tp")
    wanted = [
        ("gpu", gpu, _squeezed(gpu.split("-")[0]) if isinstance(gpu, str) else ""),
        ("model", model, _squeezed(model) if isinstance(model, str) else ""),
    ]
    found = {}
    for r in rows:
        for i, (kind, name, key) in enumerate(wanted):
            text = r.setup[i]
            if key and text and key not in _squeezed(text):
                found.setdefault((kind, text, name), []).append(r.line)
        n = _leading_int(r.setup[2])
        if isinstance(tp, int) and not isinstance(tp, bool) and n is not None and n != tp:
            found.setdefault(("tp", r.setup[2], tp), []).append(r.line)
    return [f"line{'s' if len(lines) > 1 else ''} {few(sorted(lines), 2)}: measured with {kind} {text[:60]!r}, "
            f"the table models {kind} {name!r}" for (kind, text, name), lines in found.items()]


def plot_comparison(compared, path, title: str) -> None:
    """Predicted against published speedup by batch, one colour per curve, to ``path`` (format from
    its suffix)."""
    try:  # lazy: matplotlib is optional and slow to import
        import matplotlib  # optional (the plot extra): loaded only when a figure is drawn

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as e:
        raise TableError("--plot needs matplotlib: pip install 'specsim-llm[plot]'") from e
    fig, ax = plt.subplots(figsize=(7, 4.5))
    curves = {}
    for c in compared:
        curves.setdefault((c.method, c.depth), []).append(c)
    for i, ((method, depth), curve) in enumerate(curves.items()):
        colour = f"C{i % 10}"
        xs = [c.batch for c in curve]
        ax.plot(xs, [c.published for c in curve], "o-", color=colour, label=f"{method}, k={depth}: published")
        ax.plot(xs, [c.predicted for c in curve], "s--", color=colour, fillstyle="none",
                label=f"{method}, k={depth}: table")
    ax.axhline(1.0, color="grey", linewidth=0.8)
    ax.set_xlabel("batch (or concurrency)")
    ax.set_ylabel("speedup over plain decoding")
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=7)
    fig.tight_layout()
    buf = io.BytesIO()
    suffix = str(path).rsplit(".", 1)[-1].lower() if "." in str(path) else "png"
    fig.savefig(buf, format=suffix, dpi=110)
    plt.close(fig)
    atomic_write_bytes(path, buf.getvalue())
