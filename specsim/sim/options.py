"""The simulated server's options, parsed and validated once (docs/simulation.md, "Server").

Names follow vLLM's where it has one (``max_num_seqs``, ``max_num_batched_tokens``, block size).
Options left at None take the cost table's ``[meta]`` value where it has one (``specsim table
model`` writes ``kv_capacity_tokens``, ``prefill_ms_per_step``, ``prefill_j_per_step``,
``prefill_ms_per_token``, ``prefill_j_per_token`` and ``idle_w``), else the default below.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Optional

import numpy as np

from specsim._checks import MAX_TOKENS_PER_REQUEST, MAX_WIDTH, NO_CAP, check_gate, flag_problem, show
from specsim.errors import SimulationError
from specsim._io import csv_rows, decode_text, read_input
from specsim.plan.planner import check_slack
from specsim.table._types import VERIFY_J, VERIFY_MS
from specsim.table.cost_table import CostTable

DEFAULT_PREFILL_MS_PER_TOKEN = 0.1
DEFAULT_PREFILL_J_PER_TOKEN = 0.06
DEFAULT_IDLE_W = 0.0
DEFAULT_LOG_SIZE = 4096
# Most entries a step log may hold (it is allocated up front).
MAX_LOG_SIZE = 1 << 24
DEFAULT_MAX_NUM_BATCHED_TOKENS = 8192
DEFAULT_CHUNKED_PREFILL = True
# How a step that decodes and prefills is priced (docs/simulation.md, "The price of a step"):
# "one-pass" reads the weights once (the prefill's fixed part is shared with the decode part),
# "additive" prices the two parts apart and adds them (the earlier rule).
MIXED_STEP_PRICINGS = ("one-pass", "additive")
DEFAULT_MIXED_STEP_PRICING = "one-pass"
DEFAULT_KV_BLOCK_SIZE = 16
MAX_BATCH = MAX_WIDTH
# Upper bound of the prefill costs and idle power: above it, times and energies would overflow
# long before they meant anything.
MAX_RATE = 1e9
_U64 = 1 << 64
# Cost options a table's [meta] may supply (specsim table model writes them).
META_COSTS = ("prefill_ms_per_token", "prefill_j_per_token", "prefill_ms_per_step", "prefill_j_per_step", "idle_w")
_COST_DEFAULTS = {"prefill_ms_per_token": DEFAULT_PREFILL_MS_PER_TOKEN,
                  "prefill_j_per_token": DEFAULT_PREFILL_J_PER_TOKEN,
                  "prefill_ms_per_step": 0.0, "prefill_j_per_step": 0.0, "idle_w": DEFAULT_IDLE_W}


@dataclass(frozen=True)
class ServerOptions:
    """The simulated server.

    Attributes
    ----------
    slack : float
        Planner slack in [0, 1) (``propose`` and ``sequence``). Default 0.
    max_num_seqs : int or None
        Most running requests. Default: the table's widest measured width (costs beyond it would
        be the widest width's, an extrapolation the table cannot vouch for). Files and the
        command line also take it as ``max_batch``, its earlier name (:data:`OPTION_ALIASES`).
    max_num_batched_tokens : int or None
        Token budget per step: decode tokens (1 + drafts per sequence) and prefill tokens
        together. Default 8192; None for no budget.
    chunked_prefill : bool
        True (default): prefill chunks share steps with decodes. False: a step that admits
        requests prefills their whole prompts alone, and decodes wait (the first engine).
    mixed_step_pricing : str
        How a step with decodes and prefill tokens is priced: ``"one-pass"`` (default; one
        forward pass, the weights read once: the prefill part pays only its tokens' marginal cost
        on top of the decode part) or ``"additive"`` (decode part plus prefill part, the earlier
        rule). See :func:`prefill_fixed_part`.
    context_pricing : bool
        True (default): on a table with a context axis every decode step is priced at its
        batch's mean context (KV tokens per decoding sequence). False: at the table's reference
        context, as a table without an axis prices every step.
    kv_capacity_tokens : int or None
        KV-cache capacity in tokens. Default: the table's ``[meta] kv_capacity_tokens``, else
        unlimited.
    kv_block_size : int
        Tokens per KV block. Default 16.
    max_seqs : int or None
        Speculation cap: wider batches plain-decode. Default: no cap.
    k_max : int or None
        Most drafts per sequence per step. Default: the table's ``max_k``.
    row_budget : int or None
        Most draft rows verified in one step. Default: no limit.
    prefill_ms_per_token, prefill_j_per_token : float or None
        Prefill cost per prefilled token. Default: the table's ``[meta]``, else 0.1 ms and 0.06 J
        (a mid-size model on one datacenter GPU at ~600 W: a placeholder).
    prefill_ms_per_step, prefill_j_per_step : float or None
        Fixed prefill cost of a step that prefills anything. Default: the table's ``[meta]``, else 0.
    prefill_curve : str, Path, tuple or None
        A profiled prefill curve instead of the affine model: a CSV file with columns
        ``tokens,ms,j`` or a tuple ``(tokens, ms, j)`` of equal-length sequences, tokens
        strictly ascending. See :func:`load_prefill_curve`.
    idle_w : float or None
        Power while no request is active. Default: the table's ``[meta]``, else 0.
    seed : int
        Seed of the draft-outcome hashes, 0 <= seed < 2**64. Default 0.
    occupancy : ndarray or None
        Bucket weights, shape (B,) for every position or (J, B) per position; None for the
        maximum-entropy default.
    log_size : int
        Capacity of the step log; longer runs are downsampled to fit. Default 4096.
    acceptance_window, acceptance_length_threshold : int and float, or None
        TensorRT-LLM's speculation gate, on any policy: each finished request's accepted length
        (``max(0, output tokens / decode steps - 1)``, mean accepted drafts per step) enters a
        window of the last ``acceptance_window`` requests; once that many have finished, a window
        mean below ``acceptance_length_threshold`` turns speculation off (depth 0) for the rest of
        the run. Give both or neither; a window <= 0 never turns it off. Default: no gate (a
        ``trtllm:FILE`` policy whose ``speculative_config`` carries both keys supplies them).
    """

    slack: float = 0.0
    max_num_seqs: Optional[int] = None
    max_num_batched_tokens: Optional[int] = DEFAULT_MAX_NUM_BATCHED_TOKENS
    chunked_prefill: bool = DEFAULT_CHUNKED_PREFILL
    mixed_step_pricing: str = DEFAULT_MIXED_STEP_PRICING
    context_pricing: bool = True
    kv_capacity_tokens: Optional[int] = None
    kv_block_size: int = DEFAULT_KV_BLOCK_SIZE
    max_seqs: Optional[int] = None
    k_max: Optional[int] = None
    row_budget: Optional[int] = None
    prefill_ms_per_token: Optional[float] = None
    prefill_j_per_token: Optional[float] = None
    prefill_ms_per_step: Optional[float] = None
    prefill_j_per_step: Optional[float] = None
    prefill_curve: object = field(default=None, compare=False)
    idle_w: Optional[float] = None
    seed: int = 0
    occupancy: Optional[np.ndarray] = field(default=None, compare=False)
    log_size: int = DEFAULT_LOG_SIZE
    acceptance_window: Optional[int] = None
    acceptance_length_threshold: Optional[float] = None

    def __post_init__(self):
        try:
            object.__setattr__(self, "slack", check_slack(self.slack))
        except Exception as e:
            raise SimulationError(str(e)) from None
        self._check_counts()
        for name in ("chunked_prefill", "context_pricing"):
            problem = flag_problem(getattr(self, name), name)
            if problem:
                raise SimulationError(problem)
            object.__setattr__(self, name, bool(getattr(self, name)))
        if self.mixed_step_pricing not in MIXED_STEP_PRICINGS:
            raise SimulationError(f"mixed_step_pricing must be one of {', '.join(MIXED_STEP_PRICINGS)}, "
                                  f"got {show(self.mixed_step_pricing)}")
        seed = _int(self.seed, "seed", 0)
        if seed >= _U64:
            raise SimulationError(f"seed {seed} does not fit in 64 bits: use 0 <= seed < 2**64")
        object.__setattr__(self, "seed", seed)
        for name in META_COSTS:
            value = getattr(self, name)
            if value is not None:
                object.__setattr__(self, name, _rate(value, name))
        if self.prefill_curve is not None:
            given = [n for n in ("prefill_ms_per_token", "prefill_j_per_token", "prefill_ms_per_step",
                                 "prefill_j_per_step") if getattr(self, n) is not None]
            if given:
                raise SimulationError(f"prefill_curve replaces the affine prefill model: leave out "
                                      f"{', '.join(given)} (one of them would be ignored)")
            object.__setattr__(self, "prefill_curve", load_prefill_curve(self.prefill_curve))
        window, threshold = check_gate(self.acceptance_window, self.acceptance_length_threshold)
        object.__setattr__(self, "acceptance_window", window)
        object.__setattr__(self, "acceptance_length_threshold", threshold)
        if self.occupancy is not None:
            try:
                occupancy = np.asarray(self.occupancy, dtype=np.float64)
            except (TypeError, ValueError, OverflowError):
                raise SimulationError(f"occupancy must be weights per bucket (numbers), got {show(self.occupancy)}") from None
            if not np.isfinite(occupancy).all() or (occupancy < 0).any():
                raise SimulationError("occupancy weights must be finite numbers >= 0")
            object.__setattr__(self, "occupancy", occupancy)

    def _check_counts(self):
        for name, value, low in (("max_num_seqs", self.max_num_seqs, 1), ("max_seqs", self.max_seqs, 0),
                                 ("k_max", self.k_max, 0), ("row_budget", self.row_budget, 0),
                                 ("max_num_batched_tokens", self.max_num_batched_tokens, 1),
                                 ("kv_capacity_tokens", self.kv_capacity_tokens, 1)):
            if value is not None:
                value = _int(value, name, low)
                object.__setattr__(self, name, value if name == "max_num_seqs" else min(value, NO_CAP))
        seqs = self.max_num_seqs
        if seqs is not None and seqs > MAX_BATCH:
            raise SimulationError(f"max_num_seqs {seqs} is beyond {MAX_BATCH} sequences: per-width costs are "
                                  "precomputed for every width up to it; use a realistic batch cap")
        # A block larger than any request, or a step log past 2**24 entries, is a mistake; both
        # would otherwise reach the kernels as int64 overflows or a huge allocation.
        object.__setattr__(self, "kv_block_size",
                           _int(self.kv_block_size, "kv_block_size", 1, MAX_TOKENS_PER_REQUEST))
        object.__setattr__(self, "log_size", _int(self.log_size, "log_size", 0, MAX_LOG_SIZE))

    def placeholder_prefill(self, table):
        """A one-line warning when the prefill costs will be the built-in placeholders (no
        option, no curve, nothing in the table's ``[meta]``), else None."""
        meta = getattr(table, "meta", {}) or {}
        if self.prefill_curve is not None:
            return None
        missing = [n for n in ("prefill_ms_per_token", "prefill_j_per_token")
                   if getattr(self, n) is None and n not in meta]
        if not missing:
            return None
        return (f"prefill costs are placeholders ({DEFAULT_PREFILL_MS_PER_TOKEN:g} ms and "
                f"{DEFAULT_PREFILL_J_PER_TOKEN:g} J per prompt token where unset: "
                f"{', '.join(missing)}): the table's [meta] gives none; pass --prefill-ms-per-token and "
                "--prefill-j-per-token, or --prefill-curve, from a measurement of this model")

    def resolve(self, table) -> "ResolvedOptions":
        """The options with every default filled in from ``table``, once: a frozen
        :class:`ResolvedOptions` (its :meth:`~ResolvedOptions.to_dict` is the JSON-ready form)."""
        if not isinstance(table, CostTable):
            raise SimulationError(f"resolve takes the server's CostTable (CostTable.load(path)), got "
                                  f"{type(table).__name__}")
        values = {f.name: getattr(self, f.name) for f in fields(self)}
        values["max_num_seqs"] = self.max_num_seqs if self.max_num_seqs is not None else int(table.widths[-1])
        values["k_max"] = min(self.k_max if self.k_max is not None else table.max_k, table.max_k)
        meta = getattr(table, "meta", {}) or {}
        for name in META_COSTS:
            if values[name] is None:
                values[name] = _rate(meta[name], f"table [meta] {name}") if name in meta else _COST_DEFAULTS[name]
        if values["kv_capacity_tokens"] is None and "kv_capacity_tokens" in meta:
            values["kv_capacity_tokens"] = _int(meta["kv_capacity_tokens"], "table [meta] kv_capacity_tokens", 1)
        return ResolvedOptions(**values)


@dataclass(frozen=True)
class ResolvedOptions:
    """:class:`ServerOptions` with every default filled in from a cost table
    (:meth:`ServerOptions.resolve`): the server one run serves, parsed once.

    The fields are :class:`ServerOptions`'s, with ``max_num_seqs``, ``k_max``, the prefill costs
    and ``idle_w`` never None (``kv_capacity_tokens`` None: unlimited). ``acceptance_trace`` is
    the name of the acceptance trace a run replays (None: draws from the calibration); a run sets
    it, and the ``k_max`` the trace's ``k_logged`` lowers, and a ``trtllm:FILE`` policy's gate.
    """

    slack: float
    max_num_seqs: int
    max_num_batched_tokens: Optional[int]
    chunked_prefill: bool
    mixed_step_pricing: str
    context_pricing: bool
    kv_capacity_tokens: Optional[int]
    kv_block_size: int
    max_seqs: Optional[int]
    k_max: int
    row_budget: Optional[int]
    prefill_ms_per_token: float
    prefill_j_per_token: float
    prefill_ms_per_step: float
    prefill_j_per_step: float
    prefill_curve: Optional[tuple] = field(compare=False)
    idle_w: float
    seed: int
    occupancy: Optional[np.ndarray] = field(compare=False)
    log_size: int
    acceptance_window: Optional[int]
    acceptance_length_threshold: Optional[float]
    acceptance_trace: Optional[str] = None

    def to_dict(self) -> dict:
        """JSON-ready: ``occupancy`` and ``prefill_curve`` as lists, ``max_num_seqs`` also under
        ``max_batch``, its earlier name (for readers of earlier results and schedule files)."""
        out = {}
        for f in fields(self):
            if f.name == "acceptance_trace":
                continue
            value = getattr(self, f.name)
            if f.name == "occupancy":
                value = None if value is None else np.asarray(value, float).tolist()
            elif f.name == "prefill_curve":
                value = None if value is None else [list(map(float, c)) for c in value]
            out[f.name] = value
        out["max_batch"] = self.max_num_seqs
        out["acceptance_trace"] = self.acceptance_trace
        return out


def _int(value, name, low, high=None):
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < low:
        raise SimulationError(f"{name} must be an integer >= {low}, got {show(value)}")
    if high is not None and value > high:
        raise SimulationError(f"{name} = {show(value)} is beyond {high:,} (docs/limits.md)")
    return int(value)


def _rate(value, name) -> float:
    if isinstance(value, bool):
        raise SimulationError(f"{name} must be a number, got {value!r}")
    try:
        value = float(value)
    except (TypeError, ValueError):
        raise SimulationError(f"{name} must be a number, got {value!r}") from None
    if not (math.isfinite(value) and value >= 0):
        raise SimulationError(f"{name} must be a finite number >= 0, got {value!r}")
    if value > MAX_RATE:
        raise SimulationError(f"{name} = {value!r} is beyond any real server ({MAX_RATE:g}); check its unit")
    return value


def prefill_fixed_part(opts: ResolvedOptions, table=None) -> tuple:
    """(ms, J) of the prefill cost's per-step fixed part: what a step that prefills pays whatever
    its tokens (the weight read and launches), which a mixed step shares with its decode part.

    ``opts``: :meth:`ServerOptions.resolve`'s value. Affine model: ``prefill_ms_per_step`` and
    ``prefill_j_per_step``. Profiled curve: the line through its first two points extrapolated to
    0 tokens, floored at 0 and capped at the first point's cost (the curve's floor); a one-point
    curve is flat, all of it fixed. With ``table``, a curve's fixed part is also capped at the
    table's plain step (:func:`plain_step`): one pass reads the weights once, and the decode table
    already prices that read; a curve that implies more (a measured curve that falls at its low
    end) would let the decodes of a mixed step ride free (:func:`prefill_fixed_note` says so).
    """
    curve = opts.prefill_curve
    if curve is None:
        return float(opts.prefill_ms_per_step), float(opts.prefill_j_per_step)
    tokens, ms, joules = curve
    if len(tokens) == 1:
        out = [float(ms[0]), float(joules[0])]
    else:
        out = []
        for y in (ms, joules):
            slope = (y[1] - y[0]) / (tokens[1] - tokens[0])
            out.append(float(min(max(y[0] - slope * tokens[0], 0.0), y[0])))
    if table is not None:
        out = [min(v, cap) for v, cap in zip(out, plain_step(table))]
    return out[0], out[1]


def plain_step(table) -> tuple:
    """(ms, J) of the table's plain step at its narrowest width (depth 0, the reference context's
    grid): one pass's weight read and the least per-row work, the most a step's fixed part can be."""
    cell = table.costs[0, 0]
    return float(cell[VERIFY_MS]), float(cell[VERIFY_J])


def prefill_fixed_note(opts: ResolvedOptions, table) -> str | None:
    """A one-line note when a prefill curve implies a fixed part above the table's plain step
    (which :func:`prefill_fixed_part` then takes instead), else None."""
    if opts.prefill_curve is None or opts.mixed_step_pricing != "one-pass":
        return None
    implied, taken = prefill_fixed_part(opts), prefill_fixed_part(opts, table)
    over = [(f"{a:.4g} {unit}", f"{b:.4g} {unit}") for a, b, unit in zip(implied, taken, ("ms", "J")) if a > b]
    if not over:
        return None
    width = int(table.widths[0])
    return (f"the prefill curve implies a fixed part per step of {' and '.join(a for a, _ in over)}, above the "
            f"table's plain step at width {width} ({' and '.join(b for _, b in over)}): one pass reads the weights "
            "once, so a mixed step shares at most the table's plain step with its prefill chunk (the curve's low end "
            "falls, or it was measured on another stack); the table's is used")


# Names a [server] table in a file (a sweep grid, a fleet file) may use for an option, beside the
# option's own: ``max_batch`` was ``max_num_seqs``'s name before it took vLLM's.
OPTION_ALIASES = {"max_batch": "max_num_seqs"}


def option_names() -> set:
    """Every name a [server] table may use: the :class:`ServerOptions` fields and their aliases."""
    return set(ServerOptions.__dataclass_fields__) | set(OPTION_ALIASES)


def option_keywords(table: dict, error_cls=SimulationError) -> dict:
    """A [server] table's entries as :class:`ServerOptions` keywords, aliases under the option's
    own name (refused when a table gives both names)."""
    out = {}
    for key, value in table.items():
        name = OPTION_ALIASES.get(key, key)
        if name != key and name in table:
            raise error_cls(f"{key} and {name} name the same option: give one")
        out[name] = value
    return out


def check_option_names(names, error_cls=SimulationError) -> None:
    """Refuse names that are not :class:`ServerOptions` fields (a misspelt keyword), listing the
    fields, instead of the dataclass's TypeError."""
    known = list(ServerOptions.__dataclass_fields__)
    unknown = [n for n in names if n not in known]
    if unknown:
        raise error_cls(f"unknown server option(s) {', '.join(map(show, unknown))}; the options are "
                        f"{', '.join(known)}")


def load_prefill_curve(curve) -> tuple:
    """A profiled prefill curve as ``(tokens, ms, j)`` tuples of floats.

    Parameters
    ----------
    curve : str, Path or tuple
        A CSV file with a header naming ``tokens``, ``ms`` and ``j`` columns (prefill tokens in
        one step, its wall ms and joules; other columns are ignored), or a tuple of three
        equal-length sequences.

    Raises
    ------
    SimulationError
        When the file cannot be read, a column is missing, or the points are not finite,
        non-negative, with tokens strictly ascending.
    """
    where = "prefill curve"
    if isinstance(curve, (str, Path)):
        where = f"prefill curve {curve}"
        tokens, ms, joules = _read_curve_csv(Path(curve))
    else:
        try:
            tokens, ms, joules = (list(map(float, c)) for c in curve)
        except (TypeError, ValueError):
            raise SimulationError("prefill_curve must be a CSV path or a (tokens, ms, j) tuple of number lists") \
                from None
    if not tokens or not len(tokens) == len(ms) == len(joules):
        raise SimulationError(f"{where}: give at least one point, with as many ms and j values as tokens")
    values = tokens + ms + joules
    if not all(math.isfinite(v) and 0 <= v <= MAX_RATE for v in values):
        raise SimulationError(f"{where}: every value must be a finite number in [0, {MAX_RATE:g}]")
    fractional = next((t for t in tokens if t != int(t)), None)
    if fractional is not None:
        raise SimulationError(f"{where}: tokens = {fractional!r} is not a whole number of prefill tokens")
    if any(b <= a for a, b in zip(tokens, tokens[1:])):
        raise SimulationError(f"{where}: tokens must be strictly ascending")
    return tuple(tokens), tuple(ms), tuple(joules)


def _read_curve_csv(path: Path):
    what = "a prefill curve (CSV tokens,ms,j)"
    text = decode_text(read_input(path, what, SimulationError), what, path, SimulationError)
    head, rows = csv_rows(text, what, path, SimulationError)
    if head is None:
        raise SimulationError(f"prefill curve {path}: the file is empty; it needs a header tokens,ms,j")
    head = [h.lower() for h in head]
    missing = [c for c in ("tokens", "ms", "j") if c not in head]
    if missing:
        raise SimulationError(f"prefill curve {path}: the header lacks {', '.join(missing)} (it needs tokens,ms,j)")
    cols = [head.index(c) for c in ("tokens", "ms", "j")]
    out = ([], [], [])
    for line, row in rows:
        if not any(cell.strip() for cell in row):
            continue
        try:
            for dest, c in zip(out, cols):
                dest.append(float(row[c]))
        except (IndexError, ValueError):
            raise SimulationError(f"prefill curve {path}, line {line}: {show(','.join(row))} is not three numbers") \
                from None
    return out
