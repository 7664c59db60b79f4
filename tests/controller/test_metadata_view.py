"""MetadataView: what a broker that is not the controller reads, and how it waits."""

from __future__ import annotations

import logging
import threading

import pytest

from controller import (
    BrokerChanged,
    ControllerInfo,
    Endpoint,
    MetadataEvent,
    MetadataView,
    PartitionChanged,
    TopicCreated,
    metadata_view,
)
from tests.controller.cluster_helpers import (
    FakeClock,
    heartbeat_all,
    join,
    make_cluster_controller,
    tick_until_active,
)
from tests.controller.conftest import MakeStore
from tests.remote_tier.flaky import FlakyObjectStore


def test_a_view_polls_the_bucket_and_names_the_controller_and_its_endpoint(
    make_store: MakeStore, clock: FakeClock
) -> None:
    ctl = tick_until_active(clock, [make_cluster_controller(make_store(), clock, 1)])
    view = MetadataView(make_store())
    assert view.snapshot() is None and view.controller() is None
    assert view.refresh()
    assert not view.refresh()  # unchanged: one HEAD, nothing installed
    assert view.controller() == ControllerInfo(1, 1, None)  # not registered yet
    join(ctl, 1)
    ctl.create_topic("t", 2)
    assert view.refresh()
    snapshot = view.snapshot()
    assert snapshot is not None and snapshot.revision == ctl.snapshot.revision
    assert snapshot.metadata.topics["t"] == ctl.topic("t")
    assert view.controller() == ControllerInfo(1, 1, Endpoint("PLAINTEXT", "127.0.0.1", 9091))


def test_waiting_for_a_revision_returns_once_another_thread_installs_it(
    make_fs_store: MakeStore, clock: FakeClock
) -> None:
    ctl = tick_until_active(clock, [make_cluster_controller(make_fs_store(), clock, 1)])
    join(ctl, 1)
    view = MetadataView(make_fs_store())
    view.refresh()
    target = view.revision + 1
    assert view.wait_for_revision(target, 0.01) is None
    ctl.create_topic("t", 1)
    poller = threading.Thread(target=view.refresh)
    poller.start()
    arrived = view.wait_for_revision(target, 10.0)
    poller.join()
    assert arrived is not None and "t" in arrived.metadata.topics
    assert view.poll_for_revision(target + 5, 0.05, 0.01) is None


def test_a_local_controller_offers_its_commits_and_a_view_never_goes_back(
    make_fs_store: MakeStore, clock: FakeClock
) -> None:
    ctl = tick_until_active(clock, [make_cluster_controller(make_fs_store(), clock, 1)])
    view = MetadataView(make_fs_store())
    events: list[MetadataEvent] = []
    view.add_listener(events.append)
    ctl.add_snapshot_listener(view.offer)
    old = ctl.snapshot
    join(ctl, 1)
    join(ctl, 2)
    ctl.create_topic("t", assignments={0: [2, 1]})
    assert view.revision == ctl.snapshot.revision
    assert not view.offer(old)
    events.clear()
    for _ in range(6):  # broker 2 misses its heartbeats: fenced, leadership moves to 1
        clock.advance(2_000)
        heartbeat_all(ctl, 1)
        ctl.tick()
    kinds = [type(e) for e in events]
    assert kinds == [PartitionChanged, BrokerChanged]
    changed = events[0]
    assert isinstance(changed, PartitionChanged)
    assert (changed.previous.leader, changed.registration.leader) == (2, 1)
    assert not any(isinstance(e, TopicCreated) for e in events)


def test_waiting_for_a_revision_reads_again_after_the_bucket_fails_a_read(
    make_fs_store: MakeStore, clock: FakeClock
) -> None:
    """A registration waits for its revision with this: one failed read must not end the
    wait, or the start (stop 68: moto timed out one read of a restarting broker's)."""
    ctl = tick_until_active(clock, [make_cluster_controller(make_fs_store(), clock, 1)])
    join(ctl, 1)
    store = FlakyObjectStore(make_fs_store(), fail_key=lambda _op, key: "metadata" in key and store.failures < 3)
    view = MetadataView(store)
    ctl.create_topic("t", 1)
    arrived = view.poll_for_revision(ctl.snapshot.revision, 10.0, 0.01)
    assert store.failures == 3
    assert arrived is not None and "t" in arrived.metadata.topics


def test_a_wait_through_many_failed_reads_warns_once_not_at_every_read(
    make_fs_store: MakeStore, clock: FakeClock, caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Reads tried every 10 ms against a failing bucket: one warning for the first, not one
    per try (it was twenty a second at the default 50 ms), and a line when a read succeeds."""
    monkeypatch.setattr(metadata_view, "FAILED_READ_LOG_EVERY_S", 60.0)  # however loaded the machine
    ctl = tick_until_active(clock, [make_cluster_controller(make_fs_store(), clock, 1)])
    join(ctl, 1)
    store = FlakyObjectStore(make_fs_store(), fail_key=lambda _op, key: "metadata" in key and store.failures < 40)
    view = MetadataView(store)
    ctl.create_topic("t", 1)
    with caplog.at_level(logging.INFO, logger="controller.metadata_view"):
        arrived = view.poll_for_revision(ctl.snapshot.revision, 10.0, 0.01)
    assert arrived is not None and store.failures == 40
    said = [r.getMessage() for r in caplog.records if r.name == "controller.metadata_view"]
    assert len([m for m in said if m.startswith("cannot read the cluster metadata yet")]) == 1, said
    assert "read the cluster metadata after 40 failed read(s)" in said
