"""A seeded synthetic request trace: an arrival process and two length distributions.

Arrivals: ``poisson`` (exponential gaps at ``rate_per_s``) or ``gamma`` (gamma gaps with mean
``1 / rate_per_s`` and coefficient of variation ``cv``: ``cv > 1`` is burstier than Poisson,
``cv < 1`` more regular, ``cv = 1`` is Poisson in distribution). The first request arrives at 0.
Lengths: :class:`LogNormalLengths` or :class:`EmpiricalLengths` (resampled with replacement,
e.g. from a real trace's column). Every draw comes from one ``numpy.random.Generator(PCG64(seed))``
in a fixed order (gaps, prompts, outputs), so a seed gives the same trace on every machine.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from specsim._checks import is_int
from specsim.errors import TraceError
from specsim.traces._types import TraceRead
from specsim.traces._types import ParsedRows, TraceCut
from specsim.traces.readers import finish_trace

ARRIVALS = ("poisson", "gamma")


@dataclass(frozen=True)
class LogNormalLengths:
    """Token counts ``round(exp(N(ln median, sigma**2)))``, clipped to ``[1, max_tokens]``."""

    median: float
    sigma: float
    max_tokens: int = 1 << 20

    def __post_init__(self):
        if not (math.isfinite(self.median) and self.median >= 1):
            raise TraceError(f"lognormal lengths: median must be a finite number >= 1, got {self.median!r}")
        if not (math.isfinite(self.sigma) and self.sigma >= 0):
            raise TraceError(f"lognormal lengths: sigma must be a finite number >= 0, got {self.sigma!r}")
        if self.max_tokens < 1:
            raise TraceError(f"lognormal lengths: max_tokens must be >= 1, got {self.max_tokens!r}")

    def sample(self, rng, n):
        x = rng.lognormal(math.log(self.median), self.sigma, n)
        return np.clip(np.rint(x), 1, self.max_tokens).astype(np.int64)


@dataclass(frozen=True, eq=False)
class EmpiricalLengths:
    """Token counts drawn uniformly, with replacement, from ``values`` (each >= 1)."""

    values: np.ndarray

    def __post_init__(self):
        v = np.ascontiguousarray(self.values, dtype=np.int64).reshape(-1)
        if v.shape[0] == 0:
            raise TraceError("empirical lengths: no values to resample from")
        if (v < 1).any():
            raise TraceError("empirical lengths: every value must be >= 1 token")
        v.flags.writeable = False
        object.__setattr__(self, "values", v)

    def sample(self, rng, n):
        return self.values[rng.integers(0, self.values.shape[0], n)]


# Generated requests per call: 24 bytes each, so at most about 2.4 GB of trace.
MAX_REQUESTS = 100_000_000


# The coefficients of variation a gamma arrival process may have.
MIN_CV, MAX_CV = 1e-3, 1e3

def synthetic_trace(requests, rate_per_s, *, arrival="poisson", cv=1.0, prompt=None, output=None, seed=0,
                    rate_scale=1.0, limit=None, window=None) -> TraceRead:
    """Generate a request trace.

    Parameters
    ----------
    requests : int
        Requests to generate (>= 0).
    rate_per_s : float
        Mean arrival rate, requests per second (> 0).
    arrival : {"poisson", "gamma"}
    cv : float
        Coefficient of variation of the gaps for ``gamma`` (> 0); must be 1 for ``poisson``.
    prompt, output : LogNormalLengths or EmpiricalLengths, optional
        Defaults: lognormal with median 512, sigma 1 (prompt) and median 128, sigma 1 (output).
    seed : int
    rate_scale, limit, window
        As in :func:`specsim.traces.read_trace`.

    Returns
    -------
    TraceRead
        Format ``synthetic``.
    """
    if not is_int(requests) or requests < 0:
        raise TraceError(f"synthetic trace: requests must be an integer >= 0, got {requests!r}")
    if requests > MAX_REQUESTS:
        raise TraceError(f"synthetic trace: {requests} requests is more than this generator makes at once "
                         f"({MAX_REQUESTS}); split the run")
    rate = float(rate_per_s)
    if not (math.isfinite(rate) and rate > 0):
        raise TraceError(f"synthetic trace: rate must be a finite number of requests per second > 0, got {rate_per_s!r}")
    if arrival not in ARRIVALS:
        raise TraceError(f"synthetic trace: arrival process {arrival!r} is not one of {', '.join(ARRIVALS)}")
    cv = float(cv)
    # Past these the gamma's shape (1 / cv**2) underflows to 0 or overflows: no traffic is that
    # bursty (bursty public traces measure cv 2 to 10) or that regular.
    if not (math.isfinite(cv) and MIN_CV <= cv <= MAX_CV):
        raise TraceError(f"synthetic trace: cv must be a number in {MIN_CV:g}..{MAX_CV:g}, got {cv!r}")
    if arrival == "poisson" and cv != 1.0:
        raise TraceError(f"synthetic trace: Poisson arrivals have cv 1, got cv={cv}; use arrival gamma for other cv")
    prompt = LogNormalLengths(512.0, 1.0) if prompt is None else prompt
    output = LogNormalLengths(128.0, 1.0) if output is None else output
    try:
        rng = np.random.Generator(np.random.PCG64(seed))
    except (TypeError, ValueError) as e:
        raise TraceError(f"synthetic trace: seed {seed!r} is not a non-negative integer") from e
    n = int(requests)
    if arrival == "poisson":
        gaps = rng.exponential(1.0 / rate, n)
    else:
        shape = 1.0 / (cv * cv)
        gaps = rng.gamma(shape, 1.0 / (rate * shape), n)
    times = np.empty(n)
    if n:
        gaps[0] = 0.0  # the trace starts with its first request
        np.cumsum(gaps, out=times)
    p = prompt.sample(rng, n)
    o = output.sample(rng, n)
    source = f"synthetic({arrival}, rate={rate:g}/s, cv={cv:g}, seed={seed})"
    return finish_trace(ParsedRows(times, p, o), "synthetic", source, cut=TraceCut(rate_scale, limit, window))


def parse_synthetic(text, lengths_from=None) -> dict:
    """Keyword arguments of :func:`synthetic_trace` from ``key=value`` text.

    ``requests=N,rate=R[,arrival=poisson|gamma][,cv=C][,prompt=L][,output=L][,seed=S]`` where
    ``L`` is ``lognormal:MEDIAN:SIGMA`` or ``empirical`` (resampled from the matching column of
    ``lengths_from``, a :class:`TraceRead` or a REQUEST_DT array).
    """
    spec = {}
    for part in (p.strip() for p in str(text).split(",")):
        if not part:
            continue
        key, sep, value = part.partition("=")
        key, value = key.strip(), value.strip()
        if not sep or key not in ("requests", "rate", "arrival", "cv", "prompt", "output", "seed"):
            raise TraceError(
                f"synthetic trace: {part!r} is not one of requests=N, rate=R, arrival=poisson|gamma, cv=C, "
                "prompt=lognormal:MEDIAN:SIGMA|empirical, output=..., seed=S"
            )
        if key in spec:
            raise TraceError(f"synthetic trace: {key}= is given twice ({key}={spec[key]} and {key}={value}); give it once")
        spec[key] = value
    for need in ("requests", "rate"):
        if need not in spec:
            raise TraceError(f"synthetic trace: {need}= is required (e.g. requests=10000,rate=5)")
    try:
        kwargs = {"requests": int(spec["requests"]), "rate_per_s": float(spec["rate"]),
                  "arrival": spec.get("arrival", "poisson"), "cv": float(spec.get("cv", 1.0)),
                  "seed": int(spec.get("seed", 0))}
    except ValueError as e:
        raise TraceError(f"synthetic trace: {e}") from None
    for role, column in (("prompt", "prompt_tokens"), ("output", "output_tokens")):
        if role not in spec:
            continue
        value = spec[role]
        if value == "empirical":
            if lengths_from is None:
                raise TraceError(f"synthetic trace: {role}=empirical needs a trace to resample lengths from")
            reqs = lengths_from.requests if isinstance(lengths_from, TraceRead) else lengths_from
            kwargs[role] = EmpiricalLengths(reqs[column])
            continue
        name, _, rest = value.partition(":")
        args = rest.split(":") if rest else []
        if name != "lognormal" or len(args) != 2:
            raise TraceError(f"synthetic trace: {role}={value!r} is not lognormal:MEDIAN:SIGMA or empirical")
        try:
            kwargs[role] = LogNormalLengths(float(args[0]), float(args[1]))
        except ValueError:
            raise TraceError(f"synthetic trace: {role}={value!r}: MEDIAN and SIGMA must be numbers") from None
    return kwargs
