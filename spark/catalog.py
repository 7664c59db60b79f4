"""Planning on the driver: topics, partition manifests, offset ranges, splits.

Planning reads the cluster metadata (topic names to ids and partition counts;
:mod:`spark.metadata`) and one ``manifest.json`` per partition, parsed here from the documented
layout (``docs/object-layout.md``; this reader shares no code with the broker's
writer). Segment objects are opened at planning only to turn a timestamp into an
offset (the one segment that holds it) or to split a large segment at its offset
index for ``minPartitions``.

With ``kafka.bootstrap.servers`` the broker is asked for each partition's high
watermark, fixed at planning, and the offsets the bucket does not hold yet are
read from it (:class:`BrokerSlice`), so a batch read holds every record from its
start to that watermark exactly once.

With ``kafka.isolation.level=read_committed`` (:mod:`spark.txns`) the broker
answers with its last stable offset instead, the bucket serves only the offsets
below its own stable end (a transaction still open at the end of the last listed
segment ends on the broker), and each segment slice carries the aborted
transactions that overlap it, read from the segments' ``.txnindex`` objects.
"""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from pyspark.sql.datasource import InputPartition

from spark.bucket import Bucket, MissingObject
from spark.metadata import read_topics
from spark.options import EARLIEST, LATEST, Bounds, ReadOptions, StrataSourceError
from spark.segments import AbortedTxn, SegmentRef, offset_for_timestamp
from spark.txns import BucketTxns, overlapping

__all__ = ["BrokerSlice", "Catalog", "PartitionView", "SegmentSlice"]

log = logging.getLogger("strata.spark")

# manifest formats this reader knows: 2 adds .txnindex/.snapshot objects (docs/object-layout.md),
# which only read_committed reads fetch (control batches are skipped in either format);
# 3: compacted partitions (offset gaps, empty batches; ADR 0019)
FORMAT_VERSIONS = (1, 2, 3)


class SegmentSlice(InputPartition):
    """Records ``[lo, hi)`` found in bytes ``[start_pos, end_pos)`` of one segment object.

    ``start_pos`` of ``None``: seek with the segment's offset index on the executor.
    ``aborted`` (read_committed): the aborted transactions whose records the
    executor drops, ``(producer id, first offset, last offset)``.
    """

    def __init__(self, seg: SegmentRef, lo: int, hi: int, start_pos: int | None, end_pos: int,
                 jvm: Mapping[str, Any] | None = None, aborted: tuple[AbortedTxn, ...] = ()) -> None:
        super().__init__(None)
        self.seg, self.lo, self.hi, self.start_pos, self.end_pos = seg, lo, hi, start_pos, end_pos
        #: for the JVM reader (``spark/jvm``): where to read the .log and .index, and the GET size
        self.jvm = jvm
        self.aborted = aborted

    def part(self, lo: int, hi: int, start_pos: int | None) -> SegmentSlice:
        """The records ``[lo, hi)`` of this slice, starting at ``start_pos`` (None: seek)."""
        return SegmentSlice(self.seg, lo, hi, start_pos, self.end_pos, self.jvm,
                            overlapping(self.aborted, lo, hi))

    def __reduce__(self) -> tuple[Any, tuple[str]]:
        # pickled as a call with one JSON string, so the JVM source can read the plan too
        # (``StrataBatch`` registers a constructor for spark.catalog._segment_slice)
        seg = self.seg
        return _segment_slice, (json.dumps({
            "topic": seg.topic, "partition": seg.partition, "key": seg.key, "base": seg.base_offset,
            "last": seg.last_offset, "size": seg.size, "lo": self.lo, "hi": self.hi,
            "start": self.start_pos, "end": self.end_pos, "jvm": self.jvm,
            "aborted": [list(t) for t in self.aborted],
        }),)

    def __repr__(self) -> str:
        return (f"SegmentSlice({self.seg.topic}-{self.seg.partition} [{self.lo}, {self.hi}) of "
                f"{self.seg.key} bytes [{self.start_pos}, {self.end_pos}))")


def _segment_slice(doc: str) -> SegmentSlice:
    d = json.loads(doc)
    seg = SegmentRef(d["topic"], d["partition"], d["key"], d["base"], d["last"], d["size"])
    aborted = tuple((int(pid), int(first), int(last)) for pid, first, last in d.get("aborted") or ())
    return SegmentSlice(seg, d["lo"], d["hi"], d["start"], d["end"], d["jvm"], aborted)


class BrokerSlice(InputPartition):
    """Records ``[lo, hi)`` of a partition read from the broker (not in the bucket yet)."""

    def __init__(self, topic: str, partition: int, lo: int, hi: int) -> None:
        super().__init__(None)
        self.topic, self.partition, self.lo, self.hi = topic, partition, lo, hi

    def __repr__(self) -> str:
        return f"BrokerSlice({self.topic}-{self.partition} [{self.lo}, {self.hi}))"


@dataclass(frozen=True)
class PartitionView:
    """What planning knows of one partition: its segments in the bucket and its offsets."""

    topic: str
    partition: int
    log_start: int  # earliest offset still in the log
    #: one past the last offset read from the bucket (= log_start when none); read_committed:
    #: the bucket's stable end (no transaction open at the end of its segments starts below it)
    remote_end: int
    latest: int  # one past the last offset readable: the high watermark, or remote_end
    segments: tuple[SegmentRef, ...]
    min_timestamps: tuple[int, ...]
    max_timestamps: tuple[int, ...]
    topic_id: str = ""  # the incarnation of the topic (a stream notices one created again)


class Catalog:
    """Topics and partitions of one read, from the bucket (and the broker when given)."""

    def __init__(self, opts: ReadOptions, bucket: Bucket, broker: Any | None = None) -> None:
        self.opts = opts
        self.bucket = bucket
        self.broker = broker
        self.txns = BucketTxns(bucket, opts.chunk_bytes)

    # -- topics -------------------------------------------------------------------

    def topics(self) -> dict[str, tuple[str, int]]:
        """name → (topic id, partition count) of every topic in the cluster metadata."""
        return read_topics(self.bucket)

    def partitions(self) -> list[tuple[str, str, int]]:
        """(topic, topic id, partition) of every partition the options subscribe to."""
        topics = self.topics()
        opts = self.opts
        out: list[tuple[str, str, int]] = []
        if opts.assign:
            for topic, parts in sorted(opts.assign.items()):
                tid, count = self._topic(topics, topic)
                for p in parts:
                    if p >= count:
                        raise StrataSourceError(f"assign: topic {topic!r} has {count} partitions, no {p}")
                    out.append((topic, tid, p))
        elif opts.subscribe:
            for topic in opts.subscribe:
                tid, count = self._topic(topics, topic)
                out += [(topic, tid, p) for p in range(count)]
        else:
            for topic in sorted(topics):
                if opts.matches(topic):
                    tid, count = topics[topic]
                    out += [(topic, tid, p) for p in range(count)]
        return out

    def _topic(self, topics: Mapping[str, tuple[str, int]], topic: str) -> tuple[str, int]:
        if topic not in topics:
            known = ", ".join(sorted(topics)[:20]) or "none"
            raise StrataSourceError(
                f"topic {topic!r} does not exist in {self.opts.object_store} (topics: {known})"
            )
        return topics[topic]

    # -- partitions ---------------------------------------------------------------

    def views(self) -> list[PartitionView]:
        parts = self.partitions()
        marks = self.broker.watermarks([(t, p) for t, _, p in parts]) if self.broker else {}
        return [self._view(topic, tid, p, marks.get((topic, p))) for topic, tid, p in parts]

    def _view(self, topic: str, tid: str, partition: int, marks: tuple[int, int] | None) -> PartitionView:
        key_dir = f"topics/{uuid.UUID(tid)}/{partition}/"
        try:
            raw = self.bucket.get(key_dir + "manifest.json")
        except MissingObject:
            raw = None
        segments: list[SegmentRef] = []
        mins: list[int] = []
        maxs: list[int] = []
        listed: list[SegmentRef] = []
        log_start = version = 0
        if raw is not None:
            doc = _manifest(raw, key_dir)
            log_start, version = int(doc["log_start_offset"]), int(doc["format_version"])
            for s in doc["segments"]:
                base, last = int(s["base_offset"]), int(s["last_offset"])
                key = f"{key_dir}{base:020d}-{s['upload_id']}.log"
                seg = SegmentRef(topic, partition, key, base, last, int(s["size_bytes"]),
                                 int(s.get("txn_index_bytes") or 0), int(s.get("producer_snapshot_bytes") or 0))
                listed.append(seg)
                if last < log_start:
                    continue
                segments.append(seg)
                mins.append(int(s["min_timestamp"]))
                maxs.append(int(s["max_timestamp"]))
        remote_end = segments[-1].last_offset + 1 if segments else log_start
        # format 1 predates transactions: nothing in such a bucket is aborted or left open
        if self.opts.read_committed and segments and version >= 2:
            remote_end = max(log_start, self.txns.stable_end(listed))
        if marks is not None:
            low, high = marks
            if raw is None:
                log_start = remote_end = low
            latest = max(high, remote_end)
        else:
            latest = remote_end
        return PartitionView(topic, partition, log_start, remote_end, latest,
                             tuple(segments), tuple(mins), tuple(maxs), str(uuid.UUID(tid)))

    # -- offsets ------------------------------------------------------------------

    def resolve(self, view: PartitionView, bounds: Bounds, *, side: str) -> int:
        """The offset ``bounds`` names for ``view`` (for an end: exclusive)."""
        tp = (view.topic, view.partition)
        if bounds.global_timestamp is not None or tp in bounds.per_partition_timestamp:
            ts = bounds.global_timestamp if bounds.global_timestamp is not None \
                else bounds.per_partition_timestamp[tp]
            found = self.offset_for_timestamp(view, ts)
            if found is not None:
                return found
            if side == "start" and self.opts.starting_timestamp_strategy == "error":
                raise StrataSourceError(
                    f"no record of {view.topic}-{view.partition} has a timestamp at or after {ts} "
                    "(set startingOffsetsByTimestampStrategy=latest to start at the end instead)"
                )
            return view.latest
        value = bounds.per_partition.get(tp, bounds.default)
        if value == EARLIEST:
            return view.log_start
        if value == LATEST:
            return view.latest
        return value

    def offset_for_timestamp(self, view: PartitionView, timestamp: int) -> int | None:
        """First offset with a timestamp ≥ ``timestamp``: from the bucket, else from the broker."""
        for seg, max_ts in zip(view.segments, view.max_timestamps):
            if seg.base_offset >= view.remote_end:
                break  # read_committed: past the bucket's stable end
            if max_ts >= timestamp:
                found = offset_for_timestamp(self.bucket, seg, timestamp, self.opts.chunk_bytes)
                if found is not None and found >= view.log_start:
                    if found < view.remote_end:
                        return found
                    break
        if self.broker is not None and view.latest > view.remote_end:
            found = self.broker.offset_for_timestamp(view.topic, view.partition, timestamp)
            if found is not None and found >= view.remote_end:
                return found
        return None

    def check_range(self, view: PartitionView, lo: int, hi: int) -> int:
        """``lo`` after checking ``[lo, hi)`` against the retained log (failOnDataLoss)."""
        name = f"{view.topic}-{view.partition}"
        if hi > view.latest:
            held = ("with read_committed, the bucket's stable offsets end at" if self.opts.read_committed
                    else "the bucket holds offsets up to")
            raise StrataSourceError(
                f"{name}: end offset {hi} is past the end of the log ({view.latest})"
                + ("" if self.broker else f"; {held} {view.remote_end}: set kafka.bootstrap.servers "
                   "to read newer ones from the broker")
            )
        if lo > hi:
            raise StrataSourceError(f"{name}: start offset {lo} is after end offset {hi}")
        if lo < view.log_start:
            message = (f"{name}: offsets {lo} to {view.log_start - 1} are no longer in the log "
                       f"(log start {view.log_start}); some data may have been lost")
            if self.opts.fail_on_data_loss:
                raise StrataSourceError(message + " (set failOnDataLoss=false to skip them)")
            log.warning("%s; skipped (failOnDataLoss=false)", message)
            lo = min(view.log_start, hi)
        return lo

    # -- splits -------------------------------------------------------------------

    def slices(self, view: PartitionView, lo: int, hi: int) -> list[InputPartition]:
        """Input partitions reading ``[lo, hi)`` of ``view``: segment slices, then the broker's part."""
        out: list[InputPartition] = []
        expected = lo
        bucket_hi = min(hi, view.remote_end)
        aborted: list[AbortedTxn] = []
        if self.opts.read_committed and bucket_hi > lo:
            aborted = self.txns.aborted(view.segments, lo, bucket_hi)
        for seg in view.segments:
            if seg.last_offset < lo:
                continue
            if seg.base_offset >= bucket_hi:
                break
            if seg.base_offset > expected:
                message = (f"{seg.topic}-{seg.partition}: offsets {expected} to {seg.base_offset - 1} "
                           "are missing from the bucket's manifest (a gap); some data may have been lost")
                if self.opts.fail_on_data_loss:
                    raise StrataSourceError(message + " (set failOnDataLoss=false to skip them)")
                log.warning("%s; skipped (failOnDataLoss=false)", message)
            start, end = max(lo, seg.base_offset), min(bucket_hi, seg.last_offset + 1)
            out.append(SegmentSlice(seg, start, end, 0 if start == seg.base_offset else None, seg.size,
                                    aborted=overlapping(aborted, start, end)))
            expected = seg.last_offset + 1
        tail_lo = max(lo, view.remote_end)
        if hi > tail_lo:
            if self.broker is None:
                raise StrataSourceError(
                    f"{view.topic}-{view.partition}: offsets {tail_lo} to {hi - 1} are not in the bucket "
                    "yet; set kafka.bootstrap.servers to read them from the broker"
                )
            out.append(BrokerSlice(view.topic, view.partition, tail_lo, hi))
        return out

    def split(self, slices: list[InputPartition], min_partitions: int | None) -> list[InputPartition]:
        """Splits the segment slices with the most offsets in halves until there are enough.

        A half that starts inside a segment is located on the executor through the
        segment's offset index (one small GET) and stops reading at its end offset,
        so no byte range is read twice beyond the index's granularity.
        """
        if not min_partitions or len(slices) >= min_partitions:
            return slices
        out = list(slices)
        while len(out) < min_partitions:
            sizes = [(s.hi - s.lo, i) for i, s in enumerate(out) if isinstance(s, SegmentSlice)]
            if not sizes:
                break
            span, i = max(sizes)
            if span < 2:
                break
            s = out[i]
            assert isinstance(s, SegmentSlice)
            middle = s.lo + span // 2
            out[i:i + 1] = [s.part(s.lo, middle, s.start_pos), s.part(middle, s.hi, None)]
        return out


def _manifest(raw: bytes, where: str) -> dict[str, Any]:
    try:
        doc = json.loads(raw)
    except ValueError as exc:
        raise StrataSourceError(f"{where}manifest.json is not JSON: {exc}") from exc
    version = doc.get("format_version") if isinstance(doc, dict) else None
    if version not in FORMAT_VERSIONS:
        raise StrataSourceError(
            f"{where}manifest.json has format_version {version!r}; this reader knows "
            f"{FORMAT_VERSIONS}: upgrade the strata package on the Spark cluster"
        )
    return doc


def plan(catalog: Catalog, views: Iterable[PartitionView], starts: Mapping[tuple[str, int], int],
         ends: Mapping[tuple[str, int], int]) -> list[InputPartition]:
    """Input partitions for the ranges ``[starts[tp], ends[tp])``, split for minPartitions."""
    out: list[InputPartition] = []
    for view in views:
        tp = (view.topic, view.partition)
        if tp not in starts or tp not in ends:
            continue
        hi = ends[tp]
        lo = catalog.check_range(view, starts[tp], hi)
        out += catalog.slices(view, lo, hi)
    out = catalog.split(out, catalog.opts.min_partitions)
    if catalog.opts.jvm:
        for s in out:
            if isinstance(s, SegmentSlice):
                # the offset index only for a slice that starts inside its segment unplaced
                # (a URL is signed for each: a millisecond of the planner's time)
                index = catalog.bucket.locate(s.seg.sibling("index")) if s.start_pos is None else ""
                s.jvm = {"log": catalog.bucket.locate(s.seg.key), "index": index,
                         "chunk": catalog.opts.chunk_option or 0}
    return out
