"""The compare-and-set cycle: concurrent writers, conflicts, listeners."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from common.errors import KafkaStorageError, TopicAlreadyExistsError
from controller import (
    BrokerConfig,
    Controller,
    MetadataEvent,
    NotControllerError,
    ObjectStoreMetadataStore,
    PartitionsCreated,
    TopicConfigChanged,
    TopicCreated,
    TopicDeleted,
)
from remote_tier import FileSystemObjectStore, ObjectStore

MakeController = Callable[..., Controller]


def test_a_stale_controller_merges_instead_of_losing_an_update(
    make_controller: MakeController,
) -> None:
    first, second = make_controller(), make_controller()
    first.create_topic("a", 1)
    second.create_topic("b", 1)  # stale snapshot: conflicts, re-reads, applies again
    first.incremental_alter_configs("a", [("retention.ms", 0, "1")])  # stale again
    for view in (first, second, make_controller()):
        view.refresh()
        assert [t.name for t in view.topics()] == ["a", "b"]
        assert dict(view.effective_topic_config("a"))["retention.ms"] == "1"


def test_a_stale_controller_gets_a_clear_error_when_the_change_no_longer_applies(
    make_controller: MakeController,
) -> None:
    first, second = make_controller(), make_controller()
    winner = first.create_topic("t", 1)
    with pytest.raises(TopicAlreadyExistsError):
        second.create_topic("t", 3)
    restored = make_controller().topic("t")
    assert restored == winner


def test_controllers_on_threads_lose_no_topic(make_controller: MakeController) -> None:
    writers, per_writer = 4, 10
    controllers = [make_controller() for _ in range(writers)]
    barrier = threading.Barrier(writers)
    errors: list[BaseException] = []

    def create(index: int) -> None:
        barrier.wait()
        for n in range(per_writer):
            for _ in range(20):  # NotControllerError is retriable: a client retries
                try:
                    controllers[index].create_topic(f"w{index}-{n}", 1)
                    break
                except NotControllerError:
                    continue
                except BaseException as err:  # noqa: BLE001 - reported below
                    errors.append(err)
                    return

    threads = [threading.Thread(target=create, args=(i,)) for i in range(writers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert len(make_controller().topics()) == writers * per_writer


class _AlwaysConflicting(ObjectStoreMetadataStore):
    """Fault injection: after the head is created, every write of a log slot finds it taken."""

    def __init__(self, store: ObjectStore) -> None:
        super().__init__(store)
        self.writes = 0

    def write(self, data: bytes, expected_version: str | None) -> str:
        self.writes += 1
        return super().write(data, expected_version)

    def create_object(self, key: str, data: bytes) -> bool:
        if "/log/" not in key:  # the new cluster's first snapshot
            return super().create_object(key, data)
        self.writes += 1
        return False


def test_endless_conflicts_end_in_a_retriable_not_controller_error(
    object_store: FileSystemObjectStore,
) -> None:
    store = _AlwaysConflicting(object_store)
    controller = Controller(store, BrokerConfig())
    with pytest.raises(NotControllerError, match="retry the request") as info:
        controller.create_topic("t", 1)
    assert info.value.retriable
    assert store.writes == 1 + 5
    assert controller.topics() == []


def test_an_unusable_store_surfaces_as_kafka_storage_error(tmp_path: Path) -> None:
    object_store = FileSystemObjectStore(tmp_path / "bucket")
    controller = Controller(ObjectStoreMetadataStore(object_store), BrokerConfig())
    (tmp_path / "bucket" / "cluster").rename(tmp_path / "moved")
    (tmp_path / "bucket" / "cluster").write_bytes(b"a file where a directory was")
    with pytest.raises(KafkaStorageError, match="cluster metadata"):
        controller.create_topic("t", 1)


def test_listeners_hear_committed_changes_only(controller: Controller) -> None:
    events: list[MetadataEvent] = []
    controller.add_listener(events.append)
    created = controller.create_topic("t", 1)
    controller.create_topic("v", 1, validate_only=True)
    grown = controller.create_partitions("t", 3)
    altered = controller.incremental_alter_configs("t", [("retention.ms", 0, "1")])
    controller.incremental_alter_configs("t", [("retention.ms", 0, "1")])  # no change
    deleted = controller.delete_topic("t")
    assert events == [
        TopicCreated(created),
        PartitionsCreated(grown, 1),
        TopicConfigChanged(altered),
        TopicDeleted(deleted),
    ]


def test_a_failing_listener_does_not_undo_the_change(
    make_controller: MakeController, caplog: pytest.LogCaptureFixture
) -> None:
    controller = make_controller()
    seen: list[MetadataEvent] = []

    def broken(event: MetadataEvent) -> None:
        raise RuntimeError("listener bug")

    controller.add_listener(broken)
    controller.add_listener(seen.append)
    topic = controller.create_topic("t", 1)
    assert seen == [TopicCreated(topic)]
    assert make_controller().topic("t") == topic
    assert "listener" in caplog.text


def test_refresh_reports_changes_made_by_another_controller(
    make_controller: MakeController,
) -> None:
    watcher, writer = make_controller(), make_controller()
    events: list[MetadataEvent] = []
    watcher.add_listener(events.append)
    topic = writer.create_topic("t", 2)
    watcher.refresh()
    assert events == [TopicCreated(topic)]
