"""The admin API's consumer group routes: ``/v1/groups`` and ``/v1/groups/{group}``.

Both protocols: classic groups (their members' assignments decoded from the
``ConsumerProtocolAssignment`` the leader sent) and consumer-protocol groups
(KIP-848: each member's assignment and target). Lag is the high watermark minus
the committed offset, per partition, as ``strata groups describe`` shows it.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from common.errors import ErrorCode
from service.groups.group import parse_assignment
from service.http.admin import page
from service.http.common import VISIBLE, ApiError
from service.http.state import group_lag, member_count
from service.http.views import AdminView

__all__ = ["GroupRoutes", "describe_group"]


class GroupRoutes:
    def __init__(self, broker: AdminView) -> None:
        self._broker = broker

    def add_to(self, r: web.UrlDispatcher) -> None:
        r.add_get("/v1/groups", self.groups)
        r.add_get("/v1/groups/{group}", self.describe)

    def _coordinator(self) -> Any:
        if self._broker.groups is None:
            raise ApiError(503, "NOT_READY", "the broker is still recovering its logs")
        return self._broker.groups

    async def groups(self, request: web.Request) -> web.Response:
        groups = self._coordinator()
        offset, limit = page(request)
        listed = sorted(groups.list_groups_by_type())
        visible = request.get(VISIBLE)
        if visible is not None:
            listed = [g for g in listed if visible(g[0])]
        committed = groups.committed_offsets()
        out = []
        for g, ptype, state, kind in listed[offset:offset + limit]:
            rows = group_lag(self._broker, committed.get(g, {}))
            out.append({"group_id": g, "protocol_type": ptype, "state": state, "type": kind,
                        "members": member_count(groups, g, kind), "partitions": len(rows),
                        "lag": sum(r["lag"] for r in rows)})
        return web.json_response({"groups": out, "total": len(listed)})

    async def describe(self, request: web.Request) -> web.Response:
        found = describe_group(self._broker, self._coordinator(), request.match_info["group"])
        return web.json_response(found)


def describe_group(broker: AdminView, groups: Any, group_id: str) -> dict[str, Any]:
    """One group as ``/v1/groups/{group}`` shows it; ApiError 404 when it does not exist."""
    if groups.is_consumer_group(group_id):
        return _consumer_group(broker, groups, group_id)
    code, summary = groups.describe_group(group_id)
    offsets = groups.committed_offsets().get(group_id, {})
    if code in (ErrorCode.not_coordinator, ErrorCode.coordinator_not_available):
        # a broker coordinates only the groups of the __consumer_offsets partitions it leads
        raise ApiError(404, "GROUP_ID_NOT_FOUND",
                       f"no group named {group_id!r} is coordinated by this broker")
    if code != ErrorCode.none:
        raise ApiError(400, code.name.upper(), f"cannot describe group {group_id!r}")
    if summary.state == "Dead" and not offsets:
        raise ApiError(404, "GROUP_ID_NOT_FOUND", f"no group named {group_id!r}")
    members = []
    for m in summary.members:
        assignment = parse_assignment(m.assignment) or []
        members.append({"member_id": m.member_id, "group_instance_id": m.group_instance_id,
                        "client_id": m.client_id, "client_host": m.client_host,
                        "assignment": [{"topic": t, "partitions": sorted(p)} for t, p in assignment]})
    lag = group_lag(broker, offsets)
    _add_owners(lag, members)
    return {"group_id": group_id, "state": summary.state, "protocol_type": summary.protocol_type,
            "protocol": summary.protocol_name, "generation_id": summary.generation_id,
            "members": members, "offsets": lag, "lag": sum(r["lag"] for r in lag), "type": "classic"}


def _consumer_group(broker: AdminView, groups: Any, group_id: str) -> dict[str, Any]:
    """A consumer-protocol (KIP-848) group: epochs, each member's assignment and target."""
    d = groups.consumer_group_describe(group_id)

    def named(assignment: Any) -> list[dict[str, Any]]:
        return [{"topic": name, "partitions": sorted(parts)} for _, name, parts in assignment]

    members = [{"member_id": m.member_id, "group_instance_id": m.instance_id,
                "client_id": m.client_id, "client_host": m.client_host,
                "member_epoch": m.member_epoch, "assignment": named(m.assignment),
                "target_assignment": named(m.target)} for m in d.members]
    lag = group_lag(broker, groups.committed_offsets().get(group_id, {}))
    _add_owners(lag, members)
    return {"group_id": group_id, "state": d.state, "protocol_type": "consumer",
            "protocol": d.assignor, "generation_id": d.group_epoch,
            "assignment_epoch": d.assignment_epoch, "members": members,
            "offsets": lag, "lag": sum(r["lag"] for r in lag), "type": "consumer"}


def _add_owners(rows: list[dict[str, Any]], members: list[dict[str, Any]]) -> None:
    """Each offset row gets the member it is assigned to (None: no member owns it)."""
    owner = {(a["topic"], p): m["member_id"] for m in members for a in m["assignment"]
             for p in a["partitions"]}
    for row in rows:
        row["member_id"] = owner.get((row["topic"], row["partition"]))
