"""A careless day (scripts/careless_day.py): each case of the probe, one test, on a real
tritonserver. A case that needs root to mount a file system is skipped without it."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))

import careless_day  # noqa: E402

pytestmark = [pytest.mark.integration]


@pytest.mark.parametrize("case", list(careless_day.CASES))
def test_case(case: str, tmp_path: Path) -> None:
    before = careless_day.servers()
    row = careless_day.run_case(case, tmp_path)
    if row.verdict == "skipped":
        pytest.skip(row.detail)
    assert row.verdict == "good", row.detail
    assert careless_day.leftovers(tmp_path, before) == []
