"""Sizes beyond docs/limits.md are refused up front, with the limit in the message, and no
message runs past a screen; results that are not finite never reach a file."""

from __future__ import annotations

import pytest

from specsim._checks import (MAX_ARRIVAL_S, MAX_BUDGET_TOKENS, MAX_DEPTH, MAX_GRID_POINTS, MAX_RATE_SCALE,
                             MAX_STEP_COST, MAX_TOKENS_PER_REQUEST, MAX_WIDTH, MIN_RATE_SCALE, few,
                             fraction_problem, int_problem, number_problem, rate_scale_problem, show)
from specsim.cli import main
from specsim.demo_inputs import demo_calibration, demo_table

SCREEN = 4000  # characters: a generous screen


@pytest.fixture
def files(tmp_path):
    (tmp_path / "t.toml").write_text(demo_table().to_text())
    (tmp_path / "c.toml").write_text(demo_calibration().render())
    (tmp_path / "trace.csv").write_text("arrival_s,prompt_tokens,output_tokens\n0.0,10,20\n0.5,10,30\n")
    return tmp_path


def refused(argv, capsys, *needles):
    try:
        code = main([str(a) for a in argv])
    except SystemExit as e:
        code = e.code
    err = capsys.readouterr().err
    assert code == 2, err
    assert "error" in err and "Traceback" not in err
    assert len(err) < SCREEN, f"{len(err)} characters"
    for n in needles:
        assert n in err, err
    return err


def with_cell(files, n, k):
    text = (files / "t.toml").read_text()
    path = files / "big.toml"
    path.write_text(text + f"\n[[cells]]\nn = {n}\nk = {k}\nverify_ms = 1.0\nverify_j = 1.0\n"
                           f"draft_ms = {1.0 if k else 0.0}\ndraft_j = {1.0 if k else 0.0}\n")
    return path


@pytest.mark.parametrize("command", [["table", "show"], ["table", "check"], ["table", "query", "1", "1"]])
@pytest.mark.parametrize("n,k,limit", [(1, 10**12, f"{MAX_DEPTH:,}"), (1, 10**6, f"{MAX_DEPTH:,}"),
                                       (10**12, 0, f"{MAX_WIDTH:,}")])
def test_a_table_cell_beyond_the_limits_is_refused_before_any_list_is_built(files, capsys, command, n, k, limit):
    path = with_cell(files, n, k)
    argv = command[:2] + [path] + command[2:]
    refused(argv, capsys, "big.toml", limit, "docs/limits.md")


def test_a_missing_depth_list_is_shortened(files, capsys):
    path = with_cell(files, 1, MAX_DEPTH)
    err = refused(["table", "show", path], capsys, "lacks depth(s)", "more")
    assert err.count(",") < 100


def test_a_request_beyond_the_token_limit_is_refused_naming_the_trace(files, capsys):
    (files / "trace.csv").write_text(f"arrival_s,prompt_tokens,output_tokens\n0.0,10,{10**12}\n")
    refused(["simulate", "--trace", files / "trace.csv", "--table", files / "t.toml", "--calibration",
             files / "c.toml", "--policy", "fixed:1"], capsys, "trace.csv", f"{MAX_TOKENS_PER_REQUEST:,}")


def test_the_engine_refuses_a_request_beyond_the_token_limit():
    import numpy as np

    from specsim import REQUEST_DT, simulate
    from specsim.errors import SimulationError

    reqs = np.zeros(1, dtype=REQUEST_DT)
    reqs["output_tokens"] = MAX_TOKENS_PER_REQUEST + 1
    with pytest.raises(SimulationError, match="one request may ask for"):
        simulate(reqs, demo_table(), demo_calibration(), "fixed:1")


BENCH = ["bench", "--recipe", "tiny", "--assume-power-w", "10", "--quiet"]


@pytest.mark.parametrize("extra,needle", [
    (["--widths", "1", "--max-k", str(10**12)], f"{MAX_DEPTH:,}"),
    (["--widths", f"1,{10**12}", "--max-k", "1"], f"{MAX_WIDTH:,}"),
    (["--widths", "1", "--max-k", "1", "--cooldown-s", "1e10"], "86400"),
    (["--widths", "1", "--max-k", "1", "--min-window-s", "inf"], "86400"),
    (["--widths", "1", "--max-k", "1", "--idle-s", "nan"], "86400"),
])
def test_bench_sizes_are_refused(files, capsys, extra, needle):
    refused(BENCH + extra + ["-o", files / "b.toml"], capsys, needle)
    assert not (files / "b.toml").exists() and not (files / "b.toml.partial.jsonl").exists()


def test_model_sizes_are_refused(files, capsys):
    base = ["table", "model", "--gpu", "h200", "--model", "llama-3.1-8b", "--drafter", "eagle-1l", "-o",
            files / "m.toml"]
    refused(base + ["--max-k", str(10**12)], capsys, f"{MAX_DEPTH:,}")
    refused(base + ["--max-k", "2", "--widths", f"1,{10**9}"], capsys, f"{MAX_WIDTH:,}")


def test_count_options_refuse_huge_numbers_in_a_short_message(files, capsys):
    refused(["plan", files / "t.toml", files / "c.toml", "--n", "9" * 5000], capsys, "outside")
    refused(["plan", files / "t.toml", files / "c.toml", "--n", "1e300"], capsys, "not a whole number")


ACC = 'step_ms = [1.0, 1.5]\n[[trace]]\nname = "a"\nk_logged = 1\nsteps = ["0110"]\n'


def test_replay_budget_and_width_limits(files, capsys):
    (files / "acc.toml").write_text(ACC)
    base = ["replay", files / "acc.toml", "--trace", "a", "--policy", "fixed:1"]
    refused(base + ["--width", "1", "--budget", str(MAX_BUDGET_TOKENS + 1)], capsys, f"{MAX_BUDGET_TOKENS:,}")
    refused(base + ["--width", str(MAX_WIDTH + 1), "--budget", "10"], capsys, f"{MAX_WIDTH:,}")


def test_replay_at_width_n_on_a_step_ms_list_warns_of_n_times_the_throughput(files, capsys):
    (files / "acc.toml").write_text(ACC)
    base = ["replay", str(files / "acc.toml"), "--trace", "a", "--policy", "fixed:1", "--budget", "100"]
    assert main(base + ["--width", "1000"]) == 0
    assert "throughput is 1000x a single stream's" in capsys.readouterr().err
    assert main(base + ["--width", "1"]) == 0
    assert "warning" not in capsys.readouterr().err


def test_non_finite_replay_results_are_refused_naming_the_costs(files, capsys):
    (files / "acc.toml").write_text(ACC.replace("[1.0, 1.5]", "[1e308, 1e308]"))
    refused(["replay", files / "acc.toml", "--trace", "a", "--policy", "fixed:1", "--width", "1", "--budget", "100",
             "--json", files / "r.json"], capsys, "step_ms list of", "acc.toml", "ms = inf")
    assert not (files / "r.json").exists()


def test_a_grid_crossing_to_too_many_points_is_refused(files, capsys):
    values = ", ".join(str(i) for i in range(1001))
    (files / "grid.toml").write_text('[traces]\ntr = "trace.csv"\n[tables]\nt = "t.toml"\n[calibrations]\n'
                                     f'c = "c.toml"\n[axes]\npolicy = ["fixed:1"]\nseed = [{values}]\n'
                                     f'max_batch = [{", ".join(str(i) for i in range(1, 1001))}]\n')
    refused(["sweep", files / "grid.toml", "--serial", "-o", files / "r.csv"], capsys, f"{MAX_GRID_POINTS:,}",
            "1,001,000")


COUNTS_KEY = ["--drafter-sha256", "ab" * 32, "--vocab", "9", "--quantization", "bf16", "--context", "true"]


@pytest.mark.parametrize("text,needle", [
    ("edges = [0.0]\naccepted = [1e300]\nrejected = [5]\nsteps = [[1, 1, 5]]\n", "beyond 2**62"),
    ("edges = [0.0]\naccepted = [5]\nrejected = [5]\nsteps = [[1000000000000000, 1, 5]]\n", f"{MAX_DEPTH:,}"),
    ("edges = [0.0]\naccepted = [4611686018427387904]\nrejected = [4611686018427387904]\nsteps = [[1, 1, 5]]\n",
     "beyond 2**62"),
])
def test_counts_beyond_the_limits_are_refused_promptly(files, capsys, text, needle):
    (files / "counts.toml").write_text(text)
    refused(["calib", "fit", "--counts", files / "counts.toml", *COUNTS_KEY, "-o", files / "cal.toml"], capsys,
            "counts.toml", needle)


def test_a_windows_row_of_100000_columns_is_refused_at_once(files, capsys):
    (files / "w.toml").write_text("windows = [[" + ", ".join(["1"] * 100_000) + "]]\n")
    refused(["calib", "fit", "--windows", files / "w.toml", *COUNTS_KEY, "-o", files / "cal.toml"], capsys,
            "w.toml", "100,000 counts", f"{MAX_DEPTH:,}")


def test_windows_beyond_2_62_name_the_file_not_a_rendered_calibration(files, capsys):
    (files / "w.toml").write_text("windows = [[4611686018427387904, 4611686018427387904, 4611686018427387904]]\n")
    err = refused(["calib", "fit", "--windows", files / "w.toml", *COUNTS_KEY, "-o", files / "cal.toml"], capsys,
                  "w.toml", "beyond 2**62")
    assert "rendered" not in err


def test_the_shared_checks():
    assert int_problem(3, "n") is None and "whole number" in int_problem(True, "n")
    assert "whole number" in int_problem(3.0, "n") and "outside 1..5" in int_problem(9, "n", 1, 5)
    assert number_problem(0.5, "x", 0.0, 1.0) is None and "finite" in number_problem(float("nan"), "x")
    assert "> 0" in number_problem(0.0, "x", 0.0, low_open=True) and "must be a number" in number_problem("1", "x")
    assert fraction_problem(1.0, "f") is None and "below 1" in fraction_problem(1.0, "f", top_open=True)
    assert len(show("x" * 10**6)) < 80 and few(range(100), 3) == "0, 1, 2, … and 97 more"


def test_step_costs_that_would_sum_to_infinity_are_refused_naming_the_table(files, capsys):
    import re

    # Costs of 1e308 per step made the run's energy infinite; the table now refuses them itself.
    text = re.sub(r"(verify_ms|verify_j) = [0-9.e+-]+", r"\1 = 1e308", (files / "t.toml").read_text())
    (files / "hot.toml").write_text(text)
    (files / "out.json").write_text("sentinel")
    refused(["simulate", "--trace", files / "trace.csv", "--table", files / "hot.toml", "--calibration",
             files / "c.toml", "--policy", "fixed:0", "--policy", "fixed:1", "--json", files / "out.json"], capsys,
            "hot.toml", f"beyond {MAX_STEP_COST:g} ms or J per step")
    assert (files / "out.json").read_text() == "sentinel"


# -- bounds added after an adversarial run: each used to reach an overflow, a huge allocation or
#    a message blaming the wrong input

def test_rate_scale_is_bounded_in_one_place(files, capsys):
    assert rate_scale_problem(2.0) is None
    for bad in (MIN_RATE_SCALE / 10, MAX_RATE_SCALE * 10, 1e-320, 1e308):
        assert "docs/limits.md" in rate_scale_problem(bad)
    # 1e-320 used to overflow the arrival times and be blamed on arrival_s
    refused(["trace", "show", files / "trace.csv", "--rate-scale", "1e-320"], capsys, "rate scale", "1e-06")
    (files / "grid.toml").write_text('[traces]\ntr = "trace.csv"\n[tables]\nt = "t.toml"\n[calibrations]\n'
                                     'c = "c.toml"\n[axes]\npolicy = ["fixed:1"]\nrate_scale = [1.0, 1e308]\n')
    refused(["sweep", files / "grid.toml", "--serial", "-o", files / "r.csv"], capsys, "rate_scale", "1e+06")
    assert not (files / "r.csv").exists()
    refused(["demo", "--rate-scale", "1e7", "--no-plot", "--no-tune", "--out", files / "d"], capsys, "--rate-scale")


@pytest.mark.parametrize("arrival", ["1e308", "1000000000000"])
def test_an_arrival_beyond_the_limit_is_refused_naming_the_trace_not_the_costs(files, capsys, arrival):
    (files / "late.csv").write_text(f"arrival_s,prompt_tokens,output_tokens\n0.0,10,20\n{arrival},10,30\n")
    err = refused(["simulate", "--trace", files / "late.csv", "--table", files / "t.toml", "--calibration",
                   files / "c.toml", "--policy", "fixed:1", "--idle-w", "100"], capsys, "late.csv", "request 1",
                  f"{MAX_ARRIVAL_S:g} s")
    assert "costs" not in err


def test_the_engine_refuses_an_arrival_beyond_the_limit():
    import numpy as np

    from specsim import REQUEST_DT, SimulationError, simulate

    r = np.zeros(2, dtype=REQUEST_DT)
    r["arrival_s"] = [5.0, 5.0 + 2 * MAX_ARRIVAL_S]
    r["prompt_tokens"], r["output_tokens"] = 10, 10
    with pytest.raises(SimulationError, match="request 1"):
        simulate(r, demo_table(), demo_calibration(), "fixed:1")


@pytest.mark.parametrize("option,value", [("kv_block_size", 10**19), ("log_size", 10**19),
                                          ("kv_block_size", MAX_TOKENS_PER_REQUEST + 1)])
def test_server_sizes_are_bounded(option, value):
    from specsim import ServerOptions, SimulationError

    with pytest.raises(SimulationError, match=option):
        ServerOptions(**{option: value})


def test_online_window_is_bounded_and_bad_types_are_refused():
    from specsim import CalibrationError, OnlineCalibration
    from specsim.calibration.online import MAX_WINDOW_STEPS

    cal = demo_calibration()
    for kw in ({"window": MAX_WINDOW_STEPS + 1}, {"window": 1e308}, {"window": "x"}, {"half_life": "x"},
               {"half_life": float("nan")}, {"max_depth": "16"}, {"max_depth": 256}):
        with pytest.raises(CalibrationError):
            OnlineCalibration(cal, **kw)


@pytest.mark.parametrize("ranges,kw,needle", [
    ([(1, 10**30, 2)], {}, "last width"), ([(1, 8, 10**6)], {}, "depth"), ([(1, 8, 2)], {"max_num_seqs": 10**30}, "max_num_seqs"),
    (None, {}, "not a list"), (5, {}, "not a list"),
])
def test_schedule_export_refuses_widths_and_depths_past_the_limits(ranges, kw, needle):
    from specsim import ScheduleError, export_schedule

    with pytest.raises(ScheduleError, match=needle):
        export_schedule("vllm", ranges, **kw)


def test_schedule_export_takes_numpy_integers():
    import numpy as np

    from specsim import export_schedule

    text = export_schedule("vllm", [(np.int64(1), None, np.int64(2))], max_num_seqs=8).text
    assert '"num_speculative_tokens": 2' in text


def test_table_lookup_refuses_an_out_buffer_it_would_overrun_and_non_integer_queries():
    import numpy as np

    from specsim import TableError

    t = demo_table()
    ns, ks = np.arange(1, 101), np.ones(100, np.int64)
    for out in (np.empty((1, 4)), np.empty((100, 4), np.float32), np.empty((100, 4), order="F")):
        with pytest.raises(TableError, match="out"):
            t.lookup(ns, ks, out=out)
    for bad in ([10**30], [1.5]):
        with pytest.raises(TableError, match="whole numbers"):
            t.lookup(bad, [1])
    out = np.empty((100, 4))
    assert t.lookup(ns, ks, out=out) is out


def test_drift_shift_past_the_limit_is_refused_not_an_overflow(files, capsys):
    from specsim.calibration.drift import MAX_SHIFT_LOGODDS

    (files / "drafts.csv").write_text("step,sequence,position,confidence,accepted\n0,0,1,-0.5,1\n")
    refused(["calib", "drift", files / "c.toml", "--drafts-log", files / "drafts.csv", "--shift", "1e12"], capsys,
            f"at most {MAX_SHIFT_LOGODDS:g}")


def test_bench_refuses_an_assumed_power_too_small_to_leave_a_joule(files, capsys):
    refused(["bench", "--recipe", "tiny", "--widths", "1", "--max-k", "1", "--backend", "numpy", "--meter", "assumed",
             "--assume-power-w", "1e-320", "-o", files / "b.toml"], capsys, "0.001")
    assert not [p for p in files.iterdir() if p.name.startswith("b.toml")]


@pytest.mark.parametrize("cv", ["1e308", "0.0000001"])
def test_a_synthetic_cv_past_the_limits_is_refused_not_a_division_by_zero(capsys, cv):
    from specsim.traces.synthetic import MAX_CV, MIN_CV

    refused(["trace", "show", "--synthetic", f"requests=10,rate=1,arrival=gamma,cv={cv}"], capsys,
            f"{MIN_CV:g}..{MAX_CV:g}")


@pytest.mark.parametrize("kw", [{"max_rounds": None}, {"max_rounds": 1.5}, {"widths_max": "x"}, {"widths_max": 1.5},
                                {"slo": {"attainment": "x", "ttft_s": 1.0}}, {"objective": [1]}, {"executor": None}])
def test_tune_refuses_arguments_of_the_wrong_type_before_any_work(kw):
    import numpy as np

    from specsim import REQUEST_DT, ScheduleError
    from tests.fixtures import tune_on
    from specsim.errors import SimulationError
    from specsim.sim.slo import SLO

    r = np.zeros(3, dtype=REQUEST_DT)
    r["arrival_s"], r["prompt_tokens"], r["output_tokens"] = [0.0, 1.0, 2.0], 5, 5
    with pytest.raises(ScheduleError if "slo" not in kw else SimulationError):
        if isinstance(kw.get("slo"), dict):
            kw = {**kw, "slo": SLO(**kw["slo"])}
        tune_on(r, demo_table(), demo_calibration(), **{"executor": "serial", **kw})


def test_plan_and_query_widths_past_the_limit_are_refused_not_stretched(files, capsys):
    # A width of 2**62 used to be planned on the widest measured width's costs, stretched.
    refused(["plan", files / "t.toml", files / "c.toml", "--n", str(MAX_WIDTH + 1)], capsys, f"{MAX_WIDTH:,}")
    refused(["table", "query", files / "t.toml", str(MAX_WIDTH + 1), "1"], capsys, f"{MAX_WIDTH:,}")
    refused(["table", "query", files / "t.toml", "0", "0"], capsys, "at least 1")
