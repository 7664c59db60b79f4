"""Consumer groups: the classic group coordinator and committed offsets.

``coordinator`` is the one object the broker talks to (sans I/O); it wires
``membership`` (JoinGroup, SyncGroup, Heartbeat, LeaveGroup), ``rebalance``
(the state machine and member sessions), ``offsets`` (commit, fetch, delete),
``expiry`` (offset retention) and ``store`` (the groups, and all that is written
to ``__consumer_offsets``). ``group`` is the per-group model, ``requests`` what
the coordinator is asked and answers, ``records`` the ``__consumer_offsets``
record codec, ``seams`` the clock and log it needs, and ``runtime`` plugs the
broker into those seams (its local log, asyncio timers).
"""

from __future__ import annotations

from service.groups.coordinator import GroupCoordinator
from service.groups.group import GroupState, JoinResult, SyncResult
from service.groups.records import OFFSETS_TOPIC
from service.groups.requests import GroupConfig, GroupSummary, JoinRequest, SyncRequest
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
