"""The per-request acceptance spread (docs/calibration.md#per-request-spread): the centres, the
fit and its interval, the calibration's table, the commands, and the engine's draws."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from specsim._checks import MAX_REQUEST_SPREAD, MIN_SPREAD_REQUESTS
from specsim.calibration import AcceptanceCalibration
from specsim.calibration._types import RequestSpread
from specsim.calibration.spread import (
    centres, drafts_data, fit_spread, positions_data, resolve_spread, steps_positions, totals_data,
)
from specsim.cli import main
from specsim.errors import CalibrationError
from specsim.sim import ServerOptions, parse_policy, simulate
from specsim.sim.engine import prepare
from specsim.sim.fleet import Fleet, simulate_fleet
from tests import reference_engine as ref
from tests.fixtures import ROOT, random_requests, small_calibration, small_table, with_spread
from tests.sim.test_engine import assert_matches_reference, run_reference

DRAFTER = ["--drafter-sha256", "ab" * 32, "--vocab", "9", "--quantization", "bf16", "--context", "true"]
RATES = (0.8, 0.7, 0.6, 0.55)


def population(sd, requests=300, steps=40, rates=RATES, seed=1):
    """Per-request chains of ``len(rates)`` drafts: request ``r`` accepts position ``j`` with
    ``sigmoid(c_j + sd z_r)``, ``c_j`` the centre of ``rates[j]``. Returns each request's
    ``(drafts, accepted run) -> count`` steps."""
    rng = np.random.default_rng(seed)
    c = centres(np.array(rates), sd)
    out = []
    for _ in range(requests):
        q = 1.0 / (1.0 + np.exp(-(c + sd * rng.standard_normal())))
        steps_of = {}
        for _ in range(steps):
            a = 0
            while a < len(rates) and rng.random() < q[a]:
                a += 1
            steps_of[(len(rates), a)] = steps_of.get((len(rates), a), 0) + 1
        out.append(steps_of)
    return out


def as_data(pop):
    rows = [steps_positions(s, len(RATES)) for s in pop]
    return positions_data([n for n, _ in rows], [a for _, a in rows])


# -- the centres -------------------------------------------------------------------------------------

@pytest.mark.parametrize("sd", [0.0, 0.3, 1.5, MAX_REQUEST_SPREAD])
def test_centres_keep_the_population_mean(sd):
    p = np.array([0.001, 0.2, 0.5, 0.77, 0.999])
    c = centres(p, sd)
    z = np.linspace(-12, 12, 48001)
    w = np.exp(-0.5 * z ** 2)
    w /= w.sum()
    mean = [(w / (1.0 + np.exp(-(ci + sd * z)))).sum() for ci in c]
    assert np.allclose(mean, p, atol=1e-9, rtol=0)
    assert centres([0.0, 1.0], sd).tolist() == [-math.inf, math.inf]
    if sd == 0.0:
        assert np.allclose(c, np.log(p / (1 - p)))


# -- the fit ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("sd", [0.8, 1.5])
def test_fit_recovers_a_known_spread_within_its_interval(sd):
    fit = fit_spread(as_data(population(sd)))
    lo, hi = fit.interval
    assert lo < sd < hi and lo < fit.spread.logit_sd < hi
    assert fit.spread.requests == 300 and fit.spread.standard_error == pytest.approx((hi - lo) / 3.92, abs=1e-4)
    assert hi - lo < 0.5


def test_no_spread_gives_an_interval_holding_zero():
    fit = fit_spread(as_data(population(0.0, seed=4)))
    assert fit.interval[0] == 0.0 and fit.spread.logit_sd < fit.interval[1] < 0.3


def test_totals_fit_recovers_a_constant_rate_spread():
    """Totals only (accepted drafts per step): the normal approximation, one rate at every position."""
    pop = population(1.0, requests=200, steps=60, rates=(0.7,) * 3, seed=2)
    mean = [sum(a * c for (_, a), c in s.items()) / 60 for s in pop]
    fit = fit_spread(totals_data([60] * 200, mean, [3] * 200))
    lo, hi = fit.interval
    assert lo < 1.0 < hi


def test_too_few_requests_are_refused():
    data = as_data(population(0.8, requests=MIN_SPREAD_REQUESTS - 1))
    with pytest.raises(CalibrationError, match=f"29 request.*at least {MIN_SPREAD_REQUESTS}"):
        fit_spread(data)
    assert resolve_spread("auto", data)[0] is None and "at least 30" in resolve_spread("auto", data)[1]
    with pytest.raises(CalibrationError, match="--request-spread require: .*at least 30"):
        resolve_spread("require", data)
    assert resolve_spread("off", data) == (None, "")
    with pytest.raises(CalibrationError, match="no per-request"):
        resolve_spread("require", None, "no per-request data")


def test_per_draft_log_counts_reached_drafts_per_request():
    # request 7: chain (step 0) accepts 1 then rejects 2 (3 unreached); request 9: accepts both.
    req = [7, 7, 7, 9, 9, 7]
    step = [0, 0, 0, 1, 1, 2]
    seq = [0, 0, 0, 0, 0, 0]
    pos = [1, 2, 3, 1, 2, 1]
    acc = [1, 0, 1, 1, 1, 0]
    d = drafts_data(req, step, seq, pos, acc)
    assert d.reached.tolist() == [[2, 1, 0], [1, 1, 0]]
    assert d.accepted.tolist() == [[1, 0, 0], [1, 1, 0]]


# -- the calibration's table -------------------------------------------------------------------------

def test_table_round_trips_and_absent_means_none():
    cal = small_calibration()
    assert cal.spread is None and "request_spread" not in cal.render()
    sp = RequestSpread(0.75, 0.04, 120, "run.jsonl")
    text = cal.with_spread(sp).render()
    back = AcceptanceCalibration.parse(text)
    assert back.spread == sp and back == cal.with_spread(sp) and back != cal


@pytest.mark.parametrize("table, message", [
    ("logit_sd = 4.5\nstandard_error = 0.1\nrequests = 40\nsource = \"x\"", "logit_sd = 4.5 must be >= 0 and <= 4"),
    ("logit_sd = -0.1\nstandard_error = 0.1\nrequests = 40\nsource = \"x\"", "logit_sd = -0.1 must be >= 0"),
    ("logit_sd = nan\nstandard_error = 0.1\nrequests = 40\nsource = \"x\"", "logit_sd = nan must be finite"),
    ("logit_sd = \"big\"\nstandard_error = 0.1\nrequests = 40\nsource = \"x\"", "must be a number"),
    ("logit_sd = 0.5\nstandard_error = inf\nrequests = 40\nsource = \"x\"", "standard_error = inf must be finite"),
    ("logit_sd = 0.5\nstandard_error = 0.1\nrequests = 4.5\nsource = \"x\"", "requests = 4.5 must be a whole"),
    ("logit_sd = 0.5\nstandard_error = 0.1\nrequests = 40\nsource = 3", "source = 3 must be a string"),
    ("logit_sd = 0.5\nstandard_error = 0.1\nrequests = 40", "has no `source`"),
    ("logit_sd = 0.5\nstandard_error = 0.1\nrequests = 40\nsource = \"x\"\nsd = 1", "unknown key"),
])
def test_table_validation_names_the_problem(table, message):
    text = small_calibration().render() + "\n[request_spread]\n" + table + "\n"
    with pytest.raises(CalibrationError) as e:
        AcceptanceCalibration.parse(text, "cal.toml")
    assert "cal.toml" in str(e.value) and any(message in p for p in e.value.problems)


def test_a_table_that_is_not_a_table_is_refused():
    text = "request_spread = 3\n" + small_calibration().render()
    with pytest.raises(CalibrationError) as e:
        AcceptanceCalibration.parse(text)
    assert any("not a table" in p for p in e.value.problems)


def test_the_value_class_is_checked_too():
    with pytest.raises(CalibrationError, match="refused"):
        small_calibration().with_spread(RequestSpread(9.0, 0.1, 40, "x"))


# -- the commands ----------------------------------------------------------------------------------

def vllm_requests(path, pop):
    """vLLM per-request blocks: one JSON line per request with its accept-run histogram."""
    lines = []
    for i, s in enumerate(pop):
        k = max(d for d, _ in s)
        hist = [s.get((k, a), 0) for a in range(k + 1)]
        block = {"num_spec_tokens": k, "acceptance_histogram": hist, "num_spec_steps": sum(hist),
                 "num_draft_tokens": sum(hist) * k, "num_accepted_draft_tokens": sum(a * c for a, c in enumerate(hist))}
        lines.append(json.dumps({"id": f"r{i}", "metrics": {"speculative_decoding": block}}))
    path.write_text("\n".join(lines) + "\n")
    return path


def run(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_import_auto_require_off(tmp_path, capsys):
    big = vllm_requests(tmp_path / "big.jsonl", population(1.0, requests=120, seed=3))
    small = vllm_requests(tmp_path / "small.jsonl", population(1.0, requests=10, seed=3))
    out = tmp_path / "cal.toml"
    code, _, err = run(capsys, "calib", "import", big, *DRAFTER, "-o", out, "--request-spread", "auto")
    assert code == 0 and "request spread logit_sd" in err
    sp = AcceptanceCalibration.load(out).spread
    assert sp.requests == 120 and sp.source == "big.jsonl" and 0.5 < sp.logit_sd < 1.6
    code, show, _ = run(capsys, "calib", "show", out)
    assert code == 0 and f"request spread: logit_sd {sp.logit_sd:g} +- {sp.standard_error:g} from 120" in show
    code, show, _ = run(capsys, "calib", "show", out, "--json")
    assert json.loads(show)["request_spread"]["requests"] == 120
    code, _, _ = run(capsys, "calib", "import", big, *DRAFTER, "-o", out)  # off by default
    assert code == 0 and AcceptanceCalibration.load(out).spread is None
    code, _, err = run(capsys, "calib", "import", small, *DRAFTER, "-o", out, "--request-spread", "auto")
    assert code == 0 and "not fitted" in err and AcceptanceCalibration.load(out).spread is None
    code, _, err = run(capsys, "calib", "import", small, *DRAFTER, "-o", tmp_path / "no.toml",
                       "--request-spread", "require")
    assert code == 2 and "at least 30" in err and "Traceback" not in err and not (tmp_path / "no.toml").exists()


def test_fit_from_a_per_draft_log_with_a_request_column(tmp_path, capsys):
    pop = population(1.2, requests=60, steps=30, seed=5)
    rows = ["request,step,sequence,position,confidence,accepted"]
    step = 0
    for r, s in enumerate(pop):
        for (d, a), c in s.items():
            for _ in range(c):
                for j in range(1, d + 1):
                    rows.append(f"{r},{step},0,{j},-0.1,{int(j <= a)}")
                step += 1
    log = tmp_path / "drafts.csv"
    log.write_text("\n".join(rows) + "\n")
    out = tmp_path / "cal.toml"
    code, _, err = run(capsys, "calib", "fit", "--drafts-log", log, *DRAFTER, "-o", out, "--request-spread", "require")
    assert code == 0, err
    sp = AcceptanceCalibration.load(out).spread
    assert sp.requests == 60 and 0.6 < sp.logit_sd < 2.0
    bare = tmp_path / "bare.csv"
    bare.write_text("\n".join(",".join(r.split(",")[1:]) for r in rows) + "\n")
    code, _, err = run(capsys, "calib", "fit", "--drafts-log", bare, *DRAFTER, "-o", out, "--request-spread", "require")
    assert code == 2 and "no `request` column" in err
    code, _, err = run(capsys, "calib", "fit", "--rates", "0.8,0.6", *DRAFTER, "-o", out, "--request-spread", "auto")
    assert code == 0 and "not fitted" in err and AcceptanceCalibration.load(out).spread is None


# -- the engine --------------------------------------------------------------------------------------

@pytest.mark.parametrize("policy", ["fixed:3", "sequence", "propose"])
def test_engine_with_spread_matches_reference(policy):
    reqs = random_requests(50, 8, rate=1.5)
    table, cal = small_table(), with_spread(small_calibration(), 1.5)
    opts = dict(max_num_seqs=4, seed=21, prefill_ms_per_token=0.02)
    res = simulate(reqs, table, cal, policy, **opts)
    assert_matches_reference(res, run_reference(reqs, table, cal, policy, **opts))
    plain = simulate(reqs, table, small_calibration(), policy, **opts)
    assert res.counters["accepted_drafts"] != plain.counters["accepted_drafts"]


def test_every_policy_sees_the_same_request_factor():
    """Common random numbers: a request's z is a function of (seed, request index) alone."""
    reqs = random_requests(400, 3)
    cal = with_spread(small_calibration(), 0.9)
    shifts = [prepare(reqs, small_table(), cal, parse_policy(pol), ServerOptions(seed=17)).cal.shift for pol in ("fixed:1", "propose")]
    assert np.array_equal(shifts[0], shifts[1]) and shifts[0].shape == (400,)
    want = [0.9 * ref.ref_request_z(17, r) for r in range(400)]
    assert np.allclose(shifts[0], want, rtol=0, atol=1e-14)
    z = shifts[0] / 0.9
    assert abs(z.mean()) < 0.15 and abs(z.std() - 1.0) < 0.1
    other = prepare(reqs, small_table(), cal, parse_policy("fixed:1"), ServerOptions(seed=18)).cal.shift
    assert not np.array_equal(other, shifts[0])


def test_no_spread_and_a_zero_spread_are_the_plain_engine(tmp_path):
    reqs = random_requests(150, 6)
    table = small_table()
    path = tmp_path / "cal.toml"
    path.write_text(small_calibration().with_spread(RequestSpread(0.0, 0.1, 40, "x")).render())
    stripped = tmp_path / "stripped.toml"
    stripped.write_text(path.read_text().split("[request_spread]")[0])
    zero, absent = AcceptanceCalibration.load(path), AcceptanceCalibration.load(stripped)
    assert zero.spread.logit_sd == 0.0 and absent.spread is None
    p = prepare(reqs, table, zero, parse_policy("fixed:3"), ServerOptions())
    assert p.cal.centre.shape == (0,) and p.cal.shift.shape == (0,)
    for policy in ("fixed:3", "sequence"):
        a = simulate(reqs, table, zero, policy, max_num_seqs=4)
        b = simulate(reqs, table, absent, policy, max_num_seqs=4)
        assert np.array_equal(a.finish_s, b.finish_s) and a.counters == b.counters and a.energy == b.energy


def test_spread_widens_the_tail_of_per_request_acceptance():
    reqs = random_requests(400, 9, max_out=80)
    table = small_table()
    per = {}
    for sd in (None, 2.0):
        res = simulate(reqs, table, with_spread(small_calibration(), sd), "fixed:3", max_num_seqs=4)
        tpot = (res.finish_s - res.first_token_s) / np.maximum(res.output_tokens - 1, 1)
        per[sd] = np.nanpercentile(tpot[res.output_tokens > 20], 99)
    assert per[2.0] > per[None]


def test_a_fleet_draws_with_the_spread():
    reqs = random_requests(120, 4, rate=6.0)
    table, cal = small_table(), small_calibration()
    runs = [simulate_fleet(reqs, Fleet.uniform(table, c, 2, ServerOptions(max_num_seqs=4)), "fixed:3")
            for c in (cal, with_spread(cal, 1.5))]
    assert not np.array_equal(runs[0].fleet.finish_s, runs[1].fleet.finish_s)


# -- per-request telemetry ---------------------------------------------------------------------------

def test_sglang_histograms_take_the_depth_they_drafted(tmp_path):
    """A histogram grown to the largest accepted run hides the rejection after a full run: the
    per-position counts use the depth (told by proposed drafts, else --depth)."""
    from specsim.calibration.spread import records_data
    from specsim.interop import read_telemetry

    lines = [json.dumps({"meta_info": {"spec_verify_ct": 4, "spec_accept_histogram": [1, 3]}}) for _ in range(3)]
    path = tmp_path / "sg.jsonl"
    path.write_text("\n".join(lines) + "\n")
    fmt, records, _ = read_telemetry([path], "sglang-request")
    assert records_data(fmt, records)[0] is None and "--depth" in records_data(fmt, records)[1]
    data, why = records_data(fmt, records, depth=3)
    assert why == "" and data.reached.tolist() == [[4, 3, 0]] * 3 and data.accepted.tolist() == [[3, 0, 0]] * 3


def test_released_trtllm_blocks_give_totals(tmp_path):
    from specsim.calibration.spread import records_data
    from specsim.interop import read_telemetry

    rng = np.random.default_rng(0)
    lines = []
    for _ in range(40):
        drafted = 3 * int(rng.integers(10, 40))
        lines.append(json.dumps({"speculative_decoding": {"total_accepted_draft_tokens": int(rng.integers(0, drafted)),
                                                          "total_draft_tokens": drafted}}))
    path = tmp_path / "tr.jsonl"
    path.write_text("\n".join(lines) + "\n")
    fmt, records, _ = read_telemetry([path], "trtllm-request")
    assert records_data(fmt, records)[0] is None
    data, _ = records_data(fmt, records, depth=3)
    assert data.kind == "totals" and data.requests == 40 and (data.depth == 3).all()
    first = json.loads(lines[0])["speculative_decoding"]
    assert data.steps[0] == first["total_draft_tokens"] / 3
    assert data.mean[0] == pytest.approx(first["total_accepted_draft_tokens"] / data.steps[0])
    assert records_data("vllm-log", records)[0] is None


# -- the draw kernels against their twins ------------------------------------------------------------

@settings(max_examples=200, deadline=None)
@given(seed=st.integers(0, 2 ** 64 - 1), first=st.integers(0, 2 ** 40), count=st.integers(0, 5),
       sd=st.sampled_from([0.0, 0.5, MAX_REQUEST_SPREAD]))
def test_request_shifts_match_the_reference(seed, first, count, sd):
    from specsim.sim._draw_kernels import request_shifts_nb, request_z_nb, seed_key_nb

    key = np.uint64(seed_key_nb(np.uint64(seed)))
    for r in range(first, first + count):
        assert request_z_nb(key, r) == pytest.approx(ref.ref_request_z(seed, r), rel=0, abs=1e-13)
    out = np.empty(count + 1)
    request_shifts_nb(np.uint64(seed), sd, out)
    assert np.allclose(out, [sd * ref.ref_request_z(seed, r) for r in range(count + 1)], rtol=0, atol=1e-13)
    assert np.isfinite(out).all()


@pytest.mark.parametrize("centre, shift, want", [
    (-math.inf, 3.0, 0.0), (math.inf, -3.0, 1.0), (0.0, 0.0, 0.5), (-60.0, -27.0, 1.0 / (1.0 + math.exp(87.0))),
    (2.0, -0.5, 1.0 / (1.0 + math.exp(-1.5))),
])
def test_spread_probability_edges(centre, shift, want):
    from specsim.sim._draw_kernels import spread_p_nb

    assert spread_p_nb(centre, shift) == want


# -- hostile input round four, case 16: silent accepts in a calibration's spread -------------------

@pytest.mark.parametrize("where", ["meta", "acceptance", "drafter"])
def test_a_bare_request_spread_key_is_ignored_without_a_word(where):
    text = small_calibration().render().replace(f"[{where}]", f"[{where}]\nrequest_spread = 0.8", 1)
    if f"[{where}]" not in text:
        text += f"\n[{where}]\nrequest_spread = 0.8\n"
    with pytest.raises(CalibrationError, match=rf"\[{where}\] request_spread = 0.8 would be ignored"):
        AcceptanceCalibration.parse(text, "c.toml")


@pytest.mark.parametrize("line,said", [("requests = 0", "requests = 0 must be a whole number >= 30"),
                                       ("requests = 29", "requests = 29 must be"),
                                       ("logit_sd = true", "logit_sd = true must be a number"),
                                       ("requests = false", "requests = false must be")])
def test_a_spread_of_requests_0_is_accepted_and_messages_print_python_values(line, said):
    name = line.split(" = ")[0]
    good = {"logit_sd": "0.5", "standard_error": "0.1", "requests": "40"}
    body = "".join(f"{k} = {v}\n" for k, v in good.items() if k != name) + line + "\n"
    text = small_calibration().render() + f"\n[request_spread]\n{body}source = \"x\"\n"
    with pytest.raises(CalibrationError) as e:
        AcceptanceCalibration.parse(text, "c.toml")
    assert said in str(e.value) and "True" not in str(e.value) and "False" not in str(e.value)


def test_a_spread_of_minus_0_prints_minus_0(tmp_path, capsys):
    from specsim.cli import main

    text = small_calibration().render() + '\n[request_spread]\nlogit_sd = -0.0\nstandard_error = -0.0\n' \
                                          'requests = 40\nsource = "x"\n'
    cal = AcceptanceCalibration.parse(text, "c.toml")
    assert math.copysign(1.0, cal.spread.logit_sd) == 1.0 and "logit_sd = 0.0\n" in cal.render()
    (tmp_path / "c.toml").write_text(text)
    assert main(["calib", "show", str(tmp_path / "c.toml")]) == 0
    assert "request spread: logit_sd 0 +- 0 from 40 requests" in capsys.readouterr().out


def test_a_drafts_log_chain_whose_rows_name_two_requests_is_accepted(tmp_path, capsys):
    """Item 16: a chain's rows split between two requests were each counted for their own
    request (drafts reached by no request of their own); refused naming the chain."""
    with pytest.raises(CalibrationError, match=r"the chain of step 0, sequence 0 names requests 7 and 9 \(1 such row"):
        drafts_data([7, 9, 7], [0, 0, 1], [0, 0, 0], [1, 2, 1], [1, 1, 0], source="d.csv")
    rows = ["request,step,sequence,position,confidence,accepted"]
    rows += [f"{s % 40},{s},0,{j},-0.1,{int(j < 2)}" for s in range(80) for j in (1, 2)]
    rows[5] = "99,2,0,1,-0.1,1"
    (tmp_path / "d.csv").write_text("\n".join(rows) + "\n")
    code, _, err = run(capsys, "calib", "fit", "--drafts-log", tmp_path / "d.csv", *DRAFTER, "-o", tmp_path / "c.toml",
                       "--request-spread", "require")
    assert code == 2 and "step 2, sequence 0 names requests 99 and 2" in err and not (tmp_path / "c.toml").exists()


def test_the_calibration_hands_the_engine_its_own_arrays():
    """``AcceptanceCalibration.engine_arrays()``: the calibration's own arrays (not copies: one
    Numba type whoever builds a run), the bucket index, the cells' probabilities (the planner's
    lookup) and the request spread's centres (empty without a spread); the engine's
    draft-outcome bundle holds them as they are."""
    from specsim.calibration.calibration import bucket_cells, cell_probabilities

    cal = small_calibration()
    arrays = cal.engine_arrays()
    assert arrays.edges is cal.edges and arrays.p_accept is cal.p_accept and arrays.priors is cal.priors
    assert np.array_equal(arrays.cells, bucket_cells(cal.edges)) and arrays.centre.shape == (0,)
    assert np.array_equal(arrays.cell_p, cell_probabilities(cal.edges, cal.p_accept))
    spread = with_spread(cal, 0.9)
    assert np.array_equal(spread.engine_arrays().centre, centres(cal.p_accept, 0.9))
    p = prepare(random_requests(30, 2), small_table(), spread, parse_policy("fixed:1"), ServerOptions(seed=5))
    assert p.cal.edges is spread.edges and p.cal.priors is spread.priors
    assert np.array_equal(p.cal.centre, spread.engine_arrays().centre) and p.cal.shift.shape == (30,)
    assert np.array_equal(p.cal.cell_p, arrays.cell_p) and p.cal.cell_p.dtype == np.float64


def test_a_command_start_solves_no_gauss_hermite_rule():
    """The centre solve's nodes are made on its first use, not at import (0.03-0.07 s of every
    command's start, spread or not), and the centres are the same either way."""
    code = ("import numpy.polynomial.hermite_e as h\n"
            "calls = []\n"
            "solve = h.hermegauss\n"
            "h.hermegauss = lambda *a: calls.append(a) or solve(*a)\n"
            "import specsim.cli.simulate, specsim.calibration.spread as s\n"
            "print(len(calls))\n"
            "c = s.centres(__import__('numpy').array([0.2, 0.7]), 1.5)\n"
            "print(len(calls), c.tolist() == s.centres(__import__('numpy').array([0.2, 0.7]), 1.5).tolist())\n")
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=str(ROOT), env=env)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["0", "1", "True"]
