"""Before a group request runs: the group's coordinator is ready here, if this broker is it.

The group APIs name one group (``group_id``) or several (DescribeGroups,
DeleteGroups, OffsetFetch v8+, ConsumerGroupDescribe). :func:`prepare` finds
them in the decoded request and waits, briefly, until this broker serves them
when it leads their ``__consumer_offsets`` partition but has not loaded it yet
(:func:`service.groups.runtime.wait_until_serving`); the handler then answers as
usual, NOT_COORDINATOR when another broker coordinates the group.
"""

from __future__ import annotations

from typing import Any

from service.groups.runtime import wait_until_serving
from service.handlers.context import RequestContext

__all__ = ["GROUP_APIS", "group_ids", "prepare"]

#: OffsetCommit, OffsetFetch, JoinGroup, Heartbeat, LeaveGroup, SyncGroup, DescribeGroups,
#: TxnOffsetCommit, DeleteGroups, OffsetDelete, ConsumerGroupHeartbeat, ConsumerGroupDescribe
GROUP_APIS = frozenset({8, 9, 11, 12, 13, 14, 15, 28, 42, 47, 68, 69})


def group_ids(body: Any) -> list[str]:
    """The group ids a group request names."""
    found: list[str] = []
    single = getattr(body, "group_id", None)
    if isinstance(single, str):
        found.append(single)
    for name in ("groups", "groups_names", "group_ids"):
        many = getattr(body, name, None) or ()
        for item in many:
            if isinstance(item, str):
                found.append(item)
            elif isinstance(getattr(item, "group_id", None), str):
                found.append(item.group_id)
    return found


async def prepare(ctx: RequestContext, body: Any) -> None:
    broker = ctx.broker
    if broker.groups is None:
        return
    await wait_until_serving(broker, broker.groups, broker.node_id, group_ids(body))
