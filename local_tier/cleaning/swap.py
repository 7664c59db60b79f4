"""Swapping a cleaned segment in, crash-safely (Kafka's ``replaceSegments`` protocol).

The cleaner writes a group's cleaned segment as ``<base>.log.cleaned`` (and
``.index.cleaned``, ``.timeindex.cleaned``, ``.txnindex.cleaned``) and fsyncs it.
The log's owner thread then:

1. renames the cleaned files to ``.swap``, the ``.log`` last: from the moment
   ``<base>.log.swap`` exists the swap is decided, and a restart completes it;
2. renames the replaced segments' files to ``.deleted`` (their descriptors stay
   open for reads in flight; they are unlinked ``file.delete.delay.ms`` later);
3. renames the ``.swap`` files to their final names, the ``.log`` last.

A cleaned segment ends exactly where its group ended (the cleaner keeps the
group's last batch, empty if need be), so the offsets a ``.log.swap`` covers,
``[base, its next offset)``, are exactly those of the segments it replaces.

At start, before the segments are opened, :func:`recover_swaps` finishes what a
crash interrupted: ``.cleaned`` files are deleted (the swap never started); an
index ``.swap`` without its ``.log.swap`` is deleted (step 1 was cut short); for
each ``.log.swap`` the segments it replaces that are still there are deleted
and its files renamed (steps 2 and 3). ``.deleted`` files are the log's usual
leftovers.

Functions on a partition directory; call them only while nothing else uses it
(log loading) or on the log's owner thread.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from common.record.batch import BATCH_OVERHEAD, iter_batches, read_batch_header
from local_tier.checkpoint import fsync_dir

__all__ = ["CLEANED_SUFFIX", "SWAP_SUFFIX", "recover_swaps", "swap_end_offset"]

CLEANED_SUFFIX = ".cleaned"
SWAP_SUFFIX = ".swap"
_SEGMENT_FILES = (".log", ".index", ".timeindex", ".txnindex")
_SCAN = 1 << 20
_log = logging.getLogger("strata.local_tier")


def _base(name: str) -> int | None:
    stem = name.split(".", 1)[0]
    return int(stem) if stem.isdigit() and len(stem) == 20 else None


def swap_end_offset(path: Path) -> int | None:
    """One past the last offset of the whole batches in ``path`` (None: none)."""
    end: int | None = None
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        pos = 0
        while size - pos >= BATCH_OVERHEAD:
            window = os.pread(f.fileno(), min(_SCAN, size - pos), pos)
            used = 0
            for at, header in iter_batches(window):
                end, used = header.next_offset, at + header.size
            if used == 0:
                header = read_batch_header(window)
                if header.size > size - pos or header.size < BATCH_OVERHEAD:
                    break
                end, used = header.next_offset, header.size
            pos += used
    return end


def recover_swaps(directory: Path, name: str) -> int:
    """Finish or undo the swaps a crash interrupted in ``directory``; the swaps completed."""
    files = list(directory.iterdir())
    log_swaps = {}
    for path in files:
        if path.name.endswith(CLEANED_SUFFIX):
            _log.info("%s: removing %s of an unfinished cleaning", name, path.name)
            path.unlink(missing_ok=True)
        elif path.name.endswith(".log" + SWAP_SUFFIX) and (base := _base(path.name)) is not None:
            log_swaps[base] = path
    for path in files:
        if path.name.endswith(SWAP_SUFFIX) and not path.name.endswith(".log" + SWAP_SUFFIX):
            if _base(path.name) not in log_swaps:
                _log.info("%s: removing %s of a swap that did not start", name, path.name)
                path.unlink(missing_ok=True)
    for base, swap in sorted(log_swaps.items()):
        end = swap_end_offset(swap)
        upper = end if end is not None else base + 1
        for path in list(directory.iterdir()):
            old = _base(path.name)
            if old is None or not base <= old < upper or not path.name.endswith(_SEGMENT_FILES):
                continue
            _log.info("%s: removing %s, replaced by the cleaned segment %s", name, path.name, swap.name)
            path.unlink(missing_ok=True)
        for suffix in (".index", ".timeindex", ".txnindex", ".log"):
            pending = directory / f"{base:020d}{suffix}{SWAP_SUFFIX}"
            if pending.exists():
                os.rename(pending, directory / f"{base:020d}{suffix}")
        _log.info("%s: completed the swap of cleaned segment %020d (offsets %d to %d)",
                  name, base, base, upper - 1)
    if log_swaps:
        fsync_dir(directory)
    return len(log_swaps)
