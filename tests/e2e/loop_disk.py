"""A real disk that fails writes: ext4 on a loop device whose backing file outgrows its tmpfs.

``LoopDisk(workdir, mount_at)`` formats a sparse 256 MiB image on a small tmpfs (a thin
device), attaches it to a free loop device and mounts it at ``mount_at``. ``fail()``
fills the tmpfs, so the device's next writes fail in the kernel: the next ``fsync`` of
data written since answers ENOSPC, later ones EIO, and ext4 aborts its journal, as with
a thin pool or a SAN volume that ran out, or a dying disk. ``heal()`` (the broker
stopped) unmounts (the page cache of the device goes with it, so pages whose write-back
failed are gone as after a power cut), frees the tmpfs, repairs the filesystem with
``e2fsck`` and mounts it again. ``close()`` unmounts and detaches whatever it set up.

Needs root (mount, losetup); elsewhere the test is skipped with the reason.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from tests.tmpfs_fixtures import fill

__all__ = ["LoopDisk"]

_IMAGE_BYTES = 256 * 1024 * 1024


def _run(*command: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(command, capture_output=True, text=True, check=False)
    if check and result.returncode != 0:
        raise RuntimeError(f"{' '.join(command)}: {result.returncode} {result.stderr.strip()}")
    return result


class LoopDisk:
    """See the module docstring."""

    def __init__(self, workdir: Path, mount_at: Path, backing_bytes: int = 64 * 1024 * 1024) -> None:
        for tool in ("mount", "losetup", "mkfs.ext4", "e2fsck"):
            if shutil.which(tool) is None:
                pytest.skip(f"no {tool} here: cannot build a failing disk")
        self.back = workdir / "backing"
        self.mount_at = mount_at
        self.image = self.back / "disk.img"
        self.device: str | None = None
        self._tmpfs = False
        self.back.mkdir(parents=True)
        mounted = _run("mount", "-t", "tmpfs", "-o", f"size={backing_bytes}", "tmpfs", str(self.back),
                       check=False)
        if mounted.returncode != 0:
            pytest.skip(f"cannot mount a tmpfs here (needs root): {mounted.stderr.strip()}")
        self._tmpfs = True
        with open(self.image, "wb") as image:
            image.truncate(_IMAGE_BYTES)
        _run("mkfs.ext4", "-q", "-F", "-E", "lazy_itable_init=1,lazy_journal_init=1", str(self.image))
        self._attach()

    def _attach(self) -> None:
        attached = _run("losetup", "-f", "--show", str(self.image), check=False)
        if attached.returncode != 0:
            self.close()
            pytest.skip(f"no loop device here: {attached.stderr.strip()}")
        self.device = attached.stdout.strip()
        self.mount_at.mkdir(parents=True, exist_ok=True)
        mounted = _run("mount", "-t", "ext4", self.device, str(self.mount_at), check=False)
        if mounted.returncode != 0:
            self.close()
            pytest.skip(f"cannot mount an ext4 loop device here: {mounted.stderr.strip()}")

    def _detach(self) -> None:
        if self.device is None:
            return
        if _run("umount", str(self.mount_at), check=False).returncode != 0:
            _run("umount", "-l", str(self.mount_at), check=False)  # a process still holds a file
        _run("losetup", "-d", self.device, check=False)  # (or detached when the last user goes)
        self.device = None

    def fail(self) -> None:
        """From now on the device's writes fail (its backing store is full)."""
        fill(self.back / "filler")

    def heal(self) -> None:
        """Unmount (dropping the page cache), free the backing store, repair, mount again."""
        self._detach()
        (self.back / "filler").unlink(missing_ok=True)
        repaired = _run("e2fsck", "-f", "-y", str(self.image), check=False)
        assert repaired.returncode in (0, 1, 2), repaired.stdout + repaired.stderr
        self._attach()

    def close(self) -> None:
        self._detach()
        if self._tmpfs:
            _run("umount", "-l", str(self.back), check=False)
            self._tmpfs = False
