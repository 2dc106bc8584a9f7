"""Write the winner back: atomic, with a backup and a diff, verified by loading it in Triton.

Refused when the repository's config.pbtxt changed since the run started (someone else's
edit would be lost). The backup is ``config.pbtxt.autotune-<run-id>.bak`` beside the config
and a copy in the run directory; ``undo`` restores it. If the written config does not load,
the original is put back before the error is raised.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path

from autotune import model_config as mcfg
from autotune.errors import AutotuneError, UsageError, WriteBackError
from autotune.files import write_text_atomic
from autotune.tuner import file_digest, read_run

STATE_FILE = "writeback.json"


@dataclass(frozen=True)
class WriteBackResult:
    path: Path
    backup: Path
    diff: str
    verified: bool


def write_back(run_dir: Path, *, verify: bool = True) -> WriteBackResult:
    record = read_run(run_dir)
    winner_file = run_dir / "winner.pbtxt"
    if record.get("winner") is None or not winner_file.is_file():
        raise UsageError(f"{run_dir}: the run has no winner to apply (unfinished, or no config met the SLA)")
    target = Path(record["repository"]) / record["model"] / mcfg.CONFIG_NAME
    winner = mcfg.parse_config(winner_file.read_text(encoding="utf-8"), str(winner_file))
    backup = target.with_name(f"{mcfg.CONFIG_NAME}.autotune-{record['run_id']}.bak")
    if _already_written(run_dir, target, winner, backup, record):
        current = mcfg.parse_config(backup.read_text(encoding="utf-8"), str(backup))
    else:  # the normal path; also after a stop that came before the replace
        _check_unchanged(target, record)
        current = mcfg.parse_config(target.read_text(encoding="utf-8"), str(target))
        _copy_atomic(target, backup)
        _copy_atomic(target, run_dir / "original.pbtxt")
        _save_state(run_dir, target, backup)
        mcfg.write_config(winner, target)
    verified = False
    if verify:
        try:
            _load_once(Path(record["repository"]), record["model"], run_dir)
            verified = True
        except AutotuneError as exc:
            shutil.copy2(backup, target)
            raise WriteBackError(
                f"the written config did not load, so the original was restored: {exc}"
            ) from exc
    return WriteBackResult(target, backup, mcfg.config_diff(current, winner), verified)


def _already_written(
    run_dir: Path, target: Path, winner: mcfg.ModelConfig, backup: Path, record: dict[str, object]
) -> bool:
    """A write-back of this run that was stopped after the replace (so: only verify again)."""
    if not (run_dir / STATE_FILE).is_file() or not backup.is_file() or not target.is_file():
        return False
    same = _normal(target.read_text(encoding="utf-8")) == mcfg.config_text(winner)
    return same and file_digest(backup) == record.get("original_digest")


def _copy_atomic(source: Path, dest: Path) -> None:
    tmp = dest.with_name(f".{dest.name}.tmp")
    shutil.copy2(source, tmp)
    tmp.replace(dest)


def undo(run_dir: Path) -> Path:
    state_path = run_dir / STATE_FILE
    if not state_path.is_file():
        raise UsageError(f"{run_dir}: nothing was written back from this run")
    state = json.loads(state_path.read_text(encoding="utf-8"))
    target, backup = Path(state["target"]), Path(state["backup"])
    if not backup.is_file():
        raise WriteBackError(f"backup {backup} is gone; the original is also in {run_dir / 'original.pbtxt'}")
    written = (run_dir / "winner.pbtxt").read_text(encoding="utf-8")
    if target.exists() and _normal(target.read_text(encoding="utf-8")) != _normal(written):
        raise WriteBackError(
            f"{target} changed after the write-back; restore {backup} by hand if you mean it"
        )
    _copy_atomic(backup, target)
    return target


def _check_unchanged(target: Path, record: dict[str, object]) -> None:
    if not target.is_file():
        raise WriteBackError(f"{target} no longer exists")
    if file_digest(target) != record.get("original_digest"):
        raise WriteBackError(
            f"{target} changed since the run started; refusing to overwrite it",
            hint="re-run the tuning on the current config, or copy winner.pbtxt by hand",
        )


def _save_state(run_dir: Path, target: Path, backup: Path) -> None:
    data = {"target": str(target), "backup": str(backup)}
    write_text_atomic(run_dir / STATE_FILE, json.dumps(data, indent=2))


def _normal(text: str) -> str:
    return mcfg.config_text(mcfg.parse_config(text))


def _load_once(repository: Path, model: str, run_dir: Path) -> None:
    """Start Triton on the real repository with only this model loaded, and wait for ready."""
    from autotune.launch import _pids
    from autotune.launch.local import LocalLauncher

    _pids.reap()  # a verification server a killed write-back left behind
    launcher = LocalLauncher(extra_args=("--model-control-mode=explicit", f"--load-model={model}"))
    with launcher.serve(repository, model, run_dir / "logs" / "writeback-verify.log"):
        pass
