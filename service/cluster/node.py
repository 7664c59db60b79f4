"""This broker as a member of the cluster: :class:`ClusterNode`.

It owns the pieces that make a broker one of several sharing a bucket:

* the broker's :class:`controller.ClusterController` (the controller role: it
  competes for the lease on its own thread, ``ClusterController.start``) and the
  :class:`controller.MetadataView` every broker reads, fed by the controller's
  own commits and by a :class:`~service.cluster.metadata_poller.MetadataPoller`;
* the peer channels (one connection per other broker) and the
  :class:`~service.cluster.controller_client.ControllerClient` over them;
* the :class:`~service.cluster.lifecycle.BrokerLifecycle` (registration and
  heartbeats) and this data dir's ``meta.properties``;
* forwarding: :meth:`ClusterNode.forward` relays an admin request a client sent
  here to the active controller in an Envelope (58), and waits until this
  broker's view holds what the controller committed before answering
  (docs/adr/0016-inter-broker-protocol.md).

Start-up (:meth:`join` then :meth:`register`) and shutdown
(:meth:`leave`) are driven by :class:`service.broker.Broker`.

Not thread-safe: coroutines on the event loop (the controller and the poller
run threads of their own).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
import socket
import struct
import uuid
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

from common.config.broker import BrokerConfig
from common.errors import KafkaError, KafkaStorageError
from controller.cluster_controller import ClusterController
from controller.commit import Snapshot
from controller.errors import NotControllerError
from controller.metadata_view import MetadataView
from controller.registrations import Endpoint
from remote_tier.start_wait import StartWait
from remote_tier.store import ObjectStore
from service.cluster.channel import ChannelConfig, PeerChannels
from service.cluster.controller_client import ControllerClient
from service.cluster.identity import NodeIdentity
from service.cluster.lifecycle import BrokerLifecycle
from service.cluster.metadata_poller import MetadataPoller
from service.cluster.wire import raise_for
from service.replication.apply_plan import ApplyPlans, fencing_pairs
from service.security.setup import InterBrokerSecurity

__all__ = ["ClusterNode", "answering_locally", "must_answer_locally"]

_log = logging.getLogger("strata.cluster")
_I32 = struct.Struct(">i")
#: how long a probe of a peer's listener waits for the TCP handshake
_PROBE_TIMEOUT_S = 0.25
_API_ENVELOPE = 58

_LOCAL_ONLY: contextvars.ContextVar[bool] = contextvars.ContextVar("strata_local_only", default=False)


@contextlib.contextmanager
def answering_locally() -> Iterator[None]:
    """Within: controller writes are not sent to another broker (forwarding failed; the
    handler answers NOT_CONTROLLER itself)."""
    token = _LOCAL_ONLY.set(True)
    try:
        yield
    finally:
        _LOCAL_ONLY.reset(token)


def must_answer_locally() -> bool:
    return _LOCAL_ONLY.get()


class ClusterNode:
    """See the module docstring."""

    def __init__(
        self,
        *,
        store: ObjectStore,
        config: BrokerConfig,
        data_dir: Path,
        view: MetadataView,
        versions: Mapping[int, int],
        apply: Callable[[Snapshot], None],
        inter_broker: InterBrokerSecurity | None = None,
        log_dir_offline: Callable[[], bool] = lambda: False,
    ) -> None:
        self.node_id = config.node_id
        self._log_dir_offline = log_dir_offline
        #: the listener (and its TLS/SASL) this broker reaches its peers on
        self.inter_broker = inter_broker or InterBrokerSecurity("PLAINTEXT")
        self._store = store
        self._config = config
        self._data_dir = data_dir
        self.view = view
        self._versions = dict(versions)
        self._apply = apply
        self.incarnation_id = uuid.uuid4()
        self.controller: ClusterController | None = None
        self.poller: MetadataPoller | None = None
        #: this broker's applies of the fencings made ahead (the replica manager's; None: none made)
        self.apply_plans: ApplyPlans | None = None
        self.lifecycle: BrokerLifecycle | None = None
        #: the metadata revision that registered this incarnation (None: not registered
        #: yet); partitions are led or followed only from metadata at least this new
        self.registered_revision: int | None = None
        self._lifecycle_task: asyncio.Task[None] | None = None
        self._identity = NodeIdentity(self.node_id)
        timeout_s = config.get_int("controller.socket.timeout.ms") / 1000
        # One connection per peer for each kind of traffic, as Kafka keeps its controller
        # channel, replica fetcher connections and transaction marker channel apart: a
        # peer answers the requests of one connection in order, so a WriteTxnMarkers
        # waiting for the ISR would otherwise hold up the follower fetch it waits for, and
        # the heartbeat queued behind both.
        def channels(purpose: str, on_drop: Callable[[int], None] | None = None) -> PeerChannels:
            return PeerChannels(
                ChannelConfig(client_id=f"strata-broker-{self.node_id}-{purpose}",
                              request_timeout_s=timeout_s, security=self.inter_broker),
                versions,
                self._endpoint_of,
                on_drop=on_drop,
            )

        #: AlterPartition, producer ids, forwarded admin writes
        self.peers = channels("controller", on_drop=self._peer_dropped)
        #: registration and heartbeats alone, as Kafka's BrokerLifecycleManager has its
        #: own channel: never answered after a slow AlterPartition on the same connection
        self.heartbeat_peers = channels("heartbeat", on_drop=self._peer_dropped)
        #: follower Fetch and OffsetForLeaderEpoch to partition leaders
        self.replica_peers = channels("replica-fetcher", on_drop=self._leader_dropped)
        #: WriteTxnMarkers and AddPartitionsToTxn (verify) between transaction coordinators
        #: and partition leaders
        self.marker_peers = channels("txn-markers")
        #: DisklessCommit and DisklessIndex to the sequencers of diskless partitions (ADR 0027)
        self.diskless_peers = channels("diskless")
        #: DisklessIndex long polls, on connections of their own: a connection answers in
        #: order, so a poll held there would hold up what follows it
        self.diskless_index_peers = [channels(f"diskless-index-{i}") for i in range(4)]
        self.client: ControllerClient | None = None
        self._heartbeat_client: ControllerClient | None = None
        self._timeout_s = timeout_s

    # -- start-up -----------------------------------------------------------------------

    async def join(self) -> ClusterController:
        """Read this data dir's identity, start the controller role and the metadata poll."""
        previous = NodeIdentity.read(self._data_dir)
        if previous is not None:
            previous.check(self.node_id, self._data_dir)
            self._identity = previous
        # the new incarnation is on disk before it may hold the lease; the broker epoch of
        # the previous one stays until this one registers (a restart is recognised by it)
        self._identity = NodeIdentity(
            self.node_id,
            self._identity.cluster_id,
            self.incarnation_id,
            self._identity.broker_epoch,
        )
        await asyncio.to_thread(self._identity.write_or_warn, self._data_dir)
        controller = await self._open_controller(None if previous is None else previous.incarnation_id)
        self._identity.check_cluster(controller.cluster_id, self._data_dir)
        if self._identity.cluster_id is None:
            self._identity = NodeIdentity(
                self.node_id, controller.cluster_id, self.incarnation_id, self._identity.broker_epoch
            )
            await asyncio.to_thread(self._identity.write_or_warn, self._data_dir)
        self.controller = controller
        self.client = ControllerClient(
            self.node_id, controller, self.peers, timeout_s=self._timeout_s,
            refresh_metadata=self.refresh_metadata,
        )
        self._heartbeat_client = ControllerClient(
            self.node_id, controller, self.heartbeat_peers, timeout_s=self._timeout_s,
            refresh_metadata=self.refresh_metadata,
        )
        controller.probe_gone = self._refuses_connections
        controller.add_snapshot_listener(self.view.offer)
        self.view.offer(controller.snapshot)
        self.poller = MetadataPoller(
            self.view,
            self._config.get_int("metadata.poll.interval.ms"),
            self._apply,
            asyncio.get_running_loop(),
            name=f"strata-metadata-{self.node_id}",
            ahead_node_id=self.node_id,
            may_prepare_ahead=lambda: not controller.is_active,
            plan_ahead=self._plan_ahead,
        )
        controller.start()
        self.poller.start()
        return controller

    async def _open_controller(self, previous_incarnation_id: str | None) -> ClusterController:
        """The controller role on the cluster metadata in the bucket: read (or, in a new
        cluster, created) through a bucket that does not answer yet, for as long as
        ``object.store.start.wait.ms`` allows (:class:`StartWait`)."""
        wait = StartWait(f"broker {self.node_id}'s cluster metadata in the object store",
                         self._config.get_int("object.store.start.wait.ms"))
        return await wait.run_async(lambda: asyncio.to_thread(
            ClusterController, self._store, self._config, incarnation_id=self.incarnation_id,
            previous_incarnation_id=previous_incarnation_id,
        ))

    def _plan_ahead(self) -> bool:
        """On the poller's ahead thread: one more of this broker's applies of the fencings
        made ahead worked out (the local controller's while it is the active one: its broker
        applies its images); True when more are to be."""
        plans, controller = self.apply_plans, self.controller
        if plans is None or controller is None:
            return False
        ahead = controller.fence_ahead if controller.is_active else self.view.ahead
        return plans.make(fencing_pairs(step for step in ahead.steps if step.node_id != self.node_id))

    async def register(self, listeners: tuple[Endpoint, ...], timeout_s: float) -> bool:
        """Register, heartbeat until unfenced and this broker's view holds it; True when it
        is ready to serve (False: the controller did not unfence it in time)."""
        assert self.controller is not None and self.client is not None
        assert self._heartbeat_client is not None
        self.lifecycle = BrokerLifecycle(
            node_id=self.node_id,
            cluster_id=self.controller.cluster_id,
            incarnation_id=self.incarnation_id,
            listeners=listeners,
            rack=self._config.get("broker.rack") or None,
            identity=self._identity,
            data_dir=self._data_dir,
            client=self._heartbeat_client,
            local=self.controller,
            metadata_revision=lambda: self.view.revision,
            heartbeat_interval_ms=self._config.get_int("broker.heartbeat.interval.ms"),
            session_timeout_ms=self._config.get_int("broker.session.timeout.ms"),
            metadata_age_s=self.poller.age_s if self.poller is not None else (lambda: 0.0),
            alone=self._alone,
            holder_listening=lambda: self._node_id_holder_listening(listeners),
            log_dir_offline=self._log_dir_offline,
            hold_grant_ms=self.controller.hold_grant_ms,
        )
        # a controller that stands down (cut off from the brokers) stops leading first
        self.controller.before_stand_down = self.lifecycle.stop_leading
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        if listeners:
            self.client.own_address = (listeners[0].host, listeners[0].port)
            self._heartbeat_client.own_address = self.client.own_address
        epoch = await self.lifecycle.register(timeout_s)
        self.registered_revision = epoch
        await asyncio.to_thread(self.view.poll_for_revision, epoch, max(0.1, deadline - loop.time()), 0.05)
        self._lifecycle_task = asyncio.create_task(self.lifecycle.run(), name="broker-heartbeats")
        self.lifecycle.poke()
        if not await self.lifecycle.wait_unfenced(max(0.1, deadline - loop.time())):
            return False
        try:
            await asyncio.to_thread(self.view.refresh)
        except KafkaStorageError as exc:  # the poll reads it again: not a reason to fail the start
            _log.warning("broker %d: cannot read the newest cluster metadata now (%s); it starts from "
                         "revision %d and the metadata poll goes on", self.node_id, exc, self.view.revision)
        assert self.poller is not None
        self.poller.apply_latest()
        return True

    async def refresh_metadata(self) -> None:
        """Apply the store's newest metadata now, before answering "unknown" (a topic
        created a moment ago through another broker): :meth:`MetadataPoller.refresh`."""
        if self.poller is not None:
            await self.poller.refresh()

    def _peer_dropped(self, node_id: int) -> None:
        """A controller-channel connection to a peer dropped. If it was the one this broker
        heartbeats on, the controller now gives this broker ``broker.session.connection.loss.ms``
        to heartbeat again before fencing it (as for a killed broker): heartbeat now, on a new
        connection, rather than at the next interval. Any peer's drop pokes (one extra
        heartbeat when it was another's: cheaper than tracking which peer is the controller)."""
        if self.lifecycle is not None:
            self.lifecycle.poke()
        self._leader_dropped(node_id)

    def _leader_dropped(self, node_id: int) -> None:
        """A connection to a peer dropped (one this broker fetches from, or its controller
        channel). The controller role probes the peer's listener at once (a dead broker is
        fenced, a dead controller's lease taken over): a killed broker's fetch connections, on
        its highest descriptors, close before the one it heartbeats on, 11 ms before at
        10,000 partitions, and its listener before them all (``service.network.server``). If
        the peer died, the controller is about to move its leaderships, so the metadata is
        polled fast for a while (:meth:`MetadataPoller.poll_fast`)."""
        if self.controller is not None:
            self.controller.peer_unreachable(node_id)
        if self.poller is not None and not self.is_active_controller:  # its own commits reach it at once
            self.poller.poll_fast()

    async def _node_id_holder_listening(self, listeners: tuple[Endpoint, ...]) -> bool:
        """Whether a process listens on an endpoint the metadata registers for this node id
        (another broker started with it: this one can stop at once instead of waiting for
        that registration's session to end). Its own listeners are not asked."""
        snapshot = self.view.snapshot()
        registration = None if snapshot is None else snapshot.metadata.brokers.get(self.node_id)
        if registration is None:
            return False
        own = {(e.host, e.port) for e in listeners}
        for endpoint in registration.endpoints:
            if (endpoint.host, endpoint.port) in own:
                continue
            with contextlib.suppress(OSError, TimeoutError):
                _, writer = await asyncio.wait_for(asyncio.open_connection(endpoint.host, endpoint.port), 1.0)
                writer.close()
                return True
        return False

    def _alone(self) -> bool:
        """This broker is the only one the cluster's metadata registers."""
        snapshot = self.view.snapshot()
        if snapshot is None:
            return False
        brokers = snapshot.metadata.brokers
        return len(brokers) == 0 or (len(brokers) == 1 and self.node_id in brokers)

    def may_lead(self) -> bool:
        """Whether this broker may act as a partition leader now:
        :meth:`BrokerLifecycle.may_lead` once registered."""
        return self.lifecycle is None or self.lifecycle.may_lead()

    def _refuses_connections(self, node_id: int) -> bool:
        """Whether ``node_id``'s inter-broker listener refuses a TCP connection: no process
        listens there any more (blocking, at most ``_PROBE_TIMEOUT_S``; the controller
        role's thread calls it). A timeout or any other error proves nothing: False."""
        address = self._endpoint_of(node_id)
        if address is None:
            return False
        try:
            socket.create_connection(address, timeout=_PROBE_TIMEOUT_S).close()
        except ConnectionRefusedError:
            return True
        except OSError:
            return False
        return False

    def metadata_applied(self) -> None:
        """The broker applied a snapshot: a fenced broker may now be caught up."""
        if self.lifecycle is not None and self.lifecycle.fenced:
            self.lifecycle.poke()

    # -- the controller -----------------------------------------------------------------

    @property
    def is_active_controller(self) -> bool:
        return self.controller is not None and self.controller.is_active

    def controller_id(self) -> int:
        if self.client is None:
            return -1
        return self.client.controller_id()

    @property
    def broker_epoch(self) -> int:
        return -1 if self.lifecycle is None else self.lifecycle.broker_epoch

    async def forward(self, frame: bytes, client_host: str, principal: str = "User:ANONYMOUS") -> bytes | None:
        """Relay a client's request frame (no size prefix) to the active controller in an
        Envelope; the response frame (size-prefixed) once this broker's view holds what
        the controller committed. None when this broker became the controller meanwhile
        (the caller answers itself). Raises ``NotControllerError`` (no controller in
        time) and the other retriable connection errors."""
        assert self.client is not None
        fields = {
            "request_data": frame,
            "request_principal": principal.encode(),  # the controller authorizes the client
            "client_host_address": client_host.encode(),
        }

        def answer(version: int, response: Any) -> bytes | None:
            raise_for(response.error_code)
            data = response.response_data
            if data is None:
                raise NotControllerError("the controller answered an Envelope without a response")
            return _I32.pack(len(data)) + bytes(data)

        def local() -> bytes | None:
            return None

        result = await self.client.call(_API_ENVELOPE, fields, local=local, answer=answer)
        if result is not None:
            await asyncio.to_thread(self.view.refresh)
        return result

    # -- shutdown -------------------------------------------------------------------------

    async def leave(self, controlled: bool) -> None:
        """Controlled shutdown (when asked and registered), stop heartbeats, hand the lease
        back (a clean stop: another broker takes over at once), close connections."""
        lifecycle = self.lifecycle
        if controlled and lifecycle is not None and lifecycle.broker_epoch >= 0:
            timeout = self._config.get_int("controlled.shutdown.timeout.ms") / 1000
            try:
                done = await lifecycle.controlled_shutdown(timeout)
                if not done:
                    _log.info("broker %d: controlled shutdown did not complete in %.1f s",
                              self.node_id, timeout)
            except KafkaError as exc:
                _log.info("broker %d: controlled shutdown failed: %s", self.node_id, exc)
        if self._lifecycle_task is not None:
            self._lifecycle_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._lifecycle_task
        if self.poller is not None:
            await asyncio.to_thread(self.poller.close)
        if self.controller is not None:
            await asyncio.to_thread(self.controller.close, True)
        for peers in (self.peers, self.heartbeat_peers, self.replica_peers, self.marker_peers, self.diskless_peers,
                      *self.diskless_index_peers):
            await peers.close()

    # -- helpers --------------------------------------------------------------------------

    def _endpoint_of(self, node_id: int) -> tuple[str, int] | None:
        snapshot = self.view.snapshot()
        if snapshot is None:
            return None
        registration = snapshot.metadata.brokers.get(node_id)
        endpoint = None if registration is None else registration.endpoint(self.inter_broker.listener)
        return None if endpoint is None else (endpoint.host, endpoint.port)
