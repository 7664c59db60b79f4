"""Produce (key 0): validate, append to the partition's log, answer per partition.

Every partition's record set is validated before anything is appended: batch
framing and CRC, then every record (``common.record.batch.validate_batches``;
compressed batches are decompressed to check their records, as Kafka's broker
does). A bad record set fails only its partition, with CORRUPT_MESSAGE (CRC,
framing) or INVALID_RECORD (records that lie inside a correct CRC; per-record
errors from v8).

Decompression stays on the event loop only while a batch inflates to at most
``INLINE_INFLATE_BYTES``; a request with a larger compressed batch is validated
on the ``_VALIDATORS`` threads (zlib, lz4, zstd, snappy and the record walk
release the GIL). Appends keep the order of requests on a connection: a request
that arrives while an earlier one of the same connection is being validated
off the loop waits for that one's appends, so a producer's batches land in the
order it sent them. A request for more than ``PARTITIONS_PER_TURN`` partitions is
validated and appended that many partitions per turn of the loop (the first produce to
600 new partitions took 115–275 ms of the loop in one go), in the same order.
"""

from __future__ import annotations

import asyncio
import inspect
import weakref
from collections.abc import Awaitable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial
from typing import Any

from common.errors import (
    CorruptRecordError,
    ErrorCode,
    InvalidRecordError,
    InvalidRequiredAcksError,
    KafkaError,
    KafkaStorageError,
    TopicAuthorizationFailedError,
    TransactionalIdAuthorizationFailedError,
)
from common.record.batch import ValidatedRecords, validate_batches
from common.record.compression import InflateLimitExceeded
from controller.metadata import TopicInfo
from remote_tier.diskless.commits import CommitEntry
from service.handlers.context import RequestContext
from service.handlers.produce_codec import (
    PartitionResult,
    ProduceRequestData,
    encode_produce_response,
)
from service.security.acls import AclOperation, ResourceType

__all__ = ["INLINE_INFLATE_BYTES", "PARTITIONS_PER_TURN", "handle_produce"]

#: compressed batches inflating past this are validated off the event loop
INLINE_INFLATE_BYTES = 256 * 1024
#: a request for more partitions than this gives the loop a turn after each this many
PARTITIONS_PER_TURN = 32

_VALIDATORS = ThreadPoolExecutor(max_workers=2, thread_name_prefix="strata-produce-validate")

#: a partition's answer still to wait for: (topic, its results, position in them, the offset
#: acks=all waits to be replicated (-1: none), the flush.messages fsync (None: none))
_Waiting = tuple[str, list[PartitionResult], int, int, "Future[bool] | None"]

#: a diskless partition's answer still to wait for: (topic, its results, position in them,
#: the committed entry of its first batch, whether the topic stamps LogAppendTime)
_Written = tuple[str, list[PartitionResult], int, "Awaitable[CommitEntry]", bool]

#: per connection, the last Produce whose appends wait for an off-loop validation
_pending: weakref.WeakKeyDictionary[Any, asyncio.Future[None]] = weakref.WeakKeyDictionary()


@dataclass(slots=True)
class _Partition:
    topic_pos: int  # the topic's position in the request
    topic: str
    index: int
    records: Any = None
    max_message_bytes: int = 0
    validated: ValidatedRecords | None = None
    error: KafkaError | None = None
    off_loop: bool = False
    #: a diskless topic's (ADR 0027): written through the bucket, not to a local log
    diskless: TopicInfo | None = None
    log_append_time: bool = False


def handle_produce(ctx: RequestContext, request: ProduceRequestData) -> Any:
    acks = request.acks
    timeout_ms = request.timeout_ms
    conn = ctx.connection
    earlier = _pending.get(conn) if conn is not None else None
    if earlier is not None and earlier.done():
        earlier = None
    wide = sum(len(topic.partition_data) for topic in request.topic_data) > PARTITIONS_PER_TURN
    if wide:
        parts: list[_Partition] = []
    else:
        parts = [
            _check(ctx, request, acks, pos, topic.name, pdata)
            for pos, topic in enumerate(request.topic_data)
            for pdata in topic.partition_data
        ]
    if earlier is None and not wide and not any(p.off_loop for p in parts):
        waiters = ctx.broker.waiters
        woken = waiters.woken
        answer = _append_and_answer(ctx, acks, parts, timeout_ms)
        if waiters.woken != woken and conn is not None and isinstance(answer, bytes):
            # the fetches it woke answer first: a woken fetch reads in the loop's next turn and
            # is sent in the one after (service/network/server.py gives both before this answer)
            conn.turns_before_answer = 2
        return answer
    mine: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    if conn is not None:
        _pending[conn] = mine
    return _produce_later(ctx, acks, request if wide else None, parts, earlier, mine, timeout_ms)


async def _checked_in_turns(ctx: RequestContext, request: ProduceRequestData, acks: int) -> list[_Partition]:
    """:func:`_check` of every partition, :data:`PARTITIONS_PER_TURN` per turn of the loop."""
    parts: list[_Partition] = []
    for pos, topic in enumerate(request.topic_data):
        for pdata in topic.partition_data:
            if parts and len(parts) % PARTITIONS_PER_TURN == 0:
                await asyncio.sleep(0)
            parts.append(_check(ctx, request, acks, pos, topic.name, pdata))
    return parts


async def _produce_later(
    ctx: RequestContext, acks: int, wide: ProduceRequestData | None, parts: list[_Partition],
    earlier: asyncio.Future[None] | None, mine: asyncio.Future[None], timeout_ms: int,
) -> bytes | None:
    """The appends of a request that waits: for an earlier one of its connection, for the
    validation threads, or (``wide``) for turns of the loop between its partitions."""
    try:
        loop = asyncio.get_running_loop()
        if wide is not None:
            parts = await _checked_in_turns(ctx, wide, acks)
        for p in parts:
            if p.off_loop:
                validate = partial(validate_batches, p.records, max_message_bytes=p.max_message_bytes)
                try:
                    p.validated = await loop.run_in_executor(_VALIDATORS, validate)
                except KafkaError as exc:
                    p.error = exc
        if earlier is not None:
            await asyncio.shield(earlier)
        appends = _Appends()
        for start in range(0, len(parts), PARTITIONS_PER_TURN):
            if start:
                await asyncio.sleep(0)
            for p in parts[start:start + PARTITIONS_PER_TURN]:
                appends.append(ctx, acks, p)
        answer = appends.answer(ctx, acks, timeout_ms)
    finally:
        mine.set_result(None)  # appended: the connection's next Produce may append (acks=all waits apart)
    return await answer if inspect.isawaitable(answer) else answer


def _check(ctx: RequestContext, request: Any, acks: int, topic_pos: int, topic: str, pdata: Any) -> _Partition:
    """Validate one partition's records on the loop, or mark them for the validator threads."""
    part = _Partition(topic_pos, topic, int(pdata.index), pdata.records)
    try:
        txn = getattr(request, "transactional_id", None)
        if txn is not None and not ctx.allowed(AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, txn):
            raise TransactionalIdAuthorizationFailedError(f"not allowed to write transactional id {txn!r}")
        if not ctx.allowed(AclOperation.WRITE, ResourceType.TOPIC, topic):
            raise TopicAuthorizationFailedError(f"not allowed to write to topic {topic!r}")
        if acks not in (0, 1, -1):
            raise InvalidRequiredAcksError(f"acks must be 0, 1 or -1, not {acks}")
        if pdata.records is None:
            raise CorruptRecordError("produce request carries no record data")
        info = ctx.broker.controller.topic(topic)
        if info is not None and info.diskless:
            config = ctx.broker.log_config(topic)
            part.diskless, part.max_message_bytes = info, config.max_message_bytes
            part.log_append_time = config.message_timestamp_type == "LogAppendTime"
        else:
            part.max_message_bytes = ctx.broker.log_for(topic, part.index).config.max_message_bytes
        try:
            part.validated = validate_batches(
                pdata.records, max_message_bytes=part.max_message_bytes, inflate_limit=INLINE_INFLATE_BYTES
            )
        except InflateLimitExceeded:
            part.off_loop = True
    except KafkaError as exc:
        part.error = exc
    return part


def _refuse_control_batches(validated: ValidatedRecords) -> None:
    """Control batches (transaction markers) are the broker's to write, as in Kafka."""
    for position, header in validated.headers:
        if header.is_control:
            raise InvalidRecordError(
                f"batch at position {position} is a control batch: clients may not write control records"
            )


def _append_and_answer(
    ctx: RequestContext, acks: int, parts: list[_Partition], timeout_ms: int
) -> bytes | None | Awaitable[bytes]:
    appends = _Appends()
    for p in parts:
        appends.append(ctx, acks, p)
    return appends.answer(ctx, acks, timeout_ms)


class _Appends:
    """One request's partitions appended in turn, and its answer once they all are."""

    __slots__ = ("topics", "waiting", "written")

    def __init__(self) -> None:
        self.topics: dict[int, tuple[str, list[PartitionResult]]] = {}
        self.waiting: list[_Waiting] = []  # acks=all, not on the ISR yet; or flush.messages, not fsynced yet
        self.written: list[_Written] = []  # diskless: in the bucket and committed once these resolve

    def append(self, ctx: RequestContext, acks: int, p: _Partition) -> None:
        broker, topics = ctx.broker, self.topics
        try:
            if p.error is not None:
                raise p.error
            assert p.validated is not None
            _refuse_control_batches(p.validated)
            if p.diskless is not None:
                entry = broker.diskless.produce(p.diskless, p.index, p.records, p.validated, p.log_append_time)
                held = topics.setdefault(p.topic_pos, (p.topic, []))[1]
                self.written.append((p.topic, held, len(held), entry, p.log_append_time))
                held.append(PartitionResult(p.index, ErrorCode.none, -1, -1, -1))
                broker.bytes_in[p.topic] += len(p.records)
                broker.records_in[p.topic] += p.validated.record_count
                return
            info = broker.append(p.topic, p.index, p.records, validated=p.validated, required_acks=acks)
            result = PartitionResult(p.index, ErrorCode.none, info.first_offset, info.log_append_time_ms,
                                     info.log_start_offset)
            end = info.last_offset + 1
            flush = broker.pending_flush(p.topic, p.index, end) if acks != 0 else None
            if flush is not None or (acks == -1 and not broker.replicated(p.topic, p.index, end)):
                held = topics.setdefault(p.topic_pos, (p.topic, []))[1]
                self.waiting.append((p.topic, held, len(held), end if acks == -1 else -1, flush))
        except KafkaError as exc:
            broker.metrics_error("Produce", exc.code)
            record_errors = exc.record_errors if isinstance(exc, InvalidRecordError) else ()
            result = PartitionResult(p.index, int(exc.code), error_message=exc.message,
                                     record_errors=record_errors)
        topics.setdefault(p.topic_pos, (p.topic, []))[1].append(result)

    def answer(self, ctx: RequestContext, acks: int, timeout_ms: int) -> bytes | None | Awaitable[bytes]:
        if acks == 0:
            for *_, entry, _ in self.written:
                asyncio.ensure_future(entry).add_done_callback(_retrieved)
            if ctx.connection is not None and any(r.error_code for _, results in self.topics.values()
                                                  for r in results):
                # as Kafka: closing the connection is the only word an acks=0 producer gets that
                # its metadata is stale (a leader moved); it reconnects and refreshes it
                ctx.connection.session.close_after_s = 0.0
            return None
        if self.waiting or self.written:
            return _after_replication(ctx, list(self.topics.values()), self.waiting, timeout_ms, self.written)
        return encode_produce_response(ctx.version, ctx.header.correlation_id, list(self.topics.values()),
                                       _throttle(ctx))


def _retrieved(future: asyncio.Future[Any]) -> None:
    if not future.cancelled():
        future.exception()  # acks=0: nobody is answered, a failure is not "never retrieved"


def _throttle(ctx: RequestContext) -> int:
    """The larger of the produce byte-rate throttle (decided by the router as the request
    was read, so pipelined requests cannot outrun it) and the request-time one."""
    return max(ctx.throttle_ms, ctx.request_throttle())


async def _after_replication(
    ctx: RequestContext,
    topics: list[tuple[str, list[PartitionResult]]],
    waiting: list[_Waiting],
    timeout_ms: int,
    written: list[_Written] = (),  # type: ignore[assignment]
) -> bytes:
    """Answer once the appended records are fsynced, if ``flush.messages`` asked for it
    (Kafka fsyncs them before answering; here the flush thread does, the loop waits for
    nothing), and for acks=all once every replica in the ISR holds them (Kafka's delayed
    produce); KAFKA_STORAGE_ERROR, REQUEST_TIMED_OUT or NOT_LEADER_OR_FOLLOWER per
    partition else."""

    async def wait(topic: str, partitions: list[PartitionResult], position: int, offset: int,
                   flush: Future[bool] | None) -> None:
        index = partitions[position].index
        try:
            if flush is not None and not await asyncio.wrap_future(flush):
                raise KafkaStorageError(f"the records appended to {topic}-{index} could not be "
                                        "fsynced (flush.messages): its log directory failed")
            if offset >= 0:
                await ctx.broker.wait_replicated(topic, index, offset, timeout_ms)
        except KafkaError as exc:
            ctx.broker.metrics_error("Produce", exc.code)
            partitions[position] = PartitionResult(index, int(exc.code), error_message=exc.message)

    async def committed(topic: str, partitions: list[PartitionResult], position: int,
                        entry: Awaitable[CommitEntry], log_append_time: bool) -> None:
        index = partitions[position].index
        try:
            done = await entry
            partitions[position] = PartitionResult(index, ErrorCode.none, done.base_offset,
                                                   done.max_timestamp if log_append_time else -1, -1)
        except KafkaError as exc:
            ctx.broker.metrics_error("Produce", exc.code)
            partitions[position] = PartitionResult(index, int(exc.code), error_message=exc.message)

    await asyncio.gather(*(wait(*w) for w in waiting), *(committed(*w) for w in written))
    return encode_produce_response(ctx.version, ctx.header.correlation_id, topics, _throttle(ctx))
