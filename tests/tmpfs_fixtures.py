"""A real small filesystem that fills up: a tmpfs mounted for one test.

``small_tmpfs(size_bytes)`` mounts ``tmpfs`` of that size on a fresh directory
under the test's tmp dir and returns the directory; it is unmounted at teardown.
Mounting needs root (or CAP_SYS_ADMIN); elsewhere the test is skipped with the
reason. ``fill(path)`` writes a file until the filesystem answers ENOSPC, so
what is left free is less than one page.

``tests/conftest.py`` makes the fixture available to every test directory.
"""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

__all__ = ["fill", "free_bytes", "small_tmpfs"]

_FILL_CHUNK = 64 * 1024


def free_bytes(path: Path) -> int:
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize


def fill(path: Path, chunk: int = _FILL_CHUNK) -> int:
    """Write ``path`` until ENOSPC (smaller and smaller writes); returns its size."""
    written = 0
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        while chunk >= 1:
            try:
                written += os.write(fd, b"\0" * chunk)
            except OSError as exc:
                if exc.errno != errno.ENOSPC:
                    raise
                chunk //= 2
    finally:
        os.close(fd)
    return written


@pytest.fixture
def small_tmpfs(tmp_path: Path) -> Iterator[Callable[[int], Path]]:
    """Factory: ``small_tmpfs(size_bytes) -> mount point`` (skips when mount is not permitted)."""
    mounted: list[Path] = []

    def mount(size_bytes: int) -> Path:
        if shutil.which("mount") is None:
            pytest.skip("cannot mount a tmpfs here: no mount command")
        where = tmp_path / f"tmpfs{len(mounted)}"
        where.mkdir()
        result = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={size_bytes}", "tmpfs", str(where)],
            capture_output=True, text=True, check=False,
        )
        if result.returncode != 0:
            pytest.skip(f"cannot mount a tmpfs here (needs root): {result.stderr.strip()}")
        mounted.append(where)
        return where

    yield mount
    for where in reversed(mounted):
        # Lazy: a process of the test that still holds a file must not fail teardown.
        subprocess.run(["umount", "-l", str(where)], capture_output=True, check=False)
