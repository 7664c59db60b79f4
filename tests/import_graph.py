"""The import graph of the source tree, read statically (tests/test_architecture.py, tests/service/test_import_graph.py).

The graph is read from the source, not from ``sys.modules``: every ``import`` and
``from ... import`` anywhere in a module counts, at the top, inside a function
(a lazy import hides a cycle from Python, not from here) and under
``if TYPE_CHECKING:`` (a type-only cycle still ties two modules together).
``from package import name`` points at the submodule ``package.name`` when there
is one, else at the package. Importing ``a.b.c`` also runs ``a/__init__`` and
``a/b/__init__``; those implicit edges are left out, since every package would
otherwise form a cycle with the modules it re-exports.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Mapping
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]

#: the project's top-level packages, bottom layer last
PACKAGES = ("service", "spark", "controller", "fetch", "remote_tier", "local_tier", "common")


def module_names(root: Path, package: str) -> dict[str, Path]:
    """Dotted name → file of every module of ``package`` under ``root`` (C extensions by their
    ``.c`` source: imported like any module, importing none of ours)."""
    out = {}
    for path in sorted([*(root / package).rglob("*.py"), *(root / package).rglob("*.c")]):
        if "jvm" in path.relative_to(root).parts:  # spark/jvm: Java sources, not a package
            continue
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def _imported(node: ast.AST, module: str, is_package: bool, known: set[str]) -> Iterable[str]:
    if isinstance(node, ast.Import):
        for alias in node.names:
            name = alias.name
            while name and name not in known:  # `import a.b.c` where only a.b is ours
                name = name.rpartition(".")[0]
            if name:
                yield name
    elif isinstance(node, ast.ImportFrom):
        if node.level:
            base_parts = module.split(".") if is_package else module.split(".")[:-1]
            base_parts = base_parts[: len(base_parts) - (node.level - 1)]
            base = ".".join([*base_parts, *([node.module] if node.module else [])])
        else:
            base = node.module or ""
        for alias in node.names:
            candidate = f"{base}.{alias.name}"
            if candidate in known:
                yield candidate
            elif base in known:
                yield base


def import_graph(root: Path, packages: str | tuple[str, ...]) -> dict[str, set[str]]:
    """Module → the modules of ``packages`` it imports (static, see the module doc)."""
    modules: dict[str, Path] = {}
    for package in (packages,) if isinstance(packages, str) else packages:
        modules.update(module_names(root, package))
    known = set(modules)
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        if path.suffix == ".c":
            graph[name] = set()
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        is_package = path.name == "__init__.py"
        edges = {t for node in ast.walk(tree) for t in _imported(node, name, is_package, known)}
        edges.discard(name)  # `from pkg import x` inside pkg/__init__ names the package itself
        graph[name] = edges
    return graph


def find_cycles(graph: Mapping[str, set[str]]) -> list[list[str]]:
    """One cycle (``[a, b, ..., a]``) per strongly connected component that has one.

    The cycle starts at the component's first module by name and is a shortest
    one through it; the component may hold more modules (see :func:`components`).
    """
    return sorted(_path_back(graph, min(c), c) for c in components(graph) if len(c) > 1)


def components(graph: Mapping[str, set[str]]) -> list[set[str]]:
    """The strongly connected components of ``graph`` (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[set[str]] = []

    def strongconnect(v: str) -> None:  # Tarjan; the graphs here are a few hundred nodes
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                strongconnect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = set()
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.add(w)
                if w == v:
                    break
            found.append(component)

    for v in sorted(graph):
        if v not in index:
            strongconnect(v)
    return found


def _path_back(graph: Mapping[str, set[str]], start: str, within: set[str]) -> list[str]:
    """A shortest path start → ... → start inside one component (breadth first)."""
    parents: dict[str, str] = {}
    frontier = [start]
    while frontier:
        nxt = []
        for v in frontier:
            for w in sorted(graph.get(v, ()) & within):
                if w == start:
                    path = [v]
                    while path[-1] != start:
                        path.append(parents[path[-1]])
                    return [*reversed(path), start]
                if w not in parents:
                    parents[w] = v
                    nxt.append(w)
        frontier = nxt
    raise AssertionError(f"{start} is in a component but on no cycle")


def _fmt(cycle: list[str]) -> str:
    return " -> ".join(cycle)
