"""What every ``strata`` client command shares: options, argument types, errors, clients.

The client commands (``topics``, ``produce``, ``consume``, ``groups``, ``perf``)
use confluent-kafka (librdkafka) against any Kafka-compatible broker, a Strata
broker or Apache Kafka alike; nothing here imports the broker.

Every command takes ``--bootstrap-server HOST:PORT`` (:func:`bootstrap_parent`;
default ``localhost:9092`` or the ``STRATA_BOOTSTRAP`` environment variable). A
failure (no broker, unknown topic, a refused request) is reported as one line on
stderr and exit code 1, never as a traceback (:func:`guarded`). librdkafka's own
log lines are kept off the terminal (:func:`quiet_logger`); the errors it reports
are translated here, once (:func:`describe_kafka_error`).
"""

from __future__ import annotations

import argparse
import logging
import os
import socket
import sys
from collections.abc import Callable
from typing import Any

__all__ = [
    "CLIENT_ID",
    "CLIENT_TIMEOUT_S",
    "DEFAULT_BOOTSTRAP",
    "CliError",
    "admin_client",
    "base_config",
    "bootstrap_parent",
    "describe_exception",
    "describe_kafka_error",
    "fetch_metadata",
    "guarded",
    "key_value",
    "needs_subcommand",
    "non_negative_int",
    "positive_int",
    "probe",
    "quiet_logger",
    "topic_metadata",
    "wait_for",
]

DEFAULT_BOOTSTRAP = "localhost:9092"
CLIENT_TIMEOUT_S = 10.0
_CONNECT_PROBE_TIMEOUT_S = 3.0
CLIENT_ID = "strata-cli"


class CliError(Exception):
    """A failure to report to the user as one line; ``str(exc)`` is that line."""


def bootstrap_parent() -> argparse.ArgumentParser:
    """The ``--bootstrap-server`` option every client command shares (an argparse parent)."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--bootstrap-server",
        "-b",
        default=os.environ.get("STRATA_BOOTSTRAP") or DEFAULT_BOOTSTRAP,
        metavar="HOST:PORT",
        help="broker to contact (default: $STRATA_BOOTSTRAP or %(default)s)",
    )
    common.add_argument(
        "--command-config",
        default=os.environ.get("STRATA_COMMAND_CONFIG"),
        metavar="FILE",
        help="client properties (librdkafka names: security.protocol, sasl.mechanism, "
        "sasl.username, sasl.password, ssl.ca.location, ...); default $STRATA_COMMAND_CONFIG",
    )
    return common


# --------------------------------------------------------------------------- argument types


def positive_int(text: str) -> int:
    value = _int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {text!r}")
    return value


def non_negative_int(text: str) -> int:
    value = _int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must not be negative, got {text!r}")
    return value


def _int(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None


def key_value(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    return key, value


# --------------------------------------------------------------------------- error handling


def needs_subcommand(parser: argparse.ArgumentParser) -> Callable[[argparse.Namespace], int]:
    def run(args: argparse.Namespace) -> int:
        parser.print_usage(sys.stderr)
        print(f"{parser.prog}: error: a command is required", file=sys.stderr)
        return 2

    return run


def guarded(command: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
    """Run a command, turning every failure into one stderr line and exit code 1."""

    def run(args: argparse.Namespace) -> int:
        try:
            return command(args)
        except CliError as exc:
            _say(f"error: {exc}")
            return 1
        except KeyboardInterrupt:
            return 130
        except BrokenPipeError:
            # stdout closed early (`strata consume ... | head`): not an error.
            _silence_stdout()
            return 0
        except Exception as exc:  # noqa: BLE001 - the CLI never shows a traceback
            _say(f"error: {describe_exception(exc, args)}")
            return 1

    run.__name__ = command.__name__
    run.__doc__ = command.__doc__
    return run


def _say(line: str) -> None:
    print(f"strata: {line}", file=sys.stderr, flush=True)


def _silence_stdout() -> None:
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except OSError:
        pass


def _unreachable(bootstrap: str) -> CliError:
    return CliError(f"cannot reach a broker at {bootstrap}: is `strata up` running?")


def describe_exception(exc: BaseException, args: argparse.Namespace) -> str:
    from confluent_kafka import KafkaError, KafkaException

    if isinstance(exc, KafkaException) and exc.args and isinstance(exc.args[0], KafkaError):
        return describe_kafka_error(exc.args[0], args)
    if isinstance(exc, KafkaError):
        return describe_kafka_error(exc, args)
    text = str(exc) or type(exc).__name__
    return f"{type(exc).__name__}: {text}"


def describe_kafka_error(err: Any, args: argparse.Namespace, subject: str | None = None,
                         unknown_topic: str = "create it with `strata topics create`") -> str:
    """One line for a librdkafka error; ``unknown_topic`` says what to do about a missing topic."""
    from confluent_kafka import KafkaError

    code = err.code()
    detail = err.str()
    bootstrap = getattr(args, "bootstrap_server", DEFAULT_BOOTSTRAP)
    name = subject or getattr(args, "topic", None) or getattr(args, "name", None)
    if code in (KafkaError._ALL_BROKERS_DOWN, KafkaError._RESOLVE):
        return f"cannot reach a broker at {bootstrap} ({detail}): is `strata up` running?"
    if code == KafkaError._TRANSPORT:
        return (f"the broker at {bootstrap} dropped the connection ({detail}): "
                "is it a Kafka listener? see the broker's log")
    if code in (KafkaError._TIMED_OUT, KafkaError.REQUEST_TIMED_OUT):
        return (f"no answer from the broker at {bootstrap} in time ({detail}): "
                "is `strata up` healthy? see its log")
    if code in (KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_TOPIC):
        topic = f"topic {name!r}" if name else "the topic"
        return f"{topic} does not exist: {unknown_topic}"
    if code == KafkaError._UNKNOWN_PARTITION:
        return f"partition does not exist ({detail}): see `strata topics describe`"
    if code == KafkaError.TOPIC_ALREADY_EXISTS:
        return f"topic {name!r} already exists (pass --if-not-exists to accept that)"
    if code == KafkaError.INVALID_CONFIG:
        return f"the broker refused a config value: {detail}"
    if code == KafkaError.TOPIC_EXCEPTION:
        return f"invalid topic name {name!r}: {detail}"
    if code == KafkaError.INVALID_PARTITIONS:
        return f"invalid partition count: {detail}"
    if code == KafkaError.INVALID_REPLICATION_FACTOR:
        return f"invalid replication factor: {detail}"
    if code == KafkaError.MSG_SIZE_TOO_LARGE:
        return f"record too large for the topic's max.message.bytes: {detail}"
    if code == KafkaError._AUTHENTICATION or code == KafkaError.SASL_AUTHENTICATION_FAILED:
        return f"authentication failed ({detail}): check --command-config (user, password, mechanism)"
    if code in (KafkaError.TOPIC_AUTHORIZATION_FAILED, KafkaError.GROUP_AUTHORIZATION_FAILED,
                KafkaError.CLUSTER_AUTHORIZATION_FAILED, KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED):
        return f"not authorized: {detail} (an ACL must allow it: `strata acls --list`)"
    if code == KafkaError._UNSUPPORTED_FEATURE:
        return f"the broker does not support this request: {detail}"
    if code == KafkaError._INVALID_ARG:
        return f"invalid argument: {detail}"
    return f"the broker refused the request: {err.name()}: {detail}"


# --------------------------------------------------------------------------- clients


def quiet_logger() -> logging.Logger:
    logger = logging.getLogger("strata.cli.librdkafka")
    if not logger.handlers:
        logger.addHandler(logging.NullHandler())
    logger.propagate = False
    return logger


def base_config(bootstrap: str, command_config: str | None = None) -> dict[str, Any]:
    """librdkafka settings of every client; ``command_config``: a properties file of more
    (security: ``security.protocol=SASL_SSL``, ``sasl.mechanism``, ``sasl.username``...)."""
    conf: dict[str, Any] = {
        "bootstrap.servers": bootstrap,
        "client.id": CLIENT_ID,
        "socket.timeout.ms": int(CLIENT_TIMEOUT_S * 1000),
        "socket.connection.setup.timeout.ms": int(CLIENT_TIMEOUT_S * 1000),
        "reconnect.backoff.max.ms": 1000,
        "logger": quiet_logger(),
    }
    if command_config:
        from service.cli.up_options import parse_properties

        try:
            with open(command_config, encoding="utf-8") as f:
                conf.update(parse_properties(f.read()))
        except (OSError, ValueError) as exc:
            raise CliError(f"--command-config {command_config}: {exc}") from None
    return conf


def probe(bootstrap: str) -> None:
    """Fail fast, with a clear message, when no bootstrap address accepts TCP."""
    for entry in bootstrap.split(","):
        entry = entry.strip()
        if "://" in entry:
            entry = entry.split("://", 1)[1]
        host, sep, port_text = entry.rpartition(":")
        if not sep:
            host, port_text = entry, "9092"
        host = host.strip("[]") or "localhost"
        try:
            port = int(port_text)
        except ValueError:
            raise CliError(f"bad --bootstrap-server {bootstrap!r}: expected HOST:PORT") from None
        try:
            with socket.create_connection((host, port), timeout=_CONNECT_PROBE_TIMEOUT_S):
                return
        except OSError:
            continue
    raise _unreachable(bootstrap)


def admin_client(args: argparse.Namespace) -> Any:
    from confluent_kafka.admin import AdminClient

    probe(args.bootstrap_server)
    return AdminClient(base_config(args.bootstrap_server, getattr(args, "command_config", None)))


def fetch_metadata(client: Any, args: argparse.Namespace, topic: str | None = None) -> Any:
    from confluent_kafka import KafkaException

    try:
        if topic is None:
            return client.list_topics(timeout=CLIENT_TIMEOUT_S)
        return client.list_topics(topic=topic, timeout=CLIENT_TIMEOUT_S)
    except KafkaException as exc:
        raise CliError(describe_exception(exc, args)) from None


def wait_for(futures: dict[Any, Any], args: argparse.Namespace,
             unknown_topic: str | None = None) -> None:
    """Wait for AdminClient futures; raise CliError naming every failure."""
    from confluent_kafka import KafkaError, KafkaException

    failures: list[str] = []
    for key, future in futures.items():
        subject = getattr(key, "name", key)
        try:
            future.result(timeout=CLIENT_TIMEOUT_S + 5)
        except KafkaException as exc:
            err = exc.args[0] if exc.args else None
            if isinstance(err, KafkaError):
                hint = {} if unknown_topic is None else {"unknown_topic": unknown_topic}
                failures.append(describe_kafka_error(err, args, subject=str(subject), **hint))
            else:
                failures.append(f"{subject}: {exc}")
        except TimeoutError:
            failures.append(f"no answer from {args.bootstrap_server} about {subject}")
    if failures:
        raise CliError("; ".join(failures))


def topic_metadata(md: Any, name: str, args: argparse.Namespace) -> Any:
    from confluent_kafka import KafkaError

    topic = md.topics.get(name)
    if topic is None:
        raise CliError(describe_kafka_error(KafkaError(KafkaError.UNKNOWN_TOPIC_OR_PART),
                                             args, subject=name))
    if topic.error is not None and topic.error.code() != KafkaError.NO_ERROR:
        raise CliError(describe_kafka_error(topic.error, args, subject=name))
    return topic
