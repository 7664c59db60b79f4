"""The admin API's cluster, topic, partition, history and record routes (``/v1/...``).

Lists are aggregated server-side and paged (``offset``, ``limit``), so the console
needs a handful of requests per refresh whatever the partition count. Cluster-wide
figures come from the cluster metadata (brokers, their fencing, the controller,
partition leaders and ISRs); throughput and the log state are this broker's.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from common.errors import KafkaError
from controller.controller import AlterConfigOp
from controller.topic_changes import MAX_PARTITIONS_PER_OPERATION
from service.http.browse import MAX_BYTES, MAX_PREVIEW, MAX_RECORDS, BrowseRequest, browse
from service.http.common import (
    VISIBLE,
    ApiError,
    body_int,
    json_body,
    path_int,
    query_int,
    query_list,
    string_map,
)
from service.http.history import History
from service.http.state import is_internal, partition_state, topic_totals
from service.http.views import AdminView
from service.version import strata_version

__all__ = ["MAX_PAGE", "AdminRoutes", "store_location"]

MAX_PAGE = 1000
_MAX_SERIES = 100  # topics and groups per history request


def store_location(store: Any) -> tuple[str, str | None]:
    """The object store as a URL (``file:///...``, ``s3://bucket/prefix``) and its endpoint."""
    url = getattr(store, "url", None)
    endpoint = getattr(store, "endpoint", None)
    return (url if isinstance(url, str) else type(store).__name__,
            endpoint if isinstance(endpoint, str) else None)


def page(request: web.Request) -> tuple[int, int]:
    """``offset`` and ``limit`` (1 to MAX_PAGE); without ``limit``, everything from ``offset``
    (what callers got before the lists were paged)."""
    offset = query_int(request, "offset", 0, 0, 2**31 - 1) or 0
    limit = query_int(request, "limit", None, 1, MAX_PAGE)
    return offset, limit if limit is not None else 2**31 - 1


class AdminRoutes:
    def __init__(self, broker: AdminView, history: History) -> None:
        self._broker = broker
        self._history = history

    def add_to(self, r: web.UrlDispatcher) -> None:
        r.add_get("/v1/cluster", self.cluster)
        r.add_get("/v1/brokers", self.brokers)
        r.add_get("/v1/history", self.history)
        r.add_get("/v1/topics", self.topics)
        r.add_post("/v1/topics", self.create_topic)
        r.add_get("/v1/topics/{topic}", self.describe_topic)
        r.add_delete("/v1/topics/{topic}", self.delete_topic)
        r.add_patch("/v1/topics/{topic}/configs", self.alter_configs)
        r.add_get("/v1/topics/{topic}/partitions", self.partitions)
        r.add_get("/v1/topics/{topic}/partitions/{partition}/records", self.records)

    # -- cluster ----------------------------------------------------------------------------

    def broker_list(self) -> list[dict[str, Any]]:
        c = self._broker.controller
        registrations = c.metadata.brokers
        out = []
        for b in c.brokers():
            reg = registrations.get(b.node_id)
            out.append({"node_id": b.node_id, "host": b.host, "port": b.port, "rack": b.rack,
                        "fenced": bool(reg.fenced) if reg is not None else False,
                        "controller": b.node_id == c.controller_id,
                        "this_broker": b.node_id == c.node_id})
        return out

    async def cluster(self, request: web.Request) -> web.Response:
        c = self._broker.controller
        topics = c.topics()
        internal = sum(1 for t in topics if is_internal(t.name))
        groups = self._broker.groups
        url, endpoint = store_location(self._broker.object_store)
        return web.json_response({
            "cluster_id": c.cluster_id,
            "controller_id": c.controller_id,
            "node_id": c.node_id,
            "brokers": self.broker_list(),
            "topics": len(topics),
            "user_topics": len(topics) - internal,
            "internal_topics": internal,
            "partitions": sum(t.partitions for t in topics),
            "groups": len(groups.list_groups_by_type()) if groups is not None else 0,
            "object_store": url,
            "object_store_endpoint": endpoint,
            "tiering_enabled": self._broker.tiering.enabled,
            "version": strata_version(),
            "throughput": self._history.rates(),
        })

    async def brokers(self, request: web.Request) -> web.Response:
        return web.json_response({"brokers": self.broker_list()})

    async def history(self, request: web.Request) -> web.Response:
        topics = query_list(request, "topic", _MAX_SERIES)
        groups = query_list(request, "group", _MAX_SERIES)
        return web.json_response(self._history.series(topics, groups))

    # -- topics -----------------------------------------------------------------------------

    def _state(self, topic: str, partition: int) -> dict[str, Any] | None:
        try:
            return partition_state(self._broker, topic, partition)
        except KafkaError:
            return None  # created a moment ago: its log is not open yet

    async def topics(self, request: web.Request) -> web.Response:
        kind = request.query.get("kind", "all")
        if kind not in ("all", "user", "internal"):
            raise ApiError(400, "INVALID_REQUEST", "kind must be all, user or internal")
        needle = request.query.get("q", "")
        offset, limit = page(request)
        every = self._broker.controller.topics()
        visible = request.get(VISIBLE)
        if visible is not None:
            every = [t for t in every if visible(t.name)]
        chosen = [t for t in every if needle in t.name
                  and (kind == "all" or is_internal(t.name) == (kind == "internal"))]
        out = []
        for t in chosen[offset:offset + limit]:
            totals = topic_totals(s for p in range(t.partitions) if (s := self._state(t.name, p)))
            rate_in, rate_out = self._history.topic_rates(t.name)
            out.append({"name": t.name, "topic_id": str(t.topic_id), "partitions": t.partitions,
                        "internal": is_internal(t.name), **totals,
                        "bytes_in_per_sec": rate_in, "bytes_out_per_sec": rate_out})
        return web.json_response({"topics": out, "total": len(chosen),
                                  "internal_topics": sum(1 for t in every if is_internal(t.name))})

    async def create_topic(self, request: web.Request) -> web.Response:
        body = await json_body(request)
        name = body.get("name")
        if not isinstance(name, str) or not name:
            raise ApiError(400, "INVALID_REQUEST", "name (a string) is required")
        partitions = body_int(body.get("partitions"), "partitions", -1)
        if partitions > MAX_PARTITIONS_PER_OPERATION:  # the controller's bound, refused before the body is used
            raise ApiError(400, "INVALID_PARTITIONS", f"at most {MAX_PARTITIONS_PER_OPERATION} partitions")
        replication = body_int(body.get("replication_factor"), "replication_factor", -1)
        configs = string_map(body.get("configs"), "configs")
        info = await self._broker.create_topic(name, num_partitions=partitions, replication_factor=replication,
                                         configs=configs)
        return web.json_response(self._topic_json(info.name, with_partitions=False), status=201)

    def _require(self, name: str) -> Any:
        info = self._broker.controller.topic(name)
        if info is None:
            raise ApiError(404, "UNKNOWN_TOPIC_OR_PARTITION", f"no topic named {name!r}")
        return info

    def _topic_json(self, name: str, *, with_partitions: bool = True) -> dict[str, Any]:
        c = self._broker.controller
        info = self._require(name)
        configs = {e.name: {"value": e.value, "source": e.source.name, "is_default": e.is_default,
                            "read_only": e.read_only, "sensitive": e.sensitive}
                   for e in c.describe_topic_config(name)}
        out: dict[str, Any] = {"name": name, "topic_id": str(info.topic_id), "partitions": info.partitions,
                               "internal": is_internal(name), "configs": configs}
        if with_partitions:
            out["partition_states"] = self._partition_states(name, 0, info.partitions)
        return out

    def _partition_states(self, name: str, start: int, stop: int) -> list[dict[str, Any]]:
        registrations = self._broker.controller.partitions(name)
        out = []
        for p in range(start, min(stop, len(registrations))):
            state = self._state(name, p)
            if state is None:
                continue
            reg = registrations[p]
            state.update(leader=reg.leader, replicas=list(reg.replicas), isr=list(reg.isr))
            out.append(state)
        return out

    async def describe_topic(self, request: web.Request) -> web.Response:
        return web.json_response(self._topic_json(request.match_info["topic"]))

    async def delete_topic(self, request: web.Request) -> web.Response:
        name = request.match_info["topic"]
        self._require(name)
        await self._broker.delete_topic(name)
        return web.json_response({"deleted": name})

    async def alter_configs(self, request: web.Request) -> web.Response:
        name = request.match_info["topic"]
        body = await json_body(request)
        sets = string_map(body.get("set"), "set")
        deletes = body.get("delete") or []
        if not isinstance(deletes, list) or not all(isinstance(k, str) for k in deletes):
            raise ApiError(400, "INVALID_REQUEST", "delete must be a list of config names")
        if not sets and not deletes:
            raise ApiError(400, "INVALID_REQUEST", "give configs to set or delete")
        self._require(name)
        ops: list[tuple[str, int, str | None]] = [(k, int(AlterConfigOp.SET), v) for k, v in sets.items()]
        ops += [(str(k), int(AlterConfigOp.DELETE), None) for k in deletes]
        await self._broker.alter_topic_configs(name, ops, False)
        return web.json_response(self._topic_json(name, with_partitions=False))

    async def partitions(self, request: web.Request) -> web.Response:
        name = request.match_info["topic"]
        info = self._require(name)
        offset, limit = page(request)
        return web.json_response({
            "topic": name,
            "topic_id": str(info.topic_id),
            "total": info.partitions,
            "partitions": self._partition_states(name, offset, offset + limit),
        })

    async def records(self, request: web.Request) -> web.Response:
        name = request.match_info["topic"]
        info = self._require(name)
        partition = path_int(request, "partition")
        if partition >= info.partitions:
            raise ApiError(404, "UNKNOWN_TOPIC_OR_PARTITION",
                           f"topic {name!r} has no partition {partition} (it has {info.partitions})")
        offset = query_int(request, "offset", None)
        timestamp = query_int(request, "timestamp", None)
        if offset is not None and timestamp is not None:
            raise ApiError(400, "INVALID_REQUEST", "give offset or timestamp, not both")
        encoding = request.query.get("encoding", "text")
        if encoding not in ("text", "hex"):
            raise ApiError(400, "INVALID_REQUEST", "encoding must be text or hex")
        req = BrowseRequest(
            name, partition, offset=offset, timestamp=timestamp,
            max_records=query_int(request, "max_records", 50, 1, MAX_RECORDS) or 50,
            max_bytes=query_int(request, "max_bytes", 1024 * 1024, 1, MAX_BYTES) or MAX_BYTES,
            encoding=encoding,
            preview_bytes=query_int(request, "preview_bytes", 1024, 1, MAX_PREVIEW) or 1024,
        )
        return web.json_response(await browse(self._broker, req))
