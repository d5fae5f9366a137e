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
  seeds); else the two are a tie within noise.
"""

from __future__ import annotations

import os
import threading
import warnings
from dataclasses import replace

import numpy as np

from specsim._executor import MAX_WORKERS, Executor
from specsim._stats import paired_noise
from specsim.errors import TraceWarning
from specsim.sim.engine import simulate

# Extra draft-outcome seeds a verdict reruns its two leading policies with.
NOISE_SEEDS = 3


def run_digest(result) -> str:
    """A digest of what makes a run the run it was: every request's first-token and finish times,
    the energy and the depth histogram (a sweep row's ``run_digest``)."""
    import hashlib

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


def verdicts(names, summaries, rerun, seed: int) -> list:
    """:func:`verdict` for each of ``names`` (None where it has no two distinct runs). The reruns
    every verdict needs (each of its two leaders under each of :func:`noise_seeds`, once even
    where two verdicts share a leader) are made first, all at once: in parallel threads when
    ``rerun`` has a ``prefetch`` (as :func:`reruns`'s has), so they cost the wall time of the
    slowest few instead of their sum. The verdicts are those made one rerun at a time."""
    wanted = []
    for name in names:
        leaders = _leaders(name, summaries)
        if leaders is not None:
            wanted += [(i, other) for other in noise_seeds(seed) for i in leaders]
    prefetch = getattr(rerun, "prefetch", None)
    if prefetch is not None:
        prefetch(list(dict.fromkeys(wanted)))
    return [verdict(name, summaries, rerun, seed) for name in names]


def verdict(name: str, summaries, rerun, seed: int) -> dict:
    """The verdict ``name`` (a key of :data:`FIGURES`) over distinct runs.

    ``rerun(index, seed) -> summary`` simulates ``summaries[index]``'s policy again under another
    draft-outcome seed. Returns ``winner``, ``runner_up`` (labels), ``difference`` (mean paired,
    winner minus runner-up), ``half_width`` (95%), ``seeds``, ``clear`` (bool) and ``line``; None
    when fewer than two distinct runs have the figure.
    """
    get, unit, fmt = FIGURES[name]
    leaders = _leaders(name, summaries)
    if leaders is None:
        return None
    a, b = leaders
    diffs = [get(summaries[a]) - get(summaries[b])]
    for other in noise_seeds(seed):
        diffs.append(get(rerun(a, other)) - get(rerun(b, other)))
    d = np.asarray(diffs, dtype=np.float64)
    mean, half = paired_noise(d)
    clear = mean < 0 and abs(mean) > half
    la, lb = summaries[a]["label"], summaries[b]["label"]
    va, vb = fmt.format(get(summaries[a])), fmt.format(get(summaries[b]))
    noise = f"paired over {d.shape[0]} draft-outcome seeds: {mean:+.2g} ± {half:.2g} {unit}, 95%"
    if clear:
        line = f"{name}: {la} at {va} {unit}, below {lb} at {vb} ({noise})"
    else:
        line = f"{name}: tie within noise between {la} ({va}) and {lb} ({vb}) ({noise})"
    return {"name": name, "winner": la if clear else None, "runner_up": lb, "leader": la, "difference": mean,
            "half_width": half, "seeds": int(d.shape[0]), "clear": bool(clear), "line": line}


def same_run_lines(summaries) -> list:
    """``policy = other`` lines for the policies that were the same run as an earlier one."""
    return [f"{s['label']} = {s['same_as']}: the same depth at every width the run met, so the same run"
            for s in summaries if s.get("same_as")]


class Reruns:
    """``rerun(index, seed) -> summary`` for :func:`verdict`, cached: ``results[index]``'s policy
    and slack on the same requests and server ``options`` (a ServerOptions) under ``seed``, its
    SLO attainment against ``slo`` (an :class:`~specsim.sim.slo.SLO`, or None).
    :meth:`prefetch` makes many at once in threads (the engine releases the GIL), reporting finished
    requests to ``progress(total)`` (a factory of a :class:`~specsim._progress.Progress`, or None)."""

    def __init__(self, requests, table, calibration, results, options, slo=None, acceptance=None, progress=None):
        self._args = (requests, table, calibration, results, options, slo, acceptance)
        self._cache = {}
        self._progress = progress

    def _run(self, index, seed, progress=None):
        requests, table, calibration, results, options, slo, acceptance = self._args
        r = results[index]
        opts = replace(options, slack=r.options["slack"], seed=seed)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", TraceWarning)  # said once, by the first run
            return simulate(requests, table, calibration, r.policy_spec, options=opts, acceptance=acceptance,
                            progress=progress).summary(slo)

    def __call__(self, index, seed):
        if (index, seed) not in self._cache:
            self._cache[(index, seed)] = self._run(index, seed)
        return self._cache[(index, seed)]

    def prefetch(self, pairs) -> None:
        """Make the reruns ``(index, seed)`` of ``pairs`` not made yet, in parallel threads (one
        per CPU, at most ``MAX_WORKERS``). Ctrl-C (or an error) stops them all at their next
        chunk of steps and is raised again."""
        todo = [p for p in dict.fromkeys(pairs) if p not in self._cache]
        if not todo:
            return
        workers = max(1, min(len(todo), os.cpu_count() or 1, MAX_WORKERS))
        ex = Executor("threads" if workers > 1 else "serial", workers if workers > 1 else None)
        bar = None
        if self._progress is not None:
            n_req = len(getattr(self._args[0], "requests", self._args[0]))  # an array or a TraceRead
            bar = self._progress(len(todo) * n_req)
        lock = threading.Lock()

        def one(index, seed):
            seen = [0]

            def tick(finished):
                if ex.stop.is_set():
                    raise _Abandoned
                if bar is not None:
                    with lock:
                        bar.update(finished - seen[0])
                seen[0] = finished

            return self._run(index, seed, tick)

        try:
            with ex:
                for pair, summary in zip(todo, ex.map(one, todo)):
                    self._cache[pair] = summary
        finally:
            if bar is not None:
                bar.close()


class _Abandoned(Exception):
    """Raised in a rerun's progress callback to end it when the caller stopped."""


def reruns(requests, table, calibration, results, options, slo=None, acceptance=None, progress=None) -> Reruns:
    """The :class:`Reruns` of ``results`` (see there)."""
    return Reruns(requests, table, calibration, results, options, slo, acceptance, progress)
