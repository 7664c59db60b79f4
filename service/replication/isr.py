"""ISR changes proposed by a leader, sent to the controller: :class:`AlterPartitionManager`.

Kafka's ``AlterPartitionManager``: a leader that wants a replica added to or
removed from a partition's ISR submits the new ISR; the manager
sends AlterPartition (56) to the active controller, at most one request in
flight, with every partition submitted meanwhile in the next one. The
partition counts the proposed ISR as its *maximal* ISR until the answer
(:mod:`service.replication.partition`).

Answers: the committed ISR and partition epoch are applied at once (the
metadata follows within a poll), and the high watermark recomputed (a shrink
may let it move, waking producers waiting for acks=all); ``INVALID_UPDATE_VERSION`` and other errors
drop the proposal -- the next follower
fetch proposes again if it still holds; a request that fails outright is
retried after a pause. A partition whose change was refused proposes again only
after a backoff that doubles from 100 ms to 5 s (reset by an accepted change), so a
leader whose view disagrees with the controller's sends no storm of requests (issue
#31: about 100 a second were seen). ``NEW_LEADER_ELECTED`` (the change completed a
reassignment that moved the leadership away) and ``FENCED_LEADER_EPOCH`` keep
the proposal counted until the metadata arrives, so the deposed leader
acknowledges nothing the new leader may not have.

What is proposed and answered is logged per partition for a request of at most
:data:`DETAILED_UP_TO` partitions, and summed up (counts per answer, a few names) for a
larger one: at 30,000 partitions a broker's restart logged two lines per partition per
round, which cost the event loop seconds while its heartbeats waited.

Not thread-safe: the event loop only.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import Callable
from typing import Any

from common.errors import ErrorCode, KafkaError
from common.protocol.codec import build
from controller.registrations import LeaderRecoveryState
from controller.replication_control import AlterPartitionResult, BrokerState, PartitionStateChange
from service.cluster.controller_client import ControllerClient
from service.cluster.wire import raise_for, request_module
from service.replication.partition import Partition

__all__ = ["AlterPartitionManager"]

_log = logging.getLogger("strata.replication.isr")
_API_ALTER_PARTITION = 56
_RETRY_S = 0.5
_BACKOFF_MIN_S, _BACKOFF_MAX_S = 0.1, 5.0
#: requests of at most this many partitions are logged partition by partition
DETAILED_UP_TO = 10
_NAMED = 3  # partitions named per answer in a summary


class AlterPartitionManager:
    """Batches ISR changes into AlterPartition requests (see the module docstring)."""

    def __init__(
        self,
        node_id: int,
        client: ControllerClient,
        broker_epoch: Callable[[], int],
        local_alter: Callable[[int, int, list[PartitionStateChange]], list[AlterPartitionResult]],
        on_applied: Callable[[Partition, bool], None] = lambda partition, moved: None,
        on_dropped: Callable[[Partition], None] = lambda partition: None,
    ) -> None:
        self._node_id = node_id
        self._on_applied = on_applied  # (partition, high watermark moved) after a committed change
        #: a proposal that did not go through: the partition is looked at again (a follower in
        #: a fetch session that names nothing would not bring it back)
        self._on_dropped = on_dropped
        self._client = client
        self._broker_epoch = broker_epoch
        self._local_alter = local_alter
        self._pending: dict[tuple[str, int], tuple[Partition, tuple[int, ...]]] = {}
        self._task: asyncio.Task[None] | None = None
        self.sent = 0
        # per partition refused lately: (current backoff, loop time before which it waits)
        self._backoff: dict[tuple[str, int], tuple[float, float]] = {}
        self._deferred: dict[tuple[str, int], asyncio.TimerHandle] = {}

    def submit(self, partition: Partition, new_isr: tuple[int, ...]) -> None:
        key = (partition.topic, partition.index)
        loop = asyncio.get_running_loop()
        wait = self._backoff.get(key, (0.0, 0.0))[1] - loop.time()
        if wait > 0:  # refused lately: the newest proposal goes once the backoff is over
            if key in self._deferred:
                self._deferred[key].cancel()
            self._deferred[key] = loop.call_later(wait, self._resubmit, partition, new_isr)
            return
        self._pending[key] = (partition, new_isr)
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._send_all(), name="alter-partition")

    def _resubmit(self, partition: Partition, new_isr: tuple[int, ...]) -> None:
        self._deferred.pop((partition.topic, partition.index), None)
        if partition.is_leader:
            self.submit(partition, new_isr)

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
        for timer in self._deferred.values():
            timer.cancel()
        self._deferred.clear()

    async def _send_all(self) -> None:
        while self._pending:
            batch, self._pending = self._pending, {}
            detailed = len(batch) <= DETAILED_UP_TO
            if detailed:
                for partition, new_isr in batch.values():
                    _log.info("%s: asking for the ISR %s (now %s)", partition.name, list(new_isr),
                              list(partition.isr))
            try:
                results = await self._send(list(batch.values()))
            except KafkaError as exc:
                _log.warning("AlterPartition failed (%s); retrying", exc)
                for key, item in batch.items():
                    self._pending.setdefault(key, item)
                await asyncio.sleep(_RETRY_S)
                continue
            self.sent += 1
            answers: Counter[str] = Counter()
            named: dict[str, list[str]] = {}
            for partition, _ in batch.values():
                result = results.get(partition.topic_id, {}).get(partition.index)
                answer = self._apply(partition, result, detailed)
                answers[answer] += 1
                names = named.setdefault(answer, [])
                if len(names) < _NAMED:
                    names.append(partition.name)
            if not detailed:
                _log.info("ISR changes of %d partitions answered: %s", len(batch), ", ".join(
                    f"{count} {answer} (e.g. {', '.join(named[answer])})"
                    for answer, count in answers.most_common()))

    def _apply(self, partition: Partition, result: tuple[ErrorCode, Any] | None, detailed: bool) -> str:
        """Apply one partition's answer; what it was (for the batch's summary)."""
        if result is None:
            partition.pending_isr = None
            self._on_dropped(partition)
            return "not answered"
        code, fields = result
        key = (partition.topic, partition.index)
        if code == ErrorCode.none:
            self._backoff.pop(key, None)
        elif code not in (ErrorCode.new_leader_elected, ErrorCode.fenced_leader_epoch):
            delay = min(_BACKOFF_MAX_S, max(_BACKOFF_MIN_S, 2 * self._backoff.get(key, (0.0, 0.0))[0]))
            self._backoff[key] = (delay, asyncio.get_running_loop().time() + delay)
        if code == ErrorCode.none and fields is not None:
            isr, leader_epoch, partition_epoch = fields
            moved = partition.apply_isr(tuple(isr), leader_epoch, partition_epoch)
            self._on_applied(partition, moved)
            if detailed:
                _log.info("%s: ISR is now %s (partition epoch %d)", partition.name, list(isr),
                          partition_epoch)
            return "committed"
        elif code in (ErrorCode.new_leader_elected, ErrorCode.fenced_leader_epoch):
            # the leadership moved (the change completed a reassignment, or another one
            # did): keep counting the proposed ISR, so nothing more is acknowledged here
            # that the new leader may lack, until the metadata says this broker no
            # longer leads (Kafka keeps its pending state the same way)
            if detailed:
                _log.info("%s: ISR change answered %s; waiting for the new metadata",
                          partition.name, code.name.upper())
            return f"{code.name.upper()} (waiting for the new metadata)"
        if detailed:
            _log.info("%s: ISR change answered %s; proposing again in %.1f s at the earliest",
                      partition.name, code.name.upper(), self._backoff.get(key, (0.0, 0.0))[0])
        partition.pending_isr = None
        self._on_dropped(partition)
        return f"{code.name.upper()} (proposed again after a backoff)"

    async def _send(
        self, items: list[tuple[Partition, tuple[int, ...]]]
    ) -> dict[Any, dict[int, tuple[ErrorCode, Any]]]:
        broker_epoch = self._broker_epoch()
        changes = [
            PartitionStateChange(
                p.topic_id,
                p.index,
                p.leader_epoch,
                tuple(BrokerState(r, -1) for r in isr),
                p.partition_epoch,
                LeaderRecoveryState.RECOVERED,
            )
            for p, isr in items
        ]

        def local() -> dict[Any, dict[int, tuple[ErrorCode, Any]]]:
            out: dict[Any, dict[int, tuple[ErrorCode, Any]]] = {}
            for r in self._local_alter(self._node_id, broker_epoch, changes):
                reg = r.registration
                fields = None if reg is None else (reg.isr, reg.leader_epoch, reg.partition_epoch)
                code = ErrorCode.none if r.error is None else r.error.code
                out.setdefault(r.topic_id, {})[r.partition] = (code, fields)
            return out

        def request(version: int) -> Any:
            mod = request_module(_API_ALTER_PARTITION, version)
            by_topic: dict[Any, list[Any]] = {}
            for c in changes:
                by_topic.setdefault(c.topic_id, []).append(
                    build(
                        mod.PartitionData,
                        partition_index=c.partition,
                        leader_epoch=c.leader_epoch,
                        new_isr_with_epochs=tuple(
                            build(mod.BrokerState, broker_id=s.broker_id, broker_epoch=s.broker_epoch)
                            for s in c.new_isr
                        ),
                        leader_recovery_state=int(c.leader_recovery_state),
                        partition_epoch=c.partition_epoch,
                    )
                )
            return build(
                mod.AlterPartitionRequest,
                broker_id=self._node_id,
                broker_epoch=broker_epoch,
                topics=tuple(build(mod.TopicData, topic_id=t, partitions=tuple(ps)) for t, ps in by_topic.items()),
            )

        def answer(version: int, response: Any) -> dict[Any, dict[int, tuple[ErrorCode, Any]]]:
            raise_for(response.error_code)
            out: dict[Any, dict[int, tuple[ErrorCode, Any]]] = {}
            for topic in response.topics:
                for p in topic.partitions:
                    code = ErrorCode(p.error_code)
                    fields = (
                        (tuple(int(r) for r in p.isr), int(p.leader_epoch), int(p.partition_epoch))
                        if code == ErrorCode.none
                        else None
                    )
                    out.setdefault(topic.topic_id, {})[int(p.partition_index)] = (code, fields)
            return out

        return await self._client.call(_API_ALTER_PARTITION, request, local=local, answer=answer)
