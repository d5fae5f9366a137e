"""Shared helpers for the speed suites: every figure is reported next to a reference timed in
the same run, so the ratio holds on a noisy machine."""

from __future__ import annotations

import time


def time_per_call(fn, min_time=0.2, max_calls=1_000_000):
    """Best-of-3 mean seconds per call of ``fn()`` over at least ``min_time`` seconds."""
    fn()
    best = float("inf")
    for _ in range(3):
        calls, start = 0, time.perf_counter()
        while True:
            fn()
            calls += 1
            elapsed = time.perf_counter() - start
            if elapsed >= min_time or calls >= max_calls:
                break
        best = min(best, elapsed / calls)
    return best


def statement_ratio(stmt: str, reference: str, namespace: dict, rounds=9) -> float:
    """Median over ``rounds`` of the seconds per run of ``stmt`` over those of ``reference`` (source
    strings run in ``namespace``, each the best of 3 runs of a loop of about 0.05 s),
    timed back to back in each round. For calls of tens of nanoseconds: nothing but the
    statement is timed (no wrapper call, no clock read per call) to dilute the ratio."""
    import statistics
    import timeit

    timers = [timeit.Timer(s, globals=namespace) for s in (stmt, reference)]
    numbers = [max(1, t.autorange()[0] // 4) for t in timers]  # autorange sizes a loop to >= 0.2 s

    def per_call(i):
        return min(timers[i].repeat(repeat=3, number=numbers[i])) / numbers[i]

    return statistics.median(per_call(0) / per_call(1) for _ in range(rounds))


def record_ratio(benchmark, name, reference_s):
    """Put the reference time and the speed-up over it into the benchmark's extra info."""
    if benchmark.stats is None:  # --benchmark-disable: the code ran once, nothing was timed
        return
    mean = benchmark.stats.stats.mean
    benchmark.extra_info[f"{name}_us"] = reference_s * 1e6
    benchmark.extra_info[f"speedup_vs_{name}"] = reference_s / mean if mean > 0 else float("inf")
