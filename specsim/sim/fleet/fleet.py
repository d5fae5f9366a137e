"""Fleets: replicas of the serving engine behind a router, simulated together in time order
(see docs/fleets.md).

A :class:`Fleet` is one or more replica groups, each with its own cost table, calibration and
server options (``4 x H200 + 2 x B200``); :func:`load_fleet` reads one from a TOML file and
:meth:`Fleet.uniform` makes ``R`` identical replicas. :func:`simulate_fleet` routes every request
of a trace on arrival (``round_robin``, ``least_outstanding``, ``least_kv``) and advances all
replicas in one kernel call, so routers decide on live state. Each replica is exactly the
single-server engine fed the requests routed to it (its draft outcomes are keyed by the
request's place in the replica's own stream), so a fleet result can be checked replica by
replica against :func:`specsim.simulate`.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from specsim._checks import NO_CAP, callback_problem, int_problem, name_problem
from specsim.errors import PolicyError, SimulationError, SpecsimError
from specsim.interop import read_policy
from specsim.sim.fleet._kernels import ROUTER_CODES, Group
from specsim import _toml
from specsim._io import read_input
from specsim.calibration import AcceptanceCalibration
from specsim.sim.bundles import ReplicaState, Requests, STATE_DT, StepLog
from specsim.sim.engine import PROGRESS_CHUNK, collect, prepare, request_columns
from specsim.sim.fleet import _kernels as fk
from specsim.sim.fleet.result import FleetResult, merge_replicas
from specsim.sim.options import ServerOptions, check_option_names, option_keywords, option_names
from specsim.table import CostTable

ROUTERS = tuple(ROUTER_CODES)
# The router a fleet uses when neither the call nor the fleet file names one.
DEFAULT_FLEET_ROUTER = "round_robin"
GROUP_FIELDS = ("name", "count", "table", "calibration", "gpus_per_replica", "box_class", "recipe", "server")
TOP_FIELDS = ("router", "group")
# Most replicas one fleet may have: state is sized per replica.
MAX_REPLICAS = 1 << 16


class FleetError(SimulationError):
    """A fleet (file or arguments) that cannot run."""


@dataclass(frozen=True, eq=False)
class ReplicaGroup:
    """``count`` identical replicas: one cost table, one calibration, one set of server options.

    Attributes
    ----------
    name : str
    count : int
        Replicas in the group (>= 1).
    table : CostTable
    calibration : AcceptanceCalibration
    options : ServerOptions
        The group's server options; a run's slack replaces the slack in them.
    gpus_per_replica : int or None
        GPUs one replica occupies; GPU-hours count them. None (the default): the table's
        tensor parallelism (its ``[meta]`` ``tp``; 1 when the table names none), see
        :func:`table_gpus`.
    paths : dict or None
        ``{"table": path, "calibration": path}`` when read from a fleet file.
    """

    name: str
    count: int
    table: object
    calibration: object
    options: object = None
    gpus_per_replica: int = None
    paths: dict = None

    def __post_init__(self):
        if self.options is None:
            object.__setattr__(self, "options", ServerOptions())
        if not isinstance(self.options, ServerOptions):
            raise FleetError(f"group {self.name!r}: options must be a ServerOptions, got {type(self.options).__name__}")

        for name, cls in (("table", CostTable), ("calibration", AcceptanceCalibration)):
            if not isinstance(getattr(self, name), cls):
                raise FleetError(f"group {self.name!r}: {name} must be a {cls.__name__}, got "
                                 f"{type(getattr(self, name)).__name__}")
        if self.gpus_per_replica is None:
            object.__setattr__(self, "gpus_per_replica", table_gpus(self.table, f"group {self.name!r}"))
        for name in ("count", "gpus_per_replica"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or not 1 <= v <= MAX_REPLICAS:
                raise FleetError(f"group {self.name!r}: {name} must be an integer in 1..{MAX_REPLICAS}, got {v!r}")
            object.__setattr__(self, name, int(v))


@dataclass(frozen=True, eq=False)
class Fleet:
    """Replica groups, in order: replicas are numbered group by group.

    Attributes
    ----------
    groups : tuple of ReplicaGroup
    router : str or None
        The router the fleet file names (a run may override it).
    source : str
        Where it came from (a file path, or a description).
    """

    groups: tuple
    router: str = None
    source: str = "<fleet>"

    def __post_init__(self):
        object.__setattr__(self, "groups", tuple(self.groups))
        if not self.groups:
            raise FleetError(f"{self.source}: a fleet needs at least one replica group")
        if self.replicas > MAX_REPLICAS:
            raise FleetError(f"{self.source}: {self.replicas} replicas; at most {MAX_REPLICAS}")
        if self.router is not None:
            check_router(self.router)

    @classmethod
    def uniform(cls, table, calibration, replicas: int, options=None, gpus_per_replica: int = None) -> "Fleet":
        """``replicas`` identical replicas of one table, calibration and option set; each occupies
        ``gpus_per_replica`` GPUs (None: the table's tensor parallelism, :func:`table_gpus`)."""
        return cls((ReplicaGroup("replica", replicas, table, calibration, options, gpus_per_replica),),
                   source=f"{replicas} x replica")

    @property
    def replicas(self) -> int:
        return sum(g.count for g in self.groups)

    @property
    def gpus(self) -> int:
        return sum(g.count * g.gpus_per_replica for g in self.groups)

    def scaled(self, copies: int) -> "Fleet":
        """The fleet with every group's count multiplied by ``copies``."""
        return Fleet(tuple(replace(g, count=g.count * copies) for g in self.groups), self.router,
                     f"{copies} x ({self.source})")

    def with_options(self, **changes) -> "Fleet":
        """The fleet with ``changes`` applied to every group's server options (e.g. ``slack``)."""
        check_option_names(changes, FleetError)
        return Fleet(tuple(replace(g, options=replace(g.options, **changes)) for g in self.groups), self.router,
                     self.source)

    def describe(self) -> list:
        """JSON-ready description of the groups."""
        return [{"name": g.name, "count": g.count, "gpus_per_replica": g.gpus_per_replica,
                 "box_class": g.table.key.box_class, "recipe": g.table.key.recipe} for g in self.groups]


def table_gpus(table, where: str = "") -> int:
    """GPUs one replica serving ``table`` occupies: its ``[meta]`` ``tp`` (the tensor-parallel
    size a modelled table records, and a measured one may), 1 when it names none."""
    tp = table.meta.get("tp", 1)
    if int_problem(tp, "tp", 1, MAX_REPLICAS):
        raise FleetError(f"{where + ': ' if where else ''}table {table.source}: [meta] tp = {_toml.show(tp)} is not "
                         f"a GPU count (a whole number in 1..{MAX_REPLICAS:,}); fix the table or give the GPUs per "
                         "replica (gpus_per_replica in a fleet file, --gpus-per-replica on the command line)")
    return int(tp)


def check_router(router) -> str:
    if router not in ROUTERS:
        raise FleetError(f"unknown router {router!r}: use one of {', '.join(ROUTERS)}")
    return router


# -- fleet files ----------------------------------------------------------------------------------

def load_fleet(path, base_options=None) -> Fleet:
    """Read and check a fleet file (see docs/fleets.md); every problem is listed at once.

    ``base_options`` (a dict of server options) applies to every group; a group's ``[group.server]``
    overrides it field by field.
    """
    path = Path(path)
    text = read_input(path, "the fleet file", FleetError)
    return parse_fleet(text, path.parent, str(path), base_options)


def parse_fleet(text, folder, source="<fleet>", base_options=None) -> Fleet:
    """Parse fleet-file text; paths are relative to ``folder``."""
    doc = _toml.loads(text, "the fleet file", source, FleetError)
    problems = []
    for name in doc:
        if name not in TOP_FIELDS:
            problems.append(f"unknown field `{name}`: a fleet file has {', '.join(TOP_FIELDS)} ([[group]] tables)")
    router = doc.get("router")
    if router is not None and router not in ROUTERS:
        problems.append(f"router = {router!r}: use one of {', '.join(ROUTERS)}")
    raw = doc.get("group")
    if not isinstance(raw, list) or not raw or not all(isinstance(g, dict) for g in raw):
        problems.append("no [[group]] tables: list at least one replica group (count, table, calibration)")
        raw = []
    groups = []
    seen = set()
    for i, g in enumerate(raw):
        where = f"[[group]] {i + 1}" + (f" ({g['name']!r})" if isinstance(g.get("name"), str) else "")
        group = _parse_group(g, i, where, Path(folder), base_options or {}, problems)
        if group is not None:
            if group.name in seen:
                problems.append(f"{where}: name {group.name!r} is used twice; give each group its own name")
            seen.add(group.name)
            groups.append(group)
    if not problems:
        problems.extend(_drafter_problems(groups))
    if problems:
        raise FleetError(f"{source}: the fleet file cannot be used", problems)
    return Fleet(tuple(groups), router, source)


def _parse_group(g, i, where, folder, base_options, problems):
    start = len(problems)
    for name in g:
        if name not in GROUP_FIELDS:
            problems.append(f"{where}: unknown field `{name}`; a group has {', '.join(GROUP_FIELDS)}")
    name = g.get("name", f"group{i + 1}")
    problem = name_problem(name, "name")
    if problem:
        problems.append(f"{where}: {problem}")
    count = g.get("count")
    if count is None:
        problems.append(f"{where}: count is missing (replicas in the group, >= 1)")
    elif isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= MAX_REPLICAS:
        problems.append(f"{where}: count = {count!r}: a group needs 1..{MAX_REPLICAS} replicas "
                        "(leave a group out rather than give it zero)")
    gpus = g.get("gpus_per_replica")
    if gpus is not None and (isinstance(gpus, bool) or not isinstance(gpus, int) or not 1 <= gpus <= MAX_REPLICAS):
        problems.append(f"{where}: gpus_per_replica = {_toml.show(gpus)} must be a whole number in 1..{MAX_REPLICAS:,} "
                        "(default: the table's [meta] tp)")
    paths = {}
    for key in ("table", "calibration"):
        value = g.get(key)
        if not isinstance(value, str) or not value:
            problems.append(f"{where}: {key} must be a path (relative to the fleet file)")
            continue
        p = Path(value)
        p = p if p.is_absolute() else folder / p
        if not p.is_file():
            problems.append(f"{where}: {key} = {value!r}: no file at {p}")
        paths[key] = p
    server = g.get("server", {})
    known = option_names() - {"occupancy", "slack"}
    if not isinstance(server, dict):
        problems.append(f"{where}: server must be a table of server options")
        server = {}
    for key in server:
        if key not in known:
            problems.append(f"{where}: server.{key} is not a server option; known: {', '.join(sorted(known))}")
    if len(problems) > start:
        return None
    try:
        opts = ServerOptions(**(dict(base_options) | option_keywords(server)))
    except SimulationError as e:
        problems.append(f"{where}: server options: {e}")
        return None
    try:
        table = CostTable.load(paths["table"])
        cal = AcceptanceCalibration.load(paths["calibration"])
    except SpecsimError as e:  # names the file and the broken rule
        problems.append(f"{where}: {e}")
        return None
    for key in ("box_class", "recipe"):
        want = g.get(key)
        if want is not None and want != getattr(table.key, key):
            problems.append(f"{where}: {key} = {want!r}, but table {paths['table']} was measured under "
                            f"{key} {getattr(table.key, key)!r}")
    if gpus is None:
        try:
            gpus = table_gpus(table)
        except FleetError as e:
            problems.append(f"{where}: {e}")
    if len(problems) > start:
        return None
    return ReplicaGroup(name, count, table, cal, opts, gpus, {k: str(v) for k, v in paths.items()})


def _drafter_problems(groups) -> list:
    """A fleet serves one model with one drafter: every group's calibration must be fitted on
    the same drafter (the policies compare depths of the same drafts)."""
    first = groups[0] if groups else None
    out = []
    for g in groups[1:]:
        for f in ("weights_sha256", "vocab", "quantization", "context"):
            a, b = getattr(first.calibration.drafter, f), getattr(g.calibration.drafter, f)
            if a != b:
                out.append(f"group {g.name!r}: calibration {g.paths['calibration']}: drafter {f} {b!r} differs from "
                           f"group {first.name!r}'s {a!r} ({first.paths['calibration']}); a fleet serves one "
                           "drafter: fit every group's calibration on the same drafter")
    return out


# -- the run ---------------------------------------------------------------------------------------

def _group(group, requests, policy, replicas, named: bool):
    """The engine bundles of one group (as :func:`specsim.simulate` prepares them: the same
    checks of the policy, the options and the requests' KV needs), and the group's policy and
    resolved options. A policy one group cannot run names the group where ``named`` (a fleet of
    several groups: a tree policy, say, on a group whose calibration has no ``[tree]`` table)."""
    try:
        p = prepare(requests, group.table, group.calibration, policy, group.options)
    except PolicyError as e:
        if not named:
            raise
        raise PolicyError(f"group {group.name!r}: {e.headline}", e.problems) from None
    return Group(p.tab, p.cal, p.srv, p.ws, p.plan, min(int(group.options.log_size), replica_log_size(replicas)),
                 p.tree), p


def _one_table_type(groups: tuple) -> tuple:
    """``groups`` with one type of table bundle, so their tuple is indexable in the fleet
    kernel: where one group prices contexts and another does not (its context axis None, which
    compiles none of that pricing), the other holds an empty axis instead (priced without
    contexts at run time)."""
    if all(g.tab.contexts is None for g in groups) or all(g.tab.contexts is not None for g in groups):
        return groups
    out = []
    for g in groups:
        if g.tab.contexts is None:
            wcs = g.tab.wcs
            g = g._replace(tab=g.tab._replace(contexts=np.zeros(0, np.int64), cwcs=np.zeros((0,) + wcs.shape)))
        out.append(g)
    return tuple(out)


# Step-log entries all replicas of a fleet hold together (six 8-byte arrays: 192 MiB): a
# replica's log is cut to its share, so the memory follows the fleet's size up to its limit
# (65,536 replicas keep 64 entries each), rather than 4,096 entries times every replica.
FLEET_LOG_ENTRIES = 1 << 22


def replica_log_size(replicas: int) -> int:
    """Most step-log entries one replica of a fleet of ``replicas`` keeps (its log is
    downsampled to fit, as a single server's is)."""
    return max(64, FLEET_LOG_ENTRIES // max(int(replicas), 1))


def _fleet_state(n_req, n_rep, rows, seqs, max_k, log_size, old=None):
    """The one place the fleet kernel's buffers are sized (see ``FleetState``); with ``old``, a
    copy of it with ``rows`` request rows per replica (more than its own)."""
    leaves = 1 << max(n_rep - 1, 0).bit_length()

    def grid(dtype, width, fill=0):
        return np.full((n_rep, width), fill, dtype=dtype)

    st = fk.FleetState(
        arrival_s=grid(np.float64, rows), prompt=grid(np.int64, rows), output=grid(np.int64, rows),
        emitted=grid(np.int64, rows), prefilled=grid(np.int64, rows), target=grid(np.int64, rows),
        blocks=grid(np.int64, rows), first_s=grid(np.float64, rows, np.nan), finish_s=grid(np.float64, rows, np.nan),
        sched_s=grid(np.float64, rows, np.nan), decode_iters=grid(np.int64, rows), request=grid(np.int64, rows, -1), routed=np.zeros(n_rep, np.int64),
        rec=np.zeros(n_rep, dtype=STATE_DT), running=grid(np.int64, seqs), queue=grid(np.int64, rows),
        depth_hist=grid(np.int64, max_k + 1), log_t_s=grid(np.float64, log_size), log_width=grid(np.int64, log_size),
        log_depth=grid(np.float64, log_size), log_tokens=grid(np.int64, log_size),
        log_kv_blocks=grid(np.int64, log_size), log_prefill_tokens=grid(np.int64, log_size),
        assignment=np.full(n_req, -1, dtype=np.int64), cursor=np.zeros(fk.N_CURSOR, dtype=np.int64),
        tree_t=np.full(2 * leaves, np.inf), tree_r=np.zeros(2 * leaves, dtype=np.int64),
    )
    if old is None:
        st.rec["log_stride"] = 1
        st.cursor[fk.C_LAST] = -1
        st.tree_r[leaves:leaves + n_rep] = np.arange(n_rep)
        return st
    width = old.arrival_s.shape[1]
    for name in ("arrival_s", "prompt", "output", "emitted", "prefilled", "target", "blocks", "first_s", "finish_s",
                 "sched_s", "decode_iters", "request"):
        getattr(st, name)[:, :width] = getattr(old, name)
    for name in ("routed", "rec", "running", "depth_hist", "log_t_s", "log_width", "log_depth", "log_tokens",
                 "log_kv_blocks", "log_prefill_tokens", "assignment", "cursor", "tree_t", "tree_r"):
        getattr(st, name)[...] = getattr(old, name)
    # Each waiting queue is a ring over its row: lay it out again from the start of the wider row.
    for r in range(n_rep):
        head, n = int(old.rec[r]["q_head"]), int(old.rec[r]["q_len"])
        st.queue[r, :n] = old.queue[r, (head + np.arange(n)) % width]
        st.rec[r]["q_head"] = 0
    return st


def simulate_fleet(requests, fleet, policy, *, router=None, progress=None) -> "FleetResult":
    """Simulate serving ``requests`` on a fleet with one draft-depth policy.

    Parameters
    ----------
    requests : ndarray(REQUEST_DT, ndim=1) or TraceRead
        Sorted by arrival.
    fleet : Fleet
        :meth:`Fleet.uniform` for ``R`` identical replicas, or :func:`load_fleet`.
    policy : str or Policy
    router : str, optional
        ``round_robin``, ``least_outstanding`` or ``least_kv``; default the fleet's own, else
        ``round_robin``.
    progress : callable, optional
        Called as ``progress(routed_requests)`` between chunks of steps.

    Returns
    -------
    FleetResult

    Notes
    -----
    Safe to call from several threads at once: each call builds its own state and scratch, and
    the fleet, tables and calibrations are only read. Draft outcomes come from the calibrations
    (replaying a logged acceptance trace is a single-server feature).
    """
    if not isinstance(fleet, Fleet):
        raise FleetError(f"fleet must be a Fleet (Fleet.uniform(...) or load_fleet(...)), got {type(fleet).__name__}")
    router = check_router(router or fleet.router or DEFAULT_FLEET_ROUTER)
    problem = callback_problem(progress, "progress", "progress(routed_requests)")
    if problem:
        raise FleetError(problem)
    policy = read_policy(policy)  # the one reading of a policy typed as text
    arrival, prompt, output = request_columns(requests)
    n_req, n_rep = arrival.shape[0], fleet.replicas
    built = [_group(g, requests, policy, n_rep, len(fleet.groups) > 1) for g in fleet.groups]
    groups = _one_table_type(tuple(b[0] for b in built))
    group_of = np.repeat(np.arange(len(fleet.groups)), [g.count for g in fleet.groups]).astype(np.int64)
    kv_tokens = np.array([_kv_tokens(built[g][1].srv) for g in group_of], dtype=np.int64)
    block_size = np.array([int(built[g][1].srv.rec[0]["block_size"]) for g in group_of], dtype=np.int64)
    seqs = max(g.ws.take.shape[0] for g in groups)
    max_k = max(g.table.max_k for g in fleet.groups)
    log_size = max(g.log_size for g in groups)
    st = _fleet_state(n_req, n_rep, max(16, -(-n_req // n_rep) + 16), seqs, max_k, log_size)
    # Chunks whether or not progress is asked for: Ctrl-C is acted on between kernel calls.
    limit = PROGRESS_CHUNK
    code = ROUTER_CODES[router]
    while True:
        status = fk.fleet_nb(arrival, prompt, output, code, groups, group_of, kv_tokens, block_size, st, limit)
        if status == fk.GROW:
            rows = min(2 * st.arrival_s.shape[1], max(n_req, 1))
            st = _fleet_state(n_req, n_rep, rows, seqs, max_k, log_size, old=st)
            continue
        if progress is not None:
            progress(int(st.cursor[fk.C_NEXT]))
        if status == fk.DONE:
            break
    return _collect(fleet, router, built, st, arrival, prompt, output)


def _kv_tokens(srv) -> int:
    """A replica's KV capacity in tokens (unlimited: ``least_kv`` then sends each request where
    the fewest KV tokens are in use)."""
    blocks = int(srv.rec[0]["kv_blocks"])
    return NO_CAP if blocks >= NO_CAP else blocks * int(srv.rec[0]["block_size"])


def _replica_result(st, r, prepared):
    """Replica ``r``'s SimResult, exactly as the engine reports a single server's run."""
    c = int(st.routed[r])
    k = prepared.tab.costs.shape[1]
    req = Requests(*(getattr(st, f)[r, :c].copy() for f in ("arrival_s", "prompt", "output", "emitted", "prefilled",
                                                             "target", "blocks", "first_s", "finish_s", "sched_s",
                                                             "decode_iters")))
    rs = ReplicaState(st.rec[r:r + 1].copy(), st.running[r].copy(), st.queue[r].copy(), st.depth_hist[r, :k].copy())
    n = min(prepared.log.t_s.shape[0], st.log_t_s.shape[1])
    log = StepLog(*(getattr(st, f)[r, :n].copy() for f in ("log_t_s", "log_width", "log_depth", "log_tokens",
                                                             "log_kv_blocks", "log_prefill_tokens")))
    return collect(prepared._replace(req=req, st=rs, log=log))


def _collect(fleet, router, built, st, arrival, prompt, output) -> "FleetResult":
    replicas, group_names, idle_w, gpus = [], [], [], []
    r = 0
    for g, (_, prepared) in zip(fleet.groups, built):
        for _ in range(g.count):
            replicas.append(_replica_result(st, r, prepared))
            group_names.append(g.name)
            idle_w.append(float(prepared.options.idle_w))
            gpus.append(g.gpus_per_replica)
            r += 1
    merged, standby_j, standby_s = merge_replicas(router, fleet, built, replicas, idle_w, st, arrival, prompt,
                                                  output)
    return FleetResult(merged, tuple(replicas), tuple(group_names), tuple(gpus), st.assignment.copy(), router,
                       fleet.describe(), tuple(standby_j), tuple(standby_s))


__all__ = ["DEFAULT_FLEET_ROUTER", "ROUTERS", "Fleet", "FleetError", "ReplicaGroup", "check_router", "load_fleet", "parse_fleet",
           "simulate_fleet", "table_gpus"]
