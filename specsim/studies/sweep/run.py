"""Running a sweep: one simulation per grid point, on a Dask cluster or serially, with results
kept on disk after every point so that an interrupted sweep resumes where it stopped."""

from __future__ import annotations

import json
import math
import statistics
import sys
import time
from dataclasses import dataclass, field


from specsim._checks import request_size_problem
from specsim._executor import Executor, check_scheduler, check_workers, choose
from specsim._stats import paired_noise
from specsim.errors import GridError, SpecsimError
from specsim.studies.sweep.grid import INPUT_AXES, Grid, point_id, point_options
from specsim.interop import read_policy
from specsim.studies.sweep.results import (
    EDITED, DamagedRow, _changed_parts, check_results_path, damaged_error, file_digest, inputs_digest, point_inputs,
    point_row_problem, read_results, requests_digest, write_results,
)
from specsim._progress import Progress
from specsim.calibration import AcceptanceCalibration
from specsim.frames import rows_frame
from specsim.sim.engine import ENGINE_SEMANTICS, simulate, use_sequence_engine
from specsim.sim.options import ServerOptions
from specsim.sim.fleet import DEFAULT_FLEET_ROUTER, Fleet, simulate_fleet
from specsim.sim.verdict import run_digest
from specsim.table import CostTable
from specsim.traces import read_trace


@dataclass
class SweepReport:
    """What a sweep did: points in the grid, computed now, reused from the results file (their
    inputs unchanged), wall seconds, how many kept points were recomputed because an input
    changed (``stale``), and the rows it left in the file (``rows``, in the file's order: this
    run's and the kept ones, so a caller need not read the file back)."""

    total: int
    computed: int
    skipped: int
    seconds: float
    out: str
    workers: int
    stale: int = 0
    rows: list = field(default_factory=list, repr=False)

    def to_frame(self):
        """Every row of the results file (this run's and earlier ones') as a pandas DataFrame."""
        rows = read_results(self.out)
        return rows_frame(rows, list(rows[0]) if rows else None)


def run_point(point: dict, requests, table, calibration, options: dict, slo, sequence_engine=False) -> dict:
    """Simulate one grid point and return its result row (axis values + summary fields + the
    ``run_digest`` that tells points which made the same run). ``sequence_engine``: some point of
    the sweep runs ``sequence``, so this process runs every point on the engine with the
    per-sequence planner (:func:`specsim.sim.engine.plan_workspace_for`)."""
    if sequence_engine:
        use_sequence_engine()
    scale = float(point.get("rate_scale", 1.0))
    if scale != 1.0:
        # The same division the trace reader applies for --rate-scale, so a point equals a
        # `specsim simulate --rate-scale` run of the same file.
        requests = requests.copy()
        requests["arrival_s"] = requests["arrival_s"] / scale
    if "replicas" in point or "router" in point:
        # A fleet point: identical replicas behind a router (one replica, any router, is the
        # single server). Per-replica rows stay out of the flat row.

        fleet = Fleet.uniform(table, calibration, int(point.get("replicas", 1)), ServerOptions(**options))
        result = simulate_fleet(requests, fleet, point["policy"], router=point.get("router", DEFAULT_FLEET_ROUTER),
                                progress=_no_progress)
        summary = result.summary(slo)
        summary = {k: v for k, v in summary.items() if k not in ("per_replica", "groups")}
        return result_row(point, summary) | {"run_digest": run_digest(result.fleet)}
    # A progress callback makes the engine run in chunks of steps, between which Ctrl-C acts.
    result = simulate(requests, table, calibration, point["policy"], progress=_no_progress, **options)
    summary = result.summary(slo)
    return result_row(point, summary) | {"run_digest": run_digest(result)}


def _no_progress(finished: int) -> None:
    pass


def _labels(grid: Grid, point: dict) -> set:
    """Every label a run of ``point``'s policy may carry: the policy at the point's slack, or a
    ``fixed``/``schedule`` one capped at any depth (a table's ``max_k`` or ``k_max`` lowers it)."""
    pol = read_policy(point["policy"])
    labels = {pol.at_slack(point_options(grid, point).get("slack", ServerOptions.slack))}
    if pol.kind in ("fixed", "schedule"):
        labels.update(str(pol.clamped(k)) for k in range(pol.max_depth + 1))
    return labels


def result_row(point: dict, summary: dict) -> dict:
    """A flat row: ``point_id``, the axis values, then the summary with nested fields joined by
    ``_`` (``ttft_s_p99``) and the depth histogram as JSON."""
    row = {"point_id": point_id(point)}
    row.update(point)
    for key, value in summary.items():
        if key in row:
            continue
        if key == "depth_histogram":
            row[key] = json.dumps(value, sort_keys=True)
        elif isinstance(value, dict):
            for sub, v in value.items():
                row[f"{key}_{sub}"] = v
        else:
            row[key] = value
    return row


# -- the sweep --------------------------------------------------------------------------------------

def _load_inputs(grid: Grid, points):
    used = {a: {p[a] for p in points} for a in INPUT_AXES}

    def load(section, name, read, *args, **kwargs):
        # The grid's file and entry lead the reader's own message, so the user knows which.
        try:
            return read(*args, **kwargs)
        except SpecsimError as e:
            raise GridError(f"{grid.source}: [{section}] {name}: {e.headline}", e.problems) from None

    traces = {}
    for name in sorted(used["trace"]):
        path, options = grid.traces[name]
        traces[name] = load("traces", name, read_trace, path, **options).requests
        too_big = request_size_problem(traces[name]["prompt_tokens"], traces[name]["output_tokens"])
        if too_big:
            raise GridError(f"{grid.source}: [traces] {name}: {path}: {too_big}")
    tables = {name: load("tables", name, CostTable.load, grid.tables[name]) for name in sorted(used["table"])}
    cals = {name: load("calibrations", name, AcceptanceCalibration.load, grid.calibrations[name])
            for name in sorted(used["calibration"])}
    return traces, tables, cals


def _points_to_run(grid: Grid, read, traces, tables, cals, out) -> tuple:
    """``(inputs, kept, todo, n_stale, stale)``: every point's inputs (:func:`point_inputs`), the rows
    kept in the results file ``read`` by point id, the points to compute (their row is missing or
    was computed from other inputs), how many rows are stale and which inputs changed under them.
    A kept row that was edited since it was written is refused, all such rows named at once."""
    digests = {("trace", name): requests_digest(r) for name, r in traces.items()}
    digests.update({("table", name): file_digest(grid.tables[name]) for name in tables})
    digests.update({("calibration", name): file_digest(grid.calibrations[name]) for name in cals})
    inputs = {point_id(p): point_inputs(grid, p, digests) for p in grid.points}
    kept = {r["point_id"]: r for r in read}
    todo, stale, n_stale, edited = [], {}, 0, []
    for p in grid.points:
        pid = point_id(p)
        row = kept.get(pid)
        if row is not None and row.get("inputs_digest") == inputs_digest(inputs[pid]):
            problem = point_row_problem(row, p, _labels(grid, p))
            if problem:
                edited.append(DamagedRow(f"the row of point {pid}", EDITED, problem))
            continue
        todo.append(p)
        if row is not None:
            n_stale += 1
            for part in _changed_parts(row, inputs[pid]):
                stale[part] = stale.get(part, 0) + 1
    if edited:
        raise damaged_error(out, edited)
    return inputs, kept, todo, n_stale, stale


def run_sweep(grid: Grid, out, *, scheduler=None, workers=None, serial=False, progress=True) -> SweepReport:
    """Run every point of ``grid`` whose row in ``out`` is missing or was computed from other
    inputs (:func:`point_inputs`); rows are saved after each point.

    Parameters
    ----------
    grid : Grid
    out : path
        Results file (``.csv``, or ``.parquet`` with pyarrow). Points kept in it with the same inputs are reused.
    scheduler : str, optional
        Address of a running Dask scheduler (``tcp://host:port``); default a local cluster.
    workers : int, optional
        Worker processes of the local cluster (default: the CPU count).
    serial : bool
        Run in this process without Dask.
    """
    start = time.monotonic()
    if scheduler is not None:
        check_scheduler(scheduler)
    if workers is not None:
        check_workers(workers)
    read = check_results_path(out)  # the one read of the file, before any work
    traces, tables, cals = _load_inputs(grid, grid.points)
    # The points of every policy run one compiled engine in each process (run_point).
    sequence_engine = use_sequence_engine(read_policy(p) for p in {point["policy"] for point in grid.points})
    inputs, kept, todo, n_stale, stale = _points_to_run(grid, read, traces, tables, cals, out)
    skipped = len(grid.points) - len(todo)
    note = resume_note(len(grid.points), skipped, n_stale, stale, out)
    if note:
        print(f"specsim sweep: {note}", file=sys.stderr)
    columns = list(next(iter(kept.values())).keys()) if kept else None
    rows = dict(kept)
    order = {point_id(p): i for i, p in enumerate(grid.points)}

    def ordered():
        return sorted(rows.values(), key=lambda r: order.get(r["point_id"], len(order)))

    def save(row):
        nonlocal columns
        pid = row["point_id"]
        row = {"point_id": pid, "inputs_digest": inputs_digest(inputs[pid]),
               **{k: v for k, v in row.items() if k != "point_id"},
               "inputs": json.dumps(inputs[pid], sort_keys=True)}
        rows[pid] = row
        if columns is None:
            columns = list(row.keys())
        else:
            columns += [c for c in row if c not in columns]
        write_results(out, ordered(), columns)

    n_workers = 1
    if todo:
        bar = Progress(len(todo), "sweep", enabled=progress, unit="points")
        try:
            if serial:
                ex = Executor("serial")
            else:
                ex = choose("auto", workers, scheduler, what="specsim sweep")
            with ex:
                n_workers = ex.workers
                # Inputs travel once per worker, not once per point.
                share = {kind: {name: ex.share(v) for name, v in pool.items()}
                         for kind, pool in (("trace", traces), ("table", tables), ("calibration", cals))}
                calls = [(p, share["trace"][p["trace"]], share["table"][p["table"]],
                          share["calibration"][p["calibration"]], point_options(grid, p), grid.slo, sequence_engine) for p in todo]

                def saved(i, row):
                    save(row)
                    bar.update()

                ex.map(run_point, calls, on_result=saved, keys=[f"specsim-point-{point_id(p)}" for p in todo])
        except KeyboardInterrupt:
            bar.close()
            kept = len(rows) - skipped
            print(f"specsim sweep: interrupted; {kept} new point(s) kept in {out}; run the same command again "
                  "to compute the rest", file=sys.stderr)
            raise
        bar.close()
    # The rows now in the file: as written after the last point, or as read when none was computed.
    return SweepReport(len(grid.points), len(todo), skipped, time.monotonic() - start, str(out), n_workers,
                       n_stale, ordered() if todo else read)


# What each input part is called in a resume's note.
PART_NAMES = {"trace": "trace content", "table": "table file", "calibration": "calibration file",
              "server": "server options", "run": "policy/traffic/fleet axes", "slo": "SLO",
              "engine": "engine semantics version", "unrecorded": "inputs not recorded (an older results file)",
              "digest": "inputs digest"}


def resume_note(total: int, reused: int, n_stale: int, stale: dict, out) -> str:
    """One line on what a resumed sweep reused and why, and which kept points it recomputes
    because an input changed (``stale``: input part -> points where it differs)."""
    if not reused and not stale:
        return ""
    parts = []
    if reused:
        parts.append(f"reusing {reused} of {total} points kept in {out}: their trace content, table and calibration "
                     f"files, server options, policy/traffic/fleet axes (seed included), SLO and engine semantics "
                     f"version ({ENGINE_SEMANTICS}) have the digests recorded with them")
    if stale:
        why = ", ".join(f"{PART_NAMES.get(k, k)} at {v}" for k, v in sorted(stale.items(), key=lambda kv: -kv[1]))
        parts.append(f"recomputing {n_stale} kept point(s) whose inputs changed: {why}")
    return "; ".join(parts) + f"; computing {total - reused} point(s)"


# What the closing summary ranks, per traffic level: (column, how it reads, lower is better).
OBJECTIVES = (("j_per_token", "least J/token", True), ("tokens_per_s", "most tokens/s", False))
# Axes that set the traffic a point serves; the others (but seed) name a candidate.
TRAFFIC_AXES = ("trace", "rate_scale")


def best_by_traffic(grid: Grid, rows) -> list:
    """The closing summary of a sweep: per traffic level (trace and rate scale) and objective,
    the best candidate (the other axes' values, seeds averaged out), as lines of text.

    The best is told apart from the runner-up only when their difference clears the noise: with a
    ``seed`` axis of two or more values, the differences are paired by seed (both candidates met
    the same draft outcomes under one seed, so most of the noise cancels), and the lead counts when
    the mean difference exceeds its 95% interval's half-width (Student t over those seeds), else the
    line says "tie within noise". Without a seed axis nothing measures the noise, and the line says
    so. A candidate that made the same runs as the best (the same ``run_digest`` under every seed)
    is named equal to it rather than ranked.
    """
    names = [a for a, _ in grid.axes]
    traffic = [a for a in names if a in TRAFFIC_AXES and len(dict(grid.axes)[a]) > 1]
    cand_axes = [a for a in names if a not in TRAFFIC_AXES and a != "seed"
                 and (a == "policy" or len(dict(grid.axes)[a]) > 1)]
    seeds = len(dict(grid.axes).get("seed", ())) if "seed" in names else 1
    ids = {point_id(p) for p in grid.points}
    groups = {}
    for r in rows:
        if r.get("point_id") not in ids:
            continue
        level = tuple((a, r[a]) for a in traffic)
        cand = " ".join(str(r[a]) if a == "policy" else f"{a}={r[a]}" for a in cand_axes) or "the grid's point"
        groups.setdefault(level, {}).setdefault(cand, []).append(r)
    lines = []
    for level, cands in groups.items():
        where = ", ".join(f"{a} {v}" for a, v in level) or "all points"
        parts = []
        for col, label, lower in OBJECTIVES:
            scored = []
            for cand, rs in cands.items():
                by_seed = {}  # the figure under each seed (a damaged cell is left out)
                for r in rs:
                    v = _finite_or_none(r.get(col))
                    if v is not None:
                        by_seed[r.get("seed")] = v
                if by_seed:
                    runs = frozenset(str(r.get("run_digest")) for r in rs if r.get("run_digest"))
                    scored.append((statistics.fmean(by_seed.values()), cand, by_seed, runs))
            if not scored:
                continue
            scored.sort(key=lambda s: s[0] if lower else -s[0])
            mean, cand, best_seeds, best_runs = scored[0]
            text = f"{label}: {cand} ({mean:.5g})"
            same = [c for _, c, _, runs in scored[1:] if best_runs and runs == best_runs]
            if same:
                text += f" = {', '.join(same)} (the same runs)"
            rest = [s for s in scored[1:] if s[1] not in same]
            if rest:
                text += _lead(mean, rest[0], best_seeds, seeds)
            parts.append(text)
        if parts:
            lines.append(f"  {where}: " + "; ".join(parts))
    if not lines:
        return []
    head = f"best per traffic level (mean over {seeds} seeds):" if seeds > 1 else "best per traffic level:"
    return [head] + lines


def _lead(mean, runner_up, best_seeds, seeds) -> str:
    """How the best candidate stands against the runner-up: ahead, or a tie within the paired
    seed noise, or ahead with the noise not measured (one seed)."""
    other, cand, other_seeds, _ = runner_up
    common = [s for s in best_seeds if s in other_seeds]
    if seeds < 2 or len(common) < 2:
        return f", ahead of {cand} ({other:.5g}); one seed, so the noise is not measured (add a seed axis)"
    diff, half = paired_noise([best_seeds[s] - other_seeds[s] for s in common])
    noise = f"paired over {len(common)} seeds: {diff:+.2g} ± {half:.2g}, 95%"
    if abs(diff) > half:
        return f", ahead of {cand} ({other:.5g}; {noise})"
    return f", tie within noise with {cand} ({other:.5g}; {noise})"


def _finite_or_none(value):
    """A results cell as a finite float, or None (empty, not a number, infinite): a damaged row
    is refused by the readers that need it, not here."""
    try:
        v = float(value)
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) else None
