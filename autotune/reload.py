"""Rebuild a run's Outcome from its directory (for `autotune report` and `autotune apply`)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from autotune.results import Outcome
from autotune.rundir import RunDir
from autotune.search_space import SearchSpace
from autotune.study import Study


def reload_outcome(run_dir: Path, storage: str | None = None) -> Outcome:
    """The run's record and every trial of its study (``storage``: the study's URL with its
    password, when the run recorded one with the password hidden)."""
    run = RunDir.load(run_dir)
    study = Study.open(run.study_url(storage), run.record.study_name, _EMPTY, run.record.sla)
    info = run.info()
    if not info.verifications:  # a run stopped while verifying, or one recorded before 0.2
        info = replace(info, verifications=tuple(study.verifications()))
    return Outcome(run_dir, info, tuple(study.results()))


_EMPTY = SearchSpace((1,), ("KIND_CPU",), ("all",), (0,), (False,), ("none",), (0,), (False,))
