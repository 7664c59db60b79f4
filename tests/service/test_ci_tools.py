"""A tool the suite needs that cannot be installed is a failure, not a silent skip (issue 32,
item 9).

``.ci/test`` is run on a PATH of stubs: ``apt-get`` that fails, a ``python3`` that records how
it was called, and the tools a case provides. Without kcat, chromium, promtool and javac it
stops with exit code 1, names the packages to install and never runs the suite (before, it
warned and ran it, and whole groups of tests skipped). With them it runs pytest with
``STRATA_REQUIRE_TOOLS=1``, under which a test whose tool is missing fails (``kcat`` is a
fixture: a test asking for it is run here on a PATH without it).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT, subprocess_env

REQUIRED = {"kcat": "kcat", "javac": "openjdk-17-jdk-headless", "chromium": "chromium",
            "promtool": "prometheus"}


def _stub(directory: Path, name: str, body: str = "exit 0") -> None:
    path = directory / name
    path.write_text(f"#!/bin/bash\n{body}\n")
    path.chmod(0o755)


def _ci_test(tmp_path: Path, tools: list[str]) -> tuple[subprocess.CompletedProcess[str], str]:
    """``.ci/test`` on a PATH of stubs holding ``tools``; the run and what python3 was asked."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for real in ("dirname", "id"):
        (bin_dir / real).symlink_to(subprocess.run(["/bin/bash", "-c", f"command -v {real}"], capture_output=True,
                                                   text=True, check=True).stdout.strip())
    calls = tmp_path / "python3-calls"
    _stub(bin_dir, "apt-get", "exit 100")  # no package can be installed
    _stub(bin_dir, "python3", f'echo "STRATA_REQUIRE_TOOLS=$STRATA_REQUIRE_TOOLS $*" >> {calls}')
    for tool in tools:
        _stub(bin_dir, tool)
    env = {"PATH": str(bin_dir), "HOME": str(tmp_path)}
    run = subprocess.run(["/bin/bash", str(REPO_ROOT / ".ci" / "test"), "-q"], env=env, capture_output=True,
                         text=True, timeout=60, check=False)
    return run, calls.read_text() if calls.exists() else ""


def test_ci_test_fails_naming_the_packages_when_the_tools_cannot_be_installed(tmp_path: Path) -> None:
    run, calls = _ci_test(tmp_path, ["nft", "ip"])
    assert run.returncode == 1, (run.stdout, run.stderr)
    assert calls == ""  # neither pip nor the suite ran
    error = run.stderr
    assert "apt-get install -y" in error, error
    for package in REQUIRED.values():
        assert package in error, (package, error)


def test_ci_test_fails_when_one_tool_is_missing(tmp_path: Path) -> None:
    run, calls = _ci_test(tmp_path, ["kcat", "javac", "chromium", "nft", "ip"])
    assert run.returncode == 1 and calls == "", (run.stdout, run.stderr)
    assert "apt-get install -y prometheus" in run.stderr, run.stderr


def test_ci_test_runs_the_suite_requiring_its_tools_when_they_are_there(tmp_path: Path) -> None:
    run, calls = _ci_test(tmp_path, [*REQUIRED, "nft", "ip"])
    assert run.returncode == 0, (run.stdout, run.stderr)
    suite = [line for line in calls.splitlines() if " -m pytest " in line]
    assert suite == ["STRATA_REQUIRE_TOOLS=1 -m pytest -n 2 --dist loadfile -q"], calls


def test_the_network_tools_are_optional(tmp_path: Path) -> None:
    """Without nftables and iproute2 the Jepsen-style test cuts links with proxies: a warning."""
    run, calls = _ci_test(tmp_path, list(REQUIRED))
    assert run.returncode == 0, (run.stdout, run.stderr)
    assert "nftables" in run.stderr and " -m pytest " in calls


@pytest.mark.parametrize(("env", "outcome"), [
    ({"STRATA_REQUIRE_TOOLS": "1"}, "1 error"),  # failed in its fixture: an error, the run fails
    ({"CI": "true"}, "1 error"),
    ({}, "1 skipped"),
])
def test_a_test_that_needs_kcat_fails_without_it_where_tools_are_required(
    tmp_path: Path, env: dict[str, str], outcome: str,
) -> None:
    (tmp_path / "test_needs_kcat.py").write_text("def test_it(kcat):\n    assert kcat\n")
    child = subprocess_env()
    child.pop("CI", None)
    child.pop("STRATA_REQUIRE_TOOLS", None)
    child.update(env, PATH=os.path.dirname(sys.executable))  # no kcat there
    run = subprocess.run([sys.executable, "-m", "pytest", "-p", "tests.conftest", "-q", "-rfs", "-p", "no:cacheprovider",
                          str(tmp_path / "test_needs_kcat.py")], cwd=tmp_path, env=child,
                         capture_output=True, text=True, timeout=120, check=False)
    assert outcome in run.stdout, run.stdout + run.stderr
    assert (run.returncode == 0) == (outcome == "1 skipped"), run.returncode
    assert "kcat is not installed (apt-get install -y kcat)" in run.stdout, run.stdout
