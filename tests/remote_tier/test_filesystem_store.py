"""Behaviour specific to FileSystemObjectStore (the shared contract is elsewhere)."""

from __future__ import annotations

import hashlib
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from remote_tier import FileSystemObjectStore, ObjectStoreUnavailable, PreconditionFailed


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
