"""Batch kernels of the core (docs/tables.md#lookup, docs/calibration.md#queries) against a NumPy version and the plain reference.

Run: ``pytest benchmarks/test_core.py --benchmark-only``. Each benchmark times specsim's call
from Python (wrapper included) after a warm-up that compiles the kernel, and times the NumPy
version and the plain reference in the same run; the speed-ups are in ``extra_info``.
"""

import timeit

import numpy as np
import pytest

from tests import reference as ref
from specsim import AcceptanceCalibration, Cell, CostTable, DrafterKey, TableKey

EDGES = [-4.0, -2.0, -1.0, -0.5, -0.25, -0.1, -0.05, -0.02, -0.005, 0.0]
P = [0.05, 0.1, 0.2, 0.35, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95]
PRIORS = [0.8, 0.7, 0.6, 0.55, 0.5]


def best_of(fn, repeat=5):
    number = max(1, int(0.05 / max(timeit.timeit(fn, number=1), 1e-7)))
    return min(timeit.repeat(fn, number=number, repeat=repeat)) / number


def record(benchmark, fast, **others):
    benchmark.extra_info["specsim_s"] = t = best_of(fast)
    for name, fn in others.items():
        other = best_of(fn, repeat=3 if name == "plain" else 5)
        benchmark.extra_info[f"{name}_s"] = other
        benchmark.extra_info[f"speedup_vs_{name}"] = round(other / t, 1)


# ---------------------------------------------------------------- expected acceptance 256 x 8
@pytest.fixture(scope="module")
def batch():
    rng = np.random.default_rng(0)
    cal = AcceptanceCalibration(DrafterKey("x", 32000, "bf16", True), EDGES, P, PRIORS)
    conf = np.log(rng.uniform(0.001, 1.0, size=(256, 8))).astype(np.float32)
    conf[rng.uniform(size=conf.shape) < 0.02] = np.nan
    n_conf = rng.integers(0, 9, size=256).astype(np.int64)
    return cal, conf, n_conf


def expected_accepted_numpy(cal, conf, n_conf, k):
    """Vectorised: bucket by searchsorted, priors where unmeasured, running products, row sums."""
    m = conf.shape[1]
    cols = np.arange(1, k + 1)
    lp = conf[:, :k] if k <= m else np.pad(conf, ((0, 0), (0, k - m)), constant_values=np.nan)
    idx = np.minimum(np.searchsorted(cal.edges, lp, side="left"), cal.edges.shape[0] - 1)
    prior = cal.priors[np.minimum(cols - 1, cal.priors.shape[0] - 1)]
    measured = (cols[None, :] <= n_conf[:, None]) & ~np.isnan(lp)
    p = np.where(measured, cal.p_accept[idx], prior[None, :])
    return np.cumprod(p, axis=1).sum(axis=1)


def expected_accepted_plain(cal, conf, n_conf, k):
    edges, p, priors = EDGES, P, PRIORS
    return [ref.ref_expected_accepted(edges, p, priors, [float(x) for x in conf[i, :n_conf[i]]], k)
            for i in range(conf.shape[0])]


def test_expected_accepted_256x8(benchmark, batch):
    cal, conf, n_conf = batch
    out = np.empty(256)
    got = cal.expected_accepted_batch(conf, n_conf, 8, out=out)  # warm-up: compiles
    np.testing.assert_allclose(got, expected_accepted_numpy(cal, conf, n_conf, 8), rtol=1e-12)
    assert got.tolist() == expected_accepted_plain(cal, conf, n_conf, 8)

    fast = lambda: cal.expected_accepted_batch(conf, n_conf, 8, out=out)  # noqa: E731
    benchmark(fast)
    record(benchmark, fast, numpy=lambda: expected_accepted_numpy(cal, conf, n_conf, 8),
           plain=lambda: expected_accepted_plain(cal, conf, n_conf, 8))


def test_expected_accepted_256x8_numpy(benchmark, batch):
    cal, conf, n_conf = batch
    benchmark(expected_accepted_numpy, cal, conf, n_conf, 8)


def test_p_matrix_256x8(benchmark, batch):
    cal, conf, n_conf = batch
    out = np.empty((256, 8))
    cal.p_matrix(conf, n_conf, out=out)

    def numpy_version():
        idx = np.minimum(np.searchsorted(cal.edges, conf, side="left"), cal.edges.shape[0] - 1)
        cols = np.arange(1, 9)
        measured = (cols[None, :] <= n_conf[:, None]) & ~np.isnan(conf)
        return np.where(measured, cal.p_accept[idx], cal.priors[np.minimum(cols - 1, 4)][None, :])

    np.testing.assert_array_equal(out, numpy_version())
    fast = lambda: cal.p_matrix(conf, n_conf, out=out)  # noqa: E731
    benchmark(fast)
    record(benchmark, fast, numpy=numpy_version)


# ---------------------------------------------------------------- batched cell lookup
@pytest.fixture(scope="module")
def lookups():
    rng = np.random.default_rng(1)
    widths = [1, 2, 4, 8, 16, 32, 64, 128, 256]
    cells = [Cell(n, k, 10.0 + n * 0.3 + k * 2 + rng.uniform(), 2.0 + n * 0.05 + k, 0.0 if k == 0 else 1.5 * k,
                  0.0 if k == 0 else 0.2 * k) for n in widths for k in range(9)]
    table = CostTable.from_cells(TableKey(1, "h200", "r", {"verify": "a"}), cells)
    ns = rng.integers(0, 300, size=4096).astype(np.int64)
    ks = rng.integers(0, 9, size=4096).astype(np.int64)
    return table, cells, ns, ks


def lookup_numpy(table, ns, ks):
    w = table.widths
    hi = np.searchsorted(w, ns, side="left")
    lo = np.where((hi < w.shape[0]) & (w[np.minimum(hi, w.shape[0] - 1)] == ns), hi, hi - 1)
    hi_c, lo_c = np.minimum(hi, w.shape[0] - 1), np.maximum(lo, 0)
    a_c, b_c = np.where(lo < 0, hi_c, lo_c), np.where(hi >= w.shape[0], lo_c, hi_c)
    span = w[b_c] - w[a_c]
    t = np.where(span > 0, (ns - w[a_c]) / np.where(span > 0, span, 1), 0.0)
    p, q = table.costs[a_c, ks], table.costs[b_c, ks]
    return p + (q - p) * t[:, None]


def test_lookup_4096(benchmark, lookups):
    table, cells, ns, ks = lookups
    out = np.empty((4096, 4))
    table.lookup(ns, ks, out=out)
    np.testing.assert_array_equal(out, lookup_numpy(table, ns, ks))
    assert all(tuple(out[i]) == ref.ref_cell(cells, int(ns[i]), int(ks[i])) for i in range(0, 4096, 97))
    fast = lambda: table.lookup(ns, ks, out=out)  # noqa: E731
    benchmark(fast)
    record(benchmark, fast, numpy=lambda: lookup_numpy(table, ns, ks),
           plain=lambda: [ref.ref_cell(cells, int(n), int(k)) for n, k in zip(ns[:256], ks[:256])] and None)
    # the plain reference was timed on 256 of the 4096 queries
    benchmark.extra_info["speedup_vs_plain"] = round(benchmark.extra_info["plain_s"] * 16 / benchmark.extra_info["specsim_s"], 1)


def test_scalar_cell(benchmark, lookups):
    table, cells, _, _ = lookups
    table.cell(37, 3)
    benchmark(table.cell, 37, 3)
    record(benchmark, lambda: table.cell(37, 3), plain=lambda: ref.ref_cell(cells, 37, 3))
