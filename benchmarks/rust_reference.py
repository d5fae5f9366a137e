"""specsim's planner against a compiled Rust reference of the same rule (benchmarks/rust_reference/).

The crate is ``sequence_depths`` as a Rust serve writes it (a ``Vec`` per call, a stable
comparison sort of the extra rows, the table read by interpolation in width, every prefix scanned
with the exact arithmetic; no dependencies). This script builds it (``cargo build --release
--offline``), writes a table, a calibration and a batch for each case, runs its ``bench`` binary
(median ns per call after a warm-up), times ``Planner.depths`` on the same inputs in this process
(warmed up, median), checks that both chose the same depths bit for bit (and that
``sequence_depths`` chose them too), and prints the ratio Rust time / specsim time: how many times
faster specsim is. The target (docs/planner.md, "Speed") is at least 20 at n = 256, K = 8.

Usage::

    python -m benchmarks.rust_reference              # n = 8, 64, 256, 1024; K = 8, two tables
    python -m benchmarks.rust_reference --n 256 --rounds 5

Needs ``cargo``; the build goes to the system's temporary folder (``specsim-rust-reference``),
kept between runs.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
import timeit
from pathlib import Path

import numpy as np

CRATE = Path(__file__).resolve().parent / "rust_reference"
# Outside the repository, so the build's own files never mix with the project's; kept between runs.
TARGET = Path(tempfile.gettempdir()) / "specsim-rust-reference"


class NoCargo(RuntimeError):
    """cargo is not installed: the Rust reference cannot be built."""


def build(target_dir=None) -> Path:
    """Build the crate in release mode, offline; the ``bench`` binary's path."""
    cargo = shutil.which("cargo")
    if cargo is None:
        raise NoCargo("cargo is not on PATH")
    target = Path(target_dir) if target_dir is not None else TARGET
    subprocess.run([cargo, "build", "--release", "--offline", "--quiet", "--manifest-path", str(CRATE / "Cargo.toml"),
                    "--target-dir", str(target)], check=True)
    return target / "release" / ("bench.exe" if sys.platform == "win32" else "bench")


def _write(path: Path, arrays: dict) -> None:
    """``NAME COUNT VALUE...`` per array; floats as ``repr`` (read back exactly, ``nan`` for NaN)."""
    lines = []
    for name, values in arrays.items():
        values = np.asarray(values).ravel()
        text = [repr(float(v)) if values.dtype.kind == "f" else str(int(v)) for v in values]
        lines.append(f"{name} {len(text)}\n" + " ".join(text))
    path.write_text("\n".join(lines) + "\n")


def write_inputs(folder, table, cal, conf, n_conf, known, k_max, row_budget, slack) -> tuple:
    """The bench's three files for one batch (``conf`` float32 ``(n, m)``, ``n_conf`` real
    confidences per row); their paths."""
    folder = Path(folder)
    paths = folder / "table.txt", folder / "calibration.txt", folder / "batch.txt"
    _write(paths[0], {"widths": table.widths, "depths": [table.costs.shape[1]], "cells": table.costs})
    _write(paths[1], {"edges": cal.edges.astype(np.float64), "p_accept": cal.p_accept, "priors": cal.priors})
    real = np.minimum(n_conf, conf.shape[1])
    flat = np.concatenate([conf[i, :real[i]] for i in range(conf.shape[0])]) if conf.shape[0] else np.empty(0)
    _write(paths[2], {"k_max": [k_max], "row_budget": [row_budget], "slack": [float(slack)], "known": known,
                      "n_conf": real, "confidences": flat.astype(np.float64)})
    return paths


def run_bench(binary, paths, samples=2001) -> tuple:
    """The depths the Rust reference chose and its median ns per call (None with ``samples=0``:
    the depths only, nothing timed)."""
    out = subprocess.run([str(binary), *map(str, paths), str(samples)], check=True, capture_output=True,
                         text=True).stdout
    fields = {line.split()[0]: line.split()[1:] for line in out.splitlines() if line.strip()}
    return [int(d) for d in fields["depths"][1:]], float(fields["ns_per_call"][0]) if samples else None


def time_specsim(planner, call, rounds=201) -> float:
    """Median ns per call of ``planner.depths(*call)`` (each round a loop of about 0.5 ms)."""
    timer = timeit.Timer(lambda: planner.depths(*call))
    timer.timeit(200)
    per = timer.timeit(50) / 50
    number = max(1, int(5e-4 / per))
    return statistics.median(timer.repeat(repeat=rounds, number=number)) / number * 1e9


def batch(n, k, seed=None):
    """``benchmarks/test_plan.py``'s batch: uniform log-probabilities in [-3, 0), every draft known."""
    rng = np.random.default_rng(n if seed is None else seed)
    conf = rng.uniform(-3.0, 0.0, (n, k)).astype(np.float32)
    return conf, np.full(n, k, dtype=np.int64), np.full(n, k, dtype=np.int64)


def compare(binary, folder, planner, conf, n_conf, known, k_max, row_budget, samples=2001, rounds=201):
    """(Rust depths, specsim depths, Rust ns, specsim ns) on one batch; the depths of
    ``sequence_depths`` are checked equal to ``Planner.depths``'."""
    from specsim import sequence_depths

    out = np.empty(conf.shape[0], dtype=np.int64)
    call = (conf, n_conf, known, k_max, row_budget, out)
    planner.depths(*call)
    mine = out.tolist()
    ragged = [conf[i, :min(int(n_conf[i]), conf.shape[1])].tolist() for i in range(conf.shape[0])]
    table, cal, slack = planner.table, planner.calibration, planner.slack
    function = sequence_depths(table, cal, ragged, known.tolist(), k_max, row_budget, slack)
    if function != mine:
        raise AssertionError("sequence_depths and Planner.depths disagree")
    paths = write_inputs(folder, table, cal, conf, n_conf, known, k_max, row_budget, slack)
    theirs, rust_ns = run_bench(binary, paths, samples)
    ours_ns = time_specsim(planner, call, rounds) if rounds else float("nan")
    return theirs, mine, rust_ns, ours_ns


def main(argv=None) -> int:
    from benchmarks.test_plan import SETUPS

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, action="append", help="batch widths (default 8, 64, 256, 1024)")
    ap.add_argument("--rounds", type=int, default=3, help="runs of both sides per case; the least median is kept")
    args = ap.parse_args(argv)
    binary = build()
    cases = {"K8": SETUPS[8, False], "K8-rows-pay": SETUPS[8, True]}
    print(f"{'case':<12} {'n':>5} {'extra rows':>10} {'rust us':>9} {'specsim us':>10} {'rust / specsim':>14}")
    with tempfile.TemporaryDirectory() as folder:
        for name, (_, _, planner) in cases.items():
            for n in args.n or (8, 64, 256, 1024):
                conf, n_conf, known = batch(n, 8)
                runs = [compare(binary, folder, planner, conf, n_conf, known, 8, n * 8)
                        for _ in range(args.rounds)]
                theirs, mine = runs[0][0], runs[0][1]
                if theirs != mine:
                    print(f"{name} n = {n}: the depths differ", file=sys.stderr)
                    return 1
                # The least of the rounds' medians: on a shared machine, the least disturbed.
                rust = min(r[2] for r in runs)
                ours = min(r[3] for r in runs)
                extra = sum(mine) - sum(d > 0 for d in mine)
                print(f"{name:<12} {n:>5} {extra:>10} {rust / 1e3:>9.2f} {ours / 1e3:>10.2f} {rust / ours:>14.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
