"""The broker's HTTP listener (aiohttp): liveness, readiness, and partition state.

``GET /v1/health``                      the process answers
``GET /v1/ready``                        recovery is done and the object store answers
``GET /v1/topics``                       topic names
``GET /v1/topics/{topic}/partitions``    per partition: offsets, local and remote
                                         log start and bytes, upload lag, tiering errors

Errors are JSON ``{"error_code": ..., "message": ...}`` with a 4xx status. The
Prometheus metrics and the full admin API build on this listener.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any

from aiohttp import web

if TYPE_CHECKING:
    from service.broker import Broker

__all__ = ["AdminHttpServer", "partition_state"]

log = logging.getLogger("strata.http")


def partition_state(broker: Broker, topic: str, partition: int) -> dict[str, Any]:
    """What an operator wants to know of one partition, local and remote."""
    local = broker.log_for(topic, partition)
    tier = broker.tiering.state(topic, partition)
    remote_next = tier.remote_next_offset if tier is not None else None
    pending = [s for s in local.segments if remote_next is None or s.base_offset >= remote_next]
    return {
        "topic": topic,
        "partition": partition,
        "log_start_offset": broker.tiering.log_start_offset(topic, partition, local),
        "local_log_start_offset": local.log_start_offset,
        "remote_log_start_offset": tier.remote_log_start_offset if tier is not None else None,
        "high_watermark": local.high_watermark,
        "log_end_offset": local.log_end_offset,
        "local_bytes": local.size_in_bytes,
        "local_segments": len(local.segments),
        "remote_bytes": tier.remote_bytes if tier is not None else 0,
        "remote_segments": len(tier.manifest.segments) if tier is not None and tier.manifest else 0,
        "remote_storage_enable": local.config.remote_storage_enable,
        "upload_lag_offsets": (
            local.high_watermark - (remote_next if remote_next is not None else local.log_start_offset)
            if local.config.remote_storage_enable
            else 0
        ),
        "upload_lag_bytes": sum(s.size for s in pending) if local.config.remote_storage_enable else 0,
        "upload_failures": tier.upload_failures if tier is not None else 0,
        "last_upload_error": tier.last_error if tier is not None else None,
    }


def _error(status: int, code: str, message: str) -> web.Response:
    return web.json_response({"error_code": code, "message": message}, status=status)


class AdminHttpServer:
    def __init__(self, broker: Broker, host: str, port: int) -> None:
        self._broker = broker
        self._host = host
        self._port = port
        self._runner: web.AppRunner | None = None
        self.port = port
        self.ready = False

    def _app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/v1/health", self._health)
        app.router.add_get("/v1/ready", self._ready)
        app.router.add_get("/v1/topics", self._topics)
        app.router.add_get("/v1/topics/{topic}/partitions", self._partitions)
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

    async def _topics(self, request: web.Request) -> web.Response:
        return web.json_response({"topics": sorted(t.name for t in self._broker.controller.topics())})

    async def _partitions(self, request: web.Request) -> web.Response:
        name = request.match_info["topic"]
        info = self._broker.controller.topic(name)
        if info is None:
            return _error(404, "UNKNOWN_TOPIC_OR_PARTITION", f"no topic named {name!r}")
        return web.json_response(
            {
                "topic": name,
                "topic_id": str(info.topic_id),
                "partitions": [partition_state(self._broker, name, p) for p in range(info.partitions)],
            }
        )
