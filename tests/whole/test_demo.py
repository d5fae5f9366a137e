"""`specsim demo`: the main job on built-in defaults, and the files it leaves to start from."""

from __future__ import annotations

import json

import numpy as np
import pytest

from specsim import AcceptanceCalibration, CostTable
from specsim.cli import main
from specsim.demo import (CONV_RATE_PER_S, DEMO_POLICIES, DEMO_TREE_POLICIES, SGLANG_ADAPTIVE_FILE, SGLANG_TREE_FILE,
                          auto_tree_widths, demo_adaptive, demo_inputs, demo_sglang_tree, demo_trace, run_demo)
from specsim.demo_inputs import DEMO_MAX_K, DEMO_WIDTHS, EAGLE_PRIORS, demo_calibration, demo_p_accept, demo_table
from specsim.traces import read_trace


def test_demo_writes_what_it_used_and_a_rerun_reproduces_it(tmp_path, capsys):
    out = tmp_path / "demo"
    assert main(["demo", "--out", str(out), "--requests", "400", "--no-plot"]) == 0
    printed = capsys.readouterr().out
    for policy in ("fixed:3", "goodput", "propose@0", "sequence@0", "schedule:"):
        assert policy in printed
    table = CostTable.load(out / "table.toml")
    assert table.meta["energy_source"] == "model"
    cal = AcceptanceCalibration.load(out / "calibration.toml")
    assert "published" in cal.meta["source"]
    results = json.loads((out / "results.json").read_text())
    names = [p["policy"] for p in results["policies"]]
    # The built-in policies, then the tuned schedule and the best fixed depth the closing lines
    # name (where not among them), then SGLang's controller, SGLang's tree and tree:auto.
    from specsim.studies.schedule_file import load_schedule as _load

    result = _load(out / "schedule.toml").sections["result"]
    trees = [str(demo_sglang_tree()), *DEMO_TREE_POLICIES]
    assert names[:len(DEMO_POLICIES)] == list(DEMO_POLICIES) and names[-len(trees) - 1:] == [str(demo_adaptive())] + trees
    assert names[len(DEMO_POLICIES):-len(trees) - 1] == [p for p in (result["tuned"], result["best_fixed"])
                                                        if p not in DEMO_POLICIES]
    # The calibration carries the [tree] table the trees are served from.
    assert cal.rank_acceptance is not None and cal.rank_acceptance[:5, 0].tolist() == cal.priors.tolist()
    assert all(p["requests"] == 400 for p in results["policies"])

    # The written trace reads back (format detected) to the generated one.
    read = read_trace(out / "trace.csv")
    generated = demo_trace(400).requests
    assert read.format == "csv"
    assert np.array_equal(read.requests["prompt_tokens"], generated["prompt_tokens"])
    assert np.array_equal(read.requests["output_tokens"], generated["output_tokens"])
    np.testing.assert_allclose(read.requests["arrival_s"], generated["arrival_s"], rtol=1e-15, atol=1e-12)

    # The command the demo prints reproduces its sequence row from the files.
    assert "tuned schedule for this trace" in printed and "vLLM: --speculative-config '" in printed
    from specsim.studies.schedule_file import load_schedule

    assert load_schedule(out / "schedule.toml").sections["inputs"]["requests"] == 400
    command = next(line for line in printed.splitlines() if line.strip().startswith("specsim simulate")).split()
    assert command[0] == "specsim"
    single = tmp_path / "single.json"
    assert main(command[1:] + ["--json", str(single), "--quiet"]) == 0
    mine = json.loads(single.read_text())["policies"][0]
    theirs = next(p for p in results["policies"] if p["policy"] == "sequence")
    for key in ("output_tokens", "tokens_per_s", "j_per_token", "accepted_per_step"):
        assert np.isclose(mine[key], theirs[key], rtol=1e-9), key

    # SGLang's controller on the config file the demo leaves (its defaults) reproduces its row too.
    assert (out / SGLANG_ADAPTIVE_FILE).read_text().strip() == "{}"
    command[command.index("--policy") + 1] = f"sglang-adaptive:{out / SGLANG_ADAPTIVE_FILE}"
    assert main(command[1:] + ["--json", str(single), "--quiet"]) == 0
    mine = json.loads(single.read_text())["policies"][0]
    theirs = next(p for p in results["policies"] if p["policy"].startswith("sglang-adaptive:"))
    assert mine["accepted_per_step"] != next(p for p in results["policies"] if p["policy"] == "fixed:3")["accepted_per_step"]
    for key in ("output_tokens", "tokens_per_s", "j_per_token", "accepted_per_step"):
        assert np.isclose(mine[key], theirs[key], rtol=1e-9), key

    # So does SGLang's EAGLE tree on the server settings the demo leaves (5 steps, top-k 4, 8 tokens).
    assert json.loads((out / SGLANG_TREE_FILE).read_text()) == {
        "speculative_num_steps": 5, "speculative_eagle_topk": 4, "speculative_num_draft_tokens": 8}
    command[command.index("--policy") + 1] = f"sglang:{out / SGLANG_TREE_FILE}"
    assert main(command[1:] + ["--json", str(single), "--quiet"]) == 0
    mine = json.loads(single.read_text())["policies"][0]
    theirs = next(p for p in results["policies"] if p["policy"] == f"sglang:{SGLANG_TREE_FILE}")
    assert theirs["nodes_per_sequence"] == 7.0
    for key in ("output_tokens", "tokens_per_s", "j_per_token", "accepted_per_step"):
        assert np.isclose(mine[key], theirs[key], rtol=1e-9), key


def test_demo_trace_has_the_published_shape():
    r = demo_trace(20000, seed=3, rate_scale=1.0).requests
    rate = (r.shape[0] - 1) / r["arrival_s"][-1]
    assert abs(rate / CONV_RATE_PER_S - 1) < 0.05
    assert 900 < np.median(r["prompt_tokens"]) < 1150
    assert 115 < np.median(r["output_tokens"]) < 145


def test_demo_plot_when_matplotlib_is_present(tmp_path):
    import pytest

    pytest.importorskip("matplotlib")
    run_demo(requests=150, out=tmp_path, plot=True)
    assert (tmp_path / "plot.png").read_bytes()[:4] == b"\x89PNG"


def _written_line(printed):
    return next(line for line in printed.splitlines() if " written to " in line and "Start from them" in line)


@pytest.mark.slow
def test_demo_names_only_the_files_it_wrote(tmp_path, capsys, monkeypatch):
    """The closing line lists what is on disk: with --no-plot, or without matplotlib, no plot is
    claimed, and the reason is given (the extra to install, when that is it)."""
    import builtins

    import pytest

    pytest.importorskip("matplotlib")
    assert main(["demo", "--out", str(tmp_path / "a"), "--requests", "150", "--no-tune"]) == 0
    line = _written_line(capsys.readouterr().out)
    assert "plot.png" in line and "no plot" not in line and (tmp_path / "a" / "plot.png").exists()

    assert main(["demo", "--out", str(tmp_path / "b"), "--requests", "150", "--no-tune", "--no-plot"]) == 0
    line = _written_line(capsys.readouterr().out)
    assert "plot" not in line.replace("no plot: --no-plot", "") and "no plot: --no-plot" in line
    assert "results.json" in line and not (tmp_path / "b" / "plot.png").exists()

    real = builtins.__import__

    def no_matplotlib(name, *args, **kwargs):
        if name.startswith("matplotlib"):
            raise ImportError("no matplotlib here")
        return real(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_matplotlib)
    assert main(["demo", "--out", str(tmp_path / "c"), "--requests", "150", "--no-tune"]) == 0
    line = _written_line(capsys.readouterr().out)
    assert "plot.png" not in line and "pip install 'specsim-llm[plot]'" in line
    assert not (tmp_path / "c" / "plot.png").exists()
    listed = line.split(" written to ")[0].replace(" and ", ", ").split(", ")
    assert sorted(listed) == sorted(p.name for p in (tmp_path / "c").iterdir())


def test_demo_refuses_bad_options(tmp_path, capsys):
    assert main(["demo", "--out", str(tmp_path), "--requests", "0"]) == 2
    assert "--requests" in capsys.readouterr().err


# The comparison table's leading columns, in the order printed.
COLUMNS = ("policy", "tok/s", "J/tok", "W", "width", "nodes", "acc/step", "queue_p99", "TTFT_p50", "TTFT_p99",
           "TPOT_p50", "TPOT_p99")


def _table_rows(printed):
    """The comparison table's rows: label -> cells, as printed."""
    lines = printed.splitlines()
    head = next(i for i, line in enumerate(lines) if line.strip().startswith("policy ") and "J/tok" in line)
    header = lines[head].split()
    rows = {}
    for line in lines[head + 2:]:
        if line.startswith("("):
            break
        cells = line.split()
        rows[cells[0]] = dict(zip(COLUMNS, cells))
    # The header as printed (two-word names such as "TPOT p99" joined): the columns read above.
    joined = " ".join(header).replace("queue p99", "queue_p99")
    for name in ("TTFT", "TPOT", "E2E"):
        joined = joined.replace(f"{name} p50", f"{name}_p50").replace(f"{name} p99", f"{name}_p99")
    assert joined.split()[:len(COLUMNS)] == list(COLUMNS) and rows
    return rows


def _row(rows, name):
    """The row of policy ``name`` (a planner policy's row carries its slack, ``propose@0``)."""
    for label in (name, f"{name}@0"):
        if label in rows:
            return rows[label]
    raise AssertionError(f"{name} is not a row of the table: {sorted(rows)}")


def test_the_demo_answer_and_plot_agree_with_the_table(tmp_path, capsys):
    """Every policy the closing lines name is a row of the table and a series of the plot; the
    lead line's figures are the table's; the plot has one legend and labels only what it draws."""
    import re

    pytest.importorskip("matplotlib")
    out = tmp_path / "demo"
    assert main(["demo", "--out", str(out), "--requests", "400"]) == 0
    printed = capsys.readouterr().out
    rows = _table_rows(printed)
    lines = printed.splitlines()

    # The closing lines: the tuned schedule, the best fixed depth, propose and sequence, all rows.
    at = next(i for i, line in enumerate(lines) if line.startswith("tuned schedule for this trace"))
    tuned = lines[at + 1].strip()
    best_fixed = re.search(r"the best fixed depth within the SLO, (fixed:\d+)", lines[at + 2]).group(1)
    named = [tuned, best_fixed, "propose", "sequence"]
    for name in named:
        _row(rows, name)
    verdict_line = lines[at + 3]
    served = re.search(r"serve (fixed:\d+)", verdict_line)
    if served:
        _row(rows, served.group(1))

    # The plot draws every row, under one legend; its first panel promises slack labels only
    # when it draws them (one slack here: none).
    doc = json.loads((out / "results.json").read_text())
    series = doc["plot"]["series"]
    drawn = {name for s in series for name in s.split(" = ")}
    assert set(rows) <= drawn and doc["plot"]["legends"] == 1
    assert "slack" not in doc["plot"]["titles"][0]
    assert [p["label"] for p in doc["policies"]] == list(rows)

    # The lead line: each figure it names is read off the table (plain decoding's row and the
    # named policy's row), and a tie it calls is a tie in the verdict below it.
    lead = next(line for line in lines if line.startswith("answer: "))
    assert lines.index(lead) < next(i for i, line in enumerate(lines) if line.startswith("lowest energy"))
    plain = _row(rows, "fixed:0")
    for figure, key, scale, digits in (("p99 TPOT", "TPOT_p99", 1000.0, ".1f"), ("energy", "J/tok", 1.0, ".4f")):
        m = re.search(rf"{figure} ([\d.]+) -> ([\d.]+) \S+ \([+-]\d+%, ([^)]+)\)", lead)
        if m is None:
            assert f"{figure}: no gain beyond the noise" in lead or "no figure gains" in lead
            continue
        assert m.group(1) == format(float(plain[key]) * scale, digits)
        assert m.group(2) == format(float(_row(rows, m.group(3))[key]) * scale, digits)
    for figure, verdict_name in (("p99 TPOT", "lowest p99 TPOT"), ("energy", "lowest energy")):
        line = next(x for x in lines if x.startswith(verdict_name + ":"))
        said_tie = re.search(rf"Between the speculative policies, [^.:]*{figure}[^.:]* differences are within", lead)
        assert bool(said_tie) == ("tie within noise" in line), (lead, line)


# -- the demo's inputs --------------------------------------------------------------------------
def test_demo_table_has_every_width_at_every_depth():
    t = demo_table()
    assert t.widths.tolist() == list(DEMO_WIDTHS) and t.max_k == DEMO_MAX_K == 8
    assert len(t.cells) == len(DEMO_WIDTHS) * (DEMO_MAX_K + 1)
    assert t.key.box_class == "h200" and t.key.recipe == "llama-3.1-8b/eagle-1l-bf16"
    assert CostTable.parse(t.to_text()) == t
    assert t.meta["energy_source"] == "model"


def test_demo_calibration_comes_from_the_published_rates():
    cal = demo_calibration()
    assert cal.priors.tolist() == list(EAGLE_PRIORS)
    p = np.asarray(demo_p_accept())
    assert (np.diff(p) > 0).all() and p[-1] == pytest.approx(np.exp(-0.0025))
    # A confidence near certainty is accepted about as often as it is confident (EAGLE-2).
    assert cal.p_given_lp(np.log(0.9)) == pytest.approx(np.exp((-0.25 - 0.1) / 2))
    assert AcceptanceCalibration.parse(cal.render()) == cal
    # Expected accepted of a 5-draft chain under the priors: 0.79 + 0.79*0.74 + ...
    want = np.cumsum(np.cumprod(EAGLE_PRIORS)).tolist()[-1]
    assert cal.expected_accepted([], 5) == pytest.approx(want)


def test_the_demo_trees_line_agrees_with_the_table(tmp_path, capsys):
    """The closing line on trees compares the best tree row with the best chain row (each the
    least of its figure among the distinct rows), with the table's own figures, and says where
    tree:auto plans branching trees as the engine plans them."""
    import re

    out = tmp_path / "demo"
    assert main(["demo", "--out", str(out), "--requests", "300", "--no-plot", "--no-tune"]) == 0
    lines = capsys.readouterr().out.splitlines()
    doc = json.loads((out / "results.json").read_text())
    rows = {p["label"]: p for p in doc["policies"]}
    tree_labels = {str(demo_sglang_tree()), *DEMO_TREE_POLICIES}
    line = next(x for x in lines if x.startswith("trees: against the best chain, "))
    figures = {"p99 TPOT": (lambda p: p["tpot_s"]["p99"], 1000.0, ".1f"), "energy": (lambda p: p["j_per_token"], 1.0, ".4f")}
    found = re.findall(r"(p99 TPOT|energy) ([\d.]+) -> ([\d.]+) \S+ \(([+-][\d.]+)%, (\S+) against (\S+)\): "
                       r"(pays, beyond the noise|costs more, beyond the noise|within the noise)", line)
    assert {f[0] for f in found} == set(figures), line
    for figure, chain_text, tree_text, change, tree, chain, said in found:
        get, scale, digits = figures[figure]
        distinct = [p for p in doc["policies"] if p.get("same_as") is None]
        trees = [p for p in distinct if p["label"] in tree_labels]
        chains = [p for p in distinct if p["label"] not in tree_labels and p["policy"] != "fixed:0"]
        assert tree == min(trees, key=get)["label"] and chain == min(chains, key=get)["label"]
        assert tree_text == format(scale * get(rows[tree]), digits)
        assert chain_text == format(scale * get(rows[chain]), digits)
        assert float(change) == pytest.approx(100.0 * (get(rows[tree]) / get(rows[chain]) - 1.0), abs=0.051)
        if said.startswith("pays"):
            assert get(rows[tree]) < get(rows[chain])
        if said.startswith("costs more"):
            assert get(rows[tree]) > get(rows[chain])
    ranges, _ = auto_tree_widths(demo_inputs(300))
    if ranges:
        where = ", ".join(f"{a}" if a == b else f"{a}-{b}" for a, b in ranges)
        assert f"tree:auto plans branching trees at widths {where} " in line
    else:
        assert "tree:auto plans no branching tree at any width" in line
