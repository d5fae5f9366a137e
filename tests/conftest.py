import os
from pathlib import Path

import pytest

# Real data shipped beside the repository for CI (never inside the package).
SHARED_DATA = Path(os.environ.get("SPECSIM_SHARED_DATA", Path(__file__).resolve().parents[1].parent / "shared" / "data"))


@pytest.fixture
def shared_data():
    if not SHARED_DATA.is_dir():
        pytest.skip(f"real data folder {SHARED_DATA} is absent (it sits beside the repository in CI)")
    return SHARED_DATA


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
