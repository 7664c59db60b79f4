"""What a ``strata up`` that fails removes again: only what that process created.

The brokers of ``strata up --brokers N`` start together, each in its own directory of one
data dir, beside the bucket they share (the cluster's metadata); a broker that cannot
start (a taken port) must leave the others' directories and the bucket alone, whoever
made the data dir above them. So a process counts as its own only the directories its
``mkdir`` made and the entries of its data dir that appeared while it held the data
dir's lock, and removes a directory it made only when it is empty.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

__all__ = ["StartUndo", "make_dirs", "remove_empty_dirs"]


def make_dirs(path: Path) -> list[Path]:
    """Make ``path`` and its missing parents; the ones this process made (outermost first).

    A directory another process makes meanwhile (the brokers of ``strata up --brokers N``
    start together on one fresh data dir) is not counted: only a ``mkdir`` that succeeded
    here makes a directory this process's to remove. Stops quietly at one it cannot make:
    the data dir's lock then says why."""
    made: list[Path] = []
    for directory in (*reversed(path.parents), path):
        if directory.is_dir():
            continue
        try:
            directory.mkdir()
        except FileExistsError:
            continue  # made by another process meanwhile (or not a directory: the lock says so)
        except OSError:
            break
        made.append(directory)
    return made


def remove_empty_dirs(made: list[Path]) -> None:
    """Remove the directories of :func:`make_dirs`, innermost first, each only if empty: what
    other processes put in them since (another broker's data, a shared bucket) stays."""
    for directory in reversed(made):
        try:
            directory.rmdir()
        except OSError:
            return  # not empty: it holds something this process did not make, so do its parents


class StartUndo:
    """What a start that never served created in its data dir, removed again: it holds
    nothing acknowledged. Only entries that appeared while this process held the data dir's
    lock are its own (no other broker writes there then); the lock file only when this
    process made it; directories above only when empty (:func:`remove_empty_dirs`)."""

    def __init__(self, data_dir: Path) -> None:
        from local_tier.dirlock import LOCK_FILE  # the broker's modules load only when it runs

        self.data_dir = data_dir
        self._lock_file = data_dir / LOCK_FILE
        self.dirs = make_dirs(data_dir)
        self.served = False
        self._lock_was_there = self._lock_file.exists()
        self._before: set[str] | None = None

    def serving(self) -> None:
        self.served = True

    def locked(self) -> None:
        """The lock is this process's: what is in the data dir now is not."""
        self._before = set(os.listdir(self.data_dir))

    def undo_locked(self) -> None:
        """With the lock still held: remove what appeared under it, then the lock file if new."""
        if self.served or self._before is None:
            return
        for name in sorted(set(os.listdir(self.data_dir)) - self._before):
            path = self.data_dir / name
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path, ignore_errors=True)
            else:
                path.unlink(missing_ok=True)
        if not self._lock_was_there:
            self._lock_file.unlink(missing_ok=True)

    def undo_dirs(self) -> None:
        """After the lock is released: the directories this process made, if empty now."""
        if not self.served:
            remove_empty_dirs(self.dirs)
