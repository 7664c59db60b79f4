"""The broker's HTTP listener (aiohttp): the console, metrics, health and the admin API.

``GET /``                                 the console (static page + JSON below; no build step)
``GET /static/...``                       its script, styles and the vendored uPlot
``GET /metrics``                          Prometheus text format (:mod:`service.http.metrics`)
``GET /v1/health``                        the process answers
``GET /v1/ready``                         recovery is done and the object store answers
``GET /v1/openapi.json``                  the OpenAPI 3.0 document of the admin API
``/v1/cluster``, ``/v1/brokers``, ``/v1/history``, ``/v1/topics...``   :mod:`service.http.admin`
``/v1/groups``, ``/v1/groups/{group}``    :mod:`service.http.group_routes`

Every request enters through :meth:`AdminHttpServer._app`'s middleware chain
(errors, then TLS-aware authentication and ACLs, :mod:`service.http.auth`, then the
wait for start-up), and every error leaves as JSON
``{"error_code": ..., "message": ...}``: 400 for bad input, 401 without credentials,
403 without the ACL a route needs, 404 for what does not exist, 409 for a conflict,
503 while not ready. Kafka errors keep their Kafka
names (``TOPIC_ALREADY_EXISTS``, ``INVALID_CONFIG`` ...).
"""

from __future__ import annotations

import asyncio
import logging
import mimetypes
from collections.abc import Awaitable, Callable
from importlib import resources

from aiohttp import web

from common.errors import ErrorCode, KafkaError
from service.http.admin import AdminRoutes
from service.http.auth import HttpSecurity
from service.http.common import ApiError, error_response
from service.http.group_routes import GroupRoutes
from service.http.history import History
from service.http.listening import HttpListener
from service.http.metrics import exposition, gather
from service.http.openapi import OPENAPI
from service.http.views import AdminView
from service.quotas.connections import ConnectionQuotas
from service.security.tls_reload import TlsSources

__all__ = ["AdminHttpServer"]

log = logging.getLogger("strata.http")

_STATUS = {
    ErrorCode.unknown_topic_or_partition: 404,
    ErrorCode.topic_already_exists: 409,
    ErrorCode.kafka_storage_error: 503,
}
_STATIC = {"console.js", "console.css", "vendor/uplot/uPlot.iife.min.js", "vendor/uplot/uPlot.min.css",
           "vendor/uplot/LICENSE"}

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@web.middleware
async def _errors(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Every failure becomes a JSON error; a bug is logged and answered 500, never a traceback."""
    try:
        return await handler(request)
    except ApiError as exc:
        return error_response(exc.status, exc.code, exc.message)
    except KafkaError as exc:
        return error_response(_STATUS.get(exc.code, 400), exc.code.name.upper(), exc.message)
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        return error_response(exc.status, exc.reason.upper().replace(" ", "_"), exc.text or exc.reason)
    except Exception:
        log.exception("admin API %s %s failed", request.method, request.path)
        return error_response(500, "UNKNOWN_SERVER_ERROR", "the request failed on the broker; see its log")


def _static_file(name: str) -> bytes:
    return resources.files("service.http").joinpath("static").joinpath(name).read_bytes()


_ANSWERED_WHILE_STARTING = frozenset({"/v1/health", "/v1/ready", "/v1/openapi.json"})
_STARTUP_WAIT_S = 30.0


class AdminHttpServer:
    """The HTTP listener of one broker, and the sampler of its counters' history.

    Not thread-safe: runs on the broker's event loop.
    """

    def __init__(self, broker: AdminView, host: str, port: int, *, connections: Callable[[], int],
                 history_interval_s: float = 2.0, security: HttpSecurity | None = None,
                 tls: TlsSources | None = None, limits: ConnectionQuotas | None = None,
                 max_connections: int = 256) -> None:
        """``connections()`` is the Kafka listener's count of open client connections;
        ``security``: TLS, authentication and ACLs (:mod:`service.http.auth`); ``tls``:
        the broker's :class:`~service.security.tls_reload.TlsSources` and ``limits`` its
        :class:`~service.quotas.connections.ConnectionQuotas`, for ``/metrics`` and the
        open-files guard; ``max_connections``: ``http.max.connections``."""
        self._broker = broker
        self.security = security or HttpSecurity()
        self._host = host
        self._port = port
        self._connections = connections
        self._tls = tls
        self._limits = limits
        self._max_connections = max_connections  # http.max.connections
        self._runner: web.AppRunner | None = None
        self._listening: HttpListener | None = None
        self._sampler: asyncio.Task[None] | None = None
        self.history = History(broker, interval_s=history_interval_s)
        self.port = port
        self._ready_event = asyncio.Event()

    @property
    def ready(self) -> bool:
        """True once the broker has joined the cluster and serves; until then only the
        probes answer at once, and other requests wait for it (at most
        ``_STARTUP_WAIT_S``, then 503)."""
        return self._ready_event.is_set()

    @ready.setter
    def ready(self, value: bool) -> None:
        if value:
            self._ready_event.set()
        else:
            self._ready_event.clear()

    @web.middleware
    async def _until_started(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        if not self.ready and request.path not in _ANSWERED_WHILE_STARTING:
            try:
                await asyncio.wait_for(self._ready_event.wait(), _STARTUP_WAIT_S)
            except TimeoutError:
                return error_response(503, "NOT_READY", "the broker has not joined its cluster yet")
        return await handler(request)

    def _app(self) -> web.Application:
        app = web.Application(
            middlewares=[_errors, self.security.middleware, self._until_started], client_max_size=1024 * 1024
        )
        r = app.router
        r.add_get("/", self._console)
        r.add_get("/static/{name:.+}", self._static)
        r.add_get("/metrics", self._metrics)
        r.add_get("/v1/openapi.json", self._openapi)
        r.add_get("/v1/health", self._health)
        r.add_get("/v1/ready", self._ready)
        AdminRoutes(self._broker, self.history).add_to(r)
        GroupRoutes(self._broker).add_to(r)
        return app

    async def start(self) -> None:
        self._runner = web.AppRunner(self._app(), access_log=None)
        await self._runner.setup()
        handler = self._runner.server
        assert handler is not None
        # the socket is ours, not an aiohttp site's: each connection is screened before its
        # TLS handshake (service.http.listening)
        self._listening = HttpListener(self._host, self._port, handler, lambda: len(handler.connections),
                                       ssl_context=self.security.ssl_context, limits=self._limits,
                                       max_connections=self._max_connections)
        self.port = await self._listening.start()
        self._sampler = asyncio.create_task(self.history.run(), name="http-history")

    async def close(self) -> None:
        if self._sampler is not None:
            self._sampler.cancel()
            await asyncio.gather(self._sampler, return_exceptions=True)
        if self._listening is not None:
            await self._listening.close()
        if self._runner is not None:
            await self._runner.cleanup()

    # -- pages and operations ----------------------------------------------------------------

    async def _console(self, request: web.Request) -> web.Response:
        return web.Response(body=_static_file("console.html"), content_type="text/html", charset="utf-8")

    async def _static(self, request: web.Request) -> web.Response:
        name = request.match_info["name"]
        if name not in _STATIC:
            raise ApiError(404, "NOT_FOUND", f"no static file {name!r}")
        kind = mimetypes.guess_type(name)[0] or "text/plain"
        return web.Response(body=_static_file(name), content_type=kind,
                            headers={"Cache-Control": "max-age=300"})

    async def _metrics(self, request: web.Request) -> web.Response:
        families = await gather(self._broker, self._connections, self._tls, self._limits)  # on the loop, in slices
        body = await asyncio.get_running_loop().run_in_executor(None, exposition, families)
        return web.Response(body=body, headers={"Content-Type": "text/plain; version=0.0.4; charset=utf-8"})

    async def _openapi(self, request: web.Request) -> web.Response:
        return web.json_response(OPENAPI)

    async def _health(self, request: web.Request) -> web.Response:
        return web.json_response({"status": "ok"})

    async def _ready(self, request: web.Request) -> web.Response:
        if not self.ready:
            return error_response(503, "NOT_READY", "the broker is still recovering its logs")
        loop = asyncio.get_running_loop()
        try:
            # a HEAD of the metadata head: a LIST is priced like a PUT (ADR 0025 §8)
            await loop.run_in_executor(None, self._broker.object_store.head, "cluster/metadata.json")
        except Exception as exc:  # noqa: BLE001 - any failure means "not ready", with its reason
            return error_response(503, "OBJECT_STORE_UNAVAILABLE", f"the object store does not answer: {exc}")
        return web.json_response({"status": "ready"})

