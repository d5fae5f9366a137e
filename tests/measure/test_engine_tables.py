"""Cost tables fitted on engine telemetry: TensorRT-LLM iteration stats and SGLang `Decode batch`
lines (``specsim table import --from``)."""

import json

import numpy as np
import pytest

from specsim.cli import main
from specsim._checks import MAX_POWER_W, MIN_POWER_W
from specsim.errors import TableError
from specsim.measure.engine_tables import MIN_CELL_SAMPLES, import_table, sglang_samples, trtllm_samples
from specsim.table import SCHEMA, CostTable, TableKey

KEY = TableKey(SCHEMA, "h100-sxm", "llama-3.1-8b/eagle3-bf16", {})


def verify_ms(n, k):
    """The made-up engine's verify time: a fixed part plus a cost per row."""
    return 6.0 + 0.05 * n * (k + 1)


def draft_share(k):
    return 0.0 if k == 0 else 0.1 * k / (1.0 + 0.1 * k)


def iteration(i, n, k, *, snake=False, ctx=0, latency=None, jitter=0.0, **spec):
    lat = latency if latency is not None else (verify_ms(n, k) + jitter) / (1.0 - draft_share(k))
    if snake:
        doc = {"iter": i, "iter_latency_ms": lat,
               "inflight_batching_stats": {"num_scheduled_requests": n + (1 if ctx else 0), "num_context_requests":
                                           1 if ctx else 0, "num_gen_requests": n, "num_ctx_tokens": ctx}}
        if k or spec:
            doc["spec_decoding_stats"] = {"num_draft_tokens": n * k, "num_accepted_tokens": n * k // 2,
                                          "num_requests_with_draft_tokens": n if k else 0,
                                          "draft_overhead": draft_share(k), **spec}
        return doc
    doc = {"iter": i, "iterLatencyMS": lat,
           "inflightBatchingStats": {"numScheduledRequests": n + (1 if ctx else 0), "numContextRequests":
                                     1 if ctx else 0, "numGenRequests": n, "numCtxTokens": ctx}}
    if k or spec:
        doc["specDecodingStats"] = {"numDraftTokens": n * k, "numAcceptedTokens": n * k // 2,
                                    "numRequestsWithDraftTokens": n if k else 0, "draftOverhead": draft_share(k),
                                    "acceptanceLength": 1.0 + k / 2, **spec}
    return doc


def trtllm_file(tmp_path, docs, name="iters.jsonl"):
    path = tmp_path / name
    path.write_text("\n".join(json.dumps(d) for d in docs) + "\n")
    return path


def grid_docs(widths=(1, 4, 16), depths=(0, 3), reps=6, snake=False):
    docs, i = [], 0
    rng = np.random.default_rng(0)
    for n in widths:
        for k in depths:
            for _ in range(reps):
                i += 1
                docs.append(iteration(i, n, k, snake=snake, jitter=float(rng.normal(0.0, 0.05))))
    return docs


def test_a_grid_of_iterations_fits_every_cell(tmp_path):
    path = trtllm_file(tmp_path, grid_docs() + [iteration(999, 4, 0, ctx=512)])
    fitted = import_table([path], "trtllm-iterations", KEY, power_w=500.0)
    t = fitted.table
    assert t.widths.tolist() == [1, 4, 16] and t.max_k == 3
    assert t.meta["energy_source"] == "assumed" and t.meta["assumed_power_w"] == 500.0
    assert t.meta["kept_apart_prefill_or_mixed_iterations"] == 1
    assert fitted.kept_apart["prefill or mixed iterations"] == 1
    for n in (1, 4, 16):
        for k in (0, 3):
            c = t.cell(n, k)
            assert c.verify_ms == pytest.approx(verify_ms(n, k), abs=0.1)
            assert t.extras[n, k] == {"samples": 6, "source": "measured"}
            assert c.verify_j == pytest.approx(c.verify_ms * 1e-3 * 500.0)
        # Depths 1 and 2 were never observed: linear between depths 0 and 3 (verify), and the draft
        # time per draft of depth 3.
        for k in (1, 2):
            assert t.extras[n, k] == {"samples": 0, "source": "depth-fit"}
            want = t.cell(n, 0).verify_ms + k / 3 * (t.cell(n, 3).verify_ms - t.cell(n, 0).verify_ms)
            assert t.cell(n, k).verify_ms == pytest.approx(want)
            assert t.cell(n, k).draft_ms == pytest.approx(t.cell(n, 3).draft_ms * k / 3)
        assert t.cell(n, 0).draft_ms == 0.0
    # The draft share of the iteration is the draft time.
    lat = verify_ms(4, 3) / (1 - draft_share(3))
    assert t.cell(4, 3).draft_ms == pytest.approx(lat * draft_share(3), abs=0.05)
    assert "linear in width" in t.meta["fit"]


def test_snake_case_reads_as_camel_case(tmp_path):
    camel = import_table([trtllm_file(tmp_path, grid_docs(), "a.jsonl")], "trtllm-iterations", KEY, power_w=300.0)
    snake = import_table([trtllm_file(tmp_path, grid_docs(snake=True), "b.jsonl")], "trtllm-iterations", KEY,
                         power_w=300.0)
    np.testing.assert_array_equal(camel.table.costs, snake.table.costs)


def test_a_single_json_array_reads_too(tmp_path):
    path = tmp_path / "metrics.json"
    path.write_text(json.dumps(grid_docs(), indent=1))
    t = import_table([path], "trtllm-iterations", KEY, power_w=300.0).table
    assert t.widths.tolist() == [1, 4, 16]


def test_cells_with_too_few_samples_are_refused_and_widths_filled(tmp_path):
    docs = grid_docs(widths=(1, 16), depths=(0, 2)) + [iteration(500 + j, 8, 2) for j in range(MIN_CELL_SAMPLES - 1)]
    docs += [iteration(600 + j, 8, 0) for j in range(MIN_CELL_SAMPLES)]
    fitted = import_table([trtllm_file(tmp_path, docs)], "trtllm-iterations", KEY, power_w=300.0)
    t = fitted.table
    assert fitted.refused == [(8, 2, MIN_CELL_SAMPLES - 1)]
    assert "n=8 k=2 (4 samples)" in t.meta["refused_cells"]
    assert t.extras[8, 0]["source"] == "measured" and t.extras[8, 2] == {"samples": 0, "source": "width-fit"}
    # Linear between the observed widths 1 and 16 at depth 2.
    want = t.cell(1, 2).verify_ms + (8 - 1) / 15 * (t.cell(16, 2).verify_ms - t.cell(1, 2).verify_ms)
    assert t.cell(8, 2).verify_ms == pytest.approx(want)


@pytest.mark.parametrize("doc,message", [
    (iteration(7, 4, 0, latency=-1.0), "iterLatencyMS = -1.0 is not a latency"),
    (iteration(7, 4, 0, latency=float("nan")), "iterLatencyMS = nan is not a latency"),
    (iteration(7, 4, 2, numRequestsWithDraftTokens=5), "numRequestsWithDraftTokens = 5 exceeds numGenRequests = 4"),
    (iteration(7, 4, 2, numDraftTokens=7), "is not a whole number of drafts per request"),
    (iteration(7, 4, 2, numAcceptedTokens=99), "numAcceptedTokens = 99 exceeds"),
    (iteration(7, 4, 2, draftOverhead=None), "draftOverhead = None"),
    ({"iter": 7, "iterLatencyMS": 5.0}, "numGenRequests"),
])
def test_bad_iterations_are_refused_naming_file_and_line(tmp_path, doc, message):
    path = trtllm_file(tmp_path, grid_docs() + [doc])
    line = len(grid_docs()) + 1
    with pytest.raises(TableError) as e:
        import_table([path], "trtllm-iterations", KEY, power_w=300.0)
    assert message in str(e.value) and f"{path}:{line}" in str(e.value)


def test_a_file_of_prefill_iterations_only_is_refused(tmp_path):
    path = trtllm_file(tmp_path, [iteration(i, 4, 0, ctx=256) for i in range(10)])
    with pytest.raises(TableError, match="no decode iterations.*10 prefill or mixed iterations"):
        import_table([path], "trtllm-iterations", KEY, power_w=300.0)
    with pytest.raises(TableError, match="no TensorRT-LLM iteration stats"):
        trtllm_samples('{"hello": 1}', "x.json")


def test_speculative_iterations_without_plain_decode_are_refused(tmp_path):
    path = trtllm_file(tmp_path, grid_docs(depths=(3,)))
    with pytest.raises(TableError, match="no plain-decode \\(depth 0\\) cell"):
        import_table([path], "trtllm-iterations", KEY, power_w=300.0)
    # A plain run beside it completes the table.
    plain = trtllm_file(tmp_path, grid_docs(depths=(0,)), "plain.jsonl")
    t = import_table([path, plain], "trtllm-iterations", KEY, power_w=300.0).table
    assert t.max_k == 3 and t.meta["imported_from"] == "iters.jsonl, plain.jsonl"


# -- SGLang ---------------------------------------------------------------------------------------
def decode_line(n, ms, extra=""):
    return (f"[2025-06-01 10:00:00] Decode batch, #running-req: {n}, #token: {n * 900}, token usage: 0.05, "
            f"{extra}cuda graph: True, gen throughput (token/s): {1000.0 * n / ms:.2f}, #queue-req: 0")


def test_sglang_decode_lines_fit_plain_decode_cells(tmp_path):
    lines = []
    for n in (1, 8, 32):
        for _ in range(6):
            lines.append(decode_line(n, verify_ms(n, 0)))
    lines.insert(3, "[2025-06-01 10:00:00] Prefill batch, #new-seq: 1, #new-token: 812, #cached-token: 0")
    lines.append(decode_line(8, 30.0, "accept len: 2.50, "))
    path = tmp_path / "server.log"
    path.write_text("\n".join(lines) + "\n")
    fitted = import_table([path], "sglang-log", KEY, power_w=400.0)
    t = fitted.table
    assert t.widths.tolist() == [1, 8, 32] and t.max_k == 0
    assert t.extras[1, 0] == {"samples": 5, "source": "measured"}  # the line after the prefill is kept apart
    assert fitted.kept_apart == {"idle lines (0 running requests or 0 gen throughput)": 0,
                                 "intervals with a prefill batch": 1, "speculative lines (depth not logged)": 1}
    for n in (1, 8, 32):
        assert t.cell(n, 0).verify_ms == pytest.approx(verify_ms(n, 0), rel=1e-3)
    assert t.meta["steps_per_sample"] == 40


def test_sglang_refusals(tmp_path):
    bad = decode_line(4, 10.0).replace("gen throughput (token/s): 400.00", "gen throughput (token/s): nan")
    with pytest.raises(TableError, match=r"x.log:2: gen throughput \(token/s\) = nan"):
        sglang_samples(decode_line(4, 10.0) + "\n" + bad + "\n", "x.log")
    with pytest.raises(TableError, match="no SGLang `Decode batch` line"):
        sglang_samples("hello\n", "x.log")
    spec_only = tmp_path / "spec.log"
    spec_only.write_text("\n".join(decode_line(4, 10.0, "accept len: 2.00, ") for _ in range(8)) + "\n")
    with pytest.raises(TableError, match="no decode iterations.*8 speculative lines"):
        import_table([spec_only], "sglang-log", KEY, power_w=300.0)


# -- CLI ------------------------------------------------------------------------------------------
def test_cli_imports_telemetry_and_refuses_without_writing(tmp_path, capsys):
    path = trtllm_file(tmp_path, grid_docs())
    out = tmp_path / "t.toml"
    base = ["table", "import", str(path), "--from", "trtllm-iterations", "--box-class", "h100-sxm", "--recipe",
            "llama-3.1-8b/eagle3-bf16", "-o", str(out)]
    assert main(base) == 2
    assert "--assume-power-w" in capsys.readouterr().err and not out.exists()
    assert main(base + ["--assume-power-w", "450"]) == 0
    said = capsys.readouterr().out
    assert "6 measured cells" in said and "joules assumed at 450 W" in said
    t = CostTable.load(out)
    assert t.meta["energy_source"] == "assumed" and t.extras[4, 3]["samples"] == 6
    assert main(["table", "check", str(out)]) == 0
    capsys.readouterr()
    bad = trtllm_file(tmp_path, grid_docs() + [iteration(9, 4, 0, latency=-2.0)], "bad.jsonl")
    out2 = tmp_path / "t2.toml"
    assert main(["table", "import", str(bad), "--from", "trtllm-iterations", "--box-class", "b", "--recipe", "r",
                 "--assume-power-w", "450", "-o", str(out2)]) == 2
    err = capsys.readouterr().err
    assert f"{bad}:{len(grid_docs()) + 1}" in err and "Traceback" not in err and not out2.exists()


def test_joules_from_an_nvml_log(tmp_path, capsys):
    from specsim.measure.engine_tables import nvml_log_power_w

    log = tmp_path / "power.csv"
    log.write_text("timestamp, index, power.draw [W]\n"
                   "2025/06/01 10:00:00.000, 0, 300.00 W\n2025/06/01 10:00:00.000, 1, 200.00 W\n"
                   "2025/06/01 10:00:00.100, 0, 340.00 W\n2025/06/01 10:00:00.100, 1, 260.00 W\n")
    assert nvml_log_power_w(log) == (550.0, 2, 2)
    path = trtllm_file(tmp_path, grid_docs())
    t = import_table([path], "trtllm-iterations", KEY, nvml_log=log).table
    assert t.meta["energy_source"] == "nvml-log-mean" and t.meta["power_log_w"] == 550.0
    assert "assumed_power_w" not in t.meta
    c = t.cell(4, 3)
    assert c.verify_j == pytest.approx(c.verify_ms * 1e-3 * 550.0)
    with pytest.raises(TableError, match="one of --assume-power-w W and --nvml-log"):
        import_table([path], "trtllm-iterations", KEY, power_w=100.0, nvml_log=log)
    bad = tmp_path / "bad.csv"
    bad.write_text("timestamp, power.draw [W]\n2025/06/01 10:00:00.000, [N/A]\n")
    with pytest.raises(TableError, match=r"bad.csv:2: power.draw = '\[N/A\]'"):
        nvml_log_power_w(bad)
    out = tmp_path / "t.toml"
    assert main(["table", "import", str(path), "--from", "trtllm-iterations", "--box-class", "b", "--recipe", "r",
                 "--nvml-log", str(log), "-o", str(out)]) == 0
    assert "mean 550.0 W" in capsys.readouterr().out
    assert CostTable.load(out).meta["power_log"] == "power.csv"


# -- what a line may hold: refused where it is read ------------------------------------------------
def import_trtllm(path, **kw):
    return import_table([path], "trtllm-iterations", KEY, **({"power_w": 300.0} | kw))


def test_unreadable_and_non_object_lines_are_refused_naming_each_line(tmp_path):
    path = tmp_path / "iters.jsonl"
    good = "\n".join(json.dumps(d) for d in grid_docs())
    path.write_text(good + '\n{"iter": 7, "iterLat\n[1, 2, 3]\n42\n"x"\n[]\n')
    first = len(grid_docs()) + 1
    with pytest.raises(TableError) as e:
        import_trtllm(path)
    said = str(e.value)
    assert "(4 problems)" in said
    assert f"{path}:{first}: not a JSON value" in said
    assert f"{path}:{first + 1}: a JSON array of non-objects" in said
    assert f"{path}:{first + 2}: a bare JSON number" in said
    assert f"{path}:{first + 3}: a bare JSON string" in said
    # An empty scrape (an idle serve's `[]`) is no problem.
    path.write_text(good + "\n[]\n")
    assert import_trtllm(path).table.widths.tolist() == [1, 4, 16]


def test_cli_refuses_a_truncated_line_without_writing(tmp_path, capsys):
    path = tmp_path / "iters.jsonl"
    path.write_text("\n".join(json.dumps(d) for d in grid_docs()) + '\n{"iter": 7, "iterLat')
    out = tmp_path / "t.toml"
    assert main(["table", "import", str(path), "--from", "trtllm-iterations", "--box-class", "b", "--recipe", "r",
                 "--assume-power-w", "300", "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert f"{path}:{len(grid_docs()) + 1}: not a JSON value" in err and "Traceback" not in err
    assert not out.exists()


def test_a_refusal_counts_its_problems(tmp_path):
    path = trtllm_file(tmp_path, grid_docs() + [iteration(900 + j, 4, 0, latency=-1.0) for j in range(20)])
    with pytest.raises(TableError) as e:
        import_trtllm(path)
    assert "the iteration stats are refused (20 problems)" in str(e.value) and len(e.value.problems) == 20


def with_batch(doc, **fields):
    doc["inflightBatchingStats"] |= fields
    return doc


def with_spec(doc, **fields):
    doc["specDecodingStats"] |= fields
    return doc


@pytest.mark.parametrize("doc,message", [
    (with_batch(iteration(7, 4, 0), numGenRequests="4"), "numGenRequests = '4' is not a count"),
    (with_batch(iteration(7, 4, 0), numGenRequests=True), "numGenRequests = True is not a count"),
    (with_batch(iteration(7, 4, 0), numContextRequests="0"), "numContextRequests = '0' is not a count"),
    (with_batch(iteration(7, 4, 0), numScheduledRequests=4.5), "numScheduledRequests = 4.5 is not a count"),
    (with_spec(iteration(7, 4, 2), numDraftTokens="8"),
     "specDecodingStats needs numDraftTokens, numAcceptedTokens and numRequestsWithDraftTokens as JSON whole numbers "
     ">= 0 (numDraftTokens = '8', numAcceptedTokens = 4, numRequestsWithDraftTokens = 4)"),
    (with_spec(iteration(7, 4, 2), numRequestsWithDraftTokens=False),
     "specDecodingStats needs numDraftTokens, numAcceptedTokens and numRequestsWithDraftTokens as JSON whole numbers "
     ">= 0 (numDraftTokens = 8, numAcceptedTokens = 4, numRequestsWithDraftTokens = False)"),
    (iteration(7, 4, 0, latency="12"), "iterLatencyMS = '12' is not a latency"),
    (iteration(7, 4, 0, latency=True), "iterLatencyMS = True is not a latency"),
])
def test_numeric_fields_must_be_json_numbers(tmp_path, doc, message):
    path = trtllm_file(tmp_path, grid_docs() + [doc])
    with pytest.raises(TableError) as e:
        import_trtllm(path)
    assert f"{path}:{len(grid_docs()) + 1} (iter 7): {message}" in str(e.value)


@pytest.mark.parametrize("doc,message", [
    (iteration(7, 4, 0, latency=1e308),
     "iterLatencyMS = 1e+308 is not a latency (a JSON number of ms in 1e-06..8.64e+07)"),
    (iteration(7, 4, 0, latency=1e-320), "iterLatencyMS = 1e-320 is not a latency"),
    (iteration(7, 4, 0, latency=86_400_001.0), "iterLatencyMS = 86400001.0 is not a latency"),
    (iteration(7, 4, 300),
     "numDraftTokens / numRequestsWithDraftTokens = 300 drafts per request is beyond the deepest depth a table "
     "holds (255)"),
    (iteration(7, 1 << 21, 0), f"numGenRequests = {1 << 21} is not a count (a JSON whole number in 0..1,048,576"),
    (iteration(7, 4, 2, draftOverhead=0.0), "draftOverhead = 0.0: an iteration that drafts needs the share"),
    (iteration(7, 4, 2, draftOverhead=1e-300), "iterLatencyMS x draftOverhead (draft time) = "),
])
def test_extreme_values_are_refused_at_their_line(tmp_path, doc, message):
    path = trtllm_file(tmp_path, grid_docs() + [doc] * 6)
    line = len(grid_docs()) + 1
    with pytest.raises(TableError) as e:
        import_trtllm(path)
    said = str(e.value)
    assert f"{path}:{line} (iter 7): {message}" in said
    assert "cells[" not in said and len(said.splitlines()) == 1 + 6


def test_extreme_latencies_reach_the_user_without_numpy_warnings(tmp_path, capsys):
    path = trtllm_file(tmp_path, grid_docs() + [iteration(7, 4, 0, latency=1e308)] * 6)
    out = tmp_path / "t.toml"
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert main(["table", "import", str(path), "--from", "trtllm-iterations", "--box-class", "b", "--recipe",
                     "r", "--assume-power-w", "300", "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert f"{path}:{len(grid_docs()) + 1} (iter 7): iterLatencyMS = 1e+308" in err
    assert "RuntimeWarning" not in err and "cells[" not in err and not out.exists()


def test_nvml_readings_and_mean_are_bounded(tmp_path):
    from specsim.measure.engine_tables import nvml_log_power_w

    path = trtllm_file(tmp_path, grid_docs())
    log = tmp_path / "power.csv"
    log.write_text("timestamp, index, power.draw [W]\n2025/06/01 10:00:00.000, 0, 300.00 W\n"
                   "2025/06/01 10:00:00.000, 1, 1e308 W\n2025/06/01 10:00:00.100, 0, 1000001 W\n")
    with pytest.raises(TableError) as e:
        import_trtllm(path, power_w=None, nvml_log=log)
    said = str(e.value)
    assert f"{log}:3: power.draw = '1e308 W' is not a power (watts in 0..1e+06" in said
    assert f"{log}:4: power.draw = '1000001 W'" in said and "cells[" not in said
    log.write_text("timestamp, index, power.draw [W]\n2025/06/01 10:00:00.000, 0, 0.00 W\n")
    with pytest.raises(TableError, match=r"mean board power 0 W is outside 0.001..1e\+06 W"):
        nvml_log_power_w(log)
    log.write_text("timestamp, index, power.draw [W]\n2025/06/01 10:00:00.000, 0, 1000000 W\n"
                   "2025/06/01 10:00:00.000, 1, 50 W\n")
    with pytest.raises(TableError, match="mean board power 1.00005e\\+06 W is outside"):
        nvml_log_power_w(log)


@pytest.mark.parametrize("watts,ok", [(1e-320, False), (0.0, False), (-5.0, False), (MIN_POWER_W, True),
                                      (MAX_POWER_W, True), (MAX_POWER_W * 1.01, False)])
def test_assumed_power_is_bounded_at_both_ends(tmp_path, watts, ok):
    path = trtllm_file(tmp_path, grid_docs())
    if ok:
        t = import_trtllm(path, power_w=watts).table
        assert np.isfinite(t.costs).all() and (t.costs[:, 0, 1] > 0).all()
    else:
        with pytest.raises(TableError) as e:
            import_trtllm(path, power_w=watts)
        assert f"must be >= {MIN_POWER_W:g} and <= {MAX_POWER_W:g} W" in str(e.value)


def test_cli_refuses_a_vanishing_assumed_power(tmp_path, capsys):
    path = trtllm_file(tmp_path, grid_docs())
    out = tmp_path / "t.toml"
    assert main(["table", "import", str(path), "--from", "trtllm-iterations", "--box-class", "b", "--recipe", "r",
                 "--assume-power-w", "1e-320", "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert "--assume-power-w = 1e-320 must be >= 0.001" in err and "Traceback" not in err and not out.exists()


# -- SGLang lines ---------------------------------------------------------------------------------
def test_sglang_idle_lines_are_counted_as_kept_apart(tmp_path):
    idle = decode_line(4, 10.0).replace("gen throughput (token/s): 400.00", "gen throughput (token/s): 0.00")
    nobody = decode_line(0, 10.0).replace("gen throughput (token/s): nan", "gen throughput (token/s): 0.00")
    lines = [decode_line(4, 10.0)] * 6 + [idle, idle, nobody]
    path = tmp_path / "server.log"
    path.write_text("\n".join(lines) + "\n")
    fitted = import_table([path], "sglang-log", KEY, power_w=300.0)
    assert fitted.kept_apart["idle lines (0 running requests or 0 gen throughput)"] == 3
    assert fitted.table.meta["kept_apart_idle_lines"] == 3
    path.write_text("\n".join([idle] * 8) + "\n")
    with pytest.raises(TableError, match=r"no decode iterations.*kept apart: 8 idle lines"):
        import_table([path], "sglang-log", KEY, power_w=300.0)


@pytest.mark.parametrize("running,message", [
    ("-4", "#running-req = -4 is not a batch width (a whole number in 0..1,048,576)"),
    ("99999999999999999999", "#running-req = 99999999999999999999 is not a batch width"),
    (str((1 << 20) + 1), f"#running-req = {(1 << 20) + 1} is not a batch width"),
    ("4.5", "#running-req = 4.5 is not a batch width"),
])
def test_sglang_running_requests_out_of_range(running, message):
    bad = decode_line(4, 10.0).replace("#running-req: 4,", f"#running-req: {running},")
    with pytest.raises(TableError) as e:
        sglang_samples(decode_line(4, 10.0) + "\n" + bad + "\n", "x.log")
    assert f"x.log:2: {message}" in str(e.value) and "without #running-req" not in str(e.value)


@pytest.mark.parametrize("throughput,message", [
    ("1e-300", "#running-req 4 at gen throughput (token/s) 1e-300 is a step of 4e+303 ms, outside 1e-06..8.64e+07"),
    ("1e308", "#running-req 4 at gen throughput (token/s) 1e308 is a step of 4e-305 ms, outside"),
    ("1..2", "gen throughput (token/s) = 1..2 is not a throughput"),
])
def test_sglang_steps_out_of_range_are_refused_at_their_line(throughput, message):
    bad = decode_line(4, 10.0).replace("gen throughput (token/s): 400.00", f"gen throughput (token/s): {throughput}")
    with pytest.raises(TableError) as e:
        sglang_samples(decode_line(4, 10.0) + "\n" + bad + "\n", "x.log")
    assert f"x.log:2: {message}" in str(e.value)


# -- values past the floats, malformed text, blocks of the wrong kind, fields given twice ---------
def import_cli(path, fmt, out):
    return main(["table", "import", str(path), "--from", fmt, "--box-class", "b", "--recipe", "r",
                 "--assume-power-w", "300", "-o", str(out)])


@pytest.mark.parametrize("doc,message", [
    (iteration(7, 4, 0, latency=10 ** 400), "iterLatencyMS = 1000"),
    (iteration(7, 4, 0, latency=-10 ** 400), "iterLatencyMS = -1000"),
    (iteration(7, 4, 0, snake=True, latency=10 ** 400), "iter_latency_ms = 1000"),
    (with_batch(iteration(7, 4, 0), numGenRequests=10 ** 400), "numGenRequests = 1000"),
    (with_spec(iteration(7, 4, 2), numDraftTokens=10 ** 400), "specDecodingStats needs numDraftTokens"),
    (with_spec(iteration(7, 4, 2), draftOverhead=10 ** 400), "draftOverhead = 1000"),
])
def test_integers_past_the_floats_are_refused_at_their_line(tmp_path, capsys, doc, message):
    path = trtllm_file(tmp_path, grid_docs() + [doc])
    out = tmp_path / "t.toml"
    assert import_cli(path, "trtllm-iterations", out) == 2
    err = capsys.readouterr().err
    assert f"{path}:{len(grid_docs()) + 1} (iter 7): {message}" in err
    assert "Traceback" not in err and "OverflowError" not in err and not out.exists()


@pytest.mark.parametrize("throughput", ["800_000", "0x10", "-0.0", "+400", "infinity", "nan", "400.00x",
                                        "\uff14\uff10\uff10", "4\u0660\u0660", "1e", ""])
def test_sglang_throughput_is_read_whole_or_refused(tmp_path, capsys, throughput):
    bad = decode_line(4, 10.0).replace("gen throughput (token/s): 400.00", f"gen throughput (token/s): {throughput}")
    path = tmp_path / "server.log"
    path.write_text("\n".join([decode_line(4, 10.0)] * 6 + [bad]) + "\n")
    out = tmp_path / "t.toml"
    assert import_cli(path, "sglang-log", out) == 2
    err = capsys.readouterr().err
    assert f"{path}:7: gen throughput (token/s) = " in err and "is not a throughput" in err and not out.exists()


@pytest.mark.parametrize("throughput", ["400", "400.00", "4e2", "400.", "0.00"])
def test_sglang_plain_decimal_throughputs_read(throughput):
    line = decode_line(4, 10.0).replace("gen throughput (token/s): 400.00", f"gen throughput (token/s): {throughput}")
    s = sglang_samples("\n".join([decode_line(4, 10.0), line]) + "\n", "x.log")
    assert len(s.decode) + s.kept_apart["idle lines (0 running requests or 0 gen throughput)"] == 2


@pytest.mark.parametrize("name", ["specDecodingStats", "spec_decoding_stats"])
@pytest.mark.parametrize("value", [[1], [], "x", 5, True])
def test_spec_decoding_stats_that_are_not_an_object_are_refused(tmp_path, name, value):
    doc = iteration(7, 4, 0) | {name: value}
    path = trtllm_file(tmp_path, grid_docs() + [doc])
    with pytest.raises(TableError) as e:
        import_trtllm(path)
    assert f"{path}:{len(grid_docs()) + 1} (iter 7): {name} = {value!r} is not an object" in str(e.value)
    # null is how an iteration without speculation may write the block: a plain sample.
    path = trtllm_file(tmp_path, grid_docs() + [iteration(7, 4, 0) | {name: None}])
    assert import_trtllm(path).table.extras[4, 0]["samples"] == 7


@pytest.mark.parametrize("doc,message", [
    (iteration(7, 4, 0) | {"iter_latency_ms": 1e12}, "iterLatencyMS = "),
    (with_batch(iteration(7, 4, 0), num_gen_requests=16), "numGenRequests = 4 and num_gen_requests = 16 disagree"),
    (with_batch(iteration(7, 4, 0), num_gen_requests=True), "numGenRequests = 4 and num_gen_requests = True"),
    (with_spec(iteration(7, 4, 2), draft_overhead=0.9), "draftOverhead = 0.16"),
    (iteration(7, 4, 0) | {"inflight_batching_stats": {"numGenRequests": 8}}, "inflightBatchingStats = "),
])
def test_a_field_in_both_spellings_that_disagree_is_refused(tmp_path, doc, message):
    path = trtllm_file(tmp_path, grid_docs() + [doc])
    with pytest.raises(TableError) as e:
        import_trtllm(path)
    said = str(e.value)
    assert f"{path}:{len(grid_docs()) + 1} (iter 7): {message}" in said and "disagree" in said


def test_a_field_in_both_spellings_that_agree_reads(tmp_path):
    doc = with_batch(iteration(7, 4, 0, latency=7.0), num_gen_requests=4.0) | {"iter_latency_ms": 7}
    path = trtllm_file(tmp_path, grid_docs() + [doc])
    assert import_trtllm(path).table.extras[4, 0]["samples"] == 7


@pytest.mark.parametrize("line,field", [
    ("Decode batch, #running-req: 4, #running-req: 8, gen throughput (token/s): 100.00", "#running-req"),
    ("Decode batch, #running-req: 4, gen throughput (token/s): 100.00, gen throughput (token/s): 1e-9",
     "gen throughput (token/s)"),
    ("Decode batch, #running-req: 4, gen throughput (token/s): 100.00, gen throughput (token/s): 100.00",
     "gen throughput (token/s)"),
])
def test_sglang_lines_with_a_field_twice_are_refused(line, field):
    with pytest.raises(TableError) as e:
        sglang_samples("\n".join([decode_line(4, 10.0), line]) + "\n", "x.log")
    assert f"x.log:2: a Decode batch line with {field} more than once" in str(e.value)


# -- iteration stats as TensorRT-LLM writes them ------------------------------------------------
# A made-up engine whose step follows known engine parameters: a fixed part, a part per verify
# row, a part per KV token read, a part per draft pass and one per draft row.
ENGINE = {"per_step_ms": 4.0, "per_verify_row_ms": 0.02, "per_kv_token_ms": 2e-5, "per_draft_pass_ms": 0.6,
          "per_draft_row_ms": 0.004}


def engine_verify_ms(n, k, context):
    return ENGINE["per_step_ms"] + ENGINE["per_verify_row_ms"] * n * (k + 1) + ENGINE["per_kv_token_ms"] * n * context


def engine_draft_ms(n, k):
    return k * (ENGINE["per_draft_pass_ms"] + ENGINE["per_draft_row_ms"] * n)


def real_iteration(i, n, k, context, *, snake=False, spec_block=True):
    """One iteration as the engine writes it: every top-level field of `_update_iter_stats`, the
    batch with its KV tokens, and a specDecodingStats block with its own (draft) iterLatencyMS,
    all zeros in an iteration without drafts."""
    draft = engine_draft_ms(n, k)
    latency = engine_verify_ms(n, k, context) + draft
    doc = {"timestamp": f"12-06-2026 10:00:{i % 60:02d}", "iter": i, "iterLatencyMS": latency,
           "newActiveRequestsQueueLatencyMS": 0.01, "numNewActiveRequests": 0, "numActiveRequests": n,
           "numQueuedRequests": 0, "numCompletedRequests": 0, "maxNumActiveRequests": 256,
           "gpuMemUsage": 70_000_000_000, "cpuMemUsage": 0, "pinnedMemUsage": 0,
           "kvCacheStats": {"maxNumBlocks": 9000, "freeNumBlocks": 8000, "usedNumBlocks": 1000, "tokensPerBlock": 32,
                            "allocTotalBlocks": 1000, "allocNewBlocks": 0, "reusedBlocks": 0, "missedBlocks": 0,
                            "cacheHitRate": 0.0},
           "inflightBatchingStats": {"numScheduledRequests": n, "numContextRequests": 0, "numGenRequests": n,
                                     "numPausedRequests": 0, "numCtxTokens": 0, "microBatchId": 0,
                                     "avgNumDecodedTokensPerIter": 1.0 + k / 2, "numGenKvTokens": n * context}}
    if spec_block:
        doc["specDecodingStats"] = {"numDraftTokens": n * k, "numAcceptedTokens": n * k // 2,
                                    "numRequestsWithDraftTokens": n if k else 0,
                                    "acceptanceLength": 1.0 + k / 2 if k else 0.0,
                                    "iterLatencyMS": draft, "draftOverhead": draft / latency}
    return snake_case(doc) if snake else doc


def snake_case(value):
    if isinstance(value, dict):
        out = {}
        for key, v in value.items():
            key = {"iterLatencyMS": "iter_latency_ms", "newActiveRequestsQueueLatencyMS":
                   "new_active_requests_queue_latency_ms"}.get(key, key)
            out["".join("_" + c.lower() if c.isupper() else c for c in key)] = snake_case(v)
        return out
    return value


CONTEXTS = (1000, 1500, 2000)  # every cell's samples, symmetric about 1500


def real_docs(snake=False, widths=(1, 8, 32, 64), depths=(0, 1, 3)):
    docs, i = [], 0
    for n in widths:
        for k in depths:
            for rep in range(2 * len(CONTEXTS)):
                i += 1
                # Plain iterations come with and without the (all-zero) draft block.
                docs.append(real_iteration(i, n, k, CONTEXTS[rep % len(CONTEXTS)], snake=snake,
                                           spec_block=bool(k) or rep % 2 == 0))
    return docs


@pytest.mark.parametrize("snake", [False, True])
@pytest.mark.parametrize("layout", ["jsonl", "array"])
def test_real_iteration_stats_fit_the_latency_model_that_made_them(tmp_path, snake, layout):
    docs = real_docs(snake=snake)
    path = tmp_path / f"iters.{layout}"
    path.write_text(json.dumps(docs, indent=2) if layout == "array" else "\n".join(map(json.dumps, docs)) + "\n")
    t = import_table([path], "trtllm-iterations", KEY, power_w=400.0).table
    assert t.widths.tolist() == [1, 8, 32, 64] and t.max_k == 3
    for n in (1, 8, 32, 64):
        for k in (0, 1, 3):
            c = t.cell(n, k)
            assert t.extras[n, k]["source"] == "measured"
            assert c.verify_ms == pytest.approx(engine_verify_ms(n, k, 1500), rel=0.05)
            assert c.draft_ms == pytest.approx(engine_draft_ms(n, k), rel=0.05)
    # The import says how well it fits, and the engine parameters it fits are the ones that made
    # the steps.
    assert t.meta["cell_residual_median"] < 0.05 and t.meta["step_model_residual_p90"] < 1e-6
    for name, value in ENGINE.items():
        assert t.meta["step_model_" + name] == pytest.approx(value, rel=0.05)


def test_the_draft_blocks_own_latency_is_the_draft_time(tmp_path):
    # Without draftOverhead, the block's iterLatencyMS alone splits the iteration.
    docs = real_docs()
    for d in docs:
        d.get("specDecodingStats", {}).pop("draftOverhead", None)
    t = import_table([trtllm_file(tmp_path, docs)], "trtllm-iterations", KEY, power_w=400.0).table
    assert t.cell(8, 3).draft_ms == pytest.approx(engine_draft_ms(8, 3))


@pytest.mark.parametrize("spec,message", [
    ({"draftOverhead": 0.5}, "disagrees with draftOverhead x iterLatencyMS"),
    ({"iterLatencyMS": 1e9}, "specDecodingStats.iterLatencyMS (the draft's time) = 1000000000.0 is not a latency"),
    ({"iterLatencyMS": 99.0}, "is not below the iteration's iterLatencyMS"),
    ({"iterLatencyMS": None, "draftOverhead": None}, "draftOverhead = None"),
])
def test_a_draft_time_that_does_not_hold_is_refused(tmp_path, spec, message):
    doc = real_iteration(999, 8, 3, 1000)
    doc["specDecodingStats"].update(spec)
    docs = real_docs() + [doc]
    with pytest.raises(TableError) as e:
        import_table([trtllm_file(tmp_path, docs)], "trtllm-iterations", KEY, power_w=400.0)
    assert message in str(e.value) and f":{len(docs)} (iter 999)" in str(e.value)


def test_a_plain_serve_fits_no_draft_or_kv_parameters(tmp_path):
    # Without drafts and without KV counts, only the fixed and per-row parts can be told apart.
    docs = grid_docs(widths=(1, 16, 64), depths=(0,))
    t = import_table([trtllm_file(tmp_path, docs)], "trtllm-iterations", KEY, power_w=400.0).table
    assert t.meta["step_model_per_step_ms"] == pytest.approx(6.0, rel=0.02)
    assert t.meta["step_model_per_verify_row_ms"] == pytest.approx(0.05, rel=0.05)
    assert not any(k in t.meta for k in ("step_model_per_kv_token_ms", "step_model_per_draft_pass_ms"))
    assert t.meta["step_model"].startswith("verify_ms = ")


def test_cli_says_how_well_the_import_fits(tmp_path, capsys):
    path = trtllm_file(tmp_path, real_docs())
    out = tmp_path / "t.toml"
    assert main(["table", "import", str(path), "--from", "trtllm-iterations", "--box-class", "h100-sxm", "--recipe",
                 "r", "--assume-power-w", "400", "-o", str(out)]) == 0
    text = capsys.readouterr().out
    assert "fit: samples lie a median" in text and "per draft pass" in text
    assert "step_model_per_draft_pass_ms" in out.read_text()


@pytest.mark.parametrize("snake", [False, True], ids=["camelCase", "snake_case"])
def test_a_telemetry_iteration_with_no_iterlatencyms_is_dropped_silently(tmp_path, snake):
    """Hostile input round four, case 16: an iteration (it holds its batching stats) without a
    latency was left out of the fit without a word; it is refused naming its line and iter."""
    docs = grid_docs(snake=snake)
    latency = "iter_latency_ms" if snake else "iterLatencyMS"
    broken = {k: v for k, v in iteration(77, 4, 0, snake=snake).items() if k != latency}
    path = trtllm_file(tmp_path, docs + [broken])
    batch = "inflight_batching_stats" if snake else "inflightBatchingStats"
    with pytest.raises(TableError, match=rf"iters.jsonl:{len(docs) + 1} \(iter 77\): an iteration with {batch} but "
                                         r"no iterLatencyMS \(iter_latency_ms\)"):
        import_trtllm(path)
