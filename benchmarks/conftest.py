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


def interleaved_ratio(fn, reference, rounds=9, min_time=0.05):
    """Median over ``rounds`` of ``time_per_call(fn) / time_per_call(reference)``, the two timed
    back to back in each round, so that a busy spell of the machine hits both sides alike."""
    import statistics

    return statistics.median(time_per_call(fn, min_time=min_time) / time_per_call(reference, min_time=min_time)
                             for _ in range(rounds))


def record_ratio(benchmark, name, reference_s):
    """Put the reference time and the speed-up over it into the benchmark's extra info."""
    if benchmark.stats is None:  # --benchmark-disable: the code ran once, nothing was timed
        return
    mean = benchmark.stats.stats.mean
    benchmark.extra_info[f"{name}_us"] = reference_s * 1e6
    benchmark.extra_info[f"speedup_vs_{name}"] = reference_s / mean if mean > 0 else float("inf")
