"""Verdicts that hold up: which runs were the same run, and whether "lowest energy" or "fastest"
clears the noise of the draft outcomes (docs/simulation.md, "Verdicts").

- Two results of the same requests are *the same run* when every request's first-token and
  finish times, the energy and the depth histogram are equal: their policies chose the same
  depth at every width they met (``goodput`` and ``fixed:3`` on a table where goodput's depth is
  3 wherever the batch went). Reports name such a policy once and the others ``= that one``.
- A verdict compares the best distinct run with the runner-up on one figure (J/token, or p99
  TPOT) over the run's own draft-outcome seed and :data:`NOISE_SEEDS` more, paired by seed (both
  policies see the same hashes under one seed, so most of the noise cancels). It is given when the
  mean paired difference is larger than its 95% interval's half-width (Student t over the
  seeds); else the two are a tie within noise. The reruns go seed by seed and stop early when
  the lead already clears a 99.9% interval or cannot become a verdict (:func:`look`).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import threading
import warnings
from dataclasses import replace

import numpy as np

from specsim._executor import MAX_WORKERS, Executor
from specsim._stats import paired_noise, t95
from specsim.errors import TraceWarning
from specsim.sim.engine import request_columns, simulate

# Extra draft-outcome seeds a verdict reruns its two leading policies with.
NOISE_SEEDS = 3


def run_digest(result) -> str:
    """A digest of what makes a run the run it was: every request's first-token and finish times,
    the energy and the depth histogram (a sweep row's ``run_digest``)."""
    parts = [np.ascontiguousarray(result.first_token_s, dtype=np.float64).tobytes(),
             np.ascontiguousarray(result.finish_s, dtype=np.float64).tobytes(),
             np.float64(result.energy_j).tobytes(), np.ascontiguousarray(result.depth_histogram, np.int64).tobytes()]
    return hashlib.sha256(b"|".join(parts)).hexdigest()[:16]


def same_run(a, b) -> bool:
    """Whether results ``a`` and ``b`` (same requests) are the same run."""
    return (a.requests == b.requests and a.energy_j == b.energy_j
            and np.array_equal(a.finish_s, b.finish_s, equal_nan=True)
            and np.array_equal(a.first_token_s, b.first_token_s, equal_nan=True)
            and np.array_equal(a.depth_histogram, b.depth_histogram))


def mark_same_runs(results, summaries) -> None:
    """Set ``summary["same_as"]`` to the label of the first earlier result that is the same run
    (None when it is the first of its kind)."""
    for i, (r, s) in enumerate(zip(results, summaries)):
        s["same_as"] = next((summaries[j]["label"] for j in range(i) if same_run(results[j], r)
                             and summaries[j].get("same_as") is None), None)


FIGURES = {
    "lowest energy": (lambda s: s["j_per_token"], "J/token", "{:.4f}"),
    "lowest p99 TPOT": (lambda s: s["tpot_s"]["p99"], "s", "{:.4f}"),
}


def _leaders(name: str, summaries):
    """The indices of the best distinct run and the runner-up on ``name``'s figure, or None when
    fewer than two distinct runs have it."""
    get = FIGURES[name][0]
    pool = [i for i, s in enumerate(summaries) if s.get("same_as") is None and get(s) is not None]
    if len(pool) < 2:
        return None
    pool.sort(key=lambda i: get(summaries[i]))
    return pool[0], pool[1]


def noise_seeds(seed: int) -> list:
    """The draft-outcome seeds a verdict reruns its two leaders with, after the run's own ``seed``."""
    return [(seed + k) % (1 << 64) for k in range(1, NOISE_SEEDS + 1)]


# Early looks (Haybittle-Peto): after each rerun seed but the last, a verdict stops as clear only
# when its lead clears the 99.9% interval, and as a tie when it cannot become one (a mean within
# FUTILITY of its 95% half-width from zero, or against the leader beyond the 99.9% interval); the
# last look is the fixed-seed rule's. benchmarks/verdict_coverage.py measures what this costs in
# coverage and power (docs/simulation.md, "Verdicts").
EARLY_LEVEL = 0.999
FUTILITY = 0.1
# Two-sided 99.9% Student t quantiles by degrees of freedom.
_T999 = (636.619, 31.599, 12.924, 8.610, 6.869, 5.959, 5.408, 5.041, 4.781, 4.587)


def look(diffs, last: bool):
    """The decision on paired differences ``diffs`` (winner minus runner-up, one per seed so far):
    ``(decision, half_width, level)`` with decision ``"clear"``, ``"tie"`` or None (rerun another
    seed); at the ``last`` look always clear or tie by the 95% interval."""
    mean, half = paired_noise(diffs)
    if last:
        return ("clear" if mean < 0 and -mean > half else "tie"), half, 0.95
    n = len(diffs)
    if n < 2 or n - 1 > len(_T999):
        return None, half, 0.95
    strict = half * _T999[n - 2] / t95(n - 1)
    if mean < 0 and -mean > strict:
        return "clear", strict, EARLY_LEVEL
    if abs(mean) <= FUTILITY * half or mean > strict:
        return "tie", half, 0.95
    return None, half, 0.95


def verdicts(names, summaries, rerun, seed: int, early: bool = True) -> list:
    """:func:`verdict` for each of ``names`` (None where it has no two distinct runs).

    Each verdict reruns its two leaders seed by seed (:func:`noise_seeds`' order) and, after each
    seed, looks (:func:`look`): it stops when its difference is already clear or already a tie.
    When ``rerun`` has a ``stream`` (as :func:`reruns`'s has) the reruns run in parallel threads,
    the next one wanted (earliest seed first, each leader once even where two verdicts share it)
    starting as soon as a thread is free, and one no open verdict wants any more is abandoned;
    else one at a time. The verdicts are the same either way. With ``early=False`` every verdict
    reruns every seed and decides by the 95% interval at the end (the demo, whose answer reads
    every seed)."""
    seeds = noise_seeds(seed)
    leaders = {k: _leaders(name, summaries) for k, name in enumerate(names)}
    diffs = {k: [FIGURES[names[k]][0](summaries[p[0]]) - FIGURES[names[k]][0](summaries[p[1]])]
             for k, p in leaders.items() if p is not None}
    made, decided = {}, {}

    def wanted() -> list:
        order = [(i, s) for j, s in enumerate(seeds) for k in diffs if len(diffs[k]) - 1 <= j or not early
                 for i in leaders[k]]
        return [p for p in dict.fromkeys(order) if p not in made]

    def advance() -> None:
        for k in list(diffs):
            get = FIGURES[names[k]][0]
            a, b = leaders[k]
            while len(diffs[k]) <= len(seeds):
                s = seeds[len(diffs[k]) - 1]
                if (a, s) not in made or (b, s) not in made:
                    break
                diffs[k].append(get(made[(a, s)]) - get(made[(b, s)]))
                last = len(diffs[k]) == len(seeds) + 1
                decision = look(diffs[k], last) if early or last else (None,)
                if decision[0] is not None:
                    decided[k] = (diffs.pop(k), *decision)
                    break

    def done(pair, summary) -> None:
        made[pair] = summary
        advance()

    stream = getattr(rerun, "stream", None)
    if stream is not None:
        stream(wanted, done)
    else:
        while diffs:
            pair = wanted()[0]
            done(pair, rerun(*pair))
    return [_verdict(name, summaries, *decided[k]) if k in decided else None for k, name in enumerate(names)]


def verdict(name: str, summaries, rerun, seed: int, early: bool = True) -> dict:
    """The verdict ``name`` (a key of :data:`FIGURES`) over distinct runs.

    ``rerun(index, seed) -> summary`` simulates ``summaries[index]``'s policy again under another
    draft-outcome seed (see :func:`verdicts` for the order and when it stops). Returns ``winner``,
    ``runner_up`` (labels), ``difference`` (mean paired, winner minus runner-up), ``half_width``
    (at ``level``: 0.95, or :data:`EARLY_LEVEL` for a lead that cleared it early), ``seeds``,
    ``clear`` (bool) and ``line``; None when fewer than two distinct runs have the figure.
    """
    return verdicts((name,), summaries, rerun, seed, early)[0]


def _verdict(name, summaries, diffs, decision, half, level) -> dict:
    get, unit, fmt = FIGURES[name]
    a, b = _leaders(name, summaries)
    d = np.asarray(diffs, dtype=np.float64)
    mean = float(d.mean())
    clear = decision == "clear"
    la, lb = summaries[a]["label"], summaries[b]["label"]
    va, vb = fmt.format(get(summaries[a])), fmt.format(get(summaries[b]))
    noise = f"paired over {d.shape[0]} draft-outcome seeds: {mean:+.2g} ± {half:.2g} {unit}, {100 * level:g}%"
    if clear:
        line = f"{name}: {la} at {va} {unit}, below {lb} at {vb} ({noise})"
    else:
        line = f"{name}: tie within noise between {la} ({va}) and {lb} ({vb}) ({noise})"
    return {"name": name, "winner": la if clear else None, "runner_up": lb, "leader": la, "difference": mean,
            "half_width": half, "level": level, "seeds": int(d.shape[0]), "clear": bool(clear), "line": line}


def same_run_lines(summaries) -> list:
    """``policy = other`` lines for the policies that were the same run as an earlier one."""
    return [f"{s['label']} = {s['same_as']}: the same depth at every width the run met, so the same run"
            for s in summaries if s.get("same_as")]


class Reruns:
    """``rerun(index, seed) -> summary`` for :func:`verdict`, cached: ``results[index]``'s policy
    and slack on the same requests and server ``options`` (a ServerOptions) under ``seed``, its
    SLO attainment against ``slo`` (an :class:`~specsim.sim.slo.SLO`, or None).
    :meth:`stream` makes many in threads (the engine releases the GIL), reporting finished
    requests to ``progress(total)`` (a factory of a :class:`~specsim._progress.Progress`, or None)."""

    def __init__(self, requests, table, calibration, results, options, slo=None, acceptance=None, progress=None):
        # Only each result's policy and slack: the results' per-request arrays can go.
        runs = [(r.policy_spec, r.options["slack"]) for r in results]
        self._args = (request_columns(requests), table, calibration, runs, options, slo, acceptance)
        self._n_requests = int(self._args[0].arrival_s.shape[0])
        self._cache = {}
        self._progress = progress

    def _run(self, index, seed, progress=None):
        """One rerun. The caller holds :func:`_trace_warnings_said` (the warnings' filters are the
        process's: set in the calling thread, never in the rerun threads, as
        ``warnings.catch_warnings`` is not thread-safe)."""
        requests, table, calibration, runs, options, slo, acceptance = self._args
        policy, slack = runs[index]
        opts = replace(options, slack=slack, seed=seed)
        return simulate(requests, table, calibration, policy, options=opts, acceptance=acceptance,
                        progress=progress).summary(slo)

    def __call__(self, index, seed):
        if (index, seed) not in self._cache:
            with _trace_warnings_said():
                self._cache[(index, seed)] = self._run(index, seed)
        return self._cache[(index, seed)]

    def stream(self, wanted, done) -> None:
        """Make the reruns ``wanted()`` lists (pairs ``(index, seed)``, most wanted first) in
        parallel threads (one per CPU, at most ``MAX_WORKERS``), starting the first one not made
        nor running whenever a thread is free; ``done(pair, summary)`` is called in this thread as
        each finishes (at once for those made already), and may change what ``wanted()`` lists. A
        running rerun that ``wanted()`` no longer lists is abandoned at its next chunk of steps
        (and not handed over if it finished meanwhile).
        Ctrl-C (or an error) stops them all and is raised again."""
        for pair in wanted():
            if pair in self._cache:
                done(pair, self._cache[pair])
        todo = wanted()
        if not todo:
            return
        workers = max(1, min(len(todo), os.cpu_count() or 1, MAX_WORKERS))
        ex = Executor("threads" if workers > 1 else "serial", workers if workers > 1 else None)
        n_req = self._n_requests
        runs = self._args[3]
        bar = self._progress(len(todo) * n_req) if self._progress is not None else None
        lock = threading.Lock()
        live = [frozenset(todo)]  # what is still wanted: replaced whole, so the threads read it safely
        seen = {}  # requests each running rerun has reported

        def one(index, seed):
            def tick(finished):
                if ex.stop.is_set() or (index, seed) not in live[0]:
                    raise _Abandoned
                with lock:
                    if bar is not None:
                        bar.update(finished - seen[(index, seed)])
                    seen[(index, seed)] = finished

            try:
                return self._run(index, seed, tick)
            except _Abandoned:
                if ex.stop.is_set():
                    raise
                return None

        def pick():
            # Of the earliest seed still wanted, a per-sequence planner's rerun (the longest) first.
            free = [p for p in wanted() if p not in seen]
            pair = min(free, key=lambda p: (p[1] != free[0][1], not runs[p[0]][0].per_sequence), default=None)
            if pair is not None:
                with lock:
                    seen[pair] = 0
            return pair

        def finished(pair, summary):
            if summary is not None:
                self._cache[pair] = summary
                if pair in live[0]:  # else it finished as it was being abandoned
                    done(pair, summary)
            now = wanted()
            live[0] = frozenset(now)
            if bar is not None:
                # Reruns no verdict wants any more leave the total.
                with lock:
                    bar.set_total(bar.done + sum(n_req - seen.get(p, 0) for p in now))

        try:
            with _trace_warnings_said(), ex:  # the filters outlast the threads
                ex.feed(one, pick, finished)
        finally:
            if bar is not None:
                bar.close()


@contextlib.contextmanager
def _trace_warnings_said():
    """A rerun's :class:`~specsim.errors.TraceWarning` is the first run's, said once by it."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", TraceWarning)
        yield


class _Abandoned(Exception):
    """Raised in a rerun's progress callback to end it when the caller stopped."""


def reruns(requests, table, calibration, results, options, slo=None, acceptance=None, progress=None) -> Reruns:
    """The :class:`Reruns` of ``results`` (see there)."""
    return Reruns(requests, table, calibration, results, options, slo, acceptance, progress)
