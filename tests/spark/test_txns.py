"""read_committed planning and reading without Spark: transaction indexes, snapshots, slices.

A bucket directory is written by hand in the documented layout (format 2): segments of
plain, committed and aborted transactional batches with their COMMIT/ABORT markers, each
segment's ``.txnindex`` and ``.snapshot``. The planner and the executor-side reader of
``spark/`` then read it as a Spark read would (Spark itself: test_spark_source.py).
"""

from __future__ import annotations

import json
import struct
import uuid
from collections import deque
from pathlib import Path

import pytest

from common.record.batch import Compression, build_batch
from common.record.control import build_marker_batch
from local_tier.producer_snapshot import encode_snapshot
from local_tier.producer_state import ProducerStateEntry
from local_tier.txn_index import AbortedTxn
from spark import txns as txns_module
from spark.bucket import open_bucket
from spark.catalog import Catalog, SegmentSlice, plan
from spark.options import StrataSourceError, parse_options
from spark.segments import AbortedRanges, Columns, SegmentRef, read_segment
from spark.source import read_partition
from spark.txns import BucketTxns, parse_open_transactions, parse_txn_index

TOPIC = "t"
TOPIC_ID = str(uuid.UUID(int=7))
A, B, C, PLAIN = 1000, 2000, 3000, 4000  # producer ids


def _at(batch: bytes, base: int) -> bytes:
    """``batch`` with base offset ``base`` (outside the CRC)."""
    return struct.pack(">q", base) + batch[8:]


class Log:
    """A partition's log built batch by batch, with what a reader of each isolation level sees."""

    def __init__(self) -> None:
        self.batches: list[bytes] = []
        self.next = 0
        self.data: list[int] = []  # offsets of every data record
        self.committed: list[int] = []  # offsets a read_committed reader returns
        self.pending: dict[int, list[int]] = {}  # open transactions' offsets
        self.first: dict[int, int] = {}  # open transactions' first offsets
        self.aborted: list[tuple[int, int, int, int]] = []  # (pid, first, last, lso)

    def send(self, pid: int, n: int, *, txn: bool, codec: Compression = Compression.NONE) -> None:
        records = [(b"k%d" % (self.next + i), b"v%d" % (self.next + i), [], 1_000 + self.next + i)
                   for i in range(n)]
        self.batches.append(build_batch(records, base_offset=self.next, producer_id=pid, producer_epoch=0,
                                        base_sequence=0, is_transactional=txn, compression=codec))
        offsets = list(range(self.next, self.next + n))
        self.data += offsets
        if txn:
            self.first.setdefault(pid, self.next)
            self.pending.setdefault(pid, []).extend(offsets)
        else:
            self.committed += offsets
        self.next += n

    def end(self, pid: int, *, commit: bool) -> None:
        marker = self.next
        self.batches.append(_at(build_marker_batch(producer_id=pid, producer_epoch=0, coordinator_epoch=0,
                                                   committed=commit, timestamp_ms=1_000 + marker), marker))
        self.next += 1
        offsets, first = self.pending.pop(pid), self.first.pop(pid)
        if commit:
            self.committed = sorted(self.committed + offsets)
        else:
            lso = min([self.next, *self.first.values()])
            self.aborted.append((pid, first, marker, lso))

    def open_transactions(self) -> dict[int, int]:
        return dict(self.first)


def _write_bucket(root: Path, log: Log, cuts: list[int], *, snapshots: bool = True,
                  format_version: int = 2) -> list[dict]:
    """Segments of ``log`` cut before the batch indexes in ``cuts``, with their objects and manifest."""
    (root / "cluster").mkdir(parents=True)
    (root / "cluster" / "metadata.json").write_text(json.dumps(
        {"version": 1, "cluster_id": "c", "topics": [{"name": TOPIC, "topic_id": TOPIC_ID, "partitions": 1,
                                                      "configs": {}, "created_ms": 0}]}))
    part = root / "topics" / TOPIC_ID / "0"
    part.mkdir(parents=True)
    bounds = [0, *cuts, len(log.batches)]
    entries = []
    for i in range(len(bounds) - 1):
        batches = log.batches[bounds[i]:bounds[i + 1]]
        base = struct.unpack_from(">q", batches[0])[0]
        last_batch = batches[-1]
        last = struct.unpack_from(">q", last_batch)[0] + struct.unpack_from(">i", last_batch, 23)[0]
        upload = uuid.uuid4().hex
        stem = part / f"{base:020d}-{upload}"
        Path(f"{stem}.log").write_bytes(b"".join(batches))
        Path(f"{stem}.index").write_bytes(b"")
        Path(f"{stem}.timeindex").write_bytes(b"")
        index = b"".join(AbortedTxn(*t).encode() for t in log.aborted if base <= t[2] <= last)
        if index and format_version >= 2:
            Path(f"{stem}.txnindex").write_bytes(index)
        snapshot = b""
        if snapshots and format_version >= 2:
            open_at_end = _open_after(log, last)
            snapshot = encode_snapshot([ProducerStateEntry(pid, 0, 0, 0, first, deque())
                                        for pid, first in sorted(open_at_end.items())])
            Path(f"{stem}.snapshot").write_bytes(snapshot)
        entry = {"base_offset": base, "last_offset": last, "size_bytes": len(b"".join(batches)),
                 "min_timestamp": 0, "max_timestamp": 10**13, "leader_epoch": 0, "record_count": 0,
                 "upload_id": upload, "epochs": [[0, base]]}
        if format_version >= 2:
            entry |= {"txn_index_bytes": len(index), "producer_snapshot_bytes": len(snapshot)}
        entries.append(entry)
    (part / "manifest.json").write_text(json.dumps(
        {"format_version": format_version, "topic": TOPIC, "topic_id": TOPIC_ID, "partition": 0,
         "leader_epoch": 0, "log_start_offset": 0, "revision": 1, "segments": entries}))
    return entries


def _open_after(log: Log, last: int) -> dict[int, int]:
    """Producer id → first offset of the transactions open after offset ``last``."""
    out: dict[int, int] = {}
    for batch in log.batches:
        base = struct.unpack_from(">q", batch)[0]
        if base > last:
            break
        attributes = struct.unpack_from(">h", batch, 21)[0]
        pid = struct.unpack_from(">q", batch, 43)[0]
        if attributes & 0x20:
            out.pop(pid, None)
        elif attributes & 0x10:
            out.setdefault(pid, base)
    return out


def _history(open_at_end: bool = False) -> Log:
    """Committed (A) and aborted (B) transactions interleaved with plain records across segments."""
    log = Log()
    for round_ in range(3):
        for i in range(3):
            log.send(A, 3, txn=True, codec=list(Compression)[(round_ + i) % len(Compression)])
            log.send(B, 2, txn=True, codec=Compression.LZ4)
            log.send(PLAIN, 2, txn=False)
        log.end(B, commit=False)
        log.end(A, commit=True)
    if open_at_end:
        log.send(C, 4, txn=True)  # its marker is still only on the broker
        log.send(PLAIN, 3, txn=False)
        log.send(B, 2, txn=True)
        log.end(B, commit=False)
    return log


def _offsets(opts_extra: dict, root: Path) -> tuple[list[int], list, Catalog]:
    opts = parse_options({"object.store": root.as_uri(), "subscribe": TOPIC, **opts_extra}, streaming=False)
    catalog = Catalog(opts, open_bucket(root.as_uri()))
    views = catalog.views()
    parts = plan(catalog, views, {(TOPIC, 0): 0}, {(TOPIC, 0): views[0].latest})
    got = []
    for part in parts:
        for batch in read_partition(opts, part):
            got += batch.column("offset").to_pylist()
    return got, parts, catalog


@pytest.fixture(autouse=True)
def _fresh_cache() -> None:
    txns_module._CACHE.clear()


# -- the executor side ----------------------------------------------------------------


@pytest.mark.parametrize("headers", [False, True], ids=["c-decoder", "aiokafka-reader"])
def test_aborted_batches_and_markers_are_skipped_by_both_decoders(tmp_path: Path, headers: bool) -> None:
    log = _history()
    key = "topics/x/0/" + "0" * 20 + "-" + "a" * 32 + ".log"
    path = tmp_path / key
    path.parent.mkdir(parents=True)
    path.write_bytes(b"".join(log.batches))
    seg = SegmentRef(TOPIC, 0, key, 0, log.next - 1, path.stat().st_size)
    bucket = open_bucket(tmp_path.as_uri())
    aborted = AbortedRanges([(pid, first, last) for pid, first, last, _ in log.aborted])

    def read(lo: int, hi: int, ranges: AbortedRanges | None) -> list[int]:
        cols = Columns(TOPIC, 0, include_headers=headers)
        return [o for b in read_segment(bucket, seg, lo, hi, start_pos=0, end_pos=seg.size, columns=cols,
                                        chunk_bytes=500, aborted=ranges) for o in b.column("offset").to_pylist()]

    assert read(0, log.next, aborted) == log.committed
    assert read(0, log.next, None) == log.data  # read_uncommitted: every data record, no marker
    assert read(7, 40, aborted) == [o for o in log.committed if 7 <= o < 40]
    # another producer's batches at the same offsets are kept: the producer id decides
    assert read(0, log.next, AbortedRanges([(A + 1, first, last) for _, first, last, _ in log.aborted])) \
        == log.data


def test_aborted_ranges_look_up_by_producer_and_offset() -> None:
    ranges = AbortedRanges([(1, 10, 20), (1, 30, 35), (2, 0, 100)])
    assert [o for o in range(40) if ranges.holds(1, o)] == list(range(10, 21)) + list(range(30, 36))
    assert ranges.holds(2, 50) and not ranges.holds(3, 50) and not ranges.holds(1, 25)
    assert not AbortedRanges([])


# -- the objects ---------------------------------------------------------------------


def test_the_transaction_index_and_snapshot_parsers_read_the_documented_formats() -> None:
    raw = AbortedTxn(7, 10, 20, 21).encode() + AbortedTxn(8, 15, 30, 31).encode()
    assert parse_txn_index(raw, "k") == [(7, 10, 20, 21), (8, 15, 30, 31)]
    with pytest.raises(StrataSourceError, match="not a whole number of 34-byte entries"):
        parse_txn_index(raw[:-1], "k")
    with pytest.raises(StrataSourceError, match="not a transaction index entry"):
        parse_txn_index(b"\x00\x01" + raw[2:34], "k")
    snapshot = encode_snapshot([ProducerStateEntry(5, 0, 0, 0, None, deque()),
                                ProducerStateEntry(6, 1, 0, 0, 42, deque())])
    assert parse_open_transactions(snapshot) == {6: 42}
    assert parse_open_transactions(encode_snapshot([])) == {}
    damaged = bytearray(snapshot)
    damaged[-1] ^= 1
    for bad in (bytes(damaged), snapshot[:-3], snapshot[:5], b"\x00\x01" + snapshot[2:]):
        assert parse_open_transactions(bad) is None  # unreadable: the planner replays the segment


# -- planning ------------------------------------------------------------------------


def test_read_committed_plan_carries_aborted_ranges_and_returns_exactly_the_committed_records(
    tmp_path: Path,
) -> None:
    log = _history()
    entries = _write_bucket(tmp_path, log, cuts=[4, 9, 15, 21])
    assert sum(1 for e in entries if e["txn_index_bytes"]) >= 2  # aborts in several segments
    got, parts, _ = _offsets({"kafka.isolation.level": "READ_COMMITTED", "minPartitions": "9"}, tmp_path)
    assert got == log.committed
    assert all(isinstance(p, SegmentSlice) for p in parts) and len(parts) >= 9
    aborted = {(pid, first, last) for pid, first, last, _ in log.aborted}
    assert any(p.aborted for p in parts)
    assert all(set(p.aborted) <= aborted for p in parts)
    # each slice carries only the transactions that overlap it, and survives pickling (the JVM's JSON)
    for p in parts:
        assert all(last >= p.lo and first < p.hi for _, first, last in p.aborted)
        fn, args = p.__reduce__()
        assert fn(*args).aborted == p.aborted
    got, _, _ = _offsets({}, tmp_path)
    assert got == log.data  # the default, read_uncommitted: aborted data too, no marker


def test_without_aborted_transactions_read_committed_gets_no_index_and_one_snapshot(tmp_path: Path) -> None:
    log = Log()
    for i in range(12):
        log.send(PLAIN, 5, txn=False)
        if i % 4 == 3:
            log.send(A, 2, txn=True)
            log.end(A, commit=True)
    _write_bucket(tmp_path, log, cuts=[3, 6, 9])
    bucket = open_bucket(tmp_path.as_uri())
    bucket.gets.clear()
    got, _, _ = _offsets({"kafka.isolation.level": "read_committed"}, tmp_path)
    assert got == log.committed == log.data
    reads = {k.rsplit(".", 1)[1]: n for k, n in bucket.gets.items()}
    assert "txnindex" not in reads and reads.get("snapshot") == 1, bucket.gets
    bucket.gets.clear()
    _offsets({}, tmp_path)
    assert not [k for k in bucket.gets if k.endswith((".txnindex", ".snapshot"))], bucket.gets


def test_a_transaction_open_at_the_end_of_the_bucket_ends_a_read_committed_read_at_its_start(
    tmp_path: Path,
) -> None:
    log = _history(open_at_end=True)
    _write_bucket(tmp_path, log, cuts=[5, 12, 20])
    stable = log.first[C]
    got, parts, catalog = _offsets({"kafka.isolation.level": "read_committed"}, tmp_path)
    (view,) = catalog.views()
    assert view.remote_end == view.latest == stable
    assert got == [o for o in log.committed if o < stable]
    assert max(p.hi for p in parts) == stable
    # an explicit end past it names the way out
    with pytest.raises(StrataSourceError, match=f"stable offsets end at {stable}: set kafka.bootstrap.servers"):
        catalog.check_range(view, 0, stable + 1)
    got, _, _ = _offsets({}, tmp_path)
    assert got == log.data  # read_uncommitted reads to the end of the bucket


def test_a_last_segment_without_snapshot_is_replayed_to_find_open_transactions(tmp_path: Path) -> None:
    log = _history(open_at_end=True)
    entries = _write_bucket(tmp_path, log, cuts=[5, 12, 20])
    manifest = tmp_path / "topics" / TOPIC_ID / "0" / "manifest.json"
    doc = json.loads(manifest.read_text())
    for entry in doc["segments"][-2:]:  # lost in a crash, or uploaded by an older broker
        entry["producer_snapshot_bytes"] = 0
    manifest.write_text(json.dumps(doc))
    segments = [SegmentRef(TOPIC, 0, f"topics/{TOPIC_ID}/0/{e['base_offset']:020d}-{e['upload_id']}.log",
                           e["base_offset"], e["last_offset"], e["size_bytes"], e["txn_index_bytes"],
                           s["producer_snapshot_bytes"]) for e, s in zip(entries, doc["segments"])]
    assert BucketTxns(open_bucket(tmp_path.as_uri()), 1000).stable_end(segments) == log.first[C]
    got, _, _ = _offsets({"kafka.isolation.level": "read_committed"}, tmp_path)
    assert got == [o for o in log.committed if o < log.first[C]]


def test_format_1_buckets_read_the_same_with_either_isolation_level(tmp_path: Path) -> None:
    log = Log()
    for _ in range(10):
        log.send(PLAIN, 4, txn=False)
    _write_bucket(tmp_path, log, cuts=[3, 7], format_version=1)
    bucket = open_bucket(tmp_path.as_uri())
    bucket.gets.clear()
    committed, _, _ = _offsets({"kafka.isolation.level": "read_committed"}, tmp_path)
    uncommitted, _, _ = _offsets({"kafka.isolation.level": "read_uncommitted"}, tmp_path)
    assert committed == uncommitted == log.data
    assert not [k for k in bucket.gets if k.endswith((".txnindex", ".snapshot"))], bucket.gets


def test_aborted_collection_stops_at_an_entry_stable_past_the_range(tmp_path: Path) -> None:
    log = _history()
    entries = _write_bucket(tmp_path, log, cuts=[4, 9, 15, 21])
    _, _, catalog = _offsets({"kafka.isolation.level": "read_committed"}, tmp_path)
    (view,) = catalog.views()
    bucket = catalog.bucket
    bucket.gets.clear()
    txns_module._CACHE.clear()
    # each abort's LSO is the first offset of A's transaction open beside it: the second one's
    # covers [0, that offset), so the search stops there and the third index is never read
    hi = log.aborted[1][3]
    assert catalog.txns.aborted(view.segments, 0, hi) == [log.aborted[0][:3]]
    read = sum(1 for k in bucket.gets if k.endswith(".txnindex"))
    assert read == 2 < sum(1 for e in entries if e["txn_index_bytes"]), bucket.gets
    assert catalog.txns.aborted(view.segments, 0, log.next) == [t[:3] for t in log.aborted]


def test_a_malformed_isolation_level_is_refused() -> None:
    with pytest.raises(StrataSourceError, match="kafka.isolation.level must be read_uncommitted or read_committed"):
        parse_options({"object.store": "file:///x", "subscribe": "t", "kafka.isolation.level": "committed"},
                      streaming=False)
    opts = parse_options({"object.store": "file:///x", "subscribe": "t", "kafka.isolation.level": "Read_Committed"},
                         streaming=True)
    assert opts.read_committed and opts.kafka["isolation.level"] == "read_committed"
