"""Overload said out loud: a run whose queue grows through it is flagged, with the measured
growth, by simulate, fleet, capacity (per probe) and the sweep (a column)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from specsim.cli import main
from specsim.sim import ServerOptions, simulate, synthetic_trace
from specsim.sim.metrics import OVERLOAD_GROWTH, OVERLOAD_MIN_REQUESTS, overload_line, queue_growth
from specsim.sim.slo import SLO
from specsim.traces import LogNormalLengths
from tests.fixtures import capacity_on, small_calibration, small_table, write_small_inputs


def test_growth_is_the_backlog_slope():
    """A request arriving at t behind a backlog that grows as (offered - served) t waits
    (offered / served - 1) t: the growth is that slope and the served share 1 / (1 + growth)."""
    t = np.linspace(0.0, 600.0, 2001)
    for excess in (0.1, 0.5, 3.0):
        g = queue_growth(t, excess * t)
        assert g["flag"] is True and g["growth"] == pytest.approx(excess)
        assert g["served_fraction"] == pytest.approx(1 / (1 + excess))
    # Delays that do not grow, however large or noisy, are no overload.
    rng = np.random.default_rng(3)
    steady = queue_growth(t, 5.0 + rng.exponential(2.0, t.shape[0]))
    assert steady["flag"] is False and abs(steady["growth"]) < OVERLOAD_GROWTH
    # A slope over the threshold whose total rise stays under the floor (a short run) is not flagged.
    short = np.linspace(0.0, 4.0, 100)
    assert queue_growth(short, 0.1 * short)["flag"] is False
    assert queue_growth(t[: OVERLOAD_MIN_REQUESTS - 1], t[: OVERLOAD_MIN_REQUESTS - 1])["flag"] is None
    assert queue_growth(np.zeros(50), np.zeros(50))["flag"] is None
    assert overload_line("x", {"flag": False}) is None


def _trace(rate, n=300):
    return synthetic_trace(n, float(rate), seed=2, output=LogNormalLengths(20.0, 0.8),
                           prompt=LogNormalLengths(200.0, 0.5)).requests


def test_simulation_summary_flags_a_growing_queue():
    light = simulate(_trace(1.0), small_table(), small_calibration(), "fixed:0", max_num_seqs=3).summary()
    heavy = simulate(_trace(30.0), small_table(), small_calibration(), "fixed:0", max_num_seqs=3).summary()
    assert light["overload"]["flag"] is False
    assert heavy["overload"]["flag"] is True and heavy["overload"]["growth"] > 1.0
    assert heavy["overload"]["last_quarter_s"] > heavy["overload"]["first_quarter_s"]


@pytest.fixture
def files(tmp_path):
    return write_small_inputs(tmp_path)


SYNTH = "requests=300,rate={rate},seed=2,output=lognormal:20:0.8,prompt=lognormal:200:0.5"


@pytest.mark.parametrize("command", ["simulate", "fleet"])
def test_commands_say_overloaded_in_one_line_and_flag_the_json(files, capsys, command):
    base = [command, "--table", str(files / "t.toml"), "--calibration", str(files / "c.toml"), "--max-batch", "3",
            "--policy", "fixed:0", "--policy", "fixed:2", "--slo-ttft-s", "1"]
    assert main(base + ["--synthetic", SYNTH.format(rate=30), "--json", str(files / "h.json")]) == 0
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("overloaded:")]
    assert len(lines) == 2 and "fixed:0" in lines[0] and "s per s of arrivals" in lines[0]
    doc = json.loads((files / "h.json").read_text())
    assert all(p["overload"]["flag"] is True for p in doc["policies"])
    assert main(base + ["--synthetic", SYNTH.format(rate=1), "--json", str(files / "l.json")]) == 0
    assert "overloaded" not in capsys.readouterr().out
    assert all(p["overload"]["flag"] is False for p in json.loads((files / "l.json").read_text())["policies"])


def test_capacity_flags_each_overloaded_probe():
    from specsim.cli.capacity import capacity_table

    opts = ServerOptions(max_num_seqs=3)
    res = capacity_on(_trace(30.0), small_table(), small_calibration(), ["fixed:2"], slo=SLO(ttft_s=2.0, attainment=0.9),
                   options=opts, max_replicas=64)
    for p in res.policies:
        one = {q.replicas: q for q in p.probes}[1]
        assert one.overloaded is True and one.queue_growth > 1.0
        assert {q.replicas: q for q in p.probes}[p.replicas].overloaded is False
        assert "overloaded" in json.dumps(p.to_dict())
    text = capacity_table(res)
    assert sum(line.startswith("overloaded:") for line in text.splitlines()) == 2


def test_sweep_rows_carry_the_flag(files, capsys):
    grid = files / "grid.toml"
    (files / "trace.csv").write_text("arrival_s,prompt_tokens,output_tokens\n" + "".join(
        f"{float(r['arrival_s'])!r},{r['prompt_tokens']},{r['output_tokens']}\n" for r in _trace(30.0)))
    grid.write_text('[traces]\ns = "trace.csv"\n[tables]\nt = "t.toml"\n[calibrations]\nc = "c.toml"\n'
                    '[server]\nmax_batch = 3\n[axes]\npolicy = ["fixed:0"]\nrate_scale = [0.02, 1.0]\n')
    assert main(["sweep", str(grid), "-o", str(files / "r.csv"), "--serial", "--quiet"]) == 0
    out = capsys.readouterr().out
    assert "overloaded: 1 of 2 points" in out
    from specsim.studies.sweep import read_results

    rows = read_results(files / "r.csv")
    assert [r["overload_flag"] for r in rows] == [False, True] and rows[1]["overload_growth"] > 1.0
