"""Rebuild a run's Outcome from its directory (for `autotune report` and `autotune apply`)."""

from __future__ import annotations

from pathlib import Path

from autotune import tuner
from autotune.errors import UsageError
from autotune.objective import Sla
from autotune.results import RunInfo
from autotune.search_space import SearchSpace
from autotune.study import Study


def reload_outcome(run_dir: Path, storage: str | None = None) -> tuner.Outcome:
    record = tuner.read_run(run_dir)
    sla = Sla(int(record["sla"]["percentile"]), float(record["sla"]["limit_ms"]))
    recorded = record.get("storage")
    if recorded and "***" in recorded and storage is None:
        raise UsageError(f"{run_dir}: the study lives in {recorded}; give --storage with the password")
    url = storage or recorded or f"sqlite:///{(run_dir / 'study.db').resolve()}"
    name = record.get("study_name") or f"{record['model']}-{record['run_id']}"
    study = Study.open(url, name, _EMPTY, sla)
    verifications = [tuner._verification_from_json(v) for v in study.attr("verifications", [])]
    results = study.results()
    winner = record.get("winner")
    winner_config = (run_dir / "winner.pbtxt").read_text(encoding="utf-8") if winner is not None else ""
    diff_path = run_dir / "winner.diff"
    info = RunInfo(
        run_id=record["run_id"],
        model=record["model"],
        sla=sla,
        launcher=record["launcher"],
        original_config=record["original_config"],
        started=record["started"],
        finished=record.get("finished", ""),
        winner=winner,
        winner_config=winner_config,
        winner_diff=diff_path.read_text(encoding="utf-8") if diff_path.exists() else "",
        verifications=tuple(verifications),
    )
    return tuner.Outcome(run_dir, info, tuple(results))


_EMPTY = SearchSpace((1,), ("KIND_CPU",), ("all",), (0,), (False,), ("none",), (0,), (False,))
