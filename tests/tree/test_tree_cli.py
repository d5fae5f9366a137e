"""``specsim tree`` and ``specsim plan --tree`` (docs/planner.md#draft-trees), and the engine
settings of a planned tree (specsim/tree/settings.py): every engine's tree for its settings is the
planned tree, or the closest one says what differs."""

from __future__ import annotations

import ast
import json

import numpy as np
import pytest

from specsim.cli import main
from specsim.demo_inputs import demo_calibration, demo_table
from specsim.plan import Planner
from specsim.tree import Tree, best_tree, greedy_order, tree_from_sglang, tree_from_trtllm
from specsim.tree.settings import (
    engine_settings, rank_paths, sglang_settings, trtllm_settings, vllm_settings, vllm_token_tree,
)
from tests.fixtures import ROOT

pytestmark = pytest.mark.kernels

# The demo's per-position priors as the rank-1 column, and a falling tail of ranks 2..5: the
# example calibration of docs/planner.md#draft-trees.
RANKS = np.array([[p, 0.10, 0.04, 0.02, 0.01] for p in (0.79, 0.74, 0.72, 0.73, 0.74)])
WIDTHS = (1, 2, 4, 8, 16, 32, 64, 128, 256)


@pytest.fixture(scope="module")
def table():
    return demo_table()


@pytest.fixture(scope="module")
def cal():
    return demo_calibration().with_rank_acceptance(RANKS)


@pytest.fixture
def files(tmp_path, table, cal):
    (tmp_path / "t.toml").write_text(table.to_text())
    (tmp_path / "c.toml").write_text(cal.render())
    (tmp_path / "chain.toml").write_text(demo_calibration().render())
    return tmp_path


def run(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def refused(capsys, *argv):
    try:
        code = main([str(a) for a in argv])
    except SystemExit as e:
        code = e.code
    out, err = capsys.readouterr()
    assert code == 2 and "Traceback" not in err and "error:" in err, (code, out, err)
    return err


# -- the engine settings ---------------------------------------------------------------------------

def test_vllm_token_tree_lists_every_node_breadth_first():
    # Depth-first input order; vLLM sorts paths by (length, path) and so do we.
    tree = Tree((-1, 0, -1, 0), (1, 1, 2, 2))
    assert rank_paths(tree) == [(0,), (0, 0), (1,), (0, 1)]
    text = vllm_token_tree(tree)
    assert ast.literal_eval(text) == [(0,), (1,), (0, 0), (0, 1)]
    s = vllm_settings(tree)
    assert s.exact and dict(s.fields) == {"num_speculative_tokens": 4, "speculative_token_tree": text} and s.note


def test_plain_and_chains_are_exact_everywhere():
    plain = engine_settings(Tree.chain(0), RANKS)
    assert all(s.exact and s.fields == () and s.line() == "no speculative decoding" for s in plain)
    chain = Tree.chain(3, 2.5)
    vllm, sglang, trtllm = engine_settings(chain, RANKS)
    assert dict(vllm.fields) == {"num_speculative_tokens": 3} and not vllm.note
    assert dict(sglang.fields) == {"eagle_topk": 1, "num_steps": 3, "num_draft_tokens": 4}
    assert dict(trtllm.fields) == {"use_dynamic_tree": False, "max_draft_len": 3}
    assert all(s.exact and s.expected_tokens == 2.5 for s in (vllm, sglang, trtllm))


@pytest.mark.parametrize("topk,steps,draft_tokens", [(2, 2, 4), (2, 3, 6), (3, 2, 6), (4, 3, 9), (2, 5, 9)])
def test_an_sglang_tree_gets_flags_that_rebuild_it(topk, steps, draft_tokens):
    tree = tree_from_sglang(topk, steps, draft_tokens, RANKS)
    if tree.is_chain:
        pytest.skip("these flags draft a chain here")
    s = sglang_settings(tree, RANKS)
    assert s.exact and not s.differs
    f = dict(s.fields)
    assert f["num_draft_tokens"] == draft_tokens
    again = tree_from_sglang(f["eagle_topk"], f["num_steps"], f["num_draft_tokens"], RANKS)
    assert set(rank_paths(again)) == set(rank_paths(tree))


@pytest.mark.parametrize("topk,depth,total", [(2, 2, 3), (2, 3, 5), (3, 3, 8), (4, 2, 6)])
def test_a_trtllm_tree_gets_fields_that_rebuild_it(topk, depth, total):
    tree = tree_from_trtllm(topk, depth, total, RANKS)
    if tree.is_chain:
        pytest.skip("these fields draft a chain here")
    s = trtllm_settings(tree, RANKS)
    assert s.exact
    f = dict(s.fields)
    assert f["use_dynamic_tree"] is True and f["max_total_draft_tokens"] == total
    again = tree_from_trtllm(f["dynamic_tree_max_topK"], f["max_draft_len"], total, RANKS)
    assert set(rank_paths(again)) == set(rank_paths(tree))


def test_best_trees_get_settings_each_engine_builds_or_the_closest():
    for nodes in range(2, 17):
        tree = best_tree(RANKS, nodes, 5)
        for s in engine_settings(tree, RANKS):
            if s.exact:
                assert s.expected_tokens == tree.expected_tokens and not s.differs
            else:
                # The closest verifies as many nodes and never beats the best tree.
                assert s.expected_tokens <= tree.expected_tokens + 1e-12 and "differs" in s.differs


def test_a_tree_no_engine_flag_builds_says_what_differs():
    # Ranks 1 and 3 under the root without rank 2: no top-k expansion drafts it.
    tree = Tree((-1, -1, 0), (1, 3, 1), 1.0 + 0.79 + 0.04 + 0.79 * 0.74)
    s = sglang_settings(tree, RANKS)
    assert not s.exact and s.differs.startswith("its tree differs in 1 of 3 nodes: without (2,), with ")
    assert dict(s.fields)["num_draft_tokens"] == 4 and s.expected_tokens != tree.expected_tokens
    t = trtllm_settings(tree, RANKS)
    assert not t.exact and "without (2,)" in t.differs and dict(t.fields)["max_total_draft_tokens"] == 3
    assert vllm_settings(tree).exact


def test_a_tree_past_what_an_engine_drafts_is_said_so():
    narrow = np.array([[0.6, 0.3]] * 5)
    tree = best_tree(narrow, 40, 5)
    vllm, sglang, trtllm = engine_settings(tree, narrow)
    assert vllm.exact
    assert not sglang.exact and sglang.fields == () and "at most 18 nodes" in sglang.differs
    assert not trtllm.exact and "at most 10 nodes from a rank table of 5 depths x 2 ranks, not 40" in trtllm.differs
    assert sglang.to_dict()["expected_tokens"] is None and sglang.line() == "no setting drafts this tree"


def test_a_tree_tensorrt_llm_drafts_only_deeper_gets_the_shallowest_deeper_setting():
    # 64 nodes over 3 levels: top-16 x 3 levels drafts 48 at most, so 4 levels.
    rng = np.random.default_rng(0)
    wide = rng.dirichlet(np.ones(17), size=8)[:, :16] * 0.98
    tree = best_tree(wide, 64, 8)
    s = trtllm_settings(tree, wide)
    f = dict(s.fields)
    assert f["max_total_draft_tokens"] == 64 and f["max_draft_len"] == max(tree.depth, 4)


# -- specsim tree -----------------------------------------------------------------------------------

def test_tree_table_shows_trees_paying_small_and_not_at_256(files, capsys, table, cal):
    widths = ",".join(map(str, WIDTHS))
    code, out, err = run(capsys, "tree", files / "t.toml", files / "c.toml", "--widths", widths,
                         "--json", files / "o.json")
    assert code == 0, err
    doc = json.loads((files / "o.json").read_text())
    rows = doc["widths"]
    assert [r["n"] for r in rows] == list(WIDTHS)
    assert rows[0]["choice"] == "tree" and rows[-1]["choice"] != "tree"
    planner = Planner(table, cal, memo=False)
    for r in rows:
        plan = planner.propose_tree(r["n"], max_nodes=64, max_depth=8)
        assert (r["choice"], r["nodes"], r["depth"]) == (plan.kind, plan.nodes, plan.depth)
        assert r["expected_tokens"] == plan.expected_tokens and r["tokens_per_j"] == plan.tokens_per_j
        chosen = r[r["choice"]]
        assert chosen["nodes"] == plan.nodes and chosen["fast_enough"]
        # The choice has the most tokens/J among the kinds fast enough.
        best = max(r[k]["tokens_per_j"] for k in ("plain", "chain", "tree") if r[k] and r[k]["fast_enough"])
        assert chosen["tokens_per_j"] == best
    cross = doc["crossovers"]["tree"]
    last = max(i for i, r in enumerate(rows) if r["choice"] == "tree")
    assert cross == {"last_width": WIDTHS[last], "next_width": WIDTHS[last + 1]}
    assert f"trees stop paying between n = {WIDTHS[last]} and n = {WIDTHS[last + 1]}" in out
    assert doc["why_no_tree"] is None and f"wrote {files / 'o.json'}" in err
    # Each width prints plain, the best chain and the best tree, and settings where a tree wins.
    assert out.count("<-") == len(WIDTHS)
    first = rows[0]
    assert f"settings for the tree of {first['nodes']} nodes, depth {first['depth']} (n = 1" in out
    assert out.count("  vllm: --speculative-config '{\"num_speculative_tokens\": ") == len(
        {(r["choice"], tuple(r["parents"]), tuple(r["ranks"])) for r in rows})


def test_one_width_prints_each_engines_settings(files, capsys):
    code, out, _ = run(capsys, "tree", files / "t.toml", files / "c.toml", "--n", "1")
    assert code == 0
    assert "settings for the tree of " in out and " (n = 1):" in out
    for engine in ("vllm: --speculative-config '{\"num_speculative_tokens\": ", "sglang: --speculative-eagle-topk ",
                   "trtllm: use_dynamic_tree: true, dynamic_tree_max_topK: "):
        assert engine in out
    code, again, _ = run(capsys, "plan", files / "t.toml", files / "c.toml", "--n", "1", "--tree")
    assert code == 0 and again == out


def test_plan_tree_json_is_the_width_row(files, capsys):
    code, out, _ = run(capsys, "plan", files / "t.toml", files / "c.toml", "--n", "256", "--tree", "--json")
    assert code == 0
    row = json.loads(out)
    assert row["n"] == 256 and row["choice"] in ("chain", "plain") and set(row["settings"]) == {"vllm", "sglang",
                                                                                               "trtllm"}
    code, _, _ = run(capsys, "tree", files / "t.toml", files / "c.toml", "--n", "256", "--json", files / "o.json")
    assert json.loads((files / "o.json").read_text())["widths"][0] == row
    code, text, _ = run(capsys, "plan", files / "t.toml", files / "c.toml", "--n", "256", "--tree")
    code, again, _ = run(capsys, "tree", files / "t.toml", files / "c.toml", "--n", "256")
    assert text == again and "No tree pays on this table: at n = 256" in text


def test_a_table_where_no_tree_pays_says_why(files, capsys, table):
    # Ranks past the first almost never match: a tree's extra nodes buy nothing.
    thin = demo_calibration().with_rank_acceptance(RANKS * [1, 0.001, 0.001, 0.001, 0.001])
    (files / "thin.toml").write_text(thin.render())
    code, out, _ = run(capsys, "tree", files / "t.toml", files / "thin.toml", "--widths", "1,8,64",
                       "--json", files / "o.json")
    assert code == 0
    doc = json.loads((files / "o.json").read_text())
    assert all(r["choice"] != "tree" for r in doc["widths"])
    assert doc["why_no_tree"].startswith("No tree pays on this table: at n = 1 the best tree (")
    assert doc["why_no_tree"] in out and "trees pay at none of these widths" in out


def test_the_default_widths_are_the_tables(files, capsys, table):
    code, out, _ = run(capsys, "tree", files / "t.toml", files / "c.toml", "--json", files / "o.json")
    assert code == 0
    assert [r["n"] for r in json.loads((files / "o.json").read_text())["widths"]] == table.widths.tolist()


# -- refusals ---------------------------------------------------------------------------------------

def test_a_calibration_without_a_tree_table_says_chains_only(files, capsys):
    for argv in (["tree", files / "t.toml", files / "chain.toml"],
                 ["plan", files / "t.toml", files / "chain.toml", "--n", "4", "--tree"]):
        err = refused(capsys, *argv)
        assert "chain.toml" in err and "no [tree] table: chains only" in err


@pytest.mark.parametrize("extra,needle", [
    (["--max-nodes", "0"], "--max-nodes 0 is outside 1..256"),
    (["--max-nodes", "257"], "--max-nodes 257 is outside 1..256"),
    (["--max-depth", "0"], "--max-depth 0 is outside 1..64"),
    (["--max-depth", "65"], "--max-depth 65 is outside 1..64"),
    (["--widths", "0,4"], "width 0 is outside 1..1,048,576"),
    (["--widths", f"1,{2**20 + 1}"], "width 1,048,577 is outside"),
    (["--widths", "4,2"], "not strictly ascending"),
    (["--widths", "2,2"], "not strictly ascending"),
    (["--n", "0"], "--n: width 0 is outside"),
    (["--n", "4", "--widths", "4"], "not allowed with argument"),
    (["--slack", "1"], "outside [0, 1)"),
    (["--context", "0"], "context"),
    (["--max-nodes", "-1"], "--max-nodes"),
    (["--tree-attention-factor", "0.5"], "--tree-attention-factor = 0.5 must be >= 1 and <= 10"),
    (["--tree-attention-factor", "nan"], "--tree-attention-factor = nan must be finite"),
])
def test_bad_options_are_refused_by_name(files, capsys, extra, needle):
    err = refused(capsys, "tree", files / "t.toml", files / "c.toml", *extra)
    assert needle in err


def test_the_json_output_cannot_replace_an_input(files, capsys):
    before = (files / "c.toml").read_bytes()
    err = refused(capsys, "tree", files / "t.toml", files / "c.toml", "--json", files / "c.toml")
    assert "--json" in err and "CALIBRATION" in err and (files / "c.toml").read_bytes() == before


def test_a_refused_run_writes_no_json(files, capsys):
    refused(capsys, "tree", files / "t.toml", files / "chain.toml", "--json", files / "o.json")
    assert not (files / "o.json").exists()


@pytest.mark.parametrize("rows,needle", [
    ("[[0.9, 0.2]]", "depth 1 sums to 1.1"),
    ("[[0.5, -0.1]]", "depth 1 rank 2 = -0.1 is not a probability"),
    ("[[nan, 0.1]]", "depth 1 rank 1 = nan"),
    ("[[" + ", ".join(["0.01"] * 17) + "]]", "17 ranks (columns): give 1..16"),
    ("[" + ", ".join(["[0.5]"] * 65) + "]", "65 depths (rows): give 1..64"),
])
def test_a_bad_rank_acceptance_is_refused_at_its_cell(files, capsys, rows, needle):
    head, tail = (files / "c.toml").read_text().split("rank_acceptance = ", 1)
    (files / "bad.toml").write_text(head + f"rank_acceptance = {rows}\n" + tail.split("\n", 1)[1])
    for argv in (["tree", files / "t.toml", files / "bad.toml"],
                 ["plan", files / "t.toml", files / "bad.toml", "--n", "1", "--tree"]):
        err = refused(capsys, *argv)
        assert "bad.toml" in err and "[tree] rank_acceptance" in err and needle in err


def test_tree_options_need_plan_tree(files, capsys):
    err = refused(capsys, "plan", files / "t.toml", files / "c.toml", "--n", "4", "--max-nodes", "8")
    assert "--max-nodes applies to draft trees: give --tree too" in err
    err = refused(capsys, "plan", files / "t.toml", files / "c.toml", "--tree")
    assert "--tree needs --n N" in err
    err = refused(capsys, "plan", files / "t.toml", files / "c.toml", "--n", "4", "--tree", "--max-seqs", "8")
    assert "--max-seqs does not apply to --tree" in err


# -- the docs' run -----------------------------------------------------------------------------------

def test_the_example_tree_calibration_is_current():
    import importlib.util

    spec = importlib.util.spec_from_file_location("make_examples", ROOT / "examples" / "make_examples.py")
    make = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(make)
    assert (ROOT / "examples" / "tree-cal.toml").read_text() == make.tree_calibration()


def test_the_docs_tree_run_is_current(tmp_path, capsys, monkeypatch):
    """docs/planner.md's `specsim tree` block is what its two commands print now."""
    text = (ROOT / "docs" / "planner.md").read_text(encoding="utf-8")
    block = text[text.index("$ specsim table model --gpu h200"):]
    block = block[:block.index("```")]
    first, second = block.split("\n$ specsim tree ", 1)
    model_argv = first.replace("\\\n", " ").split()[2:]
    tree_line, *printed = second.splitlines()
    (tmp_path / "examples").mkdir()
    (tmp_path / "examples" / "tree-cal.toml").write_bytes((ROOT / "examples" / "tree-cal.toml").read_bytes())
    monkeypatch.chdir(tmp_path)
    assert main(model_argv) == 0
    capsys.readouterr()
    code, out, _ = run(capsys, "tree", *tree_line.split())
    assert code == 0
    assert [line.rstrip() for line in out.splitlines()] == printed


def test_a_context_prices_every_candidate_at_that_context(files, capsys, table, cal):
    from specsim.table import CostTable

    grids = {512: table, 8192: CostTable(table.key, table.widths, table.costs * 3.0)}
    ctx = CostTable.from_contexts(grids, reference=512)
    (files / "ctx.toml").write_text(ctx.to_text())
    docs = {}
    for c in ("600", "6000"):
        code, _, err = run(capsys, "tree", files / "ctx.toml", files / "c.toml", "--widths", "1,16,256", "--context", c,
                           "--json", files / f"{c}.json")
        assert code == 0, err
        docs[c] = json.loads((files / f"{c}.json").read_text())
        planner = Planner(ctx, cal, memo=False)
        for r in docs[c]["widths"]:
            plan = planner.propose_tree(r["n"], context=float(c), max_nodes=64, max_depth=8)
            assert (r["choice"], r["nodes"], r["step_ms"], r["step_j"]) == (plan.kind, plan.nodes, plan.step_ms,
                                                                            plan.step_j)
            assert r["plain"]["step_ms"] == planner.explain(r["n"], float(c)).depths[0].step_ms
    assert docs["6000"]["context"] == 6000.0
    assert docs["600"]["widths"][0]["step_ms"] < docs["6000"]["widths"][0]["step_ms"]


def test_plan_takes_a_context_without_tree_too(files, capsys, table, cal):
    from specsim.table import CostTable

    ctx = CostTable.from_contexts({512: table, 8192: CostTable(table.key, table.widths, table.costs * 3.0)},
                                  reference=512)
    (files / "ctx.toml").write_text(ctx.to_text())
    code, out, _ = run(capsys, "plan", files / "ctx.toml", files / "c.toml", "--n", "16", "--context", "6000", "--json")
    assert code == 0
    want = Planner(ctx, cal, memo=False).explain(16, 6000.0).to_dict()
    # plan --json adds, per depth, whether it lies past the calibration's fitted positions.
    got = [{k: v for k, v in d.items() if k != "extrapolated"} for d in json.loads(out)["depths"]]
    assert got == want["depths"] and json.loads(out)["depth"] == want["depth"]


def test_no_branching_candidate_says_why(files, capsys, tmp_path):
    from specsim.costmodel import model_table

    shallow = model_table("h200", "llama-3.1-8b", "eagle-1l", widths=(1, 8), max_k=1)
    (files / "k1.toml").write_text(shallow.to_text())
    code, out, _ = run(capsys, "tree", files / "k1.toml", files / "c.toml")
    assert code == 0 and "its deepest verify is k = 1, and a branching tree needs 2 nodes or more" in out
    code, out, _ = run(capsys, "tree", files / "t.toml", files / "c.toml", "--max-nodes", "1", "--widths", "1,8")
    assert code == 0 and "--max-nodes 1 leaves no branching tree" in out
    one_rank = demo_calibration().with_rank_acceptance(RANKS[:, :1])
    (files / "one.toml").write_text(one_rank.render())
    code, out, _ = run(capsys, "tree", files / "t.toml", files / "one.toml", "--n", "1")
    assert code == 0 and "every best tree of the calibration's [tree] table" in out
    assert "is a chain: no rank past the first is ever matched" in out
    # Ranks past the first that do match, but only beyond the nodes the table verifies: the
    # sentence names the first branching size (a shallow table of k = 3 and the file's ranks).
    shallow3 = model_table("h200", "llama-3.1-8b", "eagle-1l", widths=(1, 8), max_k=3)
    (files / "k3.toml").write_text(shallow3.to_text())
    first = next(i + 1 for i, r in enumerate(greedy_order(RANKS, 256, 8).ranks) if r > 1)
    code, out, _ = run(capsys, "tree", files / "k3.toml", files / "c.toml", "--n", "1")
    assert first > 3 and code == 0
    assert (f"the best trees of up to 3 nodes are chains (each deeper rank-1 path is likelier than any other "
            f"rank's), and the first best tree that branches has {first} nodes, past the table's deepest verify, "
            "k = 3") in out
