"""Cost tables from a serving engine's own telemetry (docs/measure.md#a-table-from-engine-telemetry).

Two sources, read with the engine-format readers of :mod:`specsim.interop`:

- TensorRT-LLM iteration stats (``--from trtllm-iterations``, read by
  :func:`specsim.interop.trtllm.iteration_stats`): every iteration states its width
  (``numGenRequests``), its depth (``numDraftTokens / numRequestsWithDraftTokens``), its latency
  (``iterLatencyMS``), the draft's part of it (``specDecodingStats.iterLatencyMS``, or
  ``draftOverhead`` of the latency), whether it also prefilled (``numContextRequests``,
  ``numCtxTokens``) and, in newer builds, its KV tokens (``numGenKvTokens``).
- SGLang ``Decode batch`` log lines (``--from sglang-log``): each line's width (``#running-req``)
  over its generation throughput is the mean plain-decode step of the interval it closes.

Samples that also prefill (a TensorRT-LLM iteration with context requests or tokens, an SGLang
interval with a ``Prefill batch`` line in it) and SGLang lines of a speculative serve (their depth
is not logged) are kept apart: counted, never priced into a decode cell. A ``(width, depth)``
cell is the median of its samples; one with fewer than :data:`MIN_CELL_SAMPLES` is refused
(listed, left out). The table's grid (every width at every depth ``0..=max_k``) is completed from
the cells that stand: along the width at each depth linearly between observed widths, nearest
outside (the table lookup's own rule); a depth observed at no width linearly between the nearest
observed depths at each width (verify time, and draft time per draft). Each cell says how many
samples it rests on (``samples``; 0 for a completed one) and ``source`` (``measured``,
``width-fit``, ``depth-fit``). How well the table holds its samples, and the engine parameters
(:data:`STEP_TERMS`) fitted to every sample, go to ``[meta]`` (``cell_residual_*``,
``step_model*``). Joules are the ``--assume-power-w`` power times time
(``[meta] energy_source = "assumed"``), or the mean board power of an NVML log (``--nvml-log``,
``energy_source = "nvml-log-mean"``) times time.

Every value is checked on the line it is read from, so that no extreme value reaches the fit: a
latency (a TensorRT-LLM iteration, its verify and draft parts, an SGLang line's mean step) lies in
``MIN_SAMPLE_MS..MAX_SAMPLE_MS``; a width in ``0..MAX_WIDTH`` and a depth in ``0..MAX_DEPTH`` (the
table's limits); a power (``--assume-power-w``, the NVML log's mean) in ``MIN_POWER_W..MAX_POWER_W``
and each NVML reading in ``0..MAX_POWER_W``. Counts and latencies are JSON numbers (a string or a
boolean is refused), and a line that is not iteration stats (unreadable JSON, a bare number or a
list of non-objects) is refused, as is a ``specDecodingStats`` that is not an object (``null`` is
absent) and a field given under both spellings with different values; an SGLang field is read
whole up to the next comma or space (a throughput must be a plain decimal number) and once a line:
a table rests on every line of its files or is not written.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import NamedTuple

import numpy as np

from specsim.errors import CalibrationError, TableError
from specsim._checks import (
    MAX_POWER_W, MAX_SAMPLE_MS, MAX_WIDTH, MIN_POWER_W, MIN_SAMPLE_MS, check_number, digits_int, plain_decimal,
    show,
)
from specsim._io import csv_rows, decode_text, read_input
from specsim.interop._records import read_text
from specsim.interop.sglang import DECODE_LOG_INTERVAL, FIELD_LABELS, decode_batch
from specsim.interop.trtllm import iteration_stats
from specsim.table import Cell, CostTable
from specsim.table._format import key_problems

MIN_CELL_SAMPLES = 5
"""Fewest samples (TensorRT-LLM iterations, SGLang ``Decode batch`` lines) a measured cell rests
on; a cell with fewer is refused and left out of the table."""

ENGINE_FORMATS = {
    "trtllm-iterations": "TensorRT-LLM per-iteration stats (JSON or JSON Lines, camelCase or snake_case)",
    "sglang-log": "SGLang `Decode batch` log lines (plain decode only)",
}


class Sample(NamedTuple):
    """One timed decode step (or an interval's mean step) at one width and depth."""

    where: str
    width: int
    depth: int
    verify_ms: float
    draft_ms: float
    context: float | None = None  # mean KV tokens per sequence, where the engine reports them


class Samples(NamedTuple):
    """What a telemetry file gave: decode samples and the counts of what was kept apart."""

    decode: list
    kept_apart: dict        # reason -> count
    steps_per_sample: int   # engine steps behind one sample (SGLang: the log interval)


# -- TensorRT-LLM ------------------------------------------------------------------------------
def _refuse(what, problems):
    """Raise the refusal of a file: ``what`` and how many problems, then the problems (the first
    screenful, one a line)."""
    raise TableError(f"{what} ({len(problems):,} problem{'s' if len(problems) > 1 else ''})", problems)


def trtllm_samples(text: str, source: str) -> Samples:
    """Decode samples of TensorRT-LLM iteration stats (read by
    :func:`specsim.interop.trtllm.iteration_stats`); refuses (naming file, line and field)
    unreadable lines, latencies outside ``MIN_SAMPLE_MS..MAX_SAMPLE_MS``, counts that are not JSON
    whole numbers, widths and depths beyond the table's limits and counts that contradict."""
    iterations, problems, seen = iteration_stats(text, source)
    if problems:
        _refuse(f"{source}: the iteration stats are refused", problems)
    if seen == 0:
        raise TableError(f"{source}: no TensorRT-LLM iteration stats (no object with iterLatencyMS or "
                         "iter_latency_ms): enable iteration perf stats and save /metrics")
    decode = []
    kept = {"prefill or mixed iterations": 0, "iterations without generation requests": 0}
    for it in iterations:
        if it.gen == 0:
            kept["iterations without generation requests"] += 1
        elif it.ctx or it.ctx_tokens:
            kept["prefill or mixed iterations"] += 1
        else:
            context = None if it.kv_tokens is None else it.kv_tokens / it.gen
            decode.append(Sample(it.where, it.gen, it.depth, it.latency_ms - it.draft_ms, it.draft_ms, context))
    return Samples(decode, kept, 1)


# -- SGLang ------------------------------------------------------------------------------------
def _logged(text):
    """A field's text as logged, for a message (quoted and cut when empty or long)."""
    return text if 0 < len(text) <= 30 else show(text, 30)


def sglang_samples(text: str, source: str, interval=None) -> Samples:
    """Plain-decode samples of SGLang ``Decode batch`` lines: ``#running-req`` over the line's
    generation throughput is the mean step of its interval."""
    problems, decode = [], []
    kept = {"idle lines (0 running requests or 0 gen throughput)": 0, "intervals with a prefill batch": 0,
            "speculative lines (depth not logged)": 0}
    lines = 0
    prefilled = False
    for i, line in enumerate(text.splitlines(), 1):
        fields = decode_batch(line)
        if fields is None:
            if "Prefill batch" in line:
                prefilled = True
            continue
        lines += 1
        where = f"{source}:{i}"
        mixed, prefilled = prefilled, False
        twice = [FIELD_LABELS[f] for f in fields["repeated"] if f in ("running", "throughput")]
        if twice:
            problems.append(f"{where}: a Decode batch line with {' and '.join(twice)} more than once (one "
                            "interval's figures a line)")
            continue
        width_text = fields["running"]
        if width_text is None:
            problems.append(f"{where}: a Decode batch line without #running-req")
            continue
        running = digits_int(width_text)
        if running is None or running > MAX_WIDTH:
            problems.append(f"{where}: #running-req = {_logged(width_text)} is not a batch width (a whole "
                            f"number in 0..{MAX_WIDTH:,})")
            continue
        raw = fields["throughput"]
        if raw is None:
            problems.append(f"{where}: a Decode batch line without `gen throughput (token/s)`")
            continue
        throughput = plain_decimal(raw)
        if not math.isfinite(throughput):
            problems.append(f"{where}: gen throughput (token/s) = {_logged(raw)} is not a throughput (a plain "
                            "decimal number >= 0, finite, such as 812.45)")
            continue
        if running == 0 or throughput == 0:
            kept["idle lines (0 running requests or 0 gen throughput)"] += 1
            continue
        step_ms = 1000.0 * running / throughput
        if not MIN_SAMPLE_MS <= step_ms <= MAX_SAMPLE_MS:
            problems.append(f"{where}: #running-req {running:,} at gen throughput (token/s) {_logged(raw)} is a "
                            f"step of {step_ms:.3g} ms, outside {MIN_SAMPLE_MS:g}..{MAX_SAMPLE_MS:g}")
            continue
        if fields["accept_len"] is not None:
            kept["speculative lines (depth not logged)"] += 1
            continue
        if mixed:
            kept["intervals with a prefill batch"] += 1
            continue
        decode.append(Sample(where, running, 0, step_ms, 0.0))
    if problems:
        _refuse(f"{source}: the SGLang log is refused", problems)
    if lines == 0:
        raise TableError(f"{source}: no SGLang `Decode batch` line")
    return Samples(decode, kept, interval or DECODE_LOG_INTERVAL)


# -- the fit -----------------------------------------------------------------------------------
def read_samples(paths, fmt: str) -> Samples:
    """The samples of every file (one format)."""
    if fmt not in ENGINE_FORMATS:
        raise TableError(f"unknown engine telemetry format {fmt!r}: one of {', '.join(ENGINE_FORMATS)}")
    reader = trtllm_samples if fmt == "trtllm-iterations" else sglang_samples
    decode, kept, steps = [], {}, 1
    for p in paths:
        try:
            text = read_text(p)
        except CalibrationError as e:
            raise TableError(str(e)) from None
        s = reader(text, str(p))
        if not s.decode:
            apart = ", ".join(f"{v:,} {k}" for k, v in s.kept_apart.items() if v) or "none"
            raise TableError(f"{p}: no decode iterations to fit a table on (kept apart: {apart})")
        decode += s.decode
        for k, v in s.kept_apart.items():
            kept[k] = kept.get(k, 0) + v
        steps = s.steps_per_sample
    return Samples(decode, kept, steps)


STEP_TERMS = {
    "verify": (("per_step_ms", "per step"), ("per_verify_row_ms", "per verify row"),
               ("per_kv_token_ms", "per KV token read")),
    "draft": (("per_draft_pass_ms", "per draft pass"), ("per_draft_row_ms", "per draft row")),
}
"""The engine parameters an import fits to its samples (``[meta] step_model``): a sample's verify
time is a fixed part per step, a part per verify row (``width x (depth + 1)``) and a part per KV
token the step reads (``width x context``, where the engine reports the KV tokens); its draft time
a part per draft pass (``depth``) and a part per draft row (``width x depth``)."""


def _columns(part, samples):
    """The design columns of one part of :data:`STEP_TERMS`, one row per sample."""
    n = np.array([s.width for s in samples], dtype=np.float64)
    k = np.array([s.depth for s in samples], dtype=np.float64)
    if part == "verify":
        context = [s.context for s in samples]
        kv = np.zeros_like(n) if None in context else n * np.array(context, dtype=np.float64)
        return [np.ones_like(n), n * (k + 1.0), kv]
    return [k, n * k]


def _least_squares(columns, target):
    """Coefficients of ``target ~ columns`` minimising the relative error; a column that adds
    nothing the earlier ones do not (all zero, or a combination of them) gets None."""
    weight = 1.0 / target
    kept, coefs = [], [None] * len(columns)
    for i, c in enumerate(columns):
        trial = np.column_stack([columns[j] for j in kept + [i]]) * weight[:, None]
        if np.any(c) and np.linalg.matrix_rank(trial) == len(kept) + 1:
            kept.append(i)
    if kept:
        a = np.column_stack([columns[j] for j in kept]) * weight[:, None]
        solution = np.linalg.lstsq(a, np.ones_like(target), rcond=None)[0]
        for j, v in zip(kept, solution):
            coefs[j] = float(v)
    return coefs


def _relative(predicted, observed):
    """Median and 90th percentile of ``|predicted / observed - 1|``."""
    r = np.abs(np.asarray(predicted) / np.asarray(observed) - 1.0)
    return float(np.median(r)), float(np.quantile(r, 0.9))


def step_model(samples) -> dict:
    """The :data:`STEP_TERMS` fitted to ``samples`` (relative least squares over every sample)
    and how well they fit: ``[meta]`` fields, a term that the samples cannot tell apart from the
    others (a draft term in a plain serve, the KV term without KV counts) left out."""
    out, described, predicted = {}, [], np.zeros(len(samples))
    for part, terms in STEP_TERMS.items():
        target = np.array([s.verify_ms if part == "verify" else s.draft_ms for s in samples])
        rows = target > 0.0
        if not np.any(rows):
            continue
        columns = _columns(part, samples)
        coefs = _least_squares([c[rows] for c in columns], target[rows])
        text = []
        for (name, label), c, col in zip(terms, coefs, columns):
            if c is not None:
                out["step_model_" + name] = c
                text.append(f"{c:.4g} ms {label}")
                predicted += c * col
        described.append(f"{part}_ms = " + " + ".join(text))
    observed = np.array([s.verify_ms + s.draft_ms for s in samples])
    out["step_model"] = "; ".join(described)
    out["step_model_residual_median"], out["step_model_residual_p90"] = _relative(predicted, observed)
    return out


class Fitted(NamedTuple):
    table: object        # CostTable
    refused: list        # (width, depth, samples) of cells with too few samples
    kept_apart: dict


def fit_table(samples: Samples, key, *, power_w: float, min_samples: int = MIN_CELL_SAMPLES, meta=None,
              energy=None, source: str = "<telemetry>") -> Fitted:
    """A cost table fitted on ``samples`` (see the module docstring), joules at ``power_w``;
    ``energy`` is what ``[meta]`` says of them (default: an assumed power)."""
    if not samples.decode:
        apart = ", ".join(f"{v:,} {k}" for k, v in samples.kept_apart.items() if v) or "none"
        raise TableError(f"{source}: no decode iterations to fit a table on (kept apart: {apart})")
    groups = {}
    for s in samples.decode:
        groups.setdefault((s.width, s.depth), []).append(s)
    cells, refused = {}, []
    for (n, k), group in sorted(groups.items()):
        if len(group) < min_samples:
            refused.append((n, k, len(group)))
            continue
        cells[n, k] = (float(np.median([s.verify_ms for s in group])), float(np.median([s.draft_ms for s in group])),
                       len(group))
    if not cells:
        raise TableError(f"{source}: no (width, depth) cell has {min_samples} samples or more "
                         f"({len(groups)} cells seen, at most {max(len(g) for g in groups.values())} samples)")
    widths = sorted({n for n, _ in cells})
    depths = sorted({k for _, k in cells})
    if depths[0] != 0:
        raise TableError(f"{source}: no plain-decode (depth 0) cell stands: a table needs k = 0 at every width; add a "
                         "run without speculation (or a draft-length schedule with depth 0 at some widths)")
    max_k = depths[-1]
    verify = np.full((len(widths), max_k + 1), np.nan)
    per_draft = np.full_like(verify, np.nan)
    origin = np.zeros(verify.shape, dtype=np.int64)  # samples; -1 width-fit, -2 depth-fit
    x = np.array(widths, dtype=np.float64)
    for k in depths:
        seen = [(n, v) for (n, kk), v in cells.items() if kk == k]
        xs = np.array([n for n, _ in seen], dtype=np.float64)
        verify[:, k] = np.interp(x, xs, [v[0] for _, v in seen])
        per_draft[:, k] = np.interp(x, xs, [v[1] / k if k else 0.0 for _, v in seen])
        for i, n in enumerate(widths):
            origin[i, k] = cells[n, k][2] if (n, k) in cells else -1
    for k in range(max_k + 1):
        if k in depths:
            continue
        lo, hi = max(d for d in depths if d < k), min(d for d in depths if d > k)
        t = (k - lo) / (hi - lo)
        verify[:, k] = verify[:, lo] + t * (verify[:, hi] - verify[:, lo])
        plo = per_draft[:, lo] if lo else per_draft[:, hi]
        per_draft[:, k] = plo + t * (per_draft[:, hi] - plo)
        origin[:, k] = -2
    out_cells, extras = [], {}
    for i, n in enumerate(widths):
        for k in range(max_k + 1):
            v, d = float(verify[i, k]), float(per_draft[i, k] * k)
            out_cells.append(Cell(n, k, v, v * 1e-3 * power_w, d, d * 1e-3 * power_w))
            o = int(origin[i, k])
            extras[n, k] = {"samples": max(o, 0), "source": "measured" if o >= 0 else
                            ("width-fit" if o == -1 else "depth-fit")}
    meta = dict(meta or {})
    meta.update({
        "cost_source": "engine telemetry",
        **(energy or {"energy_source": "assumed", "assumed_power_w": float(power_w)}),
        "min_cell_samples": min_samples,
        "steps_per_sample": samples.steps_per_sample,
        "samples": len(samples.decode),
        "fit": "each measured cell is the median of its samples; the rest of the grid is linear in width between "
               "observed widths at the same depth (nearest outside), and a depth observed at no width linear in "
               "depth between the nearest observed depths",
        "measured_cells": len(cells),
        "refused_cells": ", ".join(f"n={n} k={k} ({c} samples)" for n, k, c in refused) or "none",
    })
    for reason, count in samples.kept_apart.items():
        meta["kept_apart_" + reason.split(" (")[0].replace(" ", "_")] = count
    # How well the table holds its samples: each sample against its (width, depth) cell (the
    # spread a median hides, and the width- and depth-fit cells of refused samples), then the
    # engine parameters of the whole serve.
    steps = {(c.n, c.k): c.verify_ms + c.draft_ms for c in out_cells}
    held = [s for s in samples.decode if (s.width, s.depth) in steps]  # a width only refused cells saw is not
    meta["cell_residual_median"], meta["cell_residual_p90"] = _relative(
        [steps[s.width, s.depth] for s in held], [s.verify_ms + s.draft_ms for s in held])
    meta.update(step_model(samples.decode))
    table = CostTable.from_cells(key, out_cells, meta=meta, extras=extras, source=source)
    return Fitted(table, refused, samples.kept_apart)


def nvml_log_power_w(path) -> tuple:
    """Mean board power of an ``nvidia-smi --query-gpu=timestamp,index,power.draw --format=csv``
    log: the GPUs' powers summed per sampling instant, averaged over the instants.

    With an ``index`` column each GPU's readings are averaged and the means summed (the mean of
    the per-instant sums when every instant holds one reading per GPU, whatever the timestamps
    say: nvidia-smi may stamp each GPU's row apart); a log whose GPUs hold reading counts more
    than one apart (a GPU missing from instants) is refused. Without it, rows with the same
    timestamp text are one instant's GPUs, and without a timestamp each row is one instant.
    A reading is a plain decimal number of watts (``300.00 W``; ``3_00`` is refused).

    Returns
    -------
    (float, int, int)
        Watts, sampling instants, GPUs.
    """
    text = decode_text(read_input(path, "the NVML power log", TableError), "the NVML power log", path, TableError)
    header, rows = csv_rows(text, "the NVML power log", path, TableError)
    names = [h.split(" [")[0].strip().lower() for h in header or []]
    if "power.draw" not in names:
        raise TableError(f"{path}: the NVML power log has no power.draw column (log with nvidia-smi "
                         "--query-gpu=timestamp,index,power.draw --format=csv -lms 100)")
    col = names.index("power.draw")
    when = names.index("timestamp") if "timestamp" in names else None
    gpu = names.index("index") if "index" in names else None
    readings, problems = {}, []  # key (GPU index, or timestamp without one) -> watts
    for line, row in rows:
        if not row or not "".join(row).strip():
            continue
        raw = row[col].strip() if col < len(row) else ""
        number = raw.removesuffix("W").strip()
        watts = plain_decimal(number)
        if not 0.0 <= watts <= MAX_POWER_W:  # NaN fails too
            problems.append(f"{path}:{line}: power.draw = {show(raw, 30)} is not a power (watts in "
                            f"0..{MAX_POWER_W:g}, a plain decimal number such as 300.00 W)")
            continue
        if gpu is not None:
            index = row[gpu].strip() if gpu < len(row) else ""
            if digits_int(index) is None:
                problems.append(f"{path}:{line}: index = {show(index, 30)} is not a GPU index (a whole number)")
                continue
            readings.setdefault(digits_int(index), []).append(watts)
        else:
            stamp = row[when].strip() if when is not None and when < len(row) else line
            readings.setdefault(stamp, []).append(watts)
    if problems:
        _refuse(f"{path}: the NVML power log is refused", problems)
    if not readings:
        raise TableError(f"{path}: the NVML power log holds no sample")
    if gpu is None:
        gpus = max(len(v) for v in readings.values())
        mean, instants = math.fsum(math.fsum(v) for v in readings.values()) / len(readings), len(readings)
    else:
        counts = {i: len(v) for i, v in readings.items()}
        if max(counts.values()) - min(counts.values()) > 1:
            raise TableError(f"{path}: the NVML power log's GPUs hold different numbers of readings ("
                             + ", ".join(f"GPU {i}: {c:,}" for i, c in sorted(counts.items()))
                             + "), so no instant's total power is known: log every GPU at every instant "
                               "(nvidia-smi --query-gpu=timestamp,index,power.draw --format=csv -lms 100)")
        gpus, instants = len(readings), max(counts.values())
        mean = math.fsum(math.fsum(v) / len(v) for v in readings.values())
    if not MIN_POWER_W <= mean <= MAX_POWER_W:
        raise TableError(f"{path}: the NVML power log's mean board power {mean:g} W is outside "
                         f"{MIN_POWER_W:g}..{MAX_POWER_W:g} W (the bounds of --assume-power-w): is it the log of a "
                         "busy GPU, in watts?")
    return mean, instants, gpus


def import_table(paths, fmt: str, key, *, power_w=None, nvml_log=None,
                 min_samples: int = MIN_CELL_SAMPLES) -> Fitted:
    """Read ``paths`` (``fmt``: one of :data:`ENGINE_FORMATS`) and fit a table under ``key``;
    joules from an assumed ``power_w`` or from the mean power of an ``nvml_log``."""
    if (power_w is None) == (nvml_log is None):
        raise TableError("give one of --assume-power-w W and --nvml-log FILE: engine telemetry holds no joules")
    bad_key = key_problems(key)
    if bad_key:
        raise TableError(bad_key[0])
    if isinstance(min_samples, bool) or not isinstance(min_samples, int) or min_samples < 1:
        raise TableError(f"--min-samples = {min_samples!r} must be a whole number >= 1")
    names = ", ".join(Path(p).name for p in paths)
    meta = {"imported_from": names, "telemetry_format": fmt}
    if nvml_log is not None:
        power_w, stamps, gpus = nvml_log_power_w(nvml_log)
        energy = {"energy_source": "nvml-log-mean", "power_log": Path(nvml_log).name, "power_log_w": power_w,
                  "power_log_samples": stamps, "power_log_gpus": gpus,
                  "energy_note": "joules are the log's mean board power (summed over its GPUs) times each cell's "
                                 "time: measured power, but one mean for every cell"}
    else:
        power_w = check_number(power_w, "--assume-power-w", TableError, MIN_POWER_W, MAX_POWER_W, unit="W")
        energy = {"energy_source": "assumed", "assumed_power_w": float(power_w)}
    samples = read_samples(paths, fmt)
    return fit_table(samples, key, power_w=power_w, min_samples=min_samples, meta=meta, energy=energy, source=names)
