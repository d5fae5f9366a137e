"""The per-request acceptance spread: its model, its fit and its checks (docs/calibration.md#per-request-spread).

Request ``r`` draws ``z_r ~ N(0, 1)`` once. A draft of it whose population acceptance is ``p``
is accepted with probability ``sigmoid(c(p, sd) + sd * z_r)``, where the *centre* ``c(p, sd)``
solves ``E_z[sigmoid(c + sd z)] = p``: every request is more or less lucky by the same log-odds
at every position, and the mean over requests stays ``p``. ``sd = 0`` is the i.i.d. model
(``c = logit(p)``).

The fit is maximum likelihood over ``sd`` from per-request data (:class:`RequestData`):

- per position (accept-run histograms or per-step arrays of one request, a per-draft log with a
  ``request`` column): request ``r`` reached position ``j`` ``n_rj`` times and accepted it
  ``a_rj`` times; its likelihood is ``E_z[prod_j Binomial(a_rj | n_rj, sigmoid(c_j + sd z))]``;
- totals only (accepted drafts over verify steps at depth ``d``): one rate ``q = sigmoid(c + sd
  z)`` at every position, and the request's mean accepted drafts per step taken as normal with
  the truncated-geometric mean ``q + .. + q^d`` and variance over its steps.

For every candidate ``sd`` the centres are re-fitted (Newton steps on the profile likelihood,
started at the pooled rates' centres), the profile log-likelihood is maximised over ``sd`` in
``[0, MAX_REQUEST_SPREAD]``, and the 95% interval is where twice the drop from the maximum stays
under 3.84 (the chi-square quantile). ``standard_error`` is the interval's width over 2 x 1.96.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np

from specsim import _toml
from specsim._checks import MAX_REQUEST_SPREAD, MIN_SPREAD_REQUESTS, is_int, number_problem, show
from specsim._stats import Z95
from specsim.calibration._types import RequestSpread
from specsim.errors import CalibrationError

# Gauss-Hermite nodes of the centre solve: sigmoid(c + sd z) turns over within 1 / sd of z, so
# a wide spread needs many nodes; 200 give the mean to 3e-10 at every sd up to MAX_REQUEST_SPREAD
# (48 would leave 3e-5 at sd = 4).
SOLVE_NODES = 200
# The likelihood's z grid: a request with many steps has a sharp posterior over z, which a fixed
# Gauss-Hermite rule misses between its nodes; an even grid of 0.05 over [-6, 6] does not.
_Z = np.linspace(-6.0, 6.0, 241)
_LOG_W = -0.5 * _Z ** 2 - math.log(np.exp(-0.5 * _Z ** 2).sum())
# Twice the log-likelihood drop at the edge of a 95% interval: the chi-square(1) 0.95 quantile.
CHI2_95 = 3.841458820694124
# The profile's coarse grid over sd (then refined around the maximum and the interval's ends).
_SD_GRID = np.linspace(0.0, MAX_REQUEST_SPREAD, 41)
# Request-spread settings of ``--request-spread``.
SPREAD_MODES = ("auto", "require", "off")
# The per-request telemetry formats (one record per request).
REQUEST_FORMATS = ("vllm-request", "sglang-request", "trtllm-request")



@functools.cache
def _solve_nodes() -> tuple:
    """The centre solve's Gauss-Hermite nodes and weights (summing to 1), made on first use: their
    eigenvalue solve took 0.03-0.07 s of every command's start at import, spread or not."""
    nodes, weights = np.polynomial.hermite_e.hermegauss(SOLVE_NODES)
    return nodes, weights / weights.sum()


def _sigmoid(x):
    with np.errstate(over="ignore"):
        return 1.0 / (1.0 + np.exp(-x))


def centres(p, sd: float) -> np.ndarray:
    """The centre of every rate of ``p`` under spread ``sd``: ``c`` with ``E_z[sigmoid(c + sd z)] =
    p`` on the fixed Gauss-Hermite grid (bisection, 200 halvings at most); ``-inf`` for 0 and
    ``inf`` for 1, so those rates stay 0 and 1 for every request.

    Parameters
    ----------
    p : array_like of float in [0, 1]
    sd : float

    Returns
    -------
    ndarray(float64)
        The shape of ``p``.
    """
    p = np.asarray(p, dtype=np.float64)
    flat = p.reshape(-1)
    out = np.empty_like(flat)
    for i, v in enumerate(flat):
        if v <= 0.0:
            out[i] = -math.inf
        elif v >= 1.0:
            out[i] = math.inf
        elif sd == 0.0:
            out[i] = math.log(v / (1.0 - v))
        else:
            out[i] = _centre(v, float(sd))
    return out.reshape(p.shape)


def _centre(p: float, sd: float) -> float:
    nodes, weights = _solve_nodes()
    lo, hi = -60.0, 60.0
    x = sd * nodes
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if mid in (lo, hi):
            break
        if float(weights @ _sigmoid(mid + x)) < p:
            lo = mid
        else:
            hi = mid
    return 0.5 * (lo + hi)


# -- per-request data ------------------------------------------------------------------------------

@dataclass(frozen=True)
class RequestData:
    """Per-request acceptance, one row per request.

    ``kind == "positions"``: ``reached`` and ``accepted`` int64[R, J], the times request ``r``
    reached and accepted position ``j + 1``. ``kind == "totals"``: ``steps`` float64[R] verify
    steps, ``mean`` float64[R] accepted drafts per step and ``depth`` int64[R] drafts per step.
    ``source`` names where they came from.
    """

    kind: str
    source: str
    reached: np.ndarray = None
    accepted: np.ndarray = None
    steps: np.ndarray = None
    mean: np.ndarray = None
    depth: np.ndarray = None

    @property
    def requests(self) -> int:
        return int((self.reached if self.kind == "positions" else self.steps).shape[0])


def positions_data(reached, accepted, source: str = "<requests>") -> RequestData:
    """:class:`RequestData` from per-request, per-position counts (requests that never reached
    position 1 are dropped)."""
    n = np.asarray(reached, dtype=np.int64)
    a = np.asarray(accepted, dtype=np.int64)
    if n.ndim != 2 or n.shape != a.shape or (a < 0).any() or (a > n).any():
        raise CalibrationError(f"{source}: per-request counts must be matching [requests, positions] arrays with "
                               "0 <= accepted <= reached")
    keep = n.sum(axis=1) > 0 if n.shape[1] else np.zeros(n.shape[0], bool)
    return RequestData("positions", source, reached=np.ascontiguousarray(n[keep]),
                       accepted=np.ascontiguousarray(a[keep]))


def totals_data(steps, mean, depth, source: str = "<requests>") -> RequestData:
    """:class:`RequestData` from per-request totals: verify steps, mean accepted drafts per step
    and drafts per step (requests without steps are dropped)."""
    s = np.asarray(steps, dtype=np.float64).reshape(-1)
    m = np.asarray(mean, dtype=np.float64).reshape(-1)
    d = np.asarray(depth, dtype=np.int64).reshape(-1)
    if not (s.shape == m.shape == d.shape) or not np.isfinite(s).all() or not np.isfinite(m).all():
        raise CalibrationError(f"{source}: per-request totals must be matching finite arrays")
    bad = np.flatnonzero((m < 0) | (m > d) | (d < 1))
    if bad.shape[0]:
        i = int(bad[0])
        raise CalibrationError(f"{source}: request {i + 1} (in read order) has {m[i]:g} accepted drafts per step at "
                               f"depth {int(d[i])}: a mean must be in [0, the depth], the depth >= 1")
    keep = s > 0
    return RequestData("totals", source, steps=s[keep], mean=m[keep], depth=d[keep])


def steps_positions(steps: dict, depth: int):
    """Reached and accepted counts of positions ``1..depth`` of one request's ``(drafts,
    accepted run) -> count`` steps."""
    reached = [0] * depth
    accepted = [0] * depth
    for (d, a), c in steps.items():
        for j in range(1, min(d, depth) + 1):
            if a >= j - 1:
                reached[j - 1] += c
            if a >= j:
                accepted[j - 1] += c
    return reached, accepted


def records_data(fmt: str, records, depth=None, source: str = "<telemetry>"):
    """The per-request data of telemetry records, or ``(None, why)`` when they hold none.

    Only the per-request formats (:data:`REQUEST_FORMATS`) have one record per request. Records
    with steps (histograms, per-step arrays) give per-position counts; if there are none, records
    with accepted drafts over verify steps at a known depth (the record's, else ``depth``) give
    totals.

    Returns
    -------
    (RequestData or None, str)
        The data and an empty string, or None and why there is none.
    """
    if fmt not in REQUEST_FORMATS:
        return None, f"{fmt} has no per-request records (per-request formats: {', '.join(REQUEST_FORMATS)})"
    stepped = []
    for r in records:
        if r.kind != "steps":
            continue
        if r.depth_told:
            stepped.append(r.steps)
            continue
        # A histogram grown to the largest accepted run (SGLang's): its steps drafted the depth
        # the record (proposed drafts over verify steps) or ``depth`` tells; a step that accepted
        # its whole run below it then rejected the next draft, which a shorter key would hide.
        d = r.depth if r.depth is not None else depth
        if d is None:
            return None, (f"{fmt}: a request's histogram does not tell its drafts per step (give --depth K, the "
                          "serve's --speculative-num-steps)")
        stepped.append({(d, a): c for (_, a), c in r.steps.items()})
    if stepped:
        deepest = max(d for steps in stepped for d, _ in steps)
        rows = [steps_positions(steps, deepest) for steps in stepped]
        return positions_data([n for n, _ in rows], [a for _, a in rows], source), ""
    steps, mean, depths = [], [], []
    for r in records:
        if r.kind != "mean":
            continue
        d = r.depth if r.depth is not None else depth
        if d is None or d < 1:
            continue
        if r.n_steps is not None:
            steps.append(float(r.n_steps))
            mean.append(float(r.mean_accepted))
        elif r.drafted_tokens is not None and r.accepted_tokens is not None:
            steps.append(r.drafted_tokens / d)
            mean.append(r.accepted_tokens * d / r.drafted_tokens)
        else:
            continue
        depths.append(d)
    if not steps:
        return None, f"{fmt}: no record tells a request's accepted drafts per step at a known depth (--depth K)"
    return totals_data(steps, mean, depths, source), ""


def drafts_data(request, step, sequence, position, accepted, source: str = "<drafts>") -> RequestData:
    """Per-request, per-position counts of a per-draft log with a ``request`` column (chains
    already checked by :func:`specsim.calibration.logs.bin_drafts`: positions 1, 2, .. per chain).
    A draft counts as reached when every draft before it in its chain was accepted."""
    request, step, sequence, position, accepted = (np.asarray(c, dtype=np.int64).reshape(-1)
                                                   for c in (request, step, sequence, position, accepted))
    if request.shape[0] == 0:
        return positions_data(np.zeros((0, 0), np.int64), np.zeros((0, 0), np.int64), source)
    order = np.lexsort((position, sequence, step))
    st, sq, pos, acc, req = step[order], sequence[order], position[order], accepted[order] != 0, request[order]
    start = np.ones(st.shape[0], bool)
    start[1:] = (st[1:] != st[:-1]) | (sq[1:] != sq[:-1])
    mixed = ~start[1:] & (req[1:] != req[:-1])
    if mixed.any():
        i = int(mixed.argmax()) + 1
        raise CalibrationError(f"{source}: the chain of step {st[i]}, sequence {sq[i]} names requests {req[i - 1]} and "
                               f"{req[i]} ({int(mixed.sum()):,} such row(s)): a chain is one request's drafts, so every "
                               "row of it names the same request")
    chain = np.cumsum(start) - 1
    # Rejections strictly before each row within its chain: a draft is reached when there are none.
    rej = np.cumsum(~acc) - (~acc)
    first = np.flatnonzero(start)
    reached = (rej - rej[first][chain]) == 0
    ids, r_index = np.unique(req, return_inverse=True)
    depth = int(pos.max())
    n = np.zeros((ids.shape[0], depth), np.int64)
    a = np.zeros((ids.shape[0], depth), np.int64)
    np.add.at(n, (r_index[reached], pos[reached] - 1), 1)
    np.add.at(a, (r_index[reached & acc], pos[reached & acc] - 1), 1)
    return positions_data(n, a, source)


# -- the fit ----------------------------------------------------------------------------------------

@dataclass(frozen=True)
class SpreadFit:
    """A fitted spread: the value a calibration stores, its 95% interval, and the profile
    log-likelihood on the coarse grid (``grid``, ``profile``)."""

    spread: RequestSpread
    interval: tuple
    grid: tuple
    profile: tuple


class _Positions:
    """The profile likelihood of per-position data: centres re-fitted for each sd."""

    def __init__(self, data: RequestData):
        n, a = data.reached.astype(np.float64), data.accepted.astype(np.float64)
        used = n.sum(axis=0) > 0
        self.n, self.a = n[:, used], a[:, used]
        self.f = self.n - self.a
        tot_n, tot_a = self.n.sum(axis=0), self.a.sum(axis=0)
        # Pooled rates kept off 0 and 1 (a position never rejected carries no spread information,
        # and its centre would run off to infinity).
        self.pooled = np.clip(tot_a / tot_n, 0.5 / tot_n, 1.0 - 0.5 / tot_n)
        self.tot_a = tot_a
        self.last = None  # (sd, centres) of the last call: the next starts from its centres, moved

    def __call__(self, sd: float) -> float:
        c = centres(self.pooled, sd)
        if self.last is not None:
            # The fitted centres move with sd about as the pooled rates' centres do.
            prev_sd, prev_c = self.last
            c = prev_c + (c - centres(self.pooled, prev_sd))
        ll = -math.inf
        for _ in range(60):
            eta = c[None, :] + sd * _Z[:, None]  # [Q, J]
            log_s = -np.logaddexp(0.0, -eta)
            log_f = -np.logaddexp(0.0, eta)
            joint = self.a @ log_s.T + self.f @ log_f.T + _LOG_W[None, :]  # [R, Q]
            top = joint.max(axis=1, keepdims=True)
            lik = top[:, 0] + np.log(np.exp(joint - top).sum(axis=1))
            ll = float(lik.sum())
            post = np.exp(joint - lik[:, None])  # [R, Q]
            reach = post.T @ self.n  # [Q, J]: expected reaches at each z
            s = np.exp(log_s)
            grad = self.tot_a - (s * reach).sum(axis=0)
            hess = (s * (1.0 - s) * reach).sum(axis=0)
            step = np.clip(grad / np.maximum(hess, 1e-12), -2.0, 2.0)
            c = c + step
            if np.abs(step).max() < 1e-6:
                break
        self.last = (sd, c)
        return ll


class _Totals:
    """The profile likelihood of per-request totals (normal approximation, one rate)."""

    def __init__(self, data: RequestData):
        self.steps, self.mean, self.depth = data.steps, data.mean, data.depth
        self.depths = np.unique(self.depth)
        self.last_c = None  # the best centre of the last call

    def loglik(self, c: float, sd: float) -> float:
        q = _sigmoid(c + sd * _Z)  # [Q]
        mu = np.zeros((self.depths.shape[0], _Z.shape[0]))
        sq = np.zeros_like(mu)
        for i, d in enumerate(self.depths):
            powers = q[None, :] ** np.arange(1, d + 1)[:, None]  # [d, Q]
            mu[i] = powers.sum(axis=0)
            sq[i] = ((2 * np.arange(1, d + 1) - 1)[:, None] * powers).sum(axis=0)
        row = np.searchsorted(self.depths, self.depth)
        m, var = mu[row], sq[row] - mu[row] ** 2  # [R, Q]
        # The per-step variance over the request's steps, plus the rounding of a mean of whole counts.
        v = np.maximum(var, 0.0) / self.steps[:, None] + 1.0 / (12.0 * self.steps[:, None] ** 2)
        joint = -0.5 * (self.mean[:, None] - m) ** 2 / v - 0.5 * np.log(2 * math.pi * v) + _LOG_W[None, :]
        top = joint.max(axis=1, keepdims=True)
        return float((top[:, 0] + np.log(np.exp(joint - top).sum(axis=1))).sum())

    def __call__(self, sd: float) -> float:
        if self.last_c is None:
            c, ll = _golden(lambda c: self.loglik(c, sd), -15.0, 15.0, iters=45)
        else:  # the best centre moves little from one sd to the next
            c, ll = _golden(lambda c: self.loglik(c, sd), self.last_c - 2.0, self.last_c + 2.0, iters=28)
        self.last_c = c
        return ll


def fit_spread(data: RequestData) -> SpreadFit:
    """Fit the spread's ``logit_sd`` by maximum likelihood (see the module docstring).

    Raises
    ------
    CalibrationError
        Fewer than ``MIN_SPREAD_REQUESTS`` requests with data.
    """
    if not isinstance(data, RequestData):
        raise CalibrationError(f"fit_spread takes a RequestData (positions_data or totals_data), got {show(data)}")
    count = data.requests
    if count < MIN_SPREAD_REQUESTS:
        raise CalibrationError(f"{data.source}: {count} request(s) with acceptance data; a request spread is fitted "
                               f"from at least {MIN_SPREAD_REQUESTS}: import more requests, or pass "
                               "--request-spread off")
    profile = _Positions(data) if data.kind == "positions" else _Totals(data)
    grid = [float(profile(float(sd))) for sd in _SD_GRID]
    i = int(np.argmax(grid))
    lo_b = float(_SD_GRID[max(i - 1, 0)])
    hi_b = float(_SD_GRID[min(i + 1, _SD_GRID.shape[0] - 1)])
    best_sd, best = _golden(profile, lo_b, hi_b)
    if grid[i] > best:
        best_sd, best = float(_SD_GRID[i]), grid[i]
    cut = best - 0.5 * CHI2_95
    lo = 0.0 if profile(0.0) >= cut else _crossing(profile, 0.0, best_sd, cut, grid, rising=True)
    top = MAX_REQUEST_SPREAD
    hi = top if profile(top) >= cut else _crossing(profile, best_sd, top, cut, grid, rising=False)
    se = (hi - lo) / (2.0 * Z95)
    source = data.source
    spread = RequestSpread(round(float(best_sd), 4), round(float(se), 4), count, source)
    return SpreadFit(spread, (float(lo), float(hi)), tuple(float(s) for s in _SD_GRID), tuple(grid))


def _golden(f, a: float, b: float, iters: int = 22):
    """The maximum of ``f`` on ``[a, b]`` by golden-section search: ``(x, f(x))``."""
    g = (math.sqrt(5.0) - 1.0) / 2.0
    c, d = b - g * (b - a), a + g * (b - a)
    fc, fd = f(c), f(d)
    for _ in range(iters):
        if fc >= fd:
            b, d, fd = d, c, fc
            c = b - g * (b - a)
            fc = f(c)
        else:
            a, c, fc = c, d, fd
            d = a + g * (b - a)
            fd = f(d)
    return (c, fc) if fc >= fd else (d, fd)


def _crossing(f, a: float, b: float, cut: float, grid, rising: bool, iters: int = 18) -> float:
    """Where ``f`` crosses ``cut`` between ``a`` and ``b`` (bisection; ``f`` rises through ``cut``
    from ``a`` when ``rising``, else falls through it towards ``b``), bracketed first on the coarse grid."""
    sds = _SD_GRID
    inside = [s for s, v in zip(sds, grid) if a <= s <= b]
    values = [v for s, v in zip(sds, grid) if a <= s <= b]
    if rising:
        below = [s for s, v in zip(inside, values) if v < cut]
        a = max(below) if below else a
        above = [s for s in inside if s > a]
        b = min(above) if above else b
    else:
        below = [s for s, v in zip(inside, values) if v < cut]
        b = min(below) if below else b
        above = [s for s in inside if s < b]
        a = max(above) if above else a
    for _ in range(iters):
        mid = 0.5 * (a + b)
        if (f(mid) >= cut) == rising:
            b = mid
        else:
            a = mid
    return 0.5 * (a + b)


def resolve_spread(mode: str, data, why: str = ""):
    """The spread ``--request-spread MODE`` gives for per-request ``data`` (None when the input
    has none, ``why`` saying so): ``(RequestSpread or None, note)``.

    ``off`` never fits; ``auto`` fits when there are at least ``MIN_SPREAD_REQUESTS`` requests and
    otherwise returns None with a note saying why; ``require`` refuses instead of skipping.

    Raises
    ------
    CalibrationError
        ``require`` without enough per-request data; an unknown mode.
    """
    if mode not in SPREAD_MODES:
        raise CalibrationError(f"--request-spread {mode!r} is not one of {', '.join(SPREAD_MODES)}")
    if mode == "off":
        return None, ""
    if data is not None and data.requests < MIN_SPREAD_REQUESTS:
        why = (f"{data.source}: {data.requests} request(s) with acceptance data; a request spread is fitted from at "
               f"least {MIN_SPREAD_REQUESTS}")
        data = None
    if data is None:
        if mode == "require":
            raise CalibrationError(f"--request-spread require: no request spread can be fitted: {why}")
        return None, f"request spread not fitted: {why}"
    fit = fit_spread(data)
    lo, hi = fit.interval
    sp = fit.spread
    return sp, (f"request spread logit_sd {sp.logit_sd:.3f} +- {sp.standard_error:.3f} (95% interval {lo:.3f} to "
                f"{hi:.3f}) from {sp.requests} requests")


# -- checks ------------------------------------------------------------------------------------------

def spread_problems(raw) -> list:
    """What is wrong with a ``[request_spread]`` table (empty when nothing is); values are shown
    as the file writes them (``true``, not ``True``)."""
    if not isinstance(raw, dict):
        return [f"`request_spread` is a {type(raw).__name__}, not a table (logit_sd, standard_error, requests, "
                "source)"]
    problems = []
    known = ("logit_sd", "standard_error", "requests", "source")
    for name in known:
        if name not in raw:
            problems.append(f"[request_spread] has no `{name}`")
    extra = [k for k in raw if k not in known]
    if extra:
        problems.append(f"[request_spread] has unknown key(s) {', '.join(map(str, extra))}: it holds "
                        f"{', '.join(known)}")
    for name, high in (("logit_sd", MAX_REQUEST_SPREAD), ("standard_error", math.inf)):
        if name in raw:
            p = number_problem(raw[name], f"[request_spread] {name}", 0.0, high, render=_as_written)
            if p:
                problems.append(p)
    if "requests" in raw and not (is_int(raw["requests"]) and raw["requests"] >= MIN_SPREAD_REQUESTS):
        problems.append(f"[request_spread] requests = {show(raw['requests'], render=_as_written)} must be a whole "
                        f"number >= {MIN_SPREAD_REQUESTS} (the requests it was fitted on; a spread is fitted from "
                        f"{MIN_SPREAD_REQUESTS} or more)")
    if "source" in raw and not isinstance(raw["source"], str):
        problems.append(f"[request_spread] source = {show(raw['source'], render=_as_written)} must be a string")
    return problems


def _as_written(value) -> str:
    """A value as a calibration file writes it (TOML), or its repr when TOML has no such value."""
    try:
        return _toml.scalar(value)
    except (TypeError, ValueError, OverflowError):
        return repr(value)


def check_spread(value, source: str = "<calibration>"):
    """``value`` as a :class:`RequestSpread` (None stays None), or :class:`CalibrationError`."""
    if value is None:
        return None
    if not isinstance(value, RequestSpread):
        raise CalibrationError(f"{source}: spread must be a RequestSpread, got {type(value).__name__}")
    problems = spread_problems(dict(logit_sd=value.logit_sd, standard_error=value.standard_error,
                                    requests=value.requests, source=value.source))
    if problems:
        raise CalibrationError(f"{source}: the request spread is refused", problems)
    # + 0.0: a -0 read from a file is 0 (it printed "logit_sd -0").
    return RequestSpread(float(value.logit_sd) + 0.0, float(value.standard_error) + 0.0, int(value.requests),
                         value.source)
