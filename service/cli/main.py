"""The ``strata`` command line: the parser, and ``strata up`` (the broker in the foreground).

The client commands register their own sub-parsers (:mod:`service.cli.topics`,
:mod:`~service.cli.console`, :mod:`~service.cli.consumer_groups`,
:mod:`service.cli.perf.command`); ``up`` imports the broker (:mod:`service.app`)
only when it runs, so a client command never loads it.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from service.cli.data_dirs import StartUndo
from service.cli.up_options import UP_DEFAULTS, add_security_options, up_configs
from service.version import strata_version

__all__ = ["main"]


def _check_hostport(value: str, option: str) -> str | None:
    """None if ``value`` is HOST:PORT (HOST may be empty or ``[v6]``), else the complaint."""
    host, sep, port = value.rpartition(":")
    if not sep or (host and not host.startswith("[") and ":" in host):
        return (f"{option} needs HOST:PORT, e.g. {option} localhost:{_DEFAULT_PORTS[option]}; "
                f"got {value!r} (like Kafka's listeners, the port is not implied)")
    if not port.isdigit() or not 0 <= int(port) <= 65535:
        return f"{option} {value!r}: the port must be a number from 0 to 65535"
    return None


_DEFAULT_PORTS = {"--listen": 9092, "--advertise": 9092, "--http": 9644}


def _cmd_up(args: argparse.Namespace) -> int:
    from common.config import BrokerConfig

    if args.brokers is not None:
        from service.cli.local_cluster import run_local_cluster

        return run_local_cluster(args)
    data_dir = Path(args.data_dir).resolve()
    http = None if args.http.lower() in ("off", "none", "") else args.http
    checks = [(args.listen, "--listen"), (args.advertise, "--advertise"), (http, "--http")]
    for value, option in checks:
        problem = _check_hostport(value, option) if value is not None else None
        if problem:
            print(f"strata up: {problem}", file=sys.stderr)
            return 2
    try:
        sets = up_configs(args)
        if args.node_id is not None:
            sets["node.id"] = str(args.node_id)
        config = BrokerConfig({**UP_DEFAULTS, **sets})
    except (ValueError, OSError) as exc:
        print(f"strata up: {exc}", file=sys.stderr)
        return 2
    undo = StartUndo(data_dir)
    code = 1
    try:
        code = _start(args, data_dir, config, http, undo)
        return code
    finally:
        if code != 0:
            undo.undo_dirs()


def _start(args: argparse.Namespace, data_dir: Path, config: Any, http: str | None,
           undo: StartUndo) -> int:
    from local_tier.dirlock import DataDirError, DataDirLock

    try:  # before anything under the data dir is opened or created (ADR 0007)
        lock = DataDirLock.acquire(data_dir)
    except DataDirError as exc:
        print(f"strata up: {exc}", file=sys.stderr)
        return 1
    with lock:
        undo.locked()
        code = 1
        try:
            code = _serve(args, data_dir, config, http, undo)
            return code
        finally:
            if code != 0:
                undo.undo_locked()


def _serve(args: argparse.Namespace, data_dir: Path, config: Any, http: str | None,
           undo: StartUndo) -> int:
    """Open the object store and run the broker (the data dir locked); the exit code."""
    from remote_tier.errors import ObjectStoreError
    from remote_tier.start_wait import StartWait
    from remote_tier.url import open_object_store
    from service.app import run_broker

    url = args.object_store or (data_dir / "bucket").as_uri()
    stop_signal = _stop_raises_interrupt()  # a stop (systemd, Kubernetes) while it waits for the store
    try:
        store = open_object_store(url, s3_endpoint=args.s3_endpoint, s3_region=args.s3_region,
                                  s3_ca_bundle=args.s3_ca_bundle, s3_control_timeout_s=control_timeout_s(config),
                                  wait=StartWait(f"the object store at {url}",
                                                 config.get_int("object.store.start.wait.ms")))
    except ValueError as exc:
        print(f"strata up: --object-store: {exc}", file=sys.stderr)
        return 2
    except ObjectStoreError as exc:
        print(f"strata up: the object store at {url} is not usable: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"strata up: stopped while waiting for the object store at {url}", file=sys.stderr)
        return 130
    finally:
        stop_signal()
    return run_broker(data_dir, config, args.listen, args.advertise, store, http, on_serving=undo.serving)


def _stop_raises_interrupt() -> Callable[[], None]:
    """Until the returned function is called, SIGTERM raises KeyboardInterrupt, as Ctrl-C does
    (the broker's own handlers come later): a stop before the broker runs ends the start
    saying so, and the start's new directories are removed."""
    if threading.current_thread() is not threading.main_thread():
        return lambda: None

    def interrupt(_signum: int, _frame: Any) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, interrupt)
    return lambda: signal.signal(signal.SIGTERM, previous)


def control_timeout_s(config: Any) -> float:
    """The object store's timeout for small control requests: ``object.store.control.timeout.ms``,
    at most half of what a controller lease stays valid without a renewal, so one stalled
    renewal and its retry fit in it."""
    valid_ms = config.get_int("controller.lease.ms") - config.get_int("controller.lease.safety.margin.ms")
    return max(0.1, min(config.get_int("object.store.control.timeout.ms"), valid_ms / 2) / 1000)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="strata", description="Kafka-compatible, tiered-storage event streaming."
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    parser.add_argument("--version", action="version", version=f"strata {strata_version()}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True

    up = sub.add_parser("up", help="run a broker (or, with --brokers N, a local cluster) in the foreground")
    up.add_argument("--data-dir", default=os.environ.get("STRATA_DATA_DIR", "./strata-data"),
                    help="where logs and the embedded object store live (default ./strata-data)")
    up.add_argument("--listen", default=None, metavar="HOST:PORT",
                    help="the PLAINTEXT Kafka listener (default 127.0.0.1:9092); --listeners for others")
    up.add_argument("--advertise", default=None, metavar="HOST:PORT",
                    help="address clients are told to connect to (default: the listener)")
    up.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="override a broker config, e.g. --set log.segment.bytes=1048576")
    add_security_options(up)
    up.add_argument("--http", default="127.0.0.1:9644", metavar="HOST:PORT",
                    help="admin HTTP listener (default 127.0.0.1:9644; 'off' to disable)")
    up.add_argument("--object-store", default=os.environ.get("STRATA_OBJECT_STORE"), metavar="URL",
                    help="where tiered segments and cluster metadata live: file:///path or "
                    "s3://bucket/prefix (default: file://DATA_DIR/bucket)")
    up.add_argument("--s3-endpoint", default=os.environ.get("STRATA_S3_ENDPOINT"), metavar="URL",
                    help="S3 endpoint for MinIO or another S3-compatible store, e.g. http://127.0.0.1:9000")
    up.add_argument("--s3-region", default=None, help="S3 region (default: the AWS chain's)")
    up.add_argument("--s3-ca-bundle", default=os.environ.get("STRATA_S3_CA_BUNDLE"), metavar="FILE",
                    help="PEM CAs to verify the S3 endpoint's certificate with (default: AWS_CA_BUNDLE, "
                    "else the system's)")
    up.add_argument("--node-id", type=int, default=None, metavar="N",
                    help="this broker's node.id (default 1); brokers started with the same "
                    "--object-store are one cluster, each with its own node id, listener, "
                    "--data-dir and --http")
    up.add_argument("--brokers", type=int, default=None, metavar="N",
                    help="start a local cluster of N brokers, one process each: listeners from "
                    "--listen on (9092, 9093, ...), HTTP from --http on, data in DATA_DIR/broker-K, "
                    "one shared object store (default file://DATA_DIR/bucket); Ctrl-C stops them all")
    up.set_defaults(func=_cmd_up)

    from service.cli import (
        acls,
        configs,
        console,
        consumer_groups,
        quotas,
        topics,
        transactions,
        users,
    )
    from service.cli.perf import command as perf

    topics.register(sub)
    console.register(sub)
    consumer_groups.register(sub)
    transactions.register(sub)
    users.register(sub)
    acls.register(sub)
    quotas.register(sub)
    configs.register(sub)
    perf.register(sub)
    for command in sub.choices.values():
        _accept_global_flags(command)
    return parser


def _accept_global_flags(command: argparse.ArgumentParser) -> None:
    """``-v`` after the subcommand too (``strata up -v``), as before it: SUPPRESS keeps the
    subcommand from resetting what was given before it."""
    try:
        command.add_argument("-v", "--verbose", action="store_true", default=argparse.SUPPRESS,
                             help="debug logging (also before the command)")
    except argparse.ArgumentError:
        pass  # the command has a -v of its own


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    return int(args.func(args))
