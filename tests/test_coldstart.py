"""The first-use notice: said before compiling, once, and only when the kernels are not on disk."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from specsim import _coldstart
from specsim.costmodel.defaults import demo_table

ROOT = Path(__file__).resolve().parents[1]


def test_every_named_kernel_exists_where_the_notice_looks_for_it():
    for kernels, seconds in _coldstart.KERNELS.values():
        assert seconds > 0
        for module, name in kernels:
            assert _coldstart._first_line(_coldstart.PACKAGE / module, name) is not None, (module, name)


@pytest.mark.slow
def test_the_notice_comes_first_on_an_empty_cache_and_not_again(tmp_path):
    (tmp_path / "t.toml").write_text(demo_table().to_text())
    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path / "cache"),
               PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    argv = [sys.executable, "-m", "specsim", "table", "query", str(tmp_path / "t.toml"), "8", "2"]
    cold = subprocess.run(argv, capture_output=True, text=True, env=env)
    assert cold.returncode == 0, cold.stderr
    assert cold.stderr.startswith("specsim: compiling kernels on first use, once per install: ~")
    assert cold.stderr.count("compiling kernels") == 1
    warm = subprocess.run(argv, capture_output=True, text=True, env=env)
    assert warm.returncode == 0 and "compiling" not in warm.stderr and warm.stdout == cold.stdout
    # Help and unknown commands never announce anything.
    env["NUMBA_CACHE_DIR"] = str(tmp_path / "empty")
    assert _coldstart.compile_estimate(["table", "query", "--help"]) is None
    assert _coldstart.compile_estimate(["nonsense"]) is None
    assert _coldstart.compile_estimate([]) is None


def test_the_check_follows_numba_cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("NUMBA_CACHE_DIR", str(tmp_path))
    assert not _coldstart.is_cached("table/_kernels.py", "cell_into_nb")
    assert _coldstart.compile_estimate(["demo"]) == _coldstart.KERNELS["demo"][1]
