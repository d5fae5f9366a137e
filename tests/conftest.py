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
