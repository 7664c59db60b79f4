"""docs/architecture.md matches the code: its package table names every package and only those.

Checked: every top-level package the project ships and every package inside one,
at any depth, has a row in the table of the "Packages" section; every row names a
package that exists; every room under "Rooms to come" does not exist yet (when
one is made it moves into the table).
"""

from __future__ import annotations

import re
from pathlib import Path

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


def test_no_module_of_service_is_over_500_lines_without_a_reason() -> None:
    """CONVENTIONS: small modules; one over ~500 lines says why at its top."""
    long = []
    for path in sorted((REPO_ROOT / "service").rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        if text.count("\n") > 500 and "Over 500 lines because" not in text[:3000]:
            long.append(f"{path.relative_to(REPO_ROOT)}: {text.count(chr(10))} lines")
    assert not long, "split these, or say at the top 'Over 500 lines because ...':\n" + "\n".join(long)
