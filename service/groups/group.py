"""The in-memory model of one classic consumer group: members, states, protocol choice.

A :class:`GroupMetadata` is only data plus the rules that need nothing but the
group itself (state transitions, leader hand-over, protocol selection, static
member replacement); timers, callbacks and persistence belong to
:mod:`service.groups.coordinator`.

States and their legal predecessors (Kafka's ``GroupState``)::

    Empty               ← PreparingRebalance
    PreparingRebalance  ← Stable, CompletingRebalance, Empty
    CompletingRebalance ← PreparingRebalance
    Stable              ← CompletingRebalance
    Dead                ← any

Invariants: ``leader_id`` is a member id of ``members`` or None when there are
none; ``static_members`` maps each static member's ``group.instance.id`` to the
id of the member that holds it now; ``members`` keeps join order (the first is
the next leader).

Not thread-safe: lives on the event loop, like the coordinator.
"""

from __future__ import annotations

import enum
import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from common.errors import ErrorCode

__all__ = [
    "CONSUMER_PROTOCOL_TYPE",
    "MAX_GROUP_ID_LENGTH",
    "GroupMetadata",
    "GroupState",
    "JoinResult",
    "MemberMetadata",
    "OffsetAndMetadata",
    "SyncResult",
    "TopicPartition",
    "parse_assignment",
    "valid_group_id",
]

CONSUMER_PROTOCOL_TYPE = "consumer"
#: Longest group id accepted (Kafka has no limit; an id must fit a record key).
MAX_GROUP_ID_LENGTH = 1024

TopicPartition = tuple[str, int]


class ConsumerProtocolGroup(Protocol):
    """What a classic group's holder needs of a consumer-protocol group of the same id."""

    def is_empty(self) -> bool: ...

    def subscribed_topic_names(self) -> set[str]: ...


class GroupState(enum.Enum):
    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


_VALID_PREVIOUS: dict[GroupState, frozenset[GroupState]] = {
    GroupState.EMPTY: frozenset({GroupState.PREPARING_REBALANCE}),
    GroupState.PREPARING_REBALANCE: frozenset(
        {GroupState.STABLE, GroupState.COMPLETING_REBALANCE, GroupState.EMPTY}
    ),
    GroupState.COMPLETING_REBALANCE: frozenset({GroupState.PREPARING_REBALANCE}),
    GroupState.STABLE: frozenset({GroupState.COMPLETING_REBALANCE}),
    GroupState.DEAD: frozenset(GroupState),
}


@dataclass(frozen=True, slots=True)
class OffsetAndMetadata:
    offset: int
    leader_epoch: int
    metadata: str
    commit_timestamp: int


@dataclass(frozen=True, slots=True)
class JoinResult:
    error: ErrorCode
    member_id: str
    generation_id: int = -1
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader_id: str = ""
    members: tuple[tuple[str, str | None, bytes], ...] = ()  # only for the leader
    skip_assignment: bool = False


@dataclass(frozen=True, slots=True)
class SyncResult:
    error: ErrorCode
    protocol_type: str | None = None
    protocol_name: str | None = None
    assignment: bytes = b""


@dataclass(slots=True, eq=False)
class MemberMetadata:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    protocol_type: str
    protocols: list[tuple[str, bytes]]
    assignment: bytes = b""
    is_new: bool = False
    join_callback: Callable[[JoinResult], None] | None = None
    sync_callback: Callable[[SyncResult], None] | None = None
    heartbeat_timer: Any = None  # a cancellable handle from the coordinator's Timer
    last_heartbeat_ms: int = 0

    @property
    def awaiting_join(self) -> bool:
        return self.join_callback is not None

    @property
    def awaiting_sync(self) -> bool:
        return self.sync_callback is not None

    def protocol_names(self) -> list[str]:
        return [name for name, _ in self.protocols]

    def metadata(self, protocol: str | None) -> bytes:
        for name, data in self.protocols:
            if name == protocol:
                return data
        return b""

    def matches(self, protocols: Sequence[tuple[str, bytes]]) -> bool:
        return list(protocols) == self.protocols

    def vote(self, candidates: set[str]) -> str:
        """The first of this member's protocols (its preference order) among ``candidates``."""
        for name, _ in self.protocols:
            if name in candidates:
                return name
        raise ValueError(f"member {self.member_id} supports none of {sorted(candidates)}")


@dataclass(slots=True, eq=False)
class GroupMetadata:
    group_id: str
    state: GroupState = GroupState.EMPTY
    generation_id: int = 0
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader_id: str | None = None
    members: dict[str, MemberMetadata] = field(default_factory=dict)
    static_members: dict[str, str] = field(default_factory=dict)
    pending_members: dict[str, Any] = field(default_factory=dict)  # member id → expiry timer
    offsets: dict[TopicPartition, OffsetAndMetadata] = field(default_factory=dict)
    new_member_added: bool = False
    initial_join_pending: bool = False
    join_timer: Any = None
    current_state_timestamp_ms: int = -1
    #: set when the group uses the consumer protocol (KIP-848): this object then only
    #: holds its committed offsets (no classic members; see service.groups.consumer)
    consumer: ConsumerProtocolGroup | None = None

    # -- state ------------------------------------------------------------------------

    def is_empty(self) -> bool:
        """No members of either protocol (offset expiry and OffsetDelete ask this)."""
        if self.consumer is not None:
            return self.consumer.is_empty()
        return self.is_state(GroupState.EMPTY)

    def is_state(self, *states: GroupState) -> bool:
        return self.state in states

    def transition_to(self, state: GroupState, now_ms: int) -> None:
        if self.state not in _VALID_PREVIOUS[state]:
            raise RuntimeError(
                f"group {self.group_id}: illegal transition {self.state.value} → {state.value}"
            )
        self.state = state
        self.current_state_timestamp_ms = now_ms

    def init_next_generation(self, now_ms: int) -> None:
        self.generation_id += 1
        self.new_member_added = False
        if self.members:
            self.protocol_name = self.select_protocol()
            self.transition_to(GroupState.COMPLETING_REBALANCE, now_ms)
        else:
            self.protocol_name = None
            self.transition_to(GroupState.EMPTY, now_ms)

    # -- members ----------------------------------------------------------------------

    def is_leader(self, member_id: str) -> bool:
        return self.leader_id == member_id

    def add(self, member: MemberMetadata) -> None:
        if not self.members:
            self.protocol_type = member.protocol_type
        self.members[member.member_id] = member
        if member.group_instance_id is not None:
            self.static_members[member.group_instance_id] = member.member_id
        if self.leader_id is None:
            self.leader_id = member.member_id

    def remove(self, member_id: str) -> MemberMetadata | None:
        member = self.members.pop(member_id, None)
        if member is None:
            return None
        instance = member.group_instance_id
        if instance is not None and self.static_members.get(instance) == member_id:
            del self.static_members[instance]
        if self.leader_id == member_id:
            self.leader_id = next(iter(self.members), None)
        return member

    def replace_static_member(self, instance_id: str, old_id: str, new_id: str) -> MemberMetadata:
        """Give the member that holds ``instance_id`` the id ``new_id``, keeping its assignment."""
        member = self.members.pop(old_id)
        member.member_id = new_id
        self.members[new_id] = member
        self.static_members[instance_id] = new_id
        if self.leader_id == old_id:
            self.leader_id = new_id
        return member

    def static_member_fenced(self, instance_id: str | None, member_id: str) -> bool:
        if instance_id is None:
            return False
        holder = self.static_members.get(instance_id)
        return holder is not None and holder != member_id

    def current_member_error(self, member_id: str, instance_id: str | None) -> ErrorCode | None:
        """Why ``member_id`` (with its ``group.instance.id``) may not act in this group, or None."""
        if instance_id is not None:
            if instance_id not in self.static_members:
                return ErrorCode.unknown_member_id
            if self.static_member_fenced(instance_id, member_id):
                return ErrorCode.fenced_instance_id
            return None
        if member_id not in self.members:
            return ErrorCode.unknown_member_id
        return None

    def has_all_members_joined(self) -> bool:
        return not self.pending_members and all(m.awaiting_join for m in self.members.values())

    def not_yet_rejoined(self) -> list[MemberMetadata]:
        return [m for m in self.members.values() if not m.awaiting_join]

    def max_rebalance_timeout_ms(self) -> int:
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    def current_member_metadata(self) -> tuple[tuple[str, str | None, bytes], ...]:
        return tuple(
            (m.member_id, m.group_instance_id, m.metadata(self.protocol_name))
            for m in self.members.values()
        )

    # -- protocols --------------------------------------------------------------------

    def candidate_protocols(self) -> set[str]:
        members = list(self.members.values())
        if not members:
            return set()
        common = set(members[0].protocol_names())
        for m in members[1:]:
            common &= set(m.protocol_names())
        return common

    def supports_protocols(self, protocol_type: str, names: Sequence[str]) -> bool:
        """Whether a member offering ``names`` of ``protocol_type`` may join this group."""
        if not self.members:
            return bool(protocol_type) and bool(names)
        return protocol_type == self.protocol_type and bool(self.candidate_protocols() & set(names))

    def select_protocol(self) -> str:
        """The protocol most members prefer among those every member supports."""
        candidates = self.candidate_protocols()
        votes: dict[str, int] = {}
        for m in self.members.values():
            choice = m.vote(candidates)
            votes[choice] = votes.get(choice, 0) + 1
        return max(votes, key=lambda name: votes[name])

    def subscribed_topics(self) -> set[str] | None:
        """Topics the members subscribe to (consumer protocol); None when unknown."""
        if self.consumer is not None:
            return self.consumer.subscribed_topic_names()
        if self.protocol_type != CONSUMER_PROTOCOL_TYPE or self.protocol_name is None:
            return None
        topics: set[str] = set()
        for m in self.members.values():
            parsed = parse_subscription_topics(m.metadata(self.protocol_name))
            if parsed is None:
                return None
            topics.update(parsed)
        return topics


def valid_group_id(group_id: str | None, *, allow_empty: bool) -> bool:
    """Kafka allows the empty id for offset commit/fetch and describe/delete only."""
    if group_id is None or len(group_id) > MAX_GROUP_ID_LENGTH:
        return False
    return allow_empty or group_id != ""


def parse_subscription_topics(data: bytes) -> list[str] | None:
    """The topic names of a ``ConsumerProtocolSubscription`` (any version); None if garbled."""
    try:
        pos = 2  # version int16
        (count,) = struct.unpack_from(">i", data, pos)
        pos += 4
        topics = []
        for _ in range(max(count, 0)):
            (n,) = struct.unpack_from(">h", data, pos)
            pos += 2
            if n < 0 or pos + n > len(data):
                return None
            topics.append(data[pos : pos + n].decode("utf-8"))
            pos += n
        return topics
    except (struct.error, UnicodeDecodeError):
        return None


def parse_assignment(data: bytes) -> list[tuple[str, list[int]]] | None:
    """``(topic, partitions)`` of a ``ConsumerProtocolAssignment`` (any version); None if
    empty or garbled. Counts are bounded by the bytes present, never trusted."""
    try:
        pos = 2  # version int16
        (count,) = struct.unpack_from(">i", data, pos)
        pos += 4
        if count < 0 or count > len(data):
            return None
        out = []
        for _ in range(count):
            (n,) = struct.unpack_from(">h", data, pos)
            pos += 2
            if n < 0 or pos + n > len(data):
                return None
            topic = data[pos : pos + n].decode("utf-8")
            pos += n
            (parts,) = struct.unpack_from(">i", data, pos)
            pos += 4
            if parts < 0 or pos + 4 * parts > len(data):
                return None
            out.append((topic, list(struct.unpack_from(f">{parts}i", data, pos))))
            pos += 4 * parts
        return out
    except (struct.error, UnicodeDecodeError):
        return None
