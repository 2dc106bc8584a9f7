"""The shape of the code (docs/architecture.md): one direction of flow, privacy, and a page that
names only modules that exist and shows the layers as the script draws them today."""

from __future__ import annotations

import ast
import re
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
    """The rules can fail: a copy of the package where a value module imports the tuner (in a
    function), another a type of the trials (under TYPE_CHECKING), and a module outside the
    launch package imports one of its private modules."""
    shutil.copytree(ROOT / "autotune", tmp_path / "autotune")
    ranking = tmp_path / "autotune" / "search" / "ranking.py"
    ranking.write_text(ranking.read_text() + "\n\ndef _late() -> None:\n    from autotune import tuner\n")
    walk = tmp_path / "autotune" / "search" / "walk.py"
    typed = "\nfrom typing import TYPE_CHECKING\n\nif TYPE_CHECKING:\n"
    typed += "    from autotune.trials import Trials\n"
    walk.write_text(walk.read_text() + typed)
    study = tmp_path / "autotune" / "study.py"
    study.write_text(study.read_text() + "\nfrom autotune.launch._pids import reap\n")
    found = import_graph.problems(tmp_path)
    assert "autotune.search.ranking (values) imports autotune.tuner (tune), a layer above it" in found
    assert "autotune.search.walk (values) imports autotune.trials (tune), a layer above it" in found
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


# ---------------------------------------------------------------- docs/architecture.md

DOC = ROOT / "docs" / "architecture.md"
# folders whose paths the page names (``autotune/launch/_base.py``, ``scripts/import_graph.py``)
FOLDERS = ("autotune", "scripts", "benchmarks", "tests", "docs", "templates", "search_spaces", "examples")
# ``report.html``, ``study.db``, ``trials.csv``: files a run writes, not a module's attribute
SUFFIXES = {"csv", "db", "diff", "html", "json", "md", "npz", "pbtxt", "py", "svg", "txt", "yaml"}


def _short_modules() -> set[str]:
    """The names a page may use for the package's top-level modules and packages: ``tuner``, ``launch``."""
    return {m.split(".")[1] for m in import_graph.modules() if m.count(".") >= 1}


def _defined(tree: ast.Module | ast.ClassDef) -> dict[str, ast.AST]:
    """What a module (or a class body) defines at its top level, and the node that defines it."""
    out: dict[str, ast.AST] = {}
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            out[node.name] = node
        elif isinstance(node, ast.Assign):
            out.update({t.id: node for t in node.targets if isinstance(t, ast.Name)})
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            out[node.target.id] = node
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            out.update({(a.asname or a.name).split(".")[0]: node for a in node.names})
    return out


def _attribute_missing(module: str, parts: list[str]) -> bool:
    """Whether ``parts`` (``["Study", "open"]``) is not defined in ``module``: a name, then a
    name in that class's body; a name imported from another of the package's modules is looked
    up there."""
    tree = ast.parse(import_graph.modules()[module].read_text(encoding="utf-8"))
    found = _defined(tree).get(parts[0])
    if found is None:
        return True
    if len(parts) == 1:
        return False
    if isinstance(found, ast.ClassDef):
        return parts[1] not in _defined(found)
    if isinstance(found, ast.ImportFrom) and found.module and found.module.startswith("autotune"):
        original = next(a.name for a in found.names if (a.asname or a.name) == parts[0])
        return _attribute_missing(found.module, [original, *parts[1:]])
    return False  # a module-level value: its attributes are not checked


def _dotted_missing(name: str) -> bool:
    """Whether ``autotune.a.b.c`` names no module, nor a name defined in a module (its longest
    prefix that is one)."""
    known = import_graph.modules()
    parts = name.split(".")
    for cut in range(len(parts), 0, -1):
        module = ".".join(parts[:cut])
        if module in known:
            return cut < len(parts) and _attribute_missing(module, parts[cut:])
    return True


def missing_names(text: str) -> list[str]:
    """The names in a page's ``text`` that the checkout lacks: paths under :data:`FOLDERS`
    (``autotune/tuner.py``, ``autotune/launch/``), dotted names (``autotune.guard``), a module
    and a name it defines (``prepare.prepare``, ``study.Study.open``), and bare ``xxx.py`` files
    (one of the package's modules, or a file directly in scripts/, benchmarks/ or tests/)."""
    short = _short_modules()
    bare_files = {p.name for p in (ROOT / "autotune").rglob("*.py")}
    for folder in ("scripts", "benchmarks", "tests"):
        bare_files |= {p.name for p in (ROOT / folder).glob("*.py")}
    missing = []
    for raw in re.findall(r"[\w./-]+", text):
        token = raw.rstrip(".,:;")
        head = token.split("/")[0]
        if "/" in token and head in FOLDERS:
            gone = not (ROOT / token.rstrip("/")).exists()
        elif token.endswith(".py"):
            gone = token not in bare_files
        elif token.startswith("autotune."):
            gone = _dotted_missing(token)
        elif re.fullmatch(r"_?[a-z][a-z_]*(\.[A-Za-z_]\w*)+", token) and token.split(".")[0] in short:
            if token.split(".")[1] in SUFFIXES:
                continue
            gone = _dotted_missing(f"autotune.{token}")
        else:
            continue
        if gone and token not in missing:
            missing.append(token)
    return missing


def test_the_page_names_only_modules_that_exist() -> None:
    assert missing_names(DOC.read_text(encoding="utf-8")) == []


def test_the_search_page_names_only_functions_that_exist() -> None:
    """docs/search.md names, beside each step, the function that applies it: each one exists."""
    assert missing_names((ROOT / "docs" / "search.md").read_text(encoding="utf-8")) == []


def test_a_made_up_module_is_caught() -> None:
    """The check can fail: names of modules, folders and functions that do not exist."""
    text = (
        "`autotune/measure.py` and `autotune.measure`, `measure.py`, `autotune/launch/_gone.py`, "
        "`autotune/nowhere/`, `tuner.no_such_step`, `study.Study.no_such_method`, `loadgen.Nothing`. "
        "Real: `autotune/tuner.py`, `autotune.guard`, `cli.py`, `study.Study.open`, `launch.Launcher.serve`, "
        "`report.html`, `study.db`."
    )
    assert missing_names(text) == [
        "autotune/measure.py",
        "autotune.measure",
        "measure.py",
        "autotune/launch/_gone.py",
        "autotune/nowhere/",
        "tuner.no_such_step",
        "study.Study.no_such_method",
        "loadgen.Nothing",
    ]


def test_the_page_shows_the_layers_as_the_script_draws_them() -> None:
    """The drawing is the first code block after the command that makes it; run the command
    again and paste its output when this fails."""
    text = DOC.read_text(encoding="utf-8")
    command = "python scripts/import_graph.py --layers"
    assert command in text
    after = text[text.index(command) :]
    block = re.search(r"```[a-z]*\n(.*?)\n```", after, re.S)
    assert block is not None
    assert block.group(1) == import_graph.as_layers(import_graph.graph())
