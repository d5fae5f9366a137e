"""The search :func:`specsim.tune` runs (module docstring of :mod:`specsim.studies.tune`): the
coordinate moves from a schedule, the order of candidates (the SLO first, then the objective), and
the search's state: its evaluations cached by part, policy and seed, the starts, the rounds of
descent, the noise check over (seed, window) pairs and the held-out verdict.

Candidates are :class:`~specsim.policy.policy.Policy` values, built once from depth vectors;
their text is only their label.
"""

from __future__ import annotations

import math

import numpy as np

from specsim.errors import ScheduleError
from specsim._stats import paired_noise
from specsim.plan.depth_table import depth_by_width
from specsim.policy.policy import Policy
from specsim.policy.schedule import canonical, ranges_from_depths
from specsim.studies.tune_result import Score, TuneResult

# Candidates that beat the incumbent on the first seed and go on to the others, per round.
BEAM = 4
# Up to this many grid cells, the search tries a new depth in every cell each round.
SMALL_SPACE_CELLS = 16


def schedule_policy(depths) -> Policy:
    """The ``schedule`` policy serving ``depths[i]`` at width ``i + 1`` (the last at every wider one)."""
    return Policy("schedule", ranges=ranges_from_depths(depths))


def grid_widths(widest: int, table_widths) -> np.ndarray:
    """Where a range may start (besides width 1): every width up to 8, then steps of a quarter
    octave, and the width after each measured one (costs are interpolated between them).

    Returns
    -------
    ndarray(int64, ndim=1)
        Sorted, in ``2..widest``.
    """
    points = set(range(2, 9))
    x = 8.0
    while x < widest:
        x *= 2 ** 0.25
        points.add(int(round(x)))
    points.update(int(w) + 1 for w in table_widths)
    return np.array(sorted(p for p in points if 2 <= p <= widest), dtype=np.int64)


def _runs(d):
    """Maximal runs of equal depth in ``d`` (depth at widths 1..W): list of [start, end, depth], 1-based."""
    starts = [0] + [i for i in range(1, d.shape[0]) if d[i] != d[i - 1]]
    ends = starts[1:] + [d.shape[0]]
    return [(s + 1, e, int(d[s])) for s, e in zip(starts, ends)]


def _moves(d, active, k_cap, grid, busy=()):
    """Candidate depth vectors one coordinate move from ``d`` over widths ``1..active``.

    ``busy``: widths where the incumbent's batches often are; a range is split at the grid
    widths nearest to them as well as at its middle grid width, and the grid cells holding them
    try a neighbouring depth.
    """
    head = d[:active]
    runs = _runs(head)
    out = []

    def emit(lo, hi, k):
        c = d.copy()
        c[lo - 1:hi] = k
        if hi == active:
            c[active:] = k  # widths never reached follow the widest one reached
        out.append(c)

    for lo, hi, k in runs:
        for k2 in (k - 2, k - 1, k + 1, k + 2, 0, k_cap):
            if 0 <= k2 <= k_cap and k2 != k:
                emit(lo, hi, k2)
    for (lo1, hi1, k1), (lo2, hi2, k2) in zip(runs, runs[1:]):
        below = grid[(grid > lo1) & (grid < lo2)]
        above = grid[(grid > lo2) & (grid <= hi2)]
        if below.shape[0]:
            emit(int(below[-1]), lo2 - 1, k2)  # the boundary moves down: k2 takes more widths
        if above.shape[0]:
            emit(lo2, int(above[0]) - 1, k1)  # the boundary moves up
    # One grid cell to a neighbouring depth: every cell in a small space, else the cells where
    # the batches are (a range's middle can then change without touching its ends).
    starts = np.concatenate([[1], grid[grid <= active]])
    ends = np.concatenate([starts[1:] - 1, [active]])
    cells = range(starts.shape[0])
    if starts.shape[0] > SMALL_SPACE_CELLS:
        cells = sorted({int(np.searchsorted(starts, w, side="right")) - 1 for w in busy if 1 <= w <= active})
    for i in cells:
        lo, hi = int(starts[i]), int(ends[i])
        for k2 in {int(head[lo - 1]) - 1, int(head[lo - 1]) + 1, int(head[hi - 1]) - 1, int(head[hi - 1]) + 1}:
            if 0 <= k2 <= k_cap and not np.all(head[lo - 1:hi] == k2):
                emit(lo, hi, k2)
    for lo, hi, k in runs:
        inside = grid[(grid > lo) & (grid <= hi)]
        if not inside.shape[0]:
            continue
        cuts = {int(inside[inside.shape[0] // 2])}
        cuts.update(int(inside[np.argmin(np.abs(inside - w))]) for w in busy if lo < w <= hi)
        for cut in sorted(cuts):
            for k2 in (k - 1, k + 1):
                if 0 <= k2 <= k_cap:
                    emit(lo, cut - 1, k2)
                    emit(cut, hi, k2)
    return out


def reversals(depths) -> int:
    """How often the depth changes direction as width grows (up then down, or down then up)."""
    steps = np.sign(np.diff(np.asarray(depths, dtype=np.int64)))
    steps = steps[steps != 0]
    return int(np.count_nonzero(steps[1:] != steps[:-1]))


def _key(values, attainment, target, objective):
    """Sort key (smaller is better): misses of the SLO target last, then the objective."""
    mean = float(np.mean(values))
    obj = mean if objective == "energy" else -mean
    if target is None or attainment is None:
        return (0, 0.0, obj)
    att = float(np.mean(attainment))
    return (0, 0.0, obj) if att >= target else (1, -att, obj)


def _improves(new, old, min_gain) -> bool:
    """Whether sort key ``new`` beats ``old``: meets the SLO where ``old`` misses it, misses it
    less, or (both on the same side) has an objective better by more than ``min_gain`` of it."""
    if new[0] != old[0]:
        return new[0] < old[0]
    if new[1] != old[1]:
        return new[1] < old[1]
    return new[2] < old[2] - min_gain * abs(old[2])



class _Search:
    """The search's state: evaluated results (cached by part, policy and seed), its seeds, the
    widest width any run reached, and the rounds of moves."""

    def __init__(self, pool, line, objective, target, base_seed, seeds, min_gain, windows=0):
        self.pool, self.line, self.objective, self.target = pool, line, objective, target
        self.windows = windows
        self.rejected = []
        self.field = "j_per_token" if objective == "energy" else "tokens_per_s"
        self.train_seeds = [base_seed + i for i in range(seeds)]
        self.held_seeds = [base_seed + seeds + i for i in range(seeds)]
        self.min_gain = min_gain
        # Policy label -> Policy: every candidate is built as a value once, and its label (as
        # users read and type it) keys the cache and the reports.
        self.values = {}
        self.cache = {}
        self.count = 0
        self.reached = 0

    def add(self, policy, label=None) -> str:
        """Register ``policy`` (a :class:`~specsim.policy.policy.Policy`) under ``label`` (default
        its text) and return the label; the first value given a label keeps it."""
        label = str(policy) if label is None else label
        self.values.setdefault(label, policy)
        return label

    def run(self, tasks):
        """Evaluate ``tasks``, (part name, policy label, seed) each, that are not cached yet."""
        todo = [t for t in dict.fromkeys(tasks) if t not in self.cache]
        runs = self.pool.run([(part, self.values[label], seed) for part, label, seed in todo], self.line.tick)
        for t, r in zip(todo, runs):
            self.cache[t] = r
            self.reached = max(self.reached, r["max_width"])
        self.count += len(todo)

    def check_met(self) -> None:
        """Refuse a search whose SLO no candidate met on the training window: there is no schedule
        to recommend, only the least bad, and the error names how far it fell short."""
        if self.target is None:
            return
        by_policy = {}
        for (part, pol, seed), r in self.cache.items():
            if part == "train" and seed in self.train_seeds and r["attainment"] is not None:
                by_policy.setdefault(pol, []).append(r["attainment"])
        means = {pol: float(np.mean(v)) for pol, v in by_policy.items() if len(v) == len(self.train_seeds)}
        if not means:
            return
        best = max(means, key=means.get)
        if means[best] < self.target:
            raise ScheduleError(
                f"no candidate meets the SLO for {self.target:.2%} of requests: the best of the {len(means)} tried "
                f"reached {means[best]:.2%} ({best}, mean over {len(self.train_seeds)} seeds on the training window); "
                "relax the SLO or the attainment target, or give the server more room (a wider batch, more KV)")

    def load(self, pol, rate, allow) -> dict:
        """Whether ``pol`` overloaded the server on the training window (queueing grew through the
        run on most seeds): refused with the rate the server kept up with unless ``allow``; returns
        what was found (None when it kept up)."""
        rs = [self.cache[("train", pol, s)] for s in self.train_seeds]
        over = sum(r["overloaded"] for r in rs)
        if 2 * over <= len(rs):
            return None
        frac = float(np.mean([r["served_fraction"] for r in rs if r["served_fraction"] is not None]))
        served = None if rate is None else rate * frac
        found = {"policy": pol, "seeds": f"{over} of {len(rs)}", "served_fraction": frac, "offered_rate": rate,
                 "served_rate": served}
        if allow:
            return found
        offered = "" if rate is None else f" {rate:.3g} requests/s, about {served:.3g} requests/s"
        raise ScheduleError(
            f"the server is overloaded: under the best schedule found ({pol}) queueing delay grew through the "
            f"training window on {over} of {len(rs)} seeds, so it kept up with about {100 * frac:.0f}% of the offered"
            f"{offered}; a schedule tuned on a backlog optimises the backlog, not the policy: tune at a rate the "
            "server can serve (a smaller --rate-scale), add replicas (specsim capacity), or pass --allow-overload "
            "to tune anyway")

    def key(self, pol, seed_list, part="train"):
        rs = [self.cache[(part, pol, s)] for s in seed_list]
        att = None if self.target is None else [r["attainment"] for r in rs]
        return _key([r[self.field] for r in rs], att, self.target, self.objective)

    def starts(self, table, cal, opts, resolved, widest) -> dict:
        """Every fixed depth, and the propose and goodput depth at every width: name -> (depths, policy)."""
        k_cap = resolved.k_max
        depths = {f"fixed:{k}": np.full(widest, k, dtype=np.int64) for k in range(k_cap + 1)}
        for name in ("propose", "goodput"):
            d = depth_by_width(Policy(name), table, cal, opts, resolved.max_num_seqs, k_cap)
            depths[name] = d[1:widest + 1]
        out = {name: (d, self.add(schedule_policy(d))) for name, d in depths.items()}
        self.run([("train", t, s) for _, t in out.values() for s in self.train_seeds])
        return out

    def descend(self, starts, table, k_cap, widest, max_rounds) -> str:
        """Steepest descent over coordinate moves from the best start; returns the winner's policy."""
        seeds, first = self.train_seeds, self.train_seeds[:1]
        best = min(starts, key=lambda n: self.key(starts[n][1], seeds))
        d, incumbent = starts[best][0].copy(), starts[best][1]
        grid = grid_widths(widest, table.widths)
        self.line.say(f"best start {best}: {_fmt(self.key(incumbent, seeds), self.objective)}")
        for round_no in range(1, max_rounds + 1):
            active = max(1, min(widest, self.reached))
            busy = self.cache[("train", incumbent, seeds[0])]["width_quantiles"]
            cands = {}
            for c in _moves(d, active, k_cap, grid, busy):
                cands.setdefault(self.add(schedule_policy(c)), c)
            cands.pop(incumbent, None)
            self.run([("train", t, seeds[0]) for t in cands])
            mine = self.key(incumbent, first)
            better = sorted((t for t in cands if _improves(self.key(t, first), mine, self.min_gain)),
                            key=lambda t: self.key(t, first))[:BEAM]
            self.run([("train", t, s) for t in better for s in seeds[1:]])
            # A move must gain on the mean and on every seed: one lucky draw does not move the schedule.
            better = [t for t in better if _improves(self.key(t, seeds), self.key(incumbent, seeds), self.min_gain)
                      and all(_improves(self.key(t, [s]), self.key(incumbent, [s]), 0.0) for s in seeds)]
            if self.windows and better:
                better = self.clear_noise(better, incumbent, d, cands, active, round_no)
            win = min(better, key=lambda t: self.key(t, seeds), default=None)
            if win is None:
                self.line.say(f"round {round_no}: no move improves; {incumbent}")
                break
            d, incumbent = cands[win], win
            self.line.say(f"round {round_no}: {_fmt(self.key(incumbent, seeds), self.objective)} with {incumbent}")
        return incumbent

    def clear_noise(self, better, incumbent, d, cands, active, round_no) -> list:
        """The moves of ``better`` whose mean gain over the (seed, window) pairs clears its noise
        and ``min_gain``; the others are recorded in ``rejected``."""
        parts = [f"train#{w}" for w in range(self.windows)]
        self.run([(p, t, s) for t in [incumbent] + better for p in parts for s in self.train_seeds])
        kept = []
        for t in better:
            if self.key(t, self.train_seeds)[:2] != self.key(incumbent, self.train_seeds)[:2]:
                kept.append(t)  # a move on the SLO: judged on attainment
                continue
            gain, noise, base = self.pair_gain(t, incumbent, parts)
            if gain > noise and gain > self.min_gain * abs(base):
                kept.append(t)
            else:
                self.rejected.append({"round": round_no, "policy": t, "gain": gain, "noise": noise,
                                      "pairs": len(parts) * len(self.train_seeds),
                                      "zigzag": reversals(cands[t][:active]) > reversals(d[:active])})
        return kept

    def pair_gain(self, pol, incumbent, parts) -> tuple:
        """``(mean gain, t95 x its standard error, incumbent's mean)`` over the (seed, window) pairs."""
        sign = 1.0 if self.objective == "energy" else -1.0
        mine = np.array([self.cache[(p, incumbent, s)][self.field] for p in parts for s in self.train_seeds])
        theirs = np.array([self.cache[(p, pol, s)][self.field] for p in parts for s in self.train_seeds])
        gain, noise = paired_noise(sign * (mine - theirs))
        return gain, noise, float(mine.mean())

    def score(self, pol, part, seed_list) -> Score:
        rs = [self.cache[(part, pol, s)] for s in seed_list]
        att = None if rs[0]["attainment"] is None else tuple(r["attainment"] for r in rs)
        return Score(pol, tuple(r[self.field] for r in rs), att, float(np.mean([r["j_per_token"] for r in rs])),
                     float(np.mean([r["tokens_per_s"] for r in rs])), float(np.mean([r["tpot_p99_s"] for r in rs])))

    def held_gain(self, pol, base) -> tuple:
        """``(mean, twice its standard error)`` of ``pol``'s paired gain over ``base`` per held-out
        seed (positive = better; the error NaN with one seed)."""
        sign = 1.0 if self.objective == "energy" else -1.0
        mine = np.array([self.cache[("held", base, s)][self.field] for s in self.held_seeds])
        theirs = np.array([self.cache[("held", pol, s)][self.field] for s in self.held_seeds])
        diffs = sign * (mine - theirs)
        n = diffs.shape[0]
        return float(diffs.mean()), (2.0 * float(np.std(diffs, ddof=1)) / math.sqrt(n) if n > 1 else float("nan"))

    def trees(self, result, sizes, best) -> dict:
        """:attr:`TuneResult.trees`: the best static tree against the chain served, and
        ``tree:auto`` against the best static tree, on the held-out window and seeds."""
        chain = result.policy if result.serves_tuned else result.best_fixed
        gain, noise = self.held_gain(best, chain)
        mine, theirs = self.key(chain, self.held_seeds, "held"), self.key(best, self.held_seeds, "held")
        if mine[:2] != theirs[:2]:
            winner = "tree" if theirs < mine else "chain"  # on the SLO: attainment decides
        elif gain == 0 or abs(gain) <= noise:
            winner = "tie"
        else:
            winner = "tree" if gain > 0 else "chain"
        cost, cost_noise = self.held_gain("tree:auto", best)
        return {"candidates": {f"tree:{n}": self.score(f"tree:{n}", "train", self.train_seeds).mean for n in sizes},
                "best": best, "chain": chain, "gain": gain, "noise": noise, "winner": winner,
                "static_cost": cost, "static_cost_noise": cost_noise}

    def result(self, incumbent, final, starts, kind, inputs, seconds) -> TuneResult:
        held = tuple(self.score(p, "held", self.held_seeds) for p in final)
        fixed = [s for s in held if self.values[s.policy].fixed_depth is not None]
        best_fixed = min(fixed, key=lambda s: self.key(s.policy, self.held_seeds, "held"))
        sign = 1.0 if self.objective == "energy" else -1.0
        diffs = sign * (np.array(best_fixed.values) - np.array(held[0].values))
        n = diffs.shape[0]
        noise = 2.0 * float(np.std(diffs, ddof=1)) / math.sqrt(n) if n > 1 else float("nan")
        return TuneResult(
            ranges=canonical(self.values[incumbent].ranges), objective=self.objective,
            train=self.score(incumbent, "train", self.train_seeds), holdout=held, best_fixed=best_fixed.policy,
            gain=float(diffs.mean()), gain_noise=noise,
            starts={name: (t, self.score(t, "train", self.train_seeds)) for name, (_, t) in starts.items()},
            evaluations=self.count, seconds=seconds, executor=kind, inputs=inputs,
            noise_windows=self.windows, rejected_moves=tuple(self.rejected),
        )



def _fmt(k, objective):
    value = k[2] if objective == "energy" else -k[2]
    unit = "J/token" if objective == "energy" else "tok/s"
    miss = f" (misses the SLO: {100 * -k[1]:.1f}%)" if k[0] else ""
    return f"{value:.5g} {unit}{miss}"
