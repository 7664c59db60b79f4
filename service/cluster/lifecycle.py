"""Registration, heartbeats, unfencing and controlled shutdown: :class:`BrokerLifecycle`.

Kafka's ``BrokerLifecycleManager``, over :class:`ControllerClient`:

1. **Register** (BrokerRegistration, 62) with this process's incarnation id,
   its listeners and rack, and the broker epoch of its previous incarnation
   (``PreviousBrokerEpoch``, from ``meta.properties``). The answer's broker
   epoch is written back to ``meta.properties`` at once. A node id held by a
   live broker of another data dir is refused by the controller
   (``DUPLICATE_BROKER_REGISTRATION``): :meth:`register` raises it and the
   broker exits with a clear message.
2. **Heartbeat** (BrokerHeartbeat, 63) every ``broker.heartbeat.interval.ms``,
   carrying the metadata revision this broker has loaded. A new registration is
   fenced; the controller unfences it once it has loaded the revision of its own
   registration. :meth:`wait_unfenced` is what start-up waits on. A heartbeat
   answered ``STALE_BROKER_EPOCH`` (the registration is gone, e.g. unregistered)
   registers again.
3. **Controlled shutdown**: heartbeats with ``want_shut_down`` until the
   controller answers ``should_shut_down`` (it moved this broker's leaderships
   away; with replication factor 1 they go offline) or a bound passes.
4. **Leading only on authority it still has** (:meth:`may_lead`, issue #31): the
   controller fences a broker ``broker.session.timeout.ms`` after it *received* the
   broker's last heartbeat; the broker stops leading partitions five sixths of that
   after it *sent* the last heartbeat the controller answered unfenced, so it has
   stopped before anyone else can be elected in its place (clocks only need to run at
   about the same rate). On the controller's own broker the heartbeat is answered
   locally, and leading lasts no longer than the controller lease behind that answer,
   so a controller cut off from the bucket stops leading before a successor is elected.
   A broker that has not read the metadata for two thirds of a session (cut off from
   the bucket) stops leading and heartbeats ``want_fence``, so its partitions move.
   None of this applies to the only broker of a cluster: nobody can be elected in its
   place, so it goes on serving through a bucket outage (its local tail).
   Nor, for a while, to a broker the controller holds the cluster for (ADR 0031): while
   this broker cannot read the controller lease it tells the controller so (OutageHold,
   :mod:`service.cluster.hold_rpc`), and when the controller answers that it holds the
   cluster as it is, this broker may lead without reading the metadata for
   ``hold_grant_ms`` after it asked.
5. **A failed log directory** (a failed fsync or write, :mod:`local_tier.dir_failure`):
   every heartbeat names it in ``offline_log_dirs`` and asks to be fenced, so the
   controller moves this broker's leaderships and ISR places away at once (its one log
   dir holds all its replicas) and keeps it fenced while the broker stays up to answer
   Metadata and KAFKA_STORAGE_ERROR (ADR 0007). The only broker of a cluster is not
   fenced: nobody could lead in its place, and its clients are better told why.

Not thread-safe: coroutines on the broker's event loop.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any, Protocol

from common.errors import KafkaError
from common.spell_log import SpellLog
from controller.errors import DuplicateBrokerRegistrationError, StaleBrokerEpochError
from controller.lease_record import monotonic_ms
from controller.membership import HeartbeatReply, RegistrationRequest
from controller.registrations import Endpoint
from service.cluster import hold_rpc
from service.cluster.controller_client import ControllerClient
from service.cluster.identity import NodeIdentity
from service.cluster.wire import raise_for, request_module

__all__ = ["BrokerLifecycle", "ControllerSide", "duplicate_node_message"]

_log = logging.getLogger("strata.cluster.lifecycle")
_API_REGISTRATION = 62
_API_HEARTBEAT = 63
#: a blind broker says so once, then at most this often while it stays blind (it heartbeats
#: every ~100 ms then, and said so at each: 60 lines in a 6 s bucket outage)
BLIND_LOG_EVERY_S = 5.0


async def _nobody_listening() -> bool:
    return False


def duplicate_node_message(node_id: int) -> str:
    return (
        f"node.id {node_id} is already held by a live broker of this cluster: two brokers "
        "cannot share a node.id. Give this broker another --node-id (or stop the other one; "
        "a broker restarted on its own --data-dir is recognised and rejoins at once)."
    )


class ControllerSide(Protocol):
    """What the lifecycle calls on this broker's own controller when it is active."""

    def register_broker(self, request: RegistrationRequest) -> Any: ...

    def lease_remaining_ms(self) -> float: ...

    def outage_report(self) -> bool: ...

    def lease_lapsed(self) -> bool: ...

    def hold_answer(self, broker_id: int, broker_epoch: int, revision: int, token: int) -> tuple[bool, int, int]: ...

    def broker_heartbeat(
        self,
        broker_id: int,
        broker_epoch: int,
        current_metadata_offset: int,
        want_fence: bool = False,
        want_shut_down: bool = False,
    ) -> HeartbeatReply: ...


class BrokerLifecycle:
    """This broker's membership of the cluster (see the module docstring)."""

    def __init__(
        self,
        *,
        node_id: int,
        cluster_id: str,
        incarnation_id: uuid.UUID,
        listeners: Sequence[Endpoint],
        rack: str | None,
        identity: NodeIdentity,
        data_dir: Path,
        client: ControllerClient,
        local: ControllerSide,
        metadata_revision: Callable[[], int],
        heartbeat_interval_ms: int,
        session_timeout_ms: int,
        metadata_age_s: Callable[[], float] = lambda: 0.0,
        alone: Callable[[], bool] = lambda: False,
        holder_listening: Callable[[], Awaitable[bool]] | None = None,
        log_dir_offline: Callable[[], bool] = lambda: False,
        hold_grant_ms: int = 0,
    ) -> None:
        self.node_id = node_id
        self._cluster_id = cluster_id
        self._incarnation = incarnation_id
        self._listeners = tuple(listeners)
        self._rack = rack
        self._identity = identity
        self._data_dir = data_dir
        self._client = client
        self._local = local
        self._revision = metadata_revision
        self._interval_s = heartbeat_interval_ms / 1000
        self._session_s = session_timeout_ms / 1000
        self._metadata_age_s = metadata_age_s
        self._alone = alone
        #: whether a process listens where the metadata registers this node id (another
        #: broker holds it: a refused registration is final)
        self._holder_listening = holder_listening or _nobody_listening
        self._log_dir_offline = log_dir_offline
        # a bucket outage the controller holds the cluster through (ADR 0031): 0 never asks
        # (the grant itself is the controller's, in its answer)
        self._hold_grant_s = hold_grant_ms / 1000
        self._hold_token = 0  # the token of the controller's last OutageHold answer
        self._hold_until = 0.0  # leading while blind is allowed until then (monotonic s)
        # Kafka names log dirs by a directory id; Strata's one log dir by its path
        self._log_dir_id = uuid.uuid5(uuid.NAMESPACE_URL, (data_dir / "logs").resolve().as_uri())
        # leading is allowed until this instant (seconds of monotonic_ms; 0: not)
        self._lead_until = 0.0
        self.broker_epoch = -1
        self.fenced = True
        self.caught_up = False
        self._unfenced = asyncio.Event()
        self._shutting_down = False
        self._heartbeat_now = asyncio.Event()
        self._blind = SpellLog(BLIND_LOG_EVERY_S)  # a blind spell, logged (_say_blind)

    # -- registration ---------------------------------------------------------------------

    async def register(self, timeout_s: float) -> int:
        """Register this incarnation; its broker epoch. Raises
        ``DuplicateBrokerRegistrationError`` with a message for the operator."""
        request = RegistrationRequest(
            self.node_id,
            self._cluster_id,
            self._incarnation,
            self._listeners,
            self._rack,
            previous_broker_epoch=self._identity.broker_epoch,
        )

        def fields(version: int) -> Any:
            mod = request_module(_API_REGISTRATION, version)
            from common.protocol.codec import build

            return build(
                mod.BrokerRegistrationRequest,
                broker_id=self.node_id,
                cluster_id=self._cluster_id,
                incarnation_id=self._incarnation,
                listeners=tuple(
                    build(mod.Listener, name=e.name, host=e.host, port=e.port,
                          security_protocol=e.security_protocol)
                    for e in self._listeners
                ),
                features=(),
                rack=self._rack,
                is_migrating_zk_broker=False,
                log_dirs=(),
                previous_broker_epoch=self._identity.broker_epoch,
            )

        def answer(version: int, response: Any) -> int:
            raise_for(response.error_code)
            return int(response.broker_epoch)

        def local() -> int:
            return int(self._local.register_broker(request).broker_epoch)

        # A node id held by a live broker is refused as long as that broker heartbeats; one
        # held by a dead incarnation this data dir does not know of (its epoch could not be
        # written) frees up when that session expires: try until then, unless a process
        # listens where that registration says (a live broker: said at once).
        give_up = time.monotonic() + self._session_s * 1.5
        while True:
            try:
                epoch = await self._client.call(
                    _API_REGISTRATION, fields, local=local, answer=answer, timeout_s=timeout_s
                )
                break
            except DuplicateBrokerRegistrationError as exc:
                if time.monotonic() >= give_up or await self._holder_listening():
                    raise DuplicateBrokerRegistrationError(duplicate_node_message(self.node_id)) from exc
                await asyncio.sleep(0.5)
        self.broker_epoch = epoch
        self.fenced = True
        self._unfenced.clear()
        self._identity = replace(self._identity, broker_epoch=epoch)
        await asyncio.to_thread(self._identity.write_or_warn, self._data_dir)
        _log.info("broker %d registered at broker epoch %d", self.node_id, epoch)
        return epoch

    # -- heartbeats -----------------------------------------------------------------------

    def may_lead(self) -> bool:
        """Whether this broker may act as leader of its partitions now (see point 4 of the
        module docstring)."""
        # the common answer first: it runs for every Produce and Fetch partition
        if monotonic_ms() / 1000 < self._lead_until and not self.blind():
            return True
        return self._alone()

    def blind(self) -> bool:
        """This broker has not read the cluster metadata for two thirds of a session, and
        no controller holding the cluster through a bucket outage answered it lately."""
        return self._metadata_age_s() > self._session_s * 2 / 3 and monotonic_ms() / 1000 >= self._hold_until

    async def _ask_hold(self) -> None:
        """While this broker cannot read the lease: tell the controller, echoing its last
        token, and learn whether it holds the cluster as it is (then this broker may lead
        blind for the answer's grant, counted from before it asked). A report counts only
        with the token of an earlier answer, so the first one asks twice; each is sent only
        if the lease still cannot be read just before (``outage_report``)."""
        for _ in range(1 if self._hold_token else 2):
            if not self._local.outage_report():
                return
            request = hold_rpc.HoldRequest(self.node_id, self.broker_epoch, self._revision(), self._hold_token)
            sent = monotonic_ms() / 1000
            try:
                if self._local.lease_lapsed():  # the controller whose lease lapsed: itself
                    hold, self._hold_token, grant_ms = self._local.hold_answer(
                        request.broker, request.broker_epoch, request.revision, request.token)
                else:
                    hold, self._hold_token, grant_ms = await self._client.call(
                        hold_rpc.OUTAGE_HOLD, hold_rpc.encode_request(request),
                        answer=lambda _version, raw: hold_rpc.decode_answer(raw),
                        timeout_s=min(self._hold_grant_s, 3 * self._interval_s), once=True)
            except (KafkaError, hold_rpc.RpcFormatError) as exc:
                _log.debug("broker %d: no outage hold answer: %s", self.node_id, exc)
                return
            if hold:
                self._hold_until = max(self._hold_until, sent + grant_ms / 1000)

    def stop_leading(self) -> None:
        """Stop leading now (any thread): this broker's authority may be gone."""
        self._lead_until = 0.0

    def _say_blind(self, blind: bool, want_fence: bool) -> None:
        """Log a blind spell's start, every :data:`BLIND_LOG_EVERY_S` of it, and its end."""
        if blind and want_fence:
            if self._blind.failed():
                _log.warning("broker %d has not read the cluster metadata for %.1f s: it stops "
                             "leading and asks to be fenced", self.node_id, self._metadata_age_s())
        elif not blind and self._blind.ended():
            _log.info("broker %d reads the cluster metadata again", self.node_id)

    async def heartbeat(self, *, want_shut_down: bool = False, timeout_s: float | None = None) -> HeartbeatReply:
        """One heartbeat; updates :attr:`fenced`, :attr:`caught_up` and how long this
        broker may lead."""
        if self._hold_grant_s > 0 and self.broker_epoch >= 0 and not self._alone():
            await self._ask_hold()
        epoch = self.broker_epoch
        offset = self._revision()
        offline = self._log_dir_offline()
        blind = self.blind()
        want_fence = (blind or offline) and not want_shut_down and not self._alone()
        if want_fence:
            self.stop_leading()
        self._say_blind(blind, want_fence)
        fields = {
            "broker_id": self.node_id,
            "broker_epoch": epoch,
            "current_metadata_offset": offset,
            "want_fence": want_fence,
            "want_shut_down": want_shut_down,
            "offline_log_dirs": (self._log_dir_id,) if offline else (),
        }
        sent = monotonic_ms() / 1000
        lead_until = sent + self._session_s * 5 / 6

        def answer(version: int, response: Any) -> HeartbeatReply:
            raise_for(response.error_code)
            return HeartbeatReply(
                bool(response.is_caught_up), bool(response.is_fenced), bool(response.should_shut_down)
            )

        def local() -> HeartbeatReply:
            nonlocal lead_until
            reply = self._local.broker_heartbeat(
                self.node_id, epoch, offset, want_fence=want_fence, want_shut_down=want_shut_down
            )
            # answered by this broker's own controller: no longer than its lease holds
            lead_until = min(lead_until, monotonic_ms() / 1000 + self._local.lease_remaining_ms() / 1000)
            return reply

        if timeout_s is None:  # a silent controller is given up on well within a session
            timeout_s = min(self._session_s / 2, max(1.0, 3 * self._interval_s))
        reply = await self._client.call(
            _API_HEARTBEAT, fields, local=local, answer=answer, timeout_s=timeout_s
        )
        self._lead_until = 0.0 if reply.is_fenced or want_fence else lead_until
        self.caught_up = reply.is_caught_up
        if reply.is_fenced != self.fenced:
            _log.info("broker %d is %s", self.node_id,
                      "inactive (the controller fenced it)" if reply.is_fenced else "active")
        self.fenced = reply.is_fenced
        if self.fenced:
            self._unfenced.clear()
        else:
            self._unfenced.set()
        return reply

    def poke(self) -> None:
        """Send the next heartbeat now (the metadata moved: maybe this broker caught up)."""
        self._heartbeat_now.set()

    async def wait_unfenced(self, timeout_s: float) -> bool:
        try:
            await asyncio.wait_for(self._unfenced.wait(), timeout_s)
        except TimeoutError:
            return False
        return True

    async def run(self) -> None:
        """Heartbeat every interval (sooner while fenced, or when poked) until cancelled."""
        failed = False
        while True:
            # while fenced, or after a failed heartbeat (the controller moved, the connection
            # dropped: it may be counting this broker as gone), again within 100 ms
            interval = self._interval_s if not (self.fenced or failed) else min(self._interval_s, 0.1)
            failed = False
            try:
                await asyncio.wait_for(self._heartbeat_now.wait(), interval)
            except TimeoutError:
                pass
            self._heartbeat_now.clear()
            if self._shutting_down:
                return
            try:
                await self.heartbeat()
            except StaleBrokerEpochError:
                _log.warning("broker %d: the controller no longer knows broker epoch %d; "
                             "registering again", self.node_id, self.broker_epoch)
                await self._register_again()
            except KafkaError as exc:
                _log.warning("broker %d: heartbeat failed: %s", self.node_id, exc)
                failed = True
            except Exception:  # noqa: BLE001 - heartbeats must outlive any one failure
                _log.exception("broker %d: heartbeat failed", self.node_id)
                failed = True

    async def _register_again(self) -> None:
        try:
            await self.register(self._session_s)
        except KafkaError as exc:
            _log.warning("broker %d could not register again: %s", self.node_id, exc)

    # -- shutdown -------------------------------------------------------------------------

    async def controlled_shutdown(self, timeout_s: float) -> bool:
        """Ask the controller to move this broker's leaderships away; True once it says
        the broker may stop (False: it did not within ``timeout_s``)."""
        self._shutting_down = True
        self._heartbeat_now.set()
        if self.broker_epoch < 0:
            return True
        deadline = time.monotonic() + timeout_s
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            try:
                reply = await self.heartbeat(want_shut_down=True, timeout_s=left)
                if reply.should_shut_down:
                    return True
            except KafkaError as exc:
                _log.info("controlled shutdown of broker %d: %s", self.node_id, exc)
                return False
            await asyncio.sleep(min(0.05, max(0.0, deadline - time.monotonic())))
