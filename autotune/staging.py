"""Stage a candidate: a model repository of our own that holds the candidate's config.pbtxt
and links to every other file of the user's model, which is never modified."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from autotune.model_config import CONFIG_NAME, ModelConfig, write_config


def stage_model(source: Path, config: ModelConfig, repository: Path) -> Path:
    """Make ``repository/<name>/`` mirror ``source`` with ``config``; returns ``repository``."""
    target = repository / config.name
    if target.exists():
        shutil.rmtree(target)
    target.mkdir(parents=True)
    for entry in source.iterdir():
        if entry.name != CONFIG_NAME and not entry.name.startswith("."):
            os.symlink(entry.resolve(), target / entry.name)
    write_config(config, target / CONFIG_NAME)
    return repository
