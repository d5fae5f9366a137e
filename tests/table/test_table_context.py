"""A cost table's context axis (docs/tables.md#context): the kernels against tests/reference.py,
reading, writing, refusals, and the commands that handle it."""

import json
import re

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from specsim import Cell, CostTable, TableError, TableKey
from specsim.measure import merge_tables
from tests import reference as ref
from tests.fixtures import grid, positive, same

SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
KEY = TableKey(1, "h200", "llama-3.1-8b/eagle-1l-bf16", {"verify": "sha256:aa", "draft": "sha256:bb"})


def plain(widths, max_k, scale):
    return CostTable.from_cells(KEY, grid(widths, max_k, lambda n, k, f: scale * (1.0 + n + 10 * k + 0.1 * f)))


def with_axis(contexts=(512, 2048, 8192), widths=(1, 4, 16), max_k=2, reference=None):
    return CostTable.from_contexts({c: plain(list(widths), max_k, c / 512) for c in contexts}, reference=reference)


def as_rows(table):
    return [tuple(c) for c in table.cells]


def test_a_table_without_an_axis_is_the_same_at_every_context():
    t = plain([1, 4], 2, 1.0)
    assert t.contexts.size == 0 and t.reference_context is None and t.axis is None
    assert t.at_context(123.5) is t
    assert t.cell(2, 1, context=99999) == t.cell(2, 1)
    assert "[context]" not in t.to_text()


@pytest.mark.parametrize("c", [1, 100, 512, 700, 2048, 5000.5, 8192, 10**6])
def test_lookup_matches_reference_on_edge_contexts(c):
    t = with_axis()
    grids = [as_rows(t.at_context(x)) for x in t.contexts.tolist()]
    for n in (0, 1, 2, 4, 9, 16, 100):
        for k in range(3):
            want = ref.ref_context_cell(t.contexts.tolist(), grids, n, k, c)
            assert same(t.cell(n, k, context=c)[2:], want)
            assert same(t.at_context(c).cell(n, k)[2:], want)


def test_measured_contexts_read_back_exactly_and_outside_takes_the_nearest():
    t = with_axis()
    for c, scale in ((512, 1), (2048, 4), (8192, 16)):
        assert t.at_context(c) == CostTable(KEY, t.widths, plain([1, 4, 16], 2, scale).costs) or np.array_equal(
            t.at_context(c).costs, plain([1, 4, 16], 2, scale).costs)
    assert np.array_equal(t.at_context(1).costs, t.at_context(512).costs)
    assert np.array_equal(t.at_context(1e9).costs, t.at_context(8192).costs)
    # Halfway between 512 (scale 1) and 2048 (scale 4): scale 2.5.
    assert t.cell(4, 1, context=1280).verify_ms == pytest.approx(2.5 * (1 + 4 + 10))
    # Without a context, the reference (default: the smallest) prices.
    assert t.reference_context == 512 and t.cell(4, 1) == t.cell(4, 1, context=512)


def test_one_context_is_an_axis_of_one():
    t = with_axis(contexts=(1024,))
    assert t.contexts.tolist() == [1024]
    assert np.array_equal(t.at_context(5).costs, t.costs) and np.array_equal(t.at_context(10**5).costs, t.costs)


@st.composite
def axis_tables(draw):
    contexts = sorted(draw(st.lists(st.integers(1, 10**5), min_size=1, max_size=4, unique=True)))
    widths = sorted(draw(st.lists(st.integers(1, 300), min_size=1, max_size=4, unique=True)))
    max_k = draw(st.integers(0, 3))
    tables = {}
    for c in contexts:
        cells = []
        for n in widths:
            for k in range(max_k + 1):
                v = [draw(positive) for _ in range(4)]
                if k == 0:
                    v[2] = v[3] = 0.0
                cells.append(Cell(n, k, *v))
        tables[c] = CostTable.from_cells(KEY, cells)
    return CostTable.from_contexts(tables, reference=draw(st.sampled_from(contexts))), tables


@SETTINGS
@given(data=axis_tables(), queries=st.lists(st.tuples(st.integers(0, 400), st.integers(0, 4),
                                                      st.floats(0.5, 2e5, allow_nan=False)), min_size=1, max_size=20))
def test_context_kernels_match_reference(data, queries):
    table, tables = data
    contexts = sorted(tables)
    grids = [as_rows(tables[c]) for c in contexts]
    ns, ks, cs = (np.array(x) for x in zip(*queries))
    out = table.lookup(ns, ks, contexts=cs)
    for row, (n, k, c) in zip(out, queries):
        want = ref.ref_context_cell(contexts, grids, n, k, c)
        if want is None:
            assert np.isnan(row).all()
        else:
            assert same(row, want)
            assert same(table.at_context(c).cell(n, k)[2:], want)
    back = CostTable.parse(table.to_text())
    assert back == table and back.axis == table.axis


def test_the_axis_round_trips_through_text_and_keeps_extras():
    t = with_axis(reference=2048)
    t = CostTable(t.key, t.widths, t.costs, {"note": "x"}, {(1, 0): {"samples": 3}}, "<t>", t.contexts,
                  t.context_costs, t.reference_context)
    text = t.to_text()
    assert "[context]\ntokens = [512, 2048, 8192]\nreference = 2048" in text
    back = CostTable.parse(text, "t.toml")
    assert back == t and back.extras == {(1, 0): {"samples": 3}} and back.meta == {"note": "x"}
    # The plain fields are the reference context's: a reader that ignores the axis sees that grid.
    assert np.array_equal(back.costs, t.at_context(2048).costs)


def _text(**changes):
    text = with_axis(contexts=(512, 2048), widths=(1,), max_k=0).to_text()
    for old, new in changes.values():
        assert old in text
        text = text.replace(old, new, 1)
    return text


@pytest.mark.parametrize("change, match", [
    (("tokens = [512, 2048]", "tokens = [2048, 512]"), r"\[context\] tokens = \[2048, 512\] is not strictly ascending"),
    (("tokens = [512, 2048]", "tokens = [512, 512]"), "not strictly ascending"),
    (("tokens = [512, 2048]", "tokens = [0, 2048]"), r"\[context\] tokens: 0 is not a context length"),
    (("tokens = [512, 2048]", "tokens = [-5, 2048]"), r"\[context\] tokens: -5 is not a context length"),
    (("tokens = [512, 2048]", "tokens = []"), "non-empty array"),
    (("reference = 512", "reference = 1000"), "reference = 1000 must be one of tokens"),
    (("verify_ms_at = [2.0, 8.0]", "verify_ms_at = [2.0]"), r"cells\[0\] \(n=1, k=0\) verify_ms_at has 1 values; "
                                                              "the context axis .* is ragged"),
    (("verify_j_at = [2.1, 8.4]\n", ""), r"cells\[0\] \(n=1, k=0\) has no `verify_j_at`"),
    (("verify_ms_at = [2.0, 8.0]", "verify_ms_at = [3.0, 8.0]"), "at the reference context 512 is 3.0"),
    (("verify_ms_at = [2.0, 8.0]", "verify_ms_at = [2.0, -1.0]"), r"cells\[0\] at context 2048 .*verify_ms must be > 0"),
])
def test_bad_axes_are_refused_naming_file_and_field(change, match):
    with pytest.raises(TableError, match=match) as e:
        CostTable.parse(_text(a=change), "t.toml")
    assert str(e.value).startswith("t.toml: ")


def test_costs_per_context_without_an_axis_are_refused():
    text = _text(a=("[context]\ntokens = [512, 2048]\nreference = 512\n", ""))
    with pytest.raises(TableError, match="has verify_ms_at, verify_j_at, draft_ms_at, draft_j_at but the table has "
                                         r"no \[context\] axis"):
        CostTable.parse(text, "t.toml")


def test_from_contexts_refuses_a_ragged_axis_and_bad_contexts():
    with pytest.raises(TableError, match="the axis would be ragged"):
        CostTable.from_contexts({512: plain([1, 4], 1, 1.0), 2048: plain([1, 8], 1, 2.0)})
    with pytest.raises(TableError, match="depths 0..2"):
        CostTable.from_contexts({512: plain([1], 1, 1.0), 2048: plain([1], 2, 2.0)})
    for bad in (0, -3, 1.5):
        with pytest.raises(TableError, match="is not an integer >= 1"):
            CostTable.from_contexts({bad: plain([1], 1, 1.0)})
    with pytest.raises(TableError, match="reference context 7 is not one of"):
        CostTable.from_contexts({512: plain([1], 1, 1.0)}, reference=7)


@pytest.mark.parametrize("c", [0, -1, float("nan"), float("inf"), "x", True])
def test_a_query_context_of_zero_negative_or_not_a_number_is_refused(c):
    t = with_axis()
    with pytest.raises(TableError, match="context must be"):
        t.cell(1, 0, context=c)
    with pytest.raises(TableError, match="context must be"):
        t.at_context(c)
    with pytest.raises(TableError, match="context must be"):
        plain([1], 0, 1.0).at_context(c)


def test_digests_that_differ_by_context_combine_and_equal_ones_stay():
    a = plain([1], 0, 1.0)
    b = CostTable(TableKey(1, KEY.box_class, KEY.recipe, {"verify": "sha256:cc", "draft": "sha256:bb"}), a.widths,
                  a.costs * 2)
    t = CostTable.from_contexts({512: a, 2048: b})
    assert t.key.plan_digests["draft"] == "sha256:bb"
    assert t.key.plan_digests["verify"].startswith("contexts:sha256:")
    again = CostTable.from_contexts({512: a, 2048: CostTable(b.key, b.widths, b.costs * 3)})
    assert again.key == t.key  # the digest names what was measured, not the costs


def test_merge_takes_medians_at_every_context_and_refuses_other_axes():
    runs = [with_axis(contexts=(512, 2048), widths=(1, 4), max_k=1) for _ in range(3)]
    scaled = CostTable(runs[2].key, runs[2].widths, runs[2].costs * 5, {}, {}, "<r>", runs[2].contexts,
                       runs[2].context_costs * 5, runs[2].reference_context)
    key, cells, meta, extras, axis = merge_tables([runs[0], runs[1], scaled])
    assert axis.tokens == (512, 2048) and axis.reference == 512
    merged = CostTable.parse(CostTable.render(key, cells, meta, extras, axis))
    assert np.array_equal(merged.context_costs, runs[0].context_costs)
    other = with_axis(contexts=(512, 4096), widths=(1, 4), max_k=1)
    with pytest.raises(Exception, match=r"context axis \[512, 4096\]"):
        merge_tables([runs[0], other], ["a.toml", "b.toml"])
    with pytest.raises(Exception, match=r"context axis \[\]"):
        merge_tables([runs[0], plain([1, 4], 1, 1.0)], ["a.toml", "b.toml"])


# ---------------------------------------------------------------- the commands

@pytest.fixture
def run_cli(capsys):
    from specsim.cli import main

    def run(*argv):
        try:
            code = main([str(a) for a in argv])
        except SystemExit as e:  # argparse refusals
            code = e.code
        out, err = capsys.readouterr()
        return code, out, err

    return run


def test_model_show_query_merge_with_contexts(tmp_path, run_cli):
    out = tmp_path / "m.toml"
    args = ["table", "model", "--gpu", "h200", "--model", "llama-3.1-8b", "--drafter", "eagle-1l", "--max-k", "2",
            "--widths", "1,8,32"]
    code, text, _ = run_cli(*args, "--contexts", "512,2048,8192", "-o", str(out))
    assert code == 0 and "contexts 512, 2048, 8192" in text
    table = CostTable.load(out)
    assert table.contexts.tolist() == [512, 2048, 8192] and table.reference_context == 2048
    # Each context's grid is the roofline's at that context, and the reference is the default one.
    from specsim.costmodel import model_table

    for c in (512, 2048, 8192):
        alone = model_table("h200", "llama-3.1-8b", "eagle-1l", context_tokens=c, widths=[1, 8, 32], max_k=2)
        assert np.array_equal(table.at_context(c).costs, alone.costs)
    # Attention reads grow with context: every cost at 8192 is above the one at 512.
    assert (table.at_context(8192).costs[..., 0] > table.at_context(512).costs[..., 0]).all()

    code, text, _ = run_cli("table", "show", str(out))
    assert code == 0 and "context axis: 512, 2048, 8192 tokens (reference 2048" in text
    assert text.count("step cost (verify + drafts) at context") == 3
    code, text, _ = run_cli("table", "show", str(out), "--context", "1000", "--json")
    doc = json.loads(text)
    assert doc["contexts"] == [512, 2048, 8192] and list(doc["cells_by_context"]) == ["1000"]
    code, text, _ = run_cli("table", "query", str(out), "8", "1", "--context", "1280", "--json")
    got = json.loads(text)
    want = table.cell(8, 1, context=1280)
    assert got["verify_ms"] == want.verify_ms and got["context"] == 1280
    code, text, _ = run_cli("table", "query", str(out), "8", "1", "--context", "99999")
    assert "nearest context" in text

    merged, again = tmp_path / "merged.toml", tmp_path / "again.toml"
    again.write_bytes(out.read_bytes())  # one file twice is refused: two runs, the same figures
    code, text, _ = run_cli("table", "merge", str(out), str(again), "-o", str(merged))
    assert code == 0 and CostTable.load(merged).axis == table.axis


@pytest.mark.parametrize("argv, match", [
    (["--contexts", "2048,512"], "not strictly ascending"),
    (["--contexts", "0,512"], "context 0 is not a context length"),
    (["--contexts=-512,512"], "context -512 is not a context length"),
    (["--contexts", "512,2048", "--context-tokens", "1000"], "--context-tokens 1000 is not one of --contexts"),
])
def test_model_refuses_bad_contexts_and_writes_nothing(tmp_path, run_cli, argv, match):
    out = tmp_path / "m.toml"
    code, _, err = run_cli("table", "model", "--gpu", "h200", "--model", "llama-3.1-8b", "--drafter", "eagle-1l",
                           "--max-k", "1", "--widths", "1,8", *argv, "-o", str(out))
    assert code == 2 and match in err and not out.exists()


def test_query_refuses_a_context_of_zero_or_less(tmp_path, run_cli):
    path = tmp_path / "t.toml"
    path.write_text(with_axis().to_text())
    for c in ("0", "-5", "nan"):
        code, _, err = run_cli("table", "query", str(path), "1", "0", "--context", c)
        assert code == 2 and "must be a number of tokens in (0," in err


def test_a_bad_axis_file_is_refused_by_the_commands(tmp_path, run_cli):
    path = tmp_path / "t.toml"
    path.write_text(_text(a=("tokens = [512, 2048]", "tokens = [2048, 512]")))
    code, _, err = run_cli("table", "show", str(path))
    assert code == 2 and str(path) in err and "[context] tokens = [2048, 512] is not strictly ascending" in err


# ---------------------------------------------------------------- bench --contexts

def _bench(tmp_path, backend_name="numpy", **kw):
    from specsim.measure import SweepDevice, SweepRun, SweepSettings, bench

    fast = SweepSettings(min_window_s=0.003, repeats=3, warmup=1, idle_s=0.0, align_s=0.01)
    out = tmp_path / "b.toml"
    run = SweepRun(kw.pop("resume", False), False, kw.pop("log", None))
    table = bench("tiny", [1, 2], 1, out, device=SweepDevice(backend_name, 0, "assumed", 50.0), settings=fast,
                  run=run, **kw)
    return table, out


def test_bench_measures_the_grid_at_each_context(tmp_path):
    import dataclasses

    from specsim.measure import BUILTIN, NumpyBackend, ProxyWorkload, context_path, load_recipe

    table, out = _bench(tmp_path, contexts=[16, 64])
    assert table.contexts.tolist() == [16, 64]
    # The tiny recipe's own context (64) is listed: it is the reference.
    assert BUILTIN["tiny"]["context"] == 64 and table.reference_context == 64
    assert not context_path(out, 16).exists() and not context_path(out, 64).exists()
    assert CostTable.load(out) == table and table.meta["context_tokens"] == 64
    # Each context's sweep reads a KV cache of that many tokens per sequence: its launch plan
    # names the context, so the digests differ by context and combine.
    recipe = load_recipe("tiny")
    plans = {c: ProxyWorkload(dataclasses.replace(recipe, context=c), NumpyBackend()).plans() for c in (16, 64)}
    for c, plan in plans.items():
        assert f"kT[n,{recipe.kv_heads},{recipe.head_dim},{c}]" in " ".join(plan["verify"]["layer_ops"])
    assert all(d.startswith("contexts:sha256:") for d in table.key.plan_digests.values())
    assert (table.context_costs > 0)[..., 0].all()


def test_bench_contexts_refusals(tmp_path):
    from specsim.errors import MeasureError
    from specsim.measure import CallableWorkload

    for bad in ([64, 16], [0, 16], [16, 16]):
        with pytest.raises(MeasureError, match="contexts"):
            _bench(tmp_path, contexts=bad)
    with pytest.raises(MeasureError, match="contexts need a recipe"):
        from specsim.measure import SweepSettings, bench

        steps = CallableWorkload(lambda n, k: None, None, "mine", digests={"verify": "d", "draft": "d"})
        bench(steps, [1], 0, tmp_path / "x.toml", contexts=[16],
              settings=SweepSettings(min_window_s=0.003, repeats=3, warmup=1, idle_s=0.0))
    assert not (tmp_path / "b.toml").exists()


def test_bench_contexts_on_the_cupy_path_with_mocks(tmp_path, monkeypatch):
    """The CuPy backend runs the same proxy over ``backend.xp``: with a CuPy stand-in (no CUDA)
    each context's sweep is timed by CUDA events and the table gets the axis."""
    import specsim.measure as measure
    from specsim.measure import CupyBackend
    from tests.measure.test_measure import fake_cupy

    backend = CupyBackend(cupy=fake_cupy(elapsed_ms=3.0))
    monkeypatch.setattr(measure, "open_backend", lambda name, device=0: backend)
    table, _ = _bench(tmp_path, contexts=[16, 64])
    assert table.contexts.tolist() == [16, 64] and table.meta["backend"] == "cupy"
    assert (table.context_costs[..., 0] == 3.0).all()


def test_cli_bench_contexts(tmp_path, run_cli):
    out = tmp_path / "c.toml"
    code, text, err = run_cli("bench", "--recipe", "tiny", "--widths", "1", "--max-k", "0", "--contexts", "16,32",
                              "--min-window-s", "0.003", "--repeats", "3", "--warmup", "1", "--assume-power-w", "80",
                              "--quiet", "-o", out)
    assert code == 0 and CostTable.load(out).contexts.tolist() == [16, 32]
    code, _, err = run_cli("bench", "--recipe", "tiny", "--widths", "1", "--max-k", "0", "--contexts", "32,16",
                           "-o", tmp_path / "d.toml")
    assert code == 2 and "not strictly ascending" in err and not (tmp_path / "d.toml").exists()


@pytest.mark.parametrize("old, new, shown", [
    ("reference = 512", "reference = true", "reference = true must be one of tokens"),
    ("reference = 512", 'reference = "512"', 'reference = "512" must be one of tokens'),
    ("tokens = [512, 2048]", "tokens = [512, false]", "[context] tokens: false is not a context length"),
    ("tokens = [512, 2048]", "tokens = true", "(mean KV tokens per decoding sequence), got true"),
    ("verify_ms_at = [2.0, 8.0]", "verify_ms_at = [2.0, true]", "verify_ms_at = [2.0, true] is not an array"),
    ("n = 1", "n = true", "cells[0] n = true is not a non-negative integer"),
])
def test_axis_refusals_show_values_as_the_file_writes_them(old, new, shown):
    """``reference = true`` was echoed as Python's ``True``."""
    with pytest.raises(TableError) as e:
        CostTable.parse(_text(a=(old, new)), "t.toml")
    assert shown in str(e.value) and "True" not in str(e.value) and "False" not in str(e.value)


# -- hostile input round four, case 14: one rule for a context ------------------------------------

@pytest.mark.parametrize("c", [[1000], np.array([1000.0]), (1000,), np.array(1000.0)[None]])
def test_a_context_in_a_list_or_array_is_accepted_where_the_planner_refuses_it(c):
    from specsim.calibration import DrafterKey, calibration_from_rates
    from specsim.plan import Planner
    from specsim.errors import PlanError

    t = with_axis()
    with pytest.raises(TableError, match="context must be a finite number of tokens > 0"):
        t.cell(1, 0, context=c)
    cal = calibration_from_rates(DrafterKey("x", 9, "bf16", True), [0.8, 0.7], "conditional")
    with pytest.raises(PlanError, match="context must be a finite number of tokens > 0"):
        Planner(t, cal).propose(1, context=c)
    assert t.cell(1, 0, context=np.float64(1000.0)) == t.cell(1, 0, context=1000)


def test_lookup_flattens_a_2d_context_array():
    t = with_axis()
    with pytest.raises(TableError, match=r"lookup contexts must be a 1-d array, one context per query, got shape "
                                         r"\(2, 1\)"):
        t.lookup([1, 4], [0, 1], contexts=np.array([[512.0], [1024.0]]))
    with pytest.raises(TableError, match=r"got shape \(\)"):
        t.lookup([1], [0], contexts=512.0)
    ok = t.lookup([1, 4], [0, 1], contexts=np.array([512.0, 1024.0]))
    assert ok[0].tolist() == list(t.cell(1, 0, context=512)[2:])


# -- item 15: foreign exceptions from from_contexts ------------------------------------------------

@pytest.mark.parametrize("tables,reference,said", [
    ({512: "x"}, None, "the table at context 512 is 'x', not a CostTable"),
    ({512: None}, None, "the table at context 512 is None, not a CostTable"),
    ({512: 1, "a": 2}, None, "context 'a' is not an integer >= 1"),
    ([512], None, "a dict of context -> CostTable, got list"),
    ({512: "t"}, [512], "reference context [512] is not one of [512]"),
])
def test_from_contexts_with_a_string_table_attributeerror(tables, reference, said):
    tables = {c: (plain([1], 0, 1.0) if v == "t" else v) for c, v in tables.items()} \
        if isinstance(tables, dict) else tables
    with pytest.raises(TableError, match=re.escape(said)):
        CostTable.from_contexts(tables, reference=reference)
