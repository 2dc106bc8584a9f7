"""The shape of the code (docs/architecture.md): one direction of flow, privacy, the tuner's size."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))

import import_graph  # noqa: E402


def test_every_rule_of_the_import_graph_holds() -> None:
    assert import_graph.problems() == []


def test_every_module_is_in_a_layer() -> None:
    unplaced = [m for m in import_graph.graph() if import_graph.layer_of(m) is None]
    assert unplaced == []


def test_the_check_finds_an_import_that_goes_up(tmp_path: Path) -> None:
    """The rules can fail: a copy of the package where a value module imports the tuner, and a
    module outside the launch package imports one of its private modules."""
    shutil.copytree(ROOT / "autotune", tmp_path / "autotune")
    measure = tmp_path / "autotune" / "rules.py"
    measure.write_text(measure.read_text() + "\n\ndef _late() -> None:\n    from autotune import tuner\n")
    study = tmp_path / "autotune" / "study.py"
    study.write_text(study.read_text() + "\nfrom autotune.launch._pids import reap\n")
    found = import_graph.problems(tmp_path)
    assert "autotune.rules (values) imports autotune.tuner (tune), a layer above it" in found
    assert "autotune.study imports the private module autotune.launch._pids from outside its package" in found


@pytest.mark.parametrize(
    ("package", "names"),
    [
        (
            "autotune.launch",
            {
                "Launcher",
                "Server",
                "ServerGpus",
                "failure_line",
                "free_ports",
                "make_launcher",
                "read_tail",
                "reap_leftovers",
                "server_gpus",
                "tensorrt_error",
                "wait_model_ready",
            },
        ),
    ],
)
def test_exported_names(package: str, names: set[str]) -> None:
    module = __import__(package, fromlist=["__all__"])
    assert set(module.__all__) == names
