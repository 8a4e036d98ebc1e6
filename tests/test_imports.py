"""The project's import graph, computed from the sources, has no cycle: every package's modules depend one way, so
each can be read, tested and changed from the bottom up. And the service's jobs import at the top of a module, so
the graph is the whole truth about them (an import inside a function is how a cycle hides)."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("pipeline", "api", "workers", "benchmarks")


def sources() -> dict[str, Path]:
    """Every module of the project's packages, by dotted name."""
    found = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            found[".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")] = path
    return found


def imported(module: str, path: Path, known: dict[str, Path]) -> Iterator[str]:
    """The project modules `module` imports when it runs: at its top and inside its functions, not under
    `if TYPE_CHECKING:` (a checker's import runs nothing)."""
    tree = ast.parse(path.read_text(), str(path))
    checking = {id(node) for block in ast.walk(tree) if isinstance(block, ast.If)
                and ast.unparse(block.test).endswith("TYPE_CHECKING") for stmt in block.body for node in ast.walk(stmt)}
    package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    for node in ast.walk(tree):
        if id(node) in checking:
            continue
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package[:len(package) - node.level + 1] + ([base] if base else []))
            for alias in node.names:  # `from package import module` imports the module
                yield f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base


def import_graph() -> dict[str, set[str]]:
    known = sources()
    return {module: {name for name in imported(module, path, known) if name in known and name != module}
            for module, path in known.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The graph's strongly connected components of more than one module (Tarjan's algorithm, without recursion)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, successors = work[-1]
            successor = next(successors, None)
            if successor is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
            elif successor not in index:
                index[successor] = low[successor] = len(index)
                stack.append(successor)
                on_stack.add(successor)
                work.append((successor, iter(sorted(graph[successor]))))
            elif successor in on_stack:
                low[node] = min(low[node], index[successor])
    return found


def test_the_import_graph_of_the_whole_project_has_no_cycle():
    assert cycles(import_graph()) == []


def test_the_cycle_finder_finds_a_cycle_and_only_a_cycle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_the_graph_sees_imports_inside_functions_and_from_a_package():
    graph = import_graph()
    assert "benchmarks.pages" in graph["benchmarks.gpu"]  # `from benchmarks import pages`, inside a function
    assert "pipeline.jobs.stages.ingest" in graph["pipeline.jobs.graph"]


def test_no_module_of_the_service_s_jobs_imports_inside_a_function():
    for module, path in sources().items():
        if module.startswith("pipeline.jobs"):
            tree = ast.parse(path.read_text(), str(path))
            inner = [node.lineno for function in ast.walk(tree)
                     if isinstance(function, ast.FunctionDef | ast.AsyncFunctionDef)
                     for node in ast.walk(function) if isinstance(node, ast.Import | ast.ImportFrom)]
            assert not inner, f"{module} imports inside a function at lines {inner}"
