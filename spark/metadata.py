"""The topics of a Strata cluster, read from the bucket: :func:`read_topics`.

``cluster/metadata.json`` is either a whole document (formats 1 and 2, which list
``topics[].name``, ``topic_id`` and ``partitions``) or the head of the metadata log
(format 3, ``docs/adr/0025-metadata-log.md``): a gzipped format-2 snapshot it names,
then one batch of records per revision under ``cluster/metadata/log/``, read forward
by GETs until the first missing slot (never a LIST). Slots are never rewritten, so a
process that has read the log once goes on from the slot it stopped at. Of the records only
``TopicRecord``, ``PartitionRecord`` and ``RemoveTopicRecord`` matter here; the rest
are skipped. This reader is written from the documented format and shares no code with
the broker's writer. Blocking; thread-safe.
"""

from __future__ import annotations

import json
import threading
import weakref
import zlib
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from spark.bucket import Bucket, MissingObject
from spark.options import StrataSourceError

__all__ = ["METADATA_KEY", "read_topics"]

METADATA_KEY = "cluster/metadata.json"
_LOG_PREFIX = "cluster/metadata"
_WINDOW = 16  # at most this many slots fetched in parallel while reading the log forward
_MAX_BYTES = 512 * 1024 * 1024
Topics = dict[str, tuple[str, int]]
#: bucket -> (cluster id, the last revision replayed, topic id -> (name, partitions) at it)
_REPLAYED: weakref.WeakKeyDictionary[Bucket, tuple[str, int, dict[str, tuple[str, int]]]] = (
    weakref.WeakKeyDictionary())
_REPLAYED_LOCK = threading.Lock()


def read_topics(bucket: Bucket) -> Topics:
    """name -> (topic id, partition count) of every topic of the cluster in ``bucket``."""
    try:
        raw = bucket.get(METADATA_KEY)
    except MissingObject:
        raise StrataSourceError(
            f"{bucket.url} holds no Strata cluster ({METADATA_KEY} is missing): "
            "point object.store at the URL the broker was started with"
        ) from None
    try:
        doc = json.loads(raw)
        if doc.get("version") == 3:
            return _replay_log(bucket, doc)
        return _topics_of(doc)
    except (ValueError, KeyError, TypeError, OSError) as exc:
        raise StrataSourceError(f"{METADATA_KEY} is not valid cluster metadata: {exc}") from exc


def _topics_of(doc: dict[str, Any]) -> Topics:
    return {t["name"]: (str(t["topic_id"]), int(t["partitions"])) for t in doc["topics"]}


def _replay_log(bucket: Bucket, head: dict[str, Any]) -> Topics:
    # Slots are never rewritten, so where this process has replayed the cluster's log before it
    # goes on from there: a plan (and every micro-batch of a stream) then costs the head and one
    # GET of the next slot, not the snapshot and the whole log after it. If the log no longer
    # starts at or before that point (trimmed), or the bucket holds another cluster, the newest
    # snapshot is loaded again.
    cluster = str(head["cluster_id"])
    with _REPLAYED_LOCK:
        known = _REPLAYED.get(bucket)
    if known is not None and known[0] == cluster and int(head["log_start"]) <= known[1] + 1:
        revision, by_id = known[1], dict(known[2])
    else:
        revision = int(head["snapshot"]["revision"])
        snapshot = json.loads(_inflate(bucket.get(head["snapshot"]["key"])))
        by_id = {tid: (name, count) for name, (tid, count) in _topics_of(snapshot).items()}
    # the log past that point is usually a few slots long: read two, and twice as many each
    # time all are there (up to _WINDOW), so a short log costs a few GETs and few connections
    window = 2
    with ThreadPoolExecutor(_WINDOW, thread_name_prefix="strata-spark-metadata") as pool:
        while True:
            slots = list(pool.map(lambda r: _slot(bucket, r), range(revision + 1, revision + 1 + window)))
            for batch in slots:
                if batch is None:
                    with _REPLAYED_LOCK:
                        _REPLAYED[bucket] = (cluster, revision, by_id)  # not changed after this
                    return {name: (tid, count) for tid, (name, count) in by_id.items()}
                _apply(by_id, batch)
                revision += 1
            window = min(2 * window, _WINDOW)


def _slot(bucket: Bucket, revision: int) -> list[dict[str, Any]] | None:
    try:
        data = bucket.get(f"{_LOG_PREFIX}/log/{revision:020d}.jsonl")
    except MissingObject:
        return None
    lines = [line for line in _inflate(data).splitlines() if line]
    header = json.loads(lines[0])["batch"]
    records = [json.loads(line) for line in lines[1:]]
    if int(header["revision"]) != revision or int(header["records"]) != len(records):
        raise ValueError(f"metadata log slot {revision} is truncated or misplaced")
    return records


def _apply(by_id: dict[str, tuple[str, int]], records: list[dict[str, Any]]) -> None:
    for record in records:
        kind = record["type"]
        if kind == "TopicRecord":
            _, count = by_id.get(record["topic_id"], ("", 0))
            by_id[record["topic_id"]] = (record["name"], count)
        elif kind == "PartitionRecord":
            name, count = by_id[record["topic_id"]]
            by_id[record["topic_id"]] = (name, max(count, int(record["partition"]) + 1))
        elif kind == "RemoveTopicRecord":
            by_id.pop(record["topic_id"], None)


def _inflate(data: bytes) -> str:
    """A batch or snapshot's text; gzip is inflated to at most :data:`_MAX_BYTES`."""
    if data[:2] == b"\x1f\x8b":
        inflater = zlib.decompressobj(16 + zlib.MAX_WBITS)
        data = inflater.decompress(data, _MAX_BYTES)
        if inflater.unconsumed_tail:
            raise ValueError(f"a metadata object inflates to more than {_MAX_BYTES} bytes")
    return data.decode()
