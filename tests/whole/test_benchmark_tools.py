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
