"""The figures the docs print from the benchmark scripts are the ones those scripts give now.

Every run behind them is seeded, so a doc row either matches the script's row character for
character or is stale: a change to the modelled tables, the calibration or the engine that moves
a figure fails here until the doc is brought up to date.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.fixtures import ROOT

SIMULATION_DOC = ROOT / "docs" / "simulation.md"


def _missing(lines, doc: Path) -> list:
    text = doc.read_text(encoding="utf-8")
    return [line for line in lines if line.strip() and line not in text]


@pytest.mark.slow
def test_the_context_pricing_tables_are_current():
    from benchmarks import context_pricing
    from specsim.demo_inputs import demo_calibration

    table, cal = context_pricing.context_table(), demo_calibration()
    lines = []
    for name, path in context_pricing.TRACES.items():
        count, rows = context_pricing.run(path, table, cal)
        lines += context_pricing.render(name, count, rows).splitlines()
    assert not _missing(lines, SIMULATION_DOC), "docs/simulation.md, 'Context pricing: what it changes'"


@pytest.mark.slow
def test_the_load_aware_table_is_current():
    from benchmarks import load_aware

    rows = load_aware.rows(load_aware.figures())
    assert len(rows) == len(load_aware.LOADS)
    assert not _missing(rows, SIMULATION_DOC), "docs/simulation.md, 'Load-aware: the figures'"
