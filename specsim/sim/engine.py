"""The serving simulation (SPEC §6): run a request trace through a continuous-batching decode
server whose step costs come from a cost table and whose draft outcomes come from a calibration.

:func:`simulate` is a pure function of its inputs: the same requests, table, calibration, policy
and options give bit-identical results, whichever process or machine runs it.

Server model
------------
- At most ``max_batch`` sequences; arrived requests are admitted first come first served.
- A step that admits requests is a prefill step over them alone (decodes wait; no chunked
  prefill): ``prefill_ms_per_token`` and ``prefill_j_per_token`` times their prompt tokens; it
  emits each one's first token.
- Otherwise a decode step over every active sequence. Its draft depth comes from the policy at
  the batch width ``n``, clamped to ``k_max`` and the table's ``max_k``; above ``max_seqs``
  sequences every policy plain-decodes (the serve's speculation cap, SPEC §4.1).
  Uniform policies (``fixed``, ``schedule``, ``propose``, ``goodput``) verify ``k`` drafts per
  sequence, clamped so the step stays within ``row_budget`` rows (``k <= row_budget // n``),
  and the step costs the table's ``cell(n, k)``. ``sequence`` drafts ``min(k, left - 1)`` per
  sequence with ``k`` from §4.1, then §4.2 (the planner's kernel, with the drafted depth as its
  ``k_max``, and ``row_budget``) picks how many of each sequence's drafts to verify; the step
  costs §4.2's row cost (the planner's own function): verify interpolated at ``rows / n`` plus
  the sunk draft cost of the drafted depth.
- Each sequence emits ``1 + accepted`` tokens, never more than it has left.
- With nothing active, time jumps to the next arrival and ``idle_w`` accrues over the gap.

Draft outcomes
--------------
Draft ``j`` of a sequence that has emitted ``e`` tokens would produce output token ``e + j - 1``.
Its confidence bucket is drawn from the position's bucket occupancy and it is accepted with that
bucket's ``p_accept``; the chain stops at the first rejection. The planner sees a confidence
inside the drawn bucket (the bucket's upper edge, which maps back to it). Both draws come from
one counter-based hash of (seed, request, token index, position) -- splitmix64's finaliser --
whose high 32 bits draw the bucket and low 32 bits the verdict (the two streams), so every
policy meets the same outcome for the same draft (common random numbers).

Default occupancy: for position ``j``, the maximum-entropy distribution over buckets whose mean
acceptance equals ``prior(j)``: ``w_b ∝ exp(theta_j * p_accept[b])`` with ``theta_j`` found by
bisection. It is the least-committal confidence mix consistent with the calibration's priors,
and makes the expected acceptance at each position the prior the planner assumes. A prior
outside ``[min p_accept, max p_accept]`` cannot be met: all weight goes to the nearest extreme
bucket(s) (a one-bucket calibration always draws its one bucket). ``occupancy=`` overrides it
with explicit weights.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields
from typing import Optional

import numpy as np

from specsim._checks import COUNT_MAX, MAX_WIDTH
from specsim.errors import SimulationError
from specsim.sim.policy import Policy, parse_policy

# Defaults of the server options (documented in ServerOptions).
DEFAULT_PREFILL_MS_PER_TOKEN = 0.1
DEFAULT_PREFILL_J_PER_TOKEN = 0.06
DEFAULT_IDLE_W = 0.0
DEFAULT_LOG_SIZE = 4096
# Steps per kernel call when a progress callback is given: small enough that Ctrl-C, which
# acts between calls, stops even wide sequence-planner runs well within a second.
PROGRESS_CHUNK = 1 << 12
_NO_CAP = COUNT_MAX
MAX_BATCH = MAX_WIDTH
# Upper bound of the per-token prefill costs and idle power: above it, times and energies would
# overflow long before they meant anything.
MAX_RATE = 1e9
_U64 = 1 << 64


@dataclass(frozen=True)
class ServerOptions:
    """The simulated server, parsed and validated once.

    Attributes
    ----------
    slack : float
        Planner slack in [0, 1) (``propose`` and ``sequence``). Default 0.
    max_batch : int or None
        Most sequences in the batch. Default: the table's widest measured width (costs beyond
        it would be the widest width's, an extrapolation the table cannot vouch for).
    max_seqs : int or None
        Speculation cap: wider batches plain-decode. Default: no cap.
    k_max : int or None
        Most drafts per sequence per step. Default: the table's ``max_k``.
    row_budget : int or None
        Most draft rows verified in one step. Default: no limit.
    prefill_ms_per_token, prefill_j_per_token : float
        Prefill cost per prompt token. Defaults 0.1 ms and 0.06 J (a mid-size model on one
        datacenter GPU at ~600 W: a placeholder; measure your own prefill and set them).
    idle_w : float
        Power drawn while no request is active. Default 0 (energy is then the steps' alone).
    seed : int
        Seed of the draft-outcome hashes, 0 <= seed < 2**64. Default 0.
    occupancy : ndarray or None
        Bucket weights, shape (B,) for every position or (J, B) per position (later positions
        take the last row); None for the maximum-entropy default.
    log_size : int
        Capacity of the per-step log (time, width, mean depth, tokens); longer runs are
        downsampled to fit. Default 4096.
    """

    slack: float = 0.0
    max_batch: Optional[int] = None
    max_seqs: Optional[int] = None
    k_max: Optional[int] = None
    row_budget: Optional[int] = None
    prefill_ms_per_token: float = DEFAULT_PREFILL_MS_PER_TOKEN
    prefill_j_per_token: float = DEFAULT_PREFILL_J_PER_TOKEN
    idle_w: float = DEFAULT_IDLE_W
    seed: int = 0
    occupancy: Optional[np.ndarray] = field(default=None, compare=False)
    log_size: int = DEFAULT_LOG_SIZE

    def __post_init__(self):
        from specsim.plan.planner import check_slack

        try:
            object.__setattr__(self, "slack", check_slack(self.slack))
        except Exception as e:
            raise SimulationError(str(e)) from None
        for name, low in (("max_batch", 1), ("max_seqs", 0), ("k_max", 0), ("row_budget", 0)):
            value = getattr(self, name)
            if value is not None:
                object.__setattr__(self, name, _int(value, name, low))
        if self.max_batch is not None and self.max_batch > MAX_BATCH:
            raise SimulationError(f"max_batch {self.max_batch} is beyond {MAX_BATCH} sequences: per-width costs are "
                                  "precomputed for every width up to it; use a realistic batch cap")
        for name in ("max_seqs", "row_budget"):
            value = getattr(self, name)
            if value is not None and value > _NO_CAP:
                object.__setattr__(self, name, _NO_CAP)
        object.__setattr__(self, "log_size", _int(self.log_size, "log_size", 0))
        seed = _int(self.seed, "seed", 0)
        if seed >= _U64:
            raise SimulationError(f"seed {seed} does not fit in 64 bits: use 0 <= seed < 2**64")
        object.__setattr__(self, "seed", seed)
        for name in ("prefill_ms_per_token", "prefill_j_per_token", "idle_w"):
            value = getattr(self, name)
            try:
                value = float(value)
            except (TypeError, ValueError):
                raise SimulationError(f"{name} must be a number, got {value!r}") from None
            if not (math.isfinite(value) and value >= 0):
                raise SimulationError(f"{name} must be a finite number >= 0, got {value!r}")
            if value > MAX_RATE:
                raise SimulationError(f"{name} = {value!r} is beyond any real server ({MAX_RATE:g}); check its unit")
            object.__setattr__(self, name, value)

    def resolved(self, table) -> dict:
        """The options with every default filled in from ``table``, JSON-ready."""
        out = {}
        for f in fields(self):
            if f.name == "occupancy":
                out[f.name] = None if self.occupancy is None else np.asarray(self.occupancy, float).tolist()
            else:
                out[f.name] = getattr(self, f.name)
        out["max_batch"] = self.max_batch if self.max_batch is not None else int(table.widths[-1])
        out["k_max"] = min(self.k_max if self.k_max is not None else table.max_k, table.max_k)
        return out


def _int(value, name, low):
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < low:
        raise SimulationError(f"{name} must be an integer >= {low}, got {value!r}")
    return int(value)


# -- draft outcome model -------------------------------------------------------------------------

def max_entropy_weights(p_accept, target) -> np.ndarray:
    """The maximum-entropy distribution over buckets whose mean acceptance is ``target``.

    ``w_b ∝ exp(theta * p_b)``; the mean rises with ``theta``, which is found by bisection.
    A target at or outside the range of ``p_accept`` puts all weight on the extreme bucket(s).

    Parameters
    ----------
    p_accept : ndarray(float64, ndim=1), shape (B,)
    target : float

    Returns
    -------
    ndarray(float64, ndim=1), shape (B,)
        Non-negative, summing to 1.
    """
    p = np.asarray(p_accept, dtype=np.float64)
    lo, hi = float(p.min()), float(p.max())
    if target <= lo or target >= hi:
        w = (p == (lo if target <= lo else hi)).astype(np.float64)
        return w / w.sum()

    # Solved on p rescaled to [0, 1]: the same exponential family (theta scaled by the span),
    # and well conditioned however narrow the span of p_accept is.
    q = (p - lo) / (hi - lo)
    goal = (target - lo) / (hi - lo)

    def weights(theta):
        # Shifted by the largest exponent so nothing overflows.
        x = theta * q
        w = np.exp(x - x.max())
        return w / w.sum()

    def mean(theta):
        return float(weights(theta) @ q)

    a, b = -1.0, 1.0
    while mean(a) > goal and a > -1e300:
        a *= 2.0
    while mean(b) < goal and b < 1e300:
        b *= 2.0
    for _ in range(200):
        mid = 0.5 * (a + b)
        if mid in (a, b):
            break
        if mean(mid) < goal:
            a = mid
        else:
            b = mid
    return weights(0.5 * (a + b))


def occupancy_cdf(cal, positions: int, occupancy=None) -> np.ndarray:
    """Cumulative bucket occupancy per draft position, as the engine draws from it.

    Parameters
    ----------
    cal : AcceptanceCalibration
    positions : int
        Rows to build (draft positions 1..positions; at least 1).
    occupancy : array_like, optional
        Explicit weights, shape (B,) or (J, B); default :func:`max_entropy_weights` of each
        position's prior.

    Returns
    -------
    ndarray(float64, ndim=2), shape (positions, B)
        Each row rises to exactly 1 at its last positive-weight bucket.
    """
    buckets = cal.p_accept.shape[0]
    positions = max(int(positions), 1)
    if occupancy is None:
        w = np.stack([max_entropy_weights(cal.p_accept, cal.prior(j)) for j in range(1, positions + 1)])
    else:
        w = np.asarray(occupancy, dtype=np.float64)
        if w.ndim == 1:
            w = w[None, :]
        if w.ndim != 2 or w.shape[1] != buckets or w.shape[0] < 1:
            raise SimulationError(
                f"occupancy must hold {buckets} weights (one per calibration bucket), or one such row per "
                f"draft position; got shape {w.shape}"
            )
        if not np.isfinite(w).all() or (w < 0).any() or (w.sum(axis=1) <= 0).any():
            raise SimulationError("occupancy weights must be finite, >= 0, with a positive sum in every row")
        rows = [w[min(j, w.shape[0] - 1)] for j in range(positions)]
        w = np.stack(rows)
    c = np.cumsum(w, axis=1)
    return np.ascontiguousarray(c / c[:, -1:])


def confidence_values(cal) -> np.ndarray:
    """The confidence shown to the planner for a draft drawn in each bucket: its upper edge.

    ``bucket(edges[b]) == b`` because edges are strictly ascending (float32 compare).
    """
    return np.ascontiguousarray(cal.edges, dtype=np.float32)


# -- result ---------------------------------------------------------------------------------------

@dataclass(frozen=True, eq=False)
class SimResult:
    """What one policy did on one trace.

    Per-request arrays are aligned with the input requests (sorted by arrival).

    Attributes
    ----------
    policy : str
    options : dict
        The server options with defaults resolved (:meth:`ServerOptions.resolved`).
    arrival_s, first_token_s, finish_s : ndarray(float64, ndim=1), shape (N,)
    prompt_tokens, output_tokens : ndarray(int64, ndim=1), shape (N,)
    depth_histogram : ndarray(int64, ndim=1), shape (K + 1,)
        Sequence-steps by verified draft depth.
    counters : dict
        decode_steps, prefill_steps, speculative_steps, sequence_steps, emitted_tokens,
        accepted_drafts, drafted, verified_rows.
    energy : dict
        decode_j, prefill_j, idle_j; decode_s, prefill_s, idle_s (time in each state).
    end_s : float
        Simulated time when the last request finished.
    step_t_s, step_mean_depth : ndarray(float64, ndim=1), shape (L,)
    step_width, step_tokens : ndarray(int64, ndim=1), shape (L,)
        The downsampled step log: end time, width, verified rows / width, tokens emitted.
    step_log_stride : int
        The log holds every ``stride``-th decode step.
    """

    policy: str
    options: dict
    arrival_s: np.ndarray
    prompt_tokens: np.ndarray
    output_tokens: np.ndarray
    first_token_s: np.ndarray
    finish_s: np.ndarray
    depth_histogram: np.ndarray
    counters: dict
    energy: dict
    end_s: float
    step_t_s: np.ndarray
    step_width: np.ndarray
    step_mean_depth: np.ndarray
    step_tokens: np.ndarray
    step_log_stride: int

    @property
    def requests(self) -> int:
        return int(self.arrival_s.shape[0])

    @property
    def ttft_s(self) -> np.ndarray:
        """Time to first token per request."""
        return self.first_token_s - self.arrival_s

    @property
    def e2e_s(self) -> np.ndarray:
        """Arrival to last token per request."""
        return self.finish_s - self.arrival_s

    @property
    def tpot_s(self) -> np.ndarray:
        """Time per output token after the first: ``(finish - first) / (tokens - 1)``; NaN for
        one-token requests, which have none."""
        with np.errstate(invalid="ignore", divide="ignore"):
            out = (self.finish_s - self.first_token_s) / (self.output_tokens - 1)
        out[self.output_tokens <= 1] = np.nan
        return out

    @property
    def energy_j(self) -> float:
        e = self.energy
        return e["decode_j"] + e["prefill_j"] + e["idle_j"]

    def summary(self, slo_ttft_s=None, slo_tpot_s=None) -> dict:
        """The JSON-ready summary (see :func:`specsim.sim.metrics.summarize`)."""
        from specsim.sim.metrics import summarize

        return summarize(self, slo_ttft_s=slo_ttft_s, slo_tpot_s=slo_tpot_s)


# -- the run --------------------------------------------------------------------------------------

def _request_arrays(requests):
    from specsim.sim._types import TraceRead

    if isinstance(requests, TraceRead):
        requests = requests.requests
    r = np.asarray(requests)
    if r.dtype.names is None or not {"arrival_s", "prompt_tokens", "output_tokens"} <= set(r.dtype.names):
        raise SimulationError(
            "requests must be a record array with arrival_s, prompt_tokens and output_tokens "
            f"(specsim.REQUEST_DT, as the trace readers return); got dtype {r.dtype}"
        )
    r = r.reshape(-1)
    arrival = np.ascontiguousarray(r["arrival_s"], dtype=np.float64)
    prompt = np.ascontiguousarray(r["prompt_tokens"], dtype=np.int64)
    output = np.ascontiguousarray(r["output_tokens"], dtype=np.int64)
    if arrival.shape[0]:
        if not np.isfinite(arrival).all():
            raise SimulationError(f"request {int(np.argmin(np.isfinite(arrival)))}: arrival_s is not finite")
        if (np.diff(arrival) < 0).any():
            i = int(np.argmax(np.diff(arrival) < 0)) + 1
            raise SimulationError(f"request {i}: arrivals must be sorted ascending (trace readers sort them)")
        if (output < 1).any():
            raise SimulationError(f"request {int(np.argmax(output < 1))}: output_tokens must be >= 1")
        if (prompt < 0).any():
            raise SimulationError(f"request {int(np.argmax(prompt < 0))}: prompt_tokens must be >= 0")
        from specsim._checks import request_size_problem

        problem = request_size_problem(prompt, output)
        if problem:
            raise SimulationError(problem)
    return arrival, prompt, output


def _acceptance_digits(trace, k_cap):
    """A trace's entries as int64, clamped to ``k_logged`` (with a warning where one is above it),
    and the depth cap lowered to ``k_logged``."""
    import warnings

    from specsim.errors import TraceWarning
    from specsim.sim.replay import AcceptanceTrace

    if not isinstance(trace, AcceptanceTrace):
        raise SimulationError(f"acceptance must be an AcceptanceTrace (specsim.load_acceptance_file(...).trace(NAME)), "
                              f"got {type(trace).__name__}")
    if trace.accepted.shape[0] == 0:
        raise SimulationError(f"acceptance trace {trace.name!r} has no entries")
    above = trace.above_k_logged
    if above:
        warnings.warn(f"acceptance trace {trace.name!r} ({trace.source}): {above} entries exceed k_logged = "
                      f"{trace.k_logged}; they count as {trace.k_logged}", TraceWarning, stacklevel=3)
    digits = np.minimum(trace.accepted.astype(np.int64), trace.k_logged)
    return np.ascontiguousarray(digits), min(k_cap, trace.k_logged)


def depth_by_width(policy: Policy, table, cal, opts: ServerOptions, max_batch: int, k_cap: int) -> np.ndarray:
    """The policy's draft depth at every width 0..max_batch, clamped as the server clamps it.

    ``propose`` and ``sequence`` use §4.1's kernel, ``goodput`` its kernel; the speculation cap
    applies to every policy; uniform policies are also held to ``row_budget // n`` rows.
    """
    from specsim.plan._kernels import cum_priors_nb, propose_table_nb
    from specsim.sim._engine_kernels import goodput_table_nb

    cap = _NO_CAP if opts.max_seqs is None else opts.max_seqs
    out = np.empty(max_batch + 1, dtype=np.int64)
    scratch = np.empty((table.max_k + 1, 4))
    if policy.kind in ("propose", "sequence", "goodput"):
        cum = np.empty(table.max_k + 1)
        cum_priors_nb(cal.priors, table.max_k, cum)
        if policy.kind == "goodput":
            goodput_table_nb(table.widths, table.costs, cum, cap, out, scratch)
        else:
            propose_table_nb(table.widths, table.costs, cum, opts.slack, cap, out, scratch)
    else:
        out[:] = [policy.depth_for_width(n) for n in range(max_batch + 1)]
    np.minimum(out, k_cap, out=out)
    widths = np.arange(max_batch + 1)
    out[widths > cap] = 0
    if policy.kind != "sequence" and opts.row_budget is not None:
        per_width = opts.row_budget // np.maximum(widths, 1)
        np.minimum(out, per_width, out=out)
    out[0] = 0
    return np.ascontiguousarray(out)


def simulate(requests, table, calibration, policy, *, options=None, acceptance=None, progress=None,
             **server_options) -> SimResult:
    """Simulate serving ``requests`` with one draft-depth policy (SPEC §6).

    Parameters
    ----------
    requests : ndarray(REQUEST_DT, ndim=1) or TraceRead
        Sorted by arrival.
    table : CostTable
    calibration : AcceptanceCalibration
    policy : str or Policy
        ``fixed:K``, ``schedule:...``, ``propose``, ``sequence`` or ``goodput``.
    options : ServerOptions, optional
        The server options as one value (instead of keywords).
    acceptance : AcceptanceTrace, optional
        Draw draft outcomes from a logged acceptance trace (SPEC §5) instead of the
        calibration: each (request, token index) step state takes the trace entry its hash
        picks, and draft ``j`` is accepted when ``j <=`` that entry (drafts are prefix-stable,
        so a deeper policy in the same state accepts the shallower one's run, extended). Depths
        are clamped to the trace's ``k_logged``; the planner sees no confidences (it uses the
        calibration's priors), and entries above ``k_logged`` warn and count as ``k_logged``.
    progress : callable, optional
        Called as ``progress(finished_requests)`` between chunks of steps (a long run is cut
        into chunks only when this is given; the result is the same either way).
    **server_options
        Fields of :class:`ServerOptions`.

    Returns
    -------
    SimResult
    """
    from specsim.calibration.calibration import bucket_cells
    from specsim.plan._kernels import width_costs_nb
    from specsim.plan._types import plan_workspace
    from specsim.sim import _engine_kernels as ek

    if options is None:
        opts = ServerOptions(**server_options)
    elif server_options:
        raise SimulationError("give the server options either as options=ServerOptions(...) or as keywords, not both")
    elif not isinstance(options, ServerOptions):
        raise SimulationError(f"options must be a ServerOptions, got {type(options).__name__}")
    else:
        opts = options
    pol = parse_policy(policy)
    arrival, prompt, output = _request_arrays(requests)
    n_req = arrival.shape[0]
    resolved = opts.resolved(table)
    max_batch = resolved["max_batch"]
    max_k = table.max_k
    k_cap = resolved["k_max"]
    row_budget = _NO_CAP if opts.row_budget is None else opts.row_budget
    digits = np.zeros(0, dtype=np.int64)
    resolved["acceptance_trace"] = None
    if acceptance is not None:
        digits, k_cap = _acceptance_digits(acceptance, k_cap)
        resolved["k_max"] = k_cap
        resolved["acceptance_trace"] = acceptance.name
    if k_cap > ek.MAX_POSITION:
        raise SimulationError(f"draft depth up to {k_cap}: the engine draws at most {ek.MAX_POSITION} drafts per "
                              f"sequence per step; set k_max <= {ek.MAX_POSITION}")

    depth_memo = depth_by_width(pol, table, calibration, opts, max_batch, k_cap)
    wcs = np.empty((max_batch + 1, max_k + 1, 4))
    for n in range(max_batch + 1):
        width_costs_nb(table.widths, table.costs, n, wcs[n])
    occ = occupancy_cdf(calibration, k_cap, opts.occupancy)
    conf_values = confidence_values(calibration)
    cells = bucket_cells(calibration.edges)

    kw = max(max_k, 1)
    istate = np.zeros(ek.N_ISTATE, dtype=np.int64)
    istate[ek.I_LOG_STRIDE] = 1
    fstate = np.zeros(ek.N_FSTATE)
    fstate[ek.F_T] = arrival[0] if n_req else 0.0
    active = np.zeros(max_batch, dtype=np.int64)
    emitted = np.zeros(n_req, dtype=np.int64)
    first_s = np.full(n_req, np.nan)
    finish_s = np.full(n_req, np.nan)
    depth_hist = np.zeros(max_k + 1, dtype=np.int64)
    log_t = np.zeros(opts.log_size)
    log_width = np.zeros(opts.log_size, dtype=np.int64)
    log_depth = np.zeros(opts.log_size)
    log_tokens = np.zeros(opts.log_size, dtype=np.int64)
    conf = np.full((max_batch, kw), np.nan, dtype=np.float32)
    n_conf = np.zeros(max_batch, dtype=np.int64)
    known = np.zeros(max_batch, dtype=np.int64)
    vdepth = np.zeros(max_batch, dtype=np.int64)
    verdict = np.zeros((max_batch, kw), dtype=np.bool_)
    gains, owner, counts, wc = plan_workspace(max_batch, max_k)

    step_limit = PROGRESS_CHUNK if progress is not None else _NO_CAP
    while True:
        done = ek.simulate_nb(arrival, prompt, output, table.widths, table.costs, calibration.edges, cells,
                              calibration.p_accept, calibration.priors, occ, conf_values, depth_memo,
                              pol.kind == "sequence", wcs, digits, opts.slack, max_batch, k_cap, row_budget,
                              opts.prefill_ms_per_token, opts.prefill_j_per_token, opts.idle_w,
                              np.uint64(opts.seed), step_limit, istate, fstate, active, emitted, first_s, finish_s,
                              depth_hist, log_t, log_width, log_depth, log_tokens, conf, n_conf, known, vdepth,
                              verdict, gains, owner, counts, wc)
        if progress is not None:
            progress(int(istate[ek.I_FINISHED]))
        if done:
            break

    if n_req and int(emitted.sum()) != int(output.sum()):
        raise SimulationError("internal: emitted tokens differ from the trace's output tokens")  # broken invariant
    count = int(istate[ek.I_LOG_COUNT])
    counters = {
        "decode_steps": int(istate[ek.I_DECODE_STEPS]),
        "prefill_steps": int(istate[ek.I_PREFILL_STEPS]),
        "speculative_steps": int(istate[ek.I_SPEC_STEPS]),
        "sequence_steps": int(istate[ek.I_SEQ_STEPS]),
        "emitted_tokens": int(istate[ek.I_EMITTED]),
        "accepted_drafts": int(istate[ek.I_ACCEPTED]),
        "drafted": int(istate[ek.I_DRAFTED]),
        "verified_rows": int(istate[ek.I_ROWS]),
    }
    energy = {
        "decode_j": float(fstate[ek.F_DECODE_J]),
        "prefill_j": float(fstate[ek.F_PREFILL_J]),
        "idle_j": float(fstate[ek.F_IDLE_J]),
        "decode_s": float(fstate[ek.F_DECODE_S]),
        "prefill_s": float(fstate[ek.F_PREFILL_S]),
        "idle_s": float(fstate[ek.F_IDLE_S]),
    }
    return SimResult(
        policy=str(pol), options=resolved, arrival_s=arrival, prompt_tokens=prompt, output_tokens=output,
        first_token_s=first_s, finish_s=finish_s, depth_histogram=depth_hist, counters=counters, energy=energy,
        end_s=float(fstate[ek.F_T]), step_t_s=log_t[:count].copy(), step_width=log_width[:count].copy(),
        step_mean_depth=log_depth[:count].copy(), step_tokens=log_tokens[:count].copy(),
        step_log_stride=int(istate[ek.I_LOG_STRIDE]),
    )


def simulate_runs(requests, table, calibration, runs, options, *, progress=None, acceptance=None) -> list:
    """Simulate every ``(policy, slack)`` of ``runs`` on the same requests, in parallel threads
    (the engine kernel releases the GIL), and return the results in ``runs`` order.

    ``options`` is the shared :class:`ServerOptions` (its slack is replaced per run); ``progress``,
    if given, has ``update(n)`` and counts finished requests over all runs.

    Ctrl-C (or any error) in the calling thread stops every run at its next chunk of steps
    (well within a second) and is raised again; no partial result is returned.
    """
    import os
    import threading
    from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
    from dataclasses import replace

    lock = threading.Lock()
    stop = threading.Event()

    def one(item):
        pol, s = item
        seen = [0]

        def tick(finished):
            if stop.is_set():
                raise _Stopped
            if progress is not None:
                with lock:
                    progress.update(finished - seen[0])
            seen[0] = finished

        return simulate(requests, table, calibration, pol, options=replace(options, slack=s), acceptance=acceptance,
                        progress=tick)

    workers = min(len(runs), os.cpu_count() or 1)
    if workers <= 1:
        return [one(item) for item in runs]
    pool = ThreadPoolExecutor(max_workers=workers)
    try:
        futures = [pool.submit(one, item) for item in runs]
        pending = futures
        while pending:
            # Short waits keep the main thread where Ctrl-C reaches it.
            _, pending = wait(pending, timeout=0.1, return_when=FIRST_EXCEPTION)
            failed = next((f for f in futures if f.done() and f.exception() is not None), None)
            if failed is not None:
                failed.result()  # raises the run's error; the others stop below
        return [f.result() for f in futures]
    finally:
        stop.set()
        pool.shutdown(wait=True, cancel_futures=True)


class _Stopped(Exception):
    """Raised in a worker's progress callback to end its run when the caller stopped."""
