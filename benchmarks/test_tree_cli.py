"""``specsim tree`` on 9 widths (docs/planner.md#draft-trees), next to the plain reference planner
(``tests/reference.py``'s ``ref_propose_tree`` at the same 9 widths) timed in the same run.

The command reads both files, plans every width, finds the best chain and the best tree beside the
choice, the engine settings of every tree chosen, and writes its JSON; the reference only chooses.
The extra info records ``ms_per_call`` and ``speedup_vs_reference`` (above 1: the command, all
of it, is faster than the reference's choices alone).

Run: ``pytest benchmarks/test_tree_cli.py --benchmark-only``.
"""

from __future__ import annotations

import contextlib
import io
import json

import numpy as np

from benchmarks.conftest import record_ratio, time_per_call
from specsim.cli import main
from specsim.costmodel import model_table
from specsim.demo_inputs import demo_calibration
from tests.reference import ref_propose_tree

WIDTHS = (1, 2, 4, 8, 16, 32, 64, 128, 256)
# The example of docs/planner.md#draft-trees: the demo's priors as the rank-1 column.
TAIL = (0.10, 0.04, 0.02, 0.01)


def test_tree_command_nine_widths(benchmark, tmp_path):
    table = model_table("h200", "llama-3.1-8b", "eagle-1l", tp=1, context_tokens=2048, widths=WIDTHS, max_k=16)
    cal = demo_calibration()
    cal = cal.with_rank_acceptance([[p, *TAIL] for p in cal.priors.tolist()])
    (tmp_path / "t.toml").write_text(table.to_text())
    (tmp_path / "c.toml").write_text(cal.render())
    out = tmp_path / "o.json"
    argv = ["tree", str(tmp_path / "t.toml"), str(tmp_path / "c.toml"), "--widths", ",".join(map(str, WIDTHS)),
            "--json", str(out)]

    def command():
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            assert main(argv) == 0

    command()  # compile first
    benchmark.group = "specsim tree (9 widths)"
    benchmark(command)
    rows = json.loads(out.read_text())["widths"]

    widths, costs, priors = table.widths.tolist(), table.costs.tolist(), cal.priors.tolist()
    a = np.asarray(cal.rank_acceptance).tolist()

    def reference():
        return [ref_propose_tree(widths, costs, priors, a, n, 0.0, 2**62, 64, 8, 1.10) for n in WIDTHS]

    assert [r["choice"] for r in rows] == [choice[0] for choice in reference()]
    if benchmark.stats is not None:
        benchmark.extra_info["ms_per_call"] = benchmark.stats.stats.mean * 1e3
    record_ratio(benchmark, "reference", time_per_call(reference, min_time=0.2, max_calls=50))
