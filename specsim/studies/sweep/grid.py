"""Sweep grids: which traces, tables and calibrations, and which axes to cross (one simulation
per point). The format is documented in docs/formats.md#sweep-grid.

A grid is a TOML file; paths in it are relative to the file's folder::

    [traces]                      # name -> path, or a table with reader options
    conv = { path = "conv.csv", format = "azure2023", limit = 5000 }

    [tables]
    gb10 = "gb10.toml"

    [calibrations]
    gb10 = "gb10-calibration.toml"

    [server]                      # options every point shares (see specsim.sim.ServerOptions)
    idle_w = 60.0
    prefill_ms_per_token = 0.2

    [slo]                         # optional targets for SLO attainment
    ttft_s = 2.0
    tpot_s = 0.15

    [axes]                        # crossed in this order; each is a list of values
    trace = ["conv"]              # default: every trace (likewise table, calibration)
    policy = ["propose", "sequence", "goodput"]
    slack = [0.0, 0.3]
    rate_scale = [1.0, 2.0]       # compress arrivals: 2 = twice the traffic
    max_batch = [4, 8]            # any server option can be an axis
    replicas = [1, 2, 4]          # a fleet of identical replicas behind a router (docs/fleets.md)
    router = ["round_robin", "least_outstanding"]

Every point is named by its axis values (``point_id``); its row is reused on a later run only
when a digest of all its inputs matches (``specsim.studies.sweep.results.point_inputs``).
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
from dataclasses import dataclass, field
from pathlib import Path

from specsim import _toml
from specsim._checks import MAX_GRID_POINTS, int_problem, is_int, is_number, rate_scale_problem, show
from specsim._io import read_input
from specsim.errors import GridError, SimulationError
from specsim.sim.slo import FIELD_NAMES, SLO, slo_problem
from specsim.interop import read_policy
from specsim.sim.options import ServerOptions
from specsim.sim.options import OPTION_ALIASES, option_keywords, option_names
from specsim.sim.fleet import ROUTERS
from specsim.traces import FORMATS

INPUT_AXES = ("trace", "table", "calibration")
# Axes that are neither inputs nor server options.
RUN_AXES = ("policy", "rate_scale", "replicas", "router")
READER_OPTIONS = ("format", "columns", "arrival_unit", "limit", "window", "skip_bad_rows")


@dataclass(frozen=True)
class Grid:
    """A parsed grid: named inputs, shared options, and the axes to cross."""

    source: str
    traces: dict            # name -> (path, reader options dict)
    tables: dict            # name -> path
    calibrations: dict      # name -> path
    server: dict
    slo: SLO
    axes: tuple             # ((axis, (values...)), ...)
    points: list = field(default_factory=list, compare=False)


def point_id(values: dict) -> str:
    """A short, stable id of a point: the hash of its axis values as canonical JSON."""
    text = json.dumps(values, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def load_grid(path) -> Grid:
    """Read and check a grid file; every problem is listed at once."""
    path = Path(path)
    text = read_input(path, "the sweep grid", GridError)
    return parse_grid(text, path.parent, str(path))


def parse_grid(text, folder, source="<grid>") -> Grid:
    """A grid from its TOML ``text`` (paths relative to ``folder``); every problem of every
    section is listed at once, in the sections' order."""
    doc = _toml.loads(text, "the sweep grid", source, GridError)
    folder = Path(folder)
    problems = []
    known = {"traces", "tables", "calibrations", "server", "slo", "axes"}
    for name in doc:
        if name not in known:
            problems.append(f"unknown section [{name}]: the sections are {', '.join(sorted(known))}")
    traces = _inputs(doc, "traces", folder, problems, with_options=True)
    tables = _inputs(doc, "tables", folder, problems)
    calibrations = _inputs(doc, "calibrations", folder, problems)
    server = _server(doc, problems)
    slo = _slo(doc, problems)
    axes = _axes(doc, {"trace": traces, "table": tables, "calibration": calibrations}, server, problems)
    size = math.prod(len(v) for _, v in axes)
    if size > MAX_GRID_POINTS:
        problems.append(f"the axes cross to {size:,} points; a sweep takes at most {MAX_GRID_POINTS:,} "
                        "(docs/limits.md): split it into several grids")
    if problems:
        raise GridError(f"{source}: the sweep grid cannot run", problems)
    grid = Grid(source, traces, tables, calibrations, dict(server), SLO(**slo), tuple(axes))
    object.__setattr__(grid, "points", _points(grid, source))
    return grid


def _inputs(doc, section, folder, problems, with_options=False) -> dict:
    """``[traces]``, ``[tables]`` or ``[calibrations]``: name -> path (traces: ``(path, reader
    options)``); what is wrong goes to ``problems``."""
    raw = doc.get(section, {})
    out = {}
    if not isinstance(raw, dict) or not raw:
        problems.append(f"[{section}] must name at least one input: name = \"path\"")
        return out
    for name, value in raw.items():
        options = {}
        if isinstance(value, dict) and with_options:
            options = {k: v for k, v in value.items() if k != "path"}
            bad = [k for k in options if k not in READER_OPTIONS]
            if bad:
                problems.append(f"[{section}] {name}: unknown option(s) {', '.join(map(show, bad))}; "
                                f"known: path, {', '.join(READER_OPTIONS)}")
            problems.extend(f"[{section}] {name}: {p}" for p in _reader_option_problems(options))
            if isinstance(options.get("window"), list) and len(options["window"]) in (1, 2):
                w = options["window"]
                options["window"] = (w[0], w[1] if len(w) == 2 else None)
            value = value.get("path")
        if not isinstance(value, str):
            problems.append(f"[{section}] {name}: give a path string"
                            + (" or a table with `path`" if with_options else ""))
            continue
        p = Path(value)
        p = p if p.is_absolute() else folder / p
        if not p.is_file():
            problems.append(f"[{section}] {name}: no file at {p}")
        out[name] = (str(p), options) if with_options else str(p)
    return out


def _server_names() -> set:
    """The server options a grid's ``[server]`` and ``[axes]`` may set."""
    return option_names() - {"occupancy"}


def _server(doc, problems) -> dict:
    """``[server]``: the options every point shares."""
    known = _server_names()
    server = doc.get("server", {})
    if not isinstance(server, dict):
        problems.append("[server] must be a table of server options")
        server = {}
    for name in server:
        if name not in known:
            problems.append(f"[server] {name}: not a server option; known: {', '.join(sorted(known))}")
    return server


def _slo(doc, problems) -> dict:
    """``[slo]``: the targets' keyword arguments of :class:`SLO` (empty when wrong or absent)."""
    slo = doc.get("slo", {})
    if not isinstance(slo, dict) or any(k not in ("ttft_s", "tpot_s") for k in slo):
        problems.append("[slo] takes ttft_s and tpot_s (seconds)")
        slo = {}
    problem = slo_problem(slo.get("ttft_s"), slo.get("tpot_s"), None, {k: f"[slo] {k}" for k in FIELD_NAMES})
    if problem:
        problems.append(problem)
        slo = {}
    return slo


def _axes(doc, pools, server, problems) -> list:
    """``[axes]``: ``[(axis, (values...)), ...]`` in crossing order, the inputs first (each
    defaulting to every input of its kind in ``pools``)."""
    known = _server_names()
    raw_axes = doc.get("axes", {})
    if not isinstance(raw_axes, dict):
        problems.append("[axes] must be a table of lists")
        raw_axes = {}
    axes = []
    for name in INPUT_AXES:
        values = raw_axes.get(name, list(pools[name]))
        if not isinstance(values, list) or not values:
            problems.append(f"[axes] {name} must be a non-empty list of names")
            continue
        for v in values:
            if v not in pools[name]:
                problems.append(f"[axes] {name} {v!r} is not defined in [{name}s]")
        axes.append((name, tuple(values)))
    for name, values in raw_axes.items():
        if name in INPUT_AXES:
            continue
        if name not in known | set(RUN_AXES):
            problems.append(f"[axes] {name}: not an axis; axes are trace, table, calibration, {', '.join(RUN_AXES)} "
                            f"and the server options ({', '.join(sorted(known))})")
            continue
        same = {name, OPTION_ALIASES.get(name, name)} | {a for a, o in OPTION_ALIASES.items() if o == name}
        if same & set(server):
            problems.append(f"{name} is both in [server] and in [axes]: keep one")
        if not isinstance(values, list) or not values:
            problems.append(f"[axes] {name} must be a non-empty list")
            continue
        if len({json.dumps(v, sort_keys=True) for v in values}) != len(values):
            problems.append(f"[axes] {name} lists a value twice: each point would be computed twice")
        problems.extend(_run_axis_problems(name, values))
        axes.append((name, tuple(values)))
    if "policy" not in raw_axes:
        problems.append("[axes] policy is missing: list the policies to compare, e.g. [\"propose\", \"sequence\"]")
    return axes


def _run_axis_problems(name, values) -> list:
    """What is wrong with the values of a run axis (policy, replicas, router, rate_scale)."""
    problems = []
    if name == "policy":
        for v in values:
            try:
                read_policy(v)
            except Exception as e:  # the parser's own message says what is wrong
                problems.append(f"[axes] policy {v!r}: {e}")
    if name == "replicas":
        for v in values:
            if not is_int(v) or not 1 <= v <= 1 << 16:
                problems.append(f"[axes] replicas {v!r} must be a whole number of replicas >= 1")
    if name == "router":
        for v in values:
            if v not in ROUTERS:
                problems.append(f"[axes] router {v!r}: use one of {', '.join(ROUTERS)}")
    if name == "rate_scale":
        for v in values:
            problem = rate_scale_problem(v, "rate_scale")
            if problem:
                problems.append(f"[axes] {problem}")
    return problems


def _points(grid: Grid, source) -> list:
    """Every point of the grid's crossed axes, each point's server options checked once here, so
    a bad value fails before any work starts."""
    names = [a for a, _ in grid.axes]
    points = [dict(zip(names, combo)) for combo in itertools.product(*(v for _, v in grid.axes))]
    for p in points:
        try:
            ServerOptions(**point_options(grid, p))
        except SimulationError as e:
            raise GridError(f"{source}: point {json.dumps(p)} has bad server options: {e}") from None
    return points


def _reader_option_problems(options: dict) -> list:
    """What is wrong with a trace's reader options in a grid (types and values)."""
    units = ("s", "ms", "us", "ns", "datetime")
    problems = []
    for name, v in options.items():
        if name == "format" and v not in FORMATS:
            problems.append(f"format = {show(v)} is not one of {', '.join(FORMATS)}")
        elif name == "arrival_unit" and v not in units:
            problems.append(f"arrival_unit = {show(v)} is not one of {', '.join(units)}")
        elif name == "columns" and not (isinstance(v, str) or (
                isinstance(v, dict) and all(isinstance(x, str) for x in v.values()))):
            problems.append(f"columns = {show(v)} must be \"arrival=COL,prompt=COL,output=COL\" or a table of "
                            "column names")
        elif name == "limit" and (p := int_problem(v, "limit")):
            problems.append(p)
        elif name == "skip_bad_rows" and not isinstance(v, bool):
            problems.append(f"skip_bad_rows = {show(v)} must be true or false")
        elif name == "window" and not (isinstance(v, list) and len(v) in (1, 2) and all(is_number(x) for x in v)):
            problems.append(f"window = {show(v)} must be [START_S, END_S] or [START_S] (seconds from the "
                            "trace start)")
    return problems


def point_options(grid: Grid, point: dict) -> dict:
    """The server options of one point, as :class:`ServerOptions` keywords: [server] overridden
    by its option axes."""
    opts = option_keywords(grid.server)
    for name, value in point.items():
        if name not in INPUT_AXES and name not in RUN_AXES:
            opts[OPTION_ALIASES.get(name, name)] = value
    return opts
