"""Consumer groups: the classic group coordinator and committed offsets.

``coordinator`` holds the rebalance state machine (sans I/O), ``group`` the
per-group model, ``records`` the ``__consumer_offsets`` record codec, and
``runtime`` the broker-side seams (the offsets log, asyncio timers).
"""

from __future__ import annotations

from service.groups.coordinator import (
    GroupConfig,
    GroupCoordinator,
    GroupSummary,
    JoinRequest,
    SyncRequest,
)
from service.groups.group import GroupState, JoinResult, SyncResult
from service.groups.records import OFFSETS_TOPIC
from service.groups.runtime import start_coordinator

__all__ = [
    "OFFSETS_TOPIC",
    "GroupConfig",
    "GroupCoordinator",
    "GroupState",
    "GroupSummary",
    "JoinRequest",
    "JoinResult",
    "SyncRequest",
    "SyncResult",
    "start_coordinator",
]
