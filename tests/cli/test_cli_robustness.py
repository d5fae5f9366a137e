"""Bad input anywhere on the command line: a message on stderr and exit code 2, never a traceback."""

from __future__ import annotations

import os
import stat

import pytest

from specsim.cli import main
from specsim.demo_inputs import demo_calibration, demo_table
from tests.fixtures import ROOT


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
    ["simulate", "--synthetic", "requests=20,rate=5", "--table", "{d}/t.toml", "--calibration", "{d}/c.toml",
     "--policy", "fixed:1", "--json", "/dev/null"],
    ["simulate", "--synthetic", "requests=20,rate=5", "--table", "{d}/t.toml", "--calibration", "{d}/c.toml",
     "--policy", "fixed:1", "--json", ""],
    ["simulate", "--synthetic", "requests=20,rate=5", "--table", "{d}/t.toml", "--calibration", "{d}/c.toml",
     "--policy", "fixed:1", "--plot", "{d}/plot.xyz"],
    ["table", "show", "{d}/t\x00.toml"],
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


# -- side files: JSON and CSV read with the TOML readers' guarantees ---------------------------------
BAD_CONTENT = {
    "binary": b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR",
    "utf16": "[[-0.1, -0.2]]".encode("utf-16"),
    "not utf8": b"[[-0.1, \xff]]",
    "deep": b"[" * 100_000 + b"]" * 100_000,
    "int past 2**63": b"[[-0.1], [" + b"9" * 30 + b"]]",
    "int of 5000 digits": b"[[" + b"9" * 5000 + b"]]",
    "float past binary64": b"[[1e400]]",
    "NaN": b"[[NaN]]",
    "wrong type": b'{"a": 1}',
    "wrong inner type": b'[["x", true]]',
    "huge field": b'[["' + b"x" * 5_000_000 + b'"]]',
}


def _run(argv):
    try:
        return main(argv)
    except SystemExit as e:
        return e.code


def _refused(argv, capsys, *needles):
    code = _run([str(a) for a in argv])
    err = capsys.readouterr().err
    assert code == 2, err
    assert "specsim: error:" in err and "Traceback" not in err
    assert len(err) < 4000, f"{len(err)} characters"
    for n in needles:
        assert n in err
    return err


@pytest.mark.parametrize("kind", BAD_CONTENT, ids=str)
def test_plan_side_files_are_refused_naming_the_file(files, kind, capsys):
    side = files / "side.json"
    side.write_bytes(BAD_CONTENT[kind])
    _refused(["plan", files / "t.toml", files / "c.toml", "--confidences", side], capsys, "side.json")
    (files / "conf.json").write_text("[[-0.1, -0.5], [-0.2]]")
    _refused(["plan", files / "t.toml", files / "c.toml", "--confidences", files / "conf.json",
              "--known-drafts", side], capsys, "side.json")


@pytest.mark.parametrize("kind", BAD_CONTENT, ids=str)
def test_counts_json_is_refused_naming_the_file(files, kind, capsys):
    side = files / "counts.json"
    side.write_bytes(BAD_CONTENT[kind])
    _refused(["calib", "fit", "--counts", side, "--drafter-sha256", "ab" * 32, "--vocab", "9", "--quantization", "bf16",
              "--context", "true", "-o", files / "out.toml"], capsys, "counts.json")
    assert not (files / "out.toml").exists()


PARTIAL_HEADER = b'{"specsim_partial": 1, "key": {}, "grid": {}, "settings": {}, "meta": {}}\n'
BAD_PARTIAL = {
    "binary": b"\x00\x01\x02",
    "utf16": PARTIAL_HEADER.decode().encode("utf-16"),
    "header of wrong types": b'{"specsim_partial": 1, "key": [1], "grid": "x", "settings": {}, "meta": {}}\n',
    "cell of wrong types": PARTIAL_HEADER + b'{"cell": {"n": "1", "k": true, "verify_ms": "a", "verify_j": 1,'
                                             b' "draft_ms": 0, "draft_j": 0}, "extras": {}}\n',
    "cell with a huge width": PARTIAL_HEADER + b'{"cell": {"n": 99999999999999999, "k": 0, "verify_ms": 1,'
                                                 b' "verify_j": 1, "draft_ms": 0, "draft_j": 0}, "extras": {}}\n',
    "deep": PARTIAL_HEADER + b"[" * 5000 + b"]" * 5000 + b"\n",
    "huge integer": PARTIAL_HEADER + b'{"cell": ' + b"9" * 40 + b"}\n",
    "extras not numbers": PARTIAL_HEADER + b'{"cell": {"n": 1, "k": 0, "verify_ms": 1, "verify_j": 1, '
                                             b'"draft_ms": 0, "draft_j": 0}, "extras": {"x": [1]}}\n',
}


@pytest.mark.parametrize("kind", BAD_PARTIAL, ids=str)
def test_bench_resume_refuses_a_damaged_partial_file(files, kind, capsys):
    out = files / "b.toml"
    partial = files / "b.toml.partial.jsonl"
    partial.write_bytes(BAD_PARTIAL[kind])
    _refused(["bench", "--recipe", "tiny", "--widths", "1", "--max-k", "0", "--assume-power-w", "10",
              "--min-window-s", "0.003", "--repeats", "2", "--quiet", "--resume", "-o", out], capsys,
             "b.toml.partial.jsonl")
    assert partial.read_bytes() == BAD_PARTIAL[kind] and not out.exists()


def test_bench_resume_refuses_cells_outside_the_widths(files, capsys, monkeypatch):
    from specsim.measure import harness

    out = files / "b.toml"
    argv = ["bench", "--recipe", "tiny", "--widths", "1,2", "--max-k", "0", "--assume-power-w", "10",
            "--min-window-s", "0.003", "--repeats", "2", "--warmup", "0", "--quiet", "-o", str(out)]
    real = harness.measure_cell
    calls = []

    def second_interrupts(*a, **k):
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real(*a, **k)

    monkeypatch.setattr(harness, "measure_cell", second_interrupts)
    assert _run(argv) == 130
    partial = files / "b.toml.partial.jsonl"
    lines = partial.read_text().splitlines()
    assert len(lines) == 2  # the header and the one finished cell
    # A cell at width 8, which this sweep does not measure, added by hand: refused, not copied.
    extra = lines[1].replace('"n": 1', '"n": 8')
    partial.write_text("\n".join(lines + [extra]) + "\n")
    monkeypatch.setattr(harness, "measure_cell", real)
    _refused(argv + ["--resume"], capsys, "outside widths [1, 2]", "(n=8, k=0)")
    assert not out.exists()


BAD_RESULTS = {
    "binary": b"\x00\x01point_id\n",
    "utf16": "point_id,policy\nabc,fixed:1\n".encode("utf-16"),
    "not utf8": b"point_id,policy\n\xff\xfe\xfa,x\n",
    "huge field": b"point_id,policy\n" + b"a" * 300_000 + b",x\n",
    "ragged row": b"point_id,policy\nabc\n",
    "header twice": b"point_id,point_id\na,b\n",
    "not results": b"a,b\n1,2\n",
}


@pytest.mark.parametrize("kind", BAD_RESULTS, ids=str)
def test_sweep_refuses_a_damaged_results_file(grid_files, kind, capsys):
    out = grid_files / "r.csv"
    out.write_bytes(BAD_RESULTS[kind])
    _refused(["sweep", grid_files / "grid.toml", "--serial", "--quiet", "-o", out], capsys, "r.csv")
    assert out.read_bytes() == BAD_RESULTS[kind]


def test_sweep_plot_refuses_results_that_are_not_numbers(grid_files, capsys):
    out = grid_files / "r.csv"
    assert _run(["sweep", str(grid_files / "grid.toml"), "--serial", "--quiet", "-o", str(out)]) == 0
    capsys.readouterr()
    text = out.read_text().splitlines()
    header = text[0].split(",")
    row = next(__import__("csv").reader([text[1]]))
    row[header.index("tokens_per_s")] = "fast"
    row.append("extra")
    header.append("my_note")
    import csv
    import io

    buf = io.StringIO()
    csv.writer(buf, lineterminator="\n").writerows([header, row])
    out.write_text(buf.getvalue())
    _refused(["sweep", grid_files / "grid.toml", "--serial", "--quiet", "-o", out, "--plot", grid_files / "p.png"],
             capsys, "tokens_per_s = 'fast' must be a number")
    assert not (grid_files / "p.png").exists()


@pytest.fixture
def grid_files(files):
    from specsim.demo import demo_trace

    r = demo_trace(20).requests
    lines = ["arrival_s,prompt_tokens,output_tokens"] + [f"{a!r},{p},{o}" for a, p, o in
                                                          zip(r["arrival_s"].tolist(), r["prompt_tokens"].tolist(),
                                                              r["output_tokens"].tolist())]
    (files / "trace.csv").write_text("\n".join(lines) + "\n")
    (files / "grid.toml").write_text('[traces]\ntr = "trace.csv"\n[tables]\nt = "t.toml"\n[calibrations]\n'
                                     'c = "c.toml"\n[axes]\npolicy = ["fixed:1"]\n')
    return files


@pytest.mark.parametrize("option", ['limit = "ten"', 'limit = -1', 'skip_bad_rows = 1', 'format = 3',
                                    'window = "soon"', 'columns = [1]', 'arrival_unit = "days"'])
def test_grid_reader_options_of_the_wrong_type_are_refused(grid_files, option, capsys):
    (grid_files / "grid.toml").write_text(f'[traces]\ntr = {{ path = "trace.csv", {option} }}\n[tables]\nt = "t.toml"\n'
                                          '[calibrations]\nc = "c.toml"\n[axes]\npolicy = ["fixed:1"]\n')
    _refused(["sweep", grid_files / "grid.toml", "--serial", "--quiet", "-o", grid_files / "r.csv"], capsys,
             "grid.toml", "[traces] tr", option.split(" ")[0])


def test_grid_input_errors_name_the_grid_and_the_entry(grid_files, capsys):
    (grid_files / "trace.csv").write_text("arrival_s,prompt_tokens,output_tokens\n0.0,10,x\n")
    _refused(["sweep", grid_files / "grid.toml", "--serial", "--quiet", "-o", grid_files / "r.csv"], capsys,
             "grid.toml: [traces] tr:")


@pytest.mark.parametrize("address", ["garbage", "tcp://", "http://x:1", "tcp://host:99999", "a b:1", ""])
def test_a_garbage_scheduler_address_is_refused(grid_files, address, capsys):
    _refused(["sweep", grid_files / "grid.toml", "--scheduler", address, "--quiet", "-o", grid_files / "r.csv"],
             capsys, "--scheduler")


def test_a_csv_log_with_a_byte_order_mark_is_read_and_a_folder_is_named_as_one(files, capsys):
    log = files / "steps.csv"
    log.write_bytes(("\ufeffdrafts,accepted\n" + "3,2\n3,0\n3,3\n" * 60).encode("utf-8"))
    fit = ["calib", "fit", "--drafter-sha256", "ab" * 32, "--vocab", "9", "--quantization", "bf16", "--context", "true",
           "-o", str(files / "cal.toml")]
    assert _run(fit + ["--steps-log", str(log)]) == 0
    capsys.readouterr()
    _refused(fit + ["--steps-log", files / "adir"], capsys, "is a folder")


def test_a_refusal_with_a_million_problems_fits_a_screen():
    from specsim.errors import SpecsimError

    e = SpecsimError("x" * 100_000, [f"problem {i}" for i in range(1_000_000)])
    text = str(e)
    assert len(text) < 4000 and "… and 999,990 more" in text and "problem 9" in text


def test_progress_lines_stay_off_a_pipe_unless_asked(monkeypatch):
    import io

    from specsim._progress import Progress

    class Terminal(io.StringIO):
        def isatty(self):
            return True

    monkeypatch.delenv("SPECSIM_PROGRESS", raising=False)
    for stream, asked, shown in ((io.StringIO(), False, False), (io.StringIO(), True, True),
                                 (Terminal(), False, True)):
        if asked:
            monkeypatch.setenv("SPECSIM_PROGRESS", "1")
        with Progress(10, "work", stream=stream, unit="points") as bar:
            bar.update(10)
        assert bar.done == 10
        assert ("work" in stream.getvalue()) == shown
        term = Terminal()
        with Progress(10, "quiet", enabled=False, stream=term) as bar:  # --quiet, even on a terminal
            bar.update(3)
        assert term.getvalue() == "" and bar.done == 3
        monkeypatch.delenv("SPECSIM_PROGRESS", raising=False)


def test_a_live_progress_line_moves_without_updates_and_a_delayed_one_waits(monkeypatch):
    """On a terminal a live line is redrawn while the work reports nothing (its elapsed time
    moves); one with a delay prints nothing for work shorter than the delay."""
    import io
    import threading

    from specsim import _progress
    from specsim._progress import Progress

    class Terminal(io.StringIO):
        def __init__(self):
            super().__init__()
            self.lock, self.writes = threading.Lock(), 0

        def isatty(self):
            return True

        def write(self, text):
            with self.lock:
                self.writes += "work" in text
                return super().write(text)

    monkeypatch.setattr(_progress, "LIVE_TICK_S", 0.001)
    term = Terminal()
    seen = threading.Event()
    with Progress(10, "work", stream=term, live=True) as bar:
        first = term.writes
        for _ in range(10_000):  # redraws come from the ticker thread, not from updates
            if term.writes >= first + 3:
                seen.set()
                break
            seen.wait(0.001)
        bar.update(10)
    assert seen.is_set() and bar.done == 10
    quiet = Terminal()
    with Progress(0, "work", stream=quiet, live=True, delay_s=3600.0) as bar:
        bar.update(5)
    assert quiet.getvalue().strip() == ""


def test_demo_refuses_an_empty_out_folder_and_writes_nothing(tmp_path, monkeypatch, capsys):
    # An empty --out used to put the demo's trace.csv and table.toml in the current folder,
    # replacing files of those names there.
    monkeypatch.chdir(tmp_path)
    (tmp_path / "trace.csv").write_text("sentinel")
    _refused(["demo", "--out", "", "--requests", "20", "--no-plot", "--no-tune"], capsys, "--out")
    assert (tmp_path / "trace.csv").read_text() == "sentinel"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["trace.csv"]


def test_a_closed_pipe_is_not_an_error(files):
    import subprocess
    import sys

    root = ROOT
    env = dict(os.environ, PYTHONPATH=str(root) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    # The reader (``| head -1``) is gone before the command writes anything.
    proc = subprocess.Popen([sys.executable, "-m", "specsim", "table", "show", str(files / "t.toml")],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    proc.stdout.close()
    with proc.stderr:
        err = proc.stderr.read().decode()
    assert proc.wait() == 0, err
    assert "error" not in err and "Traceback" not in err and "Exception ignored" not in err


def test_ctrl_c_while_the_commands_load_exits_130_without_a_traceback(monkeypatch, capsys):
    import specsim.cli as cli

    def interrupted(argv=None):
        raise KeyboardInterrupt

    monkeypatch.setattr(cli, "build_parser", interrupted)
    assert cli.main(["table", "show", "x"]) == 130
    err = capsys.readouterr().err
    assert err == "specsim: interrupted\n"


def test_the_command_freezes_the_collector_before_the_interpreter_shuts_down(monkeypatch):
    # The shutdown's walk over every tracked object was 0.2-0.35 s of a 2 s simulate; the frozen
    # objects are skipped, and the exit code and the exit handlers are the command's as before.
    import specsim.cli as cli

    frozen = []
    monkeypatch.setattr(cli.gc, "freeze", lambda: frozen.append(True))
    with pytest.raises(SystemExit) as ended:
        cli._leave(3)
    assert ended.value.code == 3 and frozen == [True]


def test_positive_confidences_are_refused_as_not_log_probabilities(files, capsys):
    # Probabilities or logits given where log-probabilities belong all fell in the top bucket.
    (files / "conf.json").write_text("[[-0.1, 0.7], [-0.5]]")
    _refused(["plan", files / "t.toml", files / "c.toml", "--confidences", files / "conf.json"], capsys,
             "conf.json", "sequence 0", "log-probability")
    (files / "drafts.csv").write_text("step,sequence,position,confidence,accepted\n0,0,1,7.5,1\n")
    fit = ["calib", "fit", "--drafts-log", files / "drafts.csv", "--drafter-sha256", "ab" * 32, "--vocab", "9",
           "--quantization", "bf16", "--context", "true", "-o", files / "cal.toml"]
    _refused(fit, capsys, "drafts.csv", "7.5", "log-probability")
    _refused(["calib", "drift", files / "c.toml", "--drafts-log", files / "drafts.csv"], capsys, "drafts.csv")
    # rounding just above 0, and log-probs past float32's range, are still read, without a warning
    (files / "conf.json").write_text("[[-1e300, 0.0001]]")
    assert _run(["plan", str(files / "t.toml"), str(files / "c.toml"), "--confidences", str(files / "conf.json")]) == 0
    assert "Warning" not in capsys.readouterr().err


@pytest.mark.parametrize("bad", [None, -1, 1.5, 10**30, object(), ["t.toml"]])
def test_the_loaders_and_simulate_refuse_wrong_types_with_a_specsim_error(bad):
    import numpy as np

    from specsim import (REQUEST_DT, AcceptanceCalibration, CostTable, SpecsimError, load_schedule, simulate)

    for call in (CostTable.load, CostTable.parse, AcceptanceCalibration.load, AcceptanceCalibration.parse,
                 load_schedule):
        with pytest.raises(SpecsimError):
            call(bad)
    requests = np.zeros(1, dtype=REQUEST_DT)
    requests["prompt_tokens"], requests["output_tokens"] = 5, 5
    with pytest.raises(SpecsimError, match="table must be a CostTable"):
        simulate(requests, bad, demo_calibration(), "fixed:1")
    with pytest.raises(SpecsimError, match="calibration must be an? AcceptanceCalibration"):
        simulate(requests, demo_table(), bad, "fixed:1")


def test_every_plot_option_refuses_a_format_matplotlib_cannot_write(grid_files, capsys):
    files = grid_files
    pytest.importorskip("matplotlib")
    (files / "drafts.csv").write_text("step,sequence,position,confidence,accepted\n"
                                      + "".join(f"{i},0,1,-0.5,{i % 2}\n" for i in range(300)))
    key = ["--drafter-sha256", "ab" * 32, "--vocab", "9", "--quantization", "bf16", "--context", "true"]
    for argv in (["calib", "fit", "--drafts-log", files / "drafts.csv", *key, "-o", files / "c2.toml"],
                 ["calib", "drift", files / "c.toml", "--drafts-log", files / "drafts.csv"],
                 ["sweep", files / "grid.toml", "--serial", "-o", files / "r.csv"]):
        _refused([*argv, "--plot", files / "p.xyz"], capsys, "cannot write .xyz")
    assert not [p for p in files.iterdir() if p.name in ("c2.toml", "r.csv", "p.xyz")]


@pytest.mark.skipif(not os.path.exists("/dev/zero"), reason="needs /dev/zero")
@pytest.mark.parametrize("argv", [
    ["table", "show", "/dev/zero"], ["calib", "show", "/dev/zero"], ["sweep", "/dev/zero", "-o", "{d}/r.csv"],
    ["plan", "{d}/t.toml", "{d}/c.toml", "--confidences", "/dev/zero"],
    ["replay", "/dev/zero", "--trace", "x", "--policy", "fixed:1", "--width", "1", "--budget", "10"],
    ["schedule", "import", "--from", "vllm", "/dev/zero"], ["trace", "show", "/dev/zero", "--format", "mooncake"],
    ["trace", "show", "/dev/zero"], ["calib", "drift", "{d}/c.toml", "--from-log", "/dev/zero"],
], ids=lambda a: " ".join(a[:2]))
def test_a_device_given_as_input_is_refused_not_read_for_ever(files, argv, capsys):
    # /dev/zero never ends: these hung, or filled the memory until the process was killed.
    _refused([a.format(d=files) for a in argv], capsys, "/dev/zero")


def test_inputs_past_the_size_limit_are_refused_unread(files, monkeypatch, capsys):
    import specsim._io as io_module

    monkeypatch.setattr(io_module, "MAX_INPUT_BYTES", 100)  # the guarded reader's binding of the limit
    _refused(["table", "show", files / "t.toml"], capsys, "t.toml", "larger than 100 bytes")


@pytest.mark.parametrize("bad", [None, "x", b"x", object()])
def test_calibration_queries_and_options_refuse_wrong_types_with_a_specsim_error(bad):
    from specsim import AcceptanceCalibration, ServerOptions, SpecsimError

    cal = demo_calibration()
    calls = [cal.bucket, cal.p_given_lp, cal.prior, lambda v: ServerOptions(occupancy=v),
             lambda v: AcceptanceCalibration(cal.drafter, v, cal.p_accept, cal.priors),
             lambda v: AcceptanceCalibration(cal.drafter, cal.edges, v, cal.priors)]
    for call in calls[:3] if bad is None else calls:  # None is "no occupancy" and an empty list elsewhere
        with pytest.raises(SpecsimError):
            call(bad)
    assert cal.prior(0) == cal.prior(1)  # positions below 1 still take the first prior


@pytest.mark.parametrize("rates,position", [("0.5,0.9", "position 2"), ("0,0.5", "position 2"),
                                            ("0.82,0.61,0.45", None)])
def test_rising_marginal_rates_are_reported_not_clamped_silently(files, capsys, rates, position):
    code = _run(["calib", "fit", "--rates", rates, "--drafter-sha256", "ab" * 32, "--vocab", "9", "--quantization",
                 "bf16", "--context", "true", "-o", str(files / "r.toml")])
    err = capsys.readouterr().err
    assert code == 0 and "Traceback" not in err
    assert (position in err and "warning" in err) if position else "warning" not in err


@pytest.mark.parametrize("argv", [
    ["bench", "--recipe", "x" * 100_000, "--widths", "1", "--max-k", "1", "-o", "{d}/b.toml"],
    ["schedule", "export", "--planner", "{d}/t.toml", "{d}/c.toml", "--to", "vllm", "--method", "x" * 100_000],
    ["table", "show", "{d}/" + "y" * 5000],
], ids=["recipe", "method", "long-path"])
def test_a_huge_argument_gives_a_short_refusal(files, argv, capsys):
    code = _run([a.format(d=files) if "{d}" in a[:3] else a for a in argv])
    err = capsys.readouterr().err
    assert code == 2 and "error" in err and "Traceback" not in err
    assert len(err) < 4000, f"{len(err)} characters"


def test_the_console_script_catches_a_ctrl_c_while_the_command_modules_load(tmp_path):
    """The installed ``specsim`` script starts in ``specsim._console``, which loads the command
    modules under its own guard: a Ctrl-C then exits 130 with one line, no traceback."""
    import subprocess
    import sys

    root = ROOT
    scripts = (root / "pyproject.toml").read_text()
    assert 'specsim = "specsim._console:run"' in scripts
    # The command modules' import raises KeyboardInterrupt, as a Ctrl-C during it would.
    code = ("import sys\n"
            "class Interrupt:\n"
            "    def find_spec(self, name, path=None, target=None):\n"
            "        if name == 'specsim.cli':\n"
            "            raise KeyboardInterrupt\n"
            "sys.meta_path.insert(0, Interrupt())\n"
            "from specsim._console import run\n"
            "sys.argv = ['specsim', '--help']\n"
            "run()\n")
    env = dict(os.environ, PYTHONPATH=str(root) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=tmp_path)
    assert (done.returncode, done.stderr) == (130, "specsim: interrupted\n")


def test_a_ctrl_c_swallowed_in_a_callback_from_c_still_ends_the_command_as_interrupted(monkeypatch, capsys):
    """A Ctrl-C during a kernel's first compile can land in a callback from LLVM, where it is
    reported as an "Exception ignored" and swallowed; the compile then fails on its own. The
    command exits 130 with one line, as for any Ctrl-C, and nothing else is printed."""
    import signal
    import threading
    import time

    import specsim.cli as cli

    class Swallowed:
        def __del__(self):
            raise KeyboardInterrupt  # reported as unraisable, as ctypes reports a callback's

    def compile_in_a_callback(argv):
        obj = Swallowed()
        del obj
        raise RuntimeError("no compiled object yet")  # how the compile fails next

    def compile_swallowing_the_signal(argv):
        # To the main thread itself, and waited for: sent to the process, the signal may land on
        # a thread an earlier test left running, and its handler then runs in the main thread at
        # its next check, which can come after this function has returned.
        try:
            signal.pthread_kill(threading.main_thread().ident, signal.SIGINT)
            for _ in range(500):  # five seconds at most; the handler raises long before
                time.sleep(0.01)
        except KeyboardInterrupt:
            raise RuntimeError("the compile failed") from None

    def compile_going_on(argv):  # the swallowed interrupt broke nothing: the work goes on
        obj = Swallowed()
        del obj
        for _ in range(1000):  # ten seconds, unless interrupted
            time.sleep(0.01)
        return 0

    # Python's own Ctrl-C handler, as a command at a terminal starts with: a shell's background
    # job (a CI script's `&`) starts with SIGINT ignored, and Python then installs none.
    started = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        for command in (compile_in_a_callback, compile_swallowing_the_signal, compile_going_on):
            monkeypatch.setattr(cli, "_main", command)
            assert cli.main(["simulate"]) == 130
            assert capsys.readouterr().err == "specsim: interrupted\n"
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    finally:
        signal.signal(signal.SIGINT, started)

    def a_bug(argv):
        raise RuntimeError("a bug, not an interrupt")

    monkeypatch.setattr(cli, "_main", a_bug)
    with pytest.raises(RuntimeError, match="a bug"):
        cli.main(["simulate"])


@pytest.mark.parametrize("text", ["0.8,,0.4", ",0.8", "0.8,", "0.8, ,0.4", ",", ""])
def test_a_list_with_an_empty_item_is_refused_not_shifted(text):
    """``--rates 0.8,,0.4`` once gave position 2 the rate meant for position 3."""
    import argparse

    from specsim.cli._common import float_list, int_list

    for parse in (float_list, int_list):
        with pytest.raises(argparse.ArgumentTypeError, match="is empty"):
            parse(text)
    assert float_list("0.8, 0.6") == [0.8, 0.6] and int_list("512,2048") == [512, 2048]


def test_merge_refuses_one_run_given_twice_by_name_or_through_a_link(files, capsys):
    """The same file twice was merged as the "median of 2 runs"."""
    t, out = files / "t.toml", files / "m.toml"
    os.symlink(t, files / "soft.toml")
    os.link(t, files / "hard.toml")
    _refused(["table", "merge", t, t, "-o", out], capsys, f"{t} is given twice (runs 1 and 2)",
             "give each file once")
    _refused(["table", "merge", t, files / "plain.txt", files / "soft.toml", "-o", out], capsys,
             f"{files / 'soft.toml'} (run 3) is the same file as {t} (run 1)")
    _refused(["table", "merge", files / "hard.toml", t, "-o", out], capsys,
             f"{t} (run 2) is the same file as {files / 'hard.toml'} (run 1)")
    assert not out.exists()
    (files / "copy.toml").write_bytes(t.read_bytes())  # a copy is another run, however alike
    assert _run(["table", "merge", str(t), str(files / "copy.toml"), "-o", str(out)]) == 0 and out.exists()


def test_a_digest_mode_given_twice_is_refused_not_overwritten(files, capsys):
    twice = ["--digest", "verify=a", "--digest", "verify=b"]
    _refused(["table", "check", files / "t.toml", *twice], capsys, "--digest 'verify=b': mode 'verify' is already "
             "given (--digest 'verify=a'); give each mode's digest once")
    _refused(["table", "import", files / "t.toml", "--run", "r", "--box-class", "b", "--recipe", "r", *twice,
              "-o", files / "i.toml"], capsys, "mode 'verify' is already given")
    assert not (files / "i.toml").exists()


def test_fit_edges_past_float32_are_refused_not_written_as_infinite(files, capsys):
    """``--edges=-1e308,0`` wrote ``edges = [-inf, 0.0]``."""
    log = files / "drafts.csv"
    log.write_text("step,sequence,position,confidence,accepted\n0,0,1,-0.5,1\n0,0,2,-1.5,0\n")
    fit = ["calib", "fit", "--drafts-log", log, "--drafter-sha256", "ab" * 32, "--vocab", "9", "--quantization",
           "bf16", "--context", "true", "-o", files / "f.toml"]
    _refused(fit + ["--edges=-1e308,0"], capsys, "edge 1 (-1e+308) is beyond float32's range")
    _refused(fit + ["--edges=-2,-1,1e39"], capsys, "edge 3 (1e+39) is beyond float32's range")
    assert not (files / "f.toml").exists()


def test_drift_width_has_the_replay_bound(files, capsys):
    from specsim._checks import MAX_WIDTH
    from specsim.calibration import online
    from specsim.errors import CalibrationError

    log = files / "steps.csv"
    log.write_text("drafts,accepted\n2,1\n2,2\n2,0\n")
    drift = ["calib", "drift", str(files / "c.toml"), "--steps-log", str(log), "--width"]
    assert _run(drift + ["99999999999"]) == 2
    err = capsys.readouterr().err
    assert "argument --width: 99,999,999,999 is beyond 1,048,576 sequences" in err and "Traceback" not in err
    assert _run(drift + [str(MAX_WIDTH)]) == 0
    with pytest.raises(CalibrationError, match="width = 1048577 is outside 1..1,048,576"):
        online.monitor_runs(demo_calibration(), [2], [1], width=MAX_WIDTH + 1)
