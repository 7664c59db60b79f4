"""``python -m service ...`` as a subprocess, and what a clean success or failure looks like.

Shared by the tests of the ``strata`` client commands (topics, produce, consume,
groups, perf).
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

__all__ = ["REPO_ROOT", "TIMEOUT_S", "describe_partitions", "fails_cleanly", "ok", "strata", "unused_port"]

REPO_ROOT = Path(__file__).resolve().parents[3]
TIMEOUT_S = 90


def strata(*args: str, bootstrap: str | None = None, stdin: str | None = None,
           env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Run ``python -m service ARGS`` and return the finished process (text mode)."""
    cmd = [sys.executable, "-m", "service", *args]
    if bootstrap is not None:
        cmd += ["--bootstrap-server", bootstrap]
    full_env = dict(os.environ)
    full_env.pop("STRATA_BOOTSTRAP", None)
    full_env["PYTHONPATH"] = str(REPO_ROOT) + (
        os.pathsep + full_env["PYTHONPATH"] if full_env.get("PYTHONPATH") else "")
    full_env.update(env or {})
    return subprocess.run(cmd, input=stdin, capture_output=True, text=True, cwd=REPO_ROOT,
                          env=full_env, timeout=TIMEOUT_S, check=False)


def unused_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def ok(proc: subprocess.CompletedProcess[str]) -> subprocess.CompletedProcess[str]:
    assert proc.returncode == 0, (proc.args, proc.returncode, proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc


def fails_cleanly(proc: subprocess.CompletedProcess[str]) -> str:
    """Exit code 1 and exactly one line of explanation on stderr; returns it."""
    assert proc.returncode == 1, (proc.args, proc.returncode, proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, proc.stderr
    return lines[0]


def describe_partitions(out: str) -> dict[int, dict[str, str]]:
    """{partition: {field: value}} from the indented lines of `topics describe`."""
    parts = {}
    for line in out.splitlines():
        if not line.startswith("\t"):
            continue
        fields = dict(f.split(": ", 1) for f in line.strip().split("\t"))
        parts[int(fields["Partition"])] = fields
    return parts
