from pathlib import Path

import pytest

# Public data the tests read, shipped in the repository beside the tests (tests/data/README.md
# names each source and licence); never part of the package.
TEST_DATA = Path(__file__).resolve().parent / "data"


@pytest.fixture
def shared_data():
    """The folder of real traces, measured tables and profiled costs (``tests/data``)."""
    return TEST_DATA


# Modules whose tests drive Numba kernels (engine, planner, table, calibration): they carry the
# `kernels` marker, and CI runs them a second time with bounds checks on (docs/simulation.md,
# "Memory safety").
KERNEL_MODULES = {"test_engine", "test_scheduling", "test_engine_extremes", "test_plan", "test_table",
                  "test_calibration", "test_fit"}


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    for item in items:
        if item.module is not None and item.module.__name__.rsplit(".", 1)[-1] in KERNEL_MODULES:
            item.add_marker(pytest.mark.kernels)
