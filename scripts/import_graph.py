"""The import graph of the autotune package, and the layering rules it must follow.

    python scripts/import_graph.py            # the graph as text (module -> modules it imports)
    python scripts/import_graph.py --mermaid  # the same as a Mermaid flowchart
    python scripts/import_graph.py --layers   # the layers as a text drawing (docs/architecture.md)
    python scripts/import_graph.py --check    # exit 1 and one line per broken rule

Read with ``ast``, nothing is imported. Every import counts: one inside a function (a lazy
import is still a dependency) and one under ``if TYPE_CHECKING:`` (a type is a dependency too).
The rules (``--check``; tests/test_architecture.py runs it):

- layering: every module belongs to one layer of :data:`LAYERS` and imports only modules of
  its own layer or of layers below it, so the flow goes one way;
- privacy: a ``_private`` module is imported only from inside its own package.

Modules are cut where a concept ends, not at a line count.
"""

from __future__ import annotations

import argparse
import ast
import sys
import textwrap
from collections.abc import Collection, Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = "autotune"

# Lowest first. A module may import modules of its own layer or of a lower one.
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    # no knowledge of tuning: errors, atomic files, stop requests, processes, the machine's lock
    (
        "foundation",
        (
            "autotune",
            "autotune.errors",
            "autotune.files",
            "autotune.stopping",
            "autotune.processes",
            "autotune.guard",
            "autotune.hostlock",
        ),
    ),
    # frozen values and the pure rules over them (no I/O but reading a file given by name)
    (
        "values",
        (
            "autotune.search",
            "autotune.points",
            "autotune.objective",
            "autotune.search_space",
            "autotune.model_config",
            "autotune.pipeline",
            "autotune.outputs",
            "autotune.results",
            "autotune.gpu",
            "autotune.config_edit",
            "autotune.warmup",
        ),
    ),
    ("settings", ("autotune.settings",)),
    # talking to a server that runs: its control plane, the load generator
    (
        "io",
        (
            "autotune.control",
            "autotune.loadgen",
            "autotune.gpu_probe",
            "autotune.serving",
            "autotune.traffic",
        ),
    ),
    # starting and stopping servers
    ("launch", ("autotune.launch", "autotune.staging", "autotune.trt_build", "autotune.openfiles")),
    # what persists: the study, the run directory
    ("record", ("autotune.study", "autotune.rundir")),
    # the jobs: tune, re-read a run, report, write back, bench
    (
        "tune",
        (
            "autotune.events",
            "autotune.prepare",
            "autotune.launched",
            "autotune.tuner",
            "autotune.trials",
            "autotune.finals",
            "autotune.workers",
            "autotune.shipping",
            "autotune.fleet",
            "autotune.reload",
            "autotune.report",
            "autotune.writeback",
            "autotune.sim",
            "autotune.bottleneck",
            "autotune.rounds",
        ),
    ),
    # people: progress and summaries, the command line
    ("people", ("autotune._console", "autotune.bench", "autotune.cli")),
)


def modules(root: Path = ROOT) -> dict[str, Path]:
    """Every module of the package: dotted name -> file."""
    out = {}
    for path in sorted((root / PACKAGE).rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def _imports(tree: ast.AST, module: str, is_package: bool, known: Collection[str]) -> Iterator[str]:
    """The modules ``tree`` imports: ``from a import b`` is ``a.b`` when that is a module, else ``a``."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = module.split(".")
                parent = parent if is_package else parent[:-1]
                parent = parent[: len(parent) - (node.level - 1)]
                base = ".".join([*parent, base] if base else parent)
            for alias in node.names:
                name = f"{base}.{alias.name}"
                yield name if name in known else base


def graph(root: Path = ROOT) -> dict[str, set[str]]:
    """Module -> the package's modules it imports (names resolved to modules that exist)."""
    known = modules(root)
    out: dict[str, set[str]] = {}
    for name, path in known.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        found = set()
        for target in _imports(tree, name, path.name == "__init__.py", known):
            while target and target not in known:
                target = target.rpartition(".")[0]
            if target and target != name and target.startswith(PACKAGE):
                found.add(target)
        out[name] = found
    return out


def layer_of(module: str) -> int | None:
    """The index of the module's layer: its own entry, else its package's."""
    probe = module
    while probe:
        for index, (_, members) in enumerate(LAYERS):
            if probe in members:
                return index
        probe = probe.rpartition(".")[0]
        if probe == PACKAGE:  # a top-level module is placed by name, not by the package's layer
            return None
    return None


def _package(module: str, root: Path = ROOT) -> str:
    return module if (root / Path(*module.split(".")) / "__init__.py").exists() else module.rpartition(".")[0]


def problems(root: Path = ROOT) -> list[str]:
    found = []
    edges = graph(root)
    for module, targets in sorted(edges.items()):
        own = layer_of(module)
        if own is None:
            found.append(f"{module}: in no layer of scripts/import_graph.py LAYERS")
            continue
        for target in sorted(targets):
            theirs = layer_of(target)
            if theirs is not None and theirs > own and not target.startswith(module + "."):
                found.append(
                    f"{module} ({LAYERS[own][0]}) imports {target} ({LAYERS[theirs][0]}), a layer above it"
                )
            private = [p for p in target.split(".") if p.startswith("_") and not p.startswith("__")]
            if (
                private
                and not module.startswith(_package(target, root) + ".")
                and module != _package(target, root)
            ):
                found.append(f"{module} imports the private module {target} from outside its package")
    return found


def _short(module: str) -> str:
    return module.removeprefix(PACKAGE + ".") or PACKAGE


def as_text(edges: dict[str, set[str]]) -> str:
    return "\n".join(
        f"{_short(m)} -> {', '.join(sorted(_short(t) for t in ts)) or '(nothing)'}"
        for m, ts in sorted(edges.items())
    )


def as_mermaid(edges: dict[str, set[str]]) -> str:
    """A top-down flowchart, a subgraph per layer (highest first), packages folded into one node."""

    def node(module: str) -> str:
        parts = module.split(".")
        return ".".join(parts[:2]) if len(parts) > 2 else module

    folded: dict[str, set[str]] = {}
    for m, ts in edges.items():
        folded.setdefault(node(m), set()).update(node(t) for t in ts if node(t) != node(m))
    ident = {n: _short(n).replace(".", "_") for n in folded}
    lines = ["flowchart TD"]
    by_layer: dict[int, list[str]] = {}
    for n in folded:
        layer = layer_of(n)
        by_layer.setdefault(layer if layer is not None else -1, []).append(n)
    for index in sorted(by_layer, reverse=True):
        title = LAYERS[index][0] if index >= 0 else "unlayered"
        lines.append(f"  subgraph {title}")
        lines.extend(f"    {ident[n]}[{_short(n)}]" for n in sorted(by_layer[index]))
        lines.append("  end")
    for n, ts in sorted(folded.items()):
        lines.extend(f"  {ident[n]} --> {ident[t]}" for t in sorted(ts) if t in ident)
    return "\n".join(lines)


def as_layers(edges: dict[str, set[str]], width: int = 96) -> str:
    """The layers as a text drawing, highest first: each layer's modules (a package is one name
    that ends in ``/``; the package's own ``__init__`` is ``__init__``), then the other layers
    its modules import, read from ``edges``."""

    def node(module: str) -> str:
        return ".".join(module.split(".")[:2])

    def shown(name: str) -> str:
        if name == PACKAGE:
            return "__init__"
        is_package = any(m.startswith(name + ".") for m in edges)
        return _short(name) + ("/" if is_package else "")

    members: dict[int, set[str]] = {}
    uses: dict[int, set[int]] = {}
    for module, targets in edges.items():
        own = layer_of(module)
        key = -1 if own is None else own
        members.setdefault(key, set()).add(shown(node(module)))
        for target in targets:
            theirs = layer_of(target)
            if theirs is not None and theirs != key:
                uses.setdefault(key, set()).add(theirs)
    pad = max(len(title) for title, _ in LAYERS) + 3
    lines: list[str] = []
    order = sorted(members, reverse=True)
    for index in order:
        title = LAYERS[index][0] if index >= 0 else "in no layer"
        lines.append(
            textwrap.fill(
                ", ".join(sorted(members[index])),
                width=width,
                initial_indent=f"{title:<{pad}}",
                subsequent_indent=" " * pad,
            )
        )
        if index == order[-1]:
            break
        below = ", ".join(LAYERS[i][0] for i in sorted(uses.get(index, ()), reverse=True))
        lines.append(f"{'  |':<{pad}}imports {below}" if below else "  |")
        lines.append("  v")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mermaid", action="store_true", help="print a Mermaid flowchart")
    parser.add_argument("--layers", action="store_true", help="print the layers as a text drawing")
    parser.add_argument("--check", action="store_true", help="check the rules; exit 1 if one is broken")
    parser.add_argument("--root", type=Path, default=ROOT, help="the checkout to read (default: this one)")
    args = parser.parse_args(argv)
    if args.check:
        found = problems(args.root)
        print("\n".join(found) or "import graph: every rule holds")
        return 1 if found else 0
    edges = graph(args.root)
    if args.layers:
        print(as_layers(edges))
    else:
        print(as_mermaid(edges) if args.mermaid else as_text(edges))
    return 0


if __name__ == "__main__":
    sys.exit(main())
