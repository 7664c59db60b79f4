"""An :class:`~remote_tier.store.ObjectStore` on a local directory.

This is the store behind ``strata up``'s embedded mode and the reference for the
contract tests. Object ``a/b/c`` is the regular file ``<root>/a/b/c``.

Invariants:

* Every object is a regular file under ``root``; a file or directory whose name
  starts with ``.strata`` is internal (the lock file, temp files) and never an
  object, so keys may not contain such a segment.
* Keys are relative ``/``-separated paths with no empty, ``.`` or ``..`` segment;
  anything else would escape ``root`` or be ambiguous and raises ``ValueError``.
  Unlike S3, ``a`` and ``a/b`` cannot both exist (a file is not a directory).
* Writes are atomic: the bytes go to a temp file in the destination directory,
  are fsynced, and replace the object with ``os.replace`` (then the directory
  is fsynced). A reader sees the old object or the new one, never a mix.
* The etag is the hex MD5 of the content (like S3's for single-part uploads) for an
  object of up to 8 MiB, which conditional writes compare; a larger one's (a segment's
  ``.log``) is made of its file, not read to be hashed, and a file is stored with
  ``copy_file_range`` (:mod:`remote_tier.filesystem_files`).
* A full disk: ``<root>/.strata-reserve`` is a file of ``reserve_bytes``
  (default 1 MiB) allocated up front. When a small write (at most
  ``reserve_bytes`` minus 64 KiB: the cluster metadata, a manifest) fails with
  ENOSPC or EDQUOT, the store shrinks the reserve by what the write needs and tries
  once more, so the
  metadata write that frees space (DeleteTopics, a lower retention) gets
  through even when the logs beside the store filled the disk.
  :meth:`FileSystemObjectStore.restore_reserve` allocates it again once space is
  free (after every mutation; the broker also calls it after deleting logs).
  See ``docs/adr/0007-full-disk-and-data-dir-lock.md``.

Thread- and process-safety: every call is safe from any thread of any process
sharing ``root``. The final step of every mutation (precondition check, then
replace or unlink) runs under an exclusive ``fcntl.flock`` on ``<root>/.strata.lock``,
opened per call, so conditional puts are atomic against other threads and other
processes alike. Writing the temp file happens outside the lock. Blocking: never
call it on the event loop.
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import os
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO

from remote_tier.filesystem_files import (
    HASH_CHUNK,
    TMP_PREFIX,
    allocate,
    etag,
    write_temp,
)
from remote_tier.store import (
    ObjectInfo,
    ObjectNotFound,
    ObjectStoreError,
    ObjectStoreUnavailable,
    PreconditionFailed,
    clamp_range,
)

__all__ = ["FileSystemObjectStore", "ObjectFile"]

_INTERNAL = ".strata"
_LOCK_NAME = ".strata.lock"
_RESERVE_NAME = ".strata-reserve"
#: Space kept free for small writes on a full disk (see the module docstring).
DEFAULT_RESERVE_BYTES = 1 << 20
# A write may use the reserve when it is this much smaller than it: file system
# blocks, a directory block, rounding.
_RESERVE_SLACK = 64 * 1024
# a write on a full disk takes its bytes, rounded up to blocks, and one block more from the
# reserve: no more, or what is freed beyond it would go to the logs' appends
_BLOCK = 4096
_DISK_FULL = (errno.ENOSPC, errno.EDQUOT)
# An etag is cached only for files unmodified for this long, so a later file that
# reuses the inode number, size and (coarse) mtime can never hit a stale entry.
_SETTLED_NS = 2_000_000_000
_MAX_CACHED_ETAGS = 10_000

_StatKey = tuple[int, int, int, int]


class FileSystemObjectStore:
    """Objects as files under ``root`` (see the module docstring for invariants).

    Thread-safe and multi-process-safe; blocking.
    """

    def __init__(self, root: Path, *, reserve_bytes: int = DEFAULT_RESERVE_BYTES) -> None:
        self._root = Path(root).absolute()
        self._lock_path = self._root / _LOCK_NAME
        self._reserve_path = self._root / _RESERVE_NAME
        self._reserve_bytes = max(0, reserve_bytes)
        self._etags: dict[_StatKey, str] = {}
        self._etags_lock = threading.Lock()
        try:
            self._root.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            raise self._unavailable("create", str(self._root), err) from err
        self.restore_reserve()

    @property
    def root(self) -> Path:
        return self._root

    @property
    def url(self) -> str:
        """The store as ``strata up --object-store`` takes it: ``file:///path``."""
        return self._root.as_uri()

    def __repr__(self) -> str:
        return f"FileSystemObjectStore({str(self._root)!r})"

    # -- reads ------------------------------------------------------------------

    def get(self, key: str, start: int | None = None, end: int | None = None) -> bytes:
        path = self._path(key)
        try:
            with open(path, "rb") as f:
                lo, hi = clamp_range(os.fstat(f.fileno()).st_size, start, end)
                f.seek(lo)
                return f.read(hi - lo)
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
            raise ObjectNotFound(key) from None
        except OSError as err:
            raise self._unavailable("read", key, err) from err

    def open_read(self, key: str) -> ObjectFile:
        """The object's file, open read-only, for ``os.sendfile`` of ranges of it: a
        reader that sends the bytes on never copies them into memory. The descriptor
        keeps the object's bytes readable even if it is deleted afterwards (as an
        open local segment does); a missing key is :class:`ObjectNotFound`, as ``get``."""
        path = self._path(key)
        try:
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
            raise ObjectNotFound(key) from None
        except OSError as err:
            raise self._unavailable("read", key, err) from err
        return ObjectFile(fd)

    def get_with_etag(self, key: str) -> tuple[bytes, str]:
        """The whole object and the etag of exactly the bytes read (see ``store.get_with_etag``):
        the MD5 of them, or (a large object) made of the file that was read."""
        path = self._path(key)
        try:
            with open(path, "rb") as f:
                st = os.fstat(f.fileno())
                data = f.read()
                tag = etag(st, f.fileno(), lambda: hashlib.md5(data, usedforsecurity=False).hexdigest())
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
            raise ObjectNotFound(key) from None
        except OSError as err:
            raise self._unavailable("read", key, err) from err
        return data, tag

    def head(self, key: str) -> ObjectInfo:
        path = self._path(key)
        try:
            return self._info(key, path)
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
            raise ObjectNotFound(key) from None
        except OSError as err:
            raise self._unavailable("stat", key, err) from err

    def list(self, prefix: str) -> Iterator[ObjectInfo]:
        start_dir = self._prefix_dir(prefix)
        found: list[ObjectInfo] = []
        for dirpath, dirnames, filenames in os.walk(start_dir):
            rel = Path(dirpath).relative_to(self._root).as_posix()
            base = "" if rel == "." else rel + "/"
            dirnames[:] = [d for d in dirnames if _may_hold(base + d + "/", prefix)]
            for name in filenames:
                key = base + name
                if name.startswith(_INTERNAL) or not key.startswith(prefix):
                    continue
                try:
                    found.append(self._info(key, Path(dirpath, name)))
                except (FileNotFoundError, IsADirectoryError):
                    continue  # deleted while listing
                except OSError as err:
                    raise self._unavailable("list", key, err) from err
        found.sort(key=lambda info: info.key)
        return iter(found)

    # -- writes -----------------------------------------------------------------

    def put(self, key: str, data: bytes) -> str:
        return self._write(key, data, None)

    def put_file(self, key: str, path: Path) -> str:
        """Copies ``path`` to a temp file (in the kernel where it can), then replaces."""
        return self._write(key, Path(path), None)

    def put_if_absent(self, key: str, data: bytes) -> str:
        def check(path: Path) -> None:
            if path.exists():
                raise PreconditionFailed(f"object {key!r} already exists")

        return self._write(key, data, check)

    def put_if_match(self, key: str, data: bytes, etag: str) -> str:
        def check(path: Path) -> None:
            try:
                _, current, _ = self._size_etag_mtime(path)
            except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
                raise PreconditionFailed(f"object {key!r} does not exist") from None
            if current != etag:
                raise PreconditionFailed(
                    f"object {key!r} has etag {current}, not the expected {etag}"
                )

        return self._write(key, data, check)

    def delete(self, key: str) -> None:
        path = self._path(key)
        try:
            with self._locked():
                path.unlink(missing_ok=True)
            _fsync_dir(path.parent)
        except (IsADirectoryError, NotADirectoryError, FileNotFoundError):
            return
        except OSError as err:
            raise self._unavailable("delete", key, err) from err
        self.restore_reserve()

    # -- the full-disk reserve -----------------------------------------------------

    def restore_reserve(self) -> bool:
        """Allocate the reserve file if it is missing; False when there is no room yet.

        Cheap when it exists (one ``stat``). Blocking; safe from any thread or process.
        """
        if self._reserve_bytes == 0:
            return True
        try:
            size = self._reserve_path.stat().st_size
            if size >= self._reserve_bytes:
                return True
            return self._grow_reserve()
        except FileNotFoundError:
            pass
        except OSError:
            return False
        tmp = self._root / f"{TMP_PREFIX}reserve.{uuid.uuid4().hex}"
        try:
            with self._locked():
                fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
                try:
                    allocate(fd, self._reserve_bytes)
                finally:
                    os.close(fd)
                os.replace(tmp, self._reserve_path)
        except OSError:
            return False
        finally:
            tmp.unlink(missing_ok=True)
        return True

    def _grow_reserve(self) -> bool:
        """A reserve shrunk by writes on a full disk takes back what is free, up to its size:
        the blocks a replaced object frees go back to the reserve, not to the logs' appends."""
        with self._locked():
            fd = os.open(self._reserve_path, os.O_WRONLY)
            try:
                size = os.fstat(fd).st_size
                try:
                    allocate(fd, self._reserve_bytes)
                    return True
                except OSError:
                    stats = os.statvfs(self._root)
                    free = stats.f_bavail * stats.f_frsize
                    grow = min(self._reserve_bytes, size + free - free % _BLOCK)
                    if grow > size:
                        try:
                            allocate(fd, grow)
                        except OSError:
                            pass
                    return False
            finally:
                os.close(fd)

    def _write_temp_with_reserve(self, path: Path, data: bytes) -> tuple[Path, str]:
        """The disk is full: give up as much of the reserve as this write needs and write
        once more (under the lock, so no other writer's :meth:`restore_reserve` takes the
        space back first). The metadata log adds an object per change, so the reserve is
        shrunk, not deleted: a full disk still takes a few dozen metadata changes (a
        restart's registration, then the DeleteTopics that frees space)."""
        need = -(-len(data) // _BLOCK) * _BLOCK + _BLOCK  # its blocks, and one for the file system
        with self._locked():
            try:
                left = self._reserve_path.stat().st_size - need
                if left >= _BLOCK:
                    os.truncate(self._reserve_path, left)
                else:
                    self._reserve_path.unlink()
            except FileNotFoundError:
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path)) from None
            return write_temp(path, data)

    # -- helpers ----------------------------------------------------------------

    def _write(self, key: str, source: bytes | Path, check: Callable[[Path], None] | None) -> str:
        path = self._path(key)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except (FileExistsError, NotADirectoryError) as err:
            raise _shadowed(key) from err
        except OSError as err:
            raise self._unavailable("write", key, err) from err
        try:
            try:
                tmp, etag = write_temp(path, source)
            except OSError as err:
                if isinstance(source, Path) or not (
                    err.errno in _DISK_FULL and self._may_use_reserve(source)
                ):
                    raise
                tmp, etag = self._write_temp_with_reserve(path, source)
        except (FileExistsError, NotADirectoryError) as err:
            raise _shadowed(key) from err
        except OSError as err:
            if isinstance(source, Path) and err.filename == str(source):
                raise  # the caller's source file is missing or unreadable: not the store's fault
            raise self._unavailable("write", key, err) from err
        try:
            with self._locked():
                if check is not None:
                    check(path)
                os.replace(tmp, path)
            _fsync_dir(path.parent)
        except IsADirectoryError as err:
            raise _shadowed(key) from err
        except OSError as err:
            raise self._unavailable("write", key, err) from err
        finally:
            tmp.unlink(missing_ok=True)  # a no-op once replaced
        self.restore_reserve()
        return etag

    def _may_use_reserve(self, source: bytes | Path) -> bool:
        """Only small writes: a segment upload must not take the metadata's reserve."""
        return not isinstance(source, Path) and len(source) + _RESERVE_SLACK <= self._reserve_bytes

    @contextmanager
    def _locked(self) -> Iterator[None]:
        # A descriptor per call: flock excludes other descriptors of this process
        # (other threads) as well as other processes.
        fd = os.open(self._lock_path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    def _info(self, key: str, path: Path) -> ObjectInfo:
        size, etag, mtime_ns = self._size_etag_mtime(path)
        return ObjectInfo(key, size, etag, mtime_ns // 1_000_000)

    def _size_etag_mtime(self, path: Path) -> tuple[int, str, int]:
        with open(path, "rb") as f:
            st = os.fstat(f.fileno())
            tag = etag(st, f.fileno(), lambda: self._content_md5(f, st))
        return st.st_size, tag, st.st_mtime_ns

    def _content_md5(self, f: BinaryIO, st: os.stat_result) -> str:
        """The hex MD5 of the open file ``f`` (``st``), cached once it has settled."""
        stat_key = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
        settled = st.st_mtime_ns < time.time_ns() - _SETTLED_NS
        if settled:
            with self._etags_lock:
                cached = self._etags.get(stat_key)
            if cached is not None:
                return cached
        digest = hashlib.md5(usedforsecurity=False)
        while chunk := f.read(HASH_CHUNK):
            digest.update(chunk)
        tag = digest.hexdigest()
        if settled:
            with self._etags_lock:
                if len(self._etags) >= _MAX_CACHED_ETAGS:
                    self._etags.clear()
                self._etags[stat_key] = tag
        return tag

    def _path(self, key: str) -> Path:
        segments = key.split("/")
        if not key or any(s in ("", ".", "..") for s in segments) or "\0" in key:
            raise ValueError(
                f"invalid object key {key!r}: keys are relative '/'-separated paths "
                "without empty, '.' or '..' segments"
            )
        if any(s.startswith(_INTERNAL) for s in segments):
            raise ValueError(f"invalid object key {key!r}: '{_INTERNAL}*' names are reserved")
        return self._root.joinpath(*segments)

    def _prefix_dir(self, prefix: str) -> Path:
        dirs = prefix.split("/")[:-1]
        if prefix.startswith("/") or any(s in ("", ".", "..") for s in dirs) or "\0" in prefix:
            raise ValueError(f"invalid key prefix {prefix!r}")
        return self._root.joinpath(*dirs)

    def _unavailable(self, op: str, key: str, err: OSError) -> ObjectStoreUnavailable:
        return ObjectStoreUnavailable(
            f"filesystem object store at {self._root}: cannot {op} {key!r}: "
            f"{err.strerror or err}. Check that the directory exists, is writable by "
            "this user, and that the disk is not full."
        )


class ObjectFile:
    """A read-only descriptor on an object's file, closed when the last holder drops it.

    Ranges of it are handed to sockets by other threads and the event loop, each
    through a ``dup`` of its own (``fetch.sending.held_fd``), so no holder needs to
    know when the others are done; closing on release never closes a descriptor in use.
    """

    __slots__ = ("_fd",)

    def __init__(self, fd: int) -> None:
        self._fd = fd

    def fileno(self) -> int:
        return self._fd

    def __del__(self) -> None:
        os.close(self._fd)


def _may_hold(dir_prefix: str, prefix: str) -> bool:
    """Whether keys under ``dir_prefix`` (ends with '/') can start with ``prefix``."""
    if dir_prefix[:-1].rsplit("/", 1)[-1].startswith(_INTERNAL):
        return False
    return dir_prefix.startswith(prefix) or prefix.startswith(dir_prefix)


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _shadowed(key: str) -> ObjectStoreError:
    return ObjectStoreError(
        f"cannot write {key!r}: on the filesystem store one key cannot be both an "
        "object and the prefix of another (a file is not a directory)"
    )
