"""The ratio comparison that guards the benchmarks against regressions."""

import json

from benchmarks.compare_ratios import compare, main


def _run(path, speedups):
    path.write_text(json.dumps({"benchmarks": [
        {"fullname": name, "extra_info": {"speedup_vs_reference": s, "reference_us": 5.0}}
        for name, s in speedups.items()
    ]}))
    return path


def test_a_fallen_ratio_fails_and_a_steady_one_passes(tmp_path):
    (tmp_path / "m").mkdir()
    old = _run(tmp_path / "m" / "0001_a.json", {"x": 100.0, "y": 40.0})
    steady = _run(tmp_path / "m" / "0002_b.json", {"x": 90.0, "y": 41.0})
    rows, failed = compare(old, steady, 0.25)
    assert not failed and len(rows) == 2
    assert main(["--root", str(tmp_path)]) == 0
    _run(tmp_path / "m" / "0003_c.json", {"x": 60.0, "y": 41.0})
    assert main(["--root", str(tmp_path), "--threshold", "0.25"]) == 1
    assert main(["--root", str(tmp_path), "--threshold", "0.5"]) == 0


def test_needs_two_runs(tmp_path):
    assert main(["--root", str(tmp_path)]) == 2


def test_a_stored_ratio_fails_only_past_its_tolerance():
    from benchmarks.ratios import STORED, TOLERANCE, check

    stored = {"a": 1.0, "b": 10.0}
    rows = check({"a": TOLERANCE * 0.99, "b": TOLERANCE * 10.0 * 1.01, "new": 3.0}, stored)
    assert [(name, failed) for name, _, _, failed in rows] == [("a", False), ("b", True)]
    doc = json.loads(STORED.read_text())  # the stored ratios name the commit they were measured on
    assert len(doc["commit"]) == 40 and doc["ratios"]["length_10x"] > 0


def test_writing_the_ratios_keeps_those_not_measured_with_their_commit():
    from benchmarks.ratios import stored_doc

    first = stored_doc({"a": 1.0, "vs_old:x": 2.0}, None, "c1", "m")
    assert first["ratios"] == {"a": 1.0, "vs_old:x": 2.0} and "kept" not in first
    second = stored_doc({"a": 1.5, "b": 3.0}, first, "c2", "m")
    assert second["commit"] == "c2" and second["ratios"] == {"a": 1.5, "b": 3.0, "vs_old:x": 2.0}
    assert second["kept"] == {"vs_old:x": "c1"}
    third = stored_doc({"a": 1.2, "b": 3.1}, second, "c3", "m")
    assert third["kept"] == {"vs_old:x": "c1"}  # still the commit it was measured on
    assert stored_doc({"a": 1.0, "b": 3.0, "vs_old:x": 2.5}, third, "c4", "m").get("kept") is None
