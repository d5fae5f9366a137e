"""The core commands: ``specsim table check/show/query`` and ``specsim calib show``."""

import json
import os
import subprocess
import sys

import pytest

from specsim.cli import main
from tests.fixtures import CALIBRATION_TOML, ROOT


TABLE = """[key]
schema = 1
box_class = "h200"
recipe = "llama-3.1-8b/eagle-1l-bf16"

[key.plan_digests]
draft = "sha256:bb"
verify = "sha256:aa"

[meta]
energy_source = "nvml"
""" + "".join(
    f"\n[[cells]]\nn = {n}\nk = {k}\nverify_ms = {10.0 + n + k}\nverify_j = {2.0 + k}\n"
    f"draft_ms = {0.0 if k == 0 else 1.5 * k}\ndraft_j = {0.0 if k == 0 else 0.25 * k}\n"
    for n in (1, 4) for k in range(3)
)

CALIB = CALIBRATION_TOML


@pytest.fixture
def files(tmp_path):
    (tmp_path / "t.toml").write_text(TABLE)
    (tmp_path / "c.toml").write_text(CALIB)
    (tmp_path / "bad.toml").write_text(TABLE.replace("verify_ms = 11.0", "verify_ms = -1.0"))
    (tmp_path / "other.toml").write_text(TABLE.replace('"h200"', '"gb10"').replace("sha256:aa", "sha256:zz"))
    return tmp_path


def run(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_table_check_valid(files, capsys):
    code, out, err = run(capsys, "table", "check", files / "t.toml")
    assert code == 0 and "valid; widths 1, 4; depths 0..2" in out and not err


def test_table_check_invalid_lists_problems(files, capsys):
    code, out, err = run(capsys, "table", "check", files / "bad.toml")
    assert code == 2 and not out
    assert err.startswith("specsim: error: ") and "bad.toml" in err and "cells[0]" in err and "verify_ms must be > 0" in err


def test_table_check_against_a_serve_key(files, capsys):
    code, out, _ = run(capsys, "table", "check", files / "t.toml", "--box-class", "h200", "--digest", "verify=sha256:aa",
                       "--digest", "draft=sha256:bb")
    assert code == 0 and "key matches" in out
    code, _, err = run(capsys, "table", "check", files / "t.toml", "--against", files / "other.toml")
    assert code == 2
    assert "box_class: table has 'h200', serve has 'gb10'" in err and "plan digest of mode 'verify'" in err
    assert err.index("box_class") < err.index("plan digest")
    code, _, err = run(capsys, "table", "check", files / "t.toml", "--schema", "2", "--digest", "verify=sha256:aa")
    assert code == 2 and "schema" in err and "'draft'" in err  # draft missing on the serve's side
    code, _, err = run(capsys, "table", "check", files / "t.toml", "--digest", "nodigest")
    assert code == 2 and "MODE=DIGEST" in err


def test_table_show(files, capsys):
    code, out, _ = run(capsys, "table", "show", files / "t.toml")
    assert code == 0 and "box class h200" in out and "energy source: nvml" in out
    # step ms at n=4, k=2: verify 16.0 + draft 3.0
    assert "19.000" in out.splitlines()[-1]
    code, out, _ = run(capsys, "table", "show", files / "t.toml", "--json")
    doc = json.loads(out)
    assert doc["widths"] == [1, 4] and doc["max_k"] == 2 and len(doc["cells"]) == 6
    assert doc["key"]["plan_digests"] == {"draft": "sha256:bb", "verify": "sha256:aa"}
    assert doc["cells"][-1]["step_ms"] == 19.0 and doc["meta"] == {"energy_source": "nvml"}


def test_table_query(files, capsys):
    code, out, _ = run(capsys, "table", "query", files / "t.toml", 2, 1, "--json")
    cell = json.loads(out)
    assert code == 0 and cell["n"] == 2 and cell["verify_ms"] == 12.0 + (15.0 - 12.0) / 3
    code, out, _ = run(capsys, "table", "query", files / "t.toml", 2, 1)
    assert "interpolated" in out
    code, out, _ = run(capsys, "table", "query", files / "t.toml", 9, 0)
    assert code == 0 and "nearest width" in out
    code, out, _ = run(capsys, "table", "query", files / "t.toml", 4, 0)
    assert "measured" in out and "verify_ms 14.0" in out
    code, _, err = run(capsys, "table", "query", files / "t.toml", 1, 3)
    assert code == 2 and "deepest measured depth 2" in err
    with pytest.raises(SystemExit) as refused:  # argparse refuses a negative width
        run(capsys, "table", "query", files / "t.toml", -1, 0)
    assert refused.value.code == 2


def test_calib_show(files, capsys):
    code, out, _ = run(capsys, "calib", "show", files / "c.toml")
    assert code == 0 and "vocab 32000" in out and "(-1, -0.1]" in out and "0.6000" in out
    code, out, _ = run(capsys, "calib", "show", files / "c.toml", "--json")
    doc = json.loads(out)
    assert doc["edges"] == [-1.0, -0.10000000149011612, 0.0] and doc["prior_by_position"] == [0.8, 0.6, 0.5]


@pytest.mark.parametrize("argv", [
    ["table", "check", "missing.toml"],
    ["table", "show", "c.toml"],
    ["table", "query", "bad.toml", "1", "0"],
    ["calib", "show", "t.toml"],
    ["calib", "show", "junk.toml"],
])
def test_bad_input_exits_2_without_traceback(files, argv):
    (files / "junk.toml").write_bytes(b"\xff\xfe[[[")
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    p = subprocess.run([sys.executable, "-m", "specsim", *argv], cwd=files, env=env, capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 2, p.stderr
    assert p.stderr.startswith("specsim: error: ") and "Traceback" not in p.stderr
    assert p.stdout == ""


def test_import_specsim_is_light():
    code = (
        "import sys, specsim\n"
        "heavy = {'numba', 'numpy', 'cupy', 'pynvml', 'matplotlib', 'dask', 'tqdm', 'hypothesis'}\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in heavy))\n"
        "specsim.CostTable, specsim.AcceptanceCalibration\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in heavy - {'numpy'}))\n"
    )
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    p = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    # nothing heavy on import; and even the public classes load without Numba until a kernel runs
    assert p.stdout.splitlines() == ["[]", "[]"]
