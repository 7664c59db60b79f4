"""The routing table, the dispatcher that the server calls for every frame, and ApiVersions.

ApiVersions is answered here, from :func:`api_table` itself, so the broker can
never advertise an API or a version it does not implement.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import inspect
import logging
import struct
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from functools import cache
from typing import TYPE_CHECKING, Any

from common.errors import ErrorCode, InvalidRequestError, KafkaError
from common.protocol.codec import (
    FrameError,
    RequestHeader,
    SplicedResponse,
    build,
    decode_request,
    encode_response,
    error_response,
    load_schemas,
    peek_api,
    response_module,
)
from controller.errors import NotControllerError
from service.cluster import hold_rpc
from service.cluster.node import answering_locally
from service.diskless import rpc
from service.handlers import coordination
from service.handlers.authz import refusal
from service.handlers.context import Handler, RequestClock, RequestContext
from service.handlers.coordination import GROUP_APIS
from service.handlers.produce_codec import PRODUCE_VERSIONS, decode_produce_request
from service.quotas.manager import PRODUCE, REQUEST
from service.replication import barrier
from service.security.principal import ANONYMOUS, KafkaPrincipal

if TYPE_CHECKING:
    from service.broker import Broker
    from service.network.server import Connection, Response
    from service.quotas.manager import QuotaManager
    from service.security.authorizer import Authorizer

__all__ = [
    "ApiSpec",
    "RequestContext",
    "Router",
    "api_table",
    "hand_decoders",
    "handle_api_versions",
    "handle_envelope",
]

log = logging.getLogger("strata.server")


Decoder = Callable[[bytes | memoryview], tuple[RequestHeader, Any]]


@dataclass(frozen=True, slots=True)
class ApiSpec:
    key: int
    name: str
    min_version: int
    max_version: int
    handler: Handler
    #: a write only the active controller makes: any other broker relays the request
    #: to it (Envelope) and its answer back (docs/adr/0016-inter-broker-protocol.md)
    forwarded: bool = False
    #: a coordinator's write (or a broker's markers): answered once the in-sync replicas
    #: hold what the handler appended (:mod:`service.replication.barrier`)
    replicated: bool = False


@cache
def api_table() -> dict[int, ApiSpec]:
    """api key → spec: the single source of what this broker implements."""
    from service.handlers import (
        acls,
        admin,
        cluster,
        consumer_groups,
        fetch,
        groups,
        leader_epoch,
        list_offsets,
        log_admin,
        metadata,
        produce,
        producer_ids,
        quotas,
        reassignments,
        sasl,
        transactions,
        txn_markers,
    )

    specs = [
        ApiSpec(0, "Produce", 3, 9, produce.handle_produce),
        ApiSpec(1, "Fetch", 4, 17, fetch.handle_fetch),
        ApiSpec(2, "ListOffsets", 0, 10, list_offsets.handle_list_offsets),
        ApiSpec(3, "Metadata", 0, 12, metadata.handle_metadata),
        ApiSpec(18, "ApiVersions", 0, 3, handle_api_versions),
        ApiSpec(19, "CreateTopics", 2, 7, admin.handle_create_topics, forwarded=True),
        ApiSpec(20, "DeleteTopics", 1, 6, admin.handle_delete_topics, forwarded=True),
        ApiSpec(21, "DeleteRecords", 0, 2, log_admin.handle_delete_records),
        ApiSpec(23, "OffsetForLeaderEpoch", 2, 4, leader_epoch.handle_offset_for_leader_epoch),
        ApiSpec(32, "DescribeConfigs", 1, 4, admin.handle_describe_configs),
        ApiSpec(33, "AlterConfigs", 0, 2, admin.handle_alter_configs, forwarded=True),
        ApiSpec(35, "DescribeLogDirs", 1, 4, log_admin.handle_describe_log_dirs),
        ApiSpec(37, "CreatePartitions", 0, 3, admin.handle_create_partitions, forwarded=True),
        ApiSpec(43, "ElectLeaders", 0, 2, reassignments.handle_elect_leaders, forwarded=True),
        ApiSpec(44, "IncrementalAlterConfigs", 0, 1, admin.handle_incremental_alter_configs,
                forwarded=True),
        ApiSpec(45, "AlterPartitionReassignments", 0, 0,
                reassignments.handle_alter_partition_reassignments, forwarded=True),
        ApiSpec(46, "ListPartitionReassignments", 0, 0,
                reassignments.handle_list_partition_reassignments),
        ApiSpec(60, "DescribeCluster", 0, 1, admin.handle_describe_cluster),
        # between brokers: answered only by the active controller (NOT_CONTROLLER elsewhere)
        ApiSpec(56, "AlterPartition", 2, 3, cluster.handle_alter_partition),
        ApiSpec(58, "Envelope", 0, 0, handle_envelope),
        ApiSpec(62, "BrokerRegistration", 0, 4, cluster.handle_broker_registration),
        ApiSpec(63, "BrokerHeartbeat", 0, 1, cluster.handle_broker_heartbeat),
        ApiSpec(67, "AllocateProducerIds", 0, 0, cluster.handle_allocate_producer_ids),
        ApiSpec(8, "OffsetCommit", 2, 9, groups.handle_offset_commit, replicated=True),
        ApiSpec(9, "OffsetFetch", 1, 9, groups.handle_offset_fetch),
        ApiSpec(10, "FindCoordinator", 0, 5, groups.handle_find_coordinator),
        ApiSpec(11, "JoinGroup", 0, 9, groups.handle_join_group, replicated=True),
        ApiSpec(12, "Heartbeat", 0, 4, groups.handle_heartbeat),
        ApiSpec(13, "LeaveGroup", 0, 5, groups.handle_leave_group, replicated=True),
        ApiSpec(14, "SyncGroup", 0, 5, groups.handle_sync_group, replicated=True),
        ApiSpec(15, "DescribeGroups", 0, 6, groups.handle_describe_groups),
        ApiSpec(16, "ListGroups", 0, 5, groups.handle_list_groups),
        ApiSpec(42, "DeleteGroups", 0, 2, groups.handle_delete_groups, replicated=True),
        ApiSpec(47, "OffsetDelete", 0, 0, groups.handle_offset_delete, replicated=True),
        ApiSpec(24, "AddPartitionsToTxn", 0, 4, transactions.handle_add_partitions_to_txn, replicated=True),
        ApiSpec(25, "AddOffsetsToTxn", 0, 4, transactions.handle_add_offsets_to_txn, replicated=True),
        ApiSpec(26, "EndTxn", 0, 4, transactions.handle_end_txn, replicated=True),
        ApiSpec(28, "TxnOffsetCommit", 0, 4, transactions.handle_txn_offset_commit, replicated=True),
        ApiSpec(65, "DescribeTransactions", 0, 0, transactions.handle_describe_transactions),
        ApiSpec(66, "ListTransactions", 0, 2, transactions.handle_list_transactions),
        ApiSpec(61, "DescribeProducers", 0, 0, transactions.handle_describe_producers),
        ApiSpec(22, "InitProducerId", 0, 5, producer_ids.handle_init_producer_id, replicated=True),
        ApiSpec(27, "WriteTxnMarkers", 1, 2, txn_markers.handle_write_txn_markers, replicated=True),
        ApiSpec(29, "DescribeAcls", 1, 3, acls.handle_describe_acls),
        ApiSpec(30, "CreateAcls", 1, 3, acls.handle_create_acls, forwarded=True),
        ApiSpec(31, "DeleteAcls", 1, 3, acls.handle_delete_acls, forwarded=True),
        ApiSpec(48, "DescribeClientQuotas", 0, 1, quotas.handle_describe_client_quotas),
        ApiSpec(49, "AlterClientQuotas", 0, 1, quotas.handle_alter_client_quotas, forwarded=True),
        ApiSpec(17, "SaslHandshake", 0, 1, sasl.handle_sasl_handshake),
        ApiSpec(36, "SaslAuthenticate", 0, 2, sasl.handle_sasl_authenticate),
        ApiSpec(50, "DescribeUserScramCredentials", 0, 0, sasl.handle_describe_user_scram_credentials),
        ApiSpec(51, "AlterUserScramCredentials", 0, 0, sasl.handle_alter_user_scram_credentials,
                forwarded=True),
        ApiSpec(68, "ConsumerGroupHeartbeat", 0, 1, consumer_groups.handle_consumer_group_heartbeat,
                replicated=True),
        ApiSpec(69, "ConsumerGroupDescribe", 0, 1, consumer_groups.handle_consumer_group_describe),
    ]
    return {s.key: s for s in specs}


@cache
def hand_decoders() -> dict[tuple[int, int], Decoder]:
    """(api key, version) → decoder, for the versions kio has no schema for."""
    from service.handlers import list_offsets_v0

    return {(2, 0): list_offsets_v0.decode_request}


def handle_api_versions(ctx: RequestContext, request: Any) -> Any:
    """ApiVersions (key 18): every API of :func:`api_table` with its version range."""
    mod = response_module(18, ctx.version)
    keys = tuple(
        build(mod.ApiVersion, api_key=s.key, min_version=s.min_version, max_version=s.max_version)
        for s in sorted(api_table().values(), key=lambda s: s.key)
    )
    return build(mod.ApiVersionsResponse, error_code=0, api_keys=keys, throttle_time=0)


@cache
def decoders() -> dict[tuple[int, int], Decoder]:
    """(api key, version) → decoder, where not the generic reader: the versions kio has no
    schema for, and Produce's (its request is on every producer's hot path)."""
    spec = api_table()[0]
    produce = range(spec.min_version, spec.max_version + 1)
    assert set(produce) <= set(PRODUCE_VERSIONS), "Produce versions the hand decoder does not read"
    return {**{(0, v): decode_produce_request for v in produce}, **hand_decoders()}


_UNSUPPORTED_VERSION_HEAD = struct.Struct(">iihi")
_NO_QUOTAS: frozenset[str] = frozenset()
#: (api key, version) pairs whose codecs are loaded, and those being loaded (process-wide, as
#: the codecs' caches are)
_SCHEMAS_READY: set[tuple[int, int]] = set()
_SCHEMAS_LOADING: dict[tuple[int, int], asyncio.Future[None]] = {}


def _schemas_loaded(key: tuple[int, int], fut: asyncio.Future[None]) -> None:
    _SCHEMAS_LOADING.pop(key, None)
    if not fut.cancelled() and fut.exception() is None:
        _SCHEMAS_READY.add(key)


class Router:
    """Turns a request frame into an awaitable response for the connection."""

    def __init__(self, broker: Broker, authorizer: Authorizer | None = None,
                 quotas: QuotaManager | None = None) -> None:
        self._broker = broker
        self.authorizer = authorizer
        self.quotas = quotas

    def prepare(self, frame: bytes | memoryview) -> Awaitable[None] | None:
        """None when the frame's API version can be dispatched at once, else what to await
        first: the first request of a version loads its codecs on a worker thread
        (:func:`~common.protocol.codec.load_schemas`), as importing them on the loop held it
        for 50-200 ms on a busy machine. The connection awaits it before dispatching, so its
        requests stay in order; a failed load is left to the dispatch to report."""
        key = peek_api(frame)[:2]
        if key in _SCHEMAS_READY:
            return None
        spec = api_table().get(key[0])
        if spec is None or not spec.min_version <= key[1] <= spec.max_version:
            return None  # refused by dispatch
        fut = _SCHEMAS_LOADING.get(key)
        if fut is None:
            fut = asyncio.ensure_future(asyncio.to_thread(load_schemas, *key, key not in decoders()))
            fut.add_done_callback(lambda f, k=key: _schemas_loaded(k, f))
            _SCHEMAS_LOADING[key] = fut
        return asyncio.shield(fut)  # a connection closing meanwhile does not cancel the others' wait

    def dispatch(self, frame: bytes | memoryview, conn: Connection | None) -> Awaitable[Response]:
        kinds = self.quotas.kinds() if self.quotas is not None else _NO_QUOTAS  # once a request
        if REQUEST not in kinds:
            return self._dispatch(frame, conn, None, kinds)
        clock = RequestClock()  # the request's time on the loop, decoding included
        try:
            return self._dispatch(frame, conn, clock, kinds)
        finally:
            clock.pause()

    def _dispatch(self, frame: bytes | memoryview, conn: Connection | None,
                  clock: RequestClock | None, kinds: frozenset[str]) -> Awaitable[Response]:
        if conn is not None and conn.session.raw_tokens and conn.session.exchange is not None:
            from service.handlers.sasl import raw_token  # SaslHandshake v0: a bare SASL token

            return raw_token(self._broker, conn, frame)
        api_key, version, correlation_id = peek_api(frame)
        if conn is not None and (refused := conn.session.admits(api_key)) is not None:
            raise FrameError(refused)
        spec = api_table().get(api_key)
        if spec is None:
            if api_key in rpc.DISKLESS_APIS:  # between brokers, Strata's own (ADR 0027)
                return rpc.serve(self._broker.diskless, frame, conn, self.authorizer)
            if api_key == hold_rpc.OUTAGE_HOLD:  # between brokers, Strata's own (ADR 0031)
                return hold_rpc.serve(self._broker, frame, conn, self.authorizer)
            raise FrameError(f"unknown API key {api_key}")
        if not spec.min_version <= version <= spec.max_version:
            if api_key == 18:
                return _ready(_api_versions_unsupported(correlation_id))
            raise FrameError(
                f"{spec.name} v{version} is not supported "
                f"(this broker implements v{spec.min_version}-v{spec.max_version})"
            )
        decode = decoders().get((api_key, version), decode_request)
        header, body = decode(frame)
        ctx = RequestContext.of(header, self._broker, conn, self.authorizer, self.quotas, clock)
        if api_key == 0 and PRODUCE in kinds:  # the produce byte-rate quota, decided now
            size = sum(len(p.records) for t in body.topic_data for p in t.partition_data if p.records is not None)
            ctx = dataclasses.replace(ctx, throttle_ms=ctx.throttle(PRODUCE, size))
        if spec.forwarded and self._broker.forwards_controller_writes():
            answer = self._forward(spec, ctx, body, frame)
        else:
            answer = self._run(spec, ctx, body)
        return answer if clock is None else clock.timed(answer)

    async def _forward(
        self, spec: ApiSpec, ctx: RequestContext, body: Any, frame: bytes | memoryview
    ) -> Response:
        """Relay a controller write to the active controller and its answer back; when no
        controller answers in time, the handler answers here (NOT_CONTROLLER)."""
        broker = self._broker
        cluster = broker.cluster
        assert cluster is not None
        peer = ctx.connection.peer if ctx.connection is not None else ""
        try:
            answer = await cluster.forward(bytes(frame), ctx.client_host or peer.rpartition(":")[0], str(ctx.principal))
        except KafkaError as exc:
            log.warning("could not forward %s to the controller: %s", spec.name, exc)
            answer = None
        if answer is not None:
            broker.metrics_request(spec.name)
            return answer
        with answering_locally():
            return await self._run(spec, ctx, body)

    async def _run(self, spec: ApiSpec, ctx: RequestContext, body: Any) -> Response:
        broker = self._broker
        broker.metrics_request(spec.name)
        started = time.perf_counter()
        refused = refusal(spec.key, ctx, body)
        if refused is not None:
            broker.metrics_error(spec.name, refused)
            return encode_response(ctx.header, error_response(spec.key, ctx.version, refused))
        if spec.key in GROUP_APIS:
            await coordination.prepare(ctx, body)
        if spec.replicated:
            result = await self._replicated(spec, ctx, body)
        else:
            result = spec.handler(ctx, body)
            if not isinstance(result, bytes) and inspect.isawaitable(result):
                result = await result
        elapsed = time.perf_counter() - started
        throttle = ctx.request_throttle()  # request_percentage, every API: its time on the loop
        if not (result is None or isinstance(result, (list, bytes))):
            if throttle and hasattr(result, "throttle_time"):
                result = dataclasses.replace(result, throttle_time=datetime.timedelta(milliseconds=throttle))
            if isinstance(result, SplicedResponse):
                result = result.encode(ctx.header)
            else:
                result = encode_response(ctx.header, result)
        broker.request_latency.observe(spec.name, elapsed)
        return result


    async def _replicated(self, spec: ApiSpec, ctx: RequestContext, body: Any) -> Any:
        """Run a coordinator's handler; answer once its appends are on the ISR, or with the
        error Kafka gives when they are not (:mod:`service.replication.barrier`)."""
        with barrier.recording() as writes:
            result = spec.handler(ctx, body)
            if inspect.isawaitable(result):
                result = await result
        if not writes:
            return result
        broker = self._broker
        if spec.key == _CONSUMER_GROUP_HEARTBEAT and (linger_ms := broker.config.get_int(_LINGER)) > 0:
            await asyncio.sleep(linger_ms / 1000)  # see _LINGER
        failed = await barrier.wait_replicated(broker, writes, broker.coordinator_write_timeout_ms)
        if not failed:
            return result
        cause = next(iter(failed.values()))
        log.warning("%s: its write did not reach the in-sync replicas: %s", spec.name, cause)
        code = cause.code if spec.key == _WRITE_TXN_MARKERS else barrier.coordinator_error(cause)
        broker.metrics_error(spec.name, code)
        if isinstance(result, bytes | list) or result is None:
            raise KafkaError(f"{spec.name}: {cause}")  # not rewritable: the connection closes
        return barrier.with_error(result, code)


_WRITE_TXN_MARKERS = 27
_CONSUMER_GROUP_HEARTBEAT = 68
#: Kafka's group coordinator gathers its writes for this long and answers once they are
#: written, so a heartbeat that changed the group is answered 5 ms later at the least;
#: Strata appends at once, then waits as long before answering: librdkafka 2.15's KIP-848
#: consumer stops heartbeating for good when a leave is answered within a millisecond of
#: the answer before it (librdkafka's 0045 subscribe_many_updates, issue 37)
_LINGER = "group.coordinator.append.linger.ms"


async def handle_envelope(ctx: RequestContext, request: Any) -> Any:
    """Envelope (58): a controller write another broker relays from its client. Only the
    active controller opens it; the inner request runs here as if sent directly, and its
    response frame goes back in the envelope (Kafka's KIP-590)."""
    mod = response_module(58, ctx.version)
    broker = ctx.broker
    inner = bytes(request.request_data)
    try:
        if not broker.is_active_controller():
            raise NotControllerError(f"broker {broker.node_id} is not the active controller")
        api_key, version, _ = peek_api(inner)
        spec = api_table().get(api_key)
        if spec is None or not spec.forwarded or not spec.min_version <= version <= spec.max_version:
            raise InvalidRequestError(f"api {api_key} v{version} cannot be forwarded")
        header, body = decode_request(inner)
        inner_ctx = RequestContext(header, broker, None, _envelope_principal(request.request_principal),
                                   client_host=bytes(request.client_host_address or b"").decode(errors="replace"),
                                   authorizer=ctx.authorizer)
        result = spec.handler(inner_ctx, body)
        if inspect.isawaitable(result):
            result = await result
        if not isinstance(result, bytes):
            result = encode_response(header, result)
        broker.metrics_request(spec.name)
        return build(mod.EnvelopeResponse, response_data=result[4:], error_code=ErrorCode.none)
    except FrameError:
        return build(mod.EnvelopeResponse, response_data=None, error_code=ErrorCode.invalid_request)
    except KafkaError as exc:
        broker.metrics_error("Envelope", exc.code)
        return build(mod.EnvelopeResponse, response_data=None, error_code=exc.code)


def _envelope_principal(data: bytes | None) -> KafkaPrincipal:
    """The client's principal an Envelope carries (``Type:name`` in UTF-8, written by
    :meth:`service.cluster.node.ClusterNode.forward`); anonymous when absent."""
    if not data:
        return ANONYMOUS
    try:
        return KafkaPrincipal.parse(bytes(data).decode())
    except (UnicodeDecodeError, ValueError):
        raise InvalidRequestError("the Envelope's request principal is not TYPE:NAME") from None


async def _ready(value: Response) -> Response:
    return value


def _api_versions_unsupported(correlation_id: int) -> bytes:
    """ApiVersions v0 answer with UNSUPPORTED_VERSION and our ranges (KIP-511 fallback)."""
    specs = sorted(api_table().values(), key=lambda s: s.key)
    body = b"".join(struct.pack(">hhh", s.key, s.min_version, s.max_version) for s in specs)
    head = _UNSUPPORTED_VERSION_HEAD.pack(
        4 + 2 + 4 + len(body), correlation_id, int(ErrorCode.unsupported_version), len(specs)
    )
    return head + body
