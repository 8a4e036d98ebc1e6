"""The engine's layers, read from its sources: the kernels (ops/) import nothing else of the engine, the model imports
only itself and the kernels, and no engine module imports itself back through others. Every import counts, those
inside functions and under TYPE_CHECKING too: a cycle held apart by a late import is still a cycle."""

from __future__ import annotations

import ast
from pathlib import Path

import pipeline.engine

PACKAGE = "pipeline.engine"
ROOT = Path(pipeline.engine.__file__).parent


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join((PACKAGE, *(parts[:-1] if parts[-1] == "__init__" else parts)))


def _imports(path: Path, name: str, modules: set[str]) -> set[str]:
    """The engine modules `path` imports, anywhere in it."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[:len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, *([node.module] if node.module else [])])
            found |= {f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base for alias in node.names}
    return {imported for imported in found if imported in modules} - {name}


def import_graph() -> dict[str, set[str]]:
    paths = {_module_name(path): path for path in ROOT.rglob("*.py")}
    return {name: _imports(path, name, set(paths)) for name, path in paths.items()}


def _outside(graph: dict[str, set[str]], layer: str, allowed: tuple[str, ...]) -> dict[str, set[str]]:
    """Imports from modules of `layer` to engine modules in none of the `allowed` packages."""
    def inside(name: str, package: str) -> bool:
        return name == package or name.startswith(package + ".")

    found = {}
    for name, imported in graph.items():
        bad = {other for other in imported if not any(inside(other, package) for package in allowed)}
        if inside(name, layer) and bad:
            found[name] = bad
    return found


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    components = []

    def visit(name: str) -> None:
        index[name] = low[name] = len(index)
        stack.append(name)
        for other in graph[name]:
            if other not in index:
                visit(other)
                low[name] = min(low[name], low[other])
            elif other in stack:
                low[name] = min(low[name], index[other])
        if low[name] == index[name]:
            component = []
            while (top := stack.pop()) != name:
                component.append(top)
            components.append([name, *component])

    for name in graph:
        if name not in index:
            visit(name)
    return [sorted(component) for component in components if len(component) > 1]


def test_the_graph_reads_late_and_relative_imports():
    graph = import_graph()
    assert f"{PACKAGE}.ops.triton_attention" in graph[f"{PACKAGE}.runner"]  # imported inside a method
    assert f"{PACKAGE}.step_batch" in graph[f"{PACKAGE}.runner"]  # `from . import step_batch`
    assert f"{PACKAGE}.sequence" in graph[f"{PACKAGE}.sampling"]  # under TYPE_CHECKING


def test_the_kernels_import_nothing_else_of_the_engine():
    assert _outside(import_graph(), f"{PACKAGE}.ops", (f"{PACKAGE}.ops",)) == {}


def test_the_model_imports_nothing_above_it_but_the_kernels():
    assert _outside(import_graph(), f"{PACKAGE}.model", (f"{PACKAGE}.model", f"{PACKAGE}.ops")) == {}


def test_no_engine_module_imports_itself_back():
    assert _cycles(import_graph()) == []
