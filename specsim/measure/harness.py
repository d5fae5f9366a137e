"""The sweep: time and meter every (width, depth) cell, keep each on disk, resume, write the table.

For each width ``n`` and depth ``k`` (docs/measure.md) the harness warms the step up, times ``repeats``
separate calls of it (median, p10, p90, coefficient of variation), then runs it back to back for
at least ``min_window_s`` between two readings of the energy meter and divides. Each end of that
window is aligned on an update of the counter (single steps run until its value changes, for at
most ``align_s``), so a counter that updates every 10-100 ms (NVML) costs at most about one step's
energy of error at each end, not one update period's. Joules are the device's whole draw while
stepping (idle included); the idle power measured before the sweep is in ``[meta]``.

Every finished cell is written to ``OUT.partial.jsonl`` (a header line with the key, grid and
settings, then one line per cell), rewritten atomically, so an interrupted sweep loses at most
the cell it was in; ``resume=True`` continues it, refusing a partial file of another sweep.
"""

from __future__ import annotations

import datetime
import json
import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import numpy as np

from specsim import __version__
from specsim._io import atomic_write_text, decode_text, loads_json, read_input
from specsim.errors import MeasureError
from specsim.measure.backends import box_class_from_name
from specsim.measure.meters import idle_power_w
from specsim.table import SCHEMA, Cell, CostTable, TableKey
from specsim._checks import MAX_DEPTH, MAX_REPEATS, MAX_SECONDS, MAX_WIDTH, few, int_problem, is_finite, number_problem
from specsim._progress import Progress
from specsim._toml import type_name

PARTIAL_FORMAT = 1
# Settings that change what a cell's numbers mean; a resumed sweep must use the same ones.
RESUME_SETTINGS = ("repeats", "warmup", "min_window_s")


@dataclass(frozen=True)
class SweepSettings:
    """How each cell is measured.

    ``min_window_s``: shortest energy window per mode and cell (s); ``repeats``: timed samples
    per mode and cell; ``warmup``: untimed calls first; ``cooldown_s``: pause between cells (s);
    ``idle_s``: length of the idle-power reading before the sweep (s; default ``min_window_s``);
    ``align_s``: longest wait for a counter update at each end of a window (s).
    """

    min_window_s: float = 1.0
    repeats: int = 20
    warmup: int = 3
    cooldown_s: float = 0.0
    idle_s: float = None
    align_s: float = 0.25

    def __post_init__(self):
        problems = [number_problem(self.min_window_s, "min_window_s", 0.0, MAX_SECONDS, low_open=True, unit="s")]
        problems += [number_problem(getattr(self, name), name, 0.0, MAX_SECONDS, unit="s")
                     for name in ("cooldown_s", "align_s")]
        if self.idle_s is not None:
            problems.append(number_problem(self.idle_s, "idle_s", 0.0, MAX_SECONDS, unit="s"))
        problems += [int_problem(self.repeats, "repeats", 1, MAX_REPEATS, "the most samples"),
                     int_problem(self.warmup, "warmup", 0, MAX_REPEATS, "the most warm-up calls")]
        problems = [p for p in problems if p]
        if problems:
            raise MeasureError("the sweep settings are refused", problems)


class SweepRun(NamedTuple):
    """How a sweep runs, beside what it measures.

    ``resume``: continue the sweep kept in the table's partial file instead of refusing to
    overwrite it; ``progress``: show a progress bar; ``log``: a callable(str) that receives
    one-line notes (resumed cells, idle power, a meter's fallback), or None.
    """

    resume: bool = False
    progress: bool = True
    log: object = None


class SweepDevice(NamedTuple):
    """Where a sweep runs and how its energy is read.

    ``backend``: ``numpy`` (CPU) or ``cupy`` (CUDA GPU ``device``); ``meter``: ``auto``,
    ``nvml``, ``rapl`` or ``assumed``; ``assume_power_w``: the power to assume where no meter is
    readable (the table then says ``energy_source = "assumed"``).
    """

    backend: str = "numpy"
    device: int = 0
    meter: str = "auto"
    assume_power_w: float = None


class SweepInterrupted(KeyboardInterrupt):
    """Ctrl-C during a sweep: finished cells are kept in ``partial``; rerun with resume to go on."""

    def __init__(self, done: int, total: int, partial: Path):
        self.done, self.total, self.partial = done, total, Path(partial)
        if self.partial.exists():
            text = (f"interrupted with {done} of {total} cells measured; they are kept in {partial}: "
                    "rerun the same command with --resume to measure the rest")
        else:
            text = "interrupted before the sweep started; nothing was measured or kept"
        super().__init__(text)


def partial_path(out) -> Path:
    """Where the finished cells of a sweep writing ``out`` are kept until it completes."""
    out = Path(out)
    return out.with_name(out.name + ".partial.jsonl")


# -- one cell ----------------------------------------------------------------------------------
def measure_step(backend, meter, step, settings: SweepSettings) -> dict:
    """Time and meter one step function.

    Returns
    -------
    dict
        ``ms`` (median), ``ms_p10``, ``ms_p90``, ``ms_cv``, ``samples``, ``j`` (per step),
        ``window_s``, ``window_steps``, ``window_ms`` (wall ms per step over the window).
    """
    for _ in range(settings.warmup):
        step()
    backend.synchronize()
    samples = backend.time_ms(step, settings.repeats)
    median = float(np.median(samples))
    if not median > 0:
        raise MeasureError(f"the step timed at {median} ms: too short for the clock to see; "
                           "measure a larger recipe or wider steps")
    mean = float(np.mean(samples))
    e0, _, t0 = _until_counter_moves(backend, meter, step, settings.align_s)
    steps, batch = 0, max(1, math.ceil(settings.min_window_s * 1e3 / median))
    while True:
        for _ in range(batch):
            step()
        backend.synchronize()
        steps += batch
        elapsed = time.perf_counter() - t0
        if elapsed >= settings.min_window_s:
            break
        batch = max(1, math.ceil((settings.min_window_s - elapsed) * steps / elapsed))
    e1, tail, t1 = _until_counter_moves(backend, meter, step, settings.align_s)
    window_s = t1 - t0
    steps += tail
    joules = e1 - e0
    if not joules > 0:
        raise MeasureError(
            f"the energy counter did not advance over a {window_s:.3f} s window of {steps} steps "
            f"(read {e0!r} then {e1!r} J): raise --min-window-s"
        )
    return {
        "ms": median,
        "ms_p10": float(np.percentile(samples, 10)),
        "ms_p90": float(np.percentile(samples, 90)),
        "ms_cv": float(np.std(samples) / mean),
        "samples": int(samples.shape[0]),
        "j": joules / steps,
        "window_s": window_s,
        "window_steps": steps,
        "window_ms": window_s * 1e3 / steps,
    }


def _until_counter_moves(backend, meter, step, limit_s):
    """Run single steps until the meter's reading changes (or ``limit_s`` passes).

    Returns the new reading, how many steps ran before it appeared, and when it was read.
    """
    backend.synchronize()
    first = meter.read_j()
    t0, count = time.perf_counter(), 0
    while True:
        value = meter.read_j()
        now = time.perf_counter()
        if value != first or now - t0 > limit_s:
            return value, count, now
        step()
        backend.synchronize()
        count += 1


def measure_cell(workload, backend, meter, n: int, k: int, settings: SweepSettings):
    """The :class:`Cell` at width ``n``, depth ``k`` and its extra fields (spreads, windows)."""
    verify = measure_step(backend, meter, lambda: workload.verify(n, k), settings)
    extras = {f"verify_{f}": v for f, v in verify.items() if f not in ("ms", "j")}
    if k == 0:
        return Cell(n, k, verify["ms"], verify["j"], 0.0, 0.0), extras

    def chain():
        for _ in range(k):
            workload.draft(n)

    draft = measure_step(backend, meter, chain, settings)
    extras |= {f"draft_{f}": v for f, v in draft.items() if f not in ("ms", "j")}
    return Cell(n, k, verify["ms"], verify["j"], draft["ms"], draft["j"]), extras


def _kept_sweep(partial, resume: bool, key, grid: dict, wanted: dict, energy_source: str, log) -> tuple:
    """``(header, done)`` of the sweep kept in ``partial`` to resume (``(None, {})`` when there is
    none); a kept sweep of another key, grid, settings or meter, or one not asked to be resumed,
    is refused."""
    header, done = None, {}
    if partial.exists():
        if not resume:
            raise MeasureError(f"{partial} holds an unfinished sweep: pass --resume to continue it, "
                               "or delete it to start again")
        header, done = read_partial(partial)
        problems = _resume_problems(header, key, grid, wanted, energy_source)
        # Cells outside this grid would be copied into the table and counted as measured.
        widths, max_k = grid["widths"], grid["max_k"]
        cells = {(n, k) for n in widths for k in range(max_k + 1)}
        outside = sorted(c for c in done if c not in cells)
        if outside:
            problems.append(f"{len(outside)} kept cell(s) lie outside widths {widths} and depths 0..{max_k}: "
                            + ", ".join(f"(n={n}, k={k})" for n, k in outside[:5]))
        if problems:
            raise MeasureError(f"{partial}: --resume refused, the kept sweep differs from this one", problems)
        log(f"resuming: {len(done)} of {len(widths) * (max_k + 1)} cells already measured in {partial}")
    elif resume:
        log(f"nothing to resume ({partial} does not exist): starting the sweep")
    return header, done


# -- the sweep ---------------------------------------------------------------------------------
def measure_table(workload, backend, meter, widths, max_k: int, out, *, box_class=None,
                  settings: SweepSettings = SweepSettings(), run: SweepRun = SweepRun(), meta=None) -> CostTable:
    """Measure every cell of ``widths`` x ``0..=max_k`` and write the table to ``out``.

    Parameters
    ----------
    workload : ProxyWorkload or CallableWorkload
    backend : NumpyBackend or CupyBackend
    meter : NvmlMeter, RaplMeter or AssumedPowerMeter
    widths : sequence of int
        Batch widths, each >= 1, distinct.
    max_k : int
        Deepest draft depth (>= 0).
    out : path
        The table file, written atomically once every cell is measured.
    box_class : str, optional
        Default: derived from the device name.
    run : SweepRun
        Whether to resume the sweep kept in ``out``'s partial file (instead of refusing to
        overwrite it), show progress, and where one-line notes go (resumed cells, idle power).
    meta : dict, optional
        Extra ``[meta]`` fields.

    Returns
    -------
    CostTable
        The written table, as parsed back from the file's text.

    Raises
    ------
    MeasureError
        Bad grid, a partial file of another sweep, or a step that cannot be measured.
    SweepInterrupted
        On Ctrl-C; the finished cells stay in the partial file.
    """
    resume, progress, log = run
    log = log or (lambda line: None)
    widths = _check_grid(widths, max_k)
    out = Path(out)
    partial = partial_path(out)
    if box_class is None:
        box_class = box_class_from_name(backend.device_name())
    key = TableKey(SCHEMA, box_class, workload.recipe_id, workload.digests())
    grid = {"widths": widths, "max_k": max_k}
    wanted = {name: getattr(settings, name) for name in RESUME_SETTINGS}
    energy_source = meter.describe()["energy_source"]

    header, done = _kept_sweep(partial, resume, key, grid, wanted, energy_source, log)

    todo = [(n, k) for n in widths for k in range(max_k + 1) if (n, k) not in done]
    total = len(widths) * (max_k + 1)
    saved = len(done)  # cells on disk: a cell interrupted while being written is not one
    try:
        workload.prepare(max(widths), max_k)
        if header is None:
            header = _new_header(key, grid, wanted, backend, meter, settings, meta)
            if energy_source != "assumed":
                idle_s = settings.min_window_s if settings.idle_s is None else settings.idle_s
                if idle_s > 0:
                    backend.synchronize()
                    header["meta"]["idle_power_w"] = idle_power_w(meter, idle_s, settings.align_s)
                    log(f"idle power {header['meta']['idle_power_w']:.1f} W over {idle_s} s")
        header["meta"]["sessions"] = header["meta"].get("sessions", 0) + 1
        _write_partial(partial, header, done)
        with _progress(len(todo), f"bench {workload.recipe_id}", progress) as bar:
            for i, (n, k) in enumerate(todo):
                if i and settings.cooldown_s:
                    time.sleep(settings.cooldown_s)
                done[(n, k)] = measure_cell(workload, backend, meter, n, k, settings)
                _write_partial(partial, header, done)
                saved = len(done)
                bar.update()
    except KeyboardInterrupt:
        raise SweepInterrupted(saved, total, partial) from None
    finally:
        workload.close()

    cells = [done[c][0] for c in sorted(done)]
    extras = {c: done[c][1] for c in sorted(done)}
    text = CostTable.render(key, cells, meta=header["meta"], extras=extras)
    table = CostTable.parse(text, str(out))
    atomic_write_text(out, text)
    partial.unlink()
    return table


def _progress(total, desc, enabled):
    return Progress(total, desc, enabled=enabled, unit="cells")


def _check_grid(widths, max_k):
    problems = []

    widths = list(widths)
    if not widths:
        problems.append("no width given: pass at least one batch width (e.g. --widths 1,2,4)")
    bad = [w for w in widths if int_problem(w, "width", 1, MAX_WIDTH)]
    if bad:
        problems.append(f"width(s) {few(bad)} are not whole numbers in 1..{MAX_WIDTH:,} (docs/limits.md)")
    dup = sorted({w for w in widths if widths.count(w) > 1}) if len(widths) <= 10_000 else []
    if dup:
        problems.append(f"width(s) {few(dup)} are listed twice")
    p = int_problem(max_k, "max_k", 0, MAX_DEPTH, "the deepest draft depth")
    if p:
        problems.append(p)
    if problems:
        raise MeasureError("the sweep's grid is refused", problems)
    return sorted(int(w) for w in widths)


def _key_json(key: TableKey) -> dict:
    return {"schema": key.schema, "box_class": key.box_class, "recipe": key.recipe,
            "plan_digests": dict(key.plan_digests)}


def _new_header(key, grid, wanted, backend, meter, settings, meta):
    info = {"tool": "specsim", "tool_version": __version__,
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")}
    info |= backend.describe() | meter.describe()
    info |= {"repeats": settings.repeats, "warmup": settings.warmup, "min_window_s": settings.min_window_s,
             "cooldown_s": settings.cooldown_s, "joules": "whole-device energy per step, idle included"}
    info |= dict(meta or {})
    return {"specsim_partial": PARTIAL_FORMAT, "key": _key_json(key), "grid": grid, "settings": wanted,
            "meta": info}


def _write_partial(path, header, done):
    lines = [json.dumps(header, sort_keys=True, allow_nan=False)]
    for (n, k), (cell, extras) in sorted(done.items()):
        try:
            lines.append(json.dumps({"cell": cell._asdict(), "extras": extras}, sort_keys=True, allow_nan=False))
        except ValueError:
            # The reader refuses non-finite numbers; a cell holding one was not measured.
            raise MeasureError(f"the cell (n={n}, k={k}) measured a non-finite figure: {cell}, {extras}; "
                               "the clock or the meter misread") from None
    atomic_write_text(path, "\n".join(lines) + "\n")


def read_partial(path):
    """The header and ``{(n, k): (Cell, extras)}`` of a partial sweep file.

    Read with the guards of every side file (binary, UTF-16, deep nesting, huge integers are
    refused naming the line); a header or cell of the wrong shape or type is refused too.
    """
    path = Path(path)
    again = "; delete the file to start again"
    text = decode_text(read_input(path, "the partial sweep", MeasureError), "the partial sweep", path, MeasureError)
    lines = text.splitlines()
    header = loads_json(lines[0], "the header line", f"{path}:1", MeasureError) if lines else None
    if not isinstance(header, dict) or header.get("specsim_partial") != PARTIAL_FORMAT:
        raise MeasureError(f"{path}:1: not a specsim partial sweep of format {PARTIAL_FORMAT}{again}")
    problems = [f"{name} is {_toml_type(header.get(name))}, not an object"
                for name in ("key", "grid", "settings", "meta") if not isinstance(header.get(name), dict)]
    if problems:
        raise MeasureError(f"{path}:1: the header is damaged{again}", problems)
    done = {}
    for lineno, line in enumerate(lines[1:], start=2):
        where = f"{path}:{lineno}"
        row = loads_json(line, "the cell line", where, MeasureError)
        cell, extras = _partial_cell(row, where, again)
        if (cell.n, cell.k) in done:
            raise MeasureError(f"{where}: cell (n={cell.n}, k={cell.k}) appears twice{again}")
        done[(cell.n, cell.k)] = (cell, extras)
    return header, done


def _toml_type(value):
    return "missing" if value is None else f"a {type_name(value)}"


def _partial_cell(row, where, again):
    """One ``{"cell": {...}, "extras": {...}}`` line as ``(Cell, extras)``, every field checked."""
    if not isinstance(row, dict) or not isinstance(row.get("cell"), dict) or not isinstance(row.get("extras"), dict):
        raise MeasureError(f"{where}: not a measured cell (an object with `cell` and `extras` objects){again}")
    raw, fields = row["cell"], Cell._fields
    problems = [f"{f} is missing" for f in fields if f not in raw]
    problems += [f"unknown field {f}" for f in raw if f not in fields]
    if not problems:
        problems += [p for p in (int_problem(raw["n"], "n", 1, MAX_WIDTH), int_problem(raw["k"], "k", 0, MAX_DEPTH))
                     if p]
        problems += [p for f in fields[2:] if (p := number_problem(raw[f], f, 0.0))]
    extras = row["extras"]
    problems += [f"extras {name} = {v!r} is not a finite number" for name, v in extras.items()
                 if not is_finite(v)]
    if problems:
        raise MeasureError(f"{where}: not a measured cell{again}", problems)
    return Cell(int(raw["n"]), int(raw["k"]), *(float(raw[f]) for f in fields[2:])), dict(extras)


def _resume_problems(header, key, grid, wanted, energy_source):
    problems = []
    kept = header.get("key", {})
    mine = _key_json(key)
    for field in ("schema", "box_class", "recipe"):
        if kept.get(field) != mine[field]:
            problems.append(f"key {field}: kept {kept.get(field)!r}, now {mine[field]!r}")
    kd, md = kept.get("plan_digests", {}), mine["plan_digests"]
    kd = kd if isinstance(kd, dict) else {}
    for mode in sorted(set(kd) | set(md)):
        if kd.get(mode) != md.get(mode):
            problems.append(f"plan digest of mode {mode!r}: kept {kd.get(mode)!r}, now {md.get(mode)!r}")
    for field in ("widths", "max_k"):
        if header.get("grid", {}).get(field) != grid[field]:
            problems.append(f"grid {field}: kept {header.get('grid', {}).get(field)!r}, now {grid[field]!r}")
    for field, value in wanted.items():
        if header.get("settings", {}).get(field) != value:
            problems.append(f"setting {field}: kept {header.get('settings', {}).get(field)!r}, now {value!r}")
    kept_source = header.get("meta", {}).get("energy_source")
    if kept_source != energy_source:
        problems.append(f"energy source: kept {kept_source!r}, now {energy_source!r}")
    return problems
