"""The diskless partitions this broker sequences: :class:`Sequencer`.

ADR 0027, section 4: a broker is the sequencer of the diskless partitions it leads. It
keeps one :class:`~service.diskless.sequence.PartitionSequence` per such partition and one
:class:`~service.diskless.committer.GroupCommitter` writing its chain.
:meth:`Sequencer.commit` is what a writer's proposals reach (this broker's own
:class:`~service.diskless.writer.WalWriter`, or a peer's over the wire): every proposal is
checked and given offsets, and the answer waits until they are durable.

Not thread-safe: the event loop owns it.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable, Sequence

from common.errors import (
    CorruptRecordError,
    KafkaError,
    NotLeaderOrFollowerError,
    RequestTimedOutError,
)
from remote_tier.diskless.commits import CommitEntry
from remote_tier.diskless.wal import WalFormatError, WalKey
from service.diskless.committer import GroupCommitter
from service.diskless.sequence import PartitionSequence, Proposal

__all__ = ["Sequencer"]


class Sequencer:
    """See the module docstring."""

    def __init__(self, committer: GroupCommitter, *, commit_deadline_ms: int = 30_000,
                 clock_ms: Callable[[], int] = lambda: int(time.time() * 1000)) -> None:
        self.committer = committer
        #: a proposal naming an object older than this is refused (ADR 0027, section 3): the
        #: collector may delete an unreferenced object once it is older than the grace period
        self.commit_deadline_ms = commit_deadline_ms
        self._clock_ms = clock_ms
        self._sequences: dict[tuple[uuid.UUID, int], PartitionSequence] = {}

    def lead(self, sequence: PartitionSequence) -> None:
        """Sequence this partition from now on (its state loaded: ``PartitionSequence.resume``)."""
        self.resign(sequence.topic_id, sequence.partition)
        self._sequences[(sequence.topic_id, sequence.partition)] = sequence

    def resign(self, topic_id: uuid.UUID, partition: int) -> None:
        sequence = self._sequences.pop((topic_id, partition), None)
        if sequence is not None:
            sequence.resigned = True

    def led(self) -> list[tuple[uuid.UUID, int]]:
        """The partitions sequenced here."""
        return list(self._sequences)

    def get(self, topic_id: uuid.UUID, partition: int) -> PartitionSequence | None:
        return self._sequences.get((topic_id, partition))

    async def commit(self, proposals: Sequence[Proposal]) -> list[CommitEntry | KafkaError]:
        """Each proposal's durable entry, or the error that refused it (in order)."""
        accepted: list[tuple[PartitionSequence, CommitEntry] | KafkaError] = []
        now_ms = self._clock_ms()
        for proposal in proposals:
            sequence = self._sequences.get((proposal.topic_id, proposal.partition))
            late = self._too_late(proposal, now_ms)
            if late is not None:
                accepted.append(late)
                continue
            if sequence is None:
                accepted.append(NotLeaderOrFollowerError(
                    f"this broker does not sequence partition {proposal.partition} of topic {proposal.topic_id}"))
                continue
            try:
                accepted.append((sequence, sequence.accept(proposal)))
            except KafkaError as exc:
                accepted.append(exc)
        return list(await asyncio.gather(*(self._durable(a) for a in accepted)))

    async def _durable(self, accepted: tuple[PartitionSequence, CommitEntry] | KafkaError) -> CommitEntry | KafkaError:
        if isinstance(accepted, KafkaError):
            return accepted
        sequence, entry = accepted
        try:
            await self.committer.wait_durable(sequence, entry)
        except KafkaError as exc:
            return exc
        if sequence.resigned:  # its successor may have read the chain before this slot landed
            return NotLeaderOrFollowerError(f"{sequence.name} is no longer sequenced here: propose again "
                                            "to its sequencer")
        return entry

    def _too_late(self, proposal: Proposal, now_ms: int) -> KafkaError | None:
        try:
            created = WalKey.parse(proposal.object_key).created_ms
        except WalFormatError as exc:
            return CorruptRecordError(f"a proposal names {proposal.object_key!r}: {exc}")
        if now_ms - created > self.commit_deadline_ms:
            return RequestTimedOutError(f"{proposal.object_key} was written {now_ms - created} ms ago, past "
                                        f"the commit deadline of {self.commit_deadline_ms} ms: produce again")
        return None
