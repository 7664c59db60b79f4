"""Which way imports go inside ``service/``: no cycle, and the rooms keep their direction.

The graph is read statically by :mod:`tests.import_graph` (its rules are there); the
whole tree's rules are in ``tests/test_architecture.py``.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import pytest

from tests.import_graph import REPO_ROOT, _fmt, _path_back, components, find_cycles, import_graph

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
    "remote_tier.log_manager": "the tiering task reads it through remote_tier.log_manager.TieredLogs",
    "common.latency": "a histogram the broker holds",
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
