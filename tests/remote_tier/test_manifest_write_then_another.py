"""A manifest write lands, its answer is lost and the retry finds the manifest changed (412),
and in between another writer of the same leader (the upload of the next segment)
committed on top of it. The writer must still know its change was made: a remote
compaction must not report "nothing written" (compact_remote would then delete the cleaned
segment the manifest lists), and retention must delete the objects of the segments its
landed write removed."""
from __future__ import annotations

import uuid
from pathlib import Path
from types import SimpleNamespace

from remote_tier.compaction import _swap
from remote_tier.filesystem import FileSystemObjectStore
from remote_tier.manifest import ManifestStore, PartitionManifest, RemoteSegment
from remote_tier.storage_manager import RemoteStorageManager

OLD_UPLOAD = "00000000000000000000000000000001"
CLEANED_UPLOAD = "00000000000000000000000000000002"
NEXT_UPLOAD = "00000000000000000000000000000003"
KEEP = "00000000000000000000000000000004"
NEXT = "00000000000000000000000000000005"


def _segment(base: int, last: int, upload: str) -> RemoteSegment:
    return RemoteSegment(base, last, 100, 0, 0, 1, last - base + 1, upload)


class _LandsThenOtherWriterThen412(FileSystemObjectStore):
    arm = None  # a callable run after the landed write, before the 412

    def put_if_match(self, key: str, data: bytes, etag: str) -> str:
        new = super().put_if_match(key, data, etag)
        if self.arm is not None and key.endswith("manifest.json"):
            other, self.arm = self.arm, None
            other()
            return super().put_if_match(key, data, etag)  # the retry of the request: 412
        return new


def test_a_swap_that_landed_under_an_upload_is_reported_written(tmp_path: Path) -> None:
    store = _LandsThenOtherWriterThen412(tmp_path / "bucket")
    rsm = RemoteStorageManager(store)
    tid = uuid.uuid4()
    old = _segment(0, 9, OLD_UPLOAD)
    rsm.manifests.update(tid, 0, lambda cur: PartitionManifest.empty("t", tid, 0, 1).with_segment(old),
                         leader_epoch=1)
    new = _segment(0, 9, CLEANED_UPLOAD)
    task = SimpleNamespace(topic="t", topic_id=tid, partition=0, leader_epoch=1, now_ms=0, grace_ms=1000)
    plain = ManifestStore(FileSystemObjectStore(tmp_path / "bucket"))  # the upload thread, same leader

    def upload_next_segment() -> None:
        plain.update(tid, 0, lambda cur: cur.with_segment(_segment(10, 19, NEXT_UPLOAD)), leader_epoch=1)

    store.arm = upload_next_segment
    committed = _swap(rsm, task, [([old], new)], 9)  # type: ignore[arg-type]
    listed = [s.upload_id for s in rsm.manifest(tid, 0).segments]  # type: ignore[union-attr]
    assert listed == [CLEANED_UPLOAD, NEXT_UPLOAD]  # the swap is in the bucket
    assert committed is not None, "_swap says nothing was written: compact_remote deletes 'cleaned-upload'"


def test_retention_that_landed_under_an_upload_deletes_what_it_removed(tmp_path: Path) -> None:
    store = _LandsThenOtherWriterThen412(tmp_path / "bucket")
    rsm = RemoteStorageManager(store)
    tid = uuid.uuid4()
    old = _segment(0, 9, OLD_UPLOAD)
    keep = RemoteSegment(10, 19, 100, 0, 10**15, 1, 10, KEEP)
    rsm.manifests.update(tid, 0, lambda cur: PartitionManifest.empty("t", tid, 0, 1).with_segment(old).with_segment(keep),
                         leader_epoch=1)
    plain = ManifestStore(FileSystemObjectStore(tmp_path / "bucket"))
    store.arm = lambda: plain.update(tid, 0, lambda cur: cur.with_segment(_segment(20, 29, NEXT)), leader_epoch=1)
    removed = rsm.apply_retention(tid, 0, retention_ms=1000, retention_bytes=-1, now_ms=10**6, leader_epoch=1)
    assert [s.upload_id for s in rsm.manifest(tid, 0).segments] == [KEEP, NEXT]  # type: ignore[union-attr]
    assert [s.upload_id for s in removed] == [OLD_UPLOAD], "the expired segment's objects are never deleted"
