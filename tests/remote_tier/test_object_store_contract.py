"""Contract tests every ObjectStore implementation must pass.

Each test runs once per implementation in ``conftest.STORE_FACTORIES``: the
filesystem store, S3 against moto's server over HTTP, and S3 against MinIO (which
skips where no Docker engine is reachable).
"""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from remote_tier import (
    ObjectInfo,
    ObjectNotFound,
    ObjectStore,
    PreconditionFailed,
)
from tests.remote_tier.conftest import STORE_FACTORIES


@pytest.fixture(params=sorted(STORE_FACTORIES))
def store(request: pytest.FixtureRequest) -> ObjectStore:
    return STORE_FACTORIES[request.param](request)


def test_implementation_satisfies_the_protocol(store: ObjectStore) -> None:
    assert isinstance(store, ObjectStore)


def test_get_returns_the_whole_object_or_a_byte_range(store: ObjectStore) -> None:
    store.put("t/0/seg.log", b"0123456789")
    assert store.get("t/0/seg.log") == b"0123456789"
    assert store.get("t/0/seg.log", 2, 5) == b"234"
    assert store.get("t/0/seg.log", start=7) == b"789"
    assert store.get("t/0/seg.log", end=3) == b"012"
    assert store.get("t/0/seg.log", 4, 4) == b""


def test_get_range_past_the_end_is_clamped(store: ObjectStore) -> None:
    store.put("k", b"abc")
    assert store.get("k", 1, 100) == b"bc"
    assert store.get("k", 3, 10) == b""
    assert store.get("k", 50) == b""


def test_get_rejects_a_negative_or_reversed_range(store: ObjectStore) -> None:
    store.put("k", b"abc")
    with pytest.raises(ValueError):
        store.get("k", -1, 2)
    with pytest.raises(ValueError):
        store.get("k", 2, 1)


def test_get_and_head_of_a_missing_key_raise_object_not_found(store: ObjectStore) -> None:
    with pytest.raises(ObjectNotFound):
        store.get("missing")
    with pytest.raises(ObjectNotFound):
        store.get("missing", 0, 0)
    with pytest.raises(ObjectNotFound):
        store.head("missing")


def test_put_then_head_reports_size_and_the_returned_etag(store: ObjectStore) -> None:
    etag = store.put("a/b", b"hello")
    assert store.head("a/b") == ObjectInfo("a/b", 5, etag)


def test_put_replaces_and_the_etag_follows_the_content(store: ObjectStore) -> None:
    first = store.put("k", b"one")
    second = store.put("k", b"two!")
    assert first != second
    assert store.get("k") == b"two!"
    assert store.head("k") == ObjectInfo("k", 4, second)
    assert store.put("k", b"one") == first


def test_empty_object_round_trips(store: ObjectStore) -> None:
    store.put("empty", b"")
    assert store.get("empty") == b""
    assert store.head("empty").size == 0


def test_list_returns_objects_under_a_prefix_sorted_by_key(store: ObjectStore) -> None:
    keys = ["t/1/b", "t/0/00000000000000000010.log", "t/0/00000000000000000000.log", "u/x", "t0"]
    etags = {key: store.put(key, key.encode()) for key in keys}
    listed = list(store.list("t/"))
    assert [info.key for info in listed] == [
        "t/0/00000000000000000000.log",
        "t/0/00000000000000000010.log",
        "t/1/b",
    ]
    assert all(info.etag == etags[info.key] and info.size == len(info.key) for info in listed)
    assert [i.key for i in store.list("t/0/0000000000000000001")] == [
        "t/0/00000000000000000010.log"
    ]
    assert [i.key for i in store.list("t")] == sorted(k for k in keys if k.startswith("t"))
    assert [i.key for i in store.list("")] == sorted(keys)
    assert list(store.list("nothing/")) == []


def test_delete_removes_and_is_idempotent(store: ObjectStore) -> None:
    store.put("d/k", b"x")
    store.delete("d/k")
    store.delete("d/k")
    store.delete("never/existed")
    with pytest.raises(ObjectNotFound):
        store.head("d/k")
    assert list(store.list("d/")) == []


def test_put_if_absent_creates_once_then_conflicts(store: ObjectStore) -> None:
    etag = store.put_if_absent("lease", b"first")
    with pytest.raises(PreconditionFailed):
        store.put_if_absent("lease", b"second")
    assert store.get("lease") == b"first"
    assert store.head("lease").etag == etag


def test_put_if_match_replaces_when_the_etag_is_current(store: ObjectStore) -> None:
    etag = store.put("m", b"v1")
    new_etag = store.put_if_match("m", b"v2", etag)
    assert store.get("m") == b"v2"
    assert store.head("m").etag == new_etag != etag


def test_put_if_match_with_a_stale_etag_conflicts(store: ObjectStore) -> None:
    stale = store.put("m", b"v1")
    store.put("m", b"v2")
    with pytest.raises(PreconditionFailed):
        store.put_if_match("m", b"v3", stale)
    assert store.get("m") == b"v2"


def test_put_if_match_on_a_missing_object_conflicts(store: ObjectStore) -> None:
    etag = store.put("m", b"v1")
    store.delete("m")
    with pytest.raises(PreconditionFailed):
        store.put_if_match("m", b"v2", etag)
    with pytest.raises(ObjectNotFound):
        store.head("m")


def _compete(n: int, attempt: Callable[[int], object]) -> tuple[list[int], list[int]]:
    """Runs ``attempt(i)`` for i in range(n) on n threads released together; returns
    the ids that succeeded and those that got PreconditionFailed."""
    barrier = threading.Barrier(n)
    winners: list[int] = []
    losers: list[int] = []

    def run(i: int) -> None:
        barrier.wait()
        try:
            attempt(i)
            winners.append(i)
        except PreconditionFailed:
            losers.append(i)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return winners, losers


def _put_if_match_as(store: ObjectStore, key: str, round_no: int, etag: str, who: int) -> str:
    return store.put_if_match(key, f"{round_no}:{who}".encode(), etag)


def test_exactly_one_of_competing_put_if_match_wins_each_round(store: ObjectStore) -> None:
    competitors, rounds = 8, 15
    store.put("cas", b"start")
    for round_no in range(rounds):
        etag = store.head("cas").etag
        attempt = functools.partial(_put_if_match_as, store, "cas", round_no, etag)
        winners, losers = _compete(competitors, attempt)
        assert len(winners) == 1 and len(losers) == competitors - 1
        assert store.get("cas") == f"{round_no}:{winners[0]}".encode()


def test_exactly_one_of_competing_put_if_absent_wins(store: ObjectStore) -> None:
    winners, _ = _compete(8, lambda i: store.put_if_absent("once", str(i).encode()))
    assert len(winners) == 1
    assert store.get("once") == str(winners[0]).encode()


def test_put_file_streams_a_file_and_returns_the_etag_head_reports(
    store: ObjectStore, tmp_path: Path
) -> None:
    source = tmp_path / "segment.log"
    source.write_bytes(bytes(range(256)) * 40)
    etag = store.put_file("t/0/seg.log", source)
    assert store.get("t/0/seg.log") == source.read_bytes()
    assert store.get("t/0/seg.log", 1000, 1010) == source.read_bytes()[1000:1010]
    assert store.head("t/0/seg.log") == ObjectInfo("t/0/seg.log", 10240, etag)


def test_put_file_of_an_empty_file_round_trips(store: ObjectStore, tmp_path: Path) -> None:
    (tmp_path / "empty").write_bytes(b"")
    store.put_file("e", tmp_path / "empty")
    assert store.get("e") == b""


def test_head_and_list_report_when_the_object_was_written(store: ObjectStore) -> None:
    before_ms = int(time.time() * 1000)
    store.put("k", b"x")
    head = store.head("k")
    (listed,) = list(store.list("k"))
    # Clocks: S3 keeps whole seconds, and the server's clock is not ours; allow a margin.
    assert abs(head.last_modified_ms - before_ms) < 600_000
    assert abs(listed.last_modified_ms - head.last_modified_ms) < 2_000
