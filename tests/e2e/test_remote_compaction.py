"""Compacted topics in the bucket: a tiered compacted topic whose local copies are gone reads,
through the broker, as the latest value per key; replaced objects outlive the swap for the
grace period, then go."""

from __future__ import annotations

import json
import random
import time
import urllib.request
from pathlib import Path
from typing import Any

from confluent_kafka import TopicPartition

from tests.conftest import BrokerFactory, BrokerProcess
from tests.e2e.helpers import admin, create_topic, topic_name, wait_until
from tests.e2e.test_compaction import (
    Model,
    compacted_view,
    expected,
    fillers,
    produce,
    random_history,
    read_all,
)

TIERED_FAST = {
    "remote.log.manager.task.interval.ms": "200",
    "log.retention.check.interval.ms": "200",
    "log.local.retention.bytes": "0",  # only the active segment stays on disk
    "log.segment.delete.delay.ms": "0",
    "log.cleaner.backoff.ms": "200",
    "remote.log.compaction.object.retention.ms": "1500",
}
COMPACTED_TIERED = {
    "cleanup.policy": "compact",
    "segment.bytes": "4096",
    "min.cleanable.dirty.ratio": "0.01",
    "delete.retention.ms": "1000",
}


def manifests(broker: BrokerProcess) -> list[dict[str, Any]]:
    root = broker.data_dir / "bucket" / "topics"
    return [json.loads(p.read_text()) for p in sorted(root.glob("*/*/manifest.json"))]


def manifest_of(broker: BrokerProcess, topic: str) -> dict[str, Any] | None:
    return next((m for m in manifests(broker) if m["topic"] == topic), None)


def local_logs(broker: BrokerProcess, topic: str) -> list[Path]:
    return sorted((broker.data_dir / "logs" / f"{topic}-0").glob("*.log"))


def objects(broker: BrokerProcess, topic: str) -> set[str]:
    m = manifest_of(broker, topic)
    assert m is not None
    directory = broker.data_dir / "bucket" / "topics" / m["topic_id"] / "0"
    return {p.name for p in directory.glob("*.log")}


def test_a_tiered_compacted_topic_reads_compacted_from_the_bucket(start_broker: BrokerFactory) -> None:
    broker = start_broker(sets=TIERED_FAST)
    topic = topic_name("tiered-compacted")
    create_topic(broker.bootstrap, topic, config=COMPACTED_TIERED)
    rnd = random.Random(405)
    model: Model = {}
    history = random_history(rnd, 30, 500, b"v") + fillers("seal-a")
    produce(broker.bootstrap, topic, history)
    model.update(history)

    def compacted_in_bucket() -> dict[str, Any] | None:
        m = manifest_of(broker, topic)
        return m if m and m.get("cleaner_offset") and len(local_logs(broker, topic)) == 1 else None

    first = wait_until(compacted_in_bucket, "a remote compaction, local copies gone", timeout=40, interval=0.3)
    assert first["format_version"] == 3
    replaced_first = {r["upload_id"] for r in first["replaced"]}
    assert replaced_first
    # the admin API (and so `strata topics describe`) shows the remote cleaner's progress
    with urllib.request.urlopen(f"{broker.admin_url}/v1/topics/{topic}/partitions", timeout=10) as resp:
        cleaner = json.load(resp)["partitions"][0]["cleaner"]
    assert cleaner["tier"] == "remote" and cleaner["passes"] >= 1
    assert cleaner["cleaned_up_to"] is not None and cleaner["cleaned_up_to"] >= first["cleaner_offset"]
    with_tombstones = sorted(model.items(), key=lambda kv: (kv[0], kv[1] or b""))
    wait_until(lambda: compacted_view(read_all(broker.bootstrap, topic)) == with_tombstones,
               "the latest value per key read back from the bucket", timeout=30, interval=0.5)
    # past delete.retention.ms, a later pass drops the tombstones; the first replaced
    # objects outlive their swap by remote.log.compaction.object.retention.ms, then go
    time.sleep(1.1)
    more = fillers("seal-b")
    produce(broker.bootstrap, topic, more)
    model.update(more)
    wait_until(lambda: compacted_view(read_all(broker.bootstrap, topic)) == expected(model),
               "tombstones gone from the bucket", timeout=40, interval=0.5)
    def replaced_deleted() -> bool:
        m = manifest_of(broker, topic)
        listed = {r["upload_id"] for r in m["replaced"]} if m else set()
        names = objects(broker, topic)
        return not (replaced_first & listed) and not any(u in n for u in replaced_first for n in names)

    wait_until(replaced_deleted, "replaced objects deleted after the grace period", timeout=30, interval=0.3)
    live = {s["upload_id"] for s in manifest_of(broker, topic)["segments"]}  # type: ignore[index]
    assert all(any(u in n for u in live) or any(r["upload_id"] in n for r in manifest_of(broker, topic)["replaced"])  # type: ignore[index]
               for n in objects(broker, topic))


def test_the_local_copy_of_a_tiered_compacted_topic_is_compacted_below_the_buckets_end(
    start_broker: BrokerFactory,
) -> None:
    """While the disk still holds a tiered compacted topic, consumers read it from there: it is
    compacted as Kafka's would be (librdkafka's 0077 read it uncompacted), up to the bucket's
    end only, so uploads go on from where they were. The bucket's cleaner is off here: what
    reads compacted was cleaned on disk."""
    broker = start_broker(sets={**TIERED_FAST, "log.local.retention.bytes": "-2",
                                "remote.log.compaction.enable": "false"})
    topic = topic_name("local-compacted")
    create_topic(broker.bootstrap, topic, config=COMPACTED_TIERED)
    model: Model = {}
    history = random_history(random.Random(77), 30, 500, b"v") + fillers("seal-a")
    produce(broker.bootstrap, topic, history)
    model.update(history)
    with_tombstones = sorted(model.items(), key=lambda kv: (kv[0], kv[1] or b""))
    wait_until(lambda: compacted_view(read_all(broker.bootstrap, topic)) == with_tombstones,
               "the latest value per key read from the disk", timeout=40, interval=0.5)
    m = manifest_of(broker, topic)
    assert m is not None and m["segments"] and not m.get("cleaner_offset")  # the bucket was not cleaned
    assert len(local_logs(broker, topic)) > 1  # the disk still holds the cleaned segments
    # the uploads go on past the cleaned segments, and every key still reads at its latest value
    # (its tombstone kept, or gone once delete.retention.ms has passed)
    uploaded = m["segments"][-1]["last_offset"]
    more = fillers("seal-b", 80)
    produce(broker.bootstrap, topic, more)
    model.update(more)
    wait_until(lambda: (manifest_of(broker, topic) or m)["segments"][-1]["last_offset"] > uploaded + 40,
               "the next segments uploaded", timeout=30, interval=0.3)
    latest = sorted(model.items(), key=lambda kv: (kv[0], kv[1] or b""))
    assert compacted_view(read_all(broker.bootstrap, topic)) in (latest, expected(model))


def test_kill_9_between_upload_and_swap_leaves_the_bucket_whole(start_broker: BrokerFactory) -> None:
    """The broker killed with a remote compaction's objects uploaded but not swapped in: the
    manifest never lists them, the log reads whole after the restart, and compaction completes."""
    broker = start_broker(sets={**TIERED_FAST, "log.cleaner.test.pause.at": "remote-uploaded"})
    topic = topic_name("kill-remote")
    create_topic(broker.bootstrap, topic, config=COMPACTED_TIERED)
    model: Model = {}
    history = random_history(random.Random(11), 20, 300, b"v") + fillers("seal-a")
    produce(broker.bootstrap, topic, history)
    model.update(history)
    marker = broker.data_dir / "logs" / "cleaner-paused-remote-uploaded"
    wait_until(marker.exists, "the remote cleaner to pause with its objects uploaded", timeout=40, interval=0.2)
    broker.kill()
    before = manifest_of(broker, topic)
    assert before is not None and before.get("cleaner_offset") is None
    listed = {s["upload_id"] for s in before["segments"]}
    unlisted = {n for n in objects(broker, topic) if not any(u in n for u in listed)}
    assert unlisted, "the pass had uploaded cleaned segments"
    marker.unlink()
    broker.sets["log.cleaner.test.pause.at"] = ""
    broker.start()
    latest: Model = {}
    for _, key, value in read_all(broker.bootstrap, topic):
        assert key is not None
        latest[key] = value
    assert latest == model
    with_tombstones = sorted(model.items(), key=lambda kv: (kv[0], kv[1] or b""))
    wait_until(lambda: (m := manifest_of(broker, topic)) and m.get("cleaner_offset")
               and compacted_view(read_all(broker.bootstrap, topic)) == with_tombstones,
               "compaction to complete after the restart", timeout=40, interval=0.5)
    after = manifest_of(broker, topic)
    assert after is not None
    assert not {s["upload_id"] for s in after["segments"]} & {n.split("-")[1].split(".")[0] for n in unlisted}


def test_a_manifest_changed_before_the_swap_loses_nothing_and_the_next_pass_completes(
    start_broker: BrokerFactory,
) -> None:
    """The remote cleaner has uploaded a pass's cleaned segments when DeleteRecords (allowed
    on compact,delete) drops a segment the pass replaces from the manifest: the swap's
    compare-and-set finds it gone and publishes nothing, the uploaded objects are deleted and
    never listed, every record above the new log start still reads, and the next pass
    compacts."""
    broker = start_broker(sets={**TIERED_FAST, "log.cleaner.test.pause.at": "remote-uploaded"})
    topic = topic_name("cas-remote")
    create_topic(broker.bootstrap, topic, config={**COMPACTED_TIERED, "cleanup.policy": "compact,delete",
                                                  "retention.ms": "-1"})
    rnd = random.Random(12)
    history = [(b"key-%d" % rnd.randrange(20), b"v-%d" % i + b"x" * rnd.randrange(60)) for i in range(300)]
    history += fillers("seal")
    produce(broker.bootstrap, topic, history)
    marker = broker.data_dir / "logs" / "cleaner-paused-remote-uploaded"
    wait_until(marker.exists, "the remote cleaner to pause with its objects uploaded", timeout=40, interval=0.2)
    before = manifest_of(broker, topic)
    assert before is not None and before.get("cleaner_offset") is None
    listed = {s["upload_id"] for s in before["segments"]}
    uploaded = {n for n in objects(broker, topic) if not any(u in n for u in listed)}
    assert uploaded, "the paused pass had uploaded cleaned segments"
    start = before["segments"][0]["last_offset"] + 1  # the first segment, which the pass replaces, goes
    client = admin(broker.bootstrap)
    tp = TopicPartition(topic, 0, start)
    assert client.delete_records([tp], request_timeout=15)[tp].result(timeout=20).low_watermark == start
    marker.unlink()  # the pass goes on to its swap

    aborted = "the manifest changed under the remote cleaner"
    wait_until(lambda: aborted in broker.log_text(), "the swap to find the manifest changed", timeout=30)
    after = manifest_of(broker, topic)
    assert after is not None and after.get("cleaner_offset") is None and not after.get("replaced")
    names = objects(broker, topic)
    assert not uploaded & names, "the aborted pass's objects are deleted"
    assert not {s["upload_id"] for s in after["segments"]} & {n.split("-")[1].split(".")[0] for n in uploaded}
    model: Model = {}
    for offset, (key, value) in enumerate(history):
        if offset >= start:
            model[key] = value
    latest: Model = {}
    for offset, key, value in read_all(broker.bootstrap, topic):
        assert offset >= start and key is not None
        latest[key] = value
    assert latest == model  # nothing above the new log start lost

    def compacted() -> bool:
        if marker.exists():  # later passes pause too: let them go
            marker.unlink()
        m = manifest_of(broker, topic)
        return bool(m and m.get("cleaner_offset")) and compacted_view(read_all(broker.bootstrap, topic)) == expected(model)

    wait_until(compacted, "the next pass to compact", timeout=40, interval=0.3)


def test_a_sealed_segment_goes_to_the_bucket_at_once_not_at_the_next_interval(start_broker: BrokerFactory) -> None:
    """A roll starts its partition's upload round within about half a second: with a 10 minute
    task interval, the segments a produce sealed are in the bucket seconds later (the local
    cleaner of a tiered compacted topic waits for them, ADR 0019)."""
    broker = start_broker(sets={"remote.log.manager.task.interval.ms": "600000"})
    topic = topic_name("rolled")
    create_topic(broker.bootstrap, topic, config={"segment.bytes": "4096"})
    time.sleep(1.0)  # the start-up round is over: only a roll can start the next one
    produce(broker.bootstrap, topic, fillers("roll", 120))
    sealed = len(local_logs(broker, topic)) - 1
    assert sealed >= 2
    start = time.monotonic()
    m = wait_until(lambda: (m := manifest_of(broker, topic)) and len(m["segments"]) >= sealed and m,
                   "the sealed segments in the bucket", timeout=10, interval=0.1)
    assert m["segments"][-1]["last_offset"] + 1 == int(local_logs(broker, topic)[-1].stem)
    print(f"sealed segments in the bucket {time.monotonic() - start:.2f} s after the produce")
