"""The strata Spark source against a real local Spark session and moto's S3 server.

History is produced through a real broker with every codec, tiered to the bucket,
and read by Spark straight from the bucket, with the broker stopped. Offsets,
timestamps, headers and timestampType are compared with what was produced.
Committed and aborted transactions (written with Produce + WriteTxnMarkers) are
read with both isolation levels and compared with librdkafka consumers of the same
level through the broker.

One Spark session, with the Strata jar, serves both readers of segment slices:
``format("strata")`` is the JVM source (Python planning, JVM reads) and
``format("strata_python")`` the Python source alone, as ``strata`` is without the jar
(tests/spark/test_python_reader.py checks that naming in a session without it). Tests of
what the readers do (codecs, keys, headers, GET sizes, offset and time bounds, damaged
objects, read_committed) run with both (the ``source`` fixture); tests of planning, the
broker's part and streams, which both readers share, run once, with the jar.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import shutil
import time
import uuid
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaError, TopicPartition

from spark.bucket import Bucket, open_bucket
from spark.jar import PYTHON_NAME
from spark.metadata import read_topics
from tests.e2e import helpers, rawtxn
from tests.e2e.rawkafka import NONE, Connection
from tests.e2e.test_read_committed import write_client_history, write_history
from tests.s3_fixtures import TEST_ACCESS_KEY, TEST_SECRET_KEY, MotoServer

CODECS = ("none", "gzip", "snappy", "lz4", "zstd")
PER_CODEC = 400  # records per codec per partition
WIDE = 10_000  # records of the topic whose first segment spans several JVM column batches
PARTITIONS = 2
SEGMENT_BYTES = 16 * 1024
ROLL_MS = 1000
PREFIX = "spark"
BROKER_SETS = {
    "log.segment.bytes": str(SEGMENT_BYTES),
    "log.roll.ms": str(ROLL_MS),
    "remote.log.manager.task.interval.ms": "100",
    "log.retention.check.interval.ms": "200",
    "log.local.retention.bytes": "0",
    "log.segment.delete.delay.ms": "0",
    "transaction.state.log.num.partitions": "1",  # the "client-txns" producers' coordinator
}


# -- helpers ----------------------------------------------------------------------

#: the formats of the two readers in a session with the jar
JVM, PYTHON = "strata", PYTHON_NAME
JVM_SCAN = "strata (segments read in the JVM)"


@pytest.fixture(params=[JVM, PYTHON], ids=["jvm", "python"])
def source(request: pytest.FixtureRequest) -> str:
    """The format whose reader reads the segment slices: the JVM's, or the Python one."""
    return str(request.param)


def _strata(spark: Any, s3: Any, store: str, source: str = JVM, **options: Any) -> Any:
    reader = (spark.read.format(source).option("object.store", store)
              .option("s3.endpoint", s3.endpoint_url).option("s3.accessKey", TEST_ACCESS_KEY)
              .option("s3.secretKey", TEST_SECRET_KEY).option("s3.region", "us-east-1"))
    for k, v in options.items():
        reader = reader.option(k, v)
    return reader.load()


def _rows(df: Any) -> list[tuple]:
    """Every row as a comparable tuple, in (topic, partition, offset) order."""
    out = []
    for r in df.collect():
        headers = tuple((h.key, h.value) for h in r.headers) if "headers" in r.__fields__ else None
        out.append((r.topic, r.partition, r.offset,
                    None if r.key is None else bytes(r.key), None if r.value is None else bytes(r.value),
                    int(r.timestamp.replace(tzinfo=dt.UTC).timestamp() * 1000), r.timestampType, headers))
    return sorted(out, key=lambda t: (t[0], t[1], t[2]))


def _produce(bootstrap: str, topic: str, partition: int, records: list[tuple], flush_every: int = 50,
             **conf: Any) -> list[tuple]:
    """Produce (key, value, headers, timestamp) to one partition; returns them with their offsets."""
    p = helpers.producer(bootstrap, **{"linger.ms": 5, "batch.num.messages": 50, **conf})
    acked: list[Any] = []
    for i, (key, value, headers, ts) in enumerate(records):
        if i % flush_every == 0:
            p.flush(30)  # small produce requests: many small segments
        p.produce(topic, key=key, value=value, partition=partition, headers=headers, timestamp=ts or 0,
                  on_delivery=lambda err, msg, h=tuple(headers): acked.append((err, msg, h)))
    assert p.flush(60) == 0
    assert all(err is None for err, _, _ in acked), acked[:3]
    # delivery reports carry no headers: take them from what was sent
    return [(topic, partition, m.offset(), m.key(), m.value(), m.timestamp()[1], m.timestamp()[0] - 1, h)
            for _, m, h in acked]


def _s3_options(endpoint: str) -> dict[str, str]:
    return {"endpoint": endpoint, "access_key": TEST_ACCESS_KEY, "secret_key": TEST_SECRET_KEY,
            "region": "us-east-1"}


def _topic_id(bucket: Bucket, topic: str) -> str:
    """The topic's id, read from the bucket's metadata log as the Spark source reads it."""
    return read_topics(bucket)[topic][0]


def _manifest_end(moto: MotoServer, bucket: str, prefix: str, topic: str, partition: int) -> int:
    s3 = helpers.s3_client(moto.endpoint_url)
    tid = _topic_id(open_bucket(f"s3://{bucket}/{prefix}", _s3_options(moto.endpoint_url)), topic)
    try:
        body = s3.get_object(Bucket=bucket, Key=f"{prefix}/topics/{tid}/{partition}/manifest.json")["Body"]
    except s3.exceptions.NoSuchKey:
        return 0
    doc = json.loads(body.read())
    return doc["segments"][-1]["last_offset"] + 1 if doc["segments"] else 0


def _roll_and_wait(b: Any, moto: MotoServer, bucket: str, prefix: str, topic: str, partitions: int,
                   ends: dict[int, int]) -> None:
    """Seal the active segments (a record after log.roll.ms) and wait until ``ends`` are tiered."""
    time.sleep(ROLL_MS / 1000 + 0.2)
    for p in range(partitions):
        helpers.produce_values(b.bootstrap, topic, [b"roll"], partition=p)
    for p in range(partitions):
        helpers.wait_until(lambda: _manifest_end(moto, bucket, prefix, topic, p) >= ends[p],
                           f"{topic}-{p} tiered up to {ends[p]}")


def _kafka_read(bootstrap: str, topic: str, isolation: str, end: int) -> list[tuple[int, bytes, bytes]]:
    """(offset, key, value) below ``end`` of partition 0, read by a librdkafka consumer through the broker."""
    consumer = helpers.consumer(bootstrap, **{"isolation.level": isolation, "enable.partition.eof": True})
    out: list[tuple[int, bytes, bytes]] = []
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            msgs = consumer.consume(num_messages=1000, timeout=0.5)
            out += [(m.offset(), m.key(), m.value()) for m in msgs if m.error() is None and m.offset() < end]
            errors = [m.error() for m in msgs if m.error() is not None]
            assert all(e.code() == KafkaError._PARTITION_EOF for e in errors), errors
            if errors:
                return out
        raise AssertionError(f"{topic}: no end of partition within 60 s ({len(out)} records)")
    finally:
        consumer.close()


def _local_bases(b: Any, topic: str) -> list[int]:
    return sorted(int(f.stem) for f in (b.data_dir / "logs" / f"{topic}-0").glob("*.log"))


class History:
    """Topics tiered to a bucket by a broker that is stopped afterwards."""

    def __init__(self, moto: MotoServer, bucket: str) -> None:
        self.moto, self.bucket = moto, bucket
        self.store = f"s3://{bucket}/{PREFIX}"
        self.expected: dict[str, list[tuple]] = {}
        self.ends: dict[str, dict[int, int]] = {}
        #: per transactional topic, as librdkafka consumers of each isolation level read it through
        #: the broker, and the values its writer says each level must return
        self.txn_reads: dict[str, dict[str, list[tuple[int, bytes, bytes]]]] = {}
        self.txn_values: dict[str, dict[str, list[bytes]]] = {}

    def rows(self, topic: str) -> list[tuple]:
        return sorted(self.expected[topic], key=lambda t: (t[0], t[1], t[2]))


@pytest.fixture(scope="module")
def history(moto_server: MotoServer, module_start_broker: Any) -> Iterator[History]:
    with pytest.MonkeyPatch.context() as mp:
        for k, v in {"AWS_ACCESS_KEY_ID": TEST_ACCESS_KEY, "AWS_SECRET_ACCESS_KEY": TEST_SECRET_KEY,
                     "AWS_DEFAULT_REGION": "us-east-1"}.items():
            mp.setenv(k, v)
        moto_server.start()
        bucket = moto_server.create_bucket().bucket
        h = History(moto_server, bucket)
        b = module_start_broker(sets=BROKER_SETS, args=["--object-store", h.store,
                                                         "--s3-endpoint", moto_server.endpoint_url])
        base = int(time.time() * 1000) - 100_000
        topic = "codecs"
        helpers.create_topic(b.bootstrap, topic, partitions=PARTITIONS)
        rows: list[tuple] = []
        for p in range(PARTITIONS):
            for c, codec in enumerate(CODECS):
                records = []
                for i in range(PER_CODEC):
                    n = (p * len(CODECS) + c) * PER_CODEC + i
                    key = None if i % 7 == 0 else b"key-%d" % n
                    headers = [("n", b"%d" % n), ("codec", codec.encode()), ("empty", None)] if i % 3 else []
                    noise = hashlib.sha256(b"%d" % n).digest() * 2  # incompressible: many segments
                    records.append((key, b"value-%d-" % n + noise[: 20 + n % 44], headers, base + n))
                rows += _produce(b.bootstrap, topic, p, records, **{"compression.type": codec})
        h.expected[topic] = rows
        h.ends[topic] = {p: sum(1 for r in rows if r[1] == p) for p in range(PARTITIONS)}
        _roll_and_wait(b, moto_server, bucket, PREFIX, topic, PARTITIONS, h.ends[topic])

        topic = "appendtime"
        helpers.create_topic(b.bootstrap, topic, partitions=1,
                             config={"message.timestamp.type": "LogAppendTime"})
        h.expected[topic] = _produce(b.bootstrap, topic, 0, [(b"k%d" % i, b"v%d" % i, [], None)
                                                             for i in range(300)])
        h.ends[topic] = {0: 300}
        _roll_and_wait(b, moto_server, bucket, PREFIX, topic, 1, h.ends[topic])

        # small records in one large segment: a slice of several column batches (4,096 rows
        # each in the JVM reader), half of it in lz4 batches
        topic = "wide"
        helpers.create_topic(b.bootstrap, topic, partitions=1, config={"segment.bytes": str(1 << 20)})
        rows = []
        for half, codec in enumerate(("none", "lz4")):
            rows += _produce(b.bootstrap, topic, 0, [
                (None if n % 5 == 0 else b"k%d" % n, b"wide-%d-" % n + b"w" * (n % 37), [], base + n)
                for n in range(half * WIDE // 2, (half + 1) * WIDE // 2)], flush_every=WIDE, **{
                    "compression.type": codec, "batch.num.messages": 100})
        h.expected[topic] = rows
        h.ends[topic] = {0: WIDE}
        _roll_and_wait(b, moto_server, bucket, PREFIX, topic, 1, h.ends[topic])

        # committed and aborted transactions across 1 KB segments, tiered and deleted locally:
        # written with the raw protocol ("txns") and by confluent-kafka's transactional
        # producers through the coordinator ("client-txns")
        for topic, writer in (("txns", write_history), ("client-txns", write_client_history)):
            helpers.create_topic(b.bootstrap, topic, config={"segment.bytes": "1024"})
            txn = writer(b.bootstrap, topic)
            h.ends[topic] = {0: txn.end}
            h.txn_values[topic] = {"read_committed": txn.committed, "read_uncommitted": txn.everything}
            _roll_and_wait(b, moto_server, bucket, PREFIX, topic, 1, h.ends[topic])
            helpers.wait_until(lambda topic=topic, end=txn.end: _local_bases(b, topic)[0] >= end,
                               "tiered segments deleted locally")
            h.txn_reads[topic] = {level: _kafka_read(b.bootstrap, topic, level, txn.end)
                                  for level in ("read_committed", "read_uncommitted")}
        b.stop()  # from here on, no broker: Spark reads the bucket alone
        yield h


@pytest.fixture(scope="module")
def codecs_copy(history: History, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A file:// copy of the bucket's metadata and "codecs" topic, made once, for tests to damage copies of."""
    dest = tmp_path_factory.mktemp("codecs-copy")
    _copy_to_directory(history, dest, only=_manifest(history, "codecs", 0)["topic_id"])
    return dest


def _hdr(rows: list[tuple]) -> list[tuple]:
    return [r[:7] + (tuple((k, v) for k, v in r[7]),) for r in rows]


def _no_headers(rows: list[tuple]) -> list[tuple]:
    return [r[:7] + (None,) for r in rows]


# -- tests ------------------------------------------------------------------------


def test_batch_read_from_the_bucket_returns_exactly_the_produced_records(
    spark: Any, history: History, source: str
) -> None:
    h = history
    df = _strata(spark, h.moto, h.store, source, subscribe="codecs,appendtime", includeHeaders="true",
                 endingOffsets=json.dumps({t: {str(p): e for p, e in ends.items()} for t, ends in h.ends.items()}))
    assert (JVM_SCAN in _scan(df)) == (source == JVM)  # the reader the test is for reads the slices
    got = _rows(df)
    want = _hdr(h.rows("appendtime") + h.rows("codecs"))
    assert len(got) == len(want) == PARTITIONS * len(CODECS) * PER_CODEC + 300
    assert got == sorted(want, key=lambda t: (t[0], t[1], t[2]))
    # LogAppendTime: the broker's time, type 1; CreateTime: the producer's, type 0
    assert {r[6] for r in got if r[0] == "appendtime"} == {1}
    assert {r[6] for r in got if r[0] == "codecs"} == {0}


@pytest.mark.parametrize("chunk", ["1000", "65536"])
def test_an_aggregate_over_keys_and_values_matches_the_produced_records(
    spark: Any, history: History, source: str, chunk: str
) -> None:
    # an aggregate reads column batches in whole-stage code, which frees each batch it is done
    # with: the JVM reader's key and value columns point into its read buffers and must outlive
    # that, and the rows of every batch must still hold their own bytes (small GETs: many refills)
    from pyspark.sql.functions import expr

    h = history
    first = _manifest(h, "wide", 0)["segments"][0]
    assert first["last_offset"] - first["base_offset"] + 1 > 2 * 4096  # so a slice has 3 batches or more
    ends = {t: {str(p): e for p, e in h.ends[t].items()} for t in ("codecs", "wide")}
    df = _strata(spark, h.moto, h.store, source, subscribe="codecs,wide", **{"read.chunk.bytes": chunk},
                 endingOffsets=json.dumps(ends))
    got = sorted(tuple(r) for r in df.groupBy("topic", "partition").agg(*map(expr, (
        "count(*)", "sum(length(key))", "sum(length(value))", "sum(crc32(value))", "sum(crc32(key))"))).collect())
    want = []
    for t, p in [("codecs", p) for p in range(PARTITIONS)] + [("wide", 0)]:
        rows = [r for r in h.rows(t) if r[1] == p]
        keys = [r[3] for r in rows if r[3] is not None]
        want.append((t, p, len(rows), sum(len(k) for k in keys), sum(len(r[4]) for r in rows),
                     sum(zlib.crc32(r[4]) for r in rows), sum(zlib.crc32(k) for k in keys)))
    assert got == want


@pytest.mark.parametrize("chunk", ["1000", "5000", "65536"])
def test_any_get_size_gives_the_same_records_through_the_reused_receive_buffer(
    spark: Any, history: History, source: str, chunk: str
) -> None:
    # every GET lands in one reused buffer; batches cut by a GET are read again whole,
    # and batches larger than a GET (1000 B) get a GET of their own size
    h = history
    got = _rows(_strata(spark, h.moto, h.store, source, subscribe="codecs", **{"read.chunk.bytes": chunk},
                        endingOffsets=json.dumps({"codecs": {str(p): e for p, e in h.ends["codecs"].items()}})))
    assert got == sorted(_no_headers(h.rows("codecs")), key=lambda t: (t[0], t[1], t[2]))


def test_default_end_is_the_end_of_the_bucket_and_the_schema_is_kafkas(spark: Any, history: History) -> None:
    h = history
    df = _strata(spark, h.moto, h.store, subscribe="codecs")
    assert [(f.name, f.dataType.simpleString()) for f in df.schema.fields] == [
        ("key", "binary"), ("value", "binary"), ("topic", "string"), ("partition", "int"),
        ("offset", "bigint"), ("timestamp", "timestamp"), ("timestampType", "int")]
    got = _rows(df)
    # the "roll" records sealed the segments but sit in the active ones, never tiered:
    # without a broker, "latest" is the end of what the bucket holds
    assert [r[:7] for r in got] == [r[:7] for r in h.rows("codecs")]


def test_offset_bounds_give_exactly_the_rows_between_them(spark: Any, history: History, source: str) -> None:
    h = history
    starting = {"codecs": {"0": 123, "1": -2}}
    ending = {"codecs": {"0": 1555, "1": 777}}
    got = _rows(_strata(spark, h.moto, h.store, source, subscribe="codecs", startingOffsets=json.dumps(starting),
                        endingOffsets=json.dumps(ending), minPartitions="7"))
    want = [r for r in h.rows("codecs") if (r[1] == 0 and 123 <= r[2] < 1555) or (r[1] == 1 and r[2] < 777)]
    assert _no_headers(got) == _no_headers(want)
    assert len(got) == (1555 - 123) + 777
    # assign reads only the partitions named
    got = _rows(_strata(spark, h.moto, h.store, source, assign=json.dumps({"codecs": [1]}),
                        endingOffsets=json.dumps({"codecs": {"1": 10}})))
    assert [(r[1], r[2]) for r in got] == [(1, o) for o in range(10)]


def test_min_partitions_splits_segments_without_losing_or_repeating_a_record(spark: Any, history: History) -> None:
    h = history
    ends = json.dumps({"codecs": {str(p): e for p, e in h.ends["codecs"].items()}})
    df = _strata(spark, h.moto, h.store, subscribe="codecs", endingOffsets=ends, minPartitions="64")
    assert df.rdd.getNumPartitions() >= 64
    got = _rows(df)
    assert [r[:3] for r in got] == [r[:3] for r in h.rows("codecs")]


def test_a_narrow_time_range_opens_only_the_segments_that_overlap_it(
    spark: Any, history: History, source: str
) -> None:
    h = history
    rows = [r for r in h.rows("codecs") if r[1] == 0]
    lo_ts, hi_ts = rows[950][5], rows[1000][5]
    h.moto.requests.clear()
    got = _rows(_strata(spark, h.moto, h.store, source, assign=json.dumps({"codecs": [0]}),
                        startingTimestamp=str(lo_ts), endingTimestamp=str(hi_ts)))
    assert [r[2] for r in got] == [r[2] for r in rows if lo_ts <= r[5] < hi_ts]
    assert len(got) == 50
    opened = {path.rsplit("/", 1)[1].split(".")[0] for method, path in h.moto.requests
              if method == "GET" and path.endswith(".log")}
    manifest = _manifest(h, "codecs", 0)
    overlapping = {f"{s['base_offset']:020d}-{s['upload_id']}" for s in manifest["segments"]
                   if s["base_offset"] <= got[-1][2] and s["last_offset"] >= got[0][2]}
    assert opened == overlapping, (sorted(opened), sorted(overlapping))
    assert len(manifest["segments"]) >= 6 and len(opened) <= 2  # the rest were never read


def _manifest(h: History, topic: str, partition: int) -> dict:
    s3 = helpers.s3_client(h.moto.endpoint_url)
    tid = _topic_id(open_bucket(f"s3://{h.bucket}/{PREFIX}", _s3_options(h.moto.endpoint_url)), topic)
    key = f"{PREFIX}/topics/{tid}/{partition}/manifest.json"
    return json.loads(s3.get_object(Bucket=h.bucket, Key=key)["Body"].read())


def test_per_partition_timestamps_and_no_match_strategies(spark: Any, history: History) -> None:
    h = history
    rows = {p: [r for r in h.rows("codecs") if r[1] == p] for p in range(PARTITIONS)}
    by_ts = json.dumps({"codecs": {"0": rows[0][10][5], "1": rows[1][-5][5]}})
    got = _rows(_strata(spark, h.moto, h.store, subscribe="codecs", startingOffsetsByTimestamp=by_ts,
                        endingOffsets=json.dumps({"codecs": {"0": 20, "1": h.ends["codecs"][1]}})))
    assert [(r[1], r[2]) for r in got] == [(0, o) for o in range(10, 20)] + [
        (1, o) for o in range(h.ends["codecs"][1] - 5, h.ends["codecs"][1])]
    future = str(int(time.time() * 1000) + 3_600_000)
    with pytest.raises(Exception, match="no record of codecs-0 has a timestamp at or after"):
        _strata(spark, h.moto, h.store, subscribe="codecs", startingTimestamp=future).collect()
    assert _strata(spark, h.moto, h.store, subscribe="codecs", startingTimestamp=future,
                   startingOffsetsByTimestampStrategy="latest").count() == 0


def test_clear_errors_for_bad_options_missing_topic_bucket_and_range(spark: Any, history: History) -> None:
    h = history
    cases = [
        ({"subscribe": "nope"}, h.store, "topic 'nope' does not exist"),
        ({"subscribe": "codecs"}, f"s3://no-such-bucket-{uuid.uuid4().hex[:8]}/x", "does not exist"),
        ({"subscribe": "codecs", "startingOffsets": "latest"}, h.store, "not valid for a batch query"),
        ({"subscribe": "codecs", "assign": "{}"}, h.store, "exactly one of"),
        ({"subscribe": "codecs", "startingOffsets": "{bad"}, h.store, "must be JSON"),
        ({"subscribe": "codecs", "minPartitions": "0"}, h.store, "positive integer"),
        ({"subscribe": "codecs", "endingOffsets": json.dumps({"codecs": {"0": 10**9}})}, h.store,
         "past the end of the log"),
        ({"subscribe": "codecs", "bogus": "1"}, h.store, "unknown option"),
    ]
    for options, store, message in cases:
        with pytest.raises(Exception, match=message):
            _strata(spark, h.moto, store, **options).collect()


def _offsets_keys_values(df: Any) -> list[tuple[int, bytes, bytes]]:
    return sorted((r.offset, bytes(r.key), bytes(r.value)) for r in df.select("offset", "key", "value").collect())


def test_read_committed_returns_exactly_what_a_read_committed_kafka_consumer_returns(
    spark: Any, history: History, source: str
) -> None:
    h = history
    for topic in ("txns", "client-txns"):
        want = h.txn_reads[topic]["read_committed"]
        assert [v for _, _, v in want] == h.txn_values[topic]["read_committed"]  # the consumer agrees with the writer
        # split inside aborted transactions, each slice keeps the ranges that overlap it
        got = _offsets_keys_values(_strata(spark, h.moto, h.store, source, subscribe=topic, minPartitions="6",
                                           **{"kafka.isolation.level": "read_committed"}))
        assert got == want, topic
    # the default, read_uncommitted: aborted data too, never a control record
    everything = h.txn_reads["txns"]["read_uncommitted"]
    assert [v for _, _, v in everything] == h.txn_values["txns"]["read_uncommitted"]
    assert len(everything) > len(h.txn_reads["txns"]["read_committed"])
    got = _offsets_keys_values(_strata(spark, h.moto, h.store, source, subscribe="txns"))
    assert got == everything


def test_read_committed_without_transactions_reads_no_transaction_index(spark: Any, history: History) -> None:
    h = history
    ends = json.dumps({"codecs": {str(p): e for p, e in h.ends["codecs"].items()}})
    h.moto.requests.clear()
    got = _rows(_strata(spark, h.moto, h.store, subscribe="codecs", endingOffsets=ends,
                        **{"kafka.isolation.level": "read_committed"}))
    assert got == _no_headers(h.rows("codecs"))
    gets = [path for method, path in h.moto.requests if method == "GET"]
    assert not [g for g in gets if ".txnindex" in g]
    # the bucket's stable end: one producer snapshot per partition, the last segment's
    assert len([g for g in gets if ".snapshot" in g]) == PARTITIONS, gets


def test_a_bucket_of_format_1_reads_the_same_with_either_isolation_level(
    spark: Any, history: History, codecs_copy: Path, tmp_path: Path
) -> None:
    """A file:// copy of the bucket whose manifests are format 1 (no .txnindex, no .snapshot)."""
    h = history
    tmp_path = _copy_of(codecs_copy, tmp_path)
    for manifest in tmp_path.glob("topics/*/*/manifest.json"):
        doc = json.loads(manifest.read_text())
        doc["format_version"] = 1
        for seg in doc["segments"]:
            del seg["txn_index_bytes"], seg["producer_snapshot_bytes"]
        manifest.write_text(json.dumps(doc))
    for obj in [*tmp_path.glob("topics/*/*/*.txnindex"), *tmp_path.glob("topics/*/*/*.snapshot")]:
        obj.unlink()
    reads = {level: _rows(spark.read.format("strata").option("object.store", tmp_path.as_uri())
                          .option("assign", '{"codecs": [1]}').option("kafka.isolation.level", level).load())
             for level in ("read_committed", "read_uncommitted")}
    want = [r for r in _no_headers(h.rows("codecs")) if r[1] == 1]
    assert reads["read_committed"] == reads["read_uncommitted"] == want


def _copy_to_directory(h: History, dest: Path, only: str | None = None) -> None:
    """The bucket's objects under ``dest`` (``only``: the metadata and that topic id's objects)."""
    s3 = helpers.s3_client(h.moto.endpoint_url)
    keep = (f"{PREFIX}/cluster/", f"{PREFIX}/topics/{only}/") if only else (PREFIX + "/",)
    for key in helpers.s3_keys(s3, h.bucket, PREFIX + "/"):
        if not key.startswith(keep):
            continue
        path = dest / key[len(PREFIX) + 1:]
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(s3.get_object(Bucket=h.bucket, Key=key)["Body"].read())


def _copy_of(template: Path, tmp_path: Path) -> Path:
    dest = tmp_path / "bucket"
    shutil.copytree(template, dest)
    return dest


def test_a_gap_in_the_manifest_fails_or_is_skipped_by_fail_on_data_loss(
    spark: Any, history: History, codecs_copy: Path, tmp_path: Path
) -> None:
    """A file:// copy of the bucket with one segment dropped from partition 0's manifest."""
    h = history
    tmp_path = _copy_of(codecs_copy, tmp_path)
    tid = _topic_id(open_bucket(tmp_path.as_uri()), "codecs")
    manifest_path = tmp_path / "topics" / tid / "0" / "manifest.json"
    doc = json.loads(manifest_path.read_text())
    dropped = doc["segments"].pop(3)
    manifest_path.write_text(json.dumps(doc))
    store = tmp_path.as_uri()
    ends = json.dumps({"codecs": {"0": h.ends["codecs"][0]}})
    with pytest.raises(Exception, match="missing from the bucket's manifest"):
        spark.read.format("strata").option("object.store", store).option("assign", '{"codecs": [0]}') \
            .option("endingOffsets", ends).load().collect()
    got = spark.read.format("strata").option("object.store", store).option("assign", '{"codecs": [0]}') \
        .option("endingOffsets", ends).option("failOnDataLoss", "false").load()
    offsets = sorted(r.offset for r in got.select("offset").collect())
    gone = set(range(dropped["base_offset"], dropped["last_offset"] + 1))
    assert offsets == [o for o in range(h.ends["codecs"][0]) if o not in gone]


# -- with a running broker: complete snapshots and streams --------------------------------


@pytest.fixture
def live(start_broker: Any, s3_bucket: Any, moto_server: MotoServer) -> Any:
    b = start_broker(sets=BROKER_SETS, args=["--object-store", f"s3://{s3_bucket.bucket}/{PREFIX}",
                                             "--s3-endpoint", s3_bucket.endpoint_url])
    b.store, b.bucket, b.moto = f"s3://{s3_bucket.bucket}/{PREFIX}", s3_bucket.bucket, moto_server
    return b


def _value(partition: int, i: int) -> bytes:
    return b"p%d-%d-" % (partition, i) + hashlib.sha256(b"%d-%d" % (partition, i)).digest()


def _values(bootstrap: str, topic: str, partition: int, first: int, n: int) -> None:
    helpers.produce_values(bootstrap, topic, [_value(partition, i) for i in range(first, first + n)],
                           partition=partition, **{"compression.type": "lz4", "batch.num.messages": 40})


def _partly_tiered(b: Any, topic: str, per_partition: int) -> None:
    """Two partitions of ``per_partition`` records, their older segments in the bucket."""
    helpers.create_topic(b.bootstrap, topic, partitions=2)
    for p in range(2):
        _values(b.bootstrap, topic, p, 0, per_partition)
    helpers.wait_until(lambda: all(_manifest_end(b.moto, b.bucket, PREFIX, topic, p) > 0 for p in range(2)),
                       "some segments tiered")


def _scan(df: Any) -> str:
    return str(df._jdf.queryExecution().executedPlan().toString())


def test_with_the_jar_segments_are_read_in_the_jvm_as_column_batches(spark: Any, history: History) -> None:
    h = history
    df = _strata(spark, h.moto, h.store, subscribe="codecs", includeHeaders="true")
    query = df.selectExpr("count(*) AS n", "sum(length(value)) AS size")
    row = query.collect()[0]
    assert row.n == len(h.rows("codecs")) and row.size == sum(len(r[4]) for r in h.rows("codecs"))
    plan = _scan(query)  # after the run: the final plan, columnar or not decided
    assert JVM_SCAN in plan and "ColumnarToRow" in plan, plan
    # headers, every codec and null keys come out of the JVM reader exactly as produced
    assert _rows(df) == _hdr(h.rows("codecs"))


def test_a_stream_from_earliest_catches_up_from_the_bucket_in_micro_batches(
    spark: Any, history: History, tmp_path: Path
) -> None:
    h = history
    reader = (spark.readStream.format("strata").option("object.store", h.store)
              .option("s3.endpoint", h.moto.endpoint_url).option("s3.accessKey", TEST_ACCESS_KEY)
              .option("s3.secretKey", TEST_SECRET_KEY).option("subscribe", "codecs")
              .option("includeHeaders", "true").option("startingOffsets", "earliest")
              .option("maxOffsetsPerTrigger", "1500"))
    out = str(tmp_path / "out")
    query = (reader.load().writeStream.format("parquet").option("path", out)
             .option("checkpointLocation", str(tmp_path / "checkpoint")).trigger(availableNow=True).start())
    try:
        assert query.awaitTermination(180)
        assert query.exception() is None
        batches = [p for p in query.recentProgress if p["numInputRows"] > 0]
        plan = str(query._jsq.streamingQuery().lastExecution().executedPlan().toString())
    finally:
        query.stop()
    assert len(batches) >= 3 and all(p["numInputRows"] <= 1500 for p in batches)
    assert _rows(spark.read.parquet(out)) == _hdr(h.rows("codecs"))
    assert "ColumnarToRow" in plan, plan  # the micro-batches' slices were read in the JVM


def test_a_schema_that_is_not_kafkas_is_refused(spark: Any, history: History) -> None:
    h = history
    reader = (spark.read.format("strata").schema("key binary, value binary").option("object.store", h.store)
              .option("s3.endpoint", h.moto.endpoint_url).option("s3.accessKey", TEST_ACCESS_KEY)
              .option("s3.secretKey", TEST_SECRET_KEY).option("subscribe", "codecs"))
    with pytest.raises(Exception, match="DATA_SOURCE_RETURN_SCHEMA_MISMATCH"):
        reader.load().collect()


def _corrupt_copy(h: History, template: Path, dest: Path, damage: Any) -> str:
    """A file:// copy of the bucket with ``damage(path)`` done to partition 0's second segment."""
    dest = _copy_of(template, dest)
    manifest = _manifest(h, "codecs", 0)
    seg = manifest["segments"][1]
    tid = manifest["topic_id"]
    path = dest / "topics" / tid / "0" / f"{seg['base_offset']:020d}-{seg['upload_id']}.log"
    damage(path)
    return dest.as_uri()


def _flip_a_byte(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[200] ^= 0xFF  # inside the first batch's records
    path.write_bytes(bytes(data))


def _overcount_records(path: Path) -> None:
    """The first batch claims one record more than it holds, under a CRC that matches."""
    import crc32c

    data = bytearray(path.read_bytes())
    count = int.from_bytes(data[57:61], "big")
    data[57:61] = (count + 1).to_bytes(4, "big")
    data[17:21] = crc32c.crc32c(bytes(data[21:12 + int.from_bytes(data[8:12], "big")])).to_bytes(4, "big")
    path.write_bytes(bytes(data))


def _cut_in_the_middle(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


@pytest.mark.parametrize(("damage", "message"), [
    (_flip_a_byte, r"CRC mismatch in the batch at offset \d+ of object '.*\.log': the segment object is corrupt"),
    (_cut_in_the_middle, r"object '.*\.log' ends inside a batch at byte \d+ .*: the segment object is truncated"),
    (_overcount_records, r"batch at offset \d+.*(malformed|record count does not fit)"),
    (Path.unlink, r"no object '.*\.log'"),
])
def test_a_damaged_segment_object_fails_the_read_with_its_name(
    spark: Any, history: History, codecs_copy: Path, tmp_path: Path, source: str, damage: Any, message: str
) -> None:
    store = _corrupt_copy(history, codecs_copy, tmp_path, damage)
    df = spark.read.format(source).option("object.store", store).option("assign", '{"codecs": [0]}').load()
    with pytest.raises(Exception, match=message):
        df.collect()
    # the other partition, which is not damaged, still reads
    got = spark.read.format(source).option("object.store", store).option("assign", '{"codecs": [1]}').load()
    assert got.count() == history.ends["codecs"][1]


def test_a_complete_snapshot_equals_what_a_kafka_consumer_reads(spark: Any, live: Any) -> None:
    b = live
    topic = "snapshot"
    _partly_tiered(b, topic, 1500)
    remote_ends = {p: _manifest_end(b.moto, b.bucket, PREFIX, topic, p) for p in range(2)}
    assert all(0 < e < 1500 for e in remote_ends.values()), remote_ends  # the tail is only on the broker
    df = _strata(spark, b.moto, b.store, subscribe=topic, **{"kafka.bootstrap.servers": b.bootstrap})
    got = _rows(df)
    # segment slices read in the JVM, the broker's part by the Python reader, as rows
    assert JVM_SCAN in _scan(df)
    msgs = helpers.consume(b.bootstrap, topic, [0, 1], 3000)
    want = sorted((topic, m.partition(), m.offset(), m.key(), m.value(), m.timestamp()[1], m.timestamp()[0] - 1,
                   None) for m in msgs)
    assert got == want
    assert len(got) == 3000


def test_backfill_then_stream_has_no_gap_and_no_duplicate(spark: Any, live: Any, tmp_path: Path) -> None:
    b = live
    topic = "handover"
    _partly_tiered(b, topic, 800)
    common = {"kafka.bootstrap.servers": b.bootstrap}
    batch = _rows(_strata(spark, b.moto, b.store, subscribe=topic, **common))
    ends = {p: max(r[2] for r in batch if r[1] == p) + 1 for p in range(2)}
    assert ends == {0: 800, 1: 800}
    for p in range(2):
        _values(b.bootstrap, topic, p, 800, 300)  # arrives after the backfill

    reader = (spark.readStream.format("strata").option("object.store", b.store)
              .option("s3.endpoint", b.moto.endpoint_url).option("s3.accessKey", TEST_ACCESS_KEY)
              .option("s3.secretKey", TEST_SECRET_KEY).option("subscribe", topic)
              .option("kafka.bootstrap.servers", b.bootstrap).option("maxOffsetsPerTrigger", "250")
              .option("startingOffsets", json.dumps({topic: {str(p): e for p, e in ends.items()}})))
    out, checkpoint = str(tmp_path / "out"), str(tmp_path / "checkpoint")

    def run_stream() -> list[Any]:
        query = (reader.load().writeStream.format("parquet").option("path", out)
                 .option("checkpointLocation", checkpoint).trigger(availableNow=True).start())
        try:
            assert query.awaitTermination(180)
            assert query.exception() is None
            return [p for p in query.recentProgress if p["numInputRows"] > 0]
        finally:
            query.stop()

    batches = run_stream()
    streamed = _rows(spark.read.parquet(out))
    assert len(batches) >= 2  # maxOffsetsPerTrigger cut the 600 new records into micro-batches
    assert all(p["numInputRows"] <= 250 for p in batches)
    union = batch + streamed
    keys = [(r[1], r[2]) for r in union]
    assert len(keys) == len(set(keys)), "a record was read twice"
    assert sorted(keys) == [(p, o) for p in range(2) for o in range(1100)]
    assert {r[4] for r in union} == {_value(p, i) for p in range(2) for i in range(1100)}

    # restarted from its checkpoint, the stream reads only what came since
    for p in range(2):
        _values(b.bootstrap, topic, p, 1100, 10)
    run_stream()
    again = _rows(spark.read.parquet(out))
    assert sorted((r[1], r[2]) for r in again) == [(p, o) for p in range(2) for o in range(800, 1110)]


def _txn_tail(b: Any, topic: str) -> tuple[int, int, int]:
    """A log whose bucket part ends inside an aborted transaction (its ABORT marker only on the
    broker) and whose tail holds an open transaction; returns (its first offset, the aborted
    one's first offset, the raw connection's producer id of the open one)."""
    helpers.create_topic(b.bootstrap, topic, config={"segment.bytes": "1024", "segment.ms": "600000"})
    with Connection.to(b.bootstrap) as conn:
        plain, a, d, c = (rawtxn.init_producer_id(conn)[1] for _ in range(4))
        seq = dict.fromkeys((plain, a, d, c), 0)

        def send(pid: int, n: int, *, txn: bool, size: int = 60) -> int:
            batch = rawtxn.producer_batch([b"%d-%d-" % (pid, seq[pid] + i) + b"x" * size for i in range(n)],
                                          producer_id=pid, epoch=0, sequence=seq[pid], transactional=txn)
            seq[pid] += n
            error, base = rawtxn.produce(conn, topic, 0, batch)
            assert error == NONE
            return base

        def end(pid: int, commit: bool) -> None:
            assert rawtxn.write_txn_markers(conn, producer_id=pid, epoch=0, commit=commit, topic=topic,
                                            partitions=[0]) == {0: NONE}

        for _ in range(2):
            send(plain, 3, txn=False)
            send(a, 3, txn=True)
            send(d, 3, txn=True)
            end(d, commit=False)
            end(a, commit=True)
        aborted_first = send(d, 3, txn=True)  # D's last transaction, aborted below
        send(plain, 9, txn=False)  # 1 KB segments: this one fills a segment past D's records,
        last_tiered = send(plain, 9, txn=False)  # this one starts the active segment, which then
        end(d, commit=False)  # holds D's ABORT marker
        open_first = send(c, 1, txn=True, size=5)  # and stays open: the LSO
    helpers.wait_until(lambda: _manifest_end(b.moto, b.bucket, PREFIX, topic, 0) >= last_tiered,
                       "sealed segments below the LSO tiered")
    assert _manifest_end(b.moto, b.bucket, PREFIX, topic, 0) == last_tiered  # the marker is local only
    return open_first, aborted_first, c


def test_read_committed_with_the_broker_tail_and_streams_end_at_the_lso(
    spark: Any, live: Any, tmp_path: Path
) -> None:
    b = live
    topic = "txntail"
    open_first, aborted_first, open_pid = _txn_tail(b, topic)
    far = 1 << 62
    committed = _kafka_read(b.bootstrap, topic, "read_committed", far)
    everything = _kafka_read(b.bootstrap, topic, "read_uncommitted", far)
    assert max(o for o, _, _ in committed) < open_first <= max(o for o, _, _ in everything)
    broker = {"kafka.bootstrap.servers": b.bootstrap}
    rc = {"kafka.isolation.level": "read_committed"}

    # with the broker: up to its LSO, the aborted records tiered before their marker skipped too
    assert _offsets_keys_values(_strata(spark, b.moto, b.store, subscribe=topic, **broker, **rc)) == committed
    assert _offsets_keys_values(_strata(spark, b.moto, b.store, subscribe=topic, **broker)) == everything
    # D's last records lie in the bucket, tiered before their ABORT marker (which only the broker
    # has): the read_committed read above took them from the broker, which skips them
    d_records = set(range(aborted_first, aborted_first + 3))
    assert d_records <= {o for o, _, _ in everything} and not d_records & {o for o, _, _ in committed}
    # the bucket alone: up to its stable end, where the transaction it cannot settle begins
    assert _offsets_keys_values(_strata(spark, b.moto, b.store, subscribe=topic, **rc)) == \
        [r for r in committed if r[0] < aborted_first]

    reader = (spark.readStream.format("strata").option("object.store", b.store)
              .option("s3.endpoint", b.moto.endpoint_url).option("s3.accessKey", TEST_ACCESS_KEY)
              .option("s3.secretKey", TEST_SECRET_KEY).option("subscribe", topic)
              .option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", "20")
              .option("kafka.bootstrap.servers", b.bootstrap).option("kafka.isolation.level", "read_committed"))
    out, checkpoint = str(tmp_path / "out"), str(tmp_path / "checkpoint")

    def run_stream() -> list[tuple[int, bytes, bytes]]:
        query = (reader.load().writeStream.format("parquet").option("path", out)
                 .option("checkpointLocation", checkpoint).trigger(availableNow=True).start())
        try:
            assert query.awaitTermination(180)
            assert query.exception() is None
        finally:
            query.stop()
        return _offsets_keys_values(spark.read.parquet(out))

    assert run_stream() == committed
    with Connection.to(b.bootstrap) as conn:  # the open transaction commits: the LSO moves on
        assert rawtxn.write_txn_markers(conn, producer_id=open_pid, epoch=0, commit=True, topic=topic,
                                        partitions=[0]) == {0: NONE}
    after = _kafka_read(b.bootstrap, topic, "read_committed", far)
    assert len(after) == len(committed) + 1 and after[-1][0] == open_first
    assert run_stream() == after
