"""Draft trees served by the simulated server (docs/simulation.md#draft-trees): the engine against
the plain reference engine step for step, the mean accepted tokens per tree step against the
analytic expectation, each tree step's price against specsim.tree's rule, and the refusals."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from specsim.calibration._types import RequestSpread
from specsim.errors import PolicyError
from specsim.policy import parse_policy, tree_policy
from specsim.sim import REQUEST_DT, simulate
from specsim.table import Cell, CostTable, TableKey
from specsim.tree import Tree, best_tree, expected_tokens, tree_from_sglang, tree_from_vllm, tree_step_cost
from tests.sim.test_engine import assert_matches_reference, random_requests, run_reference, small_calibration

# Rows: depths 1..5; columns: ranks 1..3 (each row sums below 1).
RANKS = np.array([[0.55, 0.2, 0.08], [0.5, 0.2, 0.08], [0.5, 0.15, 0.05], [0.45, 0.15, 0.05], [0.45, 0.1, 0.05]])


# A rank table whose rank-1 column is the calibration's priors: tree:auto weighs trees against
# chains on the same acceptance.
AUTO_RANKS = np.array([[0.75, 0.15, 0.05], [0.6, 0.2, 0.08], [0.55, 0.2, 0.1], [0.55, 0.2, 0.1], [0.5, 0.2, 0.1]])


def tree_table(row_ms=1.5, row_j=0.4):
    """Widths 1, 2, 4, 8, depths 0..7: verify cost rises with rows (``row_ms`` and ``row_j`` a
    row at width 1), drafting is cheap."""
    cells = []
    for n in (1, 2, 4, 8):
        for k in range(8):
            cells.append(Cell(n, k, 10.0 + 0.5 * n + row_ms * k * n ** 0.5, 2.0 + 0.3 * n + row_j * k * n,
                              0.8 * k, 0.1 * k))
    return CostTable.from_cells(TableKey(1, "test", "test", {}), cells)


def tree_calibration(ranks=RANKS, sd=None):
    cal = small_calibration().with_rank_acceptance(ranks)
    return cal if sd is None else cal.with_spread(RequestSpread(sd, 0.1, 100, "test"))


# -- the reference engine, step for step -----------------------------------------------------------------

CASES = [
    ("tree:3", {}),
    ("tree:5,2", {}),
    ("tree:4,4", {"max_num_batched_tokens": 9, "chunked_prefill": True}),  # budget cuts
    ("tree:auto", {}),
    ("tree:auto", {"slack": 0.3, "max_seqs": 5}),
    ("tree:5", {"kv_capacity_tokens": 500, "kv_block_size": 16}),  # preemptions
    ("tree:2,1", {"row_budget": 5}),  # wide batches held to fewer nodes
]


@pytest.mark.kernels
@pytest.mark.parametrize("policy, opts", CASES)
def test_trees_match_the_reference_engine(policy, opts):
    reqs = random_requests(40, 11, rate=6.0)
    table, cal = tree_table(), tree_calibration()
    if policy == "tree:auto":  # rows cheap enough that it verifies trees at small widths, chains at wider
        table, cal = tree_table(0.1, 0.02), tree_calibration(AUTO_RANKS)
    opts = {"max_num_seqs": 6, "prefill_ms_per_token": 0.01, "log_size": 1 << 14, **opts}
    res = simulate(reqs, table, cal, policy, **opts)
    assert_matches_reference(res, run_reference(reqs, table, cal, policy, **opts))
    assert res.counters["verified_rows"] > 0
    if "kv_capacity_tokens" in opts:
        assert res.counters["preemptions"] > 0
    if "max_num_batched_tokens" in opts:
        assert res.counters["drafts_cut"] > 0


@pytest.mark.kernels
def test_trees_under_a_request_spread_match_the_reference_engine():
    reqs = random_requests(30, 12, rate=6.0)
    table, cal = tree_table(), tree_calibration(sd=1.2)
    res = simulate(reqs, table, cal, "tree:5", max_num_seqs=4, log_size=1 << 14)
    assert_matches_reference(res, run_reference(reqs, table, cal, "tree:5", max_num_seqs=4))
    plain = simulate(reqs, table, tree_calibration(), "tree:5", max_num_seqs=4)
    assert res.counters["accepted_drafts"] != plain.counters["accepted_drafts"]  # the spread moves the draws


@pytest.mark.kernels
def test_a_given_tree_matches_the_reference_engine(monkeypatch):
    from tests import reference_engine as ref

    shape = tree_from_sglang(3, 3, 6, RANKS)  # SGLang's EAGLE tree: top-3, 3 steps, 6 draft tokens
    reqs = random_requests(30, 13, rate=6.0)
    table, cal = tree_table(), tree_calibration()
    res = simulate(reqs, table, cal, tree_policy(shape, "sglang-top3"), max_num_seqs=4, log_size=1 << 14)
    assert res.policy == "sglang-top3"
    # the reference verifies the given tree as a tree:N policy's order
    monkeypatch.setattr(ref.RefEngine, "tree_plan", lambda self, n, grid=None: (shape.nodes, (list(shape.parents),
                                                                                   list(shape.ranks))))
    assert_matches_reference(res, run_reference(reqs, table, cal, f"tree:{shape.nodes}", max_num_seqs=4))


# -- the accepted tokens per tree step: the analytic expectation -------------------------------------------

def analytic_mean_and_sd(a, tree):
    """Mean and standard deviation of the drafts one verify step of ``tree`` accepts: the sum of
    the path products, and E[acc^2] = sum over nodes of product * (2 depth - 1) (a pair of nodes
    both on the accepted path is a node and one of its ancestors, or itself twice)."""
    depths, products = [], []
    for p, r in zip(tree.parents, tree.ranks):
        d = 1 if p < 0 else depths[p] + 1
        depths.append(d)
        products.append(a[d - 1][r - 1] * (1.0 if p < 0 else products[p]))
    mean = sum(products)
    second = sum(v * (2 * d - 1) for v, d in zip(products, depths))
    return mean, math.sqrt(second - mean * mean)


def shapes():
    chain_ranks = np.array([[0.7, 0.01], [0.65, 0.01], [0.6, 0.01], [0.6, 0.01]])
    return [
        ("chain", chain_ranks, Tree.chain(4)),
        ("best-5", RANKS, best_tree(RANKS, 5, 5)),
        ("best-5-depth-2", RANKS, best_tree(RANKS, 5, 2)),
        ("sglang-top3-steps3-tokens6", RANKS, tree_from_sglang(3, 3, 6, RANKS)),
        ("vllm", RANKS, tree_from_vllm([(0,), (1,), (0, 0), (0, 1), (1, 0), (0, 0, 0)])),
    ]


@pytest.mark.kernels
@pytest.mark.parametrize("name, ranks, tree", shapes(), ids=[s[0] for s in shapes()])
def test_mean_accepted_per_tree_step_is_the_expectation(name, ranks, tree):
    mean, sd = analytic_mean_and_sd(ranks, tree)
    assert expected_tokens(ranks, tree.parents, tree.ranks) - 1.0 == pytest.approx(mean, rel=1e-12)
    width, steps = 4, 100_000
    out = int(steps / width * (1.0 + mean)) + 1
    reqs = np.zeros(width, dtype=REQUEST_DT)
    reqs["prompt_tokens"], reqs["output_tokens"] = 16, out
    res = simulate(reqs, tree_table(), tree_calibration(ranks), tree_policy(tree, name), max_num_seqs=width,
                   max_num_batched_tokens=None, log_size=16)
    c = res.counters
    assert c["sequence_steps"] >= 0.9 * steps
    got = c["accepted_drafts"] / c["sequence_steps"]
    assert abs(got - mean) < 3.0 * sd / math.sqrt(c["sequence_steps"])  # within 3 standard errors
    assert c["verified_rows"] == tree.nodes * c["sequence_steps"] - c["drafts_cut"]


# -- each tree step priced by the rule ----------------------------------------------------------------------

CHAIN_RANKS = np.array([[0.7, 0.01], [0.65, 0.01], [0.6, 0.01]])


@pytest.mark.kernels
@pytest.mark.parametrize("ranks, policy", [(RANKS, "tree:5"), (RANKS, "tree:5,2"), (RANKS, "tree:3,1"),
                                           (CHAIN_RANKS, "tree:3")])
def test_each_tree_step_is_priced_by_the_rule(ranks, policy):
    table = tree_table()
    pol = parse_policy(policy)
    tree = best_tree(ranks, pol.nodes, pol.tree_depth)
    reqs = np.zeros(1, dtype=REQUEST_DT)
    reqs["prompt_tokens"], reqs["output_tokens"] = 8, 400
    res = simulate(reqs, table, tree_calibration(ranks), policy, max_num_seqs=1, log_size=1 << 12)
    cost = tree_step_cost(table, tree, 1)
    steps = res.counters["decode_steps"]
    assert res.step_log_stride == 1 and res.step_t_s.shape[0] == steps and steps > 50
    # a lone request: every step after its prefill is one tree step at width 1
    assert np.allclose(np.diff(res.step_t_s), cost.step_ms / 1000.0, rtol=1e-9, atol=0)
    assert res.energy["decode_j"] == pytest.approx(steps * cost.step_j, rel=1e-12)
    assert (res.step_mean_depth[:-1] == tree.nodes).all()  # N nodes verified per sequence
    if tree.is_chain:  # a chain-shaped tree costs the chain's cell
        assert cost == tree_step_cost(table, Tree.chain(tree.nodes), 1)
        assert res.energy["decode_j"] == pytest.approx(steps * (table.cell(1, 3).verify_j + table.cell(1, 3).draft_j))
    else:
        assert cost.verify_ms == pytest.approx(1.1 * tree_step_cost(table, Tree.chain(tree.nodes), 1).verify_ms)


# -- refusals ------------------------------------------------------------------------------------------------

def test_tree_policies_are_refused_by_name():
    reqs = random_requests(5, 15)
    table = tree_table()
    with pytest.raises(PolicyError, match="no \\[tree\\] table: chains only"):
        simulate(reqs, table, small_calibration(), "tree:3")
    with pytest.raises(PolicyError, match="prices depths up to 7"):
        simulate(reqs, table, tree_calibration(), "tree:8")
    with pytest.raises(PolicyError, match="k_max = 2: use tree:2"):
        simulate(reqs, table, tree_calibration(), "tree:4", k_max=2)
    with pytest.raises(PolicyError, match="max_num_batched_tokens = 4: use at most tree:3"):
        simulate(reqs, table, tree_calibration(), "tree:4", max_num_batched_tokens=4, chunked_prefill=True)
    with pytest.raises(PolicyError, match="hold only 4 nodes of depth <= 4"):
        simulate(reqs, table, tree_calibration(RANKS[:, :1]), "tree:5,4")


def test_tree_policy_texts():
    assert str(parse_policy("tree:auto")) == "tree:auto" and str(parse_policy(" TREE:4 ")) == "tree:4"
    assert str(parse_policy("tree:6,3")) == "tree:6,3" and str(parse_policy("tree:3,9")) == "tree:3"
    for bad, why in (("tree", "needs an argument"), ("tree:0", "1..256"), ("tree:x", "not a non-negative"),
                     ("tree:3,0", "D must be >= 1"), ("tree:257", "1..256")):
        with pytest.raises(PolicyError, match=why):
            parse_policy(bad)


# -- context pricing, the command line -------------------------------------------------------------------

def tree_context_table(contexts=(20, 150, 400), reference=150, row_ms=1.5, row_j=0.4):
    """tree_table's grid, its verify costs growing with the context (attention reads)."""
    base = tree_table(row_ms, row_j)
    tables = {}
    for c in contexts:
        cells = [Cell(x.n, x.k, x.verify_ms * (1 + c / 200), x.verify_j * (1 + c / 300), x.draft_ms * (1 + c / 1000),
                      x.draft_j * (1 + c / 1000)) for x in base.cells]
        tables[c] = CostTable.from_cells(base.key, cells)
    return CostTable.from_contexts(tables, reference=reference)


@pytest.mark.kernels
@pytest.mark.parametrize("policy, ranks, slack, row_ms", [
    ("tree:5", RANKS, 0.0, 1.5), ("tree:4,2", RANKS, 0.0, 1.5), ("tree:auto", AUTO_RANKS, 0.0, 1.5),
    ("tree:auto", AUTO_RANKS, 0.0, 0.05), ("tree:auto", AUTO_RANKS, 0.3, 0.05), ("tree:auto", RANKS, 0.1, 0.05)])
def test_trees_priced_at_the_batch_context_match_the_reference_engine(policy, ranks, slack, row_ms):
    """The reference engine plans tree:auto at each step's mean context (Planner.propose_tree's
    rule on the step's costs there), as propose's policies are planned; on cheap rows (row_ms
    0.05) it verifies trees at some contexts and chains at others."""
    reqs = random_requests(40, 16, rate=6.0)
    table, cal = tree_context_table(row_ms=row_ms, row_j=row_ms / 3), tree_calibration(ranks)
    opts = {"max_num_seqs": 6, "log_size": 1 << 14, "slack": slack}
    res = simulate(reqs, table, cal, policy, **opts)
    assert res.kv["mean_decode_context"] > 20
    assert_matches_reference(res, run_reference(reqs, table, cal, policy, **opts))
    flat = simulate(reqs, table, cal, policy, context_pricing=False, **opts)
    assert flat.energy["decode_j"] != res.energy["decode_j"]


@pytest.mark.kernels
def test_tree_auto_plans_at_the_batch_context_not_the_reference_grid():
    """On a table whose steps cost more with context, tree:auto's plan at the live context differs
    from its plan on the reference grid at some step: the run differs from one that reads the
    reference grid's plan (the memo: what tree:auto ran before), and each step's nodes are
    Planner.propose_tree's at that step's mean context."""
    from specsim.plan import Planner
    from specsim.sim.engine import prepare
    from specsim.sim.options import ServerOptions

    table = tree_context_table(contexts=(20, 400, 2000), reference=20, row_ms=0.05, row_j=0.05 / 3)
    cal = tree_calibration(AUTO_RANKS)
    reqs = np.sort(random_requests(40, 16, rate=6.0), order="arrival_s")
    reqs["prompt_tokens"] = np.where(np.arange(40) % 2 == 0, 1500, reqs["prompt_tokens"])
    opts = {"max_num_seqs": 6, "log_size": 1 << 14}
    live = simulate(reqs, table, cal, "tree:auto", **opts)
    p = prepare(reqs, table, cal, parse_policy("tree:auto"), ServerOptions(**opts))
    planner = Planner(table, cal, memo=False)
    memo = [planner.propose_tree(n).nodes for n in range(7)]
    grid = [int(v) for v in p.srv.depth_memo]
    assert grid[1:] == memo[1:]  # the memo is the reference grid's plan
    # the live plan at the mean context of the run's steps: not the reference grid's at some width
    ctx = live.kv["mean_decode_context"]
    assert any(planner.propose_tree(n, context=ctx).nodes != memo[n] for n in range(1, 7))
    # and the run verified, at some width, other nodes than the reference grid's plan there
    steps = list(zip(live.step_width.tolist(), live.step_mean_depth.tolist()))
    assert any(w > 0 and d != memo[w] for w, d in steps), (steps[:20], memo)


def test_simulate_serves_trees_and_refuses_them_without_a_tree_table(tmp_path, capsys):
    from specsim.cli import main
    from tests.cli.test_simulate_cli import SYNTH, CostTableText

    table = tmp_path / "table.toml"
    table.write_text(CostTableText(tree_table()))
    plain, trees = tmp_path / "plain.toml", tmp_path / "trees.toml"
    plain.write_text(small_calibration().render())
    trees.write_text(tree_calibration().render())
    out = tmp_path / "sim.json"
    argv = ["simulate", "--synthetic", SYNTH, "--table", str(table), "--policy", "fixed:3", "--policy", "tree:5,3",
            "--prefill-ms-per-token", "0.01", "--prefill-j-per-token", "0.005", "--json", str(out), "--quiet"]
    assert main(argv + ["--calibration", str(plain)]) == 2
    err = capsys.readouterr().err
    assert "tree:5,3" in err and "chains only" in err and "Traceback" not in err and err.count("\n") == 1
    assert not out.exists()
    assert main(argv + ["--calibration", str(trees)]) == 0
    import json

    rows = {p["policy"]: p for p in json.loads(out.read_text())["policies"]}
    assert rows["tree:5,3"]["nodes_per_sequence"] == pytest.approx(5.0, abs=0.2)
    assert rows["fixed:3"]["nodes_per_sequence"] == pytest.approx(3.0, abs=0.2)
    assert rows["tree:5,3"]["accepted_per_step"] > 0
    assert " nodes " in capsys.readouterr().out


# -- SGLang's EAGLE tree from its server settings ------------------------------------------------------------

SGLANG_JSON = '{"speculative_algorithm": "EAGLE3", "speculative_eagle_topk": 3, "speculative_num_steps": 3, ' \
              '"speculative_num_draft_tokens": 6}'
SGLANG_LINE = "python -m sglang.launch_server --model-path m --speculative-algorithm EAGLE3 " \
              "--speculative-eagle-topk 3 --speculative-num-steps=3 --speculative-num-draft-tokens 6\n"


@pytest.mark.kernels
@pytest.mark.parametrize("text", [SGLANG_JSON, SGLANG_LINE], ids=["json", "launch-line"])
def test_an_sglang_file_with_an_eagle_tree_serves_that_tree(tmp_path, text):
    path = tmp_path / "sglang.txt"
    path.write_text(text)
    reqs = random_requests(30, 17, rate=6.0)
    table, cal = tree_table(), tree_calibration()
    res = simulate(reqs, table, cal, f"sglang:{path}", max_num_seqs=4)
    assert res.policy == f"sglang:{path} (EAGLE tree: top-k 3, 3 steps, 6 draft tokens)"
    given = simulate(reqs, table, cal, tree_policy(tree_from_sglang(3, 3, 6, RANKS)), max_num_seqs=4)
    assert np.array_equal(res.finish_s, given.finish_s) and res.energy == given.energy
    assert res.summary()["nodes_per_sequence"] == pytest.approx(5.0, abs=0.2)


@pytest.mark.kernels
@pytest.mark.parametrize("text", [SGLANG_LINE.replace("\n", " --speculative-adaptive\n"),
                                  SGLANG_JSON.replace("}", ', "speculative_adaptive": true}')],
                         ids=["launch-line", "json"])
def test_sglang_adaptive_with_a_tree_serves_the_static_tree_and_says_so(tmp_path, text):
    """SGLang's adaptive controller refuses top-k > 1 and the server falls back to the static
    tree: the simulation serves that tree, and its label says the adaptive flag was ignored."""
    path = tmp_path / "sglang.txt"
    path.write_text(text)
    reqs = random_requests(30, 17, rate=6.0)
    table, cal = tree_table(), tree_calibration()
    res = simulate(reqs, table, cal, f"sglang:{path}", max_num_seqs=4)
    assert res.policy == (f"sglang:{path} (EAGLE tree: top-k 3, 3 steps, 6 draft tokens; --speculative-adaptive "
                          "ignored: SGLang adapts only top-k 1)")
    given = simulate(reqs, table, cal, tree_policy(tree_from_sglang(3, 3, 6, RANKS)), max_num_seqs=4)
    assert np.array_equal(res.finish_s, given.finish_s) and res.energy == given.energy


@pytest.mark.parametrize("text, why", [
    (SGLANG_JSON.replace('"speculative_eagle_topk": 3', '"speculative_eagle_topk": 0'), "topk 0 drafts no candidate"),
    (SGLANG_JSON.replace('"speculative_num_draft_tokens": 6', '"speculative_num_draft_tokens": 40'),
     "asks for 39 nodes, more than top-k 3 over 3 steps drafts \\(21\\)"),
    (SGLANG_LINE.replace(" --speculative-num-steps=3", ""), "--speculative-num-steps is not stated"),
    (SGLANG_LINE.replace("topk 3", "topk three"), "'three' is not a whole number"),
])
def test_bad_sglang_tree_settings_are_refused_by_file_and_flag(tmp_path, text, why):
    path = tmp_path / "sglang.json"
    path.write_text(text)
    with pytest.raises(PolicyError, match=why) as e:
        simulate(random_requests(5, 18), tree_table(), tree_calibration(), f"sglang:{path}")
    assert str(path) in str(e.value)


def test_an_sglang_tree_asks_for_a_tree_table_and_fits_the_budget(tmp_path):
    path = tmp_path / "sglang.json"
    path.write_text(SGLANG_JSON)
    with pytest.raises(PolicyError, match="chains only"):
        simulate(random_requests(5, 19), tree_table(), small_calibration(), f"sglang:{path}")
    with pytest.raises(PolicyError, match="past the rank-acceptance table's|more than the rank-acceptance table's 2"):
        simulate(random_requests(5, 19), tree_table(), tree_calibration(RANKS[:, :2]), f"sglang:{path}")


# -- vLLM's speculative_token_tree, as its release verifies it ----------------------------------------------

@pytest.mark.kernels
def test_a_vllm_branching_tree_is_verified_as_a_flattened_chain(tmp_path):
    path = tmp_path / "vllm.json"
    path.write_text('{"speculative_config": {"method": "eagle3", "num_speculative_tokens": 4, '
                    '"speculative_token_tree": "[(0,),(1,),(0,0),(1,0)]"}}')
    reqs = np.zeros(1, dtype=REQUEST_DT)  # one sequence: every step after its prefill at width 1
    reqs["prompt_tokens"], reqs["output_tokens"] = 16, 50_000
    table, cal = tree_table(), tree_calibration()
    res = simulate(reqs, table, cal, f"vllm:{path}", max_num_seqs=4, max_num_batched_tokens=None, log_size=16)
    assert res.policy.endswith("(speculative_token_tree of 4 nodes, verified as a flattened chain, as vLLM's "
                               "release does)")
    c = res.counters
    # node 0 is all a chain in list order can accept (node 1 is its sibling): a[1][1] per step
    p = RANKS[0, 0]
    assert abs(c["accepted_drafts"] / c["sequence_steps"] - p) < 3.0 * math.sqrt(p * (1 - p) / c["sequence_steps"])
    assert c["verified_rows"] == 4 * c["sequence_steps"]  # the whole tree is drafted and verified
    tree = tree_from_vllm("[(0,),(1,),(0,0),(1,0)]")
    assert res.energy["decode_j"] == pytest.approx(c["decode_steps"] * tree_step_cost(table, tree, 1).step_j,
                                                   rel=1e-9)


def test_a_vllm_chain_tree_is_a_chain_and_bad_trees_are_refused(tmp_path):
    path = tmp_path / "vllm.json"
    path.write_text('{"num_speculative_tokens": 3, "speculative_token_tree": "[(0,),(0,0),(0,0,0)]"}')
    reqs = random_requests(20, 20, rate=4.0)
    res = simulate(reqs, tree_table(), tree_calibration(), f"vllm:{path}", max_num_seqs=4)
    assert res.policy.endswith("(speculative_token_tree: a chain of 3)")
    assert res.summary()["nodes_per_sequence"] == pytest.approx(3.0, abs=0.3)
    for text, why in (('{"num_speculative_tokens": 2, "speculative_token_tree": "[(0,),(1,),(0,0)]"}',
                       "num_speculative_tokens = 2 but speculative_token_tree has 3 nodes"),
                      ('{"speculative_token_tree": "[(0,),(1,1)]"}', "has no parent \\(1,\\)"),
                      ('{"speculative_token_tree": "[(0,),(0,)]"}', "listed twice")):
        path.write_text(text)
        with pytest.raises(PolicyError, match=why) as e:
            simulate(reqs, tree_table(), tree_calibration(), f"vllm:{path}")
        assert str(path) in str(e.value)


# -- TensorRT-LLM's dynamic tree, as its expected shape ----------------------------------------------------

TRTLLM_YAML = """speculative_config:
  decoding_type: Eagle3
  max_draft_len: 3
  use_dynamic_tree: true
  dynamic_tree_max_topK: 2
  max_total_draft_tokens: 5
"""


@pytest.mark.kernels
def test_a_trtllm_dynamic_tree_serves_its_expected_shape(tmp_path):
    from specsim.tree import tree_from_trtllm

    path = tmp_path / "trt.yaml"
    path.write_text(TRTLLM_YAML)
    reqs = random_requests(30, 21, rate=6.0)
    table, cal = tree_table(), tree_calibration()
    res = simulate(reqs, table, cal, f"trtllm:{path}", max_num_seqs=4)
    assert res.policy.endswith("(dynamic tree: top-k 2, draft length 3, 5 draft tokens; simulated as its expected "
                               "shape)")
    given = simulate(reqs, table, cal, tree_policy(tree_from_trtllm(2, 3, 5, RANKS)), max_num_seqs=4)
    assert np.array_equal(res.finish_s, given.finish_s) and res.energy == given.energy


@pytest.mark.parametrize("edit, why", [
    (("dynamic_tree_max_topK: 2", "dynamic_tree_max_topK: 0"), "dynamic_tree_max_topK = 0 drafts no candidate"),
    (("max_total_draft_tokens: 5", "max_total_draft_tokens: 9"), "must be between max_draft_len \\(3\\) and"),
    (("  dynamic_tree_max_topK: 2\n", ""), "use_dynamic_tree needs dynamic_tree_max_topK"),
])
def test_bad_trtllm_dynamic_trees_are_refused_by_file_and_field(tmp_path, edit, why):
    path = tmp_path / "trt.yaml"
    path.write_text(TRTLLM_YAML.replace(*edit))
    with pytest.raises(PolicyError, match=why) as e:
        simulate(random_requests(5, 22), tree_table(), tree_calibration(), f"trtllm:{path}")
    assert str(path) in str(e.value)


# -- random rank tables and trees against the reference engine -------------------------------------------------

@st.composite
def rank_tables(draw):
    """A depth x rank table (1..5 depths, 1..4 ranks) whose rows sum to at most 1."""
    depths, ranks = draw(st.integers(1, 5)), draw(st.integers(1, 4))
    rows = []
    for _ in range(depths):
        weights = draw(st.lists(st.floats(0.0, 1.0), min_size=ranks + 1, max_size=ranks + 1))
        total = sum(weights) or 1.0
        rows.append([w / total for w in weights[:ranks]])  # the last weight: no match
    return np.array(rows)


@pytest.mark.kernels
@settings(max_examples=25, deadline=None)
@given(ranks=rank_tables(), nodes=st.integers(1, 7), depth=st.integers(1, 7), seed=st.integers(0, 1 << 30),
       spread=st.sampled_from([None, 0.8]), budget=st.sampled_from([None, 7]))
def test_random_trees_match_the_reference_engine(ranks, nodes, depth, seed, spread, budget):
    cal = tree_calibration(ranks, sd=spread)
    from specsim.tree import greedy_order

    nodes = min(nodes, len(greedy_order(ranks, nodes, depth)))  # the table may hold fewer paths
    policy = f"tree:{nodes},{min(depth, nodes)}"
    reqs = random_requests(12, seed % 1000, rate=8.0)
    opts = {"max_num_seqs": 4, "log_size": 1 << 12}
    if budget is not None:
        opts.update(max_num_batched_tokens=max(budget, nodes + 1), chunked_prefill=True)
    res = simulate(reqs, tree_table(), cal, policy, seed=seed, **opts)
    assert_matches_reference(res, run_reference(reqs, tree_table(), cal, policy, seed=seed, **opts))


WIDE = np.full((2, 16), 0.06)  # 16 ranks: a wide first level
DEEP = np.array([[0.9, 0.05]] * 7)  # deep: seven depths, the best tree a long chain with a side branch


@pytest.mark.kernels
@pytest.mark.parametrize("ranks, policy", [(RANKS, "tree:1"), (WIDE, "tree:7,1"), (WIDE, "tree:7,2"),
                                           (DEEP, "tree:7"), (RANKS[:1, :1], "tree:1")],
                         ids=["one-node", "wide", "wide-two-levels", "deep", "one-cell-table"])
def test_edge_trees_match_the_reference_engine(ranks, policy):
    reqs = random_requests(20, 23, rate=6.0)
    cal = tree_calibration(ranks)
    res = simulate(reqs, tree_table(), cal, policy, max_num_seqs=4, log_size=1 << 12)
    assert_matches_reference(res, run_reference(reqs, tree_table(), cal, policy, max_num_seqs=4))
    assert res.counters["accepted_drafts"] > 0


@pytest.mark.kernels
@pytest.mark.parametrize("router", ["round_robin", "least_kv"])
@pytest.mark.parametrize("policy", ["tree:3", "tree:auto", "fixed:2"])
def test_every_replica_of_a_tree_fleet_is_the_engine_on_its_share(router, policy):
    """A fleet serves tree policies: each replica of each group (two boxes, different options)
    is exactly the single server fed the requests routed to it."""
    from specsim.sim import ServerOptions
    from specsim.sim.fleet import Fleet, ReplicaGroup, simulate_fleet
    from tests.sim.test_fleet import same

    reqs = random_requests(60, 31, rate=10.0)
    cal = tree_calibration(AUTO_RANKS)
    fleet = Fleet((ReplicaGroup("a", 2, tree_table(), cal, ServerOptions(max_num_seqs=4, seed=2, log_size=64)),
                   ReplicaGroup("b", 1, tree_table(row_ms=0.3, row_j=0.1), cal,
                                ServerOptions(max_num_seqs=8, seed=2, chunked_prefill=True,
                                              max_num_batched_tokens=40, kv_capacity_tokens=900))))
    res = simulate_fleet(reqs, fleet, policy, router=router)
    for r, g in enumerate(fleet.groups[i] for i in (0, 0, 1)):
        same(res.replicas[r], simulate(reqs[res.assignment == r], g.table, cal, policy, options=g.options))
    assert res.fleet.counters["emitted_tokens"] == int(reqs["output_tokens"].sum())
    if policy == "tree:3":
        assert res.fleet.counters["accepted_drafts"] > 0


@pytest.mark.kernels
def test_a_tree_auto_fleet_on_a_context_table_is_the_engine_per_replica():
    """Each replica plans tree:auto at its own batch's context, as a single server does."""
    from specsim.sim import ServerOptions
    from specsim.sim.fleet import Fleet, simulate_fleet
    from tests.sim.test_fleet import same

    table, cal = tree_context_table(row_ms=0.05, row_j=0.05 / 3), tree_calibration(AUTO_RANKS)
    reqs = random_requests(50, 17, rate=8.0)
    opts = ServerOptions(max_num_seqs=6, seed=4, log_size=256)
    res = simulate_fleet(reqs, Fleet.uniform(table, cal, 2, opts), "tree:auto", router="least_outstanding")
    for r in range(2):
        same(res.replicas[r], simulate(reqs[res.assignment == r], table, cal, "tree:auto", options=opts))


def test_a_fleet_group_without_a_tree_table_refuses_a_tree_policy_by_name():
    from specsim.sim import ServerOptions
    from specsim.sim.fleet import Fleet, ReplicaGroup, simulate_fleet

    fleet = Fleet((ReplicaGroup("a", 1, tree_table(), tree_calibration(), ServerOptions(max_num_seqs=4)),
                   ReplicaGroup("b", 1, tree_table(), small_calibration(), ServerOptions(max_num_seqs=4))))
    with pytest.raises(PolicyError, match="group 'b': policy tree:3: .*\\[tree\\]"):
        simulate_fleet(random_requests(5, 24), fleet, "tree:3")
