"""Transaction APIs: AddPartitionsToTxn, AddOffsetsToTxn, EndTxn,
TxnOffsetCommit, DescribeTransactions, ListTransactions, DescribeProducers.

Each handler turns one version of the request into a call on the broker's
:class:`service.transactions.TransactionCoordinator` (or, for TxnOffsetCommit,
the group coordinator's pending offsets) and the answer into that version's
response. Fencing is answered as Kafka does per version: ``PRODUCER_FENCED``
from AddPartitionsToTxn/AddOffsetsToTxn/EndTxn v2 on, and
``INVALID_PRODUCER_EPOCH`` before (clients that old do not know the newer code).
InitProducerId is :mod:`service.handlers.producer_ids`'s; with a transactional
id it calls the coordinator (``Broker.transaction_coordinator``). DescribeProducers
reads a partition's producer state (:mod:`local_tier.producer_state`), as
kafka-transactions.sh's describe-producers asks it of the partition's leader.
"""

from __future__ import annotations

import datetime
from collections import defaultdict
from dataclasses import replace
from typing import Any

from common.errors import ErrorCode, KafkaError
from common.protocol.codec import build, response_module
from controller.topic_changes import check_topic_name
from service.groups.records import partition_for
from service.groups.runtime import ensure_offsets_topic as create_offsets_topic
from service.handlers.authz import require_topic
from service.handlers.context import RequestContext
from service.handlers.groups import codes_by_topic, offsets_to_commit
from service.security.acls import CLUSTER_NAME
from service.security.acls import AclOperation as Op
from service.security.acls import ResourceType as Res
from service.transactions.metadata import TopicPartition
from service.transactions.verification import verify_in_transaction

__all__ = [
    "handle_add_offsets_to_txn",
    "handle_add_partitions_to_txn",
    "handle_describe_producers",
    "handle_describe_transactions",
    "handle_end_txn",
    "handle_list_transactions",
    "handle_txn_offset_commit",
]

E = ErrorCode
_OFFSETS_TOPIC = "__consumer_offsets"


def _fenced(code: ErrorCode, version: int, first_version_with_fenced: int) -> ErrorCode:
    if code == E.producer_fenced and version < first_version_with_fenced:
        return E.invalid_producer_epoch
    return code


def _count(ctx: RequestContext, api: str, code: ErrorCode) -> ErrorCode:
    if code != E.none:
        ctx.broker.metrics_error(api, code)
    return code


# --------------------------------------------------------------------------- AddPartitionsToTxn


async def _add_partitions(ctx: RequestContext, tid: str, pid: int, epoch: int, topics: Any,
                          verify_only: bool) -> dict[TopicPartition, ErrorCode]:
    """Kafka's KafkaApis checks: unknown partitions fail the whole request (others not attempted)."""
    broker = ctx.broker
    wanted = [(t.name, int(p)) for t in topics for p in t.partitions]
    if verify_only and not ctx.allowed(Op.CLUSTER_ACTION, Res.CLUSTER, CLUSTER_NAME):  # from brokers only
        return dict.fromkeys(wanted, E.cluster_authorization_failed)
    if not verify_only and not ctx.allowed(Op.WRITE, Res.TRANSACTIONAL_ID, tid):
        return dict.fromkeys(wanted, E.transactional_id_authorization_failed)
    denied = {tp for tp in wanted if not ctx.allowed(Op.WRITE, Res.TOPIC, tp[0])}
    if denied:  # Kafka: the topics it may not WRITE fail, the others are not attempted
        return {tp: E.topic_authorization_failed if tp in denied else E.operation_not_attempted for tp in wanted}
    unknown = {
        tp for tp in wanted
        if (info := broker.controller.topic(tp[0])) is None or not 0 <= tp[1] < info.partitions
    }
    if unknown:
        return {tp: E.unknown_topic_or_partition if tp in unknown else E.operation_not_attempted
                for tp in wanted}
    coordinator = broker.transactions
    if verify_only:
        return coordinator.verify_partitions(tid, pid, epoch, wanted)
    code = await coordinator.add_partitions(tid, pid, epoch, wanted)
    return dict.fromkeys(wanted, code)


def _topic_results(mod: Any, results: dict[TopicPartition, ErrorCode]) -> tuple[Any, ...]:
    return codes_by_topic(results, mod.AddPartitionsToTxnTopicResult, mod.AddPartitionsToTxnPartitionResult,
                          partitions="results_by_partition", code="partition_error_code")


async def handle_add_partitions_to_txn(ctx: RequestContext, request: Any) -> Any:
    mod = response_module(24, ctx.version)
    if ctx.version < 4:
        results = await _add_partitions(
            ctx, request.v3_and_below_transactional_id, int(request.v3_and_below_producer_id),
            int(request.v3_and_below_producer_epoch), request.v3_and_below_topics, verify_only=False,
        )
        results = {tp: _count(ctx, "AddPartitionsToTxn", _fenced(c, ctx.version, 2))
                   for tp, c in results.items()}
        return build(mod.AddPartitionsToTxnResponse, throttle_time=0,
                     results_by_topic_v3_and_below=_topic_results(mod, results))
    # v4+: the batched form brokers send, one entry per transaction (KIP-890).
    answers = []
    for txn in request.transactions:
        results = await _add_partitions(ctx, txn.transactional_id, int(txn.producer_id), int(txn.producer_epoch),
                                  txn.topics, verify_only=bool(txn.verify_only))
        for code in results.values():
            _count(ctx, "AddPartitionsToTxn", code)
        answers.append(build(mod.AddPartitionsToTxnResult, transactional_id=txn.transactional_id,
                             topic_results=_topic_results(mod, results)))
    return build(mod.AddPartitionsToTxnResponse, throttle_time=0, error_code=E.none,
                 results_by_transaction=tuple(answers))


# --------------------------------------------------------------------------- AddOffsetsToTxn, EndTxn


async def handle_add_offsets_to_txn(ctx: RequestContext, request: Any) -> Any:
    """Adds the group's ``__consumer_offsets`` partition to the transaction."""
    broker = ctx.broker
    try:
        partitions = broker.groups.ensure_offsets_topic()
    except KafkaError:  # no group used __consumer_offsets yet: made here, as FindCoordinator makes it
        try:
            partitions = (await create_offsets_topic(broker)).partitions
        except KafkaError:  # e.g. too few brokers yet for its replication factor: a code producers retry
            code = _count(ctx, "AddOffsetsToTxn", E.coordinator_not_available)
            return build(response_module(25, ctx.version).AddOffsetsToTxnResponse, throttle_time=0,
                         error_code=code)
    tp = (_OFFSETS_TOPIC, partition_for(request.group_id, partitions))
    code = await broker.transactions.add_partitions(
        request.transactional_id, int(request.producer_id), int(request.producer_epoch), [tp]
    )
    code = _count(ctx, "AddOffsetsToTxn", _fenced(code, ctx.version, 2))
    return build(response_module(25, ctx.version).AddOffsetsToTxnResponse, throttle_time=0, error_code=code)


async def handle_end_txn(ctx: RequestContext, request: Any) -> Any:
    code = await ctx.broker.transactions.end_txn(
        request.transactional_id, int(request.producer_id), int(request.producer_epoch),
        bool(request.committed),
    )
    code = _count(ctx, "EndTxn", _fenced(code, ctx.version, 2))
    return build(response_module(26, ctx.version).EndTxnResponse, throttle_time=0, error_code=code)


# --------------------------------------------------------------------------- TxnOffsetCommit


async def handle_txn_offset_commit(ctx: RequestContext, request: Any) -> Any:
    broker = ctx.broker
    mod = response_module(28, ctx.version)
    pid, epoch = int(request.producer_id), int(request.producer_epoch)
    offsets = offsets_to_commit(request.topics)
    refused = _txn_commit_refused(ctx, request, offsets)
    if refused:
        for code in refused.values():
            _count(ctx, "TxnOffsetCommit", code)
        return build(mod.TxnOffsetCommitResponse, throttle_time=0, topics=codes_by_topic(
            refused, mod.TxnOffsetCommitResponseTopic, mod.TxnOffsetCommitResponsePartition))
    try:
        offsets_tp = (_OFFSETS_TOPIC, partition_for(request.group_id, broker.groups.ensure_offsets_topic()))
    except KafkaError as exc:  # no __consumer_offsets yet: no coordinator of the group
        for _ in offsets:
            _count(ctx, "TxnOffsetCommit", exc.code)
        return build(mod.TxnOffsetCommitResponse, throttle_time=0, topics=codes_by_topic(
            dict.fromkeys(offsets, exc.code), mod.TxnOffsetCommitResponseTopic, mod.TxnOffsetCommitResponsePartition))
    # The producer must hold the transactional id and have added the group (AddOffsetsToTxn):
    # its transaction coordinator says so, here or on the broker that leads its partition.
    peers = broker.cluster.marker_peers if broker.cluster is not None else None
    check = await verify_in_transaction(
        broker.transactions, broker.controller, peers, broker.node_id, request.transactional_id,
        pid, epoch, offsets_tp, broker.config.get_int("controller.socket.timeout.ms") / 1000,
    )
    if check == E.producer_fenced:
        check = E.invalid_producer_epoch
    results: dict[TopicPartition, ErrorCode]
    if check != E.none:
        results = dict.fromkeys(offsets, check)
    else:
        results = broker.groups.txn_commit_offsets(
            request.group_id, pid, epoch, int(getattr(request, "generation_id", -1)),
            getattr(request, "member_id", ""), getattr(request, "group_instance_id", None), offsets,
        )
    for code in results.values():
        _count(ctx, "TxnOffsetCommit", code)
    topics = codes_by_topic(results, mod.TxnOffsetCommitResponseTopic, mod.TxnOffsetCommitResponsePartition)
    return build(mod.TxnOffsetCommitResponse, throttle_time=0, topics=topics)


# --------------------------------------------------------------------------- Describe, List


def _txn_commit_refused(ctx: RequestContext, request: Any, offsets: Any) -> dict[TopicPartition, ErrorCode]:
    """Kafka's TxnOffsetCommit checks: WRITE on the transactional id, READ on the group, then
    READ on each topic (the others are then not attempted either); empty when allowed."""
    if not ctx.allowed(Op.WRITE, Res.TRANSACTIONAL_ID, request.transactional_id):
        return dict.fromkeys(offsets, E.transactional_id_authorization_failed)
    if not ctx.allowed(Op.READ, Res.GROUP, request.group_id):
        return dict.fromkeys(offsets, E.group_authorization_failed)
    denied = {tp for tp in offsets if not ctx.allowed(Op.READ, Res.TOPIC, tp[0])}
    return {tp: E.topic_authorization_failed if tp in denied else E.operation_not_attempted
            for tp in offsets} if denied else {}


def handle_describe_transactions(ctx: RequestContext, request: Any) -> Any:
    mod = response_module(65, ctx.version)
    states = []
    for tid in request.transactional_ids:
        d = ctx.broker.transactions.describe(tid)
        if not ctx.allowed(Op.DESCRIBE, Res.TRANSACTIONAL_ID, tid):
            states.append(build(mod.TransactionState, error_code=E.transactional_id_authorization_failed,
                                transactional_id=tid, transaction_state="", transaction_timeout=0,
                                transaction_start_time=_start_time(-1), producer_id=-1, producer_epoch=-1,
                                topics=()))
            continue
        # topics it may not DESCRIBE are left out of the answer (Kafka)
        d = replace(d, partitions=tuple(tp for tp in d.partitions if ctx.allowed(Op.DESCRIBE, Res.TOPIC, tp[0])))
        _count(ctx, "DescribeTransactions", d.error)
        by_topic: dict[str, list[int]] = defaultdict(list)
        for topic, partition in d.partitions:
            by_topic[topic].append(partition)
        states.append(build(
            mod.TransactionState, error_code=d.error, transactional_id=tid, transaction_state=d.state,
            transaction_timeout=d.timeout_ms, transaction_start_time=_start_time(d.start_ms),
            producer_id=d.producer_id, producer_epoch=d.producer_epoch,
            topics=tuple(build(mod.TopicData, topic=t, partitions=tuple(ps)) for t, ps in by_topic.items()),
        ))
    return build(mod.DescribeTransactionsResponse, throttle_time=0, transaction_states=tuple(states))


def _start_time(ms: int) -> datetime.datetime:
    """The start time as kio writes it; -1 (no transaction) is a non-null field in Kafka's schema."""
    return datetime.datetime.fromtimestamp(ms / 1000, tz=datetime.UTC)


def handle_list_transactions(ctx: RequestContext, request: Any) -> Any:
    mod = response_module(66, ctx.version)
    error, unknown, found = ctx.broker.transactions.list_transactions(
        request.state_filters, [int(p) for p in request.producer_id_filters],
        int(getattr(request, "duration_filter", -1)), getattr(request, "transactional_id_pattern", None),
    )
    _count(ctx, "ListTransactions", error)
    return build(
        mod.ListTransactionsResponse, throttle_time=0, error_code=error, unknown_state_filters=tuple(unknown),
        transaction_states=tuple(
            build(mod.TransactionState, transactional_id=t, producer_id=p, transaction_state=s)
            for t, p, s in found if ctx.allowed(Op.DESCRIBE, Res.TRANSACTIONAL_ID, t)
        ),
    )


# --------------------------------------------------------------------------- DescribeProducers


def handle_describe_producers(ctx: RequestContext, request: Any) -> Any:
    """Kafka's checks: an illegal topic name or an unknown topic fails each of its partitions;
    a partition the topic lacks is UNKNOWN_TOPIC_OR_PARTITION, one this broker does not host
    NOT_LEADER_OR_FOLLOWER (the client's metadata is stale)."""
    mod = response_module(61, ctx.version)
    broker = ctx.broker
    topics = []
    for topic in request.topics:
        error, message = E.none, None
        try:
            check_topic_name(topic.name)
            require_topic(ctx, Op.READ, topic.name)
            info = broker.controller.topic(topic.name)
            count = -1 if info is None else info.partitions
        except KafkaError as exc:
            error, message, count = exc.code, exc.message, -1
        if error == E.none and count < 0:
            error = E.unknown_topic_or_partition
        partitions = []
        for index in topic.partition_indexes:
            fields: dict[str, Any] = {"error_code": error, "error_message": message}
            if error == E.none:
                log = broker.logs.get_log(topic.name, int(index))
                if not 0 <= index < count:
                    fields["error_code"] = E.unknown_topic_or_partition
                elif log is None:
                    fields["error_code"] = E.not_leader_or_follower
                else:
                    fields["active_producers"] = tuple(
                        build(mod.ProducerState, producer_id=pid, producer_epoch=entry.producer_epoch,
                              last_sequence=entry.last_seq, last_timestamp=entry.last_timestamp,
                              coordinator_epoch=entry.coordinator_epoch,
                              current_txn_start_offset=_or_none(entry.current_txn_first_offset))
                        for pid, entry in sorted(log.producer_state.producers.items())
                    )
            _count(ctx, "DescribeProducers", fields["error_code"])
            partitions.append(build(mod.PartitionResponse, partition_index=index, **fields))
        topics.append(build(mod.TopicResponse, name=topic.name, partitions=tuple(partitions)))
    return build(mod.DescribeProducersResponse, throttle_time=0, topics=tuple(topics))


def _or_none(offset: int | None) -> int:
    return -1 if offset is None else offset
