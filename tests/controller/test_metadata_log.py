"""The metadata log in the bucket (format 3, ADR 0025): replay, snapshots, trimming,
brokers catching up, a lost answer, bulk fencing, and readers of every format."""

from __future__ import annotations

import json
import random
import shutil
import time
import uuid
import zlib
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from common.errors import KafkaStorageError, TopicAlreadyExistsError
from controller import BrokerConfig, Controller, ObjectStoreMetadataStore
from controller.commit import LogPolicy, MetadataCommitter, current_document
from controller.document import ClusterMetadata
from controller.document_codec import encode
from controller.metadata_log_format import (
    GZIP_FROM_BYTES,
    Batch,
    MetadataLogError,
    batch_object,
    batch_text,
    decode_batch,
    deflate_lines,
    encode_batch,
    log_key,
    record_lines,
    stored_batch_text,
)
from controller.metadata_records import records_between, replay
from controller.metadata_view import MetadataView
from controller.registrations import BrokerRegistration, Endpoint
from remote_tier.filesystem import FileSystemObjectStore
from remote_tier.store import ObjectStoreError
from spark.bucket import open_bucket
from spark.metadata import read_topics
from tests.controller.cluster_helpers import FakeClock, join, tick_until_active
from tests.controller.cluster_helpers import make_cluster_controller as make_ctl
from tests.controller.test_membership import wait_sessions_out

PREFIX = "cluster/metadata"


def _slots(bucket: Path) -> list[int]:
    return sorted(int(p.name.split(".")[0]) for p in (bucket / PREFIX / "log").glob("*.jsonl"))


def _snapshots(bucket: Path) -> list[int]:
    return sorted(int(p.name.split(".")[0]) for p in (bucket / PREFIX / "snapshot").glob("*.gz"))


def _controller(store: FileSystemObjectStore, **overrides: str) -> Controller:
    return Controller(ObjectStoreMetadataStore(store), BrokerConfig(overrides))


def _random_changes(ctl: Controller, rng: random.Random, steps: int, first: int) -> None:
    """Creates, growths, config changes, deletes, sections and producer ids, at random."""
    for step in range(first, first + steps):
        names = [t.name for t in ctl.topics()]
        choice = rng.randrange(6)
        if choice == 0 or not names:
            configs = {"retention.ms": str(rng.randrange(1, 10**6))} if rng.random() < 0.5 else None
            ctl.create_topic(f"t{step}", rng.randrange(1, 5), configs=configs)
        elif choice == 1:
            name = rng.choice(names)
            ctl.create_partitions(name, ctl.topic(name).partitions + rng.randrange(1, 3))
        elif choice == 2:
            ctl.incremental_alter_configs(rng.choice(names), [("cleanup.policy", 0, "compact"),
                                                              ("retention.ms", 1, None)])
        elif choice == 3:
            ctl.delete_topic(rng.choice(names))
        elif choice == 4:
            ctl.alter_section("acls", lambda v, s=step: ({**(v or {}), str(s): [s]}, None))
        else:
            ctl._allocate_producer_ids(1, None)


def test_random_changes_replayed_from_the_bucket_equal_the_controllers_image(tmp_path: Path) -> None:
    store = FileSystemObjectStore(tmp_path / "bucket")
    ctl = _controller(store)
    ctl.register_broker("127.0.0.1", 9092)
    rng = random.Random(33)
    reader = MetadataCommitter(ObjectStoreMetadataStore(store))
    followed = reader.read()
    for round_ in range(8):
        _random_changes(ctl, rng, 10, round_ * 10)
        assert reader.read().metadata == ctl.metadata  # snapshot + the whole log
        followed = reader.follow(followed)  # from where it was, by GETs of the next slots
        assert followed.metadata == ctl.metadata
    assert len(_slots(tmp_path / "bucket")) == ctl.metadata.revision  # one slot per revision


def test_a_change_is_a_batch_of_its_records_not_the_whole_cluster(tmp_path: Path) -> None:
    store = FileSystemObjectStore(tmp_path / "bucket")
    ctl = _controller(store)
    for i in range(200):
        ctl.create_topic(f"topic-{i}", 4)
    ctl.incremental_alter_configs("topic-7", [("retention.ms", 0, "1000")])
    last = (tmp_path / "bucket" / log_key(PREFIX, ctl.metadata.revision)).read_bytes()
    batch = decode_batch(last, ctl.metadata.revision)
    assert [r["type"] for r in batch.records] == ["ConfigRecord"]
    assert len(last) < 400 < len(encode(ctl.metadata)) // 100


def test_records_round_trip_and_a_miscounted_or_unknown_batch_is_refused() -> None:
    records = [{"type": "NoOpRecord"}] * 5000  # large enough to be gzipped
    batch = Batch(4, 1, 2, str(uuid.uuid4()), 0, records)
    data = encode_batch(batch)
    assert data[:2] == b"\x1f\x8b" and decode_batch(data, 4) == batch
    small = encode_batch(Batch(4, 1, 2, "b", 0, [{"type": "NoOpRecord"}]))
    with pytest.raises(MetadataLogError, match="says 1 records but holds 0"):
        decode_batch(small.splitlines()[0], 4)
    with pytest.raises(MetadataLogError, match="holds batch 4"):
        decode_batch(small, 5)
    unknown = Batch(1, 1, 1, "b", 0, [{"type": "DelegationTokenRecord"}])
    with pytest.raises(MetadataLogError, match="does not know; upgrade Strata"):
        replay(ClusterMetadata("c"), unknown)


def test_a_batch_whose_lines_were_deflated_ahead_is_one_gzip_member_of_the_same_text() -> None:
    """A fencing made ahead hands the commit its lines deflated: the object is the header's
    deflate, then those bytes, then the trailer; every reader inflates it to the very text."""
    import gzip
    import zlib

    records = [{"type": "PartitionChangeRecord", "topic_id": str(uuid.UUID(int=i)), "partition_id": i % 100,
                "leader": i % 3} for i in range(4000)]
    lines = record_lines(records)
    made = Batch(9, 1, 3, str(uuid.uuid4()), 12345, records, lines=lines, deflated=deflate_lines(lines))
    text = batch_text(made)
    data = encode_batch(made)
    assert len(text) >= GZIP_FROM_BYTES and data != gzip.compress(text, 6, mtime=0)
    assert gzip.decompress(data) == text == stored_batch_text(data, 9)
    inflater = zlib.decompressobj(16 + zlib.MAX_WBITS)  # a single-member reader ends where it should
    assert inflater.decompress(data) == text and inflater.eof and not inflater.unused_data
    assert decode_batch(data, 9) == replace(made, lines=None, deflated=None)
    assert len(data) < len(gzip.compress(text, 6, mtime=0)) * 1.01
    with pytest.raises(ValueError, match="does not end with the batch's lines"):
        batch_object(text[:-1], made)


def test_a_reader_that_knows_a_batchs_lines_inflates_only_its_header(monkeypatch: pytest.MonkeyPatch) -> None:
    """A broker holding a fencing made ahead (its lines and their deflate) recognises them in
    the object it reads and inflates only the header line before them; anything else (other
    lines, a damaged header or trailer, other deflate bytes for the same lines) is inflated
    whole, as always, and reads as the same text or fails as it did."""
    from controller import metadata_log_format as fmt

    records = [{"type": "PartitionChangeRecord", "topic_id": str(uuid.UUID(int=i)), "partition_id": i % 100,
                "leader": i % 3} for i in range(4000)]
    lines = record_lines(records)
    deflated = deflate_lines(lines)
    made = Batch(9, 1, 3, str(uuid.uuid4()), 12345, records, lines=lines, deflated=deflated)
    text, data = batch_text(made), encode_batch(made)
    other = record_lines(records[:-1])
    assert fmt.known_text(data, [(deflate_lines(other), other), (deflated, lines)]) == text
    assert fmt.known_text(data, [(deflate_lines(other), other)]) is None
    assert fmt.known_text(data, [(deflated, other)]) is None  # the trailer's CRC catches it
    relevel = zlib.compressobj(1, zlib.DEFLATED, -zlib.MAX_WBITS)
    assert fmt.known_text(data, [(relevel.compress(lines) + relevel.flush(), lines)]) is None
    damaged = bytearray(data)
    damaged[-3] ^= 0xFF  # the length in the trailer
    assert fmt.known_text(bytes(damaged), [(deflated, lines)]) is None
    with pytest.raises(MetadataLogError):
        stored_batch_text(bytes(damaged), 9, [(deflated, lines)])
    # recognised: the lines are never inflated
    real = zlib.decompressobj
    inflated: list[int] = []

    class _Counting:
        def __init__(self, *args: Any) -> None:
            self._inner = real(*args)
            self.unconsumed_tail, self.eof = b"", False

        def decompress(self, chunk: bytes, max_length: int = 0) -> bytes:
            out = self._inner.decompress(chunk, max_length)
            inflated.append(len(out))
            self.unconsumed_tail, self.eof = self._inner.unconsumed_tail, self._inner.eof
            return out

    monkeypatch.setattr(fmt.zlib, "decompressobj", _Counting)
    assert stored_batch_text(data, 9, [(deflated, lines)]) == text
    assert sum(inflated) == len(text) - len(lines)
    inflated.clear()
    assert stored_batch_text(data, 9) == text and sum(inflated) == len(text)


def test_snapshots_bound_the_replay_and_trimming_keeps_every_reader_whole(tmp_path: Path) -> None:
    bucket = tmp_path / "bucket"
    store = FileSystemObjectStore(bucket)
    ctl = _controller(store, **{"metadata.log.retention.ms": "0"})
    committer = ctl._committer
    for round_ in range(3):
        for i in range(5):
            ctl.create_topic(f"r{round_}-{i}", 2)
        head = committer.take_snapshot(ctl.snapshot)
        assert head is not None and head.snapshot == ctl.metadata.revision
    # two snapshots kept; the log starts after the older one (retention 0)
    assert _snapshots(bucket) == [head.previous_snapshot, head.snapshot]
    assert _slots(bucket)[0] == head.log_start == head.previous_snapshot + 1
    ctl.create_topic("after", 1)
    fresh = MetadataCommitter(ObjectStoreMetadataStore(store)).read()
    assert fresh.metadata == ctl.metadata
    assert sorted(read_topics(open_bucket(bucket.as_uri()))) == sorted(t.name for t in ctl.topics())


def test_spark_reads_every_slot_of_a_log_of_any_length_and_keeps_up_with_trims(tmp_path: Path) -> None:
    # Spark's reader fetches the slots after the snapshot in growing windows (2, 4, 8, 16), and
    # in a later read goes on from the last slot it replayed: a log ending at, inside or just
    # past any window boundary is read to its end, and so is one trimmed past that slot, or a
    # new cluster in the same bucket
    bucket = tmp_path / "bucket"

    def topics(ctl: Controller) -> dict[str, tuple[str, int]]:
        return {t.name: (str(t.topic_id), t.partitions) for t in ctl.topics()}

    ctl = _controller(FileSystemObjectStore(bucket), **{"metadata.log.retention.ms": "0"})
    reader = open_bucket(bucket.as_uri())
    for i in range(40):
        ctl.create_topic(f"t{i}", 1 + i % 3)
        assert read_topics(reader) == topics(ctl)
    assert _snapshots(bucket) == [0] and len(_slots(bucket)) >= 40  # all replayed from slot 1
    for round_ in range(2):  # trimmed past the slot the reader stopped at
        ctl.create_topic(f"trimmed-{round_}", 1)
        ctl._committer.take_snapshot(ctl.snapshot)
    ctl.create_topic("after", 2)
    assert _slots(bucket)[0] > 41
    assert read_topics(reader) == topics(ctl)
    shutil.rmtree(bucket)  # another cluster, same bucket
    other = _controller(FileSystemObjectStore(bucket))
    other.create_topic("other", 1)
    assert read_topics(reader) == topics(other) and "other" in topics(other)


def test_a_controller_snapshots_by_itself_after_enough_bytes_of_log(tmp_path: Path) -> None:
    bucket = tmp_path / "bucket"
    ctl = _controller(FileSystemObjectStore(bucket),
                      **{"metadata.log.max.record.bytes.between.snapshots": "2000"})
    for i in range(30):
        ctl.create_topic(f"t{i}", 3)
    head = json.loads((bucket / "cluster" / "metadata.json").read_bytes())
    deadline = 0
    while head["snapshot"]["revision"] == 0 and deadline < 200:  # written on a background thread
        time.sleep(0.05)
        deadline += 1
        head = json.loads((bucket / "cluster" / "metadata.json").read_bytes())
    assert head["version"] == 3 and head["snapshot"]["revision"] > 0


def test_a_broker_away_for_many_snapshots_reloads_the_newest_and_equals_the_controller(
    tmp_path: Path,
) -> None:
    store = FileSystemObjectStore(tmp_path / "bucket")
    ctl = _controller(store, **{"metadata.log.retention.ms": "0"})
    ctl.create_topic("before", 1)
    away = MetadataView(store, head_check_ms=10**9)  # checks the head only at start
    away.refresh()
    for round_ in range(3):
        ctl.create_topic(f"while-away-{round_}", 2)
        ctl._committer.take_snapshot(ctl.snapshot)
    assert min(_slots(tmp_path / "bucket")) > away.revision + 1  # its next slot is gone
    assert not away.refresh()  # the probe alone cannot tell: nothing new, it thinks
    away._next_head_check = 0  # ... until its head check is due
    assert away.refresh()
    assert away.snapshot().metadata == ctl.metadata
    ctl.create_topic("back", 1)
    assert away.refresh() and away.snapshot().metadata == ctl.metadata


class _LostAnswer(FileSystemObjectStore):
    """The first write of a log slot lands, but its answer is lost (a timeout)."""

    lose = False

    def put_if_absent(self, key: str, data: bytes) -> str:
        etag = super().put_if_absent(key, data)
        if self.lose and "/log/" in key:
            self.lose = False
            raise ObjectStoreError("read timeout")
        return etag


def test_a_create_whose_answer_was_lost_is_answered_topic_already_exists(tmp_path: Path) -> None:
    store = _LostAnswer(tmp_path / "bucket")
    ctl = _controller(store)
    store.lose = True
    with pytest.raises(KafkaStorageError):
        ctl.create_topic("orders", 3)
    with pytest.raises(TopicAlreadyExistsError):
        ctl.create_topic("orders", 3)  # the retry sees its batch in the log
    assert ctl.topic("orders").partitions == 3


class _RetriedAfterLanding(FileSystemObjectStore):
    """The first write of a log slot lands, its answer is lost, and the client's own retry
    of the request finds the slot taken (what an S3 client's timeout and retry do)."""

    retried = 0

    def put_if_absent(self, key: str, data: bytes) -> str:
        etag = super().put_if_absent(key, data)
        if self.retried == 0 and "/log/" in key:
            self.retried += 1
            return super().put_if_absent(key, data)  # the retry: PreconditionFailed
        return etag


def test_a_slot_taken_by_the_writers_own_batch_is_its_success(tmp_path: Path) -> None:
    store = _RetriedAfterLanding(tmp_path / "bucket")
    ctl = _controller(store)
    ctl.create_topic("orders", 3)  # answered as created, not TOPIC_ALREADY_EXISTS
    assert store.retried == 1
    assert ctl.topic("orders").partitions == 3
    creates = [r for b in MetadataCommitter(ObjectStoreMetadataStore(store)).log.read_after(0)
               for r in b.records if r["type"] == "TopicRecord" and r.get("name") == "orders"]
    assert len(creates) == 1


def test_a_brokers_death_moves_all_its_leaderships_in_one_batch_then_its_isr_places(tmp_path: Path) -> None:
    """The first batch moves the leaderships only (a third of the records at RF 3): the new
    leaders learn of theirs sooner; the next takes the broker out of the other ISRs."""
    clock = FakeClock()
    bucket = tmp_path / "bucket"
    ctl = tick_until_active(clock, [make_ctl(FileSystemObjectStore(bucket), clock, 1)])
    for node in (1, 2, 3):
        join(ctl, node)
    for i in range(30):
        ctl.create_topic(f"t{i}", 10, 3)
    led = sum(1 for _, _, p in ctl.metadata.iter_partitions() if p.leader == 2)
    before = ctl.metadata.revision
    wait_sessions_out(ctl, clock, 1, 3)
    assert ctl.metadata.brokers[2].fenced
    fencing = [decode_batch((bucket / log_key(PREFIX, r)).read_bytes(), r)
               for r in range(before + 1, ctl.metadata.revision + 1)]
    moved = [b for b in fencing if any(r["type"] == "PartitionChangeRecord" for r in b.records)]
    assert len(moved) == 2 and led > 50
    types = [r["type"] for r in moved[0].records]
    assert types.count("PartitionChangeRecord") == led  # the partitions it led, each with a new leader
    assert all("leader" in r for r in moved[0].records if r["type"] == "PartitionChangeRecord")
    assert types[-1] == "BrokerRegistrationChangeRecord"
    assert [r["type"] for r in moved[1].records] == ["PartitionChangeRecord"] * (300 - led)
    assert all(2 not in p.isr and p.leader != 2 for _, _, p in ctl.metadata.iter_partitions())


def test_a_format_2_bucket_is_read_by_brokers_and_spark_then_switched_to_the_log(
    tmp_path: Path,
) -> None:
    bucket = tmp_path / "bucket"
    store = FileSystemObjectStore(bucket)
    ctl = _controller(store)
    ctl.create_topic("old", 2)
    document = json.loads(encode(ctl.metadata))  # what Strata wrote before the log
    for path in (bucket / "cluster").rglob("*"):
        if path.is_file():
            path.unlink()
    (bucket / "cluster" / "metadata.json").write_bytes(json.dumps(document).encode())

    view = MetadataView(store)
    assert view.refresh() and view.snapshot().format_version == 2
    assert read_topics(open_bucket(bucket.as_uri()))["old"][1] == 2
    upgraded = _controller(store)
    upgraded.create_topic("new", 1)
    assert json.loads((bucket / "cluster" / "metadata.json").read_bytes())["version"] == 3
    assert view.refresh() and view.snapshot().metadata == upgraded.metadata
    assert sorted(read_topics(open_bucket(bucket.as_uri()))) == ["new", "old"]
    assert current_document(store)["revision"] == upgraded.metadata.revision


def test_nodes_initialising_one_bucket_together_agree_on_one_cluster(tmp_path: Path) -> None:
    store = FileSystemObjectStore(tmp_path / "bucket")
    ids = set()
    for _ in range(3):
        committer = MetadataCommitter(ObjectStoreMetadataStore(store), LogPolicy())
        try:
            ids.add(committer.create(ClusterMetadata(cluster_id=uuid.uuid4().hex[:22])).metadata.cluster_id)
        except Exception:  # noqa: BLE001 - the losers' heads conflict; they read the winner's
            ids.add(committer.read().metadata.cluster_id)
    assert len(ids) == 1


def test_records_between_says_only_what_changed() -> None:
    base = ClusterMetadata("c").with_broker(
        BrokerRegistration(1, uuid.uuid4(), 3, (Endpoint("PLAINTEXT", "h", 9092),), fenced=True))
    unfenced = base.with_broker(
        BrokerRegistration(1, base.brokers[1].incarnation_id, 3, base.brokers[1].endpoints,
                           fenced=False))
    assert records_between(base, unfenced) == [{
        "type": "BrokerRegistrationChangeRecord", "node_id": 1, "broker_epoch": 3, "fenced": -1,
        "in_controlled_shutdown": 0}]
    assert records_between(base, base) == []


def test_what_orjson_refuses_is_written_and_read_as_the_same_json_text() -> None:
    """Batches are encoded with orjson; a value it refuses (an integer past 64 bits in a
    section) is written by the standard module, and read back the same."""
    records = [{"type": "SectionRecord", "name": "x", "value": {"big": 2**70, "name": "é"}},
               {"type": "NoOpRecord"}]
    data = encode_batch(Batch(7, 1, 2, "b", 0, records))
    assert b'"big":1180591620717411303424' in data and "é".encode() in data
    assert decode_batch(data, 7).records == records
    assert [json.loads(line) for line in data.splitlines()[1:]] == records


def test_a_partition_change_naming_a_partition_the_topic_lacks_is_refused() -> None:
    """A record's partition index is bounded before it is used (never a negative index
    that would silently change the last partition)."""
    tid = uuid.uuid4()
    base = replay(ClusterMetadata("c"), Batch(1, 1, 1, "a", 0, [
        {"type": "TopicRecord", "name": "t", "topic_id": str(tid), "created_ms": 0},
        {"type": "PartitionRecord", "topic_id": str(tid), "partition": 0, "replicas": [1], "isr": [1],
         "leader": 1, "leader_epoch": 0, "partition_epoch": 0}]))
    for index in (-1, 1, True, "0"):
        bad = Batch(2, 1, 1, "b", 0, [{"type": "PartitionChangeRecord", "topic_id": str(tid),
                                       "partition": index, "isr": [1], "partition_epoch": 1}])
        with pytest.raises(MetadataLogError, match="cannot apply"):
            replay(base, bad)
    good = Batch(2, 1, 1, "b", 0, [{"type": "PartitionChangeRecord", "topic_id": str(tid),
                                    "partition": 0, "leader": -1, "leader_epoch": 1, "partition_epoch": 1}])
    after = replay(base, good).partitions[tid][0]
    assert (after.leader, after.leader_epoch, after.partition_epoch, after.isr) == (-1, 1, 1, (1,))
