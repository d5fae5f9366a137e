import os
import socket
from pathlib import Path

import pytest
from hypothesis import settings

# Hypothesis: CI (the CI environment variable set, as .ci/run's hosts do) draws the same examples
# on every run, so a red run replays as it failed; a local run explores new examples each time
# (and prints the blob to reproduce a failure either way).
settings.register_profile("ci", derandomize=True, database=None, print_blob=True)
settings.register_profile("dev", print_blob=True)
settings.load_profile("ci" if os.environ.get("CI") else "dev")

# Public data the tests read, shipped in the repository beside the tests (tests/data/README.md
# names each source and licence); never part of the package.
TEST_DATA = Path(__file__).resolve().parent / "data"


@pytest.fixture
def shared_data():
    """The folder of real traces, measured tables and profiled costs (``tests/data``)."""
    return TEST_DATA


# Suites whose tests drive Numba kernels carry the `kernels` marker, and CI runs them a second time
# with bounds checks on (docs/simulation.md, "Memory safety"): every suite in the folders of the
# packages that own kernels (engine, planner, table, calibration, draft trees, trace parsers). The
# suites elsewhere reach kernels only through whole commands, which these folders already cover.
KERNEL_FOLDERS = {"sim", "plan", "table", "calibration", "tree", "traces"}


def drives_kernels(module_name: str) -> bool:
    """Whether the suite ``tests.<folder>.<module>`` carries the ``kernels`` marker."""
    parts = module_name.split(".")
    return len(parts) == 3 and parts[1] in KERNEL_FOLDERS


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    for item in items:
        if item.module is not None and drives_kernels(item.module.__name__):
            item.add_marker(pytest.mark.kernels)


@pytest.fixture
def port_8787_taken():
    """Port 8787 (Dask's default dashboard port) held by someone else while the test runs, as on
    a machine where another cluster or notebook runs; nothing of ours may need it."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.bind(("127.0.0.1", 8787))
        sock.listen(1)
    except OSError:
        pass  # already taken by another program: the condition the test wants
    try:
        yield
    finally:
        sock.close()
