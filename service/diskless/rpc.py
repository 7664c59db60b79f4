"""The two inter-broker APIs of diskless topics: DisklessCommit and DisklessIndex (ADR 0027,
sections 2 and 6, and "On the wire").

Both are Strata's own (:mod:`service.cluster.own_apis`: the frame, JSON bodies, only a
principal allowed CLUSTER_ACTION): API keys :data:`DISKLESS_COMMIT` and
:data:`DISKLESS_INDEX`. They carry entries (about 100 bytes a batch), never record bytes.

* DisklessCommit: a writer's proposals for the partitions one broker sequences, in the
  write-ahead object's order; the answer holds, in the same order, each proposal's
  committed offsets or the error that refused it.
* DisklessIndex: a reader asks a sequencer for the committed entries of some of its
  partitions, each from an offset (a long poll up to ``max_wait_ms`` while none has any),
  with each partition's first unmerged offset and committed end (the high watermark). A
  reader whose fetch was answered by another sequencer ends the poll early with a second
  DisklessIndex naming it (``wake``): a connection answers its requests in order, so a
  poll left waiting would hold up the next.

Codec functions are pure; :func:`serve` runs on the event loop.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import orjson

from common.errors import ErrorCode, KafkaError
from remote_tier.diskless.commits import (
    CommitEntry,
    CommitFormatError,
    entries_of_rows,
    entry_rows,
    id_row,
)
from service.cluster.own_apis import (
    RpcFormatError,
    answer_frame,
    error_answer,
    error_of,
    int_field,
    load_object,
    open_request,
)
from service.cluster.wire import error_for
from service.diskless.sequence import Proposal

if TYPE_CHECKING:
    from service.network.server import Connection
    from service.security.authorizer import Authorizer

__all__ = [
    "DISKLESS_APIS",
    "DISKLESS_COMMIT",
    "DISKLESS_INDEX",
    "DisklessServer",
    "IndexAnswer",
    "IndexRead",
    "IndexRequest",
    "RpcFormatError",
    "decode_commit_answer",
    "decode_commit_request",
    "decode_index_answer",
    "decode_index_request",
    "encode_commit_answer",
    "encode_commit_request",
    "encode_index_answer",
    "encode_index_request",
    "serve",
]

DISKLESS_COMMIT = 32000
DISKLESS_INDEX = 32001
DISKLESS_APIS = frozenset({DISKLESS_COMMIT, DISKLESS_INDEX})

class DisklessServer(Protocol):
    """What answers these requests (:class:`service.diskless.node.DisklessNode`)."""

    rpc_bytes_in: int
    rpc_bytes_out: int

    async def commit_here(self, proposals: Sequence[Proposal]) -> list[CommitEntry | KafkaError]: ...

    async def index_here(self, reads: Sequence[IndexRead], max_wait_ms: int,
                         poll: str = "") -> list[IndexAnswer | KafkaError]: ...

    @property
    def waits(self) -> Any: ...  # IndexWaits


_PROPOSAL_FIELDS = 12


# -- DisklessCommit ----------------------------------------------------------------------


def encode_commit_request(proposals: Sequence[Proposal]) -> bytes:
    objects = list(dict.fromkeys(p.object_key for p in proposals))
    index = {key: i for i, key in enumerate(objects)}
    return orjson.dumps({"objects": objects, "proposals": [
        [str(p.topic_id), p.partition, p.leader_epoch, index[p.object_key], p.position, p.size, p.record_count,
         p.max_timestamp, p.producer_id, p.producer_epoch, p.base_sequence, int(p.is_transactional)]
        for p in proposals]})


def decode_commit_request(body: bytes | memoryview) -> list[Proposal]:
    doc = load_object(body, "a DisklessCommit request")
    objects, rows = doc.get("objects"), doc.get("proposals")
    if not isinstance(objects, list) or not isinstance(rows, list) or not all(isinstance(k, str) for k in objects):
        raise RpcFormatError("a DisklessCommit request lacks its objects or proposals")
    out = []
    for raw in rows:
        row = id_row(raw, _PROPOSAL_FIELDS)
        if row is None:
            raise RpcFormatError(f"a malformed proposal: {raw!r}")
        tid, (partition, epoch, obj, position, size, count, max_ts, pid, pepoch, seq, txn) = row
        if not 0 <= obj < len(objects) or partition < 0:
            raise RpcFormatError(f"a malformed proposal: {raw!r}")
        out.append(Proposal(tid, partition, epoch, objects[obj], position, size, count, max_ts, pid, pepoch, seq,
                            bool(txn)))
    return out


def encode_commit_answer(answers: Sequence[CommitEntry | KafkaError]) -> bytes:
    return orjson.dumps({"answers": [
        [int(a.code), a.message, 0, 0, 0, 0] if isinstance(a, KafkaError)
        else [0, None, a.leader_epoch, a.base_offset, a.record_count, a.max_timestamp] for a in answers]})


def decode_commit_answer(body: bytes | memoryview, proposals: Sequence[Proposal]) -> list[CommitEntry | KafkaError]:
    """The answer to ``proposals`` (what was sent): entries or errors, in their order."""
    doc = load_object(body, "a DisklessCommit answer")
    if "error" in doc:
        raise error_of(doc)
    rows = doc.get("answers")
    if not isinstance(rows, list) or len(rows) != len(proposals):
        raise RpcFormatError("a DisklessCommit answer does not answer every proposal")
    out: list[CommitEntry | KafkaError] = []
    for row, p in zip(rows, proposals, strict=True):
        if not isinstance(row, list) or len(row) != 6 or not isinstance(row[0], int):
            raise RpcFormatError(f"a malformed DisklessCommit answer: {row!r}")
        code, message, epoch, base, count, max_ts = row
        if code:
            out.append(error_for(code, message if isinstance(message, str) else None) or KafkaError(str(code)))
            continue
        if not all(isinstance(v, int) and not isinstance(v, bool) for v in (epoch, base, count, max_ts)) \
                or base < 0 or count < 1:
            raise RpcFormatError(f"a malformed DisklessCommit answer: {row!r}")
        out.append(CommitEntry(p.topic_id, p.partition, epoch, base, count, p.object_key, p.position, p.size,
                               max_ts, p.producer_id, p.producer_epoch, p.base_sequence))
    return out


# -- DisklessIndex -----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class IndexRead:
    """One partition of a DisklessIndex request: its committed entries from ``offset``, up
    to ``max_bytes`` of batches; or, with ``timestamp`` ≥ 0, the first entry whose batch
    reaches that time (-3: the entry of the newest timestamp) whatever ``offset``."""

    topic_id: uuid.UUID
    partition: int
    offset: int
    max_bytes: int
    timestamp: int = -1


@dataclass(frozen=True, slots=True)
class IndexRequest:
    """A long poll of several partitions one sequencer holds (``max_wait_ms`` for any of
    them to have entries), named ``poll``; or, with ``wake``, the end of that poll's wait."""

    reads: tuple[IndexRead, ...] = ()
    max_wait_ms: int = 0
    poll: str = ""
    wake: str = ""
    #: the wait lasts until the partitions' entries hold this many bytes (the Fetch's min_bytes)
    min_bytes: int = 1


def encode_index_request(request: IndexRequest) -> bytes:
    if request.wake:
        return orjson.dumps({"wake": request.wake})
    return orjson.dumps({"max_wait_ms": request.max_wait_ms, "poll": request.poll, "min_bytes": request.min_bytes,
                         "partitions": [
        [str(r.topic_id), r.partition, r.offset, r.max_bytes, r.timestamp] for r in request.reads]})


def decode_index_request(body: bytes | memoryview) -> IndexRequest:
    what = "a DisklessIndex request"
    doc = load_object(body, what)
    if "wake" in doc:
        if not isinstance(doc["wake"], str):
            raise RpcFormatError(f"{what}: wake is not a string")
        return IndexRequest(wake=doc["wake"])
    rows, poll = doc.get("partitions"), doc.get("poll", "")
    if not isinstance(rows, list) or not isinstance(poll, str):
        raise RpcFormatError(f"{what} lacks its partitions")
    reads = []
    for raw in rows:
        row = id_row(raw, 5)
        if row is None:
            raise RpcFormatError(f"{what}: a malformed partition {raw!r}")
        reads.append(IndexRead(row[0], *row[1]))
    min_bytes = int_field(doc, "min_bytes", what) if "min_bytes" in doc else 1  # absent: a peer from before it
    return IndexRequest(tuple(reads), int_field(doc, "max_wait_ms", what), poll, min_bytes=min_bytes)


@dataclass(frozen=True, slots=True)
class IndexAnswer:
    """A sequencer's committed entries of one partition from an offset."""

    start_offset: int  # the first offset not merged (older ones: the tiered segments)
    end_offset: int  # the committed end: the high watermark
    entries: tuple[CommitEntry, ...]


def encode_index_answer(answers: Sequence[IndexAnswer | KafkaError]) -> bytes:
    out: list[dict[str, Any]] = []
    for answer in answers:
        if isinstance(answer, KafkaError):
            out.append({"error": int(answer.code), "message": answer.message})
        else:
            objects, rows = entry_rows(answer.entries)
            out.append({"start": answer.start_offset, "end": answer.end_offset, "objects": objects, "entries": rows})
    return orjson.dumps({"partitions": out})


def decode_index_answer(body: bytes | memoryview, count: int) -> list[IndexAnswer | KafkaError]:
    """The answers to a request of ``count`` partitions (an error answering the whole
    request is raised)."""
    what = "a DisklessIndex answer"
    doc = load_object(body, what)
    if "error" in doc:
        raise error_of(doc)
    parts = doc.get("partitions")
    if not isinstance(parts, list) or len(parts) != count:
        raise RpcFormatError(f"{what} does not answer every partition")
    out: list[IndexAnswer | KafkaError] = []
    for part in parts:
        if not isinstance(part, dict):
            raise RpcFormatError(f"{what}: a malformed partition")
        if "error" in part:
            out.append(error_of(part))
            continue
        try:
            entries = entries_of_rows(part.get("objects"), part.get("entries"), what)  # type: ignore[arg-type]
        except CommitFormatError as err:
            raise RpcFormatError(str(err)) from err
        out.append(IndexAnswer(int_field(part, "start", what), int_field(part, "end", what), tuple(entries)))
    return out


# -- the server side ---------------------------------------------------------------------


async def serve(node: DisklessServer, frame: bytes | memoryview, conn: Connection | None,
                authorizer: Authorizer | None) -> bytes:
    """Answer one DisklessCommit or DisklessIndex request frame (without its size prefix)."""
    api_key, correlation_id, body, refused = open_request(frame, conn, authorizer, "diskless requests")
    if refused is not None:
        return refused
    if api_key == DISKLESS_COMMIT:
        try:
            proposals = decode_commit_request(body)
        except RpcFormatError as err:
            return error_answer(correlation_id, ErrorCode.invalid_request, str(err))
        answers = await node.commit_here(proposals)
        node.rpc_bytes_in += len(frame)
        out = encode_commit_answer(answers)
    else:
        try:
            request = decode_index_request(body)
        except RpcFormatError as err:
            return error_answer(correlation_id, ErrorCode.invalid_request, str(err))
        if request.wake:
            node.waits.wake(request.wake)
            out = b"{}"
        else:
            out = encode_index_answer(await node.index_here(request.reads, request.max_wait_ms, request.poll,
                                                            request.min_bytes))
    node.rpc_bytes_out += len(out)
    return answer_frame(correlation_id, out)
