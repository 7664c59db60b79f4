"""The part of a partition not in the bucket yet, from the broker (``kafka.bootstrap.servers``).

Through confluent-kafka (librdkafka): high watermarks and timestamp lookups at
planning, and on executors an assigned consumer (no group, no commits) that
reads ``[lo, hi)`` of one partition. Any ``kafka.*`` option is passed to it
(``kafka.security.protocol``, ``kafka.sasl.*``, ...).

``isolation.level`` is ``read_uncommitted`` unless ``kafka.isolation.level`` says
otherwise, as in Spark's Kafka source (librdkafka's own default is
read_committed). With ``read_committed`` the watermark read at planning is the
last stable offset and the consumer drops aborted records; control records are
never returned in either mode. Both leave offsets without a record (markers,
aborted records), so the end of ``[lo, hi)`` is also recognised by the
consumer's end-of-partition position.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterable, Iterator, Mapping

import pyarrow as pa
from confluent_kafka import OFFSET_END, Consumer, KafkaError, KafkaException, TopicPartition

from spark.options import StrataSourceError
from spark.segments import Columns

__all__ = ["BrokerClient", "read_broker"]

_TIMEOUT_S = 30.0
#: confluent-kafka's timestamp types to Kafka's (0 create time, 1 log append time)
_TIMESTAMP_TYPE = {1: 0, 2: 1}


def _config(kafka: Mapping[str, str]) -> dict[str, object]:
    config: dict[str, object] = {
        "group.id": f"strata-spark-{uuid.uuid4().hex}",
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "enable.partition.eof": True,
        "auto.offset.reset": "error",
        "isolation.level": "read_uncommitted",
        "fetch.max.bytes": 64 * 1024 * 1024,
        "max.partition.fetch.bytes": 16 * 1024 * 1024,
    }
    config.update(kafka)
    return config


class BrokerClient:
    """Planning-time questions to the broker. Close it when done."""

    def __init__(self, kafka: Mapping[str, str]) -> None:
        self._bootstrap = kafka.get("bootstrap.servers")
        self._consumer = Consumer(_config(kafka))

    def close(self) -> None:
        self._consumer.close()

    def watermarks(self, partitions: Iterable[tuple[str, int]]) -> dict[tuple[str, int], tuple[int, int]]:
        """(low, high) watermark of each partition, asked now."""
        out = {}
        for topic, partition in partitions:
            try:
                low, high = self._consumer.get_watermark_offsets(
                    TopicPartition(topic, partition), timeout=_TIMEOUT_S, cached=False
                )
            except KafkaException as exc:
                raise StrataSourceError(
                    f"kafka.bootstrap.servers={self._bootstrap}: cannot read the offsets of "
                    f"{topic}-{partition}: {exc.args[0].str() if exc.args else exc}; check that the broker "
                    "is running and reachable"
                ) from None
            out[(topic, partition)] = (int(low), int(high))
        return out

    def offset_for_timestamp(self, topic: str, partition: int, timestamp: int) -> int | None:
        try:
            (found,) = self._consumer.offsets_for_times(
                [TopicPartition(topic, partition, timestamp)], timeout=_TIMEOUT_S
            )
        except KafkaException as exc:
            raise StrataSourceError(f"cannot look up timestamp {timestamp} in {topic}-{partition}: {exc}") from None
        return None if found.offset < 0 or found.offset == OFFSET_END else int(found.offset)


def read_broker(
    kafka: Mapping[str, str], topic: str, partition: int, lo: int, hi: int, columns: Columns
) -> Iterator[pa.RecordBatch]:
    """Arrow batches of offsets ``[lo, hi)`` of one partition, read from the broker."""
    consumer = Consumer(_config(kafka))
    try:
        consumer.assign([TopicPartition(topic, partition, lo)])
        next_offset = lo
        idle_since = time.monotonic()
        while next_offset < hi:
            messages = consumer.consume(num_messages=10_000, timeout=1.0)
            if not messages:
                if time.monotonic() - idle_since > _TIMEOUT_S:
                    raise StrataSourceError(
                        f"{topic}-{partition}: the broker sent nothing for {_TIMEOUT_S:.0f} s at offset "
                        f"{next_offset} (reading up to {hi}); check kafka.bootstrap.servers"
                    )
                continue
            idle_since = time.monotonic()
            for msg in messages:
                err = msg.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        # the position past the last record, control record or aborted record
                        next_offset = max(next_offset, min(hi, msg.offset() or 0))
                        if next_offset >= hi:
                            break
                        continue
                    raise StrataSourceError(f"{topic}-{partition}: reading from the broker failed: {err.str()}")
                offset = msg.offset()
                if offset < next_offset:
                    continue
                if offset >= hi:
                    next_offset = hi
                    break
                kind, ts = msg.timestamp()
                columns.add(msg.key(), msg.value(), offset, ts, _TIMESTAMP_TYPE.get(kind, 0), msg.headers())
                next_offset = offset + 1
                if columns.full:
                    yield columns.take()
        if len(columns):
            yield columns.take()
    finally:
        consumer.close()
