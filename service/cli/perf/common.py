"""What ``perf produce`` and ``perf consume`` share: client properties and broker health.

Properties come from ``--producer-props``/``--consumer-props`` and Java-style
properties files (``--producer.config``/``--consumer.config``), which win over
the defaults of :func:`client_config`; :class:`ClientHealth` bounds how long a
client waits for a broker that went away (:data:`BROKER_LOST_S`).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

from service.cli.common import CliError, describe_kafka_error, quiet_logger

__all__ = ["BROKER_LOST_S", "ClientHealth", "client_config", "kafka_error_text", "prop",
           "read_props_file", "user_props"]

BROKER_LOST_S = 10.0  # every broker down this long, with no progress: give up


def prop(text: str) -> tuple[str, str]:
    """argparse type of a ``KEY=VALUE`` client property."""
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    return key.strip(), value.strip()


def read_props_file(path: str, parser: argparse.ArgumentParser, flag: str) -> dict[str, str]:
    """KEY=VALUE (or KEY: VALUE) lines of a Java-style properties file; '#' and '!' comment."""
    try:
        text = Path(path).read_text()
    except OSError as exc:
        parser.error(f"{flag}: cannot read {path}: {exc.strerror or exc}")
    props: dict[str, str] = {}
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line[0] in "#!":
            continue
        cut = min((i for i in (line.find("="), line.find(":")) if i >= 0), default=-1)
        if cut <= 0:
            parser.error(f"{flag}: {path}:{number}: expected KEY=VALUE, got {raw!r}")
        props[line[:cut].strip()] = line[cut + 1:].strip()
    return props


def user_props(args: argparse.Namespace, kind: str) -> tuple[dict[str, Any], str]:
    """The ``--KIND.config`` file then ``--KIND-props`` (later wins), and the bootstrap to use.

    A ``bootstrap.servers`` among them overrides ``--bootstrap-server``, as in Kafka's tools;
    ``args.bootstrap_server`` is updated for error messages.
    """
    props: dict[str, Any] = {}
    path = getattr(args, f"{kind}_config")
    if path:
        props.update(read_props_file(path, args.perf_parser, f"--{kind}.config"))
    props.update(dict(getattr(args, f"{kind}_props")))
    args.bootstrap_server = str(props.pop("bootstrap.servers", "") or args.bootstrap_server)
    return props, args.bootstrap_server


def client_config(bootstrap: str, client_id: str) -> dict[str, Any]:
    """The settings every perf client starts from (then the user's properties win)."""
    return {
        "bootstrap.servers": bootstrap,
        "client.id": client_id,
        "socket.connection.setup.timeout.ms": 10_000,
        "reconnect.backoff.max.ms": 1000,
        "logger": quiet_logger(),
    }


class ClientHealth:
    """What librdkafka's ``error_cb`` reported: fatal errors, and since when no broker is up.

    librdkafka retries everything else by itself, so a client is only given up
    on after a fatal error, or after every broker connection stayed down for
    :data:`BROKER_LOST_S` with no data moving (:meth:`progress` resets that).
    """

    def __init__(self) -> None:
        from confluent_kafka import KafkaError

        self.fatal: list[Any] = []
        self.down_since: float | None = None
        self._all_down = KafkaError._ALL_BROKERS_DOWN

    def on_error(self, err: Any) -> None:
        if err.fatal():
            self.fatal.append(err)
        elif err.code() == self._all_down and self.down_since is None:
            self.down_since = time.monotonic()

    def progress(self) -> None:
        self.down_since = None

    def lost(self) -> bool:
        return self.down_since is not None and time.monotonic() - self.down_since >= BROKER_LOST_S

    def failed(self) -> bool:
        return bool(self.fatal) or self.lost()

    def failure(self, args: argparse.Namespace, role: str) -> CliError | None:
        """The one-line error for a failed client, or None."""
        if self.fatal:
            return CliError(f"the {role} failed: {describe_kafka_error(self.fatal[0], args)}")
        if self.lost():
            return CliError(f"lost the broker at {args.bootstrap_server}: no connection for "
                            f"{BROKER_LOST_S:.0f} s; is it still running?")
        return None


def kafka_error_text(exc: BaseException) -> str:
    """librdkafka's own words for a KafkaException (e.g. an unknown property)."""
    err: Any = exc.args[0] if exc.args else None
    if err is not None and hasattr(err, "str"):
        return str(err.str())
    return str(err if err is not None else exc)
