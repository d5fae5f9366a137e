"""Sweeps: grid parsing, serial and Dask runs equal to single simulations, resuming."""

from __future__ import annotations

import builtins
import json
import math
import re

import pytest

from specsim.cli import main
from specsim.studies.sweep import GridError, load_grid, read_results, run_sweep
from specsim.studies.sweep.plot import pareto_front
from specsim.studies.sweep.results import check_results_path

CONV = "traces/azure2023/AzureLLMInferenceTrace_conv.csv"


@pytest.fixture
def inputs(shared_data, tmp_path):
    """A real table (GB10 run 1) and a calibration fitted on its real histograms."""
    metrale = shared_data / "metrale" / "qwen38_27b_mtp_gb10.toml"
    assert main(["table", "import", str(metrale), "--run", "qwen38_27b_mtp_r1", "-o", str(tmp_path / "gb10.toml"),
                 "--box-class", "gb10", "--recipe", "qwen38-27b-mtp"]) == 0
    assert main(["calib", "fit", "--windows", str(metrale), "--drafter-sha256", "ab" * 32, "--vocab", "151936",
                 "--quantization", "nvfp4", "--context", "true", "-o", str(tmp_path / "cal.toml")]) == 0
    return tmp_path


def write_grid(folder, trace, axes, server="max_batch = 8", limit=400):
    text = f"""
[traces]
conv = {{ path = "{trace}", limit = {limit} }}
[tables]
gb10 = "gb10.toml"
[calibrations]
gb10 = "cal.toml"
[server]
{server}
[slo]
ttft_s = 5.0
tpot_s = 0.2
[axes]
{axes}
"""
    path = folder / "grid.toml"
    path.write_text(text)
    return path


AXES_12 = 'policy = ["propose", "sequence", "goodput"]\nslack = [0.0, 0.3]\nrate_scale = [0.05, 0.1]'


def simulate_json(folder, trace, point, limit=400):
    out = folder / f"single-{point['policy']}-{point['slack']}-{point['rate_scale']}.json"
    args = ["simulate", "--trace", str(trace), "--limit", str(limit), "--table", str(folder / "gb10.toml"),
            "--calibration", str(folder / "cal.toml"), "--policy", point["policy"], "--slack", str(point["slack"]),
            "--rate-scale", str(point["rate_scale"]), "--max-batch", "8", "--slo-ttft-s", "5.0",
            "--slo-tpot-s", "0.2", "--json", str(out), "--quiet"]
    assert main(args) == 0
    return json.loads(out.read_text())["policies"][0]


def assert_row_matches(row, summary):
    for key in ("requests", "output_tokens", "makespan_s", "tokens_per_s", "energy_j", "j_per_token",
                "mean_width", "accepted_per_step"):
        assert row[key] == summary[key], key
    for metric in ("ttft_s", "tpot_s", "e2e_s"):
        for q in ("p50", "p90", "p99"):
            assert row[f"{metric}_{q}"] == summary[metric][q]
    assert json.loads(row["depth_histogram"]) == summary["depth_histogram"]
    assert row["slo_attainment"] == summary["slo"]["attainment"]


def test_grid_refusals_list_every_problem(tmp_path):
    (tmp_path / "t.toml").write_text("")
    bad = tmp_path / "bad.toml"
    bad.write_text("""
[traces]
a = "missing.csv"
[tables]
t = "t.toml"
[calibrations]
c = { path = "t.toml" }
[server]
warp = 9
[axes]
colour = ["red"]
policy = ["fixed:x"]
""")
    with pytest.raises(GridError) as err:
        load_grid(bad)
    text = str(err.value)
    for needle in ("missing.csv", "[calibrations] c", "warp", "colour", "fixed:x"):
        assert needle in text
    assert main(["sweep", str(bad), "-o", str(tmp_path / "r.csv")]) == 2


def test_serial_sweep_equals_single_simulations_and_resumes(inputs, shared_data, capsys):
    trace = shared_data / CONV
    grid = load_grid(write_grid(inputs, trace, AXES_12))
    assert len(grid.points) == 12
    out = inputs / "serial.csv"
    report = run_sweep(grid, out, serial=True, progress=False)
    assert (report.total, report.computed, report.skipped) == (12, 12, 0)
    rows = read_results(out)
    assert [r["policy"] for r in rows] == [p["policy"] for p in grid.points]
    for row in rows[::5]:
        point = {k: row[k] for k in ("policy", "slack", "rate_scale")}
        assert_row_matches(row, simulate_json(inputs, trace, point))

    # Drop five rows: the next run computes exactly those and leaves the rest untouched.
    kept = rows[:3] + rows[8:]
    from specsim.studies.sweep.results import write_results

    write_results(out, kept, list(rows[0].keys()))
    report = run_sweep(grid, out, serial=True, progress=False)
    assert (report.computed, report.skipped) == (5, 7)
    again = read_results(out)
    assert again == rows


def test_dask_sweep_on_two_workers_equals_serial(inputs, shared_data, port_8787_taken):
    """Also while another program holds port 8787 (no fixed port, no warning)."""
    pytest.importorskip("dask.distributed")
    trace = shared_data / CONV
    grid_path = write_grid(inputs, trace, AXES_12)
    grid = load_grid(grid_path)
    serial = inputs / "serial.csv"
    run_sweep(grid, serial, serial=True, progress=False)
    out = inputs / "dask.csv"
    report = run_sweep(grid, out, workers=2, progress=False)
    assert (report.computed, report.workers) == (12, 2)
    rows = read_results(out)
    assert rows == read_results(serial)
    point = {k: rows[7][k] for k in ("policy", "slack", "rate_scale")}
    assert_row_matches(rows[7], simulate_json(inputs, trace, point))

    # A partial file: the cluster computes only the missing points.
    from specsim.studies.sweep.results import write_results

    write_results(out, rows[:4], list(rows[0].keys()))
    assert main(["sweep", str(grid_path), "-o", str(out), "--workers", "2", "--quiet"]) == 0
    assert read_results(out) == rows


def test_without_dask_the_sweep_runs_serially_with_a_note(inputs, shared_data, monkeypatch, capsys):
    real_import = builtins.__import__

    def no_dask(name, *args, **kwargs):
        if name.startswith("dask"):
            raise ImportError("no dask here")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_dask)
    grid = load_grid(write_grid(inputs, shared_data / CONV, 'policy = ["fixed:1", "fixed:2"]', limit=50))
    report = run_sweep(grid, inputs / "r.csv", progress=False)
    assert report.computed == 2 and report.workers == 1
    assert "running serially in this process" in capsys.readouterr().err


def test_server_axes_reach_the_simulation(inputs, shared_data):
    grid = load_grid(write_grid(inputs, shared_data / CONV, 'policy = ["fixed:2"]\nmax_batch = [1, 8]', server="",
                                limit=100))
    run_sweep(grid, inputs / "r.csv", serial=True, progress=False)
    narrow, wide = read_results(inputs / "r.csv")
    assert narrow["max_batch"] == 1 and wide["max_batch"] == 8
    assert narrow["mean_width"] == 1.0 and wide["mean_width"] > 1.0
    assert wide["makespan_s"] < narrow["makespan_s"]


def test_parquet_results_round_trip(inputs, shared_data):
    pytest.importorskip("pyarrow")
    grid = load_grid(write_grid(inputs, shared_data / CONV, 'policy = ["fixed:0", "goodput"]', limit=50))
    run_sweep(grid, inputs / "r.parquet", serial=True, progress=False)
    run_sweep(grid, inputs / "r.csv", serial=True, progress=False)
    assert read_results(inputs / "r.parquet") == read_results(inputs / "r.csv")


def test_pareto_front():
    rows = [{"tokens_per_s": 10.0, "j_per_token": 1.0}, {"tokens_per_s": 20.0, "j_per_token": 2.0},
            {"tokens_per_s": 15.0, "j_per_token": 2.5}, {"tokens_per_s": 20.0, "j_per_token": 1.5},
            {"tokens_per_s": None, "j_per_token": 1.0}]
    assert pareto_front(rows) == [0, 3]


def test_sweep_plot(inputs, shared_data, tmp_path):
    pytest.importorskip("matplotlib")
    grid_path = write_grid(inputs, shared_data / CONV, 'policy = ["fixed:0", "fixed:2", "propose"]', limit=60)
    png = tmp_path / "pareto.png"
    assert main(["sweep", str(grid_path), "-o", str(tmp_path / "r.csv"), "--serial", "--quiet", "--plot",
                 str(png)]) == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert not math.isnan(read_results(tmp_path / "r.csv")[0]["tokens_per_s"])


def test_point_ids_stay_text_across_a_resume(tmp_path):
    from specsim.studies.sweep.results import write_results

    rows = [{"point_id": "06575e0440645221", "policy": "fixed:1", "seed": 907, "tokens_per_s": 1.5},
            {"point_id": "1234567890123456", "policy": "propose", "seed": 0, "tokens_per_s": 2.0},
            {"point_id": "00000000000000ab", "policy": "goodput", "seed": 1034, "tokens_per_s": None}]
    out = tmp_path / "r.csv"
    write_results(out, rows, list(rows[0]))
    assert read_results(out) == rows


def test_results_paths_that_are_not_results_are_refused(tmp_path):
    from specsim.studies.sweep.results import check_results_path

    (tmp_path / "one.csv").write_text("only one line\n")
    (tmp_path / "latin.csv").write_bytes("point_id,x\n\xe9,1\n".encode("latin-1"))
    (tmp_path / "empty.csv").write_text("")
    for name in ("one.csv", "latin.csv", "r.txt", "r.toml"):
        with pytest.raises(GridError):
            check_results_path(tmp_path / name)
    check_results_path(tmp_path / "empty.csv")
    check_results_path(tmp_path / "new.csv")


def test_a_changed_input_recomputes_the_points_it_feeds(inputs, shared_data, capsys):
    """A kept row is reused only while every input it came from is unchanged: changing
    [server] max_batch, swapping the table's content or the trace's requests recomputes."""
    trace = shared_data / CONV
    axes = 'policy = ["propose", "fixed:2"]'
    grid_path = write_grid(inputs, trace, axes, server="max_batch = 32", limit=120)
    out = inputs / "r.csv"
    first = run_sweep(load_grid(grid_path), out, serial=True, progress=False)
    assert (first.computed, first.skipped) == (2, 0)
    rows32 = read_results(out)
    assert all(len(r["inputs_digest"]) == 16 and set(json.loads(r["inputs"])) >= {"trace", "table", "server"}
               for r in rows32)

    again = run_sweep(load_grid(grid_path), out, serial=True, progress=False)
    assert (again.computed, again.skipped, again.stale) == (0, 2, 0)
    assert "reusing 2 of 2 points" in capsys.readouterr().err

    # [server] max_batch 32 -> 8: both points recompute, and the note says why.
    grid_path = write_grid(inputs, trace, axes, server="max_batch = 8", limit=120)
    changed = run_sweep(load_grid(grid_path), out, serial=True, progress=False)
    assert (changed.computed, changed.skipped, changed.stale) == (2, 0, 2)
    assert "server options at 2" in capsys.readouterr().err
    rows8 = read_results(out)
    assert [r["point_id"] for r in rows8] == [r["point_id"] for r in rows32]
    assert rows8[0]["inputs_digest"] != rows32[0]["inputs_digest"]
    assert rows8[0]["mean_width"] != rows32[0]["mean_width"]

    # Same names, another table inside gb10.toml (run 2 of the same box): recomputed.
    metrale = shared_data / "metrale" / "qwen38_27b_mtp_gb10.toml"
    before = (inputs / "gb10.toml").read_bytes()
    assert main(["table", "import", str(metrale), "--run", "qwen38_27b_mtp_r2", "-o", str(inputs / "gb10.toml"),
                 "--box-class", "gb10", "--recipe", "qwen38-27b-mtp"]) == 0
    assert (inputs / "gb10.toml").read_bytes() != before
    swapped = run_sweep(load_grid(grid_path), out, serial=True, progress=False)
    assert (swapped.computed, swapped.stale) == (2, 2)
    assert "table file at 2" in capsys.readouterr().err

    # Fewer requests from the same trace file: the trace content differs.
    grid_path = write_grid(inputs, trace, axes, server="max_batch = 8", limit=100)
    fewer = run_sweep(load_grid(grid_path), out, serial=True, progress=False)
    assert (fewer.computed, fewer.stale) == (2, 2)
    assert "trace content at 2" in capsys.readouterr().err
    assert all(r["requests"] == 100 for r in read_results(out))


def test_rows_kept_without_inputs_are_recomputed(inputs, shared_data, capsys):
    """A results file from before inputs were recorded is not trusted: its points recompute."""
    from specsim.studies.sweep.results import write_results

    grid_path = write_grid(inputs, shared_data / CONV, 'policy = ["fixed:1"]', limit=60)
    out = inputs / "r.csv"
    run_sweep(load_grid(grid_path), out, serial=True, progress=False)
    rows = read_results(out)
    old = [{k: v for k, v in r.items() if k not in ("inputs_digest", "inputs")} for r in rows]
    write_results(out, old, list(old[0]))
    report = run_sweep(load_grid(grid_path), out, serial=True, progress=False)
    assert (report.computed, report.stale) == (1, 1)
    assert "not recorded" in capsys.readouterr().err
    assert read_results(out)[0]["inputs_digest"] == rows[0]["inputs_digest"]


def test_engine_semantics_version_keys_the_rows(inputs, shared_data, monkeypatch):
    import specsim.sim.engine as engine

    grid_path = write_grid(inputs, shared_data / CONV, 'policy = ["fixed:1"]', limit=60)
    out = inputs / "r.csv"
    run_sweep(load_grid(grid_path), out, serial=True, progress=False)
    import specsim.studies.sweep.results as sweep_results

    monkeypatch.setattr(sweep_results, "ENGINE_SEMANTICS", engine.ENGINE_SEMANTICS + 1)  # the sweep's binding of it
    report = run_sweep(load_grid(grid_path), out, serial=True, progress=False)
    assert (report.computed, report.stale) == (1, 1)


def test_the_sweep_ends_with_the_best_policy_per_traffic_level(inputs, shared_data, capsys):
    """One line per traffic level naming the best policy per objective; with a seed axis, two
    policies whose means are closer than their seed spread are a tie within noise."""
    from specsim.studies.sweep.run import best_by_traffic

    axes = 'policy = ["fixed:0", "fixed:3"]\nrate_scale = [0.05, 0.1]\nseed = [1, 2, 3]'
    grid_path = write_grid(inputs, shared_data / CONV, axes, limit=60)
    assert main(["sweep", str(grid_path), "-o", str(inputs / "r.csv"), "--serial", "--quiet"]) == 0
    printed = capsys.readouterr().out
    assert "best per traffic level (mean over 3 seeds):" in printed
    for level in ("rate_scale 0.05:", "rate_scale 0.1:"):
        line = next(x for x in printed.splitlines() if x.strip().startswith(level))
        assert "least J/token: fixed:" in line and "most tokens/s: fixed:" in line
    # The verdict follows the numbers, paired by seed: a lead under the paired noise is a tie ...
    grid = load_grid(grid_path)
    rows = read_results(inputs / "r.csv")
    assert {r["seed"] for r in rows} == {1, 2, 3}
    noisy = [dict(r, j_per_token=1.0 + 0.01 * r["seed"] if r["policy"] == "fixed:0" else 1.001 + 0.01 * (4 - r["seed"]))
             for r in rows]
    lines = best_by_traffic(grid, noisy)
    assert all("least J/token: fixed:0 " in x and "tie within noise with fixed:3" in x
               and "paired over 3 seeds: -0.001 ± " in x for x in lines[1:])
    # ... and one that each seed shows alike is a lead, however close the means: the noise both
    # share cancels in the pairs.
    shared = [dict(r, j_per_token=(1.0 if r["policy"] == "fixed:0" else 1.001) + 0.01 * r["seed"]) for r in rows]
    lines = best_by_traffic(grid, shared)
    assert all("least J/token: fixed:0 " in x and "ahead of fixed:3" in x.split(";")[0] for x in lines[1:])
    apart = [dict(r, j_per_token=1.0 if r["policy"] == "fixed:3" else 2.0 + 0.01 * r["seed"]) for r in rows]
    lines = best_by_traffic(grid, apart)
    assert all("least J/token: fixed:3 (1)" in x and "tie" not in x.split(";")[0] for x in lines[1:])
    # Candidates that made the same runs under every seed are named equal, not ranked.
    twins = [dict(r, run_digest="same" + str(r["seed"])) for r in rows]
    assert all("(the same runs)" in x and "ahead of" not in x.split(";")[0] for x in best_by_traffic(grid, twins)[1:])
    # Without a seed axis nothing measures the noise: the best is named, and the line says so.
    single = load_grid(write_grid(inputs, shared_data / CONV, 'policy = ["fixed:0", "fixed:3"]', limit=60))
    assert main(["sweep", str(inputs / "grid.toml"), "-o", str(inputs / "s.csv"), "--serial", "--quiet"]) == 0
    printed = capsys.readouterr().out
    assert "best per traffic level:" in printed and "all points: least J/token: fixed:" in printed
    assert "tie" not in printed and "one seed, so the noise is not measured" in printed
    assert best_by_traffic(single, read_results(inputs / "s.csv"))


def test_points_that_made_the_same_run_are_named_equal(inputs, shared_data, capsys):
    grid = load_grid(write_grid(inputs, shared_data / CONV, 'policy = ["fixed:2", "schedule:1-=2", "fixed:1"]',
                                limit=60))
    assert main(["sweep", grid.source, "-o", str(inputs / "r.csv"), "--serial", "--quiet"]) == 0
    out = capsys.readouterr().out
    assert "same run: fixed:2 = schedule:1-=2" in out and "fixed:1" not in out.split("same run:")[1].split("\n")[0]
    rows = read_results(inputs / "r.csv")
    assert rows[0]["run_digest"] == rows[1]["run_digest"] != rows[2]["run_digest"]


def test_a_results_file_cut_inside_its_last_row_is_refused_untouched(inputs, shared_data):
    """A copy cut inside the last row's inputs JSON keeps the row's field count and its
    inputs_digest: the row is still caught (the file ends inside it), and the sweep refuses the
    file, naming the line, before any work and without touching it. So is a row cut earlier."""
    grid = load_grid(write_grid(inputs, shared_data / CONV, 'policy = ["fixed:1", "fixed:2", "propose"]', limit=60))
    fresh = inputs / "fresh.csv"
    run_sweep(grid, fresh, serial=True, progress=False)
    whole = fresh.read_bytes()
    cut = whole[:whole.rindex(b'""run"": ""') + 15]  # inside the digest of the last row's run
    assert cut.count(b"\n") == 3 and not cut.endswith(b"\n")
    out = inputs / "r.csv"
    lines = whole.split(b"\n")
    header_fields = lines[0].count(b",") + 1
    for damaged, match in ((cut, r"line 4: the file ends inside it \(a row cut short\)"),
                           (b"\n".join(lines[:2] + [lines[2][:40]] + lines[3:]),
                            f"line 3: 4 fields where the header has {header_fields} \\(a row cut short\\)")):
        out.write_bytes(damaged)
        with pytest.raises(GridError, match=match):
            check_results_path(out)
        with pytest.raises(GridError, match=match + ".*delete the row"):
            run_sweep(grid, out, serial=True, progress=False)
        assert out.read_bytes() == damaged
    out.write_bytes(cut + b"\n")  # a line end cannot hide the cut: its inputs no longer digest
    with pytest.raises(GridError, match=r"line 4: inputs = .* is not a JSON object \(a row with inputs that do not match"):
        read_results(out)


@pytest.mark.parametrize("column, value", [("tokens_per_s", "-1e308"), ("j_per_token", "inf"),
                                           ("ttft_s_p99", "nan"), ("slo_attainment", "1.5"), ("requests", "60.5")])
def test_a_row_with_a_value_out_of_range_is_refused(inputs, shared_data, column, value):
    """A hand-edited figure no run can give (negative throughput, infinite energy, NaN latency,
    attainment above 1, a fractional count) is neither reused nor plotted: the file is refused,
    naming the line and the value, and left as it was."""
    import csv

    grid_path = write_grid(inputs, shared_data / CONV, 'policy = ["fixed:1", "fixed:2"]', limit=60)
    fresh = inputs / "fresh.csv"
    run_sweep(load_grid(grid_path), fresh, serial=True, progress=False)
    header, *rows = list(csv.reader(fresh.read_text().splitlines()))
    rows[1][header.index(column)] = value
    out = inputs / "r.csv"
    with out.open("w", newline="") as f:
        csv.writer(f, lineterminator="\n").writerows([header, *rows])
    before = out.read_bytes()
    with pytest.raises(GridError, match=f"line 3: {column} = .*a row with a value out of range"):
        run_sweep(load_grid(grid_path), out, serial=True, progress=False)
    assert out.read_bytes() == before


@pytest.mark.parametrize("pid", ["", "abc", "06575E0440645221", "06575e044064522", " 06575e0440645221",
                                 "06575e0440645221x"])
def test_a_csv_row_without_a_point_id_is_refused_naming_the_line(tmp_path, pid):
    """A point id is the 16 hex digits specsim names a point by: a CSV row with an empty or
    malformed one is a damaged row (as a Parquet row whose point_id is not text), not kept."""
    from specsim.studies.sweep.results import write_results

    rows = [{"point_id": "06575e0440645221", "policy": "fixed:1", "tokens_per_s": 1.5},
            {"point_id": pid, "policy": "propose", "tokens_per_s": 2.0}]
    out = tmp_path / "r.csv"
    write_results(out, rows, list(rows[0]))
    for read in (check_results_path, read_results):
        with pytest.raises(GridError, match=r"r\.csv: line 3: point_id = .* is not a point id \(16 hex digits.*"
                                            r"\(a row without a point id\); delete the row"):
            read(out)


def test_a_parquet_row_without_a_point_id_is_refused_naming_the_row(tmp_path):
    pq = pytest.importorskip("pyarrow.parquet")
    import pyarrow as pa

    out = tmp_path / "r.parquet"
    pq.write_table(pa.table({"point_id": ["06575e0440645221", None], "tokens_per_s": [1.5, 2.0]}), out)
    with pytest.raises(GridError, match=r"row 2: point_id = None is not a point id"):
        read_results(out)


def test_a_sweep_reads_its_results_file_once(inputs, shared_data, monkeypatch, capsys):
    """The results file is read and checked once per sweep, before the work (a 100,000-row file
    took seconds per read); what the command prints after the work comes from the rows the sweep
    wrote, which equal the file read back, rows of points outside the grid included."""
    import specsim.studies.sweep.results as results
    from specsim.studies.sweep.run import best_by_traffic

    reads = []
    real = results.results_rows
    monkeypatch.setattr(results, "results_rows", lambda path: reads.append(path) or real(path))
    grid_path = write_grid(inputs, shared_data / CONV, 'policy = ["fixed:1", "fixed:2", "propose"]', limit=60)
    grid = load_grid(grid_path)
    out = inputs / "r.csv"
    argv = ["sweep", str(grid_path), "-o", str(out), "--serial", "--quiet"]
    assert main(argv) == 0 and len(reads) == 1
    rows = real(out)[0]
    other = dict(rows[0], point_id="0123456789abcdef", label="a row of another grid")
    results.write_results(out, [rows[2], other, rows[0]], list(rows[0]))
    capsys.readouterr()
    assert main(argv) == 0 and len(reads) == 2
    printed = capsys.readouterr().out
    final = real(out)[0]
    assert [r["point_id"] for r in final] == [r["point_id"] for r in rows] + ["0123456789abcdef"]
    assert "1 computed, 2 reused" in printed
    assert "\n".join(best_by_traffic(grid, final)) in printed
    results.write_results(out, [other, final[1]], list(final[0]))
    report = run_sweep(grid, out, serial=True, progress=False)
    assert report.computed == 2 and len(reads) == 3 and report.rows == real(out)[0] == final


def test_a_column_named_like_a_specsim_family_is_checked_as_one(tmp_path):
    """docs/formats.md: a column whose name starts like one of specsim's families (``ttft_s_``,
    ``steps_``, ...) is checked as specsim's; a note of one's own belongs under another name."""
    from specsim.studies.sweep.results import write_results

    out = tmp_path / "r.csv"
    for name in ("ttft_s_note", "steps_note", "energy_breakdown_note"):
        write_results(out, [{"point_id": "06575e0440645221", name: "checked by hand"}], ["point_id", name])
        with pytest.raises(GridError, match=f"line 2: {name} = 'checked by hand'"):
            read_results(out)
    write_results(out, [{"point_id": "06575e0440645221", "my_note": "checked by hand"}], ["point_id", "my_note"])
    assert read_results(out)[0]["my_note"] == "checked by hand"


def test_a_row_whose_inputs_were_edited_is_refused(inputs, shared_data):
    """A row's ``inputs`` edited by hand (still JSON) no longer digest to its ``inputs_digest``:
    the row could claim inputs it was not computed from, so the file is refused, untouched."""
    import csv
    import json

    grid_path = write_grid(inputs, shared_data / CONV, 'policy = ["fixed:1", "fixed:2"]', limit=60)
    out = inputs / "r.csv"
    run_sweep(load_grid(grid_path), out, serial=True, progress=False)
    header, *rows = list(csv.reader(out.read_text().splitlines()))
    col = header.index("inputs")
    edited = json.loads(rows[1][col])
    edited["table"] = "0" * 16
    rows[1][col] = json.dumps(edited, sort_keys=True)
    with out.open("w", newline="") as f:
        csv.writer(f, lineterminator="\n").writerows([header, *rows])
    before = out.read_bytes()
    with pytest.raises(GridError, match=r"line 3: inputs_digest = .* is not the digest of its inputs"):
        run_sweep(load_grid(grid_path), out, serial=True, progress=False)
    assert out.read_bytes() == before


@pytest.mark.parametrize("column,value,said", [
    ("policy", "fixed:2", "policy = 'fixed:2' where its point has 'fixed:1'"),
    ("label", "fixed:2", "label = 'fixed:2' is not a label of its point's policy 'fixed:1'"),
    ("label", "propose@0", "label = 'propose@0'"),
    ("trace", "other", "trace = 'other' where its point has 'conv'"),
])
def test_a_row_whose_descriptive_columns_were_edited_is_refused(inputs, shared_data, column, value, said):
    """Hostile input round four, case 9: a kept row whose policy, label or any axis column no
    longer describes the point its point_id names (the inputs' digest cannot see them, and the
    verdict reads them) is a damaged row: the file is refused, untouched, naming the point."""
    import csv

    grid_path = write_grid(inputs, shared_data / CONV, 'policy = ["fixed:1", "fixed:3"]', limit=60)
    out = inputs / "r.csv"
    run_sweep(load_grid(grid_path), out, serial=True, progress=False)
    run_sweep(load_grid(grid_path), out, serial=True, progress=False)  # the rows as written are reused
    header, *rows = list(csv.reader(out.read_text().splitlines()))
    assert rows[0][header.index("policy")] == "fixed:1"
    rows[0][header.index(column)] = value
    with out.open("w", newline="") as f:
        csv.writer(f, lineterminator="\n").writerows([header, *rows])
    before = out.read_bytes()
    with pytest.raises(GridError, match=f"the row of point {rows[0][0]}: {re.escape(said)}.*"
                                        r"\(a row whose columns do not match its point\).*delete the row"):
        run_sweep(load_grid(grid_path), out, serial=True, progress=False)
    assert out.read_bytes() == before
