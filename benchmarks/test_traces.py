"""Trace reading and acceptance replay against their plain references (run with ``pytest benchmarks``).

Each benchmark warms the JIT first and times the reference in the same run, so the figure to
read is the ratio. The trace file is generated (Azure-2024 style, 200,000 rows), not shipped.
"""

from __future__ import annotations

import time

import numpy as np
import pytest

from specsim.sim import read_trace
from specsim.sim._replay_kernels import replay_nb
from benchmarks.conftest import record_ratio
from tests import reference as ref

ROWS = 200_000


@pytest.fixture(scope="module")
def azure_file(tmp_path_factory):
    rng = np.random.default_rng(0)
    t = np.cumsum(rng.exponential(0.02, ROWS))
    stamps = (np.datetime64("2024-05-10T00:00:00", "us") + (t * 1e6).astype("timedelta64[us]")).astype(str)
    p, o = rng.integers(1, 8000, ROWS).tolist(), rng.integers(1, 800, ROWS).tolist()
    path = tmp_path_factory.mktemp("bench") / "azure2024.csv"
    path.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n"
                    + "".join(f"{s.replace('T', ' ')}+00:00,{a},{b}\n" for s, a, b in zip(stamps, p, o)))
    return path


def _time(fn):
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def test_read_azure2024(benchmark, azure_file):
    read_trace(azure_file, limit=1)  # compile / load the cached kernels
    reference_s = _time(lambda: ref.ref_read_csv(azure_file, "TIMESTAMP", "ContextTokens", "GeneratedTokens", "datetime"))
    result = benchmark(read_trace, azure_file)
    assert result.requests.shape[0] == ROWS
    record_ratio(benchmark, "reference", reference_s)


def test_replay_kernel(benchmark):
    rng = np.random.default_rng(1)
    digits = rng.integers(0, 5, 600).astype(np.int8)
    budget = 2_000_000
    replay_nb(digits, 8, 3, 10, 50.0, 2.0)
    reference_s = _time(lambda: ref.ref_replay(digits.tolist(), 8, 3, budget, 50.0, 2.0))
    result = benchmark(replay_nb, digits, 8, 3, budget, 50.0, 2.0)
    assert result[0] >= budget
    record_ratio(benchmark, "reference", reference_s)
