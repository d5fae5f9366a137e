"""A calibration from engine telemetry: what the records identify (a step histogram, or a mean under a
named assumption) and the calibration fitted from it.

- ``"steps"`` records (accept-run histograms, per-step arrays) are verify steps by ``(drafts,
  accepted run)``: exactly what a calibration's position priors are fitted from.
- ``"marginal"`` records count ``N`` drafting steps and, per position ``j``, the drafts accepted
  there ``A_j``. At a fixed depth ``K`` they are a step histogram exactly: ``A_0 = N`` steps,
  ``A_a - A_(a+1)`` of them accepted exactly ``a`` drafts.
- A record whose counts show the depth varied (``variable``) divides its positions past the
  shallowest depth ``m`` by steps that never reached them. Only positions ``1..m`` are exact:
  given ``m`` (the shallowest depth of the schedule the serve ran), the record is cut to a step
  histogram at depth ``m`` (a step that accepted ``m`` or more counts as accepting all ``m``);
  without it the import is refused, naming the ways out.
- ``"mean"`` records identify no per-position rate. They fit a calibration only under an
  assumption named by the caller: ``constant-rate``, one conditional rate ``p`` at every
  position with ``p + p^2 + .. + p^d`` equal to the mean accepted drafts per step, each record
  at its own depth ``d``.

Counts from many records add up (never their rates): a long log aggregates as one interval.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from specsim import _toml
from specsim._checks import MAX_DEPTH
from specsim.interop._records import Record
from specsim.errors import CalibrationError
from specsim.calibration import AcceptanceCalibration
from specsim.calibration.fit import MIN_OUTCOMES, calibration_from_rates, counts_from_steps, fit_counts

ASSUMPTIONS = ("constant-rate",)


@dataclass
class Identified:
    """What telemetry identifies.

    Attributes
    ----------
    steps : dict or None
        ``(drafts, accepted run) -> count`` when the source identifies per-position priors.
    constant_rate : float or None
        The conditional rate fitted under ``constant-rate`` (mean-only sources).
    depth : int or None
        Drafts per step of the constant-rate fit.
    meta : dict
        Source, assumption and counts, for the calibration's ``[meta]``.
    windows : dict
        ``d -> list of rows [accepted d, .., rejected]`` (one per request or record).
    runs : dict
        ``d -> list`` aligned with ``windows[d]``: each window's accepted runs in serve order
        (per-step sources), or None where only its histogram is known.
    """

    steps: Optional[dict]
    constant_rate: Optional[float]
    depth: Optional[int]
    meta: dict
    windows: dict = field(default_factory=dict)
    runs: dict = field(default_factory=dict)


EXACT_WAY_OUT = ("serve with vLLM's --per-request-spec-decode-metrics detailed (per-step arrays, exact at every "
                 "depth) and import those")


def identify(fmt, records, tally, assume=None, depth=None, files=(), min_depth=None):
    """Turn records into a step histogram or, for a mean-only source, a constant-rate fit.

    Parameters
    ----------
    fmt : str
        The telemetry format (recorded in ``[meta]``).
    records : list of Record
    tally : Tally
    assume : str, optional
        One of :data:`ASSUMPTIONS`; needed (and only used) when the source reports a mean only.
    depth : int, optional
        Drafts per verify step, for sources that do not tell it (or to override what they say).
    min_depth : int, optional
        The shallowest depth that drafted in the serve (of the schedule it ran): records whose
        depth varied keep positions ``1..min_depth``, the positions every step reached.

    Raises
    ------
    CalibrationError
        No records; a mean-only source without ``assume``; an unknown assumption; a mean-only
        source whose depth is neither told nor given; records whose depth varied without
        ``min_depth``; a histogram whose depth is not known.
    """
    if assume is not None and assume not in ASSUMPTIONS:
        raise CalibrationError(f"--assume {assume!r} is not an assumption specsim knows: one of {', '.join(ASSUMPTIONS)}")
    if not records:
        raise CalibrationError(
            f"{', '.join(files) or fmt}: no speculative-decoding counts to import ({_tally_text(tally)})")
    kinds = [k for k in ("steps", "marginal", "mean") if any(r.kind == k for r in records)]
    best = kinds[0]
    used = [r for r in records if r.kind == best]
    where = ", ".join(files) or fmt
    if best != "mean":
        used = [_with_depth(r, depth, where) for r in used]
        used, cut = _shallowest(used, min_depth, where)
    else:
        cut = 0
    meta = {
        "imported_by": "specsim calib import",
        "source_format": fmt,
        "source_files": [str(f) for f in files],
        "records_used": len(used),
        "records_not_identifying": len(records) - len(used),
        "zero_draft_skipped": tally.zero_draft,
        "garbage_ignored": tally.garbage,
        "other_lines": tally.other,
        "counter_resets": tally.resets,
    }
    meta.update({f"source_{k}": v for k, v in tally.notes.items()})
    if best == "steps":
        steps, windows, runs = {}, {}, {}
        for r in used:
            _add(steps, r.steps)
            for d, rows in r.windows.items():
                windows.setdefault(d, []).extend(rows)
                runs.setdefault(d, []).extend([None] * len(rows))
            for d, run in r.runs.items():
                windows.setdefault(d, []).append(_row(run, d))
                runs.setdefault(d, []).append(run)
        meta["identifies"] = "accept-run histogram (per-position priors)"
        meta["assumption"] = "none"
        meta["steps"] = sum(steps.values())
        _note_cut(meta, cut, min_depth)
        return Identified(steps, None, None, meta, windows, runs)
    if best == "marginal":
        steps = {}
        for r in used:
            _add(steps, _marginal_steps(r))
        meta["identifies"] = "per-position marginal acceptance"
        meta["assumption"] = "none"
        meta["steps"] = sum(steps.values())
        _note_cut(meta, cut, min_depth)
        return Identified(steps, None, None, meta)
    return _constant_rate(used, assume, depth, meta, files or (fmt,))


def _note_cut(meta, cut, min_depth):
    if cut:
        meta["variable_depth_records"] = cut
        meta["positions_kept"] = f"1-{min_depth} (the shallowest depth: every step reached them)"


def _with_depth(r, depth, where):
    """``r`` at its depth: a histogram whose length is not its depth (SGLang's) takes ``depth``
    (the user's, which wins: with draft trees the record's ratio counts nodes), else the depth
    the record tells, else is refused."""
    if r.depth_told or r.variable:
        return r
    d = depth if depth is not None else r.depth
    longest = max(a for _, a in r.steps)
    if d is None:
        raise CalibrationError(
            f"{r.where}: the histogram grows to the largest accepted run + 1, so its length is not the depth, and "
            "nothing in the record tells the depth: give --depth K (speculative_num_steps)")
    if d < longest:
        raise CalibrationError(f"{r.where}: the histogram has runs of {longest} accepted drafts but the depth is {d}")
    counts = [0] * (d + 1)
    for (_, a), c in r.steps.items():
        counts[a] += c
    return Record("steps", r.where, steps={(d, a): c for a, c in enumerate(counts) if c},
                  windows={d: [counts[::-1]]}, depth=d)


def _shallowest(records, m, where):
    """Records cut to the positions every step reached when their depth varied; refused
    without ``m``. Returns the records and how many were cut."""
    variable = [r for r in records if r.variable]
    if not variable:
        return records, 0
    if m is None:
        r = variable[0]
        raise CalibrationError(
            f"{where}: the draft depth varied from step to step ({len(variable)} of {len(records)} records; first "
            f"{r.where}: {r.variable}), so positions past the shallowest depth count steps that never reached them "
            "and would import biased low",
            ["give the schedule the serve ran (--schedule FILE) or its shallowest depth (--min-depth K) to import "
             "the positions every step reached exactly", EXACT_WAY_OUT])
    if m < 1:
        raise CalibrationError(f"{where}: shallowest depth {m}: steps that draft nothing are not counted, so the "
                               "shallowest depth that drafted is at least 1")
    out = []
    for r in records:
        if not r.variable:
            out.append(r)
        elif r.kind == "marginal":
            k = min(m, len(r.accepted))
            out.append(Record("marginal", r.where, accepted=r.accepted[:k], reached=r.reached[:k], depth=k))
        else:
            counts = {}
            for (_, a), c in r.steps.items():
                counts[min(a, m)] = counts.get(min(a, m), 0) + c
            k = m  # every step drafted at least m: a run of m or more accepted all m
            row = [counts.get(a, 0) for a in range(k + 1)]
            out.append(Record("steps", r.where, steps={(k, a): c for a, c in enumerate(row) if c},
                              windows={k: [row[::-1]]}, depth=k))
    return out, len(variable)


def _add(into, steps):
    for key, c in steps.items():
        into[key] = into.get(key, 0) + c


def _row(run, d):
    counts = [0] * (d + 1)
    for a in run:
        counts[a] += 1
    return counts[::-1]


def _marginal_steps(r):
    """The step histogram of one ``"marginal"`` record: ``A_a - A_(a+1)`` steps accepted exactly
    ``a`` (``A_0 = N``, ``A_(K+1) = 0``)."""
    k = len(r.accepted)
    runs = [r.reached[0]] + list(r.accepted) + [0]  # runs[a] = steps that accepted at least a drafts
    return {(k, a): runs[a] - runs[a + 1] for a in range(k + 1) if runs[a] - runs[a + 1] > 0}


def _constant_rate(records, assume, depth, meta, where):
    """The constant-rate fit, each record at its own depth (``depth`` overrides every record's):
    ``p`` with ``sum n_i (p + .. + p^d_i) = sum accepted_i`` over records of ``n_i`` steps at
    depth ``d_i``."""
    told = {r.depth for r in records if r.depth is not None}
    if assume is None:
        raise CalibrationError(
            f"{', '.join(where)}: {meta['source_format']} reports a mean acceptance only, which does not identify "
            "per-position priors; fit one rate for every position matching the mean with --assume constant-rate "
            "(and --depth K when the source does not say how many drafts a step has), or import a source with "
            "per-position counts or accept-run histograms"
        )
    if depth is not None and depth < 1:
        raise CalibrationError(f"{', '.join(where)}: --depth {depth}: a step drafts at least 1")
    untold = [r for r in records if r.depth is None] if depth is None else []
    if untold:
        told_text = f"other records say {sorted(told)}" if told else "the source does not say"
        raise CalibrationError(f"{', '.join(where)}: --assume constant-rate needs the drafts per step ({untold[0].where} "
                               f"and {len(untold) - 1} more do not tell it; {told_text}): give --depth K")
    groups = {}  # depth -> [accepted drafts, steps]
    unknown = 0
    for r in records:
        d = depth or r.depth
        if d > MAX_DEPTH:
            raise CalibrationError(f"{r.where}: {d} drafts per step: at most {MAX_DEPTH}")
        g = groups.setdefault(d, [0.0, 0.0])
        if r.accepted_tokens is not None:
            g[0] += r.accepted_tokens
            g[1] += r.drafted_tokens / d
        elif r.n_steps is not None:
            g[0] += r.mean_accepted * r.n_steps
            g[1] += r.n_steps
        else:
            unknown += 1
    if unknown:  # no counts behind any mean (e.g. /server_info): the plain mean of the means
        mean_a = sum(r.mean_accepted for r in records) / len(records)
        steps_text = "unknown"
        groups = {d: [mean_a, 1.0] for d in groups}
    else:
        total_steps = sum(n for _, n in groups.values())
        mean_a = sum(a for a, _ in groups.values()) / total_steps
        steps_text = int(round(total_steps))

        if total_steps < MIN_OUTCOMES:
            raise CalibrationError(f"{', '.join(where)}: {total_steps:g} verify steps behind the mean, fewer than "
                                   f"{MIN_OUTCOMES}: log longer")
    p = _solve_rate(sum(a for a, _ in groups.values()), [(n, d) for d, (_, n) in groups.items()])
    deepest = max(groups)
    meta.update({
        "identifies": "mean accepted drafts per step only",
        "assumption": "constant-rate: one conditional rate at every position matching the mean",
        "mean_accepted_per_step": mean_a,
        "depth": deepest if len(groups) == 1 else f"{min(groups)}-{deepest} (each record at its own depth)",
        "steps": steps_text,
        "constant_rate": p,
    })
    return Identified(None, p, deepest, meta)


def constant_rate(mean_accepted: float, depth: int) -> float:
    """The rate ``p`` in [0, 1] with ``p + p^2 + .. + p^depth = mean_accepted`` (bisection to the
    last bit; 0 below, 1 at or above the range ``[0, depth]``)."""
    return _solve_rate(mean_accepted, [(1.0, depth)])


def _solve_rate(accepted, groups):
    """``p`` in [0, 1] with ``sum n (p + .. + p^d) = accepted`` over ``groups`` of ``(n, d)``
    (bisection to the last bit; 0 below, 1 at or above the reachable range)."""
    if not accepted > 0:
        return 0.0
    if accepted >= sum(n * d for n, d in groups):
        return 1.0
    lo, hi = 0.0, 1.0
    while True:
        mid = 0.5 * (lo + hi)
        if mid in (lo, hi):
            return lo
        total = 0.0
        for n, d in groups:
            s, t = 0.0, 1.0
            for _ in range(d):
                t *= mid
                s += t
            total += n * s
        if total < accepted:
            lo = mid
        else:
            hi = mid


def _tally_text(tally):
    return (f"{tally.zero_draft} without drafts skipped, {tally.garbage} unreadable, {tally.other} other lines; "
            "is it the right format and a run with speculation on?")


def spread(counts):
    """An accept-run sequence with exactly ``counts[a]`` entries ``a``, each value spread evenly
    through it (a histogram has no order: this is the order replay then cycles through).

    Parameters
    ----------
    counts : sequence of int, indexed by accepted run

    Returns
    -------
    list of int
    """
    total = sum(counts)
    credit = [0] * len(counts)
    out = []
    for _ in range(total):
        for a, c in enumerate(counts):
            credit[a] += c
        best = max(range(len(counts)), key=lambda a: credit[a])
        credit[best] -= total
        out.append(best)
    return out


def render_windows(ident: Identified, fmt: str) -> str:
    """The accept-run windows as an acceptance file: one ``[[trace]]`` per depth (``name =
    "d<K>"``) with ``steps`` digits (the serve's order for per-step sources, else each window's
    histogram spread evenly) and ``windows`` rows ``[accepted K, .., accepted 1, rejected]``.
    ``specsim replay``, ``simulate --acceptance`` and ``calib fit --windows`` read it.
    """
    if not ident.windows:
        raise CalibrationError(f"{fmt} has no accept-run histograms or per-step counts: it has no windows to write")
    lines = [f"# specsim acceptance windows imported from {fmt}: accept-run histograms and traces by draft depth"]
    for d in sorted(ident.windows):
        if d > 9 or not any(sum(row) for row in ident.windows[d]):
            continue  # a trace holds one digit per step, and at least one
        rows = ident.windows[d]
        orders = ident.runs.get(d, [None] * len(rows))
        seq = []
        for row, order in zip(rows, orders):
            seq += order if order is not None else spread(row[::-1])
        if all(o is not None for o in orders):
            note = f"{fmt}: per-step accepted runs in serve order"
        else:
            note = (f"{fmt}: windows known by histogram only have their accepted runs spread evenly (the order is "
                    "not the serve's)")
        digits = "".join(str(a) for a in seq)
        chunks = [digits[i:i + 96] for i in range(0, len(digits), 96)] or [""]
        lines += ["", "[[trace]]", f"name = {_toml.string(f'd{d}')}", f"note = {_toml.string(note)}",
                  f"k_logged = {d}", "steps = ["] + [f"  {_toml.string(c)}," for c in chunks] + ["]"]
        lines.append("windows = [" + ", ".join("[" + ", ".join(str(c) for c in row) + "]" for row in rows) + "]")
    if len(lines) == 1:
        raise CalibrationError(f"{fmt}: every window is deeper than 9 drafts: a trace holds one digit per step")
    return "\n".join(lines) + "\n"


def calibration_from(ident: Identified, drafter, source: str = "<telemetry>"):
    """The calibration ``ident`` gives, fitted through the same code as ``calib fit`` (position
    priors under the ``MIN_OUTCOMES`` rule, one bucket since telemetry has no confidences), with
    source, assumption and counts in its ``meta``.

    Returns
    -------
    AcceptanceCalibration
    """
    if ident.steps is not None:
        cal = fit_counts(drafter, counts_from_steps(ident.steps, source=source)).calibration
    else:
        cal = calibration_from_rates(drafter, [ident.constant_rate] * ident.depth, "conditional")
    meta = dict(cal.meta)
    meta.pop("rates", None)
    meta.update(ident.meta)
    return AcceptanceCalibration(cal.drafter, cal.edges, cal.p_accept, cal.priors, meta=meta, source=source)


def record_batches(fmt, records, depth=None, min_depth=None):
    """Each record's verify steps as ``(drafts, accepted run) -> chains``, in serve order: the
    steps a drift monitor replays, one monitored step per record. ``depth`` and ``min_depth``
    are :func:`identify`'s: records whose depth varied are cut to the positions every step
    reached, or refused.

    Raises
    ------
    CalibrationError
        When the records are means only (they tell no position's outcomes), or as
        :func:`identify` refuses variable depth and histograms of unknown depth.
    """
    used = [_with_depth(r, depth, fmt) for r in records if r.kind != "mean"]
    used, _ = _shallowest(used, min_depth, fmt)
    out = [r.steps if r.kind == "steps" else _marginal_steps(r) for r in used]
    if not out:
        raise CalibrationError(f"{fmt} holds mean acceptance only: a drift test needs per-position outcomes "
                               "(per-position counts, accept-run histograms or per-step logs)")
    return out
