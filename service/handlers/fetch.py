"""Fetch (key 1): read local logs, long-poll for min_bytes, send records with sendfile.

Fetch v7+ may use an incremental fetch session (KIP-227, :mod:`fetch.sessions`):
the partitions to read then come from the session, and the response carries only
those that changed. A request with session id 0 and epoch -1 (sessionless, what
librdkafka sends) never touches the session cache.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from common.errors import ErrorCode, KafkaError
from common.protocol.codec import timedelta_to_ms
from fetch.planner import (
    PARTITIONS_PER_TURN,
    READ_COMMITTED,
    PartitionData,
    PartitionFetch,
    read_partitions_in_turns,
)
from fetch.response import encode_fetch_response, frame_size
from fetch.sessions import FINAL_EPOCH, INITIAL_EPOCH, INVALID_SESSION_ID, FetchContext
from service.diskless.fetching import read_diskless
from service.handlers.context import RequestContext
from service.handlers.fetch_topics import by_name, replica_id_of
from service.quotas.manager import FETCH
from service.replication.leader import read_for_follower
from service.replication.read_replicas import (
    RACK_AWARE_SELECTOR,
    ConsumerLogs,
    select_read_replicas,
)
from service.security.acls import CLUSTER_NAME, AclOperation, ResourceType

__all__ = ["handle_fetch"]

log = logging.getLogger("strata.fetch")


async def handle_fetch(ctx: RequestContext, request: Any) -> list[Any]:
    broker = ctx.broker
    # v13+ names topics by id: read by name here, answered by id (the unknown ones at once)
    named, topic_id, unknown_ids = by_name(request, ctx.version, broker.controller)
    replica_id = replica_id_of(request)
    if replica_id >= 0 and not ctx.allowed(AclOperation.CLUSTER_ACTION, ResourceType.CLUSTER, CLUSTER_NAME):
        broker.metrics_error("Fetch", ErrorCode.topic_authorization_failed)
        denied = [PartitionData(d.topic, d.partition, ErrorCode.topic_authorization_failed) for d in unknown_ids]
        denied += [PartitionData(t.topic, int(p.partition), ErrorCode.topic_authorization_failed)
                   for t in named.topics for p in t.partitions]
        return encode_fetch_response(ctx.version, ctx.header.correlation_id, denied, topic_id=topic_id)
    if unknown_ids and broker.cluster is not None:  # created a moment ago through another broker?
        await broker.cluster.refresh_metadata()
        named, topic_id, unknown_ids = by_name(request, ctx.version, broker.controller)
    request = named
    if replica_id >= 0:  # a follower copying from this leader
        # an unknown topic id is answered at once: the follower backs off and names it again
        answer = await read_for_follower(broker, request, replica_id,
                                         0 if unknown_ids else timedelta_to_ms(request.max_wait))
        if answer.error_code != ErrorCode.none:
            broker.metrics_error("Fetch", answer.error_code)
        return encode_fetch_response(ctx.version, ctx.header.correlation_id,
                                     answer.partitions + unknown_ids if answer.error_code == ErrorCode.none
                                     else answer.partitions,
                                     error_code=answer.error_code, session_id=answer.session_id,
                                     topic_id=topic_id)
    wanted = [
        PartitionFetch(
            topic.topic,
            int(p.partition),
            int(p.fetch_offset),
            int(p.partition_max_bytes),
            int(getattr(p, "current_leader_epoch", -1)),
        )
        for topic in request.topics
        for p in topic.partitions
    ]
    session_id = int(getattr(request, "session_id", INVALID_SESSION_ID))  # v7+
    session_epoch = int(getattr(request, "session_epoch", FINAL_EPOCH))
    session: FetchContext | None = None
    if unknown_ids and session_epoch not in (INITIAL_EPOCH, FINAL_EPOCH):
        # a session holds no partition it cannot name: the client starts a full fetch (Kafka
        # keeps such partitions unnamed in the session; a full fetch names them again)
        broker.metrics_error("Fetch", ErrorCode.fetch_session_topic_id_error)
        return encode_fetch_response(ctx.version, ctx.header.correlation_id, [],
                                     error_code=ErrorCode.fetch_session_topic_id_error, topic_id=topic_id)
    if unknown_ids:
        session_id, session_epoch = INVALID_SESSION_ID, FINAL_EPOCH  # no session opened until all are known
    if session_id != INVALID_SESSION_ID or session_epoch != FINAL_EPOCH:  # KIP-227
        forgotten = [
            (t.topic, int(p)) for t in getattr(request, "forgotten_topics_data", ()) for p in t.partitions
        ]
        session = broker.fetch_sessions.new_context(
            session_id,
            session_epoch,
            wanted,
            forgotten,
            privileged=replica_id >= 0,
        )
        if session.error != ErrorCode.none:
            broker.metrics_error("Fetch", session.error)
            return encode_fetch_response(
                ctx.version, ctx.header.correlation_id, [], error_code=session.error, topic_id=topic_id
            )
        wanted = session.partitions
    readable = {t: ctx.allowed(AclOperation.READ, ResourceType.TOPIC, t) for t in {w.topic for w in wanted}}
    order = [(w.topic, w.partition) for w in wanted]
    wanted = [w for w in wanted if readable[w.topic]]
    max_bytes = min(int(getattr(request, "max_bytes", 2**31 - 1)), broker.fetch_max_bytes)
    isolation = int(getattr(request, "isolation_level", 0))
    min_bytes = 0 if unknown_ids else int(request.min_bytes)  # an unknown topic id is answered at once
    max_wait_ms = timedelta_to_ms(request.max_wait)
    # diskless partitions (ADR 0027) are read through their sequencers, beside the local logs
    diskless_topics = {t for t in {w.topic for w in wanted} if _is_diskless(broker, t)}
    from_bucket: list[PartitionData] = []
    diskless_keys: set[tuple[str, int]] = set()
    wants: list[Any] = []
    already = 0
    if diskless_topics:
        wants = [(broker.controller.topic(w.topic), w.topic, w.partition, w.fetch_offset, w.max_bytes)
                 for w in wanted if w.topic in diskless_topics]
        wanted = [w for w in wanted if w.topic not in diskless_topics]
        diskless_keys = {(name, index) for _, name, index, _, _ in wants}
        # with local partitions too, the bucket's are read at once and the local ones long-poll
        wait_ms = max_wait_ms if not wanted and min_bytes > 0 else 0
        from_bucket = await read_diskless(broker.diskless, wants, max_bytes, wait_ms, min_bytes=min_bytes)
        already = sum(d.size for d in from_bucket)  # the local partitions read within what is left
        if any(d.error_code != ErrorCode.none for d in from_bucket):
            min_bytes = 0  # answered at once, as for a local partition's error

    tiering = broker.tiering if broker.tiering.enabled else None
    # v11+: a consumer may read from a follower, and be sent to one in its rack (KIP-392)
    source: Any = broker
    rack = ""
    if ctx.version >= 11:
        source = ConsumerLogs(broker.replicas, {(w.topic, w.partition): w.fetch_offset for w in wanted})
        if broker.config.get("replica.selector.class") == RACK_AWARE_SELECTOR:
            rack = str(getattr(request, "rack_id", "") or "")

    changed = False  # an append to a partition already read, while the later ones were

    async def read() -> tuple[list[Any], int, bool]:
        # a read in turns of the loop (more than PARTITIONS_PER_TURN) watches its partitions:
        # the parked wait registers only after it, so an append in between would wake nobody
        nonlocal changed
        watch = broker.waiters.watch() if len(wanted) > PARTITIONS_PER_TURN else None
        if watch is not None:
            watch.add((w.topic, w.partition) for w in wanted)
        try:
            data, total = await read_partitions_in_turns(
                source, wanted, max_bytes=max_bytes, isolation_level=isolation, remote=tiering, already=already
            )
        finally:
            if watch is not None:
                changed = bool(watch.take())
                watch.close()
        if rack:
            select_read_replicas(broker.replicas, wanted, data, rack, _rack_of(broker))
        if len(wanted) != len(order):  # topics this principal may not READ answer so, in request order
            read_ = {(d.topic, d.partition): d for d in data}
            data = [read_.get(key) or PartitionData(
                key[0], key[1], ErrorCode.none if key in diskless_keys else ErrorCode.topic_authorization_failed)
                for key in order]
        errors = any(
            d.error_code != ErrorCode.none or d.remote is not None or d.preferred_read_replica >= 0
            for d in data
        )
        return data, total, errors

    data, total, errors = await read()
    if any(d.remote is not None for d in data):
        remote_quota = ctx.quotas.remote_fetch if ctx.quotas is not None else None
        if remote_quota is not None and remote_quota.exceeded():  # KIP-956: answered empty, read later
            for d in data:
                d.remote = None
        else:
            remote_bytes = await _read_remote(broker, data, isolation == READ_COMMITTED)
            if remote_quota is not None:
                remote_quota.record(remote_bytes)
    elif wanted and not errors and total < min_bytes and max_wait_ms > 0:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + max_wait_ms / 1000
        keys = [(w.topic, w.partition) for w in wanted]
        while True:
            if wants and not changed:  # the diskless partitions long-poll beside the local ones, read again each time
                from_bucket = await _wait_local_or_bucket(broker, keys, deadline - loop.time(), wants, max_bytes,
                                                          max(1, min_bytes - (total - already)))
                already = sum(d.size for d in from_bucket)
                if any(d.error_code != ErrorCode.none for d in from_bucket):
                    min_bytes = 0
            elif not changed:  # (changed: read again at once)
                await broker.waiters.wait(keys, deadline - loop.time())
            data, total, errors = await read()
            if errors or total >= min_bytes or loop.time() >= deadline:
                break
    if from_bucket:
        by_key = {(d.topic, d.partition): d for d in from_bucket}
        data = [by_key.get((d.topic, d.partition), d) for d in data]
    broker.metrics_fetch(data)
    # the fetch byte-rate quota and the request-time one (not counting the long poll)
    throttle = max(ctx.throttle(FETCH, sum(d.size for d in data)), ctx.request_throttle())
    error, response_session = ErrorCode.none, INVALID_SESSION_ID
    if session is not None:
        error, response_session, data = broker.fetch_sessions.respond(session, data)
    return encode_fetch_response(
        ctx.version,
        ctx.header.correlation_id,
        data + unknown_ids if unknown_ids and error == ErrorCode.none else data,
        error_code=error,
        session_id=response_session,
        read_committed=isolation == READ_COMMITTED,
        throttle_ms=throttle,
        topic_id=topic_id,
    )


async def _wait_local_or_bucket(broker: Any, keys: list[tuple[str, int]], timeout_s: float, wants: list[Any],
                                max_bytes: int, min_bytes: int) -> list[PartitionData]:
    """Until a local partition of a mixed Fetch gets an append or the diskless ones hold
    ``min_bytes`` (what the local ones lack of the Fetch's), or ``timeout_s``: the diskless
    partitions' answers, read again at that moment."""
    local = asyncio.ensure_future(broker.waiters.wait(keys, timeout_s))
    try:
        return await read_diskless(broker.diskless, wants, max_bytes, max(1, int(timeout_s * 1000)), interrupt=local,
                                   min_bytes=min_bytes)
    finally:
        local.cancel()


def _is_diskless(broker: Any, topic: str) -> bool:
    info = broker.controller.topic(topic)
    return info is not None and info.diskless


def _rack_of(broker: Any) -> Any:
    def rack(node_id: int) -> str | None:
        info = broker.controller.broker(node_id)
        return None if info is None else info.rack

    return rack


async def _read_remote(broker: Any, data: list[Any], committed: bool = False) -> int:
    """Fill the partitions planned from the bucket, waiting at most remote.fetch.max.wait.ms;
    returns the bytes they got (what the remote fetch quota counts).

    A read that takes longer keeps running on its tiered-fetch thread (it warms the
    chunk cache for the consumer's next fetch); this response carries the local
    partitions and an empty one for it.
    """
    reads = broker.tiered_reads
    pending = [d for d in data if d.remote is not None]
    filled = 0
    tasks = [
        asyncio.ensure_future(
            reads.read_committed(
                d.remote.target,
                d.remote.offset,
                d.remote.max_bytes,
                d.remote.min_one_message,
                broker.log_for(d.topic, d.partition),
            )
            if committed
            else reads.read(d.remote.target, d.remote.offset, d.remote.max_bytes, d.remote.min_one_message)
        )
        for d in pending
    ]
    done, _ = await asyncio.wait(tasks, timeout=reads.fetch_max_wait_ms / 1000)
    for d, task in zip(pending, tasks):
        d.remote = None
        if task not in done:
            task.add_done_callback(_consume_result)
            continue
        exc = task.exception()
        if isinstance(exc, KafkaError):
            d.error_code, d.error_message = exc.code, exc.message
        elif exc is not None:
            log.error("tiered read of %s-%d failed: %s", d.topic, d.partition, exc)
            d.error_code = ErrorCode.kafka_storage_error
        else:
            result = task.result()
            parts, aborted = result if committed else (result, [])
            if parts:
                d.regions = list(parts)
                d.size = frame_size(parts)
                d.aborted = aborted
                filled += d.size
    return filled


def _consume_result(task: asyncio.Future[Any]) -> None:
    if not task.cancelled():
        task.exception()  # retrieved: a late failure is not an "unhandled exception"
