"""Binning raw draft logs into fitting counts (docs/calibration.md#from-logs-to-counts): rows per second, against the reference.

Run: ``pytest benchmarks/test_fit.py``. Each benchmark records ``rows_per_s`` in its extra info;
the reference runs on a slice in the same session so the figures compare on a noisy machine.
"""

import time

import numpy as np
import pytest

from tests.reference import ref_bin_drafts

from specsim.calibration.fit import DEFAULT_EDGES
from specsim.calibration.logs import bin_drafts, load_drafts_log

CHAINS = 1_000_000
DEPTH = 4  # 4 million rows


def make_log(chains=CHAINS, depth=DEPTH, seed=0):
    rng = np.random.default_rng(seed)
    n = chains * depth
    step = np.repeat(np.arange(chains // 8, dtype=np.int64), 8 * depth)[:n]
    seq = np.tile(np.repeat(np.arange(8, dtype=np.int64), depth), chains // 8 + 1)[:n]
    position = np.tile(np.arange(1, depth + 1, dtype=np.int64), chains)
    conf = -rng.exponential(0.4, n)
    conf[rng.random(n) < 1e-4] = np.nan
    accepted = (rng.random(n) < np.exp(conf * 0.8)).astype(np.int8)
    return step, seq, position, conf, accepted


@pytest.fixture(scope="module")
def log():
    cols = make_log()
    bin_drafts(*(c[:100] for c in cols))  # compile before timing
    return cols


def _rate(benchmark, rows):
    if benchmark.stats is None:  # --benchmark-disable: ran once, untimed
        return float("nan")
    rate = rows / benchmark.stats.stats.median
    benchmark.extra_info["rows"] = rows
    benchmark.extra_info["rows_per_s"] = rate
    print(f"\n{benchmark.name}: {rows} rows, median {benchmark.stats.stats.median:.3f} s, {rate / 1e6:.1f} M rows/s")
    return rate


def test_bin_sorted_log(benchmark, log):
    fit, _ = benchmark.pedantic(bin_drafts, args=log, kwargs={"edges": DEFAULT_EDGES}, rounds=5, iterations=1)
    assert fit.step_count == CHAINS
    _rate(benchmark, log[0].shape[0])


def test_bin_unsorted_log(benchmark, log):
    order = np.random.default_rng(1).permutation(log[0].shape[0])
    shuffled = [np.ascontiguousarray(c[order]) for c in log]
    fit, _ = benchmark.pedantic(bin_drafts, args=shuffled, kwargs={"edges": DEFAULT_EDGES}, rounds=3, iterations=1)
    assert fit.step_count == CHAINS
    _rate(benchmark, log[0].shape[0])


def test_reference_on_a_slice(benchmark, log):
    rows = 200_000
    data = list(zip(*(c[:rows].tolist() for c in log)))
    benchmark.pedantic(ref_bin_drafts, args=(list(DEFAULT_EDGES), data), rounds=1, iterations=1)
    ref_rate = _rate(benchmark, rows)
    start = time.perf_counter()
    bin_drafts(*log, edges=DEFAULT_EDGES)
    fast_rate = log[0].shape[0] / (time.perf_counter() - start)
    benchmark.extra_info["speedup"] = fast_rate / ref_rate
    print(f"binning kernel vs reference: {fast_rate / ref_rate:.0f}x")


def test_read_and_bin_jsonl(benchmark, tmp_path_factory):
    import json

    chains = 50_000
    cols = make_log(chains, DEPTH, seed=3)
    path = tmp_path_factory.mktemp("log") / "drafts.jsonl"
    with open(path, "w") as f:
        for s, q, p, c, a in zip(*(c.tolist() for c in cols)):
            f.write(json.dumps({"step": s, "sequence": q, "position": p, "confidence": c, "accepted": bool(a)}) + "\n")
    fit, _ = benchmark.pedantic(load_drafts_log, args=(path,), rounds=2, iterations=1)
    assert fit.step_count == chains
    _rate(benchmark, chains * DEPTH)


def test_read_and_bin_csv(benchmark, tmp_path_factory):
    chains = 250_000
    cols = make_log(chains, DEPTH, seed=2)
    path = tmp_path_factory.mktemp("log") / "drafts.csv"
    with open(path, "w") as f:
        f.write("step,sequence,position,confidence,accepted\n")
        np.savetxt(f, np.column_stack(cols), fmt=["%d", "%d", "%d", "%.7g", "%d"], delimiter=",")
    fit, _ = benchmark.pedantic(load_drafts_log, args=(path,), rounds=2, iterations=1)
    assert fit.step_count == chains
    _rate(benchmark, chains * DEPTH)
