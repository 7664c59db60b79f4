"""How :mod:`remote_tier.filesystem`'s store writes an object's file and names its version.

An object's bytes go to a new temp file beside it, fsynced, before the store renames it
into place (:func:`write_temp`). A file being stored (a segment's upload) is copied with
``copy_file_range``: in the kernel, a reflink where the file system shares blocks, never
through this process unless the kernel cannot (:func:`copy_file`).

The etag (:func:`etag`, :func:`file_etag`): for an object of up to
:data:`CONTENT_ETAG_MAX_BYTES` the MD5 of its content, as S3's for single-part uploads,
which the store's conditional writes compare; for a larger one (a segment's ``.log``,
written once under a key of its own) its file's inode number, size and modification time,
not an MD5, as S3's multipart etags are not. Hashing a gigabyte cost more than its copy,
and the store's ``list`` reported every object's etag, so a broker's start read the whole
bucket. Blocking: call from a thread.
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import os
import sys
import uuid
from collections.abc import Callable
from pathlib import Path

__all__ = ["CONTENT_ETAG_MAX_BYTES", "HASH_CHUNK", "TMP_PREFIX", "allocate", "copy_file", "etag",
           "file_etag", "named_by_file", "write_all", "write_temp"]

TMP_PREFIX = ".strata-tmp-"
HASH_CHUNK = 1 << 20
#: objects up to this size have the MD5 of their content as etag, larger ones one made of
#: their file's inode, size and modification time (see the module docstring)
CONTENT_ETAG_MAX_BYTES = 8 << 20
#: copy_file_range's errors that mean "not here" (another file system, an old kernel):
#: the copy goes on through this process
_FS_IOC_GETVERSION = 0x80087601  # _IOR('v', 1, long)
_NO_KERNEL_COPY = frozenset({errno.EXDEV, errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP, errno.EPERM})


def write_temp(path: Path, source: bytes | Path) -> tuple[Path, str]:
    """Writes ``source`` (bytes, or a file) to a new fsynced temp file beside ``path``;
    returns it and its etag."""
    digest = hashlib.md5(usedforsecurity=False)
    tmp = path.with_name(f"{TMP_PREFIX}{path.name}.{uuid.uuid4().hex}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        if isinstance(source, Path):
            src = os.open(source, os.O_RDONLY | os.O_CLOEXEC)
            try:
                if named_by_file(os.fstat(src).st_size):
                    copy_file(src, fd)
                else:
                    while chunk := os.read(src, HASH_CHUNK):
                        digest.update(chunk)
                        write_all(fd, chunk)
            finally:
                os.close(src)
        else:
            if not named_by_file(len(source)):
                digest.update(source)
            write_all(fd, source)
        os.fsync(fd)
        st = os.fstat(fd)  # what the object's file will be: a rename keeps inode and mtime
        tag = etag(st, fd, digest.hexdigest)
    except BaseException:
        os.close(fd)
        tmp.unlink(missing_ok=True)
        raise
    os.close(fd)
    return tmp, tag


def copy_file(src: int, dst: int) -> None:
    """All of ``src`` (from its start) to ``dst``: ``copy_file_range`` in the kernel (no
    copy through this process; a reflink on XFS or btrfs), or reads and writes where the
    kernel cannot (another file system, an old kernel)."""
    try:
        while os.copy_file_range(src, dst, 1 << 30):
            pass
        return
    except OSError as err:
        if err.errno not in _NO_KERNEL_COPY:
            raise
    while chunk := os.read(src, HASH_CHUNK):  # on from where the kernel's copy stopped
        write_all(dst, chunk)


def file_etag(st: os.stat_result, fd: int) -> str:
    """A large object's etag: its file's inode number and generation, size and modification
    time. A write replaces the file, so a new version is a new inode; the generation (ext4,
    XFS) tells an inode number used again apart, the mtime does where there is none."""
    return f"{st.st_ino:x}-{_generation(fd):x}-{st.st_size:x}-{st.st_mtime_ns:x}"


def _generation(fd: int) -> int:
    """The inode's generation number (``FS_IOC_GETVERSION``); 0 where the file system has none."""
    try:
        return int.from_bytes(fcntl.ioctl(fd, _FS_IOC_GETVERSION, bytes(8))[:4], sys.byteorder)
    except OSError:
        return 0


def named_by_file(size: int) -> bool:
    """Whether an object of ``size`` bytes has an etag made of its file, not of its content."""
    return size > CONTENT_ETAG_MAX_BYTES


def etag(st: os.stat_result, fd: int, content_md5: Callable[[], str]) -> str:
    """The etag of the object whose file is ``st`` (open as ``fd``): ``content_md5()`` (the hex
    MD5 of its bytes, asked for only when it is needed) or, for a large one, :func:`file_etag`."""
    return file_etag(st, fd) if named_by_file(st.st_size) else content_md5()


def allocate(fd: int, size: int) -> None:
    """Make ``size`` bytes of the file take real space (not a sparse hole)."""
    try:
        os.posix_fallocate(fd, 0, size)
    except OSError as err:
        if err.errno not in (errno.EOPNOTSUPP, errno.EINVAL):
            raise
        write_all(fd, bytes(size))  # a file system without fallocate
        os.fsync(fd)


def write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]
