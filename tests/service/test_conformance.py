"""Every API at every version the broker advertises answers well-formed, with the right error code.

The versions come from the router's api table (what ApiVersions advertises), so an
API added later is covered at once: :func:`test_every_advertised_version_answers_a_plausible_request`
sends each version a request with every field filled (``kafka_wire.example_request``)
and wants an answer that kio decodes at that version, never a closed connection.

:data:`CASES` is the table of requests with a known answer: a valid one per API and
one per error path (unknown topic, bad config, existing topic, invalid partitions,
unknown group or member, corrupt records, ...). Each runs at every advertised
version of its API (or the ``versions`` it names) and must get the expected error
code (per version when the code changed between versions, as Kafka's did). To cover
a new API or error path, add a :class:`Case`.

Expected codes are Apache Kafka 4.1's for the same request (its group coordinator
and controller sources), except where the table says otherwise.
"""

from __future__ import annotations

import itertools
import struct
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from kio.schema.errors import ErrorCode as E

from service.handlers.router import api_table, hand_decoders
from tests.service.kafka_wire import (
    BrokerClosed,
    WireConnection,
    error_codes,
    example_request,
    records,
    with_crc,
)

TOPIC = "conformance"


class Env:
    """The broker under test, one connection to it, and fresh names on demand."""

    def __init__(self, bootstrap: str, leader_epoch: int = 0) -> None:
        self.bootstrap = bootstrap
        self.conn = WireConnection(bootstrap)
        self._ids = itertools.count()
        #: ``TOPIC``'s leader epoch (above 0: the broker restarted once since it was created)
        self.leader_epoch = leader_epoch
        self._topic_id: uuid.UUID | None = None

    def topic_id(self) -> uuid.UUID:
        """``TOPIC``'s id (Fetch v13+ names topics by id), from a Metadata answer."""
        if self._topic_id is None:
            answer = self.call(example_request(3, 12, name=TOPIC))
            self._topic_id = answer.topics[0].topic_id
        assert self._topic_id is not None
        return self._topic_id

    def call(self, body: Any) -> Any:
        try:
            return self.conn.call(body)
        except (BrokerClosed, OSError):
            self.conn.close()
            self.conn = WireConnection(self.bootstrap)
            raise

    def unique(self, prefix: str) -> str:
        return f"{prefix}-{next(self._ids)}"

    def new_topic(self, partitions: int = 1, **configs: str) -> str:
        name = self.unique("conf-topic")
        answer = self.call(example_request(19, 7, name=name, num_partitions=partitions,
                                           configs=[{"name": k, "value": v} for k, v in configs.items()]))
        assert error_codes(answer) == [E.none]
        return name

    def compacted_topic(self) -> str:
        """A topic with ``cleanup.policy=compact`` (local only) holding one keyed record."""
        name = self.new_topic(1, **{"cleanup.policy": "compact", "remote.storage.enable": "false"})
        assert error_codes(self.call(example_request(0, 9, name=name, index=0))) == [E.none]
        return name

    def consumer_group(self) -> str:
        """A consumer-protocol group (KIP-848) with one member."""
        join = _consumer_join(self)
        answer = self.call(example_request(68, 0, **join))
        assert error_codes(answer) == [E.none], answer
        return str(join["group_id"])

    def init_txn(self, tid: str | None = None) -> Txn:
        """A transactional id initialized by InitProducerId (state Empty), with its producer id and epoch."""
        tid = tid or self.unique("conf-txn")
        answer = self.call(example_request(22, 4, transactional_id=tid, producer_id=-1, producer_epoch=-1))
        assert error_codes(answer) == [E.none], answer
        return Txn(tid, int(answer.producer_id), int(answer.producer_epoch))

    def ongoing_txn(self, partition: int = 0) -> Txn:
        """A transaction holding ``TOPIC``'s ``partition`` (state Ongoing)."""
        txn = self.init_txn()
        answer = self.call(example_request(24, 3, **txn.values(partitions=(partition,))))
        assert error_codes(answer) == [E.none], answer
        return txn

    def fenced_txn(self) -> Txn:
        """A producer fenced by a second InitProducerId of its transactional id (epoch bumped)."""
        txn = self.init_txn()
        self.init_txn(txn.id)
        return txn

    def group_with_offsets(self) -> str:
        """An Empty group holding a committed offset (a 'simple' group, generation -1)."""
        group = self.unique("conf-group")
        answer = self.call(example_request(8, 2, group_id=group, name=TOPIC, partition_index=0))
        assert error_codes(answer) == [E.none]
        return group


Values = Callable[[Env, int], dict[str, Any]]
Expected = int | tuple[int, ...]


@dataclass(frozen=True)
class Txn:
    """A transactional producer: its id, producer id and epoch."""

    id: str
    producer_id: int
    producer_epoch: int

    def values(self, **extra: Any) -> dict[str, Any]:
        """Request values naming this producer, in every transaction API's field names
        (AddPartitionsToTxn v0-v3's ``v3_and_below_*`` too)."""
        fields = {"transactional_id": self.id, "producer_id": self.producer_id,
                  "producer_epoch": self.producer_epoch}
        return {**fields, **{f"v3_and_below_{k}": v for k, v in fields.items()}, "name": TOPIC, **extra}


@dataclass(frozen=True)
class Case:
    """One request with a known answer, sent at every advertised version of ``api``."""

    api: int
    label: str
    values: Values
    #: the error code the answer carries (per version when a callable); a tuple: exactly
    #: these codes besides E.none (a request failing some partitions and not attempting the others)
    expect: Expected | Callable[[int], Expected] = E.none
    #: versions to send; default: every version the broker advertises
    versions: range | None = None
    marks: tuple[Any, ...] = field(default=())

    def expected(self, version: int) -> Expected:
        return self.expect(version) if callable(self.expect) else self.expect


def _topic(**extra: Any) -> Values:
    return lambda env, v: {"name": TOPIC, "topic": TOPIC, "resource_name": TOPIC, **extra}


def _fetch(**extra: Any) -> Values:
    """``TOPIC`` in a Fetch: by name below v13, by id from v13."""
    return lambda env, v: {"topic": TOPIC, "topic_id": env.topic_id() if v >= 13 else None, **extra}


def _group(**extra: Any) -> Values:
    def values(env: Env, version: int) -> dict[str, Any]:
        group = env.unique("conf-group")
        return {"group_id": group, "key": group, "coordinator_keys": (group,), "groups": (group,),
                "groups_names": (group,), "name": TOPIC, **extra}

    return values


def _consumer_join(env: Env) -> dict[str, Any]:
    """A first ConsumerGroupHeartbeat (epoch 0) of a new member of a new group."""
    return {"group_id": env.unique("conf-consumer-group"), "member_id": str(uuid.uuid4()), "member_epoch": 0,
            "instance_id": None, "rack_id": None, "rebalance_timeout": 30_000,
            "subscribed_topic_names": (TOPIC,), "subscribed_topic_regex": None, "server_assignor": None,
            "topic_partitions": ()}


def _ended(env: Env, committed: bool) -> dict[str, Any]:
    """A producer whose transaction was just committed or aborted (EndTxn answered E.none)."""
    values = env.ongoing_txn().values(committed=committed)
    assert error_codes(env.call(example_request(26, 3, **values))) == [E.none]
    return values


def _txn_offsets(env: Env, txn: Txn, add_group: bool) -> dict[str, Any]:
    """TxnOffsetCommit values for a new group (added to ``txn`` by AddOffsetsToTxn when ``add_group``)."""
    group = env.unique("conf-group")
    if add_group:
        assert error_codes(env.call(example_request(25, 3, **txn.values(group_id=group)))) == [E.none]
    return txn.values(group_id=group, partition_index=0, generation_id=-1, member_id="", group_instance_id=None)


def _epoch(offset: int, **extra: Any) -> Values:
    """``TOPIC`` partition 0 with a current leader epoch ``offset`` from the leader's, in every
    API's field names (Fetch's ``topic``/``partition``, ListOffsets' ``name``/``partition_index``)."""
    return lambda env, v: {"name": TOPIC, "topic": TOPIC, "partition": 0, "partition_index": 0,
                           "current_leader_epoch": env.leader_epoch + offset,
                           "topic_id": env.topic_id() if v >= 13 else None, **extra}


def _lying_batch() -> bytes:
    """Three records declared, but the second record's length runs past the batch; CRC correct."""
    batch = bytearray(records(3))
    first_len = batch[61]  # zig-zag varint of record 0's length (< 64: one byte)
    second = 61 + 1 + first_len // 2
    batch[second] = 0x7E  # record 1 claims 63 bytes
    return with_crc(batch)


def _control_batch() -> bytes:
    """A transaction marker written by a client (Kafka: only the broker writes them)."""
    batch = bytearray(records(1))
    struct.pack_into(">h", batch, 21, 0x20 | 0x10)  # attributes: control, transactional
    return with_crc(batch)


def _garbage_gzip_batch() -> bytes:
    """A gzip batch whose payload is not gzip at all; CRC correct."""
    batch = bytearray(records(1))[:61] + b"\x1f\x8b\x08" + b"not gzip at all " * 4
    struct.pack_into(">i", batch, 8, len(batch) - 12)  # batch length
    struct.pack_into(">h", batch, 21, 1)  # attributes: gzip
    return with_crc(batch)


CASES: list[Case] = [
    # -- Produce
    Case(0, "valid", _topic(index=0)),
    Case(0, "unknown topic", lambda env, v: {"name": "no-such-topic"}, E.unknown_topic_or_partition),
    Case(0, "unknown partition", _topic(index=99), E.unknown_topic_or_partition),
    Case(0, "bad acks", _topic(index=0, acks=2), E.invalid_required_acks),
    Case(0, "wrong CRC", _topic(index=0, records=bytes(records(3))[:-1] + b"\xff"), E.corrupt_message),
    Case(0, "records that lie inside a correct CRC", _topic(index=0, records=_lying_batch()), E.invalid_record),
    Case(0, "garbage gzip payload with a correct CRC", _topic(index=0, records=_garbage_gzip_batch()),
         E.invalid_record),
    Case(0, "control batch from a client", _topic(index=0, records=_control_batch()), E.invalid_record),
    Case(0, "record without a key to a compacted topic",
         lambda env, v: {"name": env.compacted_topic(), "index": 0, "records": records(2, keyless=(1,))},
         E.invalid_record),
    # -- Fetch
    Case(1, "valid", _fetch(partition=0)),
    Case(1, "unknown topic", lambda env, v: {"topic": "no-such-topic", "topic_id": uuid.uuid4()},
         lambda v: E.unknown_topic_id if v >= 13 else E.unknown_topic_or_partition),
    Case(1, "unknown partition", _fetch(partition=99), E.unknown_topic_or_partition),
    Case(1, "offset out of range", _fetch(partition=0, fetch_offset=10**12), E.offset_out_of_range),
    Case(1, "current leader epoch", _epoch(0), versions=range(9, 18)),
    Case(1, "older current leader epoch", _epoch(-1), E.fenced_leader_epoch, versions=range(9, 18)),
    Case(1, "newer current leader epoch", _epoch(+1), E.unknown_leader_epoch, versions=range(9, 18)),
    # -- ListOffsets
    Case(2, "valid", _topic(partition_index=0)),
    Case(2, "unknown topic", lambda env, v: {"name": "no-such-topic"}, E.unknown_topic_or_partition),
    Case(2, "unknown partition", _topic(partition_index=99), E.unknown_topic_or_partition),
    Case(2, "current leader epoch", _epoch(0), versions=range(4, 11)),
    Case(2, "older current leader epoch", _epoch(-1), E.fenced_leader_epoch, versions=range(4, 11)),
    Case(2, "newer current leader epoch", _epoch(+1), E.unknown_leader_epoch, versions=range(4, 11)),
    # -- Metadata
    Case(3, "valid", _topic()),
    Case(3, "all topics", lambda env, v: {"topics": None if v >= 1 else ()}),
    Case(3, "unknown topic", lambda env, v: {"name": "no-such-topic"}, E.unknown_topic_or_partition),
    Case(3, "unknown topic id", lambda env, v: {"name": None, "topic_id": uuid.uuid4()},
         lambda v: E.unknown_topic_id if v >= 12 else E.invalid_request, versions=range(10, 13)),
    # -- OffsetCommit
    Case(8, "valid (simple group)", _group(partition_index=0)),
    Case(8, "unknown topic", _group(name="no-such-topic"), E.unknown_topic_or_partition),
    # Kafka 4.1 answers E.group_id_not_found from v9; Strata keeps E.illegal_generation (the
    # consumer rejoins instead of failing the commit for good). Noted in issue 21's report.
    Case(8, "generation of a group that does not exist",
         _group(partition_index=0, generation_id_or_member_epoch=3, generation_id=3, member_id="m"),
         E.illegal_generation),
    Case(8, "unknown member of an existing group",
         lambda env, v: {"group_id": env.group_with_offsets(), "name": TOPIC, "partition_index": 0,
                         "generation_id_or_member_epoch": 1, "generation_id": 1, "member_id": "nobody"},
         E.unknown_member_id),
    # -- OffsetFetch
    Case(9, "valid", lambda env, v: {"group_id": env.group_with_offsets(), "name": TOPIC,
                                     "partition_indexes": (0,)}),
    Case(9, "all partitions", lambda env, v: {"group_id": env.group_with_offsets(), "topics": None},
         versions=range(2, 10)),
    Case(9, "unknown group", lambda env, v: {"group_id": env.unique("conf-group"), "name": TOPIC,
                                             "partition_indexes": (0,)}),
    # -- FindCoordinator (Kafka: an unknown key type is an InvalidRequestException; share groups'
    # key type 2 is INVALID_REQUEST below v6)
    Case(10, "valid", _group()),
    Case(10, "unknown key type", _group(key_type=7), E.invalid_request, versions=range(1, 6)),
    Case(10, "share key type below v6", _group(key_type=2), E.invalid_request, versions=range(1, 6)),
    # -- JoinGroup
    Case(11, "first join", _group(), lambda v: E.member_id_required if v >= 4 else E.none),
    Case(11, "session timeout out of range", _group(session_timeout=1), E.invalid_session_timeout),
    Case(11, "unknown member id", _group(member_id="nobody"), E.unknown_member_id),
    Case(11, "no protocols", _group(protocols=()), E.inconsistent_group_protocol),
    # -- Heartbeat, LeaveGroup, SyncGroup (Kafka: E.unknown_member_id for a group that does not exist)
    Case(12, "unknown group", _group(member_id="nobody", generation_id=1), E.unknown_member_id),
    Case(13, "unknown group", _group(member_id="nobody"), E.unknown_member_id),
    Case(14, "unknown group", _group(member_id="nobody", generation_id=1), E.unknown_member_id),
    # -- DescribeGroups (v0-v5 report an unknown group as Dead, with no error; v6 E.group_id_not_found)
    Case(15, "unknown group", _group(), lambda v: E.group_id_not_found if v >= 6 else E.none),
    # -- ListGroups (Kafka has no error path here but authorization and a coordinator not yet
    # active: an unknown state or type filter matches no group, without an error)
    Case(16, "valid", lambda env, v: {}),
    Case(16, "unknown state filter", lambda env, v: {"states_filter": ("NoSuchState",)}, versions=range(4, 6)),
    Case(16, "unknown type filter", lambda env, v: {"types_filter": ("nosuchtype",)}, versions=range(5, 6)),
    # -- ApiVersions
    Case(18, "valid", lambda env, v: {}),
    # -- CreateTopics
    Case(19, "valid", lambda env, v: {"name": env.unique("conf-new")}),
    Case(19, "validate only", lambda env, v: {"name": env.unique("conf-new"), "validate_only": True}),
    Case(19, "existing topic", _topic(), E.topic_already_exists),
    Case(19, "bad config value", lambda env, v: {"name": env.unique("conf-new"),
                                                  "configs": [{"name": "retention.ms", "value": "soon"}]},
         E.invalid_config),
    Case(19, "unknown config", lambda env, v: {"name": env.unique("conf-new"),
                                                "configs": [{"name": "no.such.config", "value": "1"}]},
         E.invalid_config),
    Case(19, "zero partitions", lambda env, v: {"name": env.unique("conf-new"), "num_partitions": 0},
         E.invalid_partitions),
    Case(19, "replication factor above the broker count",
         lambda env, v: {"name": env.unique("conf-new"), "replication_factor": 3}, E.invalid_replication_factor),
    Case(19, "invalid name", lambda env, v: {"name": "bad/name"}, E.invalid_topic_exception),
    Case(19, "same topic twice", lambda env, v: {"topics": [{"name": "conf-twice"}, {"name": "conf-twice"}]},
         E.invalid_request),
    # -- DeleteTopics
    Case(20, "valid", lambda env, v: {"topic_names": ((name := env.new_topic()),), "name": name}),
    Case(20, "unknown topic", lambda env, v: {"topic_names": ("no-such-topic",), "name": "no-such-topic"},
         E.unknown_topic_or_partition),
    Case(20, "unknown topic id", lambda env, v: {"name": None, "topic_id": uuid.uuid4()}, E.unknown_topic_id,
         versions=range(6, 7)),
    # -- DescribeConfigs
    Case(32, "valid topic", _topic()),
    Case(32, "valid broker", lambda env, v: {"resource_type": 4, "resource_name": "1"}),
    Case(32, "unknown topic", lambda env, v: {"resource_name": "no-such-topic"}, E.unknown_topic_or_partition),
    Case(32, "unknown resource type", lambda env, v: {"resource_type": 99, "resource_name": TOPIC},
         E.invalid_request),
    # -- CreatePartitions
    Case(37, "valid", lambda env, v: {"name": env.new_topic(1), "count": 2}),
    Case(37, "unknown topic", lambda env, v: {"name": "no-such-topic", "count": 2}, E.unknown_topic_or_partition),
    Case(37, "fewer partitions", _topic(count=1), E.invalid_partitions),
    # -- DeleteGroups
    Case(42, "valid (empty group)", lambda env, v: {"groups_names": (env.group_with_offsets(),)}),
    Case(42, "unknown group", _group(), E.group_id_not_found),
    # -- IncrementalAlterConfigs
    Case(44, "valid", _topic(configs=[{"name": "retention.ms", "value": "86400000"}])),
    Case(44, "unknown topic", lambda env, v: {"resource_name": "no-such-topic",
                                               "configs": [{"name": "retention.ms", "value": "86400000"}]},
         E.unknown_topic_or_partition),
    Case(44, "bad config value", _topic(configs=[{"name": "retention.ms", "value": "soon"}]), E.invalid_config),
    Case(44, "unknown config", _topic(configs=[{"name": "no.such.config", "value": "1"}]), E.invalid_config),
    # -- OffsetDelete
    Case(47, "valid (empty group)", lambda env, v: {"group_id": env.group_with_offsets(), "name": TOPIC,
                                                     "partition_index": 0}),
    Case(47, "unknown group", _group(partition_index=0), E.group_id_not_found),
    # -- DescribeCluster (v1's endpoint type: a broker serves 1; Kafka's AuthHelper)
    Case(60, "valid", lambda env, v: {}),
    Case(60, "controller endpoint type asked of a broker", lambda env, v: {"endpoint_type": 2},
         E.mismatched_endpoint_type, versions=range(1, 2)),
    Case(60, "unknown endpoint type", lambda env, v: {"endpoint_type": 9}, E.unsupported_endpoint_type,
         versions=range(1, 2)),
    # -- DeleteRecords
    Case(21, "valid (up to the high watermark)",
         lambda env, v: {"name": env.new_topic(), "partition_index": 0, "offset": -1}),
    Case(21, "unknown topic", lambda env, v: {"name": "no-such-topic", "partition_index": 0, "offset": -1},
         E.unknown_topic_or_partition),
    Case(21, "offset past the high watermark",
         lambda env, v: {"name": env.new_topic(), "partition_index": 0, "offset": 5}, E.offset_out_of_range),
    # DeleteRecords carries no leader epoch (Kafka's schema): no fencing case
    Case(21, "compacted topic", lambda env, v: {"name": env.compacted_topic(), "partition_index": 0, "offset": 1},
         E.policy_violation),
    Case(21, "compact,delete topic",
         lambda env, v: {"name": env.new_topic(1, **{"cleanup.policy": "compact,delete"}), "partition_index": 0,
                         "offset": -1}),
    # -- InitProducerId
    Case(22, "idempotent producer", lambda env, v: {"transactional_id": None}),
    # -- OffsetForLeaderEpoch
    Case(23, "valid", _topic(partition=0, leader_epoch=0, current_leader_epoch=-1)),
    Case(23, "unknown topic", lambda env, v: {"topic": "no-such-topic", "partition": 0},
         E.unknown_topic_or_partition),
    Case(23, "unknown partition", _topic(partition=99), E.unknown_topic_or_partition),
    Case(23, "older current leader epoch", _epoch(-1, leader_epoch=0), E.fenced_leader_epoch),
    Case(23, "newer current leader epoch", _epoch(+1, leader_epoch=0), E.unknown_leader_epoch),
    # -- InitProducerId with a transactional id (Kafka's TransactionCoordinator, transaction version 1)
    Case(22, "transactional", lambda env, v: {"transactional_id": env.unique("conf-txn")}),
    Case(22, "empty transactional id", lambda env, v: {"transactional_id": ""}, E.invalid_request),
    Case(22, "transaction timeout above the maximum",
         lambda env, v: {"transactional_id": env.unique("conf-txn"), "transaction_timeout": 10**9},
         E.invalid_transaction_timeout),
    Case(22, "producer id without an epoch", lambda env, v: {"producer_id": 7, "producer_epoch": -1},
         E.invalid_request, versions=range(3, 6)),
    Case(22, "another producer's id (KIP-360)",
         lambda env, v: {**(txn := env.init_txn()).values(), "producer_id": txn.producer_id + 1000},
         lambda v: E.producer_fenced if v >= 4 else E.invalid_producer_epoch, versions=range(3, 6)),
    # the ongoing transaction of the previous epoch is aborted first; the client retries
    Case(22, "id with an ongoing transaction", lambda env, v: {"transactional_id": env.ongoing_txn().id},
         E.concurrent_transactions),
    # -- AddPartitionsToTxn: v0-v3 from clients, v4 batched from brokers (KIP-890), one answer per transaction
    Case(24, "valid", lambda env, v: env.init_txn().values(partitions=(0, 1))),
    Case(24, "verify a partition of the transaction", lambda env, v: {**env.ongoing_txn().values(),
                                                                      "verify_only": True},
         versions=range(4, 5)),
    Case(24, "verify a partition not in the transaction", lambda env, v: {**env.ongoing_txn(0).values(),
                                                                          "partitions": (1,), "verify_only": True},
         E.transaction_abortable, versions=range(4, 5)),
    Case(24, "unknown topic", lambda env, v: env.init_txn().values(name="no-such-topic"),
         E.unknown_topic_or_partition),
    Case(24, "unknown partition beside a known one", lambda env, v: env.init_txn().values(partitions=(0, 99)),
         (E.unknown_topic_or_partition, E.operation_not_attempted)),
    Case(24, "transactional id never initialized",
         lambda env, v: Txn(env.unique("conf-txn"), 4242, 0).values(), E.invalid_producer_id_mapping),
    Case(24, "another producer's id",
         lambda env, v: {**(txn := env.init_txn()).values(), "producer_id": txn.producer_id + 1000,
                         "v3_and_below_producer_id": txn.producer_id + 1000}, E.invalid_producer_id_mapping),
    Case(24, "fenced epoch", lambda env, v: env.fenced_txn().values(),
         lambda v: E.producer_fenced if v >= 2 else E.invalid_producer_epoch),
    Case(24, "empty transactional id", lambda env, v: Txn("", 4242, 0).values(), E.invalid_request),
    # -- AddOffsetsToTxn
    Case(25, "valid", lambda env, v: {**env.init_txn().values(), "group_id": env.unique("conf-group")}),
    Case(25, "transactional id never initialized",
         lambda env, v: {**Txn(env.unique("conf-txn"), 4242, 0).values(), "group_id": "g"},
         E.invalid_producer_id_mapping),
    Case(25, "fenced epoch", lambda env, v: {**env.fenced_txn().values(), "group_id": "g"},
         lambda v: E.producer_fenced if v >= 2 else E.invalid_producer_epoch),
    Case(25, "empty transactional id", lambda env, v: {**Txn("", 4242, 0).values(), "group_id": "g"},
         E.invalid_request),
    # -- EndTxn
    Case(26, "commit", lambda env, v: {**env.ongoing_txn().values(), "committed": True}),
    Case(26, "abort", lambda env, v: {**env.ongoing_txn().values(), "committed": False}),
    Case(26, "commit with no transaction open", lambda env, v: {**env.init_txn().values(), "committed": True},
         E.invalid_txn_state),
    # Prepare or Complete Abort, whichever the markers reached: both refuse a commit
    Case(26, "commit after an abort", lambda env, v: {**_ended(env, committed=False), "committed": True},
         E.invalid_txn_state),
    Case(26, "transactional id never initialized",
         lambda env, v: {**Txn(env.unique("conf-txn"), 4242, 0).values(), "committed": True},
         E.invalid_producer_id_mapping),
    Case(26, "fenced epoch", lambda env, v: {**env.fenced_txn().values(), "committed": True},
         lambda v: E.producer_fenced if v >= 2 else E.invalid_producer_epoch),
    Case(26, "empty transactional id", lambda env, v: {**Txn("", 4242, 0).values(), "committed": True},
         E.invalid_request),
    # -- TxnOffsetCommit (fencing is E.invalid_producer_epoch at every version, as Kafka's verification answers)
    Case(28, "valid", lambda env, v: _txn_offsets(env, env.ongoing_txn(), add_group=True)),
    Case(28, "group not added to the transaction",
         lambda env, v: _txn_offsets(env, env.ongoing_txn(), add_group=False), E.invalid_txn_state),
    Case(28, "transactional id never initialized",
         lambda env, v: _txn_offsets(env, Txn(env.unique("conf-txn"), 4242, 0), add_group=False),
         E.invalid_producer_id_mapping),
    Case(28, "fenced epoch", lambda env, v: _txn_offsets(env, env.fenced_txn(), add_group=False),
         E.invalid_producer_epoch),
    # -- DescribeProducers
    Case(61, "valid", _topic(partition_indexes=(0, 1))),
    Case(61, "unknown topic", lambda env, v: {"name": "no-such-topic", "partition_indexes": (0,)},
         E.unknown_topic_or_partition),
    Case(61, "unknown partition", _topic(partition_indexes=(99,)), E.unknown_topic_or_partition),
    Case(61, "invalid topic name", lambda env, v: {"name": "bad/name", "partition_indexes": (0,)}, E.invalid_topic_exception),
    # -- DescribeTransactions
    Case(65, "ongoing transaction", lambda env, v: {"transactional_ids": (env.ongoing_txn().id,)}),
    Case(65, "unknown transactional id", lambda env, v: {"transactional_ids": (env.unique("conf-txn"),)},
         E.transactional_id_not_found),
    Case(65, "empty transactional id", lambda env, v: {"transactional_ids": ("",)}, E.invalid_request),
    # -- ListTransactions
    Case(66, "valid", lambda env, v: {"state_filters": (), "producer_id_filters": (), "duration_filter": -1,
                                      "transactional_id_pattern": None}),
    Case(66, "unknown state filter", lambda env, v: {"state_filters": ("NoSuchState",)}),
    Case(66, "invalid id pattern", lambda env, v: {"transactional_id_pattern": "conf-txn-("},
         E.invalid_regular_expression, versions=range(2, 3)),
    # -- WriteTxnMarkers (broker to broker)
    Case(27, "abort marker", lambda env, v: {**env.ongoing_txn().values(), "transaction_result": False,
                                            "partition_indexes": (0,), "coordinator_epoch": 0}),
    Case(27, "unknown topic", lambda env, v: {"producer_id": 4242, "producer_epoch": 0, "name": "no-such-topic",
                                               "partition_indexes": (0,)}, E.unknown_topic_or_partition),
    # -- AlterConfigs
    Case(33, "valid", lambda env, v: {"resource_name": env.new_topic(),
                                      "configs": [{"name": "retention.ms", "value": "86400000"}]}),
    Case(33, "unknown topic", lambda env, v: {"resource_name": "no-such-topic",
                                              "configs": [{"name": "retention.ms", "value": "1"}]},
         E.unknown_topic_or_partition),
    Case(33, "bad config value", lambda env, v: {"resource_name": env.new_topic(),
                                                 "configs": [{"name": "retention.ms", "value": "soon"}]},
         E.invalid_config),
    # -- DescribeLogDirs (Kafka's errors are authorization and an offline log directory,
    # KAFKA_STORAGE_ERROR; an unknown topic is left out of the answer, without an error)
    Case(35, "all topics", lambda env, v: {"topics": None}),
    Case(35, "one topic", lambda env, v: {"topic": TOPIC, "partitions": (0, 1)}),
    Case(35, "unknown topic", lambda env, v: {"topic": "no-such-topic", "partitions": (0,)}),
    # -- ConsumerGroupHeartbeat (KIP-848)
    Case(68, "join", lambda env, v: _consumer_join(env)),
    Case(68, "join without a subscription",
         lambda env, v: {**_consumer_join(env), "subscribed_topic_names": None}, E.invalid_request),
    Case(68, "unknown member of an existing group",
         lambda env, v: {**_consumer_join(env), "group_id": env.consumer_group(), "member_epoch": 3},
         E.unknown_member_id),
    Case(68, "member epoch of a group that does not exist",
         lambda env, v: {**_consumer_join(env), "member_epoch": 3}, E.group_id_not_found),
    # -- ConsumerGroupDescribe
    Case(69, "valid", lambda env, v: {"group_ids": (env.consumer_group(),)}),
    Case(69, "unknown group", lambda env, v: {"group_ids": (env.unique("conf-group"),)}, E.group_id_not_found),
    # -- ElectLeaders, AlterPartitionReassignments, ListPartitionReassignments (a cluster of one)
    Case(43, "preferred leader already leads", _topic(partitions=(0,)), E.election_not_needed),
    Case(43, "unknown topic", lambda env, v: {"topic": "no-such-topic", "partitions": (0,)},
         E.unknown_topic_or_partition),
    Case(43, "every partition", lambda env, v: {"topic_partitions": None}),
    Case(45, "to the broker it is on", lambda env, v: {"name": env.new_topic(), "replicas": (1,)}),
    Case(45, "unknown topic", lambda env, v: {"name": "no-such-topic", "replicas": (1,)},
         E.unknown_topic_or_partition),
    Case(45, "unregistered broker", lambda env, v: {"name": env.new_topic(), "replicas": (7,)},
         E.invalid_replica_assignment),
    Case(46, "every reassignment", lambda env, v: {"topics": None}),
    # Kafka's controller leaves an unknown topic out, without an error (its errors are
    # authorization and NOT_CONTROLLER, which a broker relaying the request never answers)
    Case(46, "unknown topic", lambda env, v: {"name": "no-such-topic", "partition_indexes": (0,)}),
    # -- between brokers: the controller's APIs and the Envelope (ADR 0016)
    Case(56, "stale broker epoch", lambda env, v: {"broker_id": 1, "broker_epoch": 1}, E.stale_broker_epoch),
    Case(58, "not from a broker", lambda env, v: {}, E.invalid_request),
    Case(62, "listener without a port", lambda env, v: {}, E.invalid_request),
    Case(62, "another cluster's id", lambda env, v: {"broker_id": 1, "name": "PLAINTEXT", "host": "127.0.0.1",
                                                    "port": 9999, "security_protocol": 0},
         E.inconsistent_cluster_id),
    Case(63, "stale broker epoch", lambda env, v: {"broker_id": 1, "broker_epoch": 1}, E.stale_broker_epoch),
    Case(67, "stale broker epoch", lambda env, v: {"broker_id": 1, "broker_epoch": 1}, E.stale_broker_epoch),
    # -- DescribeAcls, CreateAcls, DeleteAcls: this broker has no authorizer (Kafka: SECURITY_DISABLED)
    Case(29, "no authorizer", lambda env, v: {"resource_type_filter": 1, "pattern_type_filter": 1, "operation": 1,
                                              "permission_type": 1}, E.security_disabled),
    Case(30, "no authorizer", lambda env, v: {"resource_type": 2, "resource_name": TOPIC, "resource_pattern_type": 3,
                                              "principal": "User:a", "host": "*", "operation": 3,
                                              "permission_type": 3}, E.security_disabled),
    Case(31, "no authorizer", lambda env, v: {"resource_type_filter": 1, "pattern_type_filter": 1, "operation": 1,
                                              "permission_type": 1}, E.security_disabled),
    # -- DescribeClientQuotas, AlterClientQuotas
    Case(48, "every quota", lambda env, v: {"components": (), "strict": False}),
    Case(49, "valid", lambda env, v: {"entity_type": "client-id", "entity_name": env.unique("conf-client"),
                                      "key": "producer_byte_rate", "value": 1048576.0, "remove": False}),
    Case(49, "unknown key", lambda env, v: {"entity_type": "user", "entity_name": "u", "key": "no_such_rate",
                                            "value": 1.0, "remove": False}, E.invalid_request),
    # -- SaslHandshake, SaslAuthenticate: on a PLAINTEXT listener Kafka answers ILLEGAL_SASL_STATE
    Case(17, "not a SASL listener", lambda env, v: {"mechanism": "PLAIN"}, E.illegal_sasl_state),
    Case(36, "not a SASL listener", lambda env, v: {"auth_bytes": b"\0u\0p"}, E.illegal_sasl_state),
    # -- DescribeUserScramCredentials, AlterUserScramCredentials
    Case(50, "all users", lambda env, v: {"users": None}),
    Case(50, "unknown user", lambda env, v: {"name": env.unique("conf-user")}, E.resource_not_found),
    Case(51, "valid", lambda env, v: {"deletions": (), "name": env.unique("conf-user"), "mechanism": 1,
                                      "iterations": 4096, "salt": b"salt", "salted_password": b"x" * 32}),
    Case(51, "too few iterations", lambda env, v: {"deletions": (), "name": env.unique("conf-user"), "mechanism": 2,
                                                   "iterations": 10, "salt": b"s", "salted_password": b"x"},
         E.unacceptable_credential),
    Case(51, "unknown mechanism", lambda env, v: {"deletions": (), "name": env.unique("conf-user"), "mechanism": 7,
                                                  "iterations": 4096, "salt": b"s", "salted_password": b"x"},
         E.unsupported_sasl_mechanism),
    Case(51, "delete what does not exist", lambda env, v: {"upsertions": (), "name": env.unique("conf-user"),
                                                           "mechanism": 1}, E.resource_not_found),
]


@pytest.fixture(scope="module")
def env(module_start_broker: Any) -> Iterator[Env]:
    broker = module_start_broker(sets={
        "auto.create.topics.enable": "false",
        "group.initial.rebalance.delay.ms": "0",
        "offsets.topic.num.partitions": "1",
    })
    with WireConnection(broker.bootstrap) as conn:
        # its records carry 2023 timestamps: time-based retention would take them from under
        # the cases that read at offset 0 (a CI run's Fetch cases found the log starting at 3)
        assert error_codes(conn.call(example_request(19, 7, name=TOPIC, num_partitions=2, configs=[
            {"name": "retention.ms", "value": "-1"}]))) == [E.none]
        assert error_codes(conn.call(example_request(0, 9, name=TOPIC, index=0))) == [E.none]
    broker.restart()  # the leader epoch moves past 0, so an older one can be fenced
    with WireConnection(broker.bootstrap) as conn:
        (partition,) = [p for p in conn.call(example_request(3, 12, name=TOPIC)).topics[0].partitions
                        if p.partition_index == 0]
    assert partition.leader_epoch > 0
    env = Env(broker.bootstrap, partition.leader_epoch)
    # as a client does before its first transactional request: FindCoordinator creates
    # __transaction_state (through the controller) and this broker loads what it leads
    found = env.call(example_request(10, 4, key_type=1, coordinator_keys=("conf-setup",)))
    assert [c.error_code for c in found.coordinators] == [E.none]
    yield env
    env.conn.close()


#: versions kio has no schema for, decoded by hand (router.hand_decoders()), and the tests
#: that cover them instead; a new one must be added here
HAND_CODED = {(2, 0): "tests/service/handlers/test_list_offsets_v0.py, tests/e2e/test_list_offsets.py"}


def _versions(api: int) -> list[int]:
    spec = api_table()[api]
    return [v for v in range(spec.min_version, spec.max_version + 1) if (api, v) not in HAND_CODED]


def _check(env: Env, api: int, version: int, values: dict[str, Any], expected: Expected | None) -> str | None:
    """None when the answer is right, else what went wrong."""
    body = example_request(api, version, **values)
    try:
        answer = env.call(body)
    except BrokerClosed:
        return f"v{version}: the broker closed the connection"
    except Exception as exc:  # noqa: BLE001 - kio cannot decode the answer at this version, or a timeout
        return f"v{version}: {type(exc).__name__}: {exc}"
    codes = error_codes(answer)
    if expected is None:
        return None
    if isinstance(expected, tuple):
        ok = set(codes) - {E.none} == set(expected)
    elif expected == E.none:
        ok = all(c == E.none for c in codes)
    else:
        ok = expected in codes and set(codes) <= {E.none, expected}
    return None if ok else f"v{version}: error codes {codes}, expected {expected}: {answer}"


@pytest.mark.parametrize("api", sorted(api_table()), ids=lambda k: api_table()[k].name)
def test_every_advertised_version_answers_a_plausible_request(env: Env, api: int) -> None:
    topic = env.new_topic(2)  # a topic of its own: the request may delete or change it
    failures = []
    for v in _versions(api):
        values = {"name": topic, "topic": topic, "resource_name": topic, "group_id": env.unique("conf-any")}
        if failure := _check(env, api, v, values, None):
            failures.append(failure)
    assert not failures, "\n".join(failures)


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{api_table()[c.api].name}-{c.label.replace(' ', '_')}")
def test_case_answers_its_error_code_at_every_version(env: Env, case: Case) -> None:
    versions = case.versions or _versions(case.api)
    advertised = _versions(case.api)
    failures = [
        f for v in versions
        if v in advertised and (f := _check(env, case.api, v, case.values(env, v), case.expected(v)))
    ]
    assert not failures, "\n".join(failures)


def test_every_api_has_a_valid_case() -> None:
    """A new API in the router needs at least one case with a known answer here."""
    assert sorted(api_table()) == sorted({c.api for c in CASES})


def test_versions_decoded_by_hand_are_known_here() -> None:
    assert set(hand_decoders()) == set(HAND_CODED)


def test_batched_add_partitions_to_txn_answers_each_transaction(env: Env) -> None:
    """AddPartitionsToTxn v4 (KIP-890, broker to broker) carries several transactions; Kafka
    answers each one on its own, by transactional id, and one failing does not fail the others."""
    ongoing, empty = env.ongoing_txn(0), env.init_txn()
    unknown = Txn(env.unique("conf-txn"), 4242, 0)
    fenced = env.fenced_txn()

    def entry(txn: Txn, partitions: tuple[int, ...], verify_only: bool) -> dict[str, Any]:
        return {"transactional_id": txn.id, "producer_id": txn.producer_id, "producer_epoch": txn.producer_epoch,
                "verify_only": verify_only, "topics": [{"name": TOPIC, "partitions": partitions}]}

    answer = env.call(example_request(24, 4, transactions=[
        entry(ongoing, (0, 1), verify_only=True), entry(empty, (1,), verify_only=False),
        entry(unknown, (0,), verify_only=False), entry(fenced, (0,), verify_only=True),
    ]))
    got = {r.transactional_id: {(t.name, p.partition_index): p.partition_error_code
                                for t in r.topic_results for p in t.results_by_partition}
           for r in answer.results_by_transaction}
    assert answer.error_code == E.none
    assert got == {
        ongoing.id: {(TOPIC, 0): E.none, (TOPIC, 1): E.transaction_abortable},
        empty.id: {(TOPIC, 1): E.none},
        unknown.id: {(TOPIC, 0): E.invalid_producer_id_mapping},
        fenced.id: {(TOPIC, 0): E.producer_fenced},
    }
    # the partition the batch added is in that transaction now
    described = env.call(example_request(65, 0, transactional_ids=(empty.id,)))
    state = described.transaction_states[0]
    assert (state.transaction_state, [(t.topic, tuple(t.partitions)) for t in state.topics]) == (
        "Ongoing", [(TOPIC, (1,))])
