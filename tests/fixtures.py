"""What several suites share: the repository's root, and the small tables, calibrations and
Hypothesis strategies that suites in different folders build their cases from."""

from pathlib import Path

# The repository's root (the tests live one folder per package below tests/).
ROOT = Path(__file__).resolve().parents[1]
