"""The ``strata`` command line."""

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


def _cmd_up(args: argparse.Namespace) -> int:
    from controller.configs import BrokerConfig
    from service.app import run_broker

    try:
        config = BrokerConfig(_parse_sets(args.set))
    except ValueError as exc:
        print(f"strata up: {exc}", file=sys.stderr)
        return 2
    return run_broker(Path(args.data_dir).resolve(), config, args.listen, args.advertise)


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
    up.set_defaults(func=_cmd_up)

    from service import client_commands, group_commands

    client_commands.register(sub)
    group_commands.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    return int(args.func(args))
