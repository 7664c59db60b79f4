"""RemoteLogManager in process: real local logs, a real controller, real object stores.

* A store that fails every third request (FlakyObjectStore around moto's S3 server
  over HTTP): the service's retries get every sealed segment into the manifest,
  exactly once, and the history reads back through the tiered-fetch path.
* A Fetch that mixes a local partition with a remote one whose read never
  completes: the response carries the local data and an empty remote partition
  once ``remote.fetch.max.wait.ms`` has passed (it does not wait for the bucket).
"""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from common.errors import ErrorCode, UnknownTopicOrPartitionError
from common.record.batch import build_batch, decode_batch, iter_batches
from controller import BrokerConfig, Controller, ObjectStoreMetadataStore
from fetch.planner import PartitionFetch, read_partitions
from fetch.tiered import TieredReader
from local_tier.config import LogConfig
from local_tier.log import Log
from local_tier.manager import LogManager
from local_tier.segment import FileRegion
from remote_tier import FileSystemObjectStore, ObjectStore
from remote_tier.log_manager import RemoteLogManager
from remote_tier.manifest import PartitionManifest, RemoteSegment
from remote_tier.s3 import S3ObjectStore
from remote_tier.tier_state import NEVER, retention_due, retention_due_at
from service.handlers.fetch import _read_remote
from tests.remote_tier.flaky import FlakyObjectStore
from tests.s3_fixtures import S3Bucket

SEGMENT_BYTES = 16 * 1024
RECORDS_PER_BATCH = 10
BATCHES = 150  # ~40 sealed segments of ~16 KiB


class FakeBroker:
    """What RemoteLogManager.run_once and the fetch planner need of a broker."""

    def __init__(self, data_dir: Path, config: BrokerConfig) -> None:
        self.controller = Controller(
            ObjectStoreMetadataStore(FileSystemObjectStore(data_dir / "metadata")), config
        )
        self.logs = LogManager(data_dir / "logs")

    def create_topic(self, name: str, partitions: int = 1) -> list[Log]:
        self.controller.create_topic(name, partitions, -1, {}, False)
        cfg = LogConfig.from_properties(self.controller.effective_topic_config(name))
        return [self.logs.get_or_create_log(name, p, cfg) for p in range(partitions)]

    def log_for(self, topic: str, partition: int, current_leader_epoch: int = -1) -> Log:
        found = self.logs.get_log(topic, partition)
        if found is None:
            raise UnknownTopicOrPartitionError(f"no {topic}-{partition}")
        return found

    def leader_epoch(self, topic: str, partition: int) -> int:
        return 0  # this broker leads every partition

    def close(self) -> None:
        self.logs.shutdown()


def _config(**extra: str) -> BrokerConfig:
    return BrokerConfig(
        {
            "remote.log.storage.system.enable": "true",
            "log.remote.storage.enable": "true",
            "log.segment.bytes": str(SEGMENT_BYTES),
            "log.local.retention.bytes": "0",
            "log.segment.delete.delay.ms": "0",
            "log.index.interval.bytes": "1024",
            "remote.fetch.chunk.bytes": "8192",
            "remote.fetch.max.wait.ms": "200",
            **extra,
        }
    )


def _value(i: int) -> bytes:
    return b"record-%06d-" % i + b"x" * 80


def _fill(log: Log, batches: int = BATCHES) -> int:
    """Append ``batches`` batches of RECORDS_PER_BATCH records; returns the record count."""
    now = int(time.time() * 1000)
    n = 0
    for _ in range(batches):
        records = [(b"k%d" % (n + i), _value(n + i), [], now + n + i) for i in range(RECORDS_PER_BATCH)]
        log.append_as_leader(build_batch(records), 0)
        n += RECORDS_PER_BATCH
    log.update_high_watermark(log.log_end_offset)
    deadline = time.monotonic() + 10  # the rolls' producer snapshots are written (an upload waits for them)
    while log.background_pending and time.monotonic() < deadline:
        time.sleep(0.005)
    return n


def _sealed_bases(log: Log) -> list[int]:
    return [s.base_offset for s in log.segments[:-1]]


@pytest.fixture
def make_broker(tmp_path: Path) -> Iterator[Any]:
    made: list[FakeBroker] = []

    def make(config: BrokerConfig) -> FakeBroker:
        broker = FakeBroker(tmp_path / f"broker{len(made)}", config)
        made.append(broker)
        return broker

    yield make
    for broker in made:
        broker.close()


def _records(data: bytes) -> list[tuple[int, bytes]]:
    """(offset, value) of every record in ``data`` (whole batches)."""
    out = []
    for pos, _ in iter_batches(data):
        _, records = decode_batch(data, pos)
        out += [(r.offset, bytes(r.value or b"")) for r in records]
    return out


def _region_bytes(regions: list[FileRegion | bytes | memoryview]) -> bytes:
    return b"".join(r.read_bytes() if isinstance(r, FileRegion) else r for r in regions)


async def _read_history(service: RemoteLogManager, log: Log, topic: str) -> list[tuple[int, bytes]]:
    """Every record of the partition, remote part planned by the service and read by the
    broker's tiered reads (fetch/tiered.py)."""
    out: list[tuple[int, bytes]] = []
    offset = 0
    reads = TieredReader(service, _config())
    while offset < log.high_watermark:
        if offset < log.log_start_offset:
            target = service.plan_remote_read(topic, 0, offset, log)
            data = b"".join(await reads.read(target, offset, 32 * 1024, True))
        else:
            info = log.read(offset, 32 * 1024, max_offset=log.high_watermark, min_one_message=True)
            data = _region_bytes(list(info.regions))
        records = [(o, v) for o, v in _records(data) if o >= offset]
        assert records, f"nothing read at offset {offset}"
        out += records
        offset = records[-1][0] + 1
    reads.close()
    return out


def _segment_keys(store: ObjectStore) -> list[str]:
    return [i.key for i in store.list("topics/") if not i.key.endswith("manifest.json")]


async def _until(predicate: Any, what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.05)


def test_a_store_failing_every_third_request_still_gets_every_segment_through_once(
    make_broker: Any, s3_bucket: S3Bucket
) -> None:
    real = S3ObjectStore(s3_bucket.bucket, "flaky", endpoint_url=s3_bucket.endpoint_url)
    flaky = FlakyObjectStore(real, fail_every=3)
    broker = make_broker(_config(**{"remote.log.manager.task.interval.ms": "50"}))
    (log,) = broker.create_topic("orders")
    total = _fill(log)
    sealed = _sealed_bases(log)
    assert len(sealed) >= 8
    boundary = log.segments[-1].base_offset  # everything below is sealed and committed
    service = RemoteLogManager(flaky, broker.controller.config)

    async def scenario() -> list[tuple[int, bytes]]:
        task = asyncio.create_task(service.run(broker))  # the broker's periodic task
        try:
            await _until(lambda: service.remote_boundary("orders", 0) == boundary, "uploads")
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        # local retention may now drop every uploaded segment; history reads come from S3
        assert log.delete_retention_segments(
            int(time.time() * 1000), remote_boundary=service.remote_boundary("orders", 0)
        ) == len(sealed)
        assert log.log_start_offset == boundary
        return await _read_history(service, log, "orders")

    try:
        history = asyncio.run(scenario())
    finally:
        service.close()

    assert flaky.failures > 10  # the faults did happen ...
    assert service.upload_failures == 0  # ... and the retries absorbed every one of them
    state = service.state("orders", 0)
    assert state is not None and state.last_error is None
    # the committed manifest, read from the bucket without faults
    manifest = RemoteLogManager(real, broker.controller.config).rsm.manifest(state.topic_id, 0)
    assert manifest is not None
    bases = [s.base_offset for s in manifest.segments]
    assert bases == sealed  # every sealed segment, once, in order
    assert manifest.segments[0].base_offset == 0 and manifest.next_offset == boundary
    for prev, nxt in zip(manifest.segments, manifest.segments[1:]):
        assert nxt.base_offset == prev.last_offset + 1
    # no object dangles: three per committed segment plus its producer snapshot, each referenced
    referenced = {s.upload_id for s in manifest.segments}
    keys = _segment_keys(real)
    assert all(s.producer_snapshot_bytes > 0 and s.txn_index_bytes == 0 for s in manifest.segments)
    assert len(keys) == 4 * len(bases)
    assert {k.rsplit("-", 1)[1].split(".")[0] for k in keys} == referenced
    # and the history reads back whole, through the flaky store too
    assert [o for o, _ in history] == list(range(total))
    assert [v for _, v in history] == [_value(i) for i in range(total)]


class BlockingStore:
    """A store whose ``.log`` reads block until ``release()`` (a bucket that never answers)."""

    def __init__(self, inner: ObjectStore) -> None:
        self.inner = inner
        self.blocked = threading.Event()  # set: .log reads block
        self._open = threading.Event()
        self.waiting = 0

    def release(self) -> None:
        self.blocked.clear()
        self._open.set()

    def get(self, key: str, start: int | None = None, end: int | None = None) -> bytes:
        if self.blocked.is_set() and key.endswith(".log"):
            self.waiting += 1
            self._open.wait(60)
        return self.inner.get(key, start, end)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def test_a_fetch_mixing_local_and_remote_partitions_answers_without_the_stuck_remote_one(
    make_broker: Any, tmp_path: Path
) -> None:
    store = BlockingStore(FileSystemObjectStore(tmp_path / "bucket"))
    broker = make_broker(_config())
    (history,) = broker.create_topic("history")
    (live,) = broker.create_topic("live")
    total = _fill(history)
    now = int(time.time() * 1000)
    live.append_as_leader(build_batch([(b"k", b"live-%d" % i, [], now) for i in range(5)]), 0)
    live.update_high_watermark(live.log_end_offset)
    service = RemoteLogManager(store, broker.controller.config)
    broker.tiering = service
    broker.tiered_reads = reads = TieredReader(service, broker.controller.config)
    wanted = [PartitionFetch("live", 0, 0, 1 << 20), PartitionFetch("history", 0, 0, 1 << 20)]

    async def scenario() -> tuple[list[Any], list[Any]]:
        await service.run_once(broker)
        history.delete_retention_segments(now, remote_boundary=service.remote_boundary("history", 0))
        assert history.log_start_offset > 0  # offset 0 is in the bucket only
        store.blocked.set()
        data, _ = read_partitions(broker, wanted, max_bytes=4 << 20, remote=service)
        assert data[0].remote is None and data[1].remote is not None
        # the outer timeout only keeps a hang from stalling the suite
        await asyncio.wait_for(_read_remote(broker, data), timeout=30)
        assert store.waiting >= 1  # the remote read really was stuck in the bucket
        first = data
        # the consumer asks again (and again): each retry joins the stuck read
        # instead of queuing another one behind it
        for _ in range(3):
            retry, _ = read_partitions(broker, wanted, max_bytes=4 << 20, remote=service)
            await asyncio.wait_for(_read_remote(broker, retry), timeout=30)
            assert retry[1].size == 0 and retry[1].error_code == ErrorCode.none
            assert _records(_region_bytes(retry[0].regions)) == [(i, b"live-%d" % i) for i in range(5)]
        assert reads.reader.queue_depth == 1
        store.release()  # the bucket answers again: the next fetch gets the history
        data, _ = read_partitions(broker, wanted, max_bytes=4 << 20, remote=service)
        await asyncio.wait_for(_read_remote(broker, data), timeout=30)
        return first, data

    try:
        first, second = asyncio.run(scenario())
    finally:
        store.release()
        reads.close()
        service.close()

    live_part, remote_part = first
    assert live_part.error_code == ErrorCode.none
    assert _records(_region_bytes(live_part.regions)) == [(i, b"live-%d" % i) for i in range(5)]
    assert remote_part.error_code == ErrorCode.none
    assert remote_part.regions == [] and remote_part.size == 0 and remote_part.remote is None
    assert remote_part.log_start_offset == 0 and remote_part.high_watermark == total
    live_part, remote_part = second
    assert _records(_region_bytes(live_part.regions)) == [(i, b"live-%d" % i) for i in range(5)]
    got = _records(_region_bytes(remote_part.regions))
    assert got and got[0] == (0, _value(0))
    assert [o for o, _ in got] == list(range(len(got)))


class _GatedSource:
    """A segment source whose reads wait for ``gate`` (index: one entry per batch)."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.gate = threading.Event()
        self.reads = 0
        self._lock = threading.Lock()

    def cache_key(self, segment: object) -> str:
        return "segment"

    def get_range(self, segment: object, start: int, end: int) -> bytes:
        with self._lock:
            self.reads += 1
        assert self.gate.wait(30)
        return self.data[start:end]

    def get_offset_index(self, segment: object) -> bytes:
        return b""


def test_retried_remote_reads_join_the_one_in_flight_and_shutdown_fails_queued_ones() -> None:
    from fetch.remote_reader import RemoteReader

    data = build_batch([(b"k", b"v%d" % i, [], 1000 + i) for i in range(10)])
    source = _GatedSource(data)
    reader = RemoteReader(source, threads=1, chunk_bytes=1 << 20, read_ahead_chunks=0)
    segment = type("Seg", (), {"base_offset": 0})()
    try:
        first = reader.submit(segment, len(data), 0, 1 << 20, True)
        retries = [reader.submit(segment, len(data), 0, 1 << 20, True) for _ in range(5)]
        assert reader.queue_depth == 1  # one read, six callers
        retries[0].cancel()  # a caller giving up does not cancel the others' read
        other = reader.submit(segment, len(data), 5, 1 << 20, True)  # queued behind it
        assert reader.queue_depth == 2
        source.gate.set()
        results = [first.result(30)] + [f.result(30) for f in retries[1:]]
        assert all(r.records == data for r in results)
        assert other.result(30).records == data
        assert source.reads == 1  # the chunk was read once (then cached)
        assert reader.queue_depth == 0
        # at shutdown a queued read fails instead of leaving its callers waiting
        source.gate.clear()
        source.data = data  # a fresh key so the cache does not answer
        source.cache_key = lambda segment: "other"  # type: ignore[method-assign]
        running = reader.submit(segment, len(data), 0, 1 << 20, True)
        queued = reader.submit(segment, len(data), 1, 1 << 20, True)
        deadline = time.monotonic() + 30
        while source.reads < 2:
            assert time.monotonic() < deadline
            time.sleep(0.01)
        reader.close()
        with pytest.raises(RuntimeError):
            queued.result(30)
        source.gate.set()
        assert running.result(30).records == data
    finally:
        source.gate.set()
        reader.close()


def test_objects_of_an_upload_that_failed_at_run_time_are_cleaned_up_without_a_restart(
    make_broker: Any, tmp_path: Path
) -> None:
    real = FileSystemObjectStore(tmp_path / "bucket")
    outage = threading.Event()
    outage.set()
    # while the "outage" lasts: the .index put fails, and so does every delete, so
    # the upload's .log cannot be discarded and is left behind
    flaky = FlakyObjectStore(
        real,
        fail_key=lambda op, key: outage.is_set()
        and ((op.startswith("put") and key.endswith(".index")) or op == "delete"),
    )
    broker = make_broker(_config(**{"remote.log.orphan.cleanup.min.age.ms": "0"}))
    (log,) = broker.create_topic("orders")
    total = _fill(log, batches=40)
    service = RemoteLogManager(flaky, broker.controller.config)
    try:
        asyncio.run(service.run_once(broker))
        state = service.state("orders", 0)
        assert state is not None and state.upload_failures == 1 and state.manifest is None
        orphans = _segment_keys(real)
        assert len(orphans) == 1 and orphans[0].endswith(".log")  # left by the failed upload
        outage.clear()
        asyncio.run(service.run_once(broker))  # the same service: no restart
    finally:
        service.close()
    manifest = service.rsm.manifest(state.topic_id, 0)
    assert manifest is not None and [s.base_offset for s in manifest.segments] == _sealed_bases(log)
    keys = _segment_keys(real)
    assert orphans[0] not in keys
    assert {k.rsplit("-", 1)[1].split(".")[0] for k in keys} == {s.upload_id for s in manifest.segments}
    assert len(keys) == 4 * len(manifest.segments)  # .log, .index, .timeindex, .snapshot
    assert total == 400


def test_the_log_start_is_the_oldest_record_left_in_either_tier_never_a_deleted_one(
    tmp_path: Path,
) -> None:
    """ADR 0014: the manifest's log start (remote retention, DeleteRecords) wins over older
    data either tier still holds; older remote data wins over the local start."""
    from types import SimpleNamespace

    from remote_tier.log_manager import PartitionTierState
    from remote_tier.manifest import PartitionManifest, RemoteSegment

    service = RemoteLogManager(FileSystemObjectStore(tmp_path), BrokerConfig())
    try:
        local: Any = SimpleNamespace(log_start_offset=50)
        topic_id = "00000000-0000-0000-0000-000000000001"

        def segment(base: int, last: int) -> RemoteSegment:
            return RemoteSegment(base, last, 100, 0, 0, 0, last - base + 1, f"u{base}")

        def start(manifest: PartitionManifest | None, floor: int = 0) -> int:
            state = PartitionTierState(topic_id, manifest=manifest, log_start_floor=floor)
            service.partitions[("t", 0)] = state
            return service.log_start_offset("t", 0, local)

        empty = PartitionManifest.empty("t", topic_id, 0, 0)
        assert start(None) == 50
        assert start(empty) == 50  # nothing uploaded yet
        held = empty.with_segment(segment(0, 99)).with_segment(segment(100, 199))
        assert start(held) == 0  # the bucket holds older records than the disk
        assert start(held.without([], 80)) == 80  # deleted inside a remote segment
        assert start(held.without([], 120)) == 120  # ... past the local start too
        assert start(empty.without([], 300)) == 300  # past anything ever uploaded
        assert start(held, floor=70) == 70  # a DeleteRecords the cached manifest predates
    finally:
        service.close()


def test_a_delete_records_commit_never_replaces_a_newer_cached_manifest(tmp_path: Path) -> None:
    """DeleteRecords(41) races an upload of [39, 41]: the upload publishes on top of the
    DeleteRecords commit and the round caches that first (local retention then drops the
    local copy: the local log starts at 42). The commit coming back later must not bring
    back the older manifest, which lacks [39, 41]: the log starts at 41, and 41 is read
    from the bucket (test_delete_records_on_a_tiered_partition's "low_watermark 42 != 41").
    """
    import uuid
    from types import SimpleNamespace

    from remote_tier.log_manager import PartitionTierState
    from remote_tier.manifest import PartitionManifest, RemoteSegment

    service = RemoteLogManager(FileSystemObjectStore(tmp_path), BrokerConfig())
    try:
        topic_id = uuid.UUID(int=1)
        manifests = service.rsm.manifests

        def publish(base: int, last: int) -> None:
            segment = RemoteSegment(base, last, 100, 0, 0, 0, last - base + 1, uuid.uuid4().hex)
            manifests.update(topic_id, 0, lambda m: (m or PartitionManifest.empty("t", topic_id, 0, 0))
                             .with_segment(segment), leader_epoch=0)

        publish(36, 38)
        state = PartitionTierState(topic_id, manifest=service.rsm.manifest(topic_id, 0), loaded=True, known=True)
        service.partitions[("t", 0)] = state
        local: Any = SimpleNamespace(log_start_offset=42, high_watermark=45, log_end_offset=45)
        move = service._move_log_start

        def move_then_upload(*args: Any) -> Any:
            committed = move(*args)  # [36, 38] goes, the log starts at 41
            publish(39, 41)  # the round's upload, published on top ...
            state.adopt(service.rsm.manifest(topic_id, 0))  # ... and cached first
            return committed

        service._move_log_start = move_then_upload  # type: ignore[method-assign]
        asyncio.run(service.delete_records("t", topic_id, 0, 41, 0))
        assert state.manifest is not None and [s.base_offset for s in state.manifest.segments] == [39]
        assert service.log_start_offset("t", 0, local) == 41
        assert service.plan_remote_read("t", 0, 41, local).base_offset == 39
    finally:
        service.close()


def test_a_local_segment_with_a_corrupt_batch_length_is_a_counted_upload_failure(
    make_broker: Any, tmp_path: Path
) -> None:
    """Issue #32: a sealed segment whose batch header says length 0 stopped uploads of its
    partition for good (the summary walk never moved). Now each round fails, counted and
    logged, the upload thread stays free and the other partition's uploads go on."""
    import struct

    broker = make_broker(_config())
    bad, good = broker.create_topic("orders", 2)
    _fill(bad, batches=40)
    _fill(good, batches=40)
    first = bad.segments[0]
    first.flush()
    with open(first.log_path, "r+b") as f:  # the second batch's length: 0
        header = f.read(61)
        f.seek(12 + struct.unpack(">i", header[8:12])[0] + 8)
        f.write(struct.pack(">i", 0))
    service = RemoteLogManager(FileSystemObjectStore(tmp_path / "bucket"), broker.controller.config)
    try:
        for _ in range(2):  # a round that never ends (the old spin) times out here
            asyncio.run(asyncio.wait_for(service.run_once(broker), 60))
        state = service.state("orders", 0)
        assert state is not None and state.upload_failures == 2
        assert "invalid batch length 0" in (state.last_error or "")
        healthy = service.state("orders", 1)
        assert healthy is not None and healthy.upload_failures == 0
        manifest = service.rsm.manifest(healthy.topic_id, 1)
        assert manifest is not None and [s.base_offset for s in manifest.segments] == _sealed_bases(good)
    finally:
        service.close()


def test_a_round_gives_an_idle_partition_no_task_and_a_rolled_one_its_upload(make_broker: Any, tmp_path: Path) -> None:
    """Issue 33: a round over many idle tiered partitions costs attribute reads, not a task each; a
    partition with a sealed segment waiting, or whose orphan clean-up is due, still gets its round."""
    broker = make_broker(_config(**{"remote.log.orphan.cleanup.min.age.ms": "3600000"}))
    logs = broker.create_topic("many", partitions=50)
    service = RemoteLogManager(FileSystemObjectStore(tmp_path / "bucket"), broker.controller.config)
    rounds: list[int] = []
    real_round = service._partition_round

    def counted(loop: Any, topic: str, partition: int, *rest: Any) -> Any:
        rounds.append(partition)
        return real_round(loop, topic, partition, *rest)

    service._partition_round = counted  # type: ignore[method-assign]
    try:
        asyncio.run(service.run_once(broker))  # the first: every partition claims its manifest
        assert sorted(rounds) == list(range(50))
        rounds.clear()
        asyncio.run(service.run_once(broker))
        assert rounds == []  # nothing to do anywhere: no task
        _fill(logs[7], batches=40)  # sealed segments to upload
        asyncio.run(service.run_once(broker))
        assert rounds == [7]
        state = service.state("many", 7)
        assert state is not None and state.manifest is not None
        assert state.manifest.next_offset == logs[7].segments[-1].base_offset  # every sealed one is up
        rounds.clear()
        service.state("many", 3).next_orphan_cleanup_ms = 0  # type: ignore[union-attr]
        asyncio.run(service.run_once(broker))
        assert rounds == [3]
    finally:
        service.close()


def test_a_resting_partition_is_not_looked_at_until_its_log_or_leadership_changes(
    make_broker: Any, tmp_path: Path
) -> None:
    """Issue 33: once a round found nothing to do for a partition, later rounds do not look at it
    (its segments, manifest, retention) until its log changes or its leadership does."""
    broker = make_broker(_config(**{"remote.log.orphan.cleanup.min.age.ms": "3600000"}))
    logs = broker.create_topic("many", partitions=50)
    service = RemoteLogManager(FileSystemObjectStore(tmp_path / "bucket"), broker.controller.config)
    looked: list[int] = []
    real_check = service._nothing_to_do

    def counted(local: Log, *rest: Any) -> bool:
        looked.append(local.partition)
        return real_check(local, *rest)

    service._nothing_to_do = counted  # type: ignore[method-assign]
    try:
        asyncio.run(service.run_once(broker))  # every partition claims its manifest
        asyncio.run(service.run_once(broker))  # and has nothing to do: it rests
        looked.clear()
        asyncio.run(service.run_once(broker))
        assert looked == []
        _fill(logs[7], batches=40)
        asyncio.run(service.run_once(broker))
        assert looked == [7]
        state = service.state("many", 7)
        assert state is not None and state.manifest is not None
        assert state.manifest.next_offset == logs[7].segments[-1].base_offset  # the sealed ones are up
        service.on_resign("many", 12, deleted=False)  # and it leads again at the next round
        looked.clear()
        asyncio.run(service.run_once(broker))
        assert sorted(looked) == [7, 12]  # 7: its round just ran; 12: a claim again
        looked.clear()
        asyncio.run(service.run_once(broker))
        asyncio.run(service.run_once(broker))
        assert looked == [12]  # its claim ran; then every partition rests
    finally:
        service.close()


def test_the_bucket_s_retention_ms_wakes_a_resting_partition_when_it_falls_due() -> None:
    segment = RemoteSegment(base_offset=0, last_offset=9, size_bytes=100, min_timestamp=900,
                            max_timestamp=1_000, leader_epoch=0, record_count=10, upload_id="u")
    manifest = PartitionManifest(topic="t", topic_id=str(uuid.uuid4()), partition=0, leader_epoch=0,
                                 log_start_offset=0, segments=(segment,))
    config = LogConfig(retention_ms=500)
    assert retention_due_at(manifest, config) == 1_501
    assert not retention_due(manifest, config, 0, 1_500) and retention_due(manifest, config, 0, 1_501)
    assert retention_due_at(manifest, LogConfig(retention_ms=-1)) == NEVER
    assert retention_due_at(manifest, LogConfig(retention_ms=500, cleanup_policy="compact")) == NEVER
    assert retention_due_at(None, config) == NEVER


def _twenty_partitions(make_broker: Any, tmp_path: Path, topic: str) -> tuple[Any, list[Log], Any, RemoteLogManager]:
    """A broker with ``topic`` of 20 partitions and a tiering service on a bucket of its own."""
    broker = make_broker(_config())
    logs = broker.create_topic(topic, partitions=20)
    service = RemoteLogManager(FileSystemObjectStore(tmp_path / "bucket"), broker.controller.config)
    return broker, logs, broker.controller.topic(topic).topic_id, service


def test_a_partition_led_without_a_manifest_is_claimed_only_once_it_has_something_to_upload(
    make_broker: Any, tmp_path: Path
) -> None:
    """Issue 33: 10,000 new partitions cost their first round no claim each (a claim writes
    nothing where there is no manifest); the round that uploads claims first."""
    broker, logs, topic_id, service = _twenty_partitions(make_broker, tmp_path, "fresh")
    claims: list[int] = []
    real_claim = service._claim

    async def counted(loop: Any, topic_id: Any, partition: int, epoch: int) -> Any:
        claims.append(partition)
        return await real_claim(loop, topic_id, partition, epoch)

    service._claim = counted  # type: ignore[method-assign]

    async def lead_then_fill() -> None:
        for log in logs:
            service.on_leader(SimpleNamespace(topic="fresh", index=log.partition, topic_id=topic_id, log=log))
        await service.loaded()  # each manifest read: none yet
        await service.run_once(broker)
        assert claims == []
        _fill(logs[5], batches=40)
        await service.run_once(broker)
        assert claims == [5]

    try:
        asyncio.run(lead_then_fill())
        state = service.state("fresh", 5)
        assert state is not None and state.claimed_epoch == 0 and state.manifest is not None
        assert state.manifest.leader_epoch == 0
        assert state.manifest.next_offset == logs[5].segments[-1].base_offset
    finally:
        service.close()


def test_leaderships_of_one_turn_read_their_manifests_in_one_batch(
    make_broker: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 33: a failover moving 3,000 leaderships here was 3,000 tasks and pool submissions
    on the event loop; the leaderships of one turn now share a task, 32 manifests per copier
    job, and a later leadership starts a batch of its own."""
    from remote_tier import log_manager

    monkeypatch.setattr(log_manager, "MANIFESTS_PER_TASK", 8)
    broker, logs, topic_id, service = _twenty_partitions(make_broker, tmp_path, "moved")
    jobs: list[int] = []
    real = service._manifests
    service._manifests = lambda chunk: jobs.append(len(chunk)) or real(chunk)  # type: ignore[method-assign]

    def lead(log: Any) -> None:
        service.on_leader(SimpleNamespace(topic="moved", index=log.partition, topic_id=topic_id, log=log))

    async def run() -> None:
        for log in logs[:19]:
            lead(log)
        assert len(service._loads) == 1  # one task for the turn
        await service.loaded()
        assert sorted(jobs) == [3, 8, 8]
        lead(logs[19])
        await service.loaded()
        assert sorted(jobs) == [1, 3, 8, 8]

    try:
        asyncio.run(run())
        assert all(service.state("moved", log.partition).loaded for log in logs)  # type: ignore[union-attr]
    finally:
        service.close()


def test_a_running_brokers_new_leaderships_over_several_turns_read_their_manifests_together_later(
    make_broker: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 33: a failover's leaderships arrive over several turns of the loop (its apply is
    sliced); once the broker has started, a turn of many leaderships makes their manifest
    reads wait a moment and go as one batch, after the takeover rather than during it."""
    from remote_tier import log_manager

    monkeypatch.setattr(log_manager, "MANIFESTS_PER_TASK", 8)
    monkeypatch.setattr(log_manager, "LED_MANIFESTS_DELAY_S", 0.2)
    monkeypatch.setattr(log_manager, "LED_MANIFESTS_BULK", 5)  # a turn of 5 is a takeover in bulk
    broker, logs, topic_id, service = _twenty_partitions(make_broker, tmp_path, "taken")
    jobs: list[int] = []
    real = service._manifests
    service._manifests = lambda chunk: jobs.append(len(chunk)) or real(chunk)  # type: ignore[method-assign]

    async def run() -> None:
        service._manifests_read.set()  # started
        for turn in range(4):
            for log in logs[turn * 5:(turn + 1) * 5]:
                service.on_leader(SimpleNamespace(topic="taken", index=log.partition, topic_id=topic_id, log=log))
            await asyncio.sleep(0.02)  # the next slice of the apply, a turn or more later
        assert jobs == []  # none read while the leaderships were still arriving
        await service.loaded()
        assert sorted(jobs) == [4, 8, 8]  # all twenty in one batch

    try:
        asyncio.run(run())
        assert all(service.state("taken", log.partition).loaded for log in logs)  # type: ignore[union-attr]
    finally:
        service.close()


def test_a_sealed_segment_waits_for_the_producer_snapshot_its_roll_writes(tmp_path: Path) -> None:
    """The roll writes the producer snapshot at the segment's end on the flush thread; an
    upload that ran first went without it (seen under CI load: three objects, not four),
    and a replica started from the bucket would have lost its producers' state."""
    from local_tier.producer_snapshot import snapshot_path
    from remote_tier.log_manager import next_upload

    logs = LogManager(tmp_path / "logs")
    try:
        log = logs.get_or_create_log("t", 0, LogConfig.from_properties({"segment.bytes": "1048576"}))
        now = int(time.time() * 1000)
        log.append_as_leader(build_batch([(b"k", b"v", [], now)]), 0)
        log.update_high_watermark(log.log_end_offset)
        gate = threading.Event()
        log._submit(lambda: gate.wait(30))  # the flush thread is busy
        log.roll()
        assert not snapshot_path(log.dir, 1).exists()
        assert next_upload(log, None) is None  # not without its snapshot
        gate.set()
        deadline = time.monotonic() + 10
        while log.background_pending and time.monotonic() < deadline:
            time.sleep(0.01)
        assert snapshot_path(log.dir, 1).exists()
        assert next_upload(log, None) is log.segments[0]
    finally:
        logs.shutdown()


def test_a_new_leaders_claim_writes_its_epoch_so_a_deposed_leader_cannot_publish(tmp_path: Path) -> None:
    """The round of a new leader claims the manifest: its leader epoch goes in, and the
    deposed leader's next publish (an older epoch) is fenced. Before, the claim handed the
    manifest back unchanged, which ManifestStore.update takes for "nothing to write"."""
    from remote_tier.manifest import FencedError

    service = RemoteLogManager(FileSystemObjectStore(tmp_path), BrokerConfig())
    try:
        topic_id = uuid.UUID("00000000-0000-0000-0000-000000000002")
        segment = RemoteSegment(0, 9, 100, 0, 0, 3, 10, "0" * 31 + "1")
        service.rsm.manifests.update(topic_id, 0, lambda _: PartitionManifest.empty("t", topic_id, 0, 3)
                                     .with_segment(segment), leader_epoch=3)
        async def claim() -> PartitionManifest | None:
            return await service._claim(asyncio.get_running_loop(), topic_id, 0, 4)

        claimed = asyncio.run(claim())
        assert claimed is not None and claimed.leader_epoch == 4
        with pytest.raises(FencedError):  # the leader of epoch 3 publishes once more
            service.rsm.manifests.update(topic_id, 0, lambda cur: cur, leader_epoch=3)
    finally:
        service.close()


def test_deleting_a_deleted_topics_partition_keeps_the_state_of_the_topic_created_again(tmp_path: Path) -> None:
    """The deletion of a topic's remote data runs after the apply that may already have
    created the topic again under its name: the new topic's tiering state stays, the old
    one's bucket data goes."""
    from remote_tier.log_manager import PartitionTierState

    service = RemoteLogManager(FileSystemObjectStore(tmp_path), BrokerConfig())
    try:
        old_id, new_id = uuid.UUID(int=1), uuid.UUID(int=2)
        for topic_id in (old_id, new_id):
            service.rsm.manifests.update(topic_id, 0, lambda m, t=topic_id: PartitionManifest.empty("t", t, 0, 0),
                                         leader_epoch=0)
        new_state = PartitionTierState(new_id, manifest=service.rsm.manifest(new_id, 0), loaded=True, known=True)
        service.partitions[("t", 0)] = new_state
        asyncio.run(service.delete_partition("t", old_id, 0))
        assert service.partitions[("t", 0)] is new_state
        assert service.rsm.manifest(old_id, 0) is None and service.rsm.manifest(new_id, 0) is not None
        asyncio.run(service.delete_partition("t", new_id, 0))
        assert ("t", 0) not in service.partitions
    finally:
        service.close()
