"""The broker's HTTP listener (aiohttp): metrics, health, the admin API and a status page.

``GET /metrics``                          Prometheus text format (:mod:`service.http.metrics`)
``GET /v1/health``                        the process answers
``GET /v1/ready``                         recovery is done and the object store answers
``GET /v1/cluster``                       cluster id, controller, brokers
``GET /v1/brokers``                       the registered brokers
``GET|POST /v1/topics``                   list / create topics
``GET|DELETE /v1/topics/{topic}``         describe (configs and partitions) / delete
``PATCH /v1/topics/{topic}/configs``      set and delete config overrides
``GET /v1/topics/{topic}/partitions``     offsets, local and remote bytes, upload lag
``GET /v1/groups``, ``/v1/groups/{group}`` consumer groups, members and lag
``GET /v1/openapi.json``                  the OpenAPI 3.1 document of all of this
``GET /``                                 the status page (plain HTML, refreshes itself)

Every error is JSON ``{"error_code": ..., "message": ...}``: 400 for bad input, 404
for what does not exist, 409 for a conflict, 503 while not ready. Kafka errors
keep their Kafka names (``TOPIC_ALREADY_EXISTS``, ``INVALID_CONFIG`` ...).
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable
from importlib import resources
from typing import Any

from aiohttp import web

from controller.controller import AlterConfigOp
from local_tier.errors import ErrorCode, KafkaError
from service.http.metrics import render
from service.http.openapi import OPENAPI
from service.http.state import group_lag, partition_state
from service.http.views import AdminView

__all__ = ["AdminHttpServer"]

log = logging.getLogger("strata.http")

_STATUS = {
    ErrorCode.unknown_topic_or_partition: 404,
    ErrorCode.topic_already_exists: 409,
    ErrorCode.kafka_storage_error: 503,
}
_MAX_PARTITIONS = 1000  # per request; the Kafka protocol takes more


class ApiError(Exception):
    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status, self.code, self.message = status, code, message


def _error(status: int, code: str, message: str) -> web.Response:
    return web.json_response({"error_code": code, "message": message}, status=status)


Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@web.middleware
async def _errors(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Every failure becomes a JSON error; a bug is logged and answered 500, never a traceback."""
    try:
        return await handler(request)
    except ApiError as exc:
        return _error(exc.status, exc.code, exc.message)
    except KafkaError as exc:
        return _error(_STATUS.get(exc.code, 400), exc.code.name.upper(), exc.message)
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        return _error(exc.status, exc.reason.upper().replace(" ", "_"), exc.text or exc.reason)
    except Exception:
        log.exception("admin API %s %s failed", request.method, request.path)
        return _error(500, "UNKNOWN_SERVER_ERROR", "the request failed on the broker; see its log")


async def _json_body(request: web.Request) -> dict[str, Any]:
    try:
        body = await request.json(loads=json.loads)
    except (ValueError, UnicodeDecodeError) as exc:
        raise ApiError(400, "INVALID_REQUEST", f"the body is not JSON: {exc}") from None
    if not isinstance(body, dict):
        raise ApiError(400, "INVALID_REQUEST", "the body must be a JSON object")
    return body


def _string_map(value: Any, what: str) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
        raise ApiError(400, "INVALID_REQUEST", f"{what} must be an object of string values")
    return dict(value)


def _int(value: Any, what: str, default: int) -> int:
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int):
        raise ApiError(400, "INVALID_REQUEST", f"{what} must be an integer")
    return value


class AdminHttpServer:
    def __init__(self, broker: AdminView, host: str, port: int, *, connections: Callable[[], int] = lambda: 0) -> None:
        self._broker = broker
        self._host = host
        self._port = port
        self._connections = connections
        self._runner: web.AppRunner | None = None
        self.port = port
        self.ready = False

    def _app(self) -> web.Application:
        app = web.Application(middlewares=[_errors], client_max_size=1024 * 1024)
        r = app.router
        r.add_get("/", self._status_page)
        r.add_get("/metrics", self._metrics)
        r.add_get("/v1/openapi.json", self._openapi)
        r.add_get("/v1/health", self._health)
        r.add_get("/v1/ready", self._ready)
        r.add_get("/v1/cluster", self._cluster)
        r.add_get("/v1/brokers", self._brokers)
        r.add_get("/v1/topics", self._topics)
        r.add_post("/v1/topics", self._create_topic)
        r.add_get("/v1/topics/{topic}", self._describe_topic)
        r.add_delete("/v1/topics/{topic}", self._delete_topic)
        r.add_patch("/v1/topics/{topic}/configs", self._alter_configs)
        r.add_get("/v1/topics/{topic}/partitions", self._partitions)
        r.add_get("/v1/groups", self._groups)
        r.add_get("/v1/groups/{group}", self._describe_group)
        return app

    async def start(self) -> None:
        self._runner = web.AppRunner(self._app(), access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self._host, self._port)
        await site.start()
        server = getattr(site, "_server", None)
        if server is not None and server.sockets:
            self.port = int(server.sockets[0].getsockname()[1])

    async def close(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    # -- operations -------------------------------------------------------------

    async def _status_page(self, request: web.Request) -> web.Response:
        page = resources.files("service.http").joinpath("static/status.html").read_text(encoding="utf-8")
        return web.Response(text=page, content_type="text/html")

    async def _metrics(self, request: web.Request) -> web.Response:
        body = render(self._broker, self._connections)
        return web.Response(body=body, headers={"Content-Type": "text/plain; version=0.0.4; charset=utf-8"})

    async def _openapi(self, request: web.Request) -> web.Response:
        return web.json_response(OPENAPI)

    async def _health(self, request: web.Request) -> web.Response:
        return web.json_response({"status": "ok"})

    async def _ready(self, request: web.Request) -> web.Response:
        if not self.ready:
            return _error(503, "NOT_READY", "the broker is still recovering its logs")
        loop = asyncio.get_running_loop()
        try:
            await loop.run_in_executor(None, lambda: next(iter(self._broker.object_store.list("cluster/")), None))
        except Exception as exc:  # noqa: BLE001 - any failure means "not ready", with its reason
            return _error(503, "OBJECT_STORE_UNAVAILABLE", f"the object store does not answer: {exc}")
        return web.json_response({"status": "ready"})

    async def _cluster(self, request: web.Request) -> web.Response:
        c = self._broker.controller
        return web.json_response({
            "cluster_id": c.cluster_id,
            "controller_id": c.controller_id,
            "brokers": self._broker_list(),
            "topics": len(c.topics()),
            "object_store": repr(self._broker.object_store),
            "tiering_enabled": self._broker.tiering.enabled,
        })

    def _broker_list(self) -> list[dict[str, Any]]:
        return [{"node_id": b.node_id, "host": b.host, "port": b.port, "rack": b.rack}
                for b in self._broker.controller.brokers()]

    async def _brokers(self, request: web.Request) -> web.Response:
        return web.json_response({"brokers": self._broker_list()})

    async def _topics(self, request: web.Request) -> web.Response:
        out = []
        for t in self._broker.controller.topics():
            states = [self._state(t.name, p) for p in range(t.partitions)]
            out.append({"name": t.name, "topic_id": str(t.topic_id), "partitions": t.partitions,
                        "local_bytes": sum(s["local_bytes"] for s in states if s),
                        "remote_bytes": sum(s["remote_bytes"] for s in states if s),
                        "upload_lag_bytes": sum(s["upload_lag_bytes"] for s in states if s)})
        return web.json_response({"topics": out})

    def _state(self, topic: str, partition: int) -> dict[str, Any] | None:
        try:
            return partition_state(self._broker, topic, partition)
        except KafkaError:
            return None  # created a moment ago: its log is not open yet

    async def _create_topic(self, request: web.Request) -> web.Response:
        body = await _json_body(request)
        name = body.get("name")
        if not isinstance(name, str) or not name:
            raise ApiError(400, "INVALID_REQUEST", "name (a string) is required")
        partitions = _int(body.get("partitions"), "partitions", -1)
        if partitions > _MAX_PARTITIONS:
            raise ApiError(400, "INVALID_PARTITIONS", f"at most {_MAX_PARTITIONS} partitions")
        replication = _int(body.get("replication_factor"), "replication_factor", -1)
        configs = _string_map(body.get("configs"), "configs")
        info = self._broker.create_topic(name, num_partitions=partitions, replication_factor=replication,
                                         configs=configs)
        return web.json_response(self._topic_json(info.name, with_partitions=False), status=201)

    def _topic_json(self, name: str, *, with_partitions: bool = True) -> dict[str, Any]:
        c = self._broker.controller
        info = c.topic(name)
        if info is None:
            raise ApiError(404, "UNKNOWN_TOPIC_OR_PARTITION", f"no topic named {name!r}")
        configs = {e.name: {"value": e.value, "source": e.source.name, "is_default": e.is_default,
                            "read_only": e.read_only, "sensitive": e.sensitive}
                   for e in c.describe_topic_config(name)}
        out: dict[str, Any] = {"name": name, "topic_id": str(info.topic_id), "partitions": info.partitions,
                               "configs": configs}
        if with_partitions:
            out["partition_states"] = [s for p in range(info.partitions) if (s := self._state(name, p))]
        return out

    async def _describe_topic(self, request: web.Request) -> web.Response:
        return web.json_response(self._topic_json(request.match_info["topic"]))

    async def _delete_topic(self, request: web.Request) -> web.Response:
        name = request.match_info["topic"]
        if self._broker.controller.topic(name) is None:
            raise ApiError(404, "UNKNOWN_TOPIC_OR_PARTITION", f"no topic named {name!r}")
        self._broker.delete_topic(name)
        return web.json_response({"deleted": name})

    async def _alter_configs(self, request: web.Request) -> web.Response:
        name = request.match_info["topic"]
        body = await _json_body(request)
        sets = _string_map(body.get("set"), "set")
        deletes = body.get("delete") or []
        if not isinstance(deletes, list) or not all(isinstance(k, str) for k in deletes):
            raise ApiError(400, "INVALID_REQUEST", "delete must be a list of config names")
        if not sets and not deletes:
            raise ApiError(400, "INVALID_REQUEST", "give configs to set or delete")
        if self._broker.controller.topic(name) is None:
            raise ApiError(404, "UNKNOWN_TOPIC_OR_PARTITION", f"no topic named {name!r}")
        ops = [(k, int(AlterConfigOp.SET), v) for k, v in sets.items()]
        ops += [(k, int(AlterConfigOp.DELETE), None) for k in deletes]
        self._broker.alter_topic_configs(name, ops, False)
        return web.json_response(self._topic_json(name, with_partitions=False))

    async def _partitions(self, request: web.Request) -> web.Response:
        name = request.match_info["topic"]
        info = self._broker.controller.topic(name)
        if info is None:
            raise ApiError(404, "UNKNOWN_TOPIC_OR_PARTITION", f"no topic named {name!r}")
        return web.json_response({
            "topic": name,
            "topic_id": str(info.topic_id),
            "partitions": [s for p in range(info.partitions) if (s := self._state(name, p))],
        })

    def _coordinator(self) -> Any:
        if self._broker.groups is None:
            raise ApiError(503, "NOT_READY", "the broker is still recovering its logs")
        return self._broker.groups

    async def _groups(self, request: web.Request) -> web.Response:
        groups = self._coordinator()
        committed = groups.committed_offsets()
        out = [{"group_id": g, "protocol_type": ptype, "state": state, "type": kind,
                "lag": sum(r["lag"] for r in group_lag(self._broker, committed.get(g, {})))}
               for g, ptype, state, kind in sorted(groups.list_groups_by_type())]
        return web.json_response({"groups": out})

    async def _describe_group(self, request: web.Request) -> web.Response:
        group_id = request.match_info["group"]
        groups = self._coordinator()
        if groups.is_consumer_group(group_id):
            return self._describe_consumer_group(group_id)
        code, summary = groups.describe_group(group_id)
        offsets = groups.committed_offsets().get(group_id, {})
        if code != ErrorCode.none:
            raise ApiError(400, code.name.upper(), f"cannot describe group {group_id!r}")
        if summary.state == "Dead" and not offsets:
            raise ApiError(404, "GROUP_ID_NOT_FOUND", f"no group named {group_id!r}")
        members = [{"member_id": m.member_id, "group_instance_id": m.group_instance_id,
                    "client_id": m.client_id, "client_host": m.client_host} for m in summary.members]
        lag = group_lag(self._broker, offsets)
        return web.json_response({"group_id": group_id, "state": summary.state,
                                  "protocol_type": summary.protocol_type, "protocol": summary.protocol_name,
                                  "generation_id": summary.generation_id, "members": members,
                                  "offsets": lag, "lag": sum(r["lag"] for r in lag), "type": "classic"})

    def _describe_consumer_group(self, group_id: str) -> web.Response:
        """A consumer-protocol (KIP-848) group: epochs, each member's assignment and target."""
        groups = self._coordinator()
        d = groups.consumer_group_describe(group_id)

        def named(assignment: Any) -> list[dict[str, Any]]:
            return [{"topic": name, "partitions": list(parts)} for _, name, parts in assignment]

        members = [{"member_id": m.member_id, "group_instance_id": m.instance_id,
                    "client_id": m.client_id, "client_host": m.client_host,
                    "member_epoch": m.member_epoch, "assignment": named(m.assignment),
                    "target_assignment": named(m.target)} for m in d.members]
        lag = group_lag(self._broker, groups.committed_offsets().get(group_id, {}))
        return web.json_response({"group_id": group_id, "state": d.state, "protocol_type": "consumer",
                                  "protocol": d.assignor, "generation_id": d.group_epoch,
                                  "assignment_epoch": d.assignment_epoch, "members": members,
                                  "offsets": lag, "lag": sum(r["lag"] for r in lag), "type": "consumer"})
