"""RemoteStorageManager against the filesystem store and moto's S3 server, with injected faults."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from common.record.batch import iter_batches
from remote_tier import ObjectNotFound, ObjectStore, ObjectStoreUnavailable
from remote_tier.errors import FencedError
from remote_tier.filesystem import FileSystemObjectStore
from remote_tier.layout import PartitionLayout
from remote_tier.manifest import RemoteSegment
from remote_tier.storage_manager import RemoteStorageManager
from tests.remote_tier.flaky import FlakyObjectStore
from tests.remote_tier.segments import LocalSegment, write_segments

TOPIC_ID = "3f1c1a7e-8f0e-4c0b-9a57-2f2f1d0d6b11"
PREFIX = "cluster-a"


class _Crash(Exception):
    """Stands for the process dying mid-upload: nothing catches it."""


@pytest.fixture
def local(tmp_path: Path) -> list[LocalSegment]:
    return write_segments(tmp_path / "logs" / "t-0", segments=3, batches_per_segment=3)


def _manager(store: ObjectStore) -> RemoteStorageManager:
    return RemoteStorageManager(store, prefix=PREFIX, backoff_s=0, sleep=lambda _s: None)


def _upload(manager: RemoteStorageManager, segment: LocalSegment, epoch: int = 1) -> RemoteSegment:
    return manager.upload_segment(
        topic="t", topic_id=TOPIC_ID, partition=0, leader_epoch=epoch, **segment.files()
    )


def _keys(store: ObjectStore) -> list[str]:
    return [info.key for info in store.list(PartitionLayout(PREFIX, TOPIC_ID, 0).directory)]


def _upload_all(manager: RemoteStorageManager, local: list[LocalSegment]) -> list[RemoteSegment]:
    return [_upload(manager, s) for s in local]


def test_upload_puts_the_exact_bytes_then_publishes_the_segment(
    any_store: ObjectStore, local: list[LocalSegment]
) -> None:
    manager = _manager(any_store)
    remote = _upload(manager, local[1])
    assert (remote.base_offset, remote.last_offset, remote.record_count) == (12, 23, 12)
    assert (remote.min_timestamp, remote.max_timestamp) == (1_003_000, 1_005_003)
    assert remote.size_bytes == local[1].log_path.stat().st_size and remote.leader_epoch == 1
    assert remote.epochs == ((0, 12),)
    manifest = manager.manifest(TOPIC_ID, 0)
    assert manifest is not None and manifest.segments == (remote,)
    assert (manifest.topic, manifest.leader_epoch) == ("t", 1)
    layout = manager.layout(TOPIC_ID, 0)
    log_key, index_key, time_key = layout.segment_keys(12, remote.upload_id)
    assert any_store.get(log_key) == local[1].log_path.read_bytes()
    assert any_store.get(index_key) == local[1].index_path.read_bytes()
    assert any_store.get(time_key) == local[1].timeindex_path.read_bytes()
    assert sorted(_keys(any_store)) == sorted([log_key, index_key, time_key, layout.manifest_key])


def test_read_range_and_read_index_return_the_segment_bytes(
    any_store: ObjectStore, local: list[LocalSegment]
) -> None:
    manager = _manager(any_store)
    remote = _upload(manager, local[0])
    data = local[0].log_path.read_bytes()
    assert manager.read_range(remote, TOPIC_ID, 0, 0, remote.size_bytes) == data
    assert manager.read_range(remote, TOPIC_ID, 0, 100, 150) == data[100:150]
    assert [
        h.base_offset for _, h in iter_batches(manager.read_range(remote, TOPIC_ID, 0, 0, 10**9))
    ] == [0, 4, 8]
    assert manager.read_index(remote, TOPIC_ID, 0, "offset") == local[0].index_path.read_bytes()
    assert manager.read_index(remote, TOPIC_ID, 0, "time") == local[0].timeindex_path.read_bytes()


def test_uploading_the_same_segment_again_keeps_the_first_and_leaves_nothing(
    any_store: ObjectStore, local: list[LocalSegment]
) -> None:
    manager = _manager(any_store)
    first = _upload(manager, local[0])
    before = _keys(any_store)
    assert _upload(manager, local[0]) == first
    assert _keys(any_store) == before


def test_only_whole_batches_count_and_an_empty_segment_is_refused(
    any_store: ObjectStore, local: list[LocalSegment], tmp_path: Path
) -> None:
    torn = tmp_path / "torn"
    torn.mkdir()
    data = local[0].log_path.read_bytes()
    (torn / "00000000000000000000.log").write_bytes(data[: len(data) - 5])
    for suffix in (".index", ".timeindex"):
        (torn / f"00000000000000000000{suffix}").write_bytes(b"")
    files = {
        "log_path": torn / "00000000000000000000.log",
        "index_path": torn / "00000000000000000000.index",
        "timeindex_path": torn / "00000000000000000000.timeindex",
    }
    manager = _manager(any_store)
    remote = manager.upload_segment(
        topic="t", topic_id=TOPIC_ID, partition=0, leader_epoch=1, **files
    )
    assert (remote.last_offset, remote.record_count) == (7, 8)
    files["log_path"].write_bytes(data[:30])
    with pytest.raises(ValueError, match="no complete record batch"):
        manager.upload_segment(topic="t", topic_id=TOPIC_ID, partition=0, leader_epoch=1, **files)


def test_retention_by_time_removes_old_segments_from_the_manifest_then_the_objects(
    any_store: ObjectStore, local: list[LocalSegment]
) -> None:
    manager = _manager(any_store)
    uploaded = _upload_all(manager, local)
    # now - retention = 1_005_003.5 > max timestamp of segment 0 (1_002_003) and 1 (1_005_003)
    removed = manager.apply_retention(
        TOPIC_ID, 0, retention_ms=1_000, retention_bytes=-1, now_ms=1_006_004, leader_epoch=1
    )
    assert removed == uploaded[:2]
    manifest = manager.manifest(TOPIC_ID, 0)
    assert manifest is not None and manifest.segments == (uploaded[2],)
    assert manifest.log_start_offset == 24
    assert all(
        uploaded[0].upload_id not in k and uploaded[1].upload_id not in k for k in _keys(any_store)
    )
    assert len(_keys(any_store)) == 4


def test_retention_by_size_counts_local_only_bytes_and_keeps_the_newest(
    any_store: ObjectStore, local: list[LocalSegment]
) -> None:
    manager = _manager(any_store)
    uploaded = _upload_all(manager, local)
    size = uploaded[0].size_bytes
    kwargs = {"retention_ms": -1, "now_ms": 0, "leader_epoch": 1}
    assert manager.apply_retention(TOPIC_ID, 0, retention_bytes=3 * size, **kwargs) == []
    removed = manager.apply_retention(
        TOPIC_ID, 0, retention_bytes=3 * size, local_only_bytes=size, **kwargs
    )
    assert removed == uploaded[:1]
    assert manager.apply_retention(TOPIC_ID, 0, retention_bytes=size, **kwargs) == uploaded[1:2]
    manifest = manager.manifest(TOPIC_ID, 0)
    assert manifest is not None and manifest.segments == (uploaded[2],)


def test_retention_below_a_log_start_offset_and_moving_it_inside_a_segment(
    any_store: ObjectStore, local: list[LocalSegment]
) -> None:
    manager = _manager(any_store)
    uploaded = _upload_all(manager, local)
    kwargs = {"retention_ms": -1, "retention_bytes": -1, "now_ms": 0, "leader_epoch": 1}
    assert manager.apply_retention(TOPIC_ID, 0, log_start_offset=15, **kwargs) == uploaded[:1]
    manifest = manager.manifest(TOPIC_ID, 0)
    assert manifest is not None and manifest.log_start_offset == 15
    assert manifest.segment_for(15) == uploaded[1]


def test_an_interrupted_upload_leaves_nothing_visible_and_a_retry_completes(
    any_store: ObjectStore, local: list[LocalSegment]
) -> None:
    manifest_key = PartitionLayout(PREFIX, TOPIC_ID, 0).manifest_key
    flaky = FlakyObjectStore(
        any_store, fail_key=lambda op, key: key == manifest_key and op.startswith("put")
    )
    manager = _manager(flaky)
    with pytest.raises(ObjectStoreUnavailable):
        _upload(manager, local[0])
    assert manager.manifest(TOPIC_ID, 0) is None
    assert _keys(any_store) == []  # the uploaded objects were removed again
    flaky.fail_key = None
    remote = _upload(manager, local[0])
    manifest = manager.manifest(TOPIC_ID, 0)
    assert manifest is not None and manifest.segments == (remote,)


def test_transient_failures_are_retried_with_backoff(
    any_store: ObjectStore, local: list[LocalSegment]
) -> None:
    sleeps: list[float] = []
    flaky = FlakyObjectStore(any_store, fail_every=3)
    manager = RemoteStorageManager(flaky, prefix=PREFIX, backoff_s=0.5, sleep=sleeps.append)
    uploaded = _upload_all(manager, local)
    manifest = manager.manifest(TOPIC_ID, 0)
    assert manifest is not None and manifest.segments == tuple(uploaded)
    assert flaky.failures > 0 and sleeps and set(sleeps) <= {0.5, 1.0, 2.0}


def test_retries_are_bounded(any_store: ObjectStore, local: list[LocalSegment]) -> None:
    flaky = FlakyObjectStore(any_store, fail_key=lambda op, key: op == "put_file")
    manager = RemoteStorageManager(flaky, prefix=PREFIX, max_attempts=3, sleep=lambda _s: None)
    with pytest.raises(ObjectStoreUnavailable):
        _upload(manager, local[0])
    assert flaky.failures == 3


def test_a_lost_commit_response_is_recognised_as_our_own_commit(
    any_store: ObjectStore, local: list[LocalSegment]
) -> None:
    manifest_key = PartitionLayout(PREFIX, TOPIC_ID, 0).manifest_key
    lost = {"left": 1}

    def lose_once(op: str, key: str) -> bool:
        if key == manifest_key and op.startswith("put") and lost["left"]:
            lost["left"] -= 1
            return True
        return False

    manager = _manager(FlakyObjectStore(any_store, succeed_then_fail=lose_once))
    remote = _upload(manager, local[0])
    manifest = manager.manifest(TOPIC_ID, 0)
    assert manifest is not None and manifest.segments == (remote,)
    assert len(_keys(any_store)) == 4  # the referenced objects were not deleted


def test_a_crash_mid_upload_leaves_orphans_that_the_cleanup_removes(
    any_store: ObjectStore, local: list[LocalSegment]
) -> None:
    manager = _manager(any_store)
    kept = _upload(manager, local[0])
    crashing = FlakyObjectStore(
        any_store,
        error=_Crash,
        fail_key=lambda op, key: key.endswith(".timeindex") or op == "delete",
    )
    with pytest.raises(_Crash):
        _upload(_manager(crashing), local[1])
    orphans = [k for k in _keys(any_store) if f"{12:020d}-" in k]
    assert len(orphans) == 2  # .log and .index went up, nothing published
    manifest = manager.manifest(TOPIC_ID, 0)
    assert manifest is not None and manifest.segments == (kept,)
    newest_ms = max(i.last_modified_ms for i in any_store.list(PREFIX))
    # Young objects may be an upload in flight: left alone.
    assert manager.cleanup_orphans(TOPIC_ID, 0, min_age_ms=3_600_000, now_ms=newest_ms) == 0
    assert manager.cleanup_orphans(TOPIC_ID, 0, min_age_ms=0, now_ms=newest_ms + 1_000) == 2
    assert not [k for k in _keys(any_store) if f"{12:020d}-" in k]
    assert _upload(manager, local[1]).base_offset == 12


def test_a_writer_with_an_older_leader_epoch_is_fenced(
    any_store: ObjectStore, local: list[LocalSegment]
) -> None:
    old_leader, new_leader = _manager(any_store), _manager(any_store)
    _upload(old_leader, local[0], epoch=1)
    _upload(new_leader, local[1], epoch=2)
    with pytest.raises(FencedError):
        _upload(old_leader, local[2], epoch=1)
    with pytest.raises(FencedError):
        old_leader.apply_retention(
            TOPIC_ID, 0, retention_ms=0, retention_bytes=-1, now_ms=10**13, leader_epoch=1
        )
    manifest = new_leader.manifest(TOPIC_ID, 0)
    assert manifest is not None and [s.base_offset for s in manifest.segments] == [0, 12]
    assert manifest.leader_epoch == 2
    assert not [k for k in _keys(any_store) if f"{24:020d}-" in k]  # the fenced upload was removed


def test_delete_partition_removes_the_manifest_and_every_object(
    any_store: ObjectStore, local: list[LocalSegment]
) -> None:
    manager = _manager(any_store)
    _upload_all(manager, local)
    any_store.put(f"{PREFIX}/topics/{TOPIC_ID}/1/manifest.json", b"{}")  # another partition
    assert manager.delete_partition(TOPIC_ID, 0) == 9
    assert _keys(any_store) == [] and manager.manifest(TOPIC_ID, 0) is None
    assert [i.key for i in any_store.list(PREFIX)] == [
        f"{PREFIX}/topics/{TOPIC_ID}/1/manifest.json"
    ]


def test_open_log_gives_the_file_of_a_filesystem_segment_and_a_deleted_one_is_not_found(
    any_store: ObjectStore, local: list[LocalSegment]
) -> None:
    """A file:// bucket hands tiered reads the segment's file to ``sendfile`` from; S3 gives
    None (ranged GETs). Once deleted (retention, DeleteTopics), opening it fails as a GET
    does, with ObjectNotFound."""
    manager = _manager(any_store)
    remote = _upload(manager, local[0])
    opened = manager.open_log(remote, TOPIC_ID, 0)
    if not isinstance(any_store, FileSystemObjectStore):
        assert opened is None
        return
    assert opened is not None
    assert os.pread(opened.fileno(), remote.size_bytes + 1, 0) == local[0].log_path.read_bytes()
    assert manager.delete_partition(TOPIC_ID, 0) > 0
    with pytest.raises(ObjectNotFound):
        manager.read_range(remote, TOPIC_ID, 0, 0, 10)
    with pytest.raises(ObjectNotFound):
        manager.open_log(remote, TOPIC_ID, 0)
    assert os.pread(opened.fileno(), 10, 0) == local[0].log_path.read_bytes()[:10]  # still open: still readable
