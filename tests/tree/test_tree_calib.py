"""Draft trees in the calibration (docs/calibration.md#draft-trees): the [tree] table, its counts,
and where a[d][r] comes from."""

import json
import math
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from specsim import AcceptanceCalibration, CalibrationError, DrafterKey
from specsim.calibration._types import TreeCounts
from specsim.calibration.fit import calibration_from_rates
from specsim.calibration.logs import load_drafts_log
from specsim._stats import wilson
from specsim.calibration.tree_fit import bin_tree, rank_acceptance_from_counts
from specsim.cli import main

# The fit bins a log's chain part with the calibration's kernels (tests/conftest.py: KERNEL_FOLDERS).
pytestmark = pytest.mark.kernels
SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
DRAFTER = DrafterKey("ab" * 32, 32000, "bf16", True)
BASE = AcceptanceCalibration(DRAFTER, [-1.0, 0.0], [0.3, 0.9], [0.8, 0.6])
TREE = """
[tree]
rank_acceptance = [[0.62, 0.12, 0.05], [0.55, 0.11, 0.04]]
reached = [5000, 3100]
matched = [[3100, 600, 250], [1705, 341, 124]]
source = "drafts log drafts.csv"
"""


def with_tree(body=TREE):
    return BASE.render() + body


def refusal(text):
    with pytest.raises(CalibrationError) as e:
        AcceptanceCalibration.parse(text, "cal.toml")
    return str(e.value)


# -- the [tree] table -------------------------------------------------------------------------
def test_tree_table_reads_and_renders_back():
    c = AcceptanceCalibration.parse(with_tree())
    assert c.rank_acceptance.tolist() == [[0.62, 0.12, 0.05], [0.55, 0.11, 0.04]]
    assert c.tree_counts == TreeCounts((5000, 3100), ((3100, 600, 250), (1705, 341, 124)), "drafts log drafts.csv")
    assert AcceptanceCalibration.parse(c.render()) == c
    assert "[tree]" in c.render()


def test_tree_without_counts_round_trips():
    c = AcceptanceCalibration.parse(with_tree("[tree]\nrank_acceptance = [[0.7, 0.1]]\n"))
    assert c.tree_counts is None
    assert AcceptanceCalibration.parse(c.render()) == c


def test_seed_format_renders_without_tree():
    assert "[tree]" not in BASE.render()
    assert AcceptanceCalibration.parse(BASE.render()).rank_acceptance is None


def test_equality_sees_rank_acceptance_and_counts():
    c = AcceptanceCalibration.parse(with_tree())
    assert c != BASE
    assert c != c.with_rank_acceptance(c.rank_acceptance)  # same table, counts dropped
    assert c.with_rank_acceptance(c.rank_acceptance, c.tree_counts) == c
    assert c.with_spread(None) == c  # with_spread carries the tree and its counts
    assert c.with_spread(None).tree_counts == c.tree_counts


@pytest.mark.parametrize("body, expected", [
    ("rank_acceptance = [[0.62, 1.5]]", "[tree] rank_acceptance depth 1 rank 2 = 1.5 is not a probability"),
    ("rank_acceptance = [[0.62, -0.1]]", "depth 1 rank 2 = -0.1 is not a probability"),
    ("rank_acceptance = [[0.62, nan]]", "depth 1 rank 2 = nan is not a probability"),
    ("rank_acceptance = [[0.62, 0.5]]", "depth 1 sums to 1.12"),
    ("rank_acceptance = [[0.62, 0.1], [0.5]]", "rank_acceptance depth 2 has 1 ranks, depth 1 has 2"),
    ("rank_acceptance = [[0.62, true]]", "depth 1 rank 2 = true is not a number"),
    ("rank_acceptance = [0.62, 0.1]", "rank_acceptance depth 1 is a float, not an array"),
    ("rank_acceptance = []", "rank_acceptance must be a non-empty array"),
    ("rank_acceptance = [[" + ", ".join(["0.01"] * 17) + "]]", "17 ranks (columns): give 1..16"),
    ("rank_acceptance = [" + ", ".join(["[0.5]"] * 65) + "]", "65 depths (rows): give 1..64"),
    ("reached = [10]", "no `rank_acceptance`"),
    ("rank_acceptance = [[0.5]]\nreached = [10]", "has `reached` without `matched`"),
    ("rank_acceptance = [[0.5]]\nreached = [10]\nmatched = [[6]]", "depth 1 rank 1 = 0.5 disagrees with its counts: "
     "matched 6 / reached 10 = 0.6"),
    ("rank_acceptance = [[0.5]]\nreached = [10]\nmatched = [[-5]]", "matched depth 1 rank 1 = -5 is not a count"),
    ("rank_acceptance = [[0.5]]\nreached = [-10]\nmatched = [[5]]", "reached depth 1 = -10 is not a count"),
    ("rank_acceptance = [[0.5]]\nreached = [10.0]\nmatched = [[5]]", "reached depth 1 = 10.0 is not a count"),
    ("rank_acceptance = [[0.5], [0.5]]\nreached = [10]\nmatched = [[5], [5]]", "reached has 1 entries for 2 depths"),
    ("rank_acceptance = [[0.5, 0.1]]\nreached = [10]\nmatched = [[5]]", "matched depth 1 has 1 ranks, "
     "rank_acceptance has 2"),
    ("rank_acceptance = [[0.0]]\nreached = [0]\nmatched = [[0]]", "reached depth 1 = 0: a depth no path reached"),
    ("rank_acceptance = [[0.5, 0.6]]\nreached = [10]\nmatched = [[5, 6]]", "sums to 1.1"),
    ("rank_acceptance = [[0.5]]\nsource = \"x\"", "source names where the counts came from"),
    ("rank_acceptance = [[0.5]]\nreached = [10]\nmatched = [[5]]\nsource = 3", "[tree] source = 3 is not a string"),
])
def test_bad_tree_tables_are_refused_by_field_row_and_cell(body, expected):
    msg = refusal(with_tree("[tree]\n" + body + "\n"))
    assert msg.startswith("cal.toml: the acceptance calibration cannot be read")
    assert expected in msg


def test_tree_that_is_not_a_table_is_refused():
    assert "`tree` is a integer, not a table" in refusal(BASE.render().replace("[drafter]", "tree = 3\n[drafter]"))


def test_tree_counts_in_the_api_are_checked():
    a = [[0.5, 0.25]]
    with pytest.raises(CalibrationError, match="need the rank acceptance"):
        AcceptanceCalibration(DRAFTER, [0.0], [0.5], [0.5], tree_counts=TreeCounts((4,), ((2, 1),)))
    with pytest.raises(CalibrationError, match="must be a TreeCounts"):
        BASE.with_rank_acceptance(a, {"reached": (4,)})
    with pytest.raises(CalibrationError, match="disagrees with its counts"):
        BASE.with_rank_acceptance(a, TreeCounts((4,), ((2, 2),)))
    with pytest.raises(CalibrationError, match="not a whole number"):
        BASE.with_rank_acceptance(a, TreeCounts((4.0,), ((2, 1),)))
    ok = BASE.with_rank_acceptance(a, TreeCounts(np.array([4]), [np.array([2, 1])], "s"))
    assert ok.tree_counts == TreeCounts((4,), ((2, 1),), "s") and type(ok.tree_counts.reached[0]) is int


@st.composite
def trees(draw):
    depths, ranks = draw(st.integers(1, 6)), draw(st.integers(1, 5))
    reached = [draw(st.integers(1, 10**6)) for _ in range(depths)]
    matched = []
    for n in reached:
        row, left = [], n
        for _ in range(ranks):
            m = draw(st.integers(0, left))
            row.append(m)
            left -= m
        matched.append(row)
    a = [[m / n for m in row] for n, row in zip(reached, matched)]
    counts = TreeCounts(tuple(reached), tuple(map(tuple, matched)), draw(st.text(max_size=8).filter(
        lambda s: not any(0xD800 <= ord(c) <= 0xDFFF for c in s))))
    return a, (counts if draw(st.booleans()) else None)


@SETTINGS
@given(t=trees())
def test_tree_render_round_trips(t):
    a, counts = t
    c = BASE.with_rank_acceptance(a, counts)
    back = AcceptanceCalibration.parse(c.render())
    assert back == c
    assert back.rank_acceptance.tobytes() == c.rank_acceptance.tobytes()
    assert math.isclose(float(back.rank_acceptance.sum()), float(np.sum(a)))


# -- fitting a[d][r] from a per-draft log of trees ------------------------------------------
TRUTH = np.array([[0.62, 0.12, 0.05], [0.55, 0.11, 0.04], [0.5, 0.1, 0.03]])
DRAFTER_FLAGS = ["--drafter-sha256", "ab" * 32, "--vocab", "32000", "--quantization", "bf16", "--context", "true"]


def full_tree(depth, ranks):
    """Every rank path of length <= depth, depth-first: (parents, depths, ranks)."""
    parents, depths, rks = [], [], []

    def grow(parent, d):
        for r in range(1, ranks + 1):
            parents.append(parent)
            depths.append(d)
            rks.append(r)
            if d < depth:
                grow(len(parents) - 1, d + 1)

    grow(-1, 1)
    return np.array(parents), np.array(depths), np.array(rks)


def tree_log(a, steps, seed):
    """A per-draft log of full trees whose target tokens are drawn from ``a``: the columns, and the
    target's rank per step and depth (0: no candidate matched)."""
    rng = np.random.default_rng(seed)
    depth, ranks = a.shape
    parents, depths, rks = full_tree(depth, ranks)
    cdf = np.cumsum(np.c_[a, 1 - a.sum(axis=1)], axis=1)
    target = np.array([np.searchsorted(cdf[d], rng.random(steps), side="right") + 1 for d in range(depth)]).T
    target[target > ranks] = 0
    match = rks[None, :] == target[:, depths - 1]
    reached = np.ones_like(match)
    for i, p in enumerate(parents):
        if p >= 0:
            reached[:, i] = reached[:, p] & match[:, p]
    # A node that is not reached says nothing: its accepted is noise the fit must not read.
    accepted = np.where(reached, match, rng.random(match.shape) < 0.5)
    m = len(parents)
    cols = {
        "step": np.repeat(np.arange(steps), m), "sequence": np.zeros(steps * m, dtype=np.int64),
        "position": np.tile(depths, steps), "rank": np.tile(rks, steps), "parent": np.tile(parents, steps),
        "confidence": -rng.exponential(1.0, steps * m), "accepted": accepted.reshape(-1).astype(np.int64),
    }
    return cols, target


def truth_counts(target, depth, ranks):
    """reached(d) and matched(d, r) straight from the drawn target ranks (full trees draft every depth)."""
    alive = np.ones(target.shape[0], dtype=bool)
    reached, matched = [], []
    for d in range(depth):
        reached.append(int(alive.sum()))
        matched.append([int((alive & (target[:, d] == r)).sum()) for r in range(1, ranks + 1)])
        alive &= target[:, d] > 0
    return reached, matched


def write_log(path, cols, names=None):
    names = names or list(cols)
    rows = np.column_stack([cols[c] for c in names])
    with open(path, "w") as f:
        f.write(",".join(names) + "\n")
        for row in rows:
            f.write(",".join(f"{v:.6f}" if n == "confidence" else str(int(v)) for n, v in zip(names, row)) + "\n")


def bin_cols(cols, parent=True):
    return bin_tree(cols["step"], cols["sequence"], cols["position"], cols["rank"],
                    cols["accepted"].astype(np.int8), cols["parent"] if parent else None)


def test_tree_counts_equal_the_drawn_targets():
    cols, target = tree_log(TRUTH, 300, seed=1)
    assert cols["step"].shape[0] >= 5000
    counts, on_chain = bin_cols(cols)
    reached, matched = truth_counts(target, *TRUTH.shape)
    assert list(counts.reached) == reached and [list(r) for r in counts.matched] == matched
    # Depth-first listing: the parent column can be left out.
    assert bin_cols(cols, parent=False)[0] == counts
    assert on_chain.sum() == 300 * 3 and (cols["rank"][on_chain] == 1).all()


@pytest.mark.parametrize("seed", range(3))
def test_fit_recovers_a_known_rank_acceptance(seed):
    cols, _ = tree_log(TRUTH, 2000, seed)
    a = rank_acceptance_from_counts(bin_cols(cols)[0])
    assert a.shape == TRUTH.shape
    # 2,000 trees reach depth 1; about 1,500 depth 2: 5 standard errors is about 0.06 at worst.
    assert np.abs(a - TRUTH).max() < 0.06


def _binomial_quantiles(n, p, tail):
    """(low, high): the counts below which and above which Binomial(n, p) lies with chance < tail."""
    pmf = [math.comb(n, k) * p ** k * (1 - p) ** (n - k) for k in range(n + 1)]
    cdf = np.cumsum(pmf)
    return int(np.searchsorted(cdf, tail)), int(np.searchsorted(cdf, 1 - tail))


def test_wilson_intervals_cover_the_truth_at_their_rate():
    covered = total = 0
    for seed in range(40):
        cols, _ = tree_log(TRUTH, 200, seed=100 + seed)
        assert cols["step"].shape[0] >= 5000
        counts = bin_cols(cols)[0]
        for d, n in enumerate(counts.reached):
            for r, m in enumerate(counts.matched[d]):
                low, high = wilson(m, n)
                covered += low <= TRUTH[d, r] <= high
                total += 1
    low, high = _binomial_quantiles(total, 0.95, 1e-4)
    assert low <= covered <= high, (covered, total)


def test_cli_fits_the_tree_table_and_the_chain_part_is_unchanged(tmp_path, capsys):
    cols, _ = tree_log(TRUTH, 250, seed=7)
    tree_csv, chain_csv = tmp_path / "tree.csv", tmp_path / "chain.csv"
    write_log(tree_csv, cols)
    _, on_chain = bin_cols(cols)
    write_log(chain_csv, {c: v[on_chain] for c, v in cols.items() if c not in ("rank", "parent")})
    out_tree, out_chain = tmp_path / "t.toml", tmp_path / "c.toml"
    assert main(["calib", "fit", "--drafts-log", str(tree_csv), *DRAFTER_FLAGS, "-o", str(out_tree)]) == 0
    assert "a [tree] table of 3 depths x 3 ranks" in capsys.readouterr().out
    assert main(["calib", "fit", "--drafts-log", str(chain_csv), *DRAFTER_FLAGS, "-o", str(out_chain)]) == 0
    tree, chain = AcceptanceCalibration.load(out_tree), AcceptanceCalibration.load(out_chain)
    assert tree.with_rank_acceptance(None) == chain
    assert tree.tree_counts.source == f"drafts log {tree_csv}"
    assert tree.rank_acceptance.tolist() == rank_acceptance_from_counts(bin_cols(cols)[0]).tolist()
    # A chain logged with ranks (all 1) and parents fits exactly as without them.
    chain_ranked = tmp_path / "chain_ranked.csv"
    ranked = {c: v[on_chain] for c, v in cols.items()}
    ranked["parent"] = np.where(ranked["position"] == 1, -1, ranked["position"] - 2)
    write_log(chain_ranked, ranked)
    out = tmp_path / "r.toml"
    assert main(["calib", "fit", "--drafts-log", str(chain_ranked), *DRAFTER_FLAGS, "-o", str(out)]) == 0
    assert AcceptanceCalibration.load(out).with_rank_acceptance(None) == chain
    assert AcceptanceCalibration.load(out).rank_acceptance.shape == (3, 1)


def test_report_and_show_give_the_depth_by_rank_view(tmp_path, capsys):
    cols, _ = tree_log(TRUTH, 250, seed=8)
    log, out = tmp_path / "tree.csv", tmp_path / "t.toml"
    write_log(log, cols)
    assert main(["calib", "fit", "--drafts-log", str(log), *DRAFTER_FLAGS, "-o", str(out), "--json"]) == 0
    view = json.loads(capsys.readouterr().out)["tree"]
    cal = AcceptanceCalibration.load(out)
    cell = view["cells"][4]  # depth 2, rank 2
    assert (cell["depth"], cell["rank"]) == (2, 2)
    assert cell["matched"] == cal.tree_counts.matched[1][1] and cell["reached"] == cal.tree_counts.reached[1]
    assert cell["wilson95"] == list(wilson(cell["matched"], cell["reached"]))
    assert main(["calib", "show", str(out)]) == 0
    text = capsys.readouterr().out
    assert "draft trees: P(the target's token at depth d is the rank-r candidate), 3 depths x 3 ranks" in text
    assert f"{cell['rate']:.4f} [{cell['wilson95'][0]:.4f}, {cell['wilson95'][1]:.4f}]" in text
    assert main(["calib", "show", str(out), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["tree"] == view
    assert main(["calib", "fit", "--drafts-log", str(log), *DRAFTER_FLAGS, "-o", str(out), "--report"]) == 0
    assert "rank 3 (95% Wilson)" in capsys.readouterr().out


HEAD = "step,sequence,position,rank,parent,confidence,accepted\n"


@pytest.mark.parametrize("rows, expected", [
    ("0,0,1,0,-1,-0.1,1\n", "line 2: rank 0 is outside 1..16"),
    ("0,0,1,1,-1,-0.1,1\n0,0,2,17,0,-0.1,1\n", "line 3: rank 17 is outside 1..16"),
    ("0,0,2,1,1,-0.1,1\n0,0,1,1,-1,-0.1,1\n", "line 2: parent 1 is not an earlier node of its tree"),
    ("0,0,1,1,-1,-0.1,1\n0,0,3,1,0,-0.1,1\n", "line 3: position 3 under a parent at position 1"),
    ("0,0,1,1,-1,-0.1,1\n0,0,1,1,-1,-0.1,1\n", "line 3: a second rank-1 candidate under one parent"),
    ("0,0,1,1,-1,-0.1,1\n0,0,1,2,-1,-0.1,1\n", "line 3: a second accepted candidate under one reached node"),
    ("0,0,1,1,-1,-0.1,1\n0,0,2,1,-2,-0.1,1\n", "line 3: parent -2 is not an earlier node"),
    ("0,0,65,1,-1,-0.1,1\n", "line 2: position 65 is outside 1..64"),
])
def test_bad_tree_logs_are_refused_by_file_and_line(tmp_path, rows, expected):
    log = tmp_path / "bad.csv"
    log.write_text(HEAD + rows)
    with pytest.raises(CalibrationError) as e:
        load_drafts_log(log, tree=True)
    assert str(e.value).startswith(f"{log}: {expected}")


def test_bad_tree_log_lines_count_in_json_lines_and_without_parents(tmp_path):
    log = tmp_path / "bad.jsonl"
    rows = [dict(step=0, sequence=0, position=1, rank=1, confidence=-0.1, accepted=1),
            dict(step=0, sequence=0, position=3, rank=1, confidence=-0.1, accepted=1)]
    log.write_text(json.dumps(rows[0]) + "\n\n" + json.dumps(rows[1]) + "\n")
    with pytest.raises(CalibrationError, match=r"bad.jsonl: line 3: position 3 follows no node at position 2"):
        load_drafts_log(log, tree=True)
    csv = tmp_path / "bfs.csv"  # breadth-first without parents: the siblings collide
    csv.write_text("step,sequence,position,rank,confidence,accepted\n0,0,1,1,-1,1\n0,0,1,2,-1,0\n"
                   "0,0,2,1,-1,0\n0,0,2,2,-1,0\n0,0,2,1,-1,0\n")
    with pytest.raises(CalibrationError, match=r"line 6: a second rank-1 candidate .*breadth-first"):
        load_drafts_log(csv, tree=True)


def test_a_tree_past_the_node_limit_and_parents_without_ranks_are_refused(tmp_path):
    wide = tmp_path / "wide.csv"
    wide.write_text("step,sequence,position,rank,parent,confidence,accepted\n"
                    + "".join(f"0,0,{1 + i // 16},{1 + i % 16},{-1 if i < 16 else 0},-0.1,0\n" for i in range(257)))
    with pytest.raises(CalibrationError, match="line 258: the tree of step 0, sequence 0 has more than 256 nodes"):
        load_drafts_log(wide, tree=True)
    half = tmp_path / "half.csv"
    half.write_text("step,sequence,position,parent,confidence,accepted\n0,0,1,-1,-0.1,1\n")
    with pytest.raises(CalibrationError, match="a parent column but no rank column"):
        load_drafts_log(half, tree=True)


def test_held_out_trees_are_checked_not_counted(tmp_path):
    cols, target = tree_log(TRUTH, 100, seed=3)
    log = tmp_path / "t.csv"
    write_log(log, cols)
    counts, held, tree = load_drafts_log(log, holdout=0.25, tree=True)
    assert held.step_count == 25
    assert list(tree.reached) == truth_counts(target[:75], *TRUTH.shape)[0]


# -- calib fit --rank-rates ---------------------------------------------------------------------
def test_rank_rates_write_equal_rows(tmp_path, capsys):
    out = tmp_path / "c.toml"
    assert main(["calib", "fit", "--rates", "0.8,0.6,0.5", "--rank-rates", "0.72,0.09,0.04", *DRAFTER_FLAGS,
                 "-o", str(out)]) == 0
    cal = AcceptanceCalibration.load(out)
    assert cal.rank_acceptance.tolist() == [[0.72, 0.09, 0.04]] * 3  # the calibration's three priors
    assert cal.tree_counts is None and cal.with_rank_acceptance(None) == calibration_from_rates(
        DRAFTER, [0.8, 0.6, 0.5]).with_rank_acceptance(None)
    assert main(["calib", "fit", "--rates", "0.8,0.6", "--rank-rates", "0.7,0.1", "--tree-depths", "5", *DRAFTER_FLAGS,
                 "-o", str(out)]) == 0
    assert AcceptanceCalibration.load(out).rank_acceptance.shape == (5, 2)
    assert main(["calib", "fit", "--rank-rates", "0.7,0.1", "--tree-depths", "4", *DRAFTER_FLAGS, "-o", str(out),
                 "--report"]) == 0
    cal = AcceptanceCalibration.load(out)
    assert cal.priors.tolist() == [0.7] * 4 and cal.rank_acceptance.tolist() == [[0.7, 0.1]] * 4
    assert "no counts, so no intervals" in capsys.readouterr().out


@pytest.mark.parametrize("argv, expected", [
    (["--rank-rates", "0.7,0.4", "--rates", "0.8"], "--rank-rates: the rank rates are refused\n  - the rates sum to"),
    (["--rank-rates", "0.7,1.4", "--rates", "0.8"], "rank 2 = 1.4 is not a probability"),
    (["--rank-rates", ",".join(["0.01"] * 17), "--rates", "0.8"], "17 ranks: give 1..16"),
    (["--rank-rates", "0.7"], "--rank-rates as the only input needs --tree-depths D"),
    (["--rank-rates", "0.7", "--tree-depths", "65"], "--tree-depths 65: give 1..64"),
    (["--rank-rates", "0.7", "--tree-depths", "0"], "--tree-depths 0: give 1..64"),
    (["--rates", "0.7", "--tree-depths", "3"], "--tree-depths applies to --rank-rates only"),
    ([], "one of the arguments --counts --drafts-log"),
])
def test_bad_rank_rates_exit_2_in_one_line(tmp_path, capsys, argv, expected):
    out = tmp_path / "c.toml"
    assert main(["calib", "fit", *argv, *DRAFTER_FLAGS, "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert expected in err and "Traceback" not in err
    assert not out.exists()


def test_rank_rates_and_a_log_with_ranks_are_refused_together(tmp_path, capsys):
    cols, _ = tree_log(TRUTH, 150, seed=2)
    log = tmp_path / "t.csv"
    write_log(log, cols)
    assert main(["calib", "fit", "--drafts-log", str(log), "--rank-rates", "0.7", *DRAFTER_FLAGS,
                 "-o", str(tmp_path / "c.toml")]) == 2
    assert "has ranks, so its [tree] table is fitted from them" in capsys.readouterr().err


def test_an_online_refit_keeps_the_rank_acceptance():
    from specsim.calibration.online import OnlineCalibration

    base = AcceptanceCalibration(DRAFTER, [-1.0, 0.0], [0.3, 0.9], [0.8, 0.6, 0.5])
    tree = base.with_rank_acceptance([[0.5, 0.25]], TreeCounts((4,), ((2, 1),), "s"))
    rng = np.random.default_rng(3)
    conf = (-rng.exponential(0.6, (800, 3))).astype(np.float32)
    n_conf = np.full(800, 3, dtype=np.int64)
    run = rng.integers(0, 4, 800).astype(np.int64)
    refits = []
    for cal in (base, tree):
        online = OnlineCalibration(cal, max_depth=4)
        online.update(conf, n_conf, run)
        refits.append(online.calibration())
    assert refits[0].rank_acceptance is None
    assert refits[1] == refits[0].with_rank_acceptance(tree.rank_acceptance, tree.tree_counts)


# -- calib import --tree: telemetry from a tree run checks a[d][r], never fits it -------------------
def accepted_paths(tree, a, steps, rng):
    """Accepted drafts per verify step of ``tree`` when the target's token at depth d is rank r with
    chance a[d-1][r-1] (none with the rest)."""
    depth, ranks = a.shape
    cdf = np.cumsum(np.c_[a, 1 - a.sum(axis=1)], axis=1)
    target = np.array([np.searchsorted(cdf[d], rng.random(steps), side="right") + 1 for d in range(depth)]).T
    kids = {}
    for i, (p, r) in enumerate(zip(tree.parents, tree.ranks)):
        kids[(p, r)] = i
    out = np.zeros(steps, dtype=np.int64)
    for s in range(steps):
        node, d = -1, 0
        while d < depth and (node, int(target[s, d])) in kids:
            node, d = kids[(node, int(target[s, d]))], d + 1
        out[s] = d
    return out


def sglang_requests(runs, per_request=200):
    """SGLang per-request meta_info blocks (accept-run histograms) for these accepted runs."""
    lines = []
    for i in range(0, runs.shape[0], per_request):
        chunk = runs[i:i + per_request]
        hist = np.bincount(chunk).tolist()
        lines.append(json.dumps({"text": "x", "meta_info": {"id": str(i), "spec_correct_drafts_histogram": hist,
                                                            "spec_verify_ct": int(chunk.shape[0])}}))
    return "\n".join(lines) + "\n"


def tree_cal_file(tmp_path, a, name="cal.toml"):
    path = tmp_path / name
    key = DrafterKey("ef" * 32, 32000, "bf16", True)
    path.write_text(AcceptanceCalibration(key, [0.0], [0.7], [0.7, 0.6, 0.5]).with_rank_acceptance(a).render())
    return path


IMPORT_KEY = ["--drafter-sha256", "ef" * 32, "--vocab", "32000", "--quantization", "bf16", "--context", "true"]


def test_import_under_a_tree_checks_the_calibration(tmp_path, capsys):
    from specsim.tree import tree_from_sglang

    tree = tree_from_sglang(2, 3, 6, TRUTH)
    runs = accepted_paths(tree, TRUTH, 4000, np.random.default_rng(5))
    log = tmp_path / "req.jsonl"
    log.write_text(sglang_requests(runs))
    good, bad = tree_cal_file(tmp_path, TRUTH), tree_cal_file(tmp_path, TRUTH * 0.7, "bad.toml")
    argv = ["calib", "import", str(log), "--tree", "sglang:2,3,6", *IMPORT_KEY]
    assert main([*argv, "--calibration", str(good), "--json"]) == 0
    check = json.loads(capsys.readouterr().out)
    assert check["measured"] == pytest.approx(1 + runs.mean(), rel=1e-12)
    assert check["predicted"] == pytest.approx(tree.expected_tokens, rel=1e-12)
    half = 1.959963984540054 * runs.std() / math.sqrt(runs.shape[0])
    assert (check["low"], check["high"]) == pytest.approx((check["measured"] - half, check["measured"] + half))
    assert check["verdict"] == "agrees" and check["nodes"] == 5 and check["depth"] == 3
    assert main([*argv, "--calibration", str(bad)]) == 0
    text = capsys.readouterr().out
    assert "the calibration's a[d][r] disagrees with this run" in text
    assert "it checks a[d][r], it never fits it" in text
    assert not any(p.suffix == ".toml" and p.name not in ("cal.toml", "bad.toml") for p in tmp_path.iterdir())


def test_import_under_a_vllm_tree_reads_per_position_counts(tmp_path, capsys):
    from specsim.tree import tree_from_vllm

    setting = "[(0,), (1,), (0, 0), (1, 0), (0, 0, 0)]"
    tree = tree_from_vllm(setting, TRUTH)
    runs = accepted_paths(tree, TRUTH, 3000, np.random.default_rng(6))
    lines = []
    for chunk in np.array_split(runs, 6):
        n = chunk.shape[0]
        acc = [int((chunk >= j).sum()) for j in range(1, 4)]
        lines.append(f"INFO SpecDecoding metrics: Mean acceptance length: {1 + chunk.mean():.2f}, Accepted: "
                     f"{sum(acc)} tokens, Drafted: {n * 3} tokens, Per-position acceptance rate: "
                     + ", ".join(f"{a / n:.3f}" for a in acc) + f", Avg Draft acceptance rate: 50.0%, "
                     f"Drafts: {n}, Accepted per position: {acc}")
    log = tmp_path / "v.log"
    log.write_text("\n".join(lines) + "\n")
    assert main(["calib", "import", str(log), "--tree", f"vllm:{setting}", "--calibration",
                 str(tree_cal_file(tmp_path, TRUTH)), *IMPORT_KEY, "--json"]) == 0
    check = json.loads(capsys.readouterr().out)
    assert check["predicted"] == pytest.approx(tree.expected_tokens, rel=1e-12)
    assert abs(check["measured"] - (1 + runs.mean())) < 0.01  # the log's rates have 3 decimals
    assert check["low"] is not None


@pytest.mark.parametrize("extra, expected", [
    (["-o", "x.toml"], "nothing is fitted from it: drop -o"),
    (["--assume", "constant-rate"], "drop --assume"),
    ([], "--tree: give --calibration CAL"),
    (["--calibration", "{plain}"], "has no [tree] table, so it predicts nothing"),
    (["--calibration", "{other}"], "fitted on another drafter"),
])
def test_import_under_a_tree_refusals(tmp_path, capsys, extra, expected):
    log = tmp_path / "req.jsonl"
    log.write_text(sglang_requests(np.array([0, 1, 2, 3] * 50)))
    plain = tmp_path / "plain.toml"
    plain.write_text(AcceptanceCalibration(DrafterKey("ef" * 32, 32000, "bf16", True), [0.0], [0.7], [0.7]).render())
    other = tmp_path / "other.toml"
    other.write_text(BASE.with_rank_acceptance(TRUTH).render())
    extra = [e.format(plain=plain, other=other) for e in extra]
    assert main(["calib", "import", str(log), "--tree", "sglang:2,3,6", *IMPORT_KEY, *extra]) == 2
    err = capsys.readouterr().err
    assert expected in err and "Traceback" not in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("setting, expected", [
    ("sglang:2,3", "write sglang:TOPK,STEPS,DRAFT_TOKENS"),
    ("tgi:1,2,3", "names no engine"),
    ("sglang:2,9,6", "steps"),  # deeper than the calibration's three depths
    ("vllm:[(0,), (5,)]", "rank"),
])
def test_bad_tree_settings_are_refused_by_field(tmp_path, capsys, setting, expected):
    log = tmp_path / "req.jsonl"
    log.write_text(sglang_requests(np.array([0, 1, 2] * 50)))
    assert main(["calib", "import", str(log), "--tree", setting, "--calibration", str(tree_cal_file(tmp_path, TRUTH)),
                 *IMPORT_KEY]) == 2
    err = capsys.readouterr().err
    assert expected in err and "Traceback" not in err


def test_import_without_tree_still_needs_an_output(tmp_path, capsys):
    log = tmp_path / "req.jsonl"
    log.write_text(sglang_requests(np.array([0, 1, 2] * 50)))
    assert main(["calib", "import", str(log), *IMPORT_KEY]) == 2
    assert "required: -o/--output" in capsys.readouterr().err
    assert main(["calib", "import", str(log), *IMPORT_KEY, "-o", str(tmp_path / "c.toml"), "--json"]) == 2
    assert "--json applies to --tree only" in capsys.readouterr().err


def test_mean_only_tree_telemetry_gives_an_interval_over_records():
    from specsim.calibration.tree_check import measured_length
    from specsim.interop._records import Record

    recs = [Record("mean", "l1", mean_accepted=1.5, n_steps=100.0), Record("mean", "l2", mean_accepted=2.5,
                                                                            n_steps=300.0)]
    mean, low, high, steps, _ = measured_length(recs, 5, "x")
    assert mean == pytest.approx(1 + (150 + 750) / 400) and steps == 400
    assert low < mean < high
    assert measured_length(recs[:1], 5, "x")[1:3] == (None, None)
    # tokens without steps: every step of a tree run drafts the whole tree
    rec = Record("mean", "l", accepted_tokens=300, drafted_tokens=1000)
    assert measured_length([rec], 5, "x")[0] == pytest.approx(1 + 300 / 200)


@st.composite
def tree_logs(draw):
    """Random trees (parents before children, each rank once per parent), each with at most one
    accepted child per node, listed with their rows interleaved across trees."""
    trees = []
    for _ in range(draw(st.integers(0, 6))):
        parents, ranks, depths = [], [], []
        for i in range(draw(st.integers(1, 12))):
            p = draw(st.integers(-1, i - 1))
            used = {r for q, r in zip(parents, ranks) if q == p}
            free = [r for r in range(1, 6) if r not in used]
            if not free:
                break
            parents.append(p)
            ranks.append(draw(st.sampled_from(free)))
            depths.append(1 if p < 0 else depths[p] + 1)
        accepted = [0] * len(parents)
        for p in set(parents):
            kids = [i for i, q in enumerate(parents) if q == p]
            pick = draw(st.integers(-1, len(kids) - 1))
            if pick >= 0:
                accepted[kids[pick]] = 1
        trees.append((parents, ranks, depths, accepted))
    rows = [(t, i) for t, tree in enumerate(trees) for i in range(len(tree[0]))]
    # Interleave the trees' rows, keeping each tree's own order.
    keys = [draw(st.floats(0, 1)) for _ in trees]
    rows.sort(key=lambda ti: (keys[ti[0]] + ti[1]) if draw(st.booleans()) else ti[1])
    seen = {}
    order = []
    for t, _ in rows:  # each tree's rows in its own order, whatever the interleaving
        order.append((t, seen.setdefault(t, 0)))
        seen[t] += 1
    return trees, order


def node_counts(trees):
    """reached(d) and matched(d, r), node by node: a node is reached when its ancestors were all
    accepted; a tree reaches depth d when it holds a reached node there."""
    reached, matched = {}, {}
    for parents, ranks, depths, accepted in trees:
        ok = []
        for i, p in enumerate(parents):
            ok.append(p < 0 or (ok[p] and accepted[p]))
        for d in {depths[i] for i in range(len(parents)) if ok[i]}:
            reached[d] = reached.get(d, 0) + 1
        for i in range(len(parents)):
            if ok[i] and accepted[i]:
                matched[(depths[i], ranks[i])] = matched.get((depths[i], ranks[i]), 0) + 1
    return reached, matched


@SETTINGS
@given(log=tree_logs())
def test_tree_counts_equal_a_node_by_node_count(log):
    trees, order = log
    cols = {c: np.array([trees[t][k][i] for t, i in order], dtype=np.int64)
            for c, k in (("parent", 0), ("rank", 1), ("position", 2), ("accepted", 3))}
    step = np.array([t for t, _ in order], dtype=np.int64)
    counts, on_chain = bin_tree(step, np.zeros_like(step), cols["position"], cols["rank"],
                                cols["accepted"].astype(np.int8), cols["parent"])
    reached, matched = node_counts(trees)
    if counts is None:
        assert not reached
        return
    assert list(counts.reached) == [reached[d] for d in range(1, len(reached) + 1)]
    for d, row in enumerate(counts.matched, 1):
        assert list(row) == [matched.get((d, r), 0) for r in range(1, len(row) + 1)]
    assert not any(r > len(counts.matched[0]) for _, r in matched)
    for (t, i), chain in zip(order, on_chain):
        parents, ranks = trees[t][0], trees[t][1]
        path = [i]
        while parents[path[-1]] >= 0:
            path.append(parents[path[-1]])
        assert chain == all(ranks[j] == 1 for j in path)


def test_a_json_lines_tree_log_reads_as_the_csv(tmp_path):
    cols, _ = tree_log(TRUTH, 120, seed=4)
    csv, jsonl = tmp_path / "t.csv", tmp_path / "t.jsonl"
    write_log(csv, cols)
    with open(jsonl, "w") as f:
        for i in range(cols["step"].shape[0]):
            row = {c: (float(v[i]) if c == "confidence" else int(v[i])) for c, v in cols.items()}
            row["confidence"] = float(f"{row['confidence']:.6f}")
            f.write(json.dumps(row) + "\n")
    (a, _, ta), (b, _, tb) = load_drafts_log(csv, tree=True), load_drafts_log(jsonl, tree=True)
    assert replace(a, source="") == replace(b, source="") and a.reached > 0
    assert replace(ta, source="") == replace(tb, source="") and ta.reached[0] == 120


def test_server_info_that_states_a_tree_checks_instead_of_fitting(tmp_path, capsys):
    from specsim.tree import tree_from_sglang

    info = {"internal_states": [{"avg_spec_accept_length": 2.4}],
            "speculative_algorithm": "EAGLE", "speculative_eagle_topk": 2, "speculative_num_steps": 3,
            "speculative_num_draft_tokens": 6}
    path = tmp_path / "info.json"
    path.write_text(json.dumps(info))
    cal = tree_cal_file(tmp_path, TRUTH)
    assert main(["calib", "import", str(path), "--calibration", str(cal), *IMPORT_KEY, "--json"]) == 0
    check = json.loads(capsys.readouterr().out)
    assert check["setting"] == "sglang:2,3,6" and check["verdict"] == "no interval"
    assert check["predicted"] == pytest.approx(tree_from_sglang(2, 3, 6, TRUTH).expected_tokens)
    assert check["measured"] == pytest.approx(2.4)
    out = tmp_path / "c.toml"
    assert main(["calib", "import", str(path), *IMPORT_KEY, "-o", str(out), "--assume", "constant-rate"]) == 2
    err = capsys.readouterr().err
    assert "the telemetry states a draft-tree run (sglang:2,3,6)" in err and "drop -o, --assume" in err
    assert not out.exists()
    assert main(["calib", "import", str(path), *IMPORT_KEY]) == 2
    assert "states a draft-tree run (sglang:2,3,6): give --calibration CAL" in capsys.readouterr().err
    del info["speculative_num_draft_tokens"]
    path.write_text(json.dumps(info))
    assert main(["calib", "import", str(path), "--calibration", str(cal), *IMPORT_KEY]) == 2
    assert "(sglang:2,3,?) but not all of its settings" in capsys.readouterr().err
    info["speculative_eagle_topk"] = 1  # a chain: imported as before
    path.write_text(json.dumps(info))
    assert main(["calib", "import", str(path), *IMPORT_KEY, "-o", str(out), "--assume", "constant-rate"]) == 0
