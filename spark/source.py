"""``StrataDataSource``: ``spark.read.format("strata")`` and ``spark.readStream.format("strata")``.

The schema is Spark's Kafka source schema. Batch reads plan on the driver
(:mod:`spark.catalog`), executors read segment slices straight from the bucket
(:mod:`spark.segments`) and, with ``kafka.bootstrap.servers``, the not-yet-tiered
tail from the broker (:mod:`spark.broker`), handing Spark Arrow record batches.

Streams keep offsets per partition as ``{"topic": {"partition": next_offset}}``,
the same JSON form as ``startingOffsets``, in Spark's checkpoint, with each topic's id
under ``"@topic_ids"`` (no topic name has an ``@``): a topic deleted and created again
under its name between two micro-batches starts over at the new topic's log start
instead of at the old topic's offsets (which the new one may not reach for a long time,
and whose records below them would be skipped). Like Spark's Kafka source, the stream
fails then unless ``failOnDataLoss`` is false: records of the old topic that were not
read before the deletion are gone. Offsets written before the ids were kept read as
before, without the check. A micro-batch
reads from the bucket while behind and from the broker once caught up; a stream
started with ``startingOffsets`` equal to a batch read's end offsets continues it
with no gap and no duplicate.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    InputPartition,
)
from pyspark.sql.streaming.datasource import SupportsTriggerAvailableNow
from pyspark.sql.types import StructType

from spark.bucket import open_bucket
from spark.catalog import BrokerSlice, Catalog, SegmentSlice, plan
from spark.options import ReadOptions, StrataSourceError, parse_options

__all__ = ["SCHEMA", "StrataDataSource"]

log = logging.getLogger("strata.spark")
#: the key of a stream offset that holds each topic's id
_IDS = "@topic_ids"

SCHEMA = (
    "key binary, value binary, topic string, partition int, offset long, "
    "timestamp timestamp, timestampType int"
)
HEADERS = ", headers array<struct<key: string, value: binary>>"


class StrataDataSource(DataSource):
    """Kafka-compatible reads of Strata topics, history straight from the bucket."""

    @classmethod
    def name(cls) -> str:
        # With the Strata jar loaded, "strata" is the JVM source (io.strata.spark.StrataProvider),
        # which plans through this class under another name and reads segments in the JVM.
        # Spark's planning worker checks this name too: the driver tells its Python workers
        # through the environment Spark gives them.
        if os.environ.get(_JVM_ENV) == "1" or _jvm_source_loaded():
            from spark.jar import PYTHON_NAME

            return PYTHON_NAME
        return "strata"

    def schema(self) -> str:
        include = str(self.options.get("includeHeaders", self.options.get("includeheaders", "false")))
        return SCHEMA + (HEADERS if include.lower() == "true" else "")

    def reader(self, schema: StructType) -> DataSourceReader:
        return StrataBatchReader(parse_options(self.options, streaming=False))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return StrataStreamReader(parse_options(self.options, streaming=True))


#: set in the Python workers' environment when the driver has the JVM source
_JVM_ENV = "STRATA_SPARK_JVM_SOURCE"


def _jvm_source_loaded() -> bool:
    """Whether the active session's driver can load the JVM source (the jar is on its classpath)."""
    try:
        from pyspark.sql import SparkSession

        from spark.jar import PROVIDER_CLASS

        session = SparkSession.getActiveSession()
        jvm = session.sparkContext._jvm if session is not None else None
        if jvm is None:
            return False
        loaded = bool(jvm.org.apache.spark.util.Utils.classIsLoadable(PROVIDER_CLASS))
        if loaded and session is not None:
            session.sparkContext.environment[_JVM_ENV] = "1"
    except Exception:  # noqa: BLE001 - Spark Connect, no JVM, a py4j error: the Python source is "strata"
        return False
    return loaded


def _catalog(opts: ReadOptions) -> Catalog:
    broker = None
    if opts.bootstrap_servers:
        from spark.broker import BrokerClient

        broker = BrokerClient(opts.kafka)
    return Catalog(opts, open_bucket(opts.object_store, opts.s3), broker)


def _close(catalog: Catalog) -> None:
    if catalog.broker is not None:
        catalog.broker.close()


def read_partition(opts: ReadOptions, partition: InputPartition) -> Iterator[pa.RecordBatch]:
    """Executor side of both readers: one slice as Arrow record batches."""
    from spark.segments import AbortedRanges, Columns, read_segment, seek_position

    if isinstance(partition, SegmentSlice):
        seg = partition.seg
        bucket = open_bucket(opts.object_store, opts.s3)
        start = partition.start_pos
        if start is None:
            start = seek_position(bucket, seg, partition.lo)
        columns = Columns(seg.topic, seg.partition, opts.include_headers)
        yield from read_segment(bucket, seg, partition.lo, partition.hi, start_pos=start,
                                end_pos=partition.end_pos, columns=columns, chunk_bytes=opts.chunk_bytes,
                                aborted=AbortedRanges(partition.aborted) if partition.aborted else None)
    elif isinstance(partition, BrokerSlice):
        from spark.broker import read_broker

        columns = Columns(partition.topic, partition.partition, opts.include_headers)
        yield from read_broker(opts.kafka, partition.topic, partition.partition, partition.lo,
                               partition.hi, columns)
    else:
        raise StrataSourceError(f"not a strata input partition: {partition!r}")


class StrataBatchReader(DataSourceReader):
    def __init__(self, opts: ReadOptions) -> None:
        self.opts = opts

    def partitions(self) -> list[InputPartition]:
        catalog = _catalog(self.opts)
        try:
            views = catalog.views()
            starts = {(v.topic, v.partition): catalog.resolve(v, self.opts.starting, side="start") for v in views}
            ends = {(v.topic, v.partition): catalog.resolve(v, self.opts.ending, side="end") for v in views}
            # Spark: an end timestamp or offset before the start reads nothing, it is not an error
            ends = {tp: max(ends[tp], starts[tp]) if _is_time(self.opts, "ending") else ends[tp]
                    for tp in ends}
            parts = plan(catalog, views, starts, ends)
        finally:
            _close(catalog)
        return parts or [BrokerSlice("", 0, 0, 0)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if isinstance(partition, BrokerSlice) and partition.hi <= partition.lo:
            return iter(())
        return read_partition(self.opts, partition)


def _is_time(opts: ReadOptions, side: str) -> bool:
    bounds = opts.ending if side == "ending" else opts.starting
    return bounds.global_timestamp is not None or bool(bounds.per_partition_timestamp)


def _to_json(offsets: dict[tuple[str, int], int], ids: dict[str, str] | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for (topic, partition), offset in sorted(offsets.items()):
        out.setdefault(topic, {})[str(partition)] = offset
    named = {topic: ids[topic] for topic in sorted(out) if ids and ids.get(topic)}
    if named:
        out[_IDS] = named
    return out


def _from_json(obj: dict[str, Any]) -> dict[tuple[str, int], int]:
    if isinstance(obj, str):
        obj = json.loads(obj)
    return {(topic, int(p)): int(o) for topic, parts in obj.items() if topic != _IDS for p, o in parts.items()}


def _ids_of(obj: dict[str, Any] | str | None) -> dict[str, str]:
    """The topic ids a stream offset names (none in offsets written before they were kept)."""
    if isinstance(obj, str):
        obj = json.loads(obj)
    return dict(obj.get(_IDS) or {}) if obj else {}


def _created_again(before: dict[str, str], now: dict[str, str]) -> set[str]:
    return {topic for topic, tid in before.items() if now.get(topic, tid) != tid}


def _lost(opts: ReadOptions, topics: set[str], what: str, instead: str) -> None:
    """Topics deleted and created again: fail the stream, as Spark's Kafka source does on data
    loss, or with failOnDataLoss=false warn and do ``instead``."""
    message = f"topic(s) {', '.join(sorted(topics))} deleted and created again {what}"
    if opts.fail_on_data_loss:
        raise StrataSourceError(f"{message} (set failOnDataLoss=false to {instead})")
    log.warning("%s; going on to %s (failOnDataLoss=false)", message, instead)


class StrataStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Micro-batches over offsets per partition; ``maxOffsetsPerTrigger`` caps each."""

    def __init__(self, opts: ReadOptions) -> None:
        self.opts = opts
        self._cap: dict[tuple[str, int], int] | None = None  # Trigger.AvailableNow's end
        self._cap_ids: dict[str, str] = {}  # the incarnation of each topic the end was taken of

    def initialOffset(self) -> dict[str, dict[str, int]]:
        catalog = _catalog(self.opts)
        try:
            views = catalog.views()
            return _to_json({(v.topic, v.partition): catalog.resolve(v, self.opts.starting, side="start")
                             for v in views}, {v.topic: v.topic_id for v in views})
        finally:
            _close(catalog)

    def latestOffset(self, start: dict[str, Any] | None = None, limit: Any = None) -> dict[str, dict[str, int]]:
        catalog = _catalog(self.opts)
        try:
            views = catalog.views()
        finally:
            _close(catalog)
        begin = _from_json(start) if start else {}
        known, ids = _ids_of(start), {v.topic: v.topic_id for v in views}
        again = _created_again(known, ids)
        if again:
            _lost(self.opts, again, "since the last micro-batch: records of the old topic not read by then are gone",
                  "read the new topic from its start")
            begin = {tp: o for tp, o in begin.items() if tp[0] not in again}
        latest = {(v.topic, v.partition): v.latest for v in views}
        for tp, offset in begin.items():
            latest.setdefault(tp, offset)  # a partition gone from the metadata stays where it was
        earliest = {(v.topic, v.partition): v.log_start for v in views}
        first = {tp: begin.get(tp, earliest.get(tp, 0)) for tp in latest}
        if self._cap is not None:
            latest = self._capped(latest, first, ids)
        # Spark passes the limit of getDefaultReadLimit (ReadMaxRows for maxOffsetsPerTrigger),
        # or ReadAllAvailable when it wants everything (an AvailableNow target)
        rows = self.opts.max_offsets_per_trigger if limit is None else getattr(limit, "max_rows", None)
        if rows:
            latest = _rate_limit(first, latest, rows)
        return _to_json({tp: max(latest[tp], first[tp]) for tp in latest}, {**known, **ids})

    def _capped(self, latest: dict[tuple[str, int], int], first: dict[tuple[str, int], int],
                ids: dict[str, str]) -> dict[tuple[str, int], int]:
        """Trigger.AvailableNow reads what was there when the run started: a partition, or an
        incarnation of a topic, that appeared since is read no further than where it starts."""
        cap, cap_ids = self._cap or {}, self._cap_ids

        def bound(tp: tuple[str, int]) -> int:
            same = tp in cap and cap_ids.get(tp[0]) == ids.get(tp[0], cap_ids.get(tp[0]))
            return cap[tp] if same else first[tp]

        return {tp: min(o, bound(tp)) for tp, o in latest.items()}

    def getDefaultReadLimit(self) -> Any:
        from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows

        if self.opts.max_offsets_per_trigger:
            return ReadMaxRows(self.opts.max_offsets_per_trigger)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        catalog = _catalog(self.opts)
        try:
            views = catalog.views()
            self._cap = {(v.topic, v.partition): v.latest for v in views}
            self._cap_ids = {v.topic: v.topic_id for v in views}
        finally:
            _close(catalog)

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> list[InputPartition]:
        begin, finish = _from_json(start), _from_json(end)
        again = _created_again(_ids_of(start), _ids_of(end))  # these start at the new topic's log start
        begin = {tp: o for tp, o in begin.items() if tp[0] not in again}
        if all(begin.get(tp, 0) >= o for tp, o in finish.items()):
            return []
        ids = _ids_of(end)
        catalog = _catalog(self.opts)
        try:
            views = [v for v in catalog.views() if (v.topic, v.partition) in finish]
            # a batch planned before a restart, its topic created again since: not the same records
            gone = {v.topic for v in views if ids.get(v.topic, v.topic_id) != v.topic_id}
            if gone:
                _lost(self.opts, gone, "since this micro-batch was planned: its records of the old topic are gone",
                      "skip them")
                views = [v for v in views if v.topic not in gone]
            starts = {(v.topic, v.partition): begin.get((v.topic, v.partition), v.log_start) for v in views}
            return plan(catalog, [v for v in views if starts[(v.topic, v.partition)] < finish[(v.topic, v.partition)]],
                        starts, finish)
        finally:
            _close(catalog)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return read_partition(self.opts, partition)

    def commit(self, end: dict[str, Any]) -> None:
        pass  # nothing to release: offsets live in Spark's checkpoint


def _rate_limit(first: dict[tuple[str, int], int], latest: dict[tuple[str, int], int],
                rows: int) -> dict[tuple[str, int], int]:
    """Spreads ``rows`` over the partitions in proportion to their lag, as Spark's Kafka source does."""
    lags = {tp: max(0, latest[tp] - first[tp]) for tp in latest}
    total = sum(lags.values())
    if total <= rows:
        return latest
    out = {}
    for tp, lag in lags.items():
        share = int(rows * lag / total)
        out[tp] = first[tp] + min(lag, max(share, 1 if lag else 0))
    return out

