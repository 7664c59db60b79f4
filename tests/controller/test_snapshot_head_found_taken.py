"""A snapshot whose head compare-and-set landed and whose retry found the head moved (by
itself) still trims the log below the previous snapshot: otherwise no later snapshot
deletes those slots."""

from __future__ import annotations

from pathlib import Path

from controller.commit import LogPolicy, MetadataCommitter
from controller.document import ClusterMetadata
from controller.metadata_store import ObjectStoreMetadataStore
from remote_tier.filesystem import FileSystemObjectStore


class _HeadRetriedAfterLanding(FileSystemObjectStore):
    arm = False

    def put_if_match(self, key: str, data: bytes, etag: str) -> str:
        new = super().put_if_match(key, data, etag)
        if self.arm and key == "cluster/metadata.json":
            self.arm = False
            return super().put_if_match(key, data, etag)  # the retry: PreconditionFailed
        return new


def test_a_snapshot_whose_head_write_landed_trims_the_log_below_it(tmp_path: Path) -> None:
    store = _HeadRetriedAfterLanding(tmp_path / "bucket")
    committer = MetadataCommitter(ObjectStoreMetadataStore(store), LogPolicy(retention_ms=0))
    snap = committer.create(ClusterMetadata(cluster_id="c"))
    epoch = 0

    def commit_two() -> None:
        nonlocal snap, epoch
        for _ in range(2):
            epoch += 1
            snap = committer.commit(snap, snap.metadata, controller_epoch=epoch, controller_id=1)

    commit_two()
    assert committer.take_snapshot(snap) is not None
    commit_two()
    store.arm = True
    committer.take_snapshot(snap)  # lands; answered as a lost race
    commit_two()
    head = committer.take_snapshot(snap)
    assert head is not None
    slots = sorted(int(i.key.rsplit("/", 1)[1].split(".")[0]) for i in store.list("cluster/metadata/log/"))
    snapshots = sorted(int(i.key.rsplit("/", 1)[1].split(".")[0]) for i in store.list("cluster/metadata/snapshot/"))
    assert all(s >= head.log_start for s in slots), (head.log_start, slots, snapshots)
