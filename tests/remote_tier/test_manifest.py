"""Partition manifests: the value, its JSON, and compare-and-set updates fenced by epoch."""

from __future__ import annotations

import json
import threading
from dataclasses import replace

import pytest

from remote_tier import ObjectStore
from remote_tier.errors import FencedError, ManifestFormatError
from remote_tier.manifest import FORMAT_VERSION, ManifestStore, PartitionManifest, RemoteSegment

TOPIC_ID = "3f1c1a7e-8f0e-4c0b-9a57-2f2f1d0d6b11"


def seg(
    base: int, last: int, *, size: int = 100, max_ts: int = 0, upload: str = ""
) -> RemoteSegment:
    return RemoteSegment(
        base_offset=base,
        last_offset=last,
        size_bytes=size,
        min_timestamp=max_ts - 10,
        max_timestamp=max_ts,
        leader_epoch=1,
        record_count=last - base + 1,
        upload_id=upload or f"{base:032x}",
        epochs=((1, base),),
    )


def manifest(*segments: RemoteSegment, log_start: int = 0) -> PartitionManifest:
    return PartitionManifest("orders", TOPIC_ID, 3, 1, log_start, segments)


def test_a_compacted_manifest_is_format_3_and_round_trips() -> None:
    from remote_tier.manifest import ReplacedSegment

    m = replace(manifest(seg(0, 9), seg(10, 19)), cleaner_offset=20,
                replaced=(ReplacedSegment(0, "ab" * 16, 1_700_000_000_000),))
    data = m.to_json_bytes()
    doc = json.loads(data)
    assert doc["format_version"] == FORMAT_VERSION == 3
    assert doc["cleaner_offset"] == 20
    assert doc["replaced"] == [{"base_offset": 0, "upload_id": "ab" * 16, "delete_after_ms": 1_700_000_000_000}]
    assert PartitionManifest.from_json_bytes(data) == m
    doc["format_version"] = 4
    with pytest.raises(ManifestFormatError):
        PartitionManifest.from_json_bytes(json.dumps(doc).encode())


def test_json_round_trip_keeps_every_field() -> None:
    m = replace(manifest(seg(0, 9, max_ts=5), seg(10, 19, max_ts=7), log_start=4), revision=12)
    data = m.to_json_bytes()
    assert PartitionManifest.from_json_bytes(data) == m
    doc = json.loads(data)
    assert doc["format_version"] == 2  # format 3 only once a remote compaction wrote it
    assert set(doc) == {
        "format_version",
        "topic",
        "topic_id",
        "partition",
        "leader_epoch",
        "log_start_offset",
        "revision",
        "segments",
    }
    assert doc["segments"][1] == {
        "base_offset": 10,
        "last_offset": 19,
        "size_bytes": 100,
        "min_timestamp": -3,
        "max_timestamp": 7,
        "leader_epoch": 1,
        "record_count": 10,
        "upload_id": f"{10:032x}",
        "epochs": [[1, 10]],
        "txn_index_bytes": 0,
        "producer_snapshot_bytes": 0,
    }


@pytest.mark.parametrize("version", [4, 0, None, "1"])
def test_an_unknown_format_version_is_refused_clearly(version: object) -> None:
    doc = json.loads(manifest(seg(0, 9)).to_json_bytes())
    doc["format_version"] = version
    with pytest.raises(ManifestFormatError, match=rf"format_version {version!r}.*versions \(1, 2, 3\)"):
        PartitionManifest.from_json_bytes(json.dumps(doc).encode())


def test_a_version_1_manifest_still_reads_as_segments_without_transaction_objects() -> None:
    doc = json.loads(manifest(seg(0, 9)).to_json_bytes())
    doc["format_version"] = 1
    for segment in doc["segments"]:
        del segment["txn_index_bytes"], segment["producer_snapshot_bytes"]
    (only,) = PartitionManifest.from_json_bytes(json.dumps(doc).encode()).segments
    assert (only.base_offset, only.txn_index_bytes, only.producer_snapshot_bytes) == (0, 0, 0)


@pytest.mark.parametrize(
    "data", [b"not json", b"[]", b'{"format_version": 1}', b'{"format_version": 1, "topic": 5}']
)
def test_malformed_manifests_are_refused(data: bytes) -> None:
    with pytest.raises(ManifestFormatError):
        PartitionManifest.from_json_bytes(data)


def test_overlapping_segments_are_refused() -> None:
    with pytest.raises(ManifestFormatError, match="overlaps"):
        manifest(seg(0, 9), seg(9, 19))


def test_offsets_sizes_and_lookups() -> None:
    m = manifest(
        seg(0, 9, max_ts=100), seg(10, 19, max_ts=200), seg(30, 39, max_ts=300), log_start=5
    )
    assert m.next_offset == 40 and m.size_bytes == 300
    assert m.segment_for(4) is None and m.segment_for(40) is None
    assert m.segment_for(5) == m.segments[0] and m.segment_for(19) == m.segments[1]
    assert m.segment_for(25) == m.segments[2]  # in a gap: the next segment
    assert m.segments_after(9) == m.segments[1:] and m.segments_after(10) == m.segments[2:]
    assert m.segments_after(39) == ()
    assert m.segment_for_timestamp(150) == m.segments[1]
    assert m.segment_for_timestamp(301) is None
    assert m.find(15) == m.segments[1] and m.find(25) is None
    empty = manifest(log_start=17)
    assert empty.next_offset == 17 and empty.segment_for(17) is None


def test_load_returns_none_until_the_first_update(any_store: ObjectStore) -> None:
    store = ManifestStore(any_store, "pre")
    assert store.load(TOPIC_ID, 3) is None
    written = store.update(
        TOPIC_ID, 3, lambda cur: manifest(seg(0, 9)) if cur is None else cur, leader_epoch=1
    )
    loaded = store.load(TOPIC_ID, 3)
    assert loaded is not None and loaded[0] == written
    assert loaded[1] == any_store.head(f"pre/topics/{TOPIC_ID}/3/manifest.json").etag


def test_update_bumps_the_revision_and_stamps_the_writer_epoch(any_store: ObjectStore) -> None:
    store = ManifestStore(any_store)
    store.update(TOPIC_ID, 3, lambda cur: manifest(), leader_epoch=1)
    second = store.update(
        TOPIC_ID, 3, lambda cur: cur and cur.with_segment(seg(0, 9)), leader_epoch=4
    )
    assert second is not None and (second.revision, second.leader_epoch) == (1, 4)


def test_a_no_change_update_writes_nothing(any_store: ObjectStore) -> None:
    store = ManifestStore(any_store)
    store.update(TOPIC_ID, 3, lambda cur: manifest(), leader_epoch=1)
    etag = any_store.head(f"topics/{TOPIC_ID}/3/manifest.json").etag
    store.update(TOPIC_ID, 3, lambda cur: cur, leader_epoch=1)
    assert any_store.head(f"topics/{TOPIC_ID}/3/manifest.json").etag == etag


def test_a_lower_epoch_writer_is_fenced_and_writes_nothing(any_store: ObjectStore) -> None:
    store = ManifestStore(any_store)
    store.update(TOPIC_ID, 3, lambda cur: manifest(seg(0, 9)), leader_epoch=5)
    with pytest.raises(FencedError, match="epoch 5.*epoch 4 is fenced"):
        store.update(TOPIC_ID, 3, lambda cur: manifest(), leader_epoch=4)
    loaded = store.load(TOPIC_ID, 3)
    assert loaded is not None and len(loaded[0].segments) == 1


def test_concurrent_updates_are_all_applied_by_retrying(any_store: ObjectStore) -> None:
    store = ManifestStore(any_store, max_attempts=50)
    store.update(TOPIC_ID, 3, lambda cur: manifest(), leader_epoch=1)
    writers = 6
    barrier = threading.Barrier(writers)
    errors: list[BaseException] = []

    def add(i: int) -> None:
        barrier.wait()
        try:
            store.update(
                TOPIC_ID,
                3,
                lambda cur: cur and cur.with_segment(seg(10 * i, 10 * i + 9)),
                leader_epoch=1,
            )
        except BaseException as err:  # noqa: BLE001 - reported below
            errors.append(err)

    threads = [threading.Thread(target=add, args=(i,)) for i in range(writers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    loaded = store.load(TOPIC_ID, 3)
    assert loaded is not None
    assert [s.base_offset for s in loaded[0].segments] == [10 * i for i in range(writers)]
    assert loaded[0].revision == writers
