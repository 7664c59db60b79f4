"""Kafka's small text checkpoint files, written atomically.

Format (``recovery-point-offset-checkpoint``, ``log-start-offset-checkpoint``,
``replication-offset-checkpoint`` (the high watermarks), ``leader-epoch-checkpoint``)::

    0            <- version
    2            <- number of entries
    <entry>      <- one line per entry, fields separated by single spaces
    <entry>

A write goes to ``<name>.tmp``, is fsynced, renamed over the file, and the
directory is fsynced, so a crash leaves either the old or the new checkpoint.
A write that fails (a full disk) removes its temp file and raises OSError; the
old checkpoint stays as it was.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from pathlib import Path

__all__ = [
    "LOG_START_OFFSET_CHECKPOINT",
    "RECOVERY_POINT_CHECKPOINT",
    "REPLICATION_OFFSET_CHECKPOINT",
    "CheckpointError",
    "fsync_dir",
    "read_checkpoint",
    "read_offset_checkpoint",
    "write_checkpoint",
    "write_offset_checkpoint",
]

RECOVERY_POINT_CHECKPOINT = "recovery-point-offset-checkpoint"
LOG_START_OFFSET_CHECKPOINT = "log-start-offset-checkpoint"
#: the high watermark of every log (Kafka's file of the same name)
REPLICATION_OFFSET_CHECKPOINT = "replication-offset-checkpoint"
_VERSION = 0


class CheckpointError(ValueError):
    """A checkpoint file is malformed."""


def fsync_dir(directory: Path) -> None:
    """fsync a directory so renames and creations inside it are durable."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_checkpoint(path: Path, entries: Iterable[Iterable[object]]) -> None:
    """Atomically replace ``path`` with a version-0 checkpoint of ``entries``."""
    lines = [" ".join(str(field) for field in entry) for entry in entries]
    text = "\n".join([str(_VERSION), str(len(lines)), *lines]) + "\n"
    tmp = path.with_name(path.name + ".tmp")
    try:
        with open(tmp, "w", encoding="utf-8") as out:
            out.write(text)
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    fsync_dir(path.parent)


def read_checkpoint(path: Path) -> list[list[str]]:
    """The entries of a checkpoint as lists of fields; ``[]`` when the file is missing."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return []
    lines = text.splitlines()
    if len(lines) < 2 or lines[0].strip() != str(_VERSION):
        raise CheckpointError(f"{path}: unsupported checkpoint header {lines[:2]!r}")
    try:
        count = int(lines[1])
    except ValueError as exc:
        raise CheckpointError(f"{path}: bad entry count {lines[1]!r}") from exc
    entries = [line.split() for line in lines[2:] if line.strip()]
    if len(entries) != count:
        raise CheckpointError(f"{path}: expected {count} entries, found {len(entries)}")
    return entries


def write_offset_checkpoint(path: Path, offsets: Mapping[tuple[str, int], int]) -> None:
    """Write ``topic partition offset`` lines."""
    write_checkpoint(path, ((topic, part, off) for (topic, part), off in sorted(offsets.items())))


def read_offset_checkpoint(path: Path) -> dict[tuple[str, int], int]:
    """Read ``topic partition offset`` lines."""
    result: dict[tuple[str, int], int] = {}
    for fields in read_checkpoint(path):
        if len(fields) != 3:
            raise CheckpointError(f"{path}: malformed line {' '.join(fields)!r}")
        result[(fields[0], int(fields[1]))] = int(fields[2])
    return result
