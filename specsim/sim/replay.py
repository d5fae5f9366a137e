"""Acceptance-trace replay (docs/replay.md) and the files it reads.

An acceptance file (TOML) may hold:

- ``step_ms = [...]``: whole-step wall ms by draft depth ``0, 1, ...`` (no joules);
- ``[[trace]]`` tables: ``name``, ``note``, ``k_logged`` (drafts per logged verify step) and
  ``steps``, a list of digit strings read as one concatenated string: one digit per verify step,
  the accepted run of that step;
- ``[[run]]`` tables of measured costs: ``name`` and ``cells = [[n, k, verify_ms, verify_j,
  draft_ms, draft_j], ...]`` (convertible to a cost table with :func:`run_table`), plus fields
  this module does not read (``windows``).

Replaying a policy at width ``n`` until a token budget: the policy picks ``k`` (from the width
alone, so one depth for the whole replay; a named depth the costs do not price is refused),
clamped to ``k_logged`` (the label shows the depth that ran); each step costs the table's ``cell(n, k)`` or ``step_ms[k]``; at ``k = 0`` every
stream emits 1 token and no trace entry is used; otherwise stream ``i`` takes the next trace
entry ``a`` (cycling), emits ``1 + min(a, k)``, and the cursor moves by ``n``. A digit above
``k_logged`` (a logging quirk: one real trace logged at 5 holds 7s) warns and counts as
``k_logged`` at most, through that same ``min``.

``propose`` and ``goodput`` use the planner. Their priors come from a calibration when one is
given, else from the trace itself: ``prior(j) = #(a >= j) / #(a >= j - 1)`` over the trace's
steps, ``j = 1..k_logged`` (0 where no step reached ``j - 1``), which is the calibration's prior fit (docs/calibration.md#position-priors)
without its 100-outcome floor. Both need a cost table: a ``step_ms`` list has no joules for
``propose`` and is not a table for the planner. ``sequence`` needs per-draft confidences, which
an acceptance trace does not hold, and is refused.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple, Optional

import numpy as np

from specsim import _toml
from specsim._checks import MAX_BUDGET_TOKENS, MAX_DEPTH, MAX_WIDTH, check_int, number_problem, show
from specsim._io import read_input
from specsim.errors import PolicyError, SpecsimWarning, TraceError, TraceWarning
from specsim.interop import read_policy
from specsim.policy.policy import Policy
from specsim.table import Cell, CostTable, TableKey
from specsim.calibration import AcceptanceCalibration, DrafterKey
from specsim.plan import Planner
from specsim.sim._replay_kernels import replay_steps_nb

class ReplayResult(NamedTuple):
    """What a policy gives when an acceptance trace is replayed at one width (docs/replay.md).

    ``joules`` and the per-joule rate are None when the costs have no energy (a ``step_ms`` list).
    ``by_depth[k]`` counts the steps run at depth ``k``.
    """

    trace: str
    policy: str
    width: int
    depth: int
    budget: int
    tokens: int
    steps: int
    plain_steps: int
    by_depth: tuple
    ms: float
    joules: Optional[float]

    @property
    def tokens_per_ms(self) -> float:
        return self.tokens / self.ms if self.ms > 0 else 0.0

    @property
    def tokens_per_s(self) -> float:
        return 1000.0 * self.tokens_per_ms

    @property
    def tokens_per_j(self) -> Optional[float]:
        if self.joules is None:
            return None
        return self.tokens / self.joules if self.joules > 0 else 0.0

    def to_dict(self) -> dict:
        """JSON-ready summary."""
        return {
            "trace": self.trace,
            "policy": self.policy,
            "width": self.width,
            "depth": self.depth,
            "budget": self.budget,
            "tokens": self.tokens,
            "ms": self.ms,
            "joules": self.joules,
            "steps": self.steps,
            "plain_steps": self.plain_steps,
            "by_depth": {str(k): c for k, c in enumerate(self.by_depth) if c},
            "tokens_per_ms": self.tokens_per_ms,
            "tokens_per_s": self.tokens_per_s,
            "tokens_per_j": self.tokens_per_j,
        }


# Trace entries one call of the replay kernel uses at most (a few ms of work): Ctrl-C and the
# progress line act between calls.
CHUNK_ENTRIES = 4_000_000


@dataclass(frozen=True, eq=False)
class AcceptanceTrace:
    """One logged acceptance trace.

    Attributes
    ----------
    name, note : str
    k_logged : int
        Drafts per logged verify step.
    accepted : ndarray(int8, ndim=1), shape (L,)
        Accepted run of every verify step, in serve order (read-only).
    source : str
        The file it came from.
    """

    name: str
    note: str
    k_logged: int
    accepted: np.ndarray
    source: str = "<trace>"

    @property
    def above_k_logged(self) -> int:
        """How many entries exceed ``k_logged``."""
        return int(np.count_nonzero(self.accepted > self.k_logged))

    def priors(self) -> list:
        """Conditional acceptance by position estimated from the trace, ``j = 1..k_logged``.

        ``prior(j) = #(a >= j) / #(a >= j - 1)`` with entries clamped to ``k_logged``; 0 where
        no entry reaches ``j - 1``. A trace logged at ``k_logged = 0`` has no prior: empty.
        """
        a = np.minimum(self.accepted.astype(np.int64), self.k_logged)
        counts = np.bincount(a, minlength=self.k_logged + 1)
        at_least = np.cumsum(counts[::-1])[::-1]  # at_least[j] = #(a >= j)
        out = []
        for j in range(1, self.k_logged + 1):
            reached = int(at_least[j - 1])
            out.append(float(at_least[j]) / reached if reached else 0.0)
        return out


class AcceptanceFile(NamedTuple):
    """The contents of an acceptance file: traces, a per-depth ``step_ms`` list, measured runs."""

    source: str
    traces: dict
    step_ms: Optional[tuple]
    runs: dict

    def trace(self, name: str) -> AcceptanceTrace:
        """The trace called ``name``; the error lists the names there are."""
        if name not in self.traces:
            have = ", ".join(self.traces) or "none"
            hint = " (its [[run]] entries are cost tables: convert one with `specsim table import`)" if self.runs else ""
            raise TraceError(f"{self.source}: no [[trace]] named {name!r}; traces here: {have}{hint}")
        return self.traces[name]

    def run(self, name: str) -> list:
        """The cells of the run called ``name`` as :class:`Cell` values."""
        if name not in self.runs:
            raise TraceError(f"{self.source}: no [[run]] named {name!r}; runs here: {', '.join(self.runs) or 'none'}")
        return self.runs[name]


def load_acceptance_file(path) -> AcceptanceFile:
    """Read an acceptance file (see the module docstring), listing every problem found."""
    path = Path(path)
    text = read_input(path, "the acceptance file", TraceError)
    return parse_acceptance_file(text, str(path))


def parse_acceptance_file(text, source: str = "<text>") -> AcceptanceFile:
    """Parse acceptance-file text; raises :class:`TraceError` listing every problem."""
    doc = _toml.loads(text, "the acceptance file", source, TraceError)
    problems = []
    step_ms = None
    raw = doc.get("step_ms", _toml.MISSING)
    if raw is not _toml.MISSING:
        values = [_toml.as_float(v) for v in raw] if isinstance(raw, list) else None
        if not values or any(number_problem(v, "step_ms", 0.0, low_open=True) for v in values):
            problems.append(f"step_ms = {show(raw)} must be a non-empty list of finite numbers > 0 (ms by depth 0, 1, ...)")
        elif len(values) > MAX_DEPTH + 1:
            problems.append(f"step_ms lists {len(values):,} depths; the deepest draft depth is {MAX_DEPTH:,} "
                            "(docs/limits.md)")
        else:
            step_ms = tuple(values)
    traces = {}
    for i, t in enumerate(_tables(doc, "trace", problems)):
        tr = _read_trace(t, i, source, problems)
        if tr is not None:
            if tr.name in traces:
                problems.append(f"trace[{i}]: a second trace named {tr.name!r}")
            traces[tr.name] = tr
    runs = {}
    for i, r in enumerate(_tables(doc, "run", problems)):
        name, cells = _read_run(r, i, problems)
        if name is not None:
            if name in runs:
                problems.append(f"run[{i}]: a second run named {name!r}")
            runs[name] = cells
    if problems:
        raise TraceError(f"{source}: the acceptance file cannot be read", problems)
    if not traces and not runs and step_ms is None:
        raise TraceError(f"{source}: holds no [[trace]], [[run]] or step_ms: not an acceptance file")
    return AcceptanceFile(source, traces, step_ms, runs)


def _tables(doc, name, problems):
    raw = doc.get(name, [])
    if not isinstance(raw, list) or not all(isinstance(t, dict) for t in raw):
        problems.append(f"`{name}` must be an array of tables ([[{name}]])")
        return []
    return raw


def _read_trace(t, i, source, problems):
    where = f"trace[{i}]"
    name = t.get("name")
    if not isinstance(name, str) or not name:
        problems.append(f"{where} has no `name` string")
        return None
    where = f"trace[{i}] ({name})"
    note = t.get("note", "")
    k_logged = _toml.as_uint(t.get("k_logged"))
    ok = True
    if k_logged is None or k_logged > 9:
        problems.append(f"{where}: k_logged = {t.get('k_logged')!r} must be an integer in 0..=9 (one digit per step)")
        ok = False
    steps = t.get("steps")
    if not isinstance(steps, list) or not all(isinstance(s, str) for s in steps):
        problems.append(f"{where}: steps must be a list of digit strings")
        return None
    joined = "".join(steps)
    if not joined:
        problems.append(f"{where}: steps holds no digit; a trace needs at least one verify step")
        return None
    for si, s in enumerate(steps):
        for ci, ch in enumerate(s):
            if not ("0" <= ch <= "9"):
                problems.append(f"{where}: steps[{si}] character {ci + 1} is {ch!r}, not a digit 0-9")
                ok = False
                break
    if not ok:
        return None
    accepted = np.frombuffer(joined.encode("ascii"), dtype=np.uint8).astype(np.int8) - np.int8(48)
    accepted.flags.writeable = False
    return AcceptanceTrace(name, str(note), int(k_logged), accepted, source)


def _read_run(r, i, problems):
    name = r.get("name")
    if not isinstance(name, str) or not name:
        problems.append(f"run[{i}] has no `name` string")
        return None, None
    cells_raw = r.get("cells")
    if not isinstance(cells_raw, list) or not cells_raw:
        problems.append(f"run[{i}] ({name}): cells must be a non-empty list of [n, k, verify_ms, verify_j, draft_ms, draft_j]")
        return None, None
    cells = []
    for ci, c in enumerate(cells_raw):
        where = f"run[{i}] ({name}) cells[{ci}]"
        if not isinstance(c, list) or len(c) != 6:
            problems.append(f"{where} = {c!r} is not [n, k, verify_ms, verify_j, draft_ms, draft_j]")
            continue
        n, k = _toml.as_uint(c[0]), _toml.as_uint(c[1])
        costs = [_toml.as_float(v) for v in c[2:]]
        if n is None or k is None or any(v is None for v in costs):
            problems.append(f"{where} = {c!r}: n and k must be non-negative integers and the costs numbers")
            continue
        cells.append(Cell(n, k, *costs))
    return name, cells


def run_table(run_cells, key: TableKey, meta=None, source="<run>") -> CostTable:
    """A cost table from a run's cells under ``key`` (refused as any table would be, docs/tables.md#validation)."""
    return CostTable.from_cells(key, run_cells, meta=meta, source=source)


# -- replay ---------------------------------------------------------------------------------

class StepCosts(NamedTuple):
    """Whole-step costs by depth at one width: ``step_ms[k]``, ``step_j[k]`` (None: no joules)."""

    step_ms: tuple
    step_j: Optional[tuple]

    @property
    def max_k(self) -> int:
        return len(self.step_ms) - 1

    @classmethod
    def from_table(cls, table: CostTable, width: int) -> "StepCosts":
        cells = [table.cell(width, k) for k in range(table.max_k + 1)]
        return cls(tuple(c.step_ms for c in cells), tuple(c.step_j for c in cells))


def estimated_calibration(trace: AcceptanceTrace):
    """An in-memory calibration whose position priors are :meth:`AcceptanceTrace.priors`.

    Only its priors mean anything (one bucket holding the first prior); the planner's
    ``propose`` and ``goodput`` read nothing else. Not for writing to a file.
    """
    priors = trace.priors()
    if not priors:
        raise PolicyError(f"trace {trace.name!r} is logged at k_logged = 0: it holds no acceptance to estimate priors from")
    drafter = DrafterKey(f"estimated from acceptance trace {trace.name}", 0, "unknown", False)
    return AcceptanceCalibration(drafter, [0.0], [priors[0]], priors, source=f"trace {trace.name}")


def policy_depth(policy: Policy, width, table=None, calibration=None, slack=0.0, max_seqs=None) -> int:
    """The depth a policy (a :class:`~specsim.policy.policy.Policy`, read where it was typed)
    picks at ``width`` before any clamping.

    ``fixed`` and ``schedule`` read the width alone; ``propose`` and ``goodput`` ask the
    planner (``specsim.plan.Planner``) built from ``table`` and ``calibration``.
    """
    if not policy.needs_planner:
        return policy.depth_for_width(width)
    if policy.per_sequence:
        raise PolicyError(
            "policy sequence plans per-sequence depths from each draft's confidence, which an acceptance "
            "trace does not log: replay fixed, schedule, propose or goodput instead"
        )
    if policy.counts_idle:
        raise PolicyError(
            "policy load-aware picks its plan by whether requests wait in the server's queue, and a replay "
            "at a fixed width has no queue: replay propose (its plan while requests wait) instead"
        )
    if table is None:
        raise PolicyError(
            f"policy {policy.kind} needs a cost table (--table): a step_ms list has no joules"
            + (" and no per-width cells" if policy.maximises_goodput else "")
        )
    if calibration is None:
        raise PolicyError(f"policy {policy.kind} needs a calibration for its priors")

    planner = Planner(table, calibration, slack=slack, max_seqs=max_seqs)
    return int(planner.goodput(width) if policy.maximises_goodput else planner.propose(width))


def replay(trace: AcceptanceTrace, policy, width: int, budget: int, *, table: Optional[CostTable] = None,
           step_ms=None, calibration=None, slack: float = 0.0, max_seqs: Optional[int] = None,
           progress=None) -> ReplayResult:
    """Replay ``policy`` on ``trace`` at ``width`` streams until ``budget`` tokens (docs/replay.md#the-replay-loop).

    Parameters
    ----------
    trace : AcceptanceTrace
    policy : str or Policy
    width : int
        Streams per step, >= 1.
    budget : int
        Tokens to reach, >= 1; the last step may pass it.
    table : CostTable, optional
        Step costs ``cell(width, k)``; takes precedence over ``step_ms``.
    step_ms : sequence of float, optional
        Whole-step ms by depth (no joules: the result's ``joules`` is None).
    calibration : AcceptanceCalibration, optional
        Priors for ``propose``/``goodput``; default: estimated from the trace.
    slack : float
        Planner slack in ``[0, 1)``.
    max_seqs : int, optional
        Planner speculation cap; default: no cap (the width).
    progress : callable(int), optional
        Called with the tokens emitted so far after each chunk of steps (about
        :data:`CHUNK_ENTRIES` trace entries); Ctrl-C stops the replay between chunks.

    Returns
    -------
    ReplayResult
    """
    if not isinstance(trace, AcceptanceTrace):
        raise TraceError(f"replay takes an AcceptanceTrace (specsim.load_acceptance_file(...).trace(NAME)), got "
                         f"{type(trace).__name__}")
    width = check_int(width, "width", TraceError, 1, MAX_WIDTH, "the widest batch")
    budget = check_int(budget, "token budget", TraceError, 1, MAX_BUDGET_TOKENS, "the largest replay budget")
    policy = read_policy(policy)
    if policy.kind == "tree":
        raise PolicyError(
            f"policy {policy} drafts a tree, and an acceptance trace logs a chain's accepted runs, not which "
            "rank the target's token had at each depth: replay a chain policy (fixed, schedule, propose or "
            "goodput), or simulate the tree with a calibration that has a [tree] table (specsim simulate "
            f"--policy {policy})")
    if table is not None:
        costs = StepCosts.from_table(table, width)
    elif step_ms is not None:
        values = list(step_ms) if isinstance(step_ms, (list, tuple, np.ndarray)) else []
        if not values or any(number_problem(v, "step_ms", 0.0, low_open=True) for v in values):
            raise TraceError(f"step_ms must be a non-empty list of finite numbers > 0, got {show(step_ms)}")
        costs = StepCosts(tuple(float(v) for v in values), None)
    else:
        raise TraceError("replay needs step costs: a cost table (--table) or the file's step_ms list")
    if policy.needs_planner and calibration is None and not policy.per_sequence:
        calibration = estimated_calibration(trace)
    if not policy.needs_planner and policy.max_depth > costs.max_k:
        raise PolicyError(f"policy {policy} names depth {policy.max_depth}, but the step costs price depths up to "
                          f"{costs.max_k} only: name a depth of at most {costs.max_k}")
    wanted = policy_depth(policy, width, table, calibration, slack, max_seqs)
    # A planner's depth is one the costs price, and a named one was checked above: only k_logged
    # can lower it. A named depth above k_logged runs capped, and the label says what ran (as the
    # engine's does).
    depth = min(wanted, trace.k_logged, costs.max_k)
    label = str(policy.clamped(min(trace.k_logged, costs.max_k)))
    above = trace.above_k_logged
    if above and depth > 0:
        top = int(trace.accepted.max())
        warnings.warn(
            f"{trace.source}: trace {trace.name!r} holds {above} accepted run(s) above k_logged = {trace.k_logged} "
            f"(up to {top}); each counts as at most the depth replayed ({depth})",
            TraceWarning,
            stacklevel=2,
        )
    if table is None and width > 1:
        warnings.warn(
            f"the step_ms list prices one step whatever its width: at width {width} every step emits {width} "
            f"streams' tokens for that one cost, so throughput is {width}x a single stream's; give a cost table "
            "(--table) measured at this width for a real figure",
            SpecsimWarning,
            stacklevel=2,
        )
    step_j = float("nan") if costs.step_j is None else costs.step_j[depth]
    accepted = np.ascontiguousarray(trace.accepted, dtype=np.int8)
    counts = np.zeros(3, dtype=np.int64)
    sums = np.zeros(2, dtype=np.float64)
    chunk = np.int64(max(1, CHUNK_ENTRIES // width))
    while not replay_steps_nb(accepted, width, depth, budget, costs.step_ms[depth], step_j, counts, sums, chunk):
        if progress is not None:
            progress(int(counts[0]))
    tokens, steps, ms, joules = counts[0], counts[1], sums[0], sums[1]
    by_depth = [0] * (costs.max_k + 1)
    by_depth[depth] = int(steps)
    return ReplayResult(
        trace=trace.name,
        policy=label,
        width=width,
        depth=depth,
        budget=budget,
        tokens=int(tokens),
        steps=int(steps),
        plain_steps=int(steps) if depth == 0 else 0,
        by_depth=tuple(by_depth),
        ms=float(ms),
        joules=None if costs.step_j is None else float(joules),
    )
