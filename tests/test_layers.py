"""The package's layers: imports point down only, no module imports itself round a circle, and
the formatter is never switched off.

Type-only imports count: a circle through ``TYPE_CHECKING`` is still a circle for the reader.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

import tuner

ROOT = Path(tuner.__file__).parent

# Lowest first. Packages on one rung are siblings and must not import each other.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("errors", "results", "serde"),
    ("catalog",),
    ("config",),
    ("sim", "launch", "bench"),
    ("trial",),
    ("analysis",),
    ("search",),
    ("export",),  # below study: a run ends by writing its best.yaml (tuner.study.run)
    ("study",),
    ("report",),
    ("cli",),
    ("__main__",),
)
RUNG = {room: rung for rung, rooms in enumerate(LAYERS) for room in rooms}


def _module(path: Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _room(module: str) -> str:
    return module.split(".")[1] if module.count(".") else ""


def _imports(path: Path) -> Iterator[str]:
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
            yield from (n for n in names if n.startswith("tuner."))
        elif isinstance(node, ast.Import):
            yield from (a.name for a in node.names if a.name.startswith("tuner."))


def _graph() -> dict[str, set[str]]:
    modules = {_module(p): p for p in ROOT.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        graph[name] = {target for target in _imports(path) if target in modules and target != name}
    return graph


def test_every_room_has_a_rung() -> None:
    rooms = {_room(m) for m in _graph()} - {""}
    assert rooms <= set(RUNG), f"place {sorted(rooms - set(RUNG))} in LAYERS"


def test_imports_point_down() -> None:
    upward = [
        f"{source} -> {target}"
        for source, targets in _graph().items()
        for target in targets
        if _room(source) != _room(target)
        and _room(source)
        and RUNG[_room(target)] >= RUNG[_room(source)]
    ]
    assert upward == []


def test_no_import_circle() -> None:
    graph = _graph()
    done: set[str] = set()
    circles: list[list[str]] = []

    def visit(node: str, trail: list[str]) -> None:
        if node in trail:
            circles.append([*trail[trail.index(node) :], node])
            return
        if node in done:
            return
        for target in sorted(graph[node]):
            visit(target, [*trail, node])
        done.add(node)

    for node in sorted(graph):
        visit(node, [])
    # A package's __init__ re-exporting its own modules is not a circle between modules.
    real = [c for c in circles if not all(c[0].startswith(m) or m.startswith(c[0]) for m in c)]
    assert real == []


def test_the_formatter_is_never_switched_off() -> None:
    # Size is judged by ruff's C901 and PLR0913 (pyproject.toml), not by a line cap that code
    # was once squeezed to fit; a formatter switched off is where squeezing hides.
    project = ROOT.parent
    pragma = re.compile(r"#\s*fmt:\s*(off|skip)")
    found = [
        f"{path.relative_to(project)}:{number}"
        for folder in ("tuner", "tests", "benchmarks", "docs")
        for path in sorted((project / folder).rglob("*.py"))
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if pragma.search(line)
    ]
    assert found == []
