"""Cost tables (docs/tables.md): kernels against tests/reference.py, validation, rendering, keys."""

import math
import sys

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from specsim import Cell, CostTable, KeyMismatch, TableError, TableKey
from specsim.table import _kernels
from tests import reference as ref
from tests.fixtures import grid, positive, same

SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
KEY = TableKey(1, "h200", "llama-3.1-8b/eagle-1l-bf16", {"verify": "sha256:aa", "draft": "sha256:bb"})


@st.composite
def tables(draw):
    widths = draw(st.lists(st.integers(1, 2000), min_size=1, max_size=6, unique=True))
    max_k = draw(st.integers(0, 4))
    cells = []
    for n in widths:
        for k in range(max_k + 1):
            v = [draw(positive) for _ in range(4)]
            if k == 0:
                v[2] = v[3] = 0.0
            cells.append(Cell(n, k, *v))
    draw(st.randoms(use_true_random=False)).shuffle(cells)
    return cells


# ---------------------------------------------------------------- lookup kernels
EDGE_QUERIES = [(0, 0), (1, 0), (2, 1), (3, 0), (4, 2), (5, 2), (7, 1), (8, 2), (9, 0), (100, 2), (2**63 - 1, 1),
                (1, 3), (8, 99)]


@pytest.mark.parametrize("widths", [[1], [4], [1, 2], [2, 8], [1, 2, 4, 8], [3, 5, 100]])
def test_cell_matches_reference_on_edge_cases(widths):
    cells = grid(widths, 2)
    table = CostTable.from_cells(KEY, cells)
    for n, k in EDGE_QUERIES + [(w, k) for w in widths for k in range(3)] + [(w + 1, 1) for w in widths]:
        want = ref.ref_cell(cells, n, k)
        got = table.cell(n, k)
        if want is None:
            assert got is None
            continue
        assert (got.n, got.k) == (n, k)
        assert same(got[2:], want), (n, k)


def test_cell_interpolates_and_takes_the_nearest_width_outside():
    cells = [Cell(2, 0, 10.0, 2.0, 0.0, 0.0), Cell(6, 0, 30.0, 4.0, 0.0, 0.0)]
    t = CostTable.from_cells(KEY, cells)
    assert t.cell(4, 0) == Cell(4, 0, 20.0, 3.0, 0.0, 0.0)
    assert t.cell(3, 0).verify_ms == 10.0 + (30.0 - 10.0) * 0.25
    assert t.cell(0, 0) == Cell(0, 0, 10.0, 2.0, 0.0, 0.0)  # n = 0 is below the range
    assert t.cell(1000, 0) == Cell(1000, 0, 30.0, 4.0, 0.0, 0.0)
    assert t.cell(2**64 - 1, 0).verify_ms == 30.0  # any usize width, as the metrale serve takes
    assert t.cell(2, 1) is None
    c = t.cell(4, 0)
    assert (c.step_ms, c.step_j) == (20.0, 3.0)


def test_cell_refuses_negative_or_non_integer_indices():
    t = CostTable.from_cells(KEY, grid([1], 0))
    for bad in (-1, 1.0, True, "1"):
        with pytest.raises(TableError):
            t.cell(bad, 0)
        with pytest.raises(TableError):
            t.cell(1, bad)


@SETTINGS
@given(cells=tables(), queries=st.lists(st.tuples(st.integers(0, 2500), st.integers(0, 6)), min_size=1, max_size=30))
def test_lookup_kernels_match_reference(cells, queries):
    table = CostTable.from_cells(KEY, cells)
    ns = np.array([q[0] for q in queries], dtype=np.int64)
    ks = np.array([q[1] for q in queries], dtype=np.int64)
    out = np.full((len(queries), 4), -1.0)
    _kernels.lookup_nb(table.widths, table.costs, ns, ks, out)
    batch = table.lookup(ns, ks)
    for i, (n, k) in enumerate(queries):
        want = ref.ref_cell(cells, n, k)
        if want is None:
            assert np.isnan(out[i]).all() and np.isnan(batch[i]).all()
            assert table.cell(n, k) is None
        else:
            assert same(out[i], want) and same(batch[i], want) and same(table.cell(n, k)[2:], want)


@SETTINGS
@given(widths=st.lists(st.integers(1, 50), min_size=1, max_size=8, unique=True), n=st.integers(0, 60))
def test_bracket_kernel_matches_reference(widths, n):
    widths = sorted(widths)
    a, b = _kernels.bracket_nb(np.array(widths, dtype=np.int64), n)
    below = [i for i, w in enumerate(widths) if w <= n]
    above = [i for i, w in enumerate(widths) if w >= n]
    assert a == (below[-1] if below else -1)
    assert b == (above[0] if above else -1)


def test_cell_into_kernel_leaves_out_untouched_beyond_max_k():
    t = CostTable.from_cells(KEY, grid([1, 4], 1))
    out = np.full(4, 7.0)
    assert not _kernels.cell_into_nb(t.widths, t.costs, 2, 2, out)
    assert (out == 7.0).all()
    assert _kernels.cell_into_nb(t.widths, t.costs, 2, 1, out)
    assert same(out, ref.ref_cell(t.cells, 2, 1))


def test_lookup_fills_out_and_refuses_bad_shapes():
    t = CostTable.from_cells(KEY, grid([1, 4], 1))
    out = np.empty((2, 4))
    assert t.lookup([1, 3], [0, 1], out=out) is out
    with pytest.raises(TableError):
        t.lookup([1, 2], [0])
    with pytest.raises(TableError):
        t.lookup([-1], [0])


def test_flat_arrays():
    cells = grid([8, 1, 4], 2)
    t = CostTable.from_cells(KEY, cells)
    assert t.widths.dtype == np.int64 and t.widths.tolist() == [1, 4, 8]
    assert t.costs.dtype == np.float64 and t.costs.shape == (3, 3, 4)
    assert t.costs.flags.c_contiguous and not t.costs.flags.writeable
    assert t.max_k == 2
    assert t.cells == sorted(cells)


# ---------------------------------------------------------------- validation (docs/tables.md#validation)
BASE = """[key]
schema = 1
box_class = "h200"
recipe = "r"

[key.plan_digests]
verify = "sha256:aa"
"""


def text_of(cells, head=BASE):
    body = "".join(
        "\n[[cells]]\n" + "".join(f"{f} = {v}\n" for f, v in zip(Cell._fields, c)) for c in cells
    )
    return head + body


VALID = [(1, 0, "10.0", "2.0", "0.0", "0.0"), (1, 1, "11.0", "2.5", "1.0", "0.25"),
         (4, 0, "12.0", "3.0", "0", "0"), (4, 1, "13", "3.5", "1.5", "0.5")]


def with_cell(i, **changes):
    cells = [list(c) for c in VALID]
    for f, v in changes.items():
        cells[i][Cell._fields.index(f)] = v
    return cells


BROKEN_ALONE = {
    "schema": (VALID, BASE.replace("schema = 1", "schema = 2")),
    "no_cells": ([], BASE),
    "n0": (with_cell(0, n="0") + [(0, 1, "1.0", "1.0", "1.0", "1.0")], BASE),
    "nan": (with_cell(1, verify_j="nan"), BASE),
    "inf": (with_cell(3, draft_ms="inf"), BASE),
    "-inf": (with_cell(2, verify_ms="-inf"), BASE),
    "verify_ms_zero": (with_cell(0, verify_ms="0.0"), BASE),
    "verify_j_negative": (with_cell(3, verify_j="-1.0"), BASE),
    "k0_draft_nonzero": (with_cell(2, draft_j="5e-324"), BASE),
    "k_draft_zero": (with_cell(1, draft_ms="0.0"), BASE),
    "k_draft_negative_zero": (with_cell(3, draft_j="-0.0"), BASE),
    "duplicate": (VALID + [VALID[1]], BASE),
    "missing_depth": (VALID[:3], BASE),
    "float_n": (with_cell(0, n="1.0"), BASE),
    "negative_k": (with_cell(0, k="-1"), BASE),
    "string_cost": (with_cell(0, verify_ms='"10.0"'), BASE),
    "bool_cost": (with_cell(0, verify_ms="true"), BASE),
    "huge_n": (with_cell(0, n="9223372036854775808"), BASE),
    "overflowing_float": (with_cell(0, verify_ms="1e400"), BASE),
    "no_key": (VALID, "[other]\nschema = 1\n"),
    "no_digests": (VALID, BASE.split("\n[key.plan_digests]")[0] + "\n"),
    "digest_not_string": (VALID, BASE + "draft = 1\n"),
    "schema_float": (VALID, BASE.replace("schema = 1", "schema = 1.0")),
    "schema_u32_overflow": (VALID, BASE.replace("schema = 1", "schema = 4294967297")),
}


def test_valid_text_parses():
    t = CostTable.parse(text_of(VALID))
    assert t.widths.tolist() == [1, 4] and t.max_k == 1
    assert t.cell(4, 1) == Cell(4, 1, 13.0, 3.5, 1.5, 0.5)  # integers read as floats, as serde widens


@pytest.mark.parametrize("rule", sorted(BROKEN_ALONE))
def test_each_rule_broken_alone_is_refused(rule):
    cells, head = BROKEN_ALONE[rule]
    with pytest.raises(TableError) as e:
        CostTable.parse(text_of(cells, head), "grid.toml")
    assert str(e.value).startswith("grid.toml: ")


def test_reference_rules_agree_with_parse():
    for rule, (cells, head) in BROKEN_ALONE.items():
        try:
            nums = [tuple(int(v) if f in ("n", "k") else float(v) for f, v in zip(Cell._fields, c)) for c in cells]
        except ValueError:
            continue  # a type error, not a validation rule
        schema = 2 if "schema = 2" in head else 1
        if head is BASE or schema == 2:
            assert ref.ref_table_rules(nums, schema), rule
    assert not ref.ref_table_rules([tuple(int(v) if f in ("n", "k") else float(v) for f, v in zip(Cell._fields, c)) for c in VALID])


def test_every_problem_is_listed_with_file_cell_and_values():
    cells = with_cell(1, verify_ms="-1.0", draft_ms="0.0") + [VALID[0]]
    cells[2][3] = "nan"  # cells[2] verify_j
    with pytest.raises(TableError) as e:
        CostTable.parse(text_of(cells), "runs/h200.toml")
    msg = str(e.value)
    assert msg.startswith("runs/h200.toml: ")
    assert "cells[1]" in msg and "verify_ms must be > 0" in msg and "draft_ms must be > 0 at k > 0" in msg
    assert "cells[2]" in msg and "verify_j not finite" in msg
    assert "cells[4]" in msg and "duplicate of cells[0]" in msg
    assert "verify_ms=-1.0" in msg  # the values
    assert len(e.value.problems) == 4


def test_shape_problems_are_all_listed():
    text = text_of([("1", "0", '"x"', "1.0", "0.0", "0.0"), ("2.0", "0", "1.0", "1.0", "0.0", "0.0")],
                   BASE.replace('box_class = "h200"\n', ""))
    with pytest.raises(TableError) as e:
        CostTable.parse(text, "t.toml")
    msg = str(e.value)
    assert "box_class" in msg and "cells[0] verify_ms" in msg and "cells[1] n" in msg


@SETTINGS
@given(cells=tables(), data=st.data())
def test_hypothesis_grids_refused_exactly_when_reference_says(cells, data):
    cells = [list(c) for c in cells]
    i = data.draw(st.integers(0, len(cells) - 1))
    field = data.draw(st.sampled_from(["n", "verify_ms", "verify_j", "draft_ms", "draft_j", "drop", "dup", "none"]))
    value = data.draw(st.sampled_from([0.0, -0.0, -1.0, math.nan, math.inf, 5e-324, 1.0]))
    if field == "drop":
        del cells[i]
    elif field == "dup":
        cells.append(list(cells[i]))
    elif field == "n":
        cells[i][0] = 0
    elif field != "none":
        cells[i][Cell._fields.index(field)] = value
    cells = [Cell(*c) for c in cells]
    broken = ref.ref_table_rules(cells)
    if broken:
        with pytest.raises(TableError):
            CostTable.from_cells(KEY, cells)
        with pytest.raises(TableError):
            CostTable.render(KEY, cells)
    else:
        t = CostTable.from_cells(KEY, cells)
        assert CostTable.parse(CostTable.render(KEY, cells)) == t


def test_toml_edge_forms():
    text = text_of(VALID)
    assert CostTable.parse("\ufeff" + text) == CostTable.parse(text)  # a BOM is skipped, as the metrale serve does
    assert CostTable.parse(text.replace("\n", "\r\n")) == CostTable.parse(text)
    assert CostTable.parse(text.encode()) == CostTable.parse(text)
    with pytest.raises(TableError, match="not valid TOML"):
        CostTable.parse(text + "\n[meta]\nbig = 18446744073709551615\n")
    with pytest.raises(TableError, match="not UTF-8"):
        CostTable.parse(text.encode() + b"\n# \xff\n")
    with pytest.raises(TableError, match="not valid TOML"):
        CostTable.parse(text + "oops")


def test_unknown_fields_are_kept_aside_and_written_back():
    text = text_of(VALID) + "spread_ms = 0.5\n\n[meta]\ndevice = \"H200\"\nwhen = 2026-10-04T10:00:00Z\nnested = {a = [1, 2.5]}\n"
    t = CostTable.parse(text)
    assert t.extras == {(4, 1): {"spread_ms": 0.5}}
    back = CostTable.parse(t.to_text())
    assert back == t and back.meta == t.meta and back.extras == t.extras


def test_load_reports_a_missing_file(tmp_path):
    with pytest.raises(TableError, match="cannot read"):
        CostTable.load(tmp_path / "absent.toml")
    p = tmp_path / "t.toml"
    p.write_text(text_of(VALID))
    assert CostTable.load(p).source == str(p)


# ---------------------------------------------------------------- rendering (docs/tables.md#rendering)
SEED_RENDERED = r'''[key]
schema = 1
box_class = "gb10"
recipe = "qwen3.6/qwen3.6-35b-a3b-fp8-nvfp4head"

[key.plan_digests]
draft = "sha256:0f"
verify = "sha256:1e"

[[cells]]
n = 1
k = 0
verify_ms = 80.02
verify_j = 4.022
draft_ms = 0.0
draft_j = 0.0

[[cells]]
n = 1
k = 1
verify_ms = 83.64
verify_j = 5.368
draft_ms = 5.66
draft_j = 0.363

[[cells]]
n = 8
k = 0
verify_ms = 1e-7
verify_j = 1e20
draft_ms = 0.0
draft_j = 0.0

[[cells]]
n = 8
k = 1
verify_ms = 125.0
verify_j = 7.159
draft_ms = 5.53
draft_j = 0.316
'''


def test_seed_rendered_text_parses_with_identical_cells():
    # The metrale serve writes floats with Rust's `{:?}` (1e-7, 1e20, 125.0) and strings with `{:?}`.
    t = CostTable.parse(SEED_RENDERED)
    assert t.cell(8, 0).verify_ms == 1e-7 and t.cell(8, 0).verify_j == 1e20
    assert t.cell(1, 1) == Cell(1, 1, 83.64, 5.368, 5.66, 0.363)
    assert t.key == TableKey(1, "gb10", "qwen3.6/qwen3.6-35b-a3b-fp8-nvfp4head", {"verify": "sha256:1e", "draft": "sha256:0f"})
    # and ours has the metrale serve's layout for a plain key
    assert CostTable.render(t.key, t.cells) == SEED_RENDERED.replace("1e-7", "1e-07").replace("1e20", "1e+20")


key_text = st.text(st.characters(exclude_categories=("Cs",)), max_size=12)


@SETTINGS
@given(box=key_text, recipe=key_text, digests=st.dictionaries(key_text, key_text, max_size=4), cells=tables())
def test_render_round_trips_any_key_strings(box, recipe, digests, cells):
    key = TableKey(1, box, recipe, digests)
    text = CostTable.render(key, cells)
    back = CostTable.parse(text)
    assert back.key == key
    assert back.cells == sorted(cells)
    assert all(same(x[2:], y[2:]) for x, y in zip(back.cells, sorted(cells)))


def test_render_escapes_what_toml_requires():
    key = TableKey(1, 'q"\\\n\t\x00\x1b\x7f\u0301é😀', "r", {"a.b": "x", "": "y", "é m": "z", "ok-mode_1": "w"})
    text = CostTable.render(key, grid([1], 0))
    assert '\\"' in text and "\\\\" in text and "\\n" in text and "\\u0000" in text and "\\u007F" in text
    assert '"a.b" = "x"' in text and '"" = "y"' in text and "ok-mode_1 = " in text
    assert CostTable.parse(text).key == key


def test_render_refuses_a_grid_that_would_be_refused():
    with pytest.raises(TableError):
        CostTable.render(KEY, [])
    with pytest.raises(TableError):
        CostTable.render(TableKey(2, "a", "b", {}), grid([1], 0))
    with pytest.raises(TableError, match="surrogate"):
        CostTable.render(TableKey(1, "\ud800", "b", {}), grid([1], 0))


def test_render_sorts_by_n_then_k():
    text = CostTable.render(KEY, list(reversed(grid([2, 1], 1))))
    order = [(int(a.split("n = ")[1].split("\n")[0]), int(a.split("k = ")[1].split("\n")[0]))
             for a in text.split("[[cells]]")[1:]]
    assert order == [(1, 0), (1, 1), (2, 0), (2, 1)]


# ---------------------------------------------------------------- keys (docs/tables.md#key)
def test_check_lists_every_difference_in_order():
    table = TableKey(1, "h200", "r1", {"verify": "a", "draft": "b", "batch": "c"})
    serve = TableKey(2, "gb10", "r2", {"verify": "a", "draft": "B", "extra": "e"})
    got = table.check(serve)
    assert [m.kind for m in got] == ["schema", "box_class", "recipe", "plan_digest", "plan_digest", "plan_digest"]
    assert got[0] == KeyMismatch("schema", 1, 2)
    assert got[1] == KeyMismatch("box_class", "h200", "gb10")
    assert got[2] == KeyMismatch("recipe", "r1", "r2")
    assert got[3:] == [KeyMismatch("plan_digest", "c", None, "batch"), KeyMismatch("plan_digest", "b", "B", "draft"),
                       KeyMismatch("plan_digest", None, "e", "extra")]
    assert all(m.mode is None for m in got[:3])
    assert "batch" in str(got[3]) and "h200" in str(got[1])
    assert table.check(table) == [] and table.check(TableKey(1, "h200", "r1", dict(table.plan_digests))) == []


@SETTINGS
@given(a=st.dictionaries(st.sampled_from(["verify", "draft", "Z", "é", "a b"]), st.sampled_from(["x", "y"])),
       b=st.dictionaries(st.sampled_from(["verify", "draft", "Z", "é", "a b"]), st.sampled_from(["x", "y"])))
def test_check_digest_modes_sorted_by_code_point(a, b):
    got = TableKey(1, "h", "r", a).check(TableKey(1, "h", "r", b))
    modes = sorted(set(a) | set(b))
    assert [m.mode for m in got] == [m for m in modes if a.get(m) != b.get(m)]
    assert all((m.table, m.serve) == (a.get(m.mode), b.get(m.mode)) for m in got)
    assert (TableKey(1, "h", "r", a) == TableKey(1, "h", "r", b)) == (not got)


def test_table_key_is_a_frozen_value():
    k1 = TableKey(1, "h", "r", {"b": "2", "a": "1"})
    k2 = TableKey(1, "h", "r", {"a": "1", "b": "2"})
    assert k1 == k2 and hash(k1) == hash(k2) and list(k1.plan_digests) == ["a", "b"]
    with pytest.raises(AttributeError):
        k1.recipe = "x"
    with pytest.raises(TypeError):
        k1.plan_digests["c"] = "3"
    assert k1 != TableKey(1, "h", "r", {"a": "1"}) and k1 != TableKey(2, "h", "r", dict(k1.plan_digests))


def test_real_measured_grid_round_trips(shared_data):
    if sys.version_info >= (3, 11):
        import tomllib
    else:
        import tomli as tomllib
    doc = tomllib.loads((shared_data / "metrale" / "qwen38_27b_mtp_gb10.toml").read_text())
    for run in doc["run"]:
        cells = [Cell(int(c[0]), int(c[1]), *map(float, c[2:])) for c in run["cells"]]
        t = CostTable.from_cells(KEY, cells)
        assert t.widths.tolist() == [1, 2, 4, 8] and t.max_k == 3
        for n in range(0, 11):
            for k in range(5):
                want = ref.ref_cell(cells, n, k)
                got = t.cell(n, k)
                assert (got is None) if want is None else same(got[2:], want)
        assert CostTable.parse(t.to_text()) == t


def test_the_constructor_checks_the_arrays_the_kernels_index_unchecked():
    """``CostTable(key, widths, costs)`` refuses arrays that disagree in shape (a lookup past the
    costs read memory beyond the array: ``verify_ms = 1.7e-313``), an empty grid (a planner on it
    answered 3), widths out of order, values the cell rules refuse, and a key that is not one."""
    import numpy as np

    from specsim.demo_inputs import demo_table

    t = demo_table()
    cases = {
        "a row of costs for 9 widths": ((t.key, t.widths, t.costs[:1]), "costs must be a"),
        "no widths": ((t.key, t.widths[:0], t.costs[:0]), "non-empty 1-D array"),
        "descending widths": ((t.key, t.widths[::-1], t.costs), "ascend strictly"),
        "fractional widths": ((t.key, t.widths + 0.5, t.costs), "whole numbers"),
        "negative costs": ((t.key, t.widths, -t.costs), r"costs\[0, 0\] \(n=1, k=0\)"),
        "NaN": ((t.key, t.widths, np.where(t.costs == t.costs[3, 2, 1], np.nan, t.costs)), r"costs\[3, 2\]"),
        "drafting at k = 0": ((t.key, t.widths, t.costs + 1.0), "exactly 0 at k = 0"),
        "no key": ((None, t.widths, t.costs), "key must be a TableKey"),
        "a ragged context axis": ((t.key, t.widths, t.costs, None, None, "x", [512, 256],
                                   np.stack([t.costs, t.costs]), 512), "contexts must ascend"),
        "a context grid of another shape": ((t.key, t.widths, t.costs, None, None, "x", [512],
                                             t.costs[np.newaxis, :2], 512), "context_costs must be"),
    }
    for name, (args, match) in cases.items():
        with pytest.raises(TableError, match=match):
            CostTable(*args)
    same = CostTable(t.key, t.widths, t.costs)
    assert np.array_equal(same.costs, t.costs) and same.cell(16, 3) == t.cell(16, 3)


def test_the_constructor_checks_the_arrays_as_it_stores_them():
    """The values are checked after the cast to int64 and float64: a longdouble verify_ms of
    1e-4000 passes ``> 0`` but is 0.0 in float64, and 1e400 is infinite there (refused, without a
    warning from the cast); float16 costs are compared with the limits without overflowing them.
    Widths that are whole floats are stored as int64."""
    import warnings

    import numpy as np

    from specsim.demo_inputs import demo_table

    t = demo_table()
    for value, match in (("1e-4000", r"costs\[0, 0\] \(n=1, k=0\): verify_ms=0\.0"),
                         ("1e400", r"costs\[0, 0\] \(n=1, k=0\): verify_ms=inf")):
        costs = t.costs.astype(np.longdouble)
        costs[0, 0, 0] = np.longdouble(value)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            with pytest.raises(TableError, match=match):
                CostTable(t.key, t.widths, costs)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        half = CostTable(t.key, t.widths, t.costs.astype(np.float16))
        whole = CostTable(t.key, t.widths.astype(np.float64), t.costs)
    assert half.costs.dtype == np.float64 and np.array_equal(half.costs, t.costs.astype(np.float16))
    assert whole.widths.dtype == np.int64 and np.array_equal(whole.widths, t.widths)
    with pytest.raises(TableError, match="widths must be whole numbers"):
        CostTable(t.key, np.where(t.widths == 2, 2.0000001, t.widths), t.costs)


def test_the_constructor_refuses_a_reference_context_that_is_not_the_plain_grid():
    """With a context axis, ``costs`` is the grid at ``reference_context``: a mismatch (which
    ``to_text`` refused, and which priced the reference context two ways) and a reference that is
    a boolean or not one of the contexts are refused."""
    import numpy as np

    from specsim.demo_inputs import demo_table

    t = demo_table()
    grid = np.stack([t.costs, t.costs * 2])
    with pytest.raises(TableError, match=r"costs\[0, 0\] \(n=1, k=0\) is .* but context_costs\[1\] \(the "
                                         r"reference context 2\)"):
        CostTable(t.key, t.widths, t.costs, None, None, "x", [1, 2], grid, 2)
    for reference in (True, 1.0, 3, "1", None):
        with pytest.raises(TableError, match=f"reference_context {reference!r} must be one of the contexts"):
            CostTable(t.key, t.widths, t.costs, None, None, "x", [1, 2], grid, reference)
    with pytest.raises(TableError, match="come with contexts"):
        CostTable(t.key, t.widths, t.costs, None, None, "x", None, grid, 1)
    both = CostTable(t.key, t.widths, t.costs * 2, None, None, "x", [1, 2], grid, np.int32(2))
    assert both.reference_context == 2 and CostTable.parse(both.to_text()) == both
