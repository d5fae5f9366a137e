"""The figures behind one ``propose`` decision, per depth, as ``specsim plan`` prints them."""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np
from specsim.plan._kernels import DJ, DMS, VJ, VMS, width_costs_nb


@dataclass(frozen=True)
class DepthFigures:
    """One candidate depth at one width.

    Attributes
    ----------
    k : int
        Draft depth.
    tokens : float
        Expected tokens the step emits, ``n * (1 + sum_{j<=k} prod_{t<=j} prior(t))``.
    step_ms, step_j : float
        Verify plus draft cost of the step at this width, in ms and joules.
    tokens_per_s, tokens_per_j : float
        Expected throughput and energy efficiency.
    feasible : bool
        Whether its tokens/ms reach ``(1 - slack)`` times the reference depth's.
    chosen : bool
        Whether ``propose`` picks it (never when the width is above the speculation cap).
    """

    k: int
    tokens: float
    step_ms: float
    step_j: float
    tokens_per_s: float
    tokens_per_j: float
    feasible: bool
    chosen: bool


@dataclass(frozen=True)
class ProposeExplanation:
    """``Planner.explain(n)``: the decision and every depth's figures.

    Attributes
    ----------
    n : int
        Batch width.
    depth : int
        What ``propose(n)`` answers.
    capped : bool
        ``n`` is above the speculation cap: plain decode, depth 0.
    slack : float
    reference_depth : int
        ``min(1, max_k)``, the depth whose speed sets the floor.
    floor_tokens_per_s : float
        ``(1 - slack)`` times the reference depth's tokens/s.
    depths : tuple of DepthFigures
        One per depth ``0..max_k``.
    """

    n: int
    depth: int
    capped: bool
    slack: float
    reference_depth: int
    floor_tokens_per_s: float
    depths: tuple

    def to_dict(self) -> dict:
        """A JSON-ready dict (the figures of ``specsim plan --json``)."""
        return asdict(self) | {"depths": [asdict(d) for d in self.depths]}


def explain_propose(arrays, cum_priors, n, slack, max_seqs, depth) -> ProposeExplanation:
    """The per-depth figures at width ``n``, with the arithmetic of ``propose_depth_nb`` (so the
    feasibility marks are exactly the comparisons the kernel made)."""
    max_k = arrays.costs.shape[1] - 1
    wc = np.empty((max_k + 1, 4))
    width_costs_nb(arrays.widths, arrays.costs, n, wc)
    r = 1 if max_k >= 1 else 0
    nf = float(n)
    reference = nf * (1.0 + cum_priors[r]) / (wc[r, VMS] + wc[r, DMS])
    floor_rate = (1.0 - slack) * reference
    capped = n > max_seqs
    rows = []
    for k in range(max_k + 1):
        tokens = nf * (1.0 + cum_priors[k])
        step_ms = float(wc[k, VMS] + wc[k, DMS])
        step_j = float(wc[k, VJ] + wc[k, DJ])
        rows.append(DepthFigures(
            k=k, tokens=float(tokens), step_ms=step_ms, step_j=step_j, tokens_per_s=float(tokens / step_ms * 1000.0),
            tokens_per_j=float(tokens / step_j), feasible=bool(tokens / step_ms >= floor_rate),
            chosen=bool(k == depth and not capped),
        ))
    return ProposeExplanation(n=n, depth=depth, capped=bool(capped), slack=slack, reference_depth=r,
                              floor_tokens_per_s=float(floor_rate * 1000.0), depths=tuple(rows))


# What an answer at the table's deepest depth says: the best may lie deeper than was measured.
TABLE_ENDS = "the table ends here: measure deeper"


def depth_reach(depth: int, max_k: int, fitted: int) -> dict:
    """Where ``depth`` stands against the table's deepest depth ``max_k`` and the calibration's
    ``fitted`` positions (its ``prior_by_position`` length), JSON-ready: ``table_ends`` (a
    speculative depth that is the table's deepest: the best may lie beyond what was measured),
    ``extrapolated`` (deeper than the fitted positions: positions past them reuse the last
    fitted prior), ``max_k`` and ``fitted_positions``."""
    depth, max_k, fitted = int(depth), int(max_k), int(fitted)
    return {"table_ends": bool(0 < depth == max_k), "extrapolated": bool(depth > fitted), "max_k": max_k,
            "fitted_positions": fitted}


def reach_lines(depth: int, max_k: int, fitted: int, what: str = "the best depth") -> list:
    """The plain-words notes of :func:`depth_reach` (none when neither applies)."""
    r = depth_reach(depth, max_k, fitted)
    lines = []
    if r["table_ends"]:
        lines.append(f"{what} ({depth}) is the table's deepest (max_k {max_k}): {TABLE_ENDS}")
    if r["extrapolated"]:
        past = f"{fitted + 1}" if depth == fitted + 1 else f"{fitted + 1}..{depth}"
        lines.append(f"{what} ({depth}) is extrapolated: the calibration fits {fitted} draft position(s) "
                     f"(prior_by_position), so position(s) {past} reuse position {fitted}'s prior; calibrate on "
                     "deeper drafts to know")
    return lines
