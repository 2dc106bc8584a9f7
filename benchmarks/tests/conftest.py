"""The lab's tests: the benchmark scripts import as modules, and the product's fixtures serve."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: its scripts as modules

from tests.conftest import small_space, toy_repo  # noqa: F401  (fixtures the survey test uses)
