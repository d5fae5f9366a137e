"""Ties and noise: policies that made the same run are named equal, and "lowest energy" or
"lowest p99 TPOT" is said only when the lead clears the draft-outcome noise."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from specsim.cli import main
from specsim.sim import simulate
from specsim.sim.slo import SLO
from specsim.sim.report import comparison_table
from specsim.sim.verdict import NOISE_SEEDS, look, mark_same_runs, noise_seeds, reruns, same_run, verdict, verdicts
from tests.fixtures import random_requests, small_calibration, small_table, write_small_inputs


def test_same_depth_at_every_width_is_the_same_run():
    reqs = random_requests(60, 2, rate=3.0)
    table, cal = small_table(), small_calibration()
    runs = [simulate(reqs, table, cal, p, max_num_seqs=4) for p in ("fixed:2", "schedule:1-=2", "fixed:1",
                                                                 "schedule:1-4=2,5-=0")]
    assert same_run(runs[0], runs[1]) and not same_run(runs[0], runs[2])
    summaries = [r.summary() for r in runs]
    mark_same_runs(runs, summaries)
    # Widths above 4 never occur under max_batch = 4: the last schedule met only widths where it is fixed:2.
    assert [s["same_as"] for s in summaries] == [None, "fixed:2", None, "fixed:2"]
    text = comparison_table(summaries)
    assert "schedule:1-=2 = fixed:2" in text and "A = B" in text


def _summaries(values):
    return [{"label": name, "same_as": None, "j_per_token": v, "tpot_s": {"p99": v}} for name, v in values]


@pytest.mark.parametrize("noise,offset,clear", [(0.01, 0.001, False), (0.0001, 0.01, True), (0.0, 1e-6, True),
                                                (0.01, 0.0, False)])
def test_a_lead_is_a_verdict_only_beyond_the_paired_noise(noise, offset, clear):
    """Seeded noise shared by both policies cancels in the pairing; noise of their difference
    decides. The known difference is ``offset``."""
    rng = np.random.default_rng(7)
    shifts = {0: 0.0} | {s: float(rng.normal(0, noise)) for s in range(1, NOISE_SEEDS + 1)}
    common = {s: float(rng.normal(0, 1.0)) for s in shifts}

    def rerun(index, seed):
        v = 1.0 + common[seed] + (0.0 if index == 0 else offset + shifts[seed])
        return {"j_per_token": v, "tpot_s": {"p99": v}}

    summaries = _summaries([("a", 1.0 + common[0]), ("b", 1.0 + common[0] + offset + shifts[0])])
    for early in (True, False):
        v = verdict("lowest energy", summaries, rerun, 0, early=early)
        assert v["clear"] is clear and 2 <= v["seeds"] <= NOISE_SEEDS + 1
        assert v["line"].startswith("lowest energy: a at" if clear else "lowest energy: tie within noise between a")
    assert v["seeds"] == NOISE_SEEDS + 1 and v["level"] == 0.95


def test_same_runs_are_not_compared():
    summaries = _summaries([("a", 1.0), ("b", 1.0), ("c", 2.0)])
    summaries[1]["same_as"] = "a"
    assert verdict("lowest energy", summaries, lambda i, s: summaries[i], 0)["runner_up"] == "c"
    assert verdict("lowest energy", summaries[:2], lambda i, s: summaries[i], 0) is None


class _Asking:
    """A streaming rerun over fixed summaries that makes one rerun at a time, the first wanted, and
    records the order."""

    def __init__(self, summaries, value=None):
        self.summaries, self.value = summaries, value
        self.made, self.lists = [], []

    def stream(self, wanted, done):
        while (todo := wanted()):
            self.lists.append(list(todo))
            assert len(todo) == len(set(todo)) and not set(todo) & set(self.made)
            self.made.append(todo[0])
            done(todo[0], self.summaries[todo[0][0]] if self.value is None else self.value(*todo[0]))

    def __call__(self, index, seed):
        raise AssertionError("a streaming rerun is not called one by one")


def test_without_early_stops_every_rerun_is_wanted_from_the_start():
    """Without early stops the reruns of both verdicts are all wanted from the start (each once,
    shared leaders too, earliest seed first), so a streaming rerun can make them all in parallel;
    the verdicts equal those made one at a time."""
    summaries = _summaries([("a", 1.0), ("b", 1.5), ("c", 2.0)])
    summaries[2]["tpot_s"] = {"p99": 0.5}  # p99 TPOT's leaders are c and a; energy's a and b
    rerun = _Asking(summaries)
    names = ("lowest energy", "lowest p99 TPOT")
    got = verdicts(names, summaries, rerun, 5, early=False)
    seeds = noise_seeds(5)
    assert sorted(rerun.lists[0]) == sorted({(i, s) for i in (0, 1, 2) for s in seeds})
    assert rerun.made == rerun.lists[0]
    assert got == [verdict(name, summaries, lambda i, s: summaries[i], 5, early=False) for name in names]
    assert verdicts(names, summaries[:1], lambda i, s: summaries[i], 5) == [None, None]


def _noisy(values, noise, seed=3):
    """Summaries of ``values`` (label, value) and a rerun adding per-seed noise of sd ``noise`` to
    each policy's value, independently (the paired difference's noise is sqrt(2) ``noise``)."""
    rng = np.random.default_rng(seed)
    shift = {}

    def value(index, s):
        v = values[index][1] + shift.setdefault((index, s), float(rng.normal(0, noise)))
        return {"j_per_token": v, "tpot_s": {"p99": v}}

    return _summaries(values), value


def test_early_stops_rerun_seed_by_seed_and_only_what_an_open_verdict_needs():
    """A lead far beyond the noise is clear after one rerun seed, at the 99.9% interval; two equal
    runs are a tie after one; a verdict that stays open reruns every seed, decided as without
    early stops. Each round asks only for the open verdicts' leaders under the next seed."""
    seeds = noise_seeds(0)
    # Energy: a (1.0) far below b (2.0); TPOT: c below d by paired differences that stay open
    # until the last seed (checked with look itself), then clear.
    tpot_diffs = dict(zip([0] + seeds, (-1.0, -1.5, -0.4, -1.2)))
    assert [look(list(tpot_diffs.values())[:n], last=False)[0] for n in (2, 3)] == [None, None]
    summaries, value = _noisy([("a", 1.0), ("b", 2.0), ("c", 0.0), ("d", 1.0)], 1e-4)

    def both(index, s):
        v = value(index, s)
        v["tpot_s"] = {"p99": {2: 0.0, 3: -tpot_diffs[s]}.get(index)}
        return v

    for s in summaries:
        s["tpot_s"] = both(summaries.index(s), 0)["tpot_s"]
        s["j_per_token"] = s["j_per_token"] if s["label"] in "ab" else None
    rerun = _Asking(summaries, both)
    energy, tpot = verdicts(("lowest energy", "lowest p99 TPOT"), summaries, rerun, 0)
    assert energy["clear"] and energy["seeds"] == 2 and energy["level"] == 0.999 and "99.9%)" in energy["line"]
    # Every seed's reruns are wanted at first, earliest seed first; once energy's lead is clear
    # (after a and b under the first seed) only c's and d's.
    assert rerun.lists[0] == [(i, s) for s in seeds for i in range(4)]
    assert rerun.made == [(i, s) for s in seeds for i in range(4) if i >= 2 or s == seeds[0]]
    assert tpot["clear"] and tpot["seeds"] == NOISE_SEEDS + 1 and tpot["level"] == 0.95
    assert tpot == verdict("lowest p99 TPOT", summaries, lambda i, s: both(i, s), 0, early=False)
    # Two policies with the same figure under every seed: already a tie after one rerun seed.
    same = _summaries([("e", 1.0), ("f", 1.0)])
    rerun = _Asking(same)
    v = verdict("lowest energy", same, rerun, 0)
    assert not v["clear"] and v["seeds"] == 2 and rerun.made == [(0, seeds[0]), (1, seeds[0])]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.floats(-1e3, 1e3, allow_nan=False), min_size=2, max_size=NOISE_SEEDS + 1))
def test_an_early_clear_is_clear_by_the_95_interval_too(diffs):
    """Stopping early never calls a lead the fixed-seed rule would not call at the same seeds:
    the early interval is wider than the 95% one."""
    decision, half, level = look(diffs, last=False)
    _, half95, _ = look(diffs, last=True)
    if decision == "clear":
        mean = float(np.mean(diffs))
        assert level == 0.999 and half >= half95 and mean < 0 and -mean > half95


@pytest.mark.kernels
def test_parallel_reruns_equal_reruns_made_one_at_a_time():
    from specsim.sim.options import ServerOptions

    reqs = random_requests(80, 3, rate=4.0)
    table, cal = small_table(), small_calibration()
    results = [simulate(reqs, table, cal, p, max_num_seqs=4) for p in ("fixed:0", "fixed:2", "propose")]
    summaries = [r.summary() for r in results]
    mark_same_runs(results, summaries)
    names = ("lowest energy", "lowest p99 TPOT")
    opts = ServerOptions(max_num_seqs=4)
    parallel = reruns(reqs, table, cal, results, opts)
    one_by_one = reruns(reqs, table, cal, results, opts)
    got = verdicts(names, summaries, parallel, 0)
    want = [verdict(name, summaries, lambda i, s: one_by_one(i, s), 0) for name in names]
    assert verdicts(names, summaries, reruns(reqs, table, cal, results, opts), 0, early=False) == \
        [verdict(name, summaries, lambda i, s: one_by_one(i, s), 0, early=False) for name in names]
    assert got == want and any(v is not None for v in got)


@pytest.mark.kernels
def test_reruns_in_threads_leave_the_warnings_filters_to_the_calling_thread(monkeypatch):
    # ``warnings.catch_warnings`` saves and restores the process's filters: entered in two threads
    # at once, the one to leave last puts back the other's, and an "ignore" outlives the reruns.
    # So the reruns' own filter is set once, in the thread that starts them.
    import threading
    import warnings

    from specsim.sim.options import ServerOptions

    callers = []
    simplefilter = warnings.simplefilter
    monkeypatch.setattr(warnings, "simplefilter",
                        lambda *a, **k: (callers.append(threading.current_thread()), simplefilter(*a, **k))[1])
    reqs = random_requests(40, 3, rate=4.0)
    table, cal = small_table(), small_calibration()
    results = [simulate(reqs, table, cal, p, max_num_seqs=4) for p in ("fixed:0", "fixed:2", "propose")]
    rerun = reruns(reqs, table, cal, results, ServerOptions(max_num_seqs=4))
    before = list(warnings.filters)
    wanted = [(i, s) for i in range(3) for s in (1, 2)]
    made = []
    rerun.stream(lambda: [p for p in wanted if p not in made], lambda pair, _: made.append(pair))
    assert sorted(made) == wanted and callers and set(callers) == {threading.main_thread()}
    assert warnings.filters == before


@pytest.fixture
def files(tmp_path):
    return write_small_inputs(tmp_path)


def test_simulate_prints_equal_runs_and_verdicts_and_the_json_carries_them(files, capsys):
    out = files / "s.json"
    assert main(["simulate", "--synthetic", "requests=120,rate=3,seed=4", "--table", str(files / "t.toml"),
                 "--calibration", str(files / "c.toml"), "--max-batch", "4", "--policy", "fixed:2",
                 "--policy", "schedule:1-=2", "--policy", "fixed:0", "--policy", "propose", "--json", str(out)]) == 0
    text = capsys.readouterr().out
    assert "schedule:1-=2 = fixed:2" in text
    assert sum(line.startswith(("lowest energy:", "lowest p99 TPOT:")) for line in text.splitlines()) == 2
    doc = json.loads(out.read_text())
    assert [p["same_as"] for p in doc["policies"]] == [None, "fixed:2", None, None]
    names = [v["name"] for v in doc["verdicts"]]
    assert names == ["lowest energy", "lowest p99 TPOT"]
    for v in doc["verdicts"]:
        assert v["runner_up"] != "schedule:1-=2" and v["leader"] != "schedule:1-=2"
        assert (v["winner"] is not None) == v["clear"] == (v["difference"] < 0 and -v["difference"] > v["half_width"])


def test_identical_series_are_drawn_once_under_both_names(tmp_path):
    pytest.importorskip("matplotlib")
    from specsim.sim.report import _distinct_series, plot

    reqs = random_requests(60, 2, rate=3.0)
    runs = [simulate(reqs, small_table(), small_calibration(), p, max_num_seqs=4)
            for p in ("fixed:2", "fixed:0", "schedule:1-=2")]
    summaries = [r.summary(SLO(0.5, 0.05)) for r in runs]
    mark_same_runs(runs, summaries)
    shown = _distinct_series(runs, summaries)
    assert [name for _, name in shown] == ["fixed:2 = schedule:1-=2", "fixed:0"]
    assert shown[0][0] is runs[0]
    plot(runs, summaries, tmp_path / "p.png")
    assert (tmp_path / "p.png").read_bytes()[:4] == b"\x89PNG"


def test_t_quantiles_and_paired_noise():
    from specsim._stats import paired_noise, t95

    # Tabulated, then the expansion: Student t's 97.5% point at 3, 30, 40, 120 and 10^6 degrees.
    for dof, exact in ((3, 3.182), (30, 2.042), (40, 2.0211), (120, 1.9799), (10 ** 6, 1.96)):
        assert abs(t95(dof) - exact) < 1e-3
    with pytest.raises(ValueError):
        t95(0)
    mean, half = paired_noise([1.0, 2.0, 3.0])
    assert mean == 2.0 and abs(half - 4.303 * 1.0 / 3 ** 0.5) < 1e-9
    mean, half = paired_noise([0.5])
    assert mean == 0.5 and half != half


def test_the_plot_has_one_legend_one_colour_per_run_and_labels_slack_only_when_it_draws_it(tmp_path):
    pytest.importorskip("matplotlib")
    from specsim.sim.report import plot

    reqs = random_requests(60, 2, rate=3.0)
    runs = [simulate(reqs, small_table(), small_calibration(), "fixed:2", max_num_seqs=4)]
    runs += [simulate(reqs, small_table(), small_calibration(), "propose", max_num_seqs=4, slack=sl) for sl in (0.0, 0.5)]
    summaries = [r.summary(SLO(0.5, 0.05)) for r in runs]
    mark_same_runs(runs, summaries)
    drawn = plot(runs, summaries, tmp_path / "p.png")
    assert drawn["legends"] == 1 and len(set(drawn["colours"])) == len(drawn["series"])
    assert {n for s in drawn["series"] for n in s.split(" = ")} == {s["label"] for s in summaries}
    assert "labels: slack" in drawn["titles"][0] and sorted(drawn["slack_labels"]) == ["0", "0.5"]
    single = plot(runs[:1], summaries[:1], tmp_path / "q.png")
    assert "slack" not in single["titles"][0] and single["slack_labels"] == [] and single["legends"] == 1


@pytest.mark.kernels
def test_reruns_report_their_finished_requests_to_a_progress_bar():
    from specsim.sim.options import ServerOptions

    reqs = random_requests(80, 4, rate=4.0)
    table, cal = small_table(), small_calibration()
    results = [simulate(reqs, table, cal, p, max_num_seqs=4) for p in ("fixed:0", "fixed:2")]
    bars = []

    class Bar:
        def __init__(self, total):
            self.total, self.done, self.closed = total, 0, False
            bars.append(self)

        def update(self, n):
            self.done += n

        def close(self):
            self.closed = True

        def set_total(self, total):
            self.total = total

    rerun = reruns(reqs, table, cal, results, ServerOptions(max_num_seqs=4), progress=Bar)
    made = []
    wanted = [(0, 1), (1, 1), (0, 2)]
    rerun.stream(lambda: [p for p in wanted if p not in made], lambda pair, summary: made.append(pair))
    assert len(bars) == 1 and bars[0].total == 3 * len(reqs) == bars[0].done and bars[0].closed
    assert sorted(made) == sorted(wanted)
    made.clear()
    rerun.stream(lambda: [p for p in [(0, 2)] if p not in made], lambda pair, summary: made.append(pair))
    assert len(bars) == 1 and made == [(0, 2)]  # made already: no bar, handed over at once


@pytest.mark.parametrize("kind", ["serial", "threads"])
def test_an_executor_feed_runs_what_pick_hands_out_until_nothing_is_wanted(kind):
    """``Executor.feed`` (the verdicts' reruns run on it): each result may change what is wanted
    next; it returns when nothing runs and nothing more is wanted."""
    from specsim._executor import Executor

    queue, results = [(1,), (2,)], {}

    def pick():
        return queue.pop(0) if queue else None

    def on_result(call, result):
        results[call[0]] = result
        if call[0] < 5:
            queue.append((call[0] + 10,))  # each of 1 and 2 asks for one more

    with Executor(kind, 2 if kind == "threads" else None) as ex:
        ex.feed(lambda x: x * x, pick, on_result)
    assert results == {1: 1, 2: 4, 11: 121, 12: 144}


@pytest.mark.parametrize("kind", ["serial", "threads"])
def test_an_error_in_a_fed_call_stops_the_feed_and_is_raised(kind):
    from specsim._executor import Executor

    calls = [(0,), (1,), (2,)]

    def fn(x):
        if x == 1:
            raise ValueError("bad call")
        return x

    with pytest.raises(ValueError, match="bad call"):
        with Executor(kind, 2 if kind == "threads" else None) as ex:
            ex.feed(fn, lambda: calls.pop(0) if calls else None, lambda call, result: None)
    assert ex.stop.is_set()


@pytest.mark.kernels
def test_a_rerun_no_verdict_wants_any_more_is_not_handed_over():
    """A stream whose wanted list empties after the first rerun made ends without handing over
    the others (abandoned if running, never started otherwise), and its progress total shrinks
    to the work done."""
    from specsim.sim.options import ServerOptions

    reqs = random_requests(80, 5, rate=4.0)
    table, cal = small_table(), small_calibration()
    results = [simulate(reqs, table, cal, p, max_num_seqs=4) for p in ("fixed:0", "fixed:2")]
    bars = []

    class Bar:
        def __init__(self, total):
            self.total, self.done = total, 0
            bars.append(self)

        def update(self, n):
            self.done += n

        def set_total(self, total):
            self.total = total

        def close(self):
            pass

    rerun = reruns(reqs, table, cal, results, ServerOptions(max_num_seqs=4), progress=Bar)
    made = []
    every = [(i, s) for s in (1, 2, 3) for i in (0, 1)]
    rerun.stream(lambda: [] if made else every, lambda pair, summary: made.append(pair))
    assert len(made) == 1 and made[0] in every[:2]
    assert bars[0].total == bars[0].done and len(reqs) <= bars[0].done < len(every) * len(reqs)


@pytest.mark.kernels
def test_reruns_keep_no_result_alive():
    """A verdict's reruns keep each result's policy and slack, not the result: the per-request
    arrays of the runs they rerun can be freed while they run (simulate frees them)."""
    import gc
    import weakref

    from specsim.sim.options import ServerOptions

    reqs = random_requests(40, 7, rate=4.0)
    results = [simulate(reqs, small_table(), small_calibration(), p, max_num_seqs=4) for p in ("fixed:0", "propose")]
    want = results[1].summary()
    rerun = reruns(reqs, small_table(), small_calibration(), results, ServerOptions(max_num_seqs=4))
    gone = [weakref.ref(r) for r in results]
    del results
    gc.collect()
    assert all(ref() is None for ref in gone)
    assert rerun(1, 0) == want
