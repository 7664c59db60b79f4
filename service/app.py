"""``strata up``: run a single-node broker in the foreground until Ctrl-C or SIGTERM."""

from __future__ import annotations

import asyncio
import errno
import faulthandler
import gc
import logging
import signal
import ssl
import sys
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

from common.config import BrokerConfig
from common.config.configdef import parse_cpu_list
from common.errors import KafkaError
from common.record.batch import RECORD_WALK_IN_C
from local_tier.descriptors import OPEN_SEGMENTS
from local_tier.index import OPEN_INDEXES
from remote_tier.store import ObjectStore
from service.broker import Broker
from service.cluster.identity import DataDirOwnerError
from service.dynamic_config import SECTION as DYNAMIC_SECTION
from service.dynamic_config import EffectiveConfig
from service.gc_policy import SurvivorFreezer
from service.handlers import Router
from service.handlers.router import api_table
from service.handlers.sasl import credential_lookup
from service.http.auth import http_security
from service.http.server import AdminHttpServer
from service.network.eager import cancel_and_wait
from service.network.server import HistorySender, KafkaServer
from service.quotas.connections import connection_quotas, connection_settings
from service.quotas.manager import QuotaManager, client_quotas
from service.security.authorizer import build_authorizer
from service.security.bootstrap import bootstrap_users, ensure_bootstrap_users
from service.security.listeners import ListenerSettings, listener_settings
from service.security.setup import inter_broker_security, listener_securities
from service.security.tls_reload import TlsSources

__all__ = ["parse_hostport", "run_broker"]

log = logging.getLogger("strata")

# The event loop shares the GIL with threads that run Python for seconds at a time (the log
# cleaners, tiered-fetch and validation threads). At CPython's default 5 ms switch interval
# every time the loop gives the GIL up (each socket call) it may wait 5 ms to get it back:
# produce p99 at 5,000 records/s went from 6 ms idle to 63-118 ms while the cleaner ran
# (bench/compaction.py produce-p99). At 0.5 ms it is 7-8 ms, with no change in produce
# throughput (strata perf produce, 1.5M records, within the run-to-run spread).
GIL_SWITCH_INTERVAL_S = 0.0005


def parse_hostport(value: str, default_port: int) -> tuple[str, int]:
    host, sep, port = value.rpartition(":")
    if not sep:
        return value, default_port
    host = host.strip("[]")
    return host or "0.0.0.0", int(port)


async def _serve(
    data_dir: Path,
    config: BrokerConfig,
    settings: ListenerSettings,
    object_store: ObjectStore | None,
    http: str | None,
    on_serving: Callable[[], None],
) -> None:
    loop = asyncio.get_running_loop()
    OPEN_INDEXES.bind()  # the loop owns the logs: the descriptors it uses are bounded
    OPEN_SEGMENTS.bind()
    stop = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)

    if not RECORD_WALK_IN_C:
        log.warning("common.record._recordscan is not built: produced records are checked in Python, "
                    "about a hundred times slower (pip install -e . builds it; it needs a C compiler)")
    tls_sources = TlsSources()  # every TLS context, following its certificate files
    securities = listener_securities(config, settings, tls_sources)
    if any(security.tls_source is not None for security in securities.values()):
        from service.security.tls_engine import openssl_version

        log.info("TLS listeners: %s (the cryptography wheel's; the ssl module's is %s)",
                 openssl_version(), ssl.OPENSSL_VERSION)
    history = HistorySender(
        threads=config.get_int("remote.log.reader.threads"),
        cpus=parse_cpu_list(config.get("remote.log.reader.cpus") or ""),  # the tiered-fetch threads' CPUs
    )
    quota_slot: list[QuotaManager] = []  # exists once the broker does; servers bind first
    limits = connection_quotas(config, [spec.name for spec in settings.listeners], settings.inter_broker,
                               ip_rate=lambda ip: quota_slot[0].ip_rate(ip) if quota_slot else None)
    resolved_overrides: dict[str, Any] = {}  # max.connections.per.ip.overrides, read once per value
    servers: dict[str, KafkaServer] = {}
    broker: Broker | None = None
    admin = None
    background = tiering = tls_reload = None
    try:
        router_slot: list[Router] = []

        class _Dispatch:  # the router exists once the broker does; servers bind first
            def dispatch(self, frame: Any, conn: Any) -> Any:
                return router_slot[0].dispatch(frame, conn)

            def prepare(self, frame: Any) -> Any:
                return router_slot[0].prepare(frame)

        for spec in settings.listeners:
            server = KafkaServer(
                _Dispatch(),
                spec.host or "0.0.0.0",
                spec.port,
                max_request_bytes=config.get_int("socket.request.max.bytes"),
                max_inflight_per_connection=config.get_int("queued.max.requests"),
                queued_max_request_bytes=config.get_int("queued.max.request.bytes"),
                connections_max_idle_ms=config.get_int("connections.max.idle.ms"),
                send_buffer_bytes=config.get_int("socket.send.buffer.bytes"),
                receive_buffer_bytes=config.get_int("socket.receive.buffer.bytes"),
                receive_backlog_buffer_bytes=config.get_int("socket.receive.backlog.buffer.bytes"),
                request_min_rate_bytes=config.get_int("request.receive.min.rate.bytes"),
                request_receive_grace_ms=config.get_int("request.receive.grace.ms"),
                history=history,
                security=securities[spec.name],
                listener=spec.name,
                limits=limits,
            )
            await server.start(serve=False)  # bound: the port is known; served once joined
            servers[spec.name] = server
        settings = settings.with_bound_ports({name: s.port for name, s in servers.items()})
        broker = Broker(
            data_dir=data_dir,
            config=config,
            advertised_listeners=settings.advertised_endpoints(),
            object_store=object_store,
            inter_broker=inter_broker_security(config, settings, tls_sources),
        )
        authorizer = build_authorizer(config, broker)
        dynamic = _dynamic_configs(config, broker)
        limits.follow(lambda: broker.controller.revision, lambda: connection_settings(
            dynamic(), [spec.name for spec in settings.listeners], resolved_overrides))
        quota_slot.append(client_quotas(config, broker.controller, dynamic))
        router_slot.append(Router(broker, authorizer, quota_slot[0]))
        if http:
            http_host, http_port = parse_hostport(http, 9644)
            admin = AdminHttpServer(
                broker, http_host, http_port,
                connections=lambda: sum(s.connection_count for s in servers.values()),
                limits=limits, max_connections=config.get_int("http.max.connections"),
                security=http_security(config, authorizer, credential_lookup(broker), tls_sources),
                tls=tls_sources,
            )
            await admin.start()
        # from the start on: a start loading 10,000 logs ran full collections of 150-610 ms,
        # each walking everything loaded so far, until the freeze below
        SurvivorFreezer().install()  # and later, what a slow full collection finds alive
        versions = {spec.key: spec.max_version for spec in api_table().values()}
        if not await _until_stopped(
            broker.start(versions, config.get_int("controller.socket.timeout.ms") / 1000), stop
        ):
            return
        await ensure_bootstrap_users(broker, bootstrap_users(broker.inter_broker))
        _freeze_what_start_made()
        for server in servers.values():
            server.serve()
        if admin is not None:
            admin.ready = True
        on_serving()
        background = asyncio.create_task(broker.run_background(), name="log-maintenance")
        broker.logs.roll_listeners.append(broker.tiering.segment_rolled)  # sealed segments go up soon
        tiering = asyncio.create_task(broker.tiering.run(broker), name="tiering")
        tls_reload = asyncio.create_task(tls_sources.run(), name="tls-reload")
        controller = broker.controller
        where = ", ".join(f"{spec.host or '0.0.0.0'}:{spec.port}" + (
            "" if settings.listeners == (spec,) and spec.name == "PLAINTEXT" else f" ({spec.name})")
            for spec in settings.listeners)
        print(
            f"strata: broker {broker.node_id} of cluster {controller.cluster_id} "
            f"listening on {where} (Kafka protocol), data in {data_dir}; "
            f"controller: broker {controller.controller_id}",
            flush=True,
        )
        if admin is not None:
            base = f"{'https' if admin.security.ssl_context else 'http'}://{http_host}:{admin.port}"
            print(f"strata: console {base}/  metrics {base}/metrics  admin API {base}/v1/ "
                  f"(OpenAPI {base}/v1/openapi.json)", flush=True)
        await stop.wait()
    finally:
        print("strata: shutting down", flush=True)
        _exit_at_the_latest(config)
        if broker is not None:
            await broker.stop()
        for server in servers.values():
            await server.close()
        history.close()
        if admin is not None:
            await admin.close()
        for task in (background, tiering, tls_reload):
            if task is not None:
                await cancel_and_wait(task)
        if broker is not None:
            broker.close()
        print("strata: stopped cleanly", flush=True)


def _exit_at_the_latest(config: BrokerConfig) -> None:
    """Whatever a shutdown step waits for, the process exits ``controlled.shutdown.timeout.ms``
    plus ``shutdown.timeout.ms`` after the signal: then every thread's stack goes to stderr
    (what was stuck) and the process exits 1, as after a crash (the next start recovers the
    logs; nothing acknowledged is lost). Issue #31 saw 2 of 9 SIGTERMs never exit."""
    bound_s = (config.get_int("controlled.shutdown.timeout.ms")
               + config.get_int("shutdown.timeout.ms")) / 1000
    faulthandler.dump_traceback_later(bound_s, exit=True)


def _dynamic_configs(config: BrokerConfig, broker: Broker) -> Callable[[], EffectiveConfig]:
    """The broker's configs with the dynamic ones of its newest metadata (kafka-configs.sh
    --entity-type brokers), made again only when the metadata changed."""
    cached: list[tuple[int, EffectiveConfig]] = []

    def current() -> EffectiveConfig:
        revision = broker.controller.revision
        if not cached or cached[0][0] != revision:
            section = broker.controller.metadata.section(DYNAMIC_SECTION) if revision >= 0 else None
            cached[:] = [(revision, EffectiveConfig(config, broker.node_id, section))]
        return cached[0][1]

    return current


async def _until_stopped(work: Coroutine[Any, Any, None], stop: asyncio.Event) -> bool:
    """Run ``work``; False if ``stop`` was set first (``work`` is then cancelled)."""
    task = asyncio.ensure_future(work)
    stopping = asyncio.ensure_future(stop.wait())
    await asyncio.wait({task, stopping}, return_when=asyncio.FIRST_COMPLETED)
    stopping.cancel()
    if not task.done():
        await cancel_and_wait(task)
        return False
    task.result()
    return True


def _freeze_what_start_made() -> None:
    """Collect once, then leave every object the start made (modules, schemas, the loaded
    logs) out of the cyclic garbage collector's full passes (``gc.freeze``): they live as
    long as the process, and a full pass over them all held the event loop 40-80 ms at a
    time in a broker of 1,000 partitions (issue 32's loop-lag test saw them). Once, before
    serving: the collection's own pause is paid at start."""
    gc.collect()
    gc.freeze()


def _run(main: Coroutine[Any, Any, None]) -> None:
    """uvloop when installed (its socket calls cost a fraction of the stock loop's), else asyncio."""
    try:
        import uvloop
    except ImportError:
        asyncio.run(main)
        return
    uvloop.run(main)


def run_broker(
    data_dir: Path,
    config: BrokerConfig,
    listen: str | None,
    advertise: str | None,
    object_store: ObjectStore | None = None,
    http: str | None = None,
    on_serving: Callable[[], None] = lambda: None,
) -> int:
    """Run the broker until a signal; ``on_serving`` is called once it serves clients
    (a start that fails before then has acknowledged nothing). ``listen``/``advertise``:
    ``strata up --listen/--advertise``, the PLAINTEXT shorthand of ``listeners`` and
    ``advertised.listeners`` (refused beside them)."""
    try:
        settings = listener_settings(config, shorthand=listen, advertise=advertise)
    except ValueError as exc:
        print(f"strata up: {exc}", file=sys.stderr, flush=True)
        return 2
    sys.setswitchinterval(GIL_SWITCH_INTERVAL_S)
    listen = ",".join(str(spec) for spec in settings.listeners)
    try:
        _run(_serve(data_dir, config, settings, object_store, http, on_serving))
    except (KafkaError, DataDirOwnerError) as exc:  # refused by the cluster, or not its data dir
        log.error("broker %d cannot start: %s", config.node_id, exc)
        print(f"strata: cannot start broker {config.node_id}: {exc}", flush=True)
        return 1
    except ValueError as exc:  # a TLS key, a certificate, a mapping rule, credentials
        log.error("broker %d cannot start: %s", config.node_id, exc)
        print(f"strata: cannot start broker {config.node_id}: {exc}", flush=True)
        return 1
    except OSError as exc:
        log.error("cannot start the broker (listener %s, data in %s): %s", listen, data_dir, exc)
        if exc.errno != errno.EADDRINUSE:  # a data dir, a file, a permission: say which
            print(f"strata: cannot start the broker with data in {data_dir}: {exc}")
            return 1
        print(f"strata: cannot listen on {listen} or {http}: {exc.strerror or exc}. "
              "Is another broker running? Pick ports with --listen HOST:PORT and --http HOST:PORT.")
        return 1
    return 0
