"""Several ClusterControllers on one bucket (filesystem and moto's S3): who is active,
failover, and the fencing of a deposed controller's metadata writes."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from controller import (
    BrokerConfig,
    ClusterController,
    Controller,
    ControllerFencedError,
    MetadataCommitter,
    NotControllerError,
    ObjectStoreMetadataStore,
    TopicInfo,
)
from controller.commit import current_document
from controller.lease import LEASE_KEY, LeaseRecord
from controller.topic_changes import random_uuid
from remote_tier import FileSystemObjectStore, ObjectInfo, ObjectStore
from tests.controller.cluster_helpers import (
    TAKEOVER_MS,
    TIMINGS,
    FakeClock,
    join,
    make_cluster_controller,
    tick_until_active,
)
from tests.controller.conftest import MakeStore

METADATA_KEY = "cluster/metadata.json"


def stored_metadata(store: ObjectStore) -> dict:  # type: ignore[type-arg]
    """The stored image as a format-2 document (the bucket holds the metadata log)."""
    document = current_document(store, METADATA_KEY)
    assert document is not None
    return document


def test_one_of_three_becomes_active_and_its_first_act_is_a_write_with_its_epoch(
    make_store: MakeStore, clock: FakeClock
) -> None:
    a, b, c = (make_cluster_controller(make_store(), clock, n) for n in (1, 2, 3))
    for x in (a, b, c):
        x.tick()
    assert [x.is_active for x in (a, b, c)] == [True, False, False]
    assert json.loads(make_store().get(METADATA_KEY))["version"] == 3  # the head of the log
    document = stored_metadata(make_store())
    assert document["controller"] == {"node_id": 1, "epoch": 1}
    assert (a.epoch, a.controller_id, b.controller_id, c.controller_id) == (1, 1, 1, 1)
    with pytest.raises(
        NotControllerError, match="not the active controller .the controller is node 1"
    ):
        b.create_topic("t", 1)
    assert "t" not in {t["name"] for t in stored_metadata(make_store())["topics"]}


def test_when_the_controller_stops_another_takes_over_and_keeps_the_metadata(
    make_store: MakeStore, clock: FakeClock
) -> None:
    a, b, c = (make_cluster_controller(make_store(), clock, n) for n in (1, 2, 3))
    assert tick_until_active(clock, [a, b, c]) is a
    join(a, 1)
    created = a.create_topic("orders", 2)
    paused_at = clock.now  # a is paused from here on: it never ticks again
    successor = tick_until_active(clock, [b, c])
    assert clock.now - paused_at >= TAKEOVER_MS - TIMINGS.renew_ms  # waited out a's lease
    assert successor.epoch == 2
    assert stored_metadata(make_store())["controller"] == {"node_id": successor.node_id, "epoch": 2}
    assert successor.topic("orders") == created
    successor.create_topic("payments", 1)
    # a resumes: its lease ran out on its own clock, so it does not act
    assert not a.is_active
    revision = stored_metadata(make_store())["revision"]
    with pytest.raises(NotControllerError):
        a.create_topic("late", 1)
    assert stored_metadata(make_store())["revision"] == revision
    a.tick()  # notices it lost the lease
    assert a.controller_id == -1
    clock.advance(TIMINGS.poll_ms)
    a.tick()  # reads the lease as a candidate
    assert not a.is_active and a.controller_id == successor.node_id


def test_a_deposed_controllers_write_with_its_old_epoch_is_refused(
    make_store: MakeStore, clock: FakeClock
) -> None:
    a, b = (make_cluster_controller(make_store(), clock, n) for n in (1, 2))
    tick_until_active(clock, [a, b])
    join(a, 1)
    a.create_topic("t", 1)
    stale = a.snapshot
    tick_until_active(clock, [b])  # a paused; b took over at epoch 2
    committer = MetadataCommitter(ObjectStoreMetadataStore(make_store()))
    fresh = committer.read()
    assert fresh is not None and fresh.metadata.controller_epoch == 2
    sneaked = TopicInfo("sneaked", random_uuid(), 0)
    # with the current version (its If-Match would match): refused for its epoch
    with pytest.raises(
        ControllerFencedError, match="epoch 1 is fenced by node 2 at controller epoch 2"
    ):
        committer.commit(
            fresh, fresh.metadata.with_topic(sneaked, ()), controller_epoch=1, controller_id=1
        )
    # with the version it last knew: its If-Match fails, the re-read shows epoch 2
    with pytest.raises(ControllerFencedError):
        committer.commit(
            stale, stale.metadata.with_topic(sneaked, ()), controller_epoch=1, controller_id=1
        )
    assert committer.read() == fresh


class _PausingStore:
    """Delegates to ``inner``; runs ``before_put`` once, just before the first write of a
    metadata log slot: the writer is "paused" between its lease check and its PUT."""

    def __init__(self, inner: ObjectStore) -> None:
        self.inner = inner
        self.before_put: list = []  # type: ignore[type-arg]

    def __getattr__(self, name: str):  # type: ignore[no-untyped-def]
        return getattr(self.inner, name)

    def head(self, key: str) -> ObjectInfo:
        return self.inner.head(key)

    def put_if_absent(self, key: str, data: bytes) -> str:
        if key.startswith("cluster/metadata/log/") and self.before_put:
            self.before_put.pop()()
        return self.inner.put_if_absent(key, data)


def test_a_write_sent_just_before_a_pause_fails_once_the_successor_has_written(
    make_store: MakeStore, clock: FakeClock
) -> None:
    pausing = _PausingStore(make_store())
    a = make_cluster_controller(pausing, clock, 1)  # type: ignore[arg-type]
    b = make_cluster_controller(make_store(), clock, 2)
    tick_until_active(clock, [a, b])
    join(a, 1)
    b.tick()  # b sees a's lease

    def b_takes_over_meanwhile() -> None:
        clock.advance(TAKEOVER_MS)
        assert tick_until_active(clock, [b]) is b

    pausing.before_put.append(b_takes_over_meanwhile)
    with pytest.raises(ControllerFencedError):
        a.create_topic("written-by-a-deposed-controller", 1)
    assert not a.is_active
    names = {t["name"] for t in stored_metadata(make_store())["topics"]}
    assert "written-by-a-deposed-controller" not in names
    b.create_topic("after", 1)
    assert b.topic("after") is not None


def test_a_single_node_controller_may_not_write_a_clusters_metadata(
    make_store: MakeStore, clock: FakeClock
) -> None:
    tick_until_active(clock, [make_cluster_controller(make_store(), clock, 1)])
    legacy = Controller(ObjectStoreMetadataStore(make_store()), BrokerConfig({"node.id": "5"}))
    with pytest.raises(ControllerFencedError, match="managed by an elected controller"):
        legacy.create_topic("t", 1)


def test_a_clean_shutdown_hands_the_lease_over_at_once(
    make_store: MakeStore, clock: FakeClock
) -> None:
    a, b = (make_cluster_controller(make_store(), clock, n) for n in (1, 2))
    tick_until_active(clock, [a, b])
    a.close(release=True)
    assert not a.is_active
    b.tick()
    assert b.is_active and b.epoch == 2
    record = LeaseRecord.decode(make_store().get(LEASE_KEY))
    assert (record.holder, record.epoch) == (2, 2)


def test_producer_id_blocks_are_never_handed_out_twice_across_a_failover(
    make_store: MakeStore, clock: FakeClock
) -> None:
    a, b = (make_cluster_controller(make_store(), clock, n) for n in (1, 2))
    tick_until_active(clock, [a, b])
    epoch_1 = join(a, 1).broker_epoch
    first = [a.allocate_producer_ids(1, epoch_1) for _ in range(3)]
    tick_until_active(clock, [b])
    join(b, 2)
    later = b.allocate_producer_ids(2, b.metadata.brokers[2].broker_epoch)
    starts = [blk.first_producer_id for blk in (*first, later)]
    assert starts == [0, 1000, 2000, 3000]
    assert (later.assigned_broker_id, later.size, later.last_producer_id) == (2, 1000, 3999)
    assert stored_metadata(make_store())["producer_ids"] == {"next_producer_id": 4000}


def test_threaded_controllers_fail_over_after_a_crash_within_the_lease_bound(
    tmp_path: Path,
) -> None:
    """Real clocks and threads, short timings: the active controller's thread dies
    without releasing (a crash); another one is active within a generous bound."""
    fast = {  # short, yet a holder starved of CPU for a second on a busy machine keeps its lease
        "controller.lease.ms": "1500",
        "controller.lease.renew.ms": "150",
        "controller.lease.safety.margin.ms": "500",
        "controller.lease.clock.skew.ms": "100",
        "controller.lease.poll.ms": "50",
        "controller.bucket.outage.hold.ms": "0",  # no broker registers here (cluster_helpers)
    }
    controllers = [
        ClusterController(
            FileSystemObjectStore(tmp_path / "bucket"), BrokerConfig({"node.id": str(n), **fast})
        )
        for n in (1, 2, 3)
    ]
    try:
        for c in controllers:
            c.start()
        first = _wait_for_active(controllers, 10.0)
        first.close(release=False)  # kill -9: no release, the lease must run out
        rest = [c for c in controllers if c is not first]
        second = _wait_for_active(rest, 10.0)
        assert second.epoch > 1 and not first.is_active
        join(second, second.node_id)
        assert second.create_topic("after-failover", 1).partitions == 1
    finally:
        for c in controllers:
            c.close()


def _wait_for_active(controllers: list[ClusterController], timeout_s: float) -> ClusterController:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        active = [c for c in controllers if c.is_active]
        if active:
            assert len(active) == 1
            return active[0]
        time.sleep(0.02)
    raise AssertionError(f"no controller became active within {timeout_s} s")
