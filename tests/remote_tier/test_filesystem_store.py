"""Behaviour specific to FileSystemObjectStore (the shared contract is elsewhere)."""

from __future__ import annotations

import errno
import hashlib
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from remote_tier import FileSystemObjectStore, ObjectStoreUnavailable, PreconditionFailed
from remote_tier.filesystem_files import CONTENT_ETAG_MAX_BYTES


@pytest.fixture
def store(tmp_path: Path) -> FileSystemObjectStore:
    return FileSystemObjectStore(tmp_path / "bucket")


@pytest.mark.parametrize(
    "key", ["", "/etc/passwd", "../outside", "a/../../b", "a/./b", "a//b", "a/", ".strata.lock"]
)
def test_keys_that_escape_root_or_are_ambiguous_raise_value_error(
    store: FileSystemObjectStore, key: str
) -> None:
    with pytest.raises(ValueError):
        store.put(key, b"x")
    with pytest.raises(ValueError):
        store.get(key)


def test_list_prefix_may_not_escape_root(store: FileSystemObjectStore) -> None:
    with pytest.raises(ValueError):
        list(store.list("../"))
    with pytest.raises(ValueError):
        list(store.list("/abs"))


def test_objects_are_plain_files_under_root_with_md5_etags(store: FileSystemObjectStore) -> None:
    etag = store.put("topic/0/seg.log", b"payload")
    assert (store.root / "topic" / "0" / "seg.log").read_bytes() == b"payload"
    assert etag == hashlib.md5(b"payload").hexdigest()


def test_list_skips_temp_and_lock_files(store: FileSystemObjectStore) -> None:
    store.put_if_absent("p/k", b"x")
    (store.root / "p" / ".strata-tmp-k.deadbeef").write_bytes(b"half-written")
    assert [info.key for info in store.list("")] == ["p/k"]
    assert (store.root / ".strata.lock").exists()


def test_a_lost_conditional_put_leaves_no_temp_file(store: FileSystemObjectStore) -> None:
    store.put("p/k", b"x")
    with pytest.raises(PreconditionFailed):
        store.put_if_absent("p/k", b"y")
    assert sorted(p.name for p in (store.root / "p").iterdir()) == ["k"]


def test_an_unusable_root_raises_unavailable_saying_what_to_check(tmp_path: Path) -> None:
    (tmp_path / "file").write_bytes(b"")
    with pytest.raises(ObjectStoreUnavailable, match="Check that the directory exists"):
        FileSystemObjectStore(tmp_path / "file" / "bucket")


_INCREMENTER = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    from remote_tier import FileSystemObjectStore, PreconditionFailed

    store = FileSystemObjectStore(Path(sys.argv[1]))
    done = 0
    while done < int(sys.argv[2]):
        etag = store.head("counter").etag
        value = int(store.get("counter"))
        if store.head("counter").etag != etag:
            continue
        try:
            store.put_if_match("counter", str(value + 1).encode(), etag)
            done += 1
        except PreconditionFailed:
            pass
    """
)


def test_put_if_match_loses_no_update_across_processes(store: FileSystemObjectStore) -> None:
    processes, increments = 4, 25
    store.put("counter", b"0")
    repo = Path(__file__).resolve().parents[2]
    workers = [
        subprocess.Popen(
            [sys.executable, "-c", _INCREMENTER, str(store.root), str(increments)], cwd=repo
        )
        for _ in range(processes)
    ]
    assert [w.wait(timeout=120) for w in workers] == [0] * processes
    assert int(store.get("counter")) == processes * increments


def _big(tmp_path: Path, size: int = CONTENT_ETAG_MAX_BYTES + 12_345) -> Path:
    src = tmp_path / "segment.log"
    src.write_bytes(os.urandom(size))
    return src


def test_a_large_file_is_copied_whole_and_its_etag_names_its_version(
    store: FileSystemObjectStore, tmp_path: Path
) -> None:
    """A segment's upload: the bytes arrive whole (copy_file_range), and its etag is the same
    from put_file, head, list and get_with_etag, and a new one when the object is replaced."""
    src = _big(tmp_path)
    etag = store.put_file("t/0/seg.log", src)
    assert (store.root / "t" / "0" / "seg.log").read_bytes() == src.read_bytes()
    assert store.head("t/0/seg.log").etag == etag
    assert [i.etag for i in store.list("t/")] == [etag]
    data, read_etag = store.get_with_etag("t/0/seg.log")
    assert data == src.read_bytes() and read_etag == etag
    assert etag != hashlib.md5(data).hexdigest()  # not read to be hashed
    again = store.put_file("t/0/seg.log", src)  # the same bytes, a new version
    assert again != etag and store.head("t/0/seg.log").etag == again
    with pytest.raises(PreconditionFailed):
        store.put_if_match("t/0/seg.log", b"x", etag)


def test_a_large_file_is_copied_through_the_process_where_the_kernel_cannot(
    store: FileSystemObjectStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """copy_file_range refused (another file system, an old kernel) after a first part: the
    copy goes on from there with reads and writes."""
    src = _big(tmp_path)
    real = os.copy_file_range
    calls = []

    def partial_then_exdev(fd_in: int, fd_out: int, count: int, *args: object) -> int:
        calls.append(count)
        if len(calls) == 1:
            return real(fd_in, fd_out, 1_000_000)
        raise OSError(errno.EXDEV, "cross-device")

    monkeypatch.setattr(os, "copy_file_range", partial_then_exdev)
    store.put_file("t/0/seg.log", src)
    assert len(calls) == 2
    assert (store.root / "t" / "0" / "seg.log").read_bytes() == src.read_bytes()


def test_listing_large_objects_does_not_read_them(
    store: FileSystemObjectStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """list (a partition's objects at a broker's start, a deleted topic's) stats files and
    reads none of a large one: it read and hashed the whole bucket before."""
    store.put_file("t/0/seg.log", _big(tmp_path))
    store.put("t/0/seg.index", b"small")
    hashed: list[int] = []
    real_md5 = hashlib.md5

    def counting_md5(*args: object, **kwargs: object) -> object:
        hashed.append(1)
        return real_md5(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(hashlib, "md5", counting_md5)
    sizes = {i.key: i.size for i in store.list("t/")}
    assert sizes == {"t/0/seg.index": 5, "t/0/seg.log": CONTENT_ETAG_MAX_BYTES + 12_345}
    assert len(hashed) == 1  # the small one alone
