"""Which way imports go inside ``service/``: no cycle, and the rooms keep their direction.

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

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]


def module_names(root: Path, package: str) -> dict[str, Path]:
    """Dotted name → file of every module of ``package`` under ``root``."""
    out = {}
    for path in sorted((root / package).rglob("*.py")):
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


def import_graph(root: Path, package: str) -> dict[str, set[str]]:
    """Module → the modules of the same package it imports (static, see the module doc)."""
    modules = module_names(root, package)
    known = set(modules)
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
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


# --------------------------------------------------------------------------- the rules


def test_no_import_cycle_between_modules_of_service() -> None:
    graph = import_graph(REPO_ROOT, "service")
    tangled = [c for c in components(graph) if len(c) > 1]
    assert not tangled, "import cycles in service/:\n" + "\n".join(
        f"{_fmt(_path_back(graph, min(c), c))}   (tied together: {', '.join(sorted(c))})"
        for c in sorted(tangled, key=min)
    )


#: Modules that read the broker through a typing.Protocol of their own and must
#: never import service.broker (not even for type checking), and why.
_BROKER_READERS = {
    "service.http": "the HTTP listener reads it through service.http.views",
    "service.groups": "its runtime reads it through service.groups.runtime.OffsetsHost",
    "service.tiering": "the tiering task reads it through service.tiering.TieredLogs",
    "service.latency": "a histogram the broker holds",
}


def test_broker_readers_do_not_import_the_broker() -> None:
    graph = import_graph(REPO_ROOT, "service")
    offenders = sorted(
        f"{m} imports service.broker ({why})"
        for m, edges in graph.items()
        for room, why in _BROKER_READERS.items()
        if (m == room or m.startswith(room + ".")) and "service.broker" in edges
    )
    assert not offenders, "\n".join(offenders)


def test_cli_is_a_client_of_the_broker_not_part_of_it() -> None:
    """``service.cli`` imports only itself, ``strata up`` its one way in (service.app), and
    ``service.version`` (``strata --version``), a leaf that imports nothing of ``service``."""
    graph = import_graph(REPO_ROOT, "service")
    allowed = {("service.cli.main", "service.app"), ("service.cli.main", "service.version")}
    offenders = sorted(
        f"{m} -> {t}"
        for m, edges in graph.items()
        if m.startswith("service.cli")
        for t in edges
        if not t.startswith("service.cli") and (m, t) not in allowed
    )
    assert not any(t.startswith("service") for t in graph["service.version"])
    assert not offenders, "service.cli reaches into the broker:\n" + "\n".join(offenders)
    assert "service.app" in graph["service.cli.main"]  # the rule above still means something


def test_nothing_of_the_broker_imports_the_cli() -> None:
    graph = import_graph(REPO_ROOT, "service")
    offenders = sorted(
        f"{m} -> {t}"
        for m, edges in graph.items()
        if not m.startswith("service.cli") and m != "service.__main__"
        for t in edges
        if t.startswith("service.cli")
    )
    assert not offenders, "\n".join(offenders)


# --------------------------------------------------------------------------- the walker itself


def _write(root: Path, files: Mapping[str, str]) -> None:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")


@pytest.mark.parametrize(
    "b_imports_a",
    [
        "from pkg import a\n",
        "from pkg.a import thing\n",
        "import pkg.a\n",
        "from . import a\n",
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.a import Thing\n",
        "def later():\n    from pkg.sub import c\n",  # b -> sub.c -> a -> b
    ],
)
def test_walker_finds_a_cycle_however_it_is_written(tmp_path: Path, b_imports_a: str) -> None:
    _write(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/a.py": "from pkg.b import x\n",
        "pkg/b.py": b_imports_a,
        "pkg/sub/__init__.py": "",
        "pkg/sub/c.py": "from ..a import y\n",
        "pkg/d.py": "import os\nfrom pkg import a\n",  # reaches the cycle, is not on it
    })
    cycles = find_cycles(import_graph(tmp_path, "pkg"))
    assert len(cycles) == 1, cycles
    cycle = cycles[0]
    assert cycle[0] == cycle[-1] == "pkg.a"
    assert "pkg.b" in cycle and "pkg.d" not in cycle


def test_walker_accepts_a_package_that_re_exports_its_modules(tmp_path: Path) -> None:
    _write(tmp_path, {
        "pkg/__init__.py": "from pkg.a import x\nfrom pkg.b import y\n",
        "pkg/a.py": "from pkg.b import y\n",
        "pkg/b.py": "import json\n",
    })
    graph = import_graph(tmp_path, "pkg")
    assert graph == {"pkg": {"pkg.a", "pkg.b"}, "pkg.a": {"pkg.b"}, "pkg.b": set()}
    assert find_cycles(graph) == []
