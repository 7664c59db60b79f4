"""docs/architecture.md matches the code, over the whole tree.

Checked: every top-level package the project ships and every package inside one,
at any depth, has a row in the table of the "Packages" section; every row names a
package that exists; every room under "Rooms to come" does not exist yet (when
one is made it moves into the table). The package-level import edges drawn under
"Which way imports go" are exactly those of the code (read statically by
:mod:`tests.import_graph`), each pointing down the order the block lists the
packages in; no module anywhere is in an import cycle; no module passes 500 lines
without saying why at its top.
"""

from __future__ import annotations

import re
from pathlib import Path

from tests.import_graph import PACKAGES, _fmt, _path_back, components, import_graph

REPO_ROOT = Path(__file__).resolve().parents[1]
DOC = REPO_ROOT / "docs" / "architecture.md"
_ROW = re.compile(r"^\|\s*`([a-z_][a-z0-9_/]*)/`\s*\|")
_ROOM = re.compile(r"^-\s*`([a-z_][a-z0-9_/]*)/`")


def _section(text: str, title: str) -> list[str]:
    lines = text.splitlines()
    start = lines.index(f"## {title}") + 1
    end = next((i for i in range(start, len(lines)) if lines[i].startswith("## ")), len(lines))
    return lines[start:end]


def documented(text: str) -> tuple[set[str], set[str]]:
    """(packages in the table, rooms to come), as paths like ``service/http``."""
    table = {m.group(1) for line in _section(text, "Packages") if (m := _ROW.match(line))}
    rooms = {m.group(1) for line in _section(text, "Rooms to come") if (m := _ROOM.match(line))}
    return table, rooms


def packages_on_disk(root: Path) -> set[str]:
    """Top-level packages (but tests/) and every package inside them at any depth, as paths."""
    top = {p.parent.name for p in root.glob("*/__init__.py")} - {"tests"}
    return {
        p.parent.relative_to(root).as_posix()
        for name in top
        for p in (root / name).rglob("__init__.py")
    }


def mismatches(root: Path, text: str) -> list[str]:
    table, rooms = documented(text)
    disk = packages_on_disk(root)
    problems = [f"{p}/ exists but the package table does not name it" for p in sorted(disk - table)]
    problems += [
        f"{p}/ is in the package table but is not a package here"
        for p in sorted(table)
        if not (root / p / "__init__.py").is_file()
    ]
    problems += [
        f"{p}/ is a room to come but exists: move it into the package table"
        for p in sorted(rooms)
        if (root / p).exists()
    ]
    return problems


def test_architecture_doc_names_exactly_the_packages_that_exist() -> None:
    table, rooms = documented(DOC.read_text(encoding="utf-8"))
    assert "service/groups" in table  # the parser still reads the document (rooms may be none)
    problems = mismatches(REPO_ROOT, DOC.read_text(encoding="utf-8"))
    assert not problems, "docs/architecture.md is out of date:\n" + "\n".join(problems)


def test_the_check_sees_a_missing_a_stale_and_a_built_room(tmp_path: Path) -> None:
    for pkg in ("core", "core/deep/er", "service", "service/a", "service/built"):
        (tmp_path / pkg).mkdir(parents=True, exist_ok=True)
        (tmp_path / pkg / "__init__.py").write_text("")
    (tmp_path / "core" / "deep" / "__init__.py").write_text("")
    for pkg in ("tests", "tests/sub", "build/lib/core"):  # neither tests/ nor a non-package tree
        (tmp_path / pkg).mkdir(parents=True)
        (tmp_path / pkg / "__init__.py").write_text("")
    doc = "\n".join([
        "# x", "## Packages", "| package | owns |", "| --- | --- |",
        "| `core/` | c |", "| `service/` | s |", "| `service/gone/` | g |",
        "## Rooms to come", "- `service/built/` — soon", "- `service/later/` — later",
    ])
    assert mismatches(tmp_path, doc) == [
        "core/deep/ exists but the package table does not name it",
        "core/deep/er/ exists but the package table does not name it",
        "service/a/ exists but the package table does not name it",
        "service/built/ exists but the package table does not name it",
        "service/gone/ is in the package table but is not a package here",
        "service/built/ is a room to come but exists: move it into the package table",
    ]


def test_no_module_is_over_500_lines_without_a_reason() -> None:
    """CONVENTIONS: small modules; one over ~500 lines says why at its top (every package)."""
    long = []
    for package in PACKAGES:
        for path in sorted((REPO_ROOT / package).rglob("*.py")):
            text = path.read_text(encoding="utf-8")
            if text.count("\n") > 500 and "Over 500 lines because" not in text[:3000]:
                long.append(f"{path.relative_to(REPO_ROOT)}: {text.count(chr(10))} lines")
    assert not long, "split these, or say at the top 'Over 500 lines because ...':\n" + "\n".join(long)


def test_no_import_cycle_anywhere() -> None:
    graph = import_graph(REPO_ROOT, PACKAGES)
    tangled = [c for c in components(graph) if len(c) > 1]
    assert not tangled, "import cycles:\n" + "\n".join(
        f"{_fmt(_path_back(graph, min(c), c))}   (tied together: {', '.join(sorted(c))})"
        for c in sorted(tangled, key=min)
    )


_EDGE = re.compile(r"^([a-z_]+)\s+→\s+(.*)$")


def drawn_edges(text: str) -> tuple[list[str], set[tuple[str, str]]]:
    """(the packages of the block under "Which way imports go", top first; its edges)."""
    order: list[str] = []
    edges: set[tuple[str, str]] = set()
    lines = _section(text, "Which way imports go")
    fence = [i for i, line in enumerate(lines) if line.startswith("```")]
    for line in lines[fence[0] + 1 : fence[1]]:
        if m := _EDGE.match(line.strip()):
            order.append(m.group(1))
            targets = m.group(2).split("#")[0].strip()
            if targets != "(nothing)":
                edges |= {(m.group(1), t.strip()) for t in targets.split(",")}
    return order, edges


def package_edges(root: Path, packages: tuple[str, ...]) -> set[tuple[str, str]]:
    graph = import_graph(root, packages)
    return {
        (a.split(".")[0], b.split(".")[0])
        for a, targets in graph.items()
        for b in targets
        if a.split(".")[0] != b.split(".")[0]
    }


def edge_problems(order: list[str], drawn: set[tuple[str, str]], real: set[tuple[str, str]]) -> list[str]:
    problems = [f"{a} → {b} is drawn but no module of {a} imports {b}" for a, b in sorted(drawn - real)]
    problems += [f"{a} imports {b} but the drawing has no {a} → {b}" for a, b in sorted(real - drawn)]
    problems += [
        f"{a} → {b} points up: {b} is listed above {a}"
        for a, b in sorted(drawn | real)
        if a in order and b in order and order.index(b) < order.index(a)
    ]
    problems += [f"{p}/ is not in the drawing" for p in sorted({p for e in real for p in e} - set(order))]
    return problems


def test_the_drawn_package_edges_are_the_real_ones_and_point_down() -> None:
    order, drawn = drawn_edges(DOC.read_text(encoding="utf-8"))
    assert set(order) == set(PACKAGES), order
    problems = edge_problems(order, drawn, package_edges(REPO_ROOT, PACKAGES))
    assert not problems, "docs/architecture.md's import drawing is wrong:\n" + "\n".join(problems)


def test_the_edge_check_sees_a_missing_an_invented_and_an_upward_edge(tmp_path: Path) -> None:
    files = {
        "top/__init__.py": "", "top/a.py": "from low.b import x\n",
        "mid/__init__.py": "", "mid/c.py": "import top.a\n",
        "low/__init__.py": "", "low/b.py": "x = 1\n",
    }
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    real = package_edges(tmp_path, ("top", "mid", "low"))
    assert real == {("top", "low"), ("mid", "top")}
    doc = "\n".join(["## Which way imports go", "```", "top → mid, low", "mid → (nothing)",
                     "low → (nothing)", "```", "## Next"])
    order, drawn = drawn_edges(doc)
    assert order == ["top", "mid", "low"] and drawn == {("top", "mid"), ("top", "low")}
    assert edge_problems(order, drawn, real) == [
        "top → mid is drawn but no module of top imports mid",
        "mid imports top but the drawing has no mid → top",
        "mid → top points up: top is listed above mid",
    ]
