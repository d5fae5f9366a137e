"""What several suites share: the repository's root, the small tables, calibrations and request
traces the engine suites build their cases from, and the Hypothesis strategies for tables and
calibrations that the planner, table and tree suites draw from."""

import struct
import tomllib
from pathlib import Path

import numpy as np
from hypothesis import strategies as st

from specsim._checks import MAX_STEP_COST
from specsim._executor import ExecutorChoice
from specsim.calibration import AcceptanceCalibration, DrafterKey
from specsim.calibration._types import RequestSpread
from specsim.demo_inputs import DEMO_EDGES, demo_calibration, demo_p_accept, demo_table
from specsim.policy.schedule import canonical
from specsim.sim import REQUEST_DT
from specsim.sim.replay import load_acceptance_file, run_table
from specsim.studies.capacity import Resampling, capacity
from specsim.studies.inputs import StudyInputs
from specsim.studies.tune import TuneSettings, tune
from specsim.table import Cell, CostTable, TableKey

# The repository's root (the tests live one folder per package below tests/).
ROOT = Path(__file__).resolve().parents[1]


# -- the engine's small cases (tests/sim and the suites that run the engine) -----------------------

SIM_DRAFTER = DrafterKey(weights_sha256="test", vocab=100, quantization="bf16", context=True)


def small_table():
    """Widths 1, 2, 4, depths 0..3; verify cost rises with depth and width, drafting is cheap."""
    cells = []
    for n in (1, 2, 4):
        for k in range(4):
            cells.append(Cell(n, k, 10.0 + 0.5 * n + 1.5 * k * n ** 0.5, 2.0 + 0.3 * n + 0.4 * k * n,
                              0.8 * k, 0.1 * k))
    return CostTable.from_cells(TableKey(1, "test", "test", {}), cells)


def small_calibration():
    return AcceptanceCalibration(SIM_DRAFTER, [-2.0, -0.5, -0.1, 0.0], [0.1, 0.45, 0.8, 0.95], [0.75, 0.6, 0.55])


def with_spread(cal, sd):
    """``cal`` with a per-request spread of ``sd`` (None: without one)."""
    return cal if sd is None else cal.with_spread(RequestSpread(sd, 0.1, 100, "test"))


def requests(rows):
    out = np.zeros(len(rows), dtype=REQUEST_DT)
    for i, (a, p, o) in enumerate(rows):
        out[i] = (a, p, o)
    return out


def random_requests(n, seed, rate=2.0, max_out=40):
    rng = np.random.default_rng(seed)
    arrivals = np.cumsum(rng.exponential(1.0 / rate, n))
    arrivals -= arrivals[0]
    return requests([(float(a), int(rng.integers(1, 300)), int(rng.integers(1, max_out))) for a in arrivals])


def write_small_inputs(folder):
    """``small_table()`` and ``small_calibration()`` as ``t.toml`` and ``c.toml`` in ``folder``."""
    table = small_table()
    (folder / "t.toml").write_text(CostTable.render(table.key, table.cells))
    (folder / "c.toml").write_text(small_calibration().render())
    return folder


def write_demo_inputs(folder):
    """The demo's table and calibration as ``t.toml`` and ``c.toml`` in ``folder``."""
    (folder / "t.toml").write_text(demo_table().to_text())
    (folder / "c.toml").write_text(demo_calibration().render())
    return folder


def flat_deep_table(widths=(1, 256), max_k=8):
    """Verify cost nearly flat in rows, so deep drafts pay even at width 256: the planner sorts
    thousands of gains per step."""
    cells = [Cell(n, k, 20.0 + 0.001 * n * k, 5.0 + 0.0001 * n * k, 0.05 * k, 0.01 * k)
             for n in widths for k in range(max_k + 1)]
    return CostTable.from_cells(TableKey(1, "test", "test", {}), cells)


def gb10(shared_data):
    """The real GB10 table (run 1) through the importer, and a calibration built from its windows:
    priors from the accept-run histograms; buckets with p_accept ~ exp(log-prob midpoint)."""
    path = shared_data / "metrale" / "qwen38_27b_mtp_gb10.toml"
    table = run_table(load_acceptance_file(path).run("qwen38_27b_mtp_r1"), TableKey(1, "gb10", "qwen", {}))
    windows = np.array(tomllib.loads(path.read_text())["run"][0]["windows"]).sum(axis=0)
    a3, a2, a1, a0 = windows.tolist()
    priors = [(a1 + a2 + a3) / (a0 + a1 + a2 + a3), (a2 + a3) / (a1 + a2 + a3), a3 / (a2 + a3)]
    return table, AcceptanceCalibration(SIM_DRAFTER, DEMO_EDGES, demo_p_accept(), priors)


# -- a calibration file (tests/calibration, tests/cli) ---------------------------------------------

CALIBRATION_TOML = """[drafter]
weights_sha256 = "abab"
vocab = 32000
quantization = "bf16"
context = true

[acceptance]
edges = [-1.0, -0.1, 0.0]
p_accept = [0.2, 0.6, 0.95]
prior_by_position = [0.8, 0.6, 0.5]
"""


# -- the planner's tables and calibrations (tests/plan, tests/tree) ---------------------------------

PLAN_TABLE_KEY = TableKey(1, "box", "recipe", {"verify": "v", "draft": "d"})
PLAN_DRAFTER = DrafterKey("sha", 32000, "bf16", True)


def table(rows):
    """``rows``: {n: [(verify_ms, verify_j, draft_ms, draft_j) per k]}."""
    return CostTable.from_cells(PLAN_TABLE_KEY,
                                [Cell(n, k, *c) for n, per_k in rows.items() for k, c in enumerate(per_k)])


ROUND = st.sampled_from([0.0, 0.25, 0.5, 0.75, 0.9, 1.0])
PROB = st.one_of(ROUND, st.floats(0.0, 1.0))


@st.composite
def tables(draw):
    widths = sorted(draw(st.sets(st.integers(1, 64), min_size=1, max_size=4)))
    max_k = draw(st.integers(0, 6))
    cost = st.one_of(st.sampled_from([1.0, 2.0, 4.0, 10.0]), st.floats(0.01, 100.0))
    cells = []
    for n in widths:
        for k in range(max_k + 1):
            d_ms, d_j = (0.0, 0.0) if k == 0 else (draw(cost), draw(cost))
            cells.append(Cell(n, k, draw(cost), draw(cost), d_ms, d_j))
    return CostTable.from_cells(PLAN_TABLE_KEY, cells)


@st.composite
def calibrations(draw):
    inner = sorted(draw(st.sets(st.sampled_from([-8.0, -4.0, -2.0, -1.0, -0.5, -0.1, -0.05]), max_size=5)))
    edges = inner + [0.0]
    p_accept = draw(st.lists(PROB, min_size=len(edges), max_size=len(edges)))
    priors = draw(st.lists(PROB, min_size=1, max_size=5))
    return AcceptanceCalibration(PLAN_DRAFTER, edges, p_accept, priors)


# -- cost-table cells and bit-identical floats (tests/table) ----------------------------------------

def bits(x):
    return struct.unpack("<Q", struct.pack("<d", x))[0]


def same(a, b):
    """Bit-identical sequences of floats (so -0.0 and NaN payloads count)."""
    return [bits(float(x)) for x in a] == [bits(float(y)) for y in b]


def grid(widths, max_k, cost=lambda n, k, f: 1.0 + n + 10 * k + 0.1 * f):
    return [Cell(n, k, cost(n, k, 0), cost(n, k, 1), 0.0 if k == 0 else cost(n, k, 2), 0.0 if k == 0 else cost(n, k, 3))
            for n in widths for k in range(max_k + 1)]


# Every cost a table accepts: the smallest positive float up to the per-step limit (docs/limits.md).
positive = st.floats(min_value=5e-324, max_value=MAX_STEP_COST, allow_nan=False, allow_infinity=False)


# -- width -> depth schedules (tests/policy, tests/interop) -----------------------------------------

@st.composite
def schedules(draw, max_k=8, deepest_first=False):
    """Canonical schedules: contiguous ranges from width 1, the last open, depths 0..max_k."""
    n = draw(st.integers(1, 6))
    cuts = sorted(draw(st.sets(st.integers(2, 300), min_size=n - 1, max_size=n - 1)))
    depths = draw(st.lists(st.integers(0, max_k), min_size=n, max_size=n))
    if deepest_first:
        depths[0] = max(depths)
    starts = [1] + cuts
    ranges = [(lo, (starts[i + 1] - 1 if i + 1 < n else None), k) for i, (lo, k) in enumerate(zip(starts, depths))]
    return canonical(ranges)


# -- studies ----------------------------------------------------------------------------------------

def tune_on(requests, table, cal, **kw):
    """:func:`specsim.tune` on one server, its inputs and search settings given as keywords:
    ``options``, ``slo``, ``seeds``, ``names`` go into the :class:`StudyInputs`; ``widths_max``,
    ``holdout``, ``max_rounds``, ``min_gain``, ``noise_windows`` into the :class:`TuneSettings`;
    ``executor`` with ``workers`` and ``scheduler`` into an :class:`ExecutorChoice`; the rest to ``tune``."""
    inputs = StudyInputs(requests, table, cal, **{k: kw.pop(k) for k in ("options", "slo", "seeds", "names")
                                                   if k in kw})
    settings = TuneSettings(**{k: kw.pop(k) for k in ("widths_max", "holdout", "max_rounds", "min_gain",
                                                      "noise_windows") if k in kw})
    executor, workers, scheduler = kw.pop("executor", "auto"), kw.pop("workers", None), kw.pop("scheduler", None)
    if workers is not None or scheduler is not None:
        executor = ExecutorChoice(executor, workers, scheduler)
    return tune(inputs, settings=settings, executor=executor, **kw)


def capacity_on(requests, table=None, calibration=None, policies=None, **kw):
    """:func:`specsim.capacity` with its inputs given as keywords: ``fleet``, ``options``, ``slo``,
    ``seeds`` go into the :class:`StudyInputs`, ``window_resamples`` and ``windows`` into a
    :class:`Resampling`; the rest to ``capacity``."""
    inputs = StudyInputs(requests, table, calibration, **{k: kw.pop(k) for k in ("options", "slo", "seeds", "fleet")
                                                           if k in kw})
    resamples, windows = kw.pop("window_resamples", None), kw.pop("windows", None)
    if resamples is not None or windows is not None:
        kw["resampling"] = Resampling(resamples, windows)
    if policies is not None:
        kw["policies"] = policies
    return capacity(inputs, **kw)
