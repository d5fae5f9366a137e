"""Outputs are checked before any work and written all-or-nothing: a command that fails leaves
every file it was told to write as it was, and no output may replace one of the inputs."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from specsim._io import Outputs, same_file
from specsim.cli import main
from specsim.errors import OutputError

SENTINEL = "sentinel: must stay as it was\n"

ACCEPTANCE = """step_ms = [1.0, 1.5]
[[trace]]
name = "a"
k_logged = 1
steps = ["0110101101"]
[[run]]
name = "r"
cells = [[1, 0, 1.0, 1.0, 0.0, 0.0], [1, 1, 1.2, 1.1, 0.3, 0.2], [2, 0, 1.5, 1.4, 0.0, 0.0],
         [2, 1, 1.7, 1.6, 0.3, 0.2]]
"""
WINDOWS = "k_logged = 2\nwindows = [[30, 40, 50], [10, 20, 30]]\n"
FIT_KEY = ["--drafter-sha256", "ab" * 32, "--vocab", "100", "--quantization", "bf16", "--context", "true"]


@pytest.fixture(scope="module")
def demo_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("demo")
    assert main(["demo", "--requests", "30", "--no-plot", "--out", str(d / "in")]) == 0
    return d / "in"


@pytest.fixture
def d(tmp_path, demo_dir):
    for name in ("table.toml", "calibration.toml", "trace.csv"):
        (tmp_path / name).write_bytes((demo_dir / name).read_bytes())
    (tmp_path / "acc.toml").write_text(ACCEPTANCE)
    (tmp_path / "win.toml").write_text(WINDOWS)
    (tmp_path / "grid.toml").write_text(
        '[traces]\nt = { path = "trace.csv", limit = 20 }\n[tables]\nx = "table.toml"\n'
        '[calibrations]\nx = "calibration.toml"\n[axes]\npolicy = ["fixed:1"]\n')
    (tmp_path / "afolder").mkdir()
    return tmp_path


def run(argv, d):
    try:
        return main([a.format(d=d) for a in argv])
    except SystemExit as e:  # argparse's own refusals
        return e.code


def snapshot(d):
    return {p.name: p.read_bytes() for p in d.iterdir() if p.is_file()}


SIM = ["simulate", "--trace", "{d}/trace.csv", "--table", "{d}/table.toml",
       "--calibration", "{d}/calibration.toml", "--policy", "fixed:1", "--policy", "propose", "--quiet"]

# Each command with one output aimed at one of its inputs.
ONTO_INPUT = {
    "simulate --json table": SIM + ["--json", "{d}/table.toml"],
    "simulate --requests-csv trace": SIM + ["--requests-csv", "{d}/trace.csv"],
    "simulate --plot calibration": SIM + ["--plot", "{d}/calibration.toml"],
    "calib fit -o windows": ["calib", "fit", "--windows", "{d}/win.toml", *FIT_KEY, "-o", "{d}/win.toml"],
    "calib fit --counts-out windows": ["calib", "fit", "--windows", "{d}/win.toml", *FIT_KEY, "-o", "{d}/c.toml",
                                       "--counts-out", "{d}/win.toml"],
    "calib fit two outputs one file": ["calib", "fit", "--windows", "{d}/win.toml", *FIT_KEY, "-o", "{d}/c.toml",
                                       "--counts-out", "{d}/c.toml"],
    "table import -o file": ["table", "import", "{d}/acc.toml", "--run", "r", "--box-class", "b", "--recipe", "r",
                             "-o", "{d}/acc.toml"],
    "table merge -o run": ["table", "merge", "{d}/table.toml", "{d}/table.toml", "-o", "{d}/table.toml"],
    "table model -o spec": ["table", "model", "--gpu", "h200", "--model", "llama-3.1-8b", "--drafter", "eagle-1l",
                            "--max-k", "2", "--widths", "1,2", "--gpu-spec", "{d}/table.toml", "-o",
                            "{d}/table.toml"],
    "replay --json file": ["replay", "{d}/acc.toml", "--trace", "a", "--policy", "fixed:1", "--width", "1",
                           "--budget", "10", "--json", "{d}/acc.toml"],
    "bench -o recipe": ["bench", "--recipe", "{d}/table.toml", "--widths", "1", "--max-k", "0",
                        "--assume-power-w", "10", "--quiet", "-o", "{d}/table.toml"],
    "sweep -o grid": ["sweep", "{d}/grid.toml", "--serial", "--quiet", "-o", "{d}/grid.toml"],
    "sweep -o a table the grid names": ["sweep", "{d}/grid.toml", "--serial", "--quiet", "-o", "{d}/trace.csv"],
    "sweep --plot a table the grid names": ["sweep", "{d}/grid.toml", "--serial", "--quiet", "-o", "{d}/r.csv",
                                            "--plot", "{d}/table.toml"],
}


@pytest.mark.parametrize("argv", ONTO_INPUT.values(), ids=ONTO_INPUT.keys())
def test_an_output_onto_an_input_is_refused_before_any_work(d, argv, capsys):
    before = snapshot(d)
    assert run(argv, d) == 2
    err = capsys.readouterr().err
    assert "specsim: error:" in err and "Traceback" not in err
    assert "is also the" in err
    assert snapshot(d) == before


def test_inputs_reached_through_a_symlink_or_a_hard_link_are_refused(d, capsys):
    os.symlink(d / "table.toml", d / "link.json")
    os.link(d / "calibration.toml", d / "hard.csv")
    before = snapshot(d)
    assert run(SIM + ["--json", "{d}/link.json"], d) == 2
    assert "is also the input --table" in capsys.readouterr().err
    assert run(SIM + ["--requests-csv", "{d}/hard.csv"], d) == 2
    assert "is also the input --calibration" in capsys.readouterr().err
    assert snapshot(d) == before


# Each command with a good first output and a bad later one: the good one stays as it was.
BAD_LATER = {
    "simulate --plot folder": (SIM + ["--json", "{d}/out.json", "--requests-csv", "{d}/out.csv",
                                      "--plot", "{d}/afolder"], ["out.json", "out.csv"]),
    "simulate csv in a file": (SIM + ["--json", "{d}/out.json", "--requests-csv", "{d}/table.toml/x.csv"],
                               ["out.json"]),
    "calib fit --plot folder": (["calib", "fit", "--windows", "{d}/win.toml", *FIT_KEY, "-o", "{d}/out.toml",
                                 "--counts-out", "{d}/out.csv", "--plot", "{d}/afolder"], ["out.toml", "out.csv"]),
    "sweep --plot folder": (["sweep", "{d}/grid.toml", "--serial", "--quiet", "-o", "{d}/out.csv",
                             "--plot", "{d}/afolder"], ["out.csv"]),
}


@pytest.mark.parametrize("argv,kept", BAD_LATER.values(), ids=BAD_LATER.keys())
def test_a_bad_later_output_leaves_earlier_outputs_untouched(d, argv, kept, capsys):
    for name in kept:
        (d / name).write_text(SENTINEL)
    before = snapshot(d)
    assert run(argv, d) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and ("is a folder" in err or "not a folder" in err)
    assert snapshot(d) == before


def test_a_failure_after_the_work_leaves_every_output_untouched(d, capsys, monkeypatch):
    # The last output fails once the simulation has run and the first is staged: nothing is written.
    import specsim.cli.simulate
    from specsim.errors import SimulationError

    def boom(results):
        raise SimulationError("the per-request table cannot be made")

    monkeypatch.setattr(specsim.cli.simulate, "requests_csv", boom)
    for name in ("out.json", "out.csv"):
        (d / name).write_text(SENTINEL)
    before = snapshot(d)
    argv = SIM + ["--json", "{d}/out.json", "--requests-csv", "{d}/out.csv"]
    assert run(argv, d) == 2
    err = capsys.readouterr().err
    assert "per-request table" in err and "Traceback" not in err
    assert snapshot(d) == before
    assert not [p for p in d.iterdir() if p.name.startswith(".")]  # no temporary file left


def test_the_demo_folder_is_checked_before_it_runs(tmp_path, capsys):
    out = tmp_path / "demo"
    out.mkdir()
    (out / "table.toml").write_text(SENTINEL)
    (out / "results.json").mkdir()
    assert main(["demo", "--requests", "20", "--no-plot", "--out", str(out)]) == 2
    assert "results.json" in capsys.readouterr().err
    assert (out / "table.toml").read_text() == SENTINEL


def test_outputs_are_written_together_when_the_command_succeeds(d):
    assert run(SIM + ["--json", "{d}/out.json", "--requests-csv", "{d}/out.csv"], d) == 0
    assert (d / "out.json").read_text().startswith("{") and (d / "out.csv").read_text().count("\n") > 30
    assert not [p for p in d.iterdir() if p.name.startswith(".")]


def test_outputs_api(tmp_path):
    inp = tmp_path / "in.txt"
    inp.write_text("input")
    a, b = tmp_path / "a.txt", tmp_path / "sub" / "b.txt"
    a.write_text(SENTINEL)
    with pytest.raises(OutputError, match="is also the input"):
        Outputs({"IN": inp}).declare(inp, "-o")
    with pytest.raises(OutputError, match="is a folder"):
        Outputs().declare(tmp_path, "-o")
    with pytest.raises(OutputError, match="not a folder"):
        Outputs().declare(inp / "x", "-o")
    with pytest.raises(OutputError, match="its own name"):
        out = Outputs()
        out.declare(a, "-o")
        out.declare(tmp_path / "." / "a.txt", "--other")
    out = Outputs()
    out.declare(a, "-o")
    with pytest.raises(OutputError, match="is also the input"):
        out.add_input(a, "IN")
    # An exception inside the block discards everything staged.
    with pytest.raises(ZeroDivisionError):
        with Outputs() as out:
            out.declare(a, "-o")
            out.declare(b, "--b")
            out.text(a, "new")
            out.text(b, "new")
            1 / 0
    assert a.read_text() == SENTINEL and not b.exists()
    with Outputs() as out:
        out.declare(a, "-o")
        out.declare(b, "--b")
        out.text(a, "new a")
        out.text(b, "new b")
        assert a.read_text() == SENTINEL
    assert a.read_text() == "new a" and b.read_text() == "new b"
    assert same_file(a, tmp_path / "sub" / ".." / "a.txt") and not same_file(a, b)


def test_an_output_name_ending_in_a_slash_names_a_folder(tmp_path, capsys):
    # "-o out/" used to write a file called "out".
    with pytest.raises(OutputError, match="is a folder"):
        Outputs().declare(str(tmp_path / "out") + "/", "-o")
    code = main(["table", "model", "--gpu", "h200", "--model", "llama-3.1-8b", "--drafter", "eagle-1l", "--max-k", "2",
                 "-o", str(tmp_path / "out") + "/"])
    assert code == 2 and "is a folder" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_a_long_output_name_is_written_and_one_too_long_is_refused_before_the_work(tmp_path, capsys):
    # The temporary file beside a 250-byte name used to exceed 255 bytes, so the name could never be written.
    model = ["table", "model", "--gpu", "h200", "--model", "llama-3.1-8b", "--drafter", "eagle-1l", "--max-k", "2"]
    longest = tmp_path / ("a" * 250 + ".toml")
    assert main(model + ["-o", str(longest)]) == 0 and longest.exists()
    capsys.readouterr()
    assert main(model + ["-o", str(tmp_path / ("b" * 260 + ".toml"))]) == 2
    assert "at most 255" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == [longest.name]


def test_a_write_that_fails_names_the_output_not_our_temporary_file(tmp_path, monkeypatch):
    """An output that cannot be written (``-o /proc/x.toml``) once named the temporary file
    (``/proc/.x.toml.1n76og30.tmp``), which the user never gave."""
    import errno
    import os
    import tempfile

    from specsim._io import Outputs, atomic_write_text

    real_mkstemp, real_replace = tempfile.mkstemp, os.replace

    def refused(prefix="", suffix="", dir=None):
        raise FileNotFoundError(errno.ENOENT, "No such file or directory", os.path.join(dir, f"{prefix}abc{suffix}"))

    target = tmp_path / "x.toml"
    monkeypatch.setattr(tempfile, "mkstemp", refused)
    with pytest.raises(FileNotFoundError) as e:
        atomic_write_text(target, "x")
    assert e.value.filename == str(target)
    monkeypatch.setattr(tempfile, "mkstemp", real_mkstemp)

    def full(src, dst):
        raise OSError(errno.ENOSPC, "No space left on device", src, dst)

    monkeypatch.setattr(os, "replace", full)
    with pytest.raises(OSError) as e, Outputs() as out:
        out.text(out.declare(target, "-o"), "x")
    assert e.value.filename == str(target) and not target.exists()
    monkeypatch.setattr(os, "replace", real_replace)
    assert [p.name for p in tmp_path.iterdir()] == []  # no temporary file left


@pytest.mark.skipif(not Path("/proc/self").is_dir(), reason="needs Linux's /proc")
def test_an_output_in_a_folder_nothing_can_be_made_in_is_refused_before_the_work():
    """Run as root, /proc passes a permission check; the output was refused only at the end,
    after the work. A file is now made and removed there first."""
    from specsim._io import Outputs
    from specsim.errors import OutputError

    with pytest.raises(OutputError, match="-o /proc/x.toml: cannot write in the folder /proc"):
        with Outputs() as out:
            out.declare("/proc/x.toml", "-o")
