"""A broker's way to the active controller: :class:`ControllerClient`.

Kafka's ``NodeToControllerChannelManager``: every controller API a broker calls
(BrokerRegistration, BrokerHeartbeat, AlterPartition, AllocateProducerIds,
CreateTopics for its own internal topics, and Envelope for the admin requests
it forwards) goes through :meth:`ControllerClient.call`, which finds the active
controller and retries until a deadline:

* When this very broker holds the controller lease and is active, or holds the
  cluster as it is through a bucket outage (or waits for that hold's grants to run out,
  ADR 0031), the call is the
  :class:`controller.ClusterController` method, on a worker thread (it does
  object store I/O) -- no socket, no encoding.
* Otherwise it asks the node the lease (or, failing that, the metadata) names,
  over the peer channel. ``NOT_CONTROLLER`` (the node lost the lease since),
  an unreachable node or a timeout make it look again after a short pause:
  the lease is re-read every ``controller.lease.poll.ms`` by this broker's own
  controller thread, so a new controller is found within a poll of its
  election.

Errors the controller answers (``DUPLICATE_BROKER_REGISTRATION``,
``STALE_BROKER_EPOCH``...) are raised as the matching ``KafkaError``; only
``NOT_CONTROLLER`` and connection trouble are retried here.

Not thread-safe: coroutines on the broker's event loop.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Protocol, TypeVar

from common.errors import BrokerNotAvailableError, KafkaError, RequestTimedOutError
from controller.errors import NotControllerError
from controller.registrations import NO_LEADER
from service.cluster.channel import PeerChannels

__all__ = ["ControllerClient", "LocalController"]

_log = logging.getLogger("strata.cluster.controller")
_T = TypeVar("_T")
_RETRY_PAUSE_S = 0.1


class LocalController(Protocol):
    """What the client needs of this broker's own :class:`controller.ClusterController`."""

    @property
    def is_active(self) -> bool: ...

    @property
    def controller_id(self) -> int: ...

    @property
    def answers_heartbeats(self) -> bool: ...


class ControllerClient:
    """Calls to the active controller, local or remote (see the module docstring)."""

    def __init__(
        self,
        node_id: int,
        local: LocalController,
        peers: PeerChannels,
        *,
        timeout_s: float = 30.0,
        refresh_metadata: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        self._node_id = node_id
        self._local = local
        self._peers = peers
        self._timeout_s = timeout_s
        #: read the store's metadata now: the controller's endpoint (or the controller
        #: itself) may be newer than this broker's last poll
        self._refresh_metadata = refresh_metadata
        #: this broker's own (host, port), set once it registers
        self.own_address: tuple[str, int] | None = None

    @property
    def local_is_active(self) -> bool:
        return self._local.is_active

    def controller_id(self) -> int:
        """The active controller's node id as far as this broker knows (-1: none yet)."""
        return self._node_id if self._local.is_active else self._local.controller_id

    async def call(
        self,
        api_key: int,
        fields: Mapping[str, Any] | Callable[[int], Any] | bytes,
        *,
        local: Callable[[], _T] | None = None,
        answer: Callable[[int, Any], _T] | None = None,
        timeout_s: float | None = None,
        once: bool = False,
    ) -> _T:
        """One controller call, retried until ``timeout_s`` (default: the client's; with
        ``once``, a single attempt). ``fields`` as bytes: the body of an API of Strata's
        own (answered with bytes).

        ``local`` is the blocking call to make on this broker's own controller when it
        is active (run on a worker thread); ``answer(version, response)`` turns a remote
        response into the same result, raising the KafkaError its error code names
        (``NotControllerError`` makes the call look for the controller again).
        """
        deadline = time.monotonic() + (self._timeout_s if timeout_s is None else timeout_s)
        last: KafkaError = NotControllerError("no active controller is known yet")
        while True:
            try:
                return await self._attempt(api_key, fields, local, answer, deadline)
            except (NotControllerError, BrokerNotAvailableError, RequestTimedOutError) as exc:
                last = exc
            left = deadline - time.monotonic()
            if once:
                raise last
            if left <= 0:
                _log.warning("no controller answered api %d in time: %s", api_key, last)
                raise last
            await asyncio.sleep(min(_RETRY_PAUSE_S, left))
            if self._refresh_metadata is not None and not isinstance(last, RequestTimedOutError):
                await self._refresh_metadata()

    async def _attempt(
        self,
        api_key: int,
        fields: Mapping[str, Any] | Callable[[int], Any] | bytes,
        local: Callable[[], _T] | None,
        answer: Callable[[int, Any], _T] | None,
        deadline: float,
    ) -> _T:
        if local is not None and self._local.answers_heartbeats:  # active, or holding (ADR 0031)
            return await asyncio.to_thread(local)
        target = self._local.controller_id
        if target == NO_LEADER:
            raise NotControllerError("no active controller is known yet")
        # target may be this very node id: another process holds it (a duplicate node.id),
        # reached at the endpoint that process registered -- unless that is this broker's
        # own endpoint (a dead incarnation of it holds the lease until it expires)
        if target == self._node_id and self._peers.address_of(target) == self.own_address:
            raise NotControllerError("the lease names this broker's previous incarnation")
        if answer is None:
            raise NotControllerError(f"api {api_key} is served only by the local controller")
        attempt_s = max(0.1, min(deadline - time.monotonic(), self._timeout_s / 3))
        if isinstance(fields, bytes):
            raw = await self._peers.channel(target).request_raw(api_key, fields, timeout_s=attempt_s)
            return answer(0, raw)
        version, response = await self._peers.request(target, api_key, fields, timeout_s=attempt_s)
        return answer(version, response)

    def remote(
        self, node_id: int, api_key: int, fields: Mapping[str, Any] | Callable[[int], Any],
        timeout_s: float | None = None,
    ) -> Awaitable[tuple[int, Any]]:
        """A request to one given node (the forwarding path names the controller itself)."""
        return self._peers.request(node_id, api_key, fields, timeout_s=timeout_s)
