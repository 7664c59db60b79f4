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
import sys
from pathlib import Path

__all__ = ["main"]


def _parse_sets(pairs: list[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"--set takes KEY=VALUE, got {pair!r}")
        out[key.strip()] = value.strip()
    return out


#: What ``strata up`` turns on unless told otherwise: tiered storage for every topic.
UP_DEFAULTS = {
    "remote.log.storage.system.enable": "true",
    "log.remote.storage.enable": "true",
}


def _cmd_up(args: argparse.Namespace) -> int:
    from controller.configs import BrokerConfig
    from local_tier.dirlock import DataDirError, DataDirLock
    from remote_tier.errors import ObjectStoreError
    from remote_tier.url import open_object_store
    from service.app import run_broker

    data_dir = Path(args.data_dir).resolve()
    try:
        config = BrokerConfig({**UP_DEFAULTS, **_parse_sets(args.set)})
    except ValueError as exc:
        print(f"strata up: {exc}", file=sys.stderr)
        return 2
    try:  # before anything under the data dir is opened or created (ADR 0007)
        lock = DataDirLock.acquire(data_dir)
    except DataDirError as exc:
        print(f"strata up: {exc}", file=sys.stderr)
        return 1
    url = args.object_store or (data_dir / "bucket").as_uri()
    try:
        store = open_object_store(url, s3_endpoint=args.s3_endpoint, s3_region=args.s3_region)
    except ValueError as exc:
        print(f"strata up: --object-store: {exc}", file=sys.stderr)
        return 2
    except ObjectStoreError as exc:
        print(f"strata up: the object store at {url} is not usable: {exc}", file=sys.stderr)
        return 1
    http = None if args.http.lower() in ("off", "none", "") else args.http
    with lock:
        return run_broker(data_dir, config, args.listen, args.advertise, store, http)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="strata", description="Kafka-compatible, tiered-storage event streaming."
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True

    up = sub.add_parser("up", help="run a single-node broker in the foreground")
    up.add_argument("--data-dir", default=os.environ.get("STRATA_DATA_DIR", "./strata-data"),
                    help="where logs and the embedded object store live (default ./strata-data)")
    up.add_argument("--listen", default="127.0.0.1:9092", metavar="HOST:PORT",
                    help="Kafka listener (default 127.0.0.1:9092)")
    up.add_argument("--advertise", default=None, metavar="HOST:PORT",
                    help="address clients are told to connect to (default: the listener)")
    up.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="override a broker config, e.g. --set log.segment.bytes=1048576")
    up.add_argument("--http", default="127.0.0.1:9644", metavar="HOST:PORT",
                    help="admin HTTP listener (default 127.0.0.1:9644; 'off' to disable)")
    up.add_argument("--object-store", default=os.environ.get("STRATA_OBJECT_STORE"), metavar="URL",
                    help="where tiered segments and cluster metadata live: file:///path or "
                    "s3://bucket/prefix (default: file://DATA_DIR/bucket)")
    up.add_argument("--s3-endpoint", default=os.environ.get("STRATA_S3_ENDPOINT"), metavar="URL",
                    help="S3 endpoint for MinIO or another S3-compatible store, e.g. http://127.0.0.1:9000")
    up.add_argument("--s3-region", default=None, help="S3 region (default: the AWS chain's)")
    up.set_defaults(func=_cmd_up)

    from service.cli import console, consumer_groups, topics
    from service.cli.perf import command as perf

    topics.register(sub)
    console.register(sub)
    consumer_groups.register(sub)
    perf.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    return int(args.func(args))
