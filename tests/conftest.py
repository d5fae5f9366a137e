from pathlib import Path

import pytest

# Public data the tests read, shipped in the repository beside the tests (tests/data/README.md
# names each source and licence); never part of the package.
TEST_DATA = Path(__file__).resolve().parent / "data"


@pytest.fixture
def shared_data():
    """The folder of real traces, measured tables and profiled costs (``tests/data``)."""
    return TEST_DATA
