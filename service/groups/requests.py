"""What the group coordinator is asked and what it answers: requests, summaries, its config.

Plain frozen data, decoded from (or encoded into) the Kafka requests by
:mod:`service.handlers.groups`; the answers to JoinGroup and SyncGroup are
:class:`service.groups.group.JoinResult` and :class:`~service.groups.group.SyncResult`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import cast

from common.config import broker_default, broker_default_int

__all__ = ["GroupConfig", "GroupSummary", "JoinRequest", "MemberSummary", "SyncRequest"]


@dataclass(frozen=True, slots=True)
class GroupConfig:
    # Defaults of the broker configs (common/config/keys.py), written once there.
    initial_rebalance_delay_ms: int = broker_default_int("group.initial.rebalance.delay.ms")
    # Kafka's group.{min,max}.session.timeout.ms and the others below: not broker configs here
    min_session_timeout_ms: int = 6000
    max_session_timeout_ms: int = 1_800_000
    offsets_retention_ms: int = broker_default_int("offsets.retention.minutes") * 60_000
    offsets_retention_check_interval_ms: int = 600_000
    offset_metadata_max_bytes: int = 4096
    new_member_join_timeout_ms: int = 300_000
    # The consumer group protocol (KIP-848): Kafka's group.consumer.* keys.
    consumer_session_timeout_ms: int = broker_default_int("group.consumer.session.timeout.ms")
    consumer_heartbeat_interval_ms: int = broker_default_int("group.consumer.heartbeat.interval.ms")
    consumer_max_size: int = broker_default_int("group.consumer.max.size")
    #: the first is the default
    consumer_assignors: tuple[str, ...] = tuple(cast(list[str], broker_default("group.consumer.assignors")))
    consumer_migration_policy: str = str(broker_default("group.consumer.migration.policy"))
    #: a group id → its own configs (service.group_configs: ``consumer.session.timeout.ms`` ...)
    group_overrides: Callable[[str], Mapping[str, str]] = lambda group: {}

    def session_timeout_ms(self, group: str) -> int:
        """A consumer-protocol member's session timeout in ``group`` (its own config, else the broker's)."""
        return int(self.group_overrides(group).get("consumer.session.timeout.ms", self.consumer_session_timeout_ms))

    def heartbeat_interval_ms(self, group: str) -> int:
        """The heartbeat interval ``group``'s consumer-protocol members are given."""
        return int(self.group_overrides(group).get("consumer.heartbeat.interval.ms",
                                                   self.consumer_heartbeat_interval_ms))


@dataclass(frozen=True, slots=True)
class JoinRequest:
    group_id: str
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str
    protocols: tuple[tuple[str, bytes], ...]
    require_known_member_id: bool = True  # JoinGroup v4+
    supports_skip_assignment: bool = False  # JoinGroup v9+


@dataclass(frozen=True, slots=True)
class SyncRequest:
    group_id: str
    generation_id: int
    member_id: str
    group_instance_id: str | None
    protocol_type: str | None
    protocol_name: str | None
    assignments: Mapping[str, bytes]


@dataclass(frozen=True, slots=True)
class MemberSummary:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    metadata: bytes
    assignment: bytes


@dataclass(frozen=True, slots=True)
class GroupSummary:
    group_id: str
    state: str
    protocol_type: str
    protocol_name: str
    generation_id: int
    members: tuple[MemberSummary, ...]
