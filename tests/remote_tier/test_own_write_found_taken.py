"""A conditional write whose first attempt landed but whose answer came after the control
timeout: the store sends it again at once and the retry finds the key taken (412). Every
caller must take that for its own success. Real S3ObjectStore and moto server, behind a
proxy that holds back one answer (a slow but healthy S3)."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from types import SimpleNamespace

import pytest

from controller.lease import NO_HOLDER, ControllerLease, LeaseEvent, LeaseRecord, LeaseTimings
from remote_tier.compaction import _swap
from remote_tier.diskless.commits import ChainId, CommitBatch, CommitChain, CommitEntry
from remote_tier.manifest import PartitionManifest, RemoteSegment
from remote_tier.s3 import S3ObjectStore
from remote_tier.storage_manager import RemoteStorageManager
from tests.e2e.tcp_proxy import CuttingProxy
from tests.s3_fixtures import MotoServer, S3Bucket

CONTROL_S = 0.3
SLOW_S = 0.8  # the answer comes after the control timeout; the write itself lands at once


@pytest.fixture
def proxy(moto_server: MotoServer, s3_bucket: S3Bucket) -> Iterator[CuttingProxy]:
    p = CuttingProxy(moto_server.port)
    yield p
    p.close()


def _store(bucket: S3Bucket, proxy: CuttingProxy) -> S3ObjectStore:
    return S3ObjectStore(bucket.bucket, "rv", endpoint_url=f"http://{proxy.address}",
                         control_timeout_s=CONTROL_S)


def test_a_slow_conditional_create_lands_and_its_retry_finds_it_taken(s3_bucket: S3Bucket, proxy: CuttingProxy) -> None:
    from remote_tier.errors import PreconditionFailed
    store = _store(s3_bucket, proxy)
    proxy.delay_next_response(SLOW_S)
    with pytest.raises(PreconditionFailed):
        store.put_if_absent("k", b"mine")
    assert proxy.delayed == 1
    assert store.get("k") == b"mine"  # it was our own write


def test_a_diskless_commit_slot_holding_this_batch_is_its_append(s3_bucket: S3Bucket, proxy: CuttingProxy) -> None:
    """Taken for another process's batch, the group committer would stop sequencing and
    answer NOT_LEADER_OR_FOLLOWER to writers whose entries are durable."""
    store = _store(s3_bucket, proxy)
    chain = CommitChain(store, "", ChainId(1, 7))
    entry = CommitEntry(uuid.uuid4(), 0, 1, 0, 1, "wal/obj-1", 0, 100, 1)
    batch = CommitBatch(chain.chain, 0, uuid.uuid4().hex, 1, (entry,))
    proxy.delay_next_response(SLOW_S)
    landed = chain.append(batch)
    found = chain.read(0)
    assert found is not None and found.batch_id == batch.batch_id  # our batch is in the slot
    assert landed, "append said another batch holds the slot that holds this very batch"


def _segment(base: int, last: int, upload: str) -> RemoteSegment:
    return RemoteSegment(base, last, 100, 0, 0, 1, last - base + 1, upload)


def test_a_remote_compaction_swap_that_landed_is_written(s3_bucket: S3Bucket, proxy: CuttingProxy) -> None:
    """Reported as not written, compact() would delete the cleaned segment's objects the
    manifest lists, and the replaced ones after the grace: the records gone."""
    store = _store(s3_bucket, proxy)
    rsm = RemoteStorageManager(store)
    tid = uuid.uuid4()
    old = _segment(0, 9, "old-upload")
    rsm.manifests.update(tid, 0, lambda cur: PartitionManifest.empty("t", tid, 0, 1).with_segment(old),
                         leader_epoch=1)
    new = _segment(0, 9, "cleaned-upload")
    task = SimpleNamespace(topic="t", topic_id=tid, partition=0, leader_epoch=1, now_ms=0, grace_ms=1000)

    class _Arm:  # arm the delay for the put_if_match only (after load's head/get/head)
        def __init__(self, inner):  # type: ignore[no-untyped-def]
            self.inner = inner

        def __getattr__(self, name):  # type: ignore[no-untyped-def]
            return getattr(self.inner, name)

        def put_if_match(self, key, data, etag):  # type: ignore[no-untyped-def]
            proxy.delay_next_response(SLOW_S)
            return self.inner.put_if_match(key, data, etag)

    rsm._manifests._store = _Arm(rsm._manifests._store)  # type: ignore[attr-defined]
    committed = _swap(rsm, task, [([old], new)], 9)  # type: ignore[arg-type]
    listed = [s.upload_id for s in rsm.manifest(tid, 0).segments]  # type: ignore[union-attr]
    assert listed == ["cleaned-upload"]  # the swap is in the bucket
    assert committed is not None, "_swap said nothing was written: compact() deletes the objects the manifest lists"


def test_a_lease_takeover_that_landed_is_acquired_once_knowing_whom_it_replaced(s3_bucket: S3Bucket,
                                                                                  proxy: CuttingProxy) -> None:
    """Taken for a lost race, the next step would acquire again at epoch + 2 and forget the
    controller it replaced, which its first write fences."""
    store = _store(s3_bucket, proxy)
    store.put("cluster/controller-lease", LeaseRecord(2, 5, "inc-2", 5000).encode())
    lease = ControllerLease(store, 1, "inc-1", LeaseTimings())

    def gone(holder: int) -> bool:
        proxy.delay_next_response(SLOW_S)
        return True

    first = lease.take_over_if_gone(gone)
    events = [first]
    for _ in range(3):
        if lease.holds():
            break
        events.append(lease.step())
        time.sleep(0.05)
    assert lease.holds()
    assert (first, lease.epoch, lease.stepped_down) == (LeaseEvent.ACQUIRED, 6, 2), (events, lease.epoch,
                                                                                   lease.stepped_down, NO_HOLDER)


def test_whole_object_data_reads_keep_the_long_timeout_on_a_slow_healthy_store(s3_bucket: S3Bucket,
                                                                                   proxy: CuttingProxy) -> None:
    """Every answer comes after 1.5× the control timeout (a loaded but healthy MinIO or S3):
    a whole-object GET of data (diskless write-ahead objects) keeps the data timeout, as a
    ranged one does. Scaled down: control 0.3 s, answers after 0.45 s."""
    from remote_tier.errors import ObjectStoreUnavailable
    store = _store(s3_bucket, proxy)
    data = b"w" * (4 << 20)
    store.put("diskless/wal/obj-1", data)
    proxy.slow_s = 0.45
    assert store.get("diskless/wal/obj-1", 0, len(data)) == data  # ranged: 30 s timeout, fine
    try:
        whole = store.get("diskless/wal/obj-1")  # whole: the data timeout too
    except ObjectStoreUnavailable as err:
        pytest.fail(f"a whole-object data GET fails on a slow but healthy store: {err}")
    finally:
        proxy.slow_s = 0.0
    assert whole == data
