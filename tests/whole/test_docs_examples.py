"""The examples in docs/formats.md are files specsim reads: each TOML block parses with the reader
of its kind, and the CSV and JSON examples read as the docs say."""

from __future__ import annotations

import json
import re
import shutil

import pytest

from tests.fixtures import ROOT

FORMATS = ROOT / "docs" / "formats.md"


def examples(lang):
    return re.findall(rf"^```{lang}\n(.*?)^```$", FORMATS.read_text(encoding="utf-8"), flags=re.M | re.S)


def kind(block: str) -> str:
    """Which reader a TOML example is for, from its first table or field."""
    if "[key]" in block:
        return "table"
    if "[drafter]" in block:
        return "calibration"
    if block.startswith("edges"):
        return "counts"
    if "[[run]]" in block or "[[trace]]" in block:
        return "acceptance"
    if "windows = " in block:
        return "windows"
    if "[axes]" in block:
        return "grid"
    if "layers =" in block:
        return "recipe"
    raise AssertionError(f"an example of no known kind:\n{block}")


def test_every_kind_has_an_example():
    kinds = [kind(b) for b in examples("toml")]
    assert sorted(set(kinds)) == ["acceptance", "calibration", "counts", "grid", "recipe", "table", "windows"]


@pytest.mark.parametrize("block", examples("toml"), ids=lambda b: kind(b))
def test_toml_example_reads(block, tmp_path):
    from specsim._toml import loads
    from specsim.calibration import AcceptanceCalibration
    from specsim.calibration.fit import parse_counts, steps_from_windows
    from specsim.errors import SpecsimError
    from specsim.measure.recipes import parse_recipe
    from specsim.sim.replay import parse_acceptance_file
    from specsim.studies.sweep.grid import parse_grid
    from specsim.table import CostTable

    k = kind(block)
    if k == "table":
        table = CostTable.parse(block)
        assert table.meta["energy_source"] == "nvml" and table.cell(1, 0).verify_ms == 10.0
    elif k == "calibration":
        cal = AcceptanceCalibration.parse(block)
        assert cal.p_given_lp(-0.5) == 0.6 and cal.prior(9) == 0.5
        assert cal.rank_acceptance.shape == (2, 3) and cal.tree_counts.reached == (5000, 3100)
    elif k == "counts":
        counts = parse_counts(block)
        assert counts.reached == 642 and counts.steps == {(3, 3): 160, (3, 0): 40}
    elif k == "acceptance":
        afile = parse_acceptance_file(block)
        assert afile.traces or afile.runs
        for raw in loads(block, "x", "x", SpecsimError).get("run", []):
            if "windows" in raw:
                steps_from_windows(raw["windows"])
    elif k == "windows":
        steps = steps_from_windows(loads(block, "x", "x", SpecsimError)["windows"])
        assert steps[(3, 3)] == 63 + 58 and steps[(3, 0)] == 16
    elif k == "grid":
        for name in ("table.toml", "cal.toml"):
            shutil.copy(ROOT / "examples" / name, tmp_path / name)
        shutil.copy(ROOT / "examples" / "trace.csv", tmp_path / "conv.csv")
        grid = parse_grid(block.replace('format = "azure2023", ', ""), tmp_path)
        assert len(grid.points) == 3 * 2 * 2 * 2
    else:
        assert parse_recipe(block).id == "llama-3.1-8b/eagle-1l-bf16"


def test_drafts_log_example_bins(tmp_path):
    from specsim.calibration.logs import load_drafts_log

    chain, tree = examples("csv")
    path = tmp_path / "drafts.csv"
    path.write_text(chain)
    counts, _ = load_drafts_log(path)
    # chain (0, 0): accepted, accepted, rejected; chain (0, 1): accepted
    assert counts.steps == {(3, 2): 1, (1, 1): 1}
    assert (sum(counts.accepted), sum(counts.rejected)) == (3, 1)
    path.write_text(tree)
    counts, _, trees = load_drafts_log(path, tree=True)
    # the target took the rank-2 candidate at depth 1, then its rank-1 child; the rank-1 path
    # (the chain part) was rejected at its first draft
    assert trees.reached == (1, 1) and trees.matched == ((0, 1), (1, 0))
    assert counts.steps == {(2, 0): 1} and counts.unreached == 1


def test_planner_inputs_example_is_json():
    text = FORMATS.read_text(encoding="utf-8")
    example = re.search(r"Example: `(\[\[.*?\]\])`", text, flags=re.S).group(1)
    batch = json.loads(" ".join(example.split()))
    assert batch[2][0] is None and len(batch) == 3


def test_the_server_options_named_are_server_options():
    from specsim.sim.options import option_names

    text = FORMATS.read_text(encoding="utf-8")
    para = text[text.index("- Server options (in `[server]`"):]
    named = re.findall(r"`(\w+)`", para[:para.index("An option is")])
    assert len(named) >= 9
    assert set(named) - {"server"} <= option_names()
