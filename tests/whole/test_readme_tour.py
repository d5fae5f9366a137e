"""The README's tour runs as written.

Every ```sh block after the first (which installs) is run, command by command, in one shell
from a folder holding a copy of ``examples/``, as a user would from the root of a fresh clone:
``specsim`` is this checkout's ``python -m specsim``. Then the ```python blocks run in the same
folder. ```bash blocks are maintenance commands (benchmarks), not part of the tour.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys

import numpy as np
import pytest

from tests.fixtures import ROOT

README = ROOT / "README.md"


def blocks(lang: str) -> list:
    """The bodies of the README's fenced blocks of one language, in order."""
    text = README.read_text(encoding="utf-8")
    return re.findall(rf"^```{lang}\n(.*?)^```$", text, flags=re.M | re.S)


def commands(block: str) -> list:
    """Shell commands of a block: continuation lines joined, comments and blank lines dropped."""
    out, current = [], ""
    for line in block.splitlines():
        if not current and (not line.strip() or line.lstrip().startswith("#")):
            continue
        if line.rstrip().endswith("\\"):
            current += line.rstrip()[:-1] + " "
            continue
        out.append(current + line)
        current = ""
    assert not current, f"a command ends with a line continuation: {current!r}"
    return out


def tour_commands() -> list:
    return [c for block in blocks("sh")[1:] for c in commands(block)]


def test_the_tour_is_found():
    cmds = tour_commands()
    assert len(blocks("sh")) >= 3
    assert any(c.startswith("specsim table model") for c in cmds)
    assert any(c.startswith("SHA=$(sha256sum examples/drafter.safetensors") for c in cmds)
    assert any(c.startswith("specsim simulate") for c in cmds)
    assert any(c.startswith("specsim sweep examples/grid.toml") for c in cmds)
    for command in ("specsim fleet", "specsim capacity", "specsim tune", "specsim schedule export",
                    "specsim calib import", "specsim calib drift"):
        assert any(c.startswith(command) for c in cmds), command
    assert len(blocks("python")) == 1


def test_commands_join_continuations_and_skip_comments():
    assert commands("# a note\nspecsim a \\\n    --b c\n\nx=1  # set\n") == ["specsim a      --b c", "x=1  # set"]


def _env():
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    env["SPECSIM_PYTHON"] = sys.executable
    return env


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("bash") is None or shutil.which("sha256sum") is None,
                    reason="the tour is a bash session using sha256sum")
def test_the_tour_runs_as_written(tmp_path):
    shutil.copytree(ROOT / "examples", tmp_path / "examples", ignore=shutil.ignore_patterns("__pycache__"))
    shipped = {p.relative_to(tmp_path) for p in (tmp_path / "examples").rglob("*")}
    cmds = tour_commands()
    lines = ['specsim() { "$SPECSIM_PYTHON" -m specsim "$@"; }', "set -uo pipefail"]
    for i, cmd in enumerate(cmds):
        lines += [cmd, f'rc=$?; if [ "$rc" -ne 0 ]; then echo "@@tour command {i} exited $rc" >&2; exit 1; fi']
    script = tmp_path / "tour.sh"
    script.write_text("\n".join(lines) + "\n")
    run = subprocess.run(["bash", str(script)], cwd=tmp_path, env=_env(), capture_output=True, text=True,
                         stdin=subprocess.DEVNULL, timeout=1800)
    failed = re.search(r"@@tour command (\d+) exited (\d+)", run.stderr)
    where = f"`{cmds[int(failed.group(1))]}` exited {failed.group(2)}" if failed else f"the shell exited {run.returncode}"
    assert run.returncode == 0, f"{where}\n--- stdout\n{run.stdout[-4000:]}\n--- stderr\n{run.stderr[-4000:]}"
    assert "Traceback" not in run.stderr

    # The outputs went to the current folder and the samples were left as they were.
    assert {p.relative_to(tmp_path) for p in (tmp_path / "examples").rglob("*")} == shipped
    for name in ("table.toml", "cal.toml", "counts.toml", "bench.toml", "gb10.toml", "sim.json", "results.csv",
                 "replay.json"):
        assert (tmp_path / name).is_file(), name

    # The shipped table and calibration are what the tour's commands make from the samples.
    from specsim import AcceptanceCalibration, CostTable

    # The modelled costs to 1e-12: NumPy's float sums take other SIMD paths on other CPUs (the
    # last bit of a cost differs between an AVX-512 machine and one without).
    made, shipped = CostTable.load(tmp_path / "table.toml"), CostTable.load(ROOT / "examples" / "table.toml")
    assert (made.key, made.widths.tolist(), made.reference_context) == (shipped.key, shipped.widths.tolist(),
                                                                         shipped.reference_context)
    np.testing.assert_allclose(made.costs, shipped.costs, rtol=1e-12, atol=0)
    assert made.contexts.size == shipped.contexts.size == 0
    assert AcceptanceCalibration.load(tmp_path / "cal.toml") == AcceptanceCalibration.load(ROOT / "examples" / "cal.toml")

    for i, code in enumerate(blocks("python")):
        py = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=_env(), capture_output=True, text=True,
                            stdin=subprocess.DEVNULL, timeout=600)
        assert py.returncode == 0, f"python block {i} failed:\n{py.stderr[-4000:]}"
        assert "propose depth" in py.stdout
