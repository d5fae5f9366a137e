"""Bad input anywhere on the command line: a message on stderr and exit code 2, never a traceback."""

from __future__ import annotations

import os
import stat

import pytest

from specsim.cli import main
from specsim.costmodel.defaults import demo_calibration, demo_table


@pytest.fixture
def files(tmp_path):
    (tmp_path / "t.toml").write_text(demo_table().to_text())
    (tmp_path / "c.toml").write_text(demo_calibration().render())
    (tmp_path / "adir").mkdir()
    (tmp_path / "plain.txt").write_text("only one line")
    return tmp_path


BAD = [
    # outputs that cannot be written
    ["table", "model", "--gpu", "h200", "--model", "llama-3.1-8b", "--drafter", "eagle-1l", "--max-k", "2",
     "--widths", "1,2", "-o", "{d}/adir"],
    ["table", "model", "--gpu", "h200", "--model", "llama-3.1-8b", "--drafter", "eagle-1l", "--max-k", "2",
     "--widths", "1,2", "-o", "{d}/plain.txt/x.toml"],
    ["demo", "--requests", "20", "--no-plot", "--out", "{d}/plain.txt"],
    ["simulate", "--synthetic", "requests=20,rate=5", "--table", "{d}/t.toml", "--calibration", "{d}/c.toml",
     "--policy", "fixed:1", "--json", "{d}/adir"],
    # numbers out of range
    ["plan", "{d}/t.toml", "{d}/c.toml", "--n", "99999999999999999999"],
    ["plan", "{d}/t.toml", "{d}/c.toml", "--n", "-3"],
    ["simulate", "--synthetic", "requests=20,rate=5", "--table", "{d}/t.toml", "--calibration", "{d}/c.toml",
     "--policy", "fixed:1", "--max-batch", "99999999999999999999"],
    ["simulate", "--synthetic", "requests=20,rate=5", "--table", "{d}/t.toml", "--calibration", "{d}/c.toml",
     "--policy", "fixed:1", "--max-batch", "5000000"],
    ["simulate", "--synthetic", "requests=20,rate=5", "--table", "{d}/t.toml", "--calibration", "{d}/c.toml",
     "--policy", "fixed:1", "--prefill-ms-per-token", "1e308", "--json", "{d}/x.json"],
    ["trace", "show", "--synthetic", "requests=99999999999999999999,rate=1"],
    ["demo", "--requests", "99999999999999999999"],
    # options that do not go together
    ["plan", "{d}/t.toml", "{d}/c.toml", "--n", "4", "--row-budget", "3"],
    # inputs that are not what they should be
    ["table", "show", "{d}/adir"],
    ["table", "show", "{d}/plain.txt"],
    ["calib", "show", "{d}/t.toml"],
    ["sweep", "{d}/plain.txt", "-o", "{d}/r.csv"],
    # keys that would name nothing
    ["calib", "fit", "--rates", "0.8", "--drafter-sha256", " ", "--vocab", "10", "--quantization", "bf16",
     "--context", "true", "-o", "{d}/c2.toml"],
    ["calib", "fit", "--rates", "0.8", "--drafter-sha256", "abc", "--vocab", "0", "--quantization", "bf16",
     "--context", "true", "-o", "{d}/c2.toml"],
]


@pytest.mark.parametrize("argv", BAD, ids=lambda a: " ".join(a[:3]))
def test_bad_input_exits_2_with_a_message(files, argv, capsys):
    argv = [a.format(d=files) for a in argv]
    try:
        code = main(argv)
    except SystemExit as e:  # argparse's own refusals
        code = e.code
    err = capsys.readouterr().err
    assert code == 2
    assert "error" in err and "Traceback" not in err


def test_written_files_get_the_usual_mode(files):
    assert main(["table", "model", "--gpu", "h200", "--model", "llama-3.1-8b", "--drafter", "eagle-1l",
                 "--max-k", "2", "--widths", "1,2", "-o", str(files / "m.toml")]) == 0
    umask = os.umask(0)
    os.umask(umask)
    assert stat.S_IMODE((files / "m.toml").stat().st_mode) == 0o666 & ~umask
