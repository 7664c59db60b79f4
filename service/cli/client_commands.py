"""The `strata` CLI commands that talk the Kafka protocol like any client.

`strata topics create|list|describe|delete|alter`, `strata produce` and
`strata consume` use confluent-kafka (librdkafka) against any Kafka-compatible
broker, a Strata broker or Apache Kafka alike; nothing here imports the broker.

Every command takes ``--bootstrap-server HOST:PORT`` (default ``localhost:9092``
or the ``STRATA_BOOTSTRAP`` environment variable). A failure (no broker, unknown
topic, a refused request) is reported as one line on stderr and exit code 1,
never as a traceback. librdkafka's own log lines are kept off the terminal; the
errors it reports are translated here, once.

Consumer groups are not used: ``consume`` assigns partitions by hand and never
commits, so it needs no group coordinator.
"""

from __future__ import annotations

import argparse
import logging
import os
import socket
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any, BinaryIO

__all__ = ["DEFAULT_BOOTSTRAP", "CliError", "bootstrap_parent", "register"]

DEFAULT_BOOTSTRAP = "localhost:9092"
_CLIENT_TIMEOUT_S = 10.0
_CONNECT_PROBE_TIMEOUT_S = 3.0
_CLIENT_ID = "strata-cli"
_CODECS = ("none", "gzip", "snappy", "lz4", "zstd")


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
    return common


def register(subparsers: argparse._SubParsersAction[Any]) -> None:
    """Add ``topics``, ``produce`` and ``consume`` to the ``strata`` CLI."""
    common = bootstrap_parent()

    topics = subparsers.add_parser("topics", help="create, list, describe, alter, delete topics")
    topic_cmds = topics.add_subparsers(dest="topics_command", metavar="COMMAND")
    topics.set_defaults(func=_needs_subcommand(topics))

    p = topic_cmds.add_parser("create", parents=[common], help="create a topic")
    p.add_argument("name")
    p.add_argument("--partitions", type=_positive_int, default=None,
                   help="number of partitions (default: the broker's num.partitions)")
    p.add_argument("--replication-factor", type=_positive_int, default=None,
                   help="replication factor (default: the broker's)")
    p.add_argument("--config", action="append", default=[], metavar="KEY=VALUE",
                   type=_key_value, help="topic config, repeatable")
    p.add_argument("--if-not-exists", action="store_true",
                   help="succeed if the topic already exists")
    p.set_defaults(func=_guarded(_topics_create))

    p = topic_cmds.add_parser("list", parents=[common], help="list topics")
    p.set_defaults(func=_guarded(_topics_list))

    p = topic_cmds.add_parser(
        "describe", parents=[common],
        help="partitions, leaders, offsets and non-default configs of topics")
    p.add_argument("names", nargs="*", metavar="NAME", help="topics (default: all)")
    p.add_argument("--admin-url", default=os.environ.get("STRATA_ADMIN_URL"), metavar="URL",
                   help="the broker's admin HTTP API, for tiering state "
                   "(default: $STRATA_ADMIN_URL or http://BOOTSTRAP_HOST:9644)")
    p.set_defaults(func=_guarded(_topics_describe))

    p = topic_cmds.add_parser("delete", parents=[common], help="delete topics")
    p.add_argument("names", nargs="+", metavar="NAME")
    p.set_defaults(func=_guarded(_topics_delete))

    p = topic_cmds.add_parser("alter", parents=[common],
                              help="add partitions or change topic configs")
    p.add_argument("name")
    p.add_argument("--partitions", type=_positive_int, default=None,
                   help="new total number of partitions")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   type=_key_value, dest="set_configs", help="set a config, repeatable")
    p.add_argument("--delete-config", action="append", default=[], metavar="KEY",
                   help="revert a config to its default, repeatable")
    p.set_defaults(func=_guarded(_topics_alter))

    p = subparsers.add_parser("produce", parents=[common],
                              help="produce one record per stdin line")
    p.add_argument("topic")
    p.add_argument("--key-separator", default=None, metavar="SEP",
                   help="split each line at the first SEP into key and value")
    p.add_argument("--partition", type=_non_negative_int, default=None)
    p.add_argument("--compression", choices=_CODECS, default="none")
    p.add_argument("--header", action="append", default=[], metavar="KEY=VALUE",
                   type=_key_value, help="header added to every record, repeatable")
    p.set_defaults(func=_guarded(_produce))

    p = subparsers.add_parser("consume", parents=[common],
                              help="print records of a topic (no consumer group)")
    p.add_argument("topic")
    p.add_argument("--partition", type=_non_negative_int, default=None)
    start = p.add_mutually_exclusive_group()
    start.add_argument("--from-beginning", action="store_true")
    start.add_argument("--offset", type=_non_negative_int, default=None)
    p.add_argument("--max-messages", type=_positive_int, default=None)
    p.add_argument("--timeout-ms", type=_non_negative_int, default=None,
                   help="stop after this long without a record (default: never)")
    p.add_argument("--print-key", action="store_true")
    p.add_argument("--print-offset", action="store_true",
                   help="print PARTITION:OFFSET before each record")
    p.add_argument("--print-headers", action="store_true")
    p.add_argument("--key-separator", default="\t", metavar="SEP",
                   help="separator between printed fields (default: tab)")
    p.set_defaults(func=_guarded(_consume))


# --------------------------------------------------------------------------- argument types


def _positive_int(text: str) -> int:
    value = _int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {text!r}")
    return value


def _non_negative_int(text: str) -> int:
    value = _int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must not be negative, got {text!r}")
    return value


def _int(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None


def _key_value(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    return key, value


# --------------------------------------------------------------------------- error handling


def _needs_subcommand(parser: argparse.ArgumentParser) -> Callable[[argparse.Namespace], int]:
    def run(args: argparse.Namespace) -> int:
        parser.print_usage(sys.stderr)
        print(f"{parser.prog}: error: a command is required", file=sys.stderr)
        return 2

    return run


def _guarded(command: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
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
            _say(f"error: {_describe_exception(exc, args)}")
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


def _describe_exception(exc: BaseException, args: argparse.Namespace) -> str:
    from confluent_kafka import KafkaError, KafkaException

    if isinstance(exc, KafkaException) and exc.args and isinstance(exc.args[0], KafkaError):
        return _describe_kafka_error(exc.args[0], args)
    if isinstance(exc, KafkaError):
        return _describe_kafka_error(exc, args)
    text = str(exc) or type(exc).__name__
    return f"{type(exc).__name__}: {text}"


def _describe_kafka_error(err: Any, args: argparse.Namespace, subject: str | None = None) -> str:
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
        return f"{topic} does not exist: create it with `strata topics create`"
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
    if code == KafkaError._UNSUPPORTED_FEATURE:
        return f"the broker does not support this request: {detail}"
    if code == KafkaError._INVALID_ARG:
        return f"invalid argument: {detail}"
    return f"the broker refused the request: {err.name()}: {detail}"


# --------------------------------------------------------------------------- clients


def _quiet_logger() -> logging.Logger:
    logger = logging.getLogger("strata.cli.librdkafka")
    if not logger.handlers:
        logger.addHandler(logging.NullHandler())
    logger.propagate = False
    return logger


def _base_config(bootstrap: str) -> dict[str, Any]:
    return {
        "bootstrap.servers": bootstrap,
        "client.id": _CLIENT_ID,
        "socket.timeout.ms": int(_CLIENT_TIMEOUT_S * 1000),
        "socket.connection.setup.timeout.ms": int(_CLIENT_TIMEOUT_S * 1000),
        "reconnect.backoff.max.ms": 1000,
        "logger": _quiet_logger(),
    }


def _probe(bootstrap: str) -> None:
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


def _admin(args: argparse.Namespace) -> Any:
    from confluent_kafka.admin import AdminClient

    _probe(args.bootstrap_server)
    return AdminClient(_base_config(args.bootstrap_server))


def _metadata(client: Any, args: argparse.Namespace, topic: str | None = None) -> Any:
    from confluent_kafka import KafkaException

    try:
        if topic is None:
            return client.list_topics(timeout=_CLIENT_TIMEOUT_S)
        return client.list_topics(topic=topic, timeout=_CLIENT_TIMEOUT_S)
    except KafkaException as exc:
        raise CliError(_describe_exception(exc, args)) from None


def _wait(futures: dict[Any, Any], args: argparse.Namespace,
          ignore: Iterable[int] = ()) -> None:
    """Wait for AdminClient futures; raise CliError naming the first failure."""
    from confluent_kafka import KafkaError, KafkaException

    ignored = set(ignore)
    failures: list[str] = []
    for key, future in futures.items():
        subject = getattr(key, "name", key)
        try:
            future.result(timeout=_CLIENT_TIMEOUT_S + 5)
        except KafkaException as exc:
            err = exc.args[0] if exc.args else None
            if isinstance(err, KafkaError):
                if err.code() in ignored:
                    continue
                failures.append(_describe_kafka_error(err, args, subject=str(subject)))
            else:
                failures.append(f"{subject}: {exc}")
        except TimeoutError:
            failures.append(f"no answer from {args.bootstrap_server} about {subject}")
    if failures:
        raise CliError("; ".join(failures))


def _topic_metadata(md: Any, name: str, args: argparse.Namespace) -> Any:
    from confluent_kafka import KafkaError

    topic = md.topics.get(name)
    if topic is None:
        raise CliError(_describe_kafka_error(KafkaError(KafkaError.UNKNOWN_TOPIC_OR_PART),
                                             args, subject=name))
    if topic.error is not None and topic.error.code() != KafkaError.NO_ERROR:
        raise CliError(_describe_kafka_error(topic.error, args, subject=name))
    return topic


# --------------------------------------------------------------------------- topics


def _topics_create(args: argparse.Namespace) -> int:
    from confluent_kafka import KafkaError
    from confluent_kafka.admin import NewTopic  # type: ignore[attr-defined]

    admin = _admin(args)
    new = NewTopic(
        args.name,
        num_partitions=args.partitions if args.partitions is not None else -1,
        replication_factor=(args.replication_factor
                            if args.replication_factor is not None else -1),
        config=dict(args.config),
    )
    futures = admin.create_topics([new], request_timeout=_CLIENT_TIMEOUT_S)
    ignore = [KafkaError.TOPIC_ALREADY_EXISTS] if args.if_not_exists else []
    _wait(futures, args, ignore=ignore)
    print(f"created topic {args.name}", file=sys.stderr)
    return 0


def _topics_list(args: argparse.Namespace) -> int:
    admin = _admin(args)
    md = _metadata(admin, args)
    for name in sorted(md.topics):
        print(name)
    return 0


def _topics_describe(args: argparse.Namespace) -> int:
    from confluent_kafka import Consumer, TopicPartition
    from confluent_kafka.admin import (  # type: ignore[attr-defined]
        ConfigResource,
        ConfigSource,
    )

    admin = _admin(args)
    md = _metadata(admin, args)
    names = list(args.names) or sorted(md.topics)
    topics = [_topic_metadata(md, name, args) for name in names]

    configs: dict[str, dict[str, str | None]] = {}
    if topics:
        resources = [ConfigResource(ConfigResource.Type.TOPIC, t.topic) for t in topics]
        futures = admin.describe_configs(resources, request_timeout=_CLIENT_TIMEOUT_S)
        for resource, future in futures.items():
            try:
                entries = future.result(timeout=_CLIENT_TIMEOUT_S + 5)
            except Exception as exc:  # noqa: BLE001 - reported, not fatal for the listing
                raise CliError(f"describe configs of {resource.name}: "
                               f"{_describe_exception(exc, args)}") from None
            configs[resource.name] = {
                key: entry.value
                for key, entry in sorted(entries.items())
                # like kafka-topics --describe: only what was set on the topic itself
                if entry.source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
            }

    consumer = Consumer({**_base_config(args.bootstrap_server),
                         "group.id": f"{_CLIENT_ID}-describe",
                         "enable.auto.commit": False})
    try:
        for topic in topics:
            partitions = sorted(topic.partitions.values(), key=lambda p: p.id)
            replication = len(partitions[0].replicas) if partitions else 0
            config_text = ",".join(
                f"{k}={'<sensitive>' if v is None else v}"
                for k, v in configs.get(topic.topic, {}).items())
            print(f"Topic: {topic.topic}\tPartitionCount: {len(partitions)}\t"
                  f"ReplicationFactor: {replication}\tConfigs: {config_text}")
            tiering = _tiering_state(args, topic.topic)
            for part in partitions:
                low, high = consumer.get_watermark_offsets(
                    TopicPartition(topic.topic, part.id), timeout=_CLIENT_TIMEOUT_S)
                print(f"\tTopic: {topic.topic}\tPartition: {part.id}\tLeader: {part.leader}\t"
                      f"Replicas: {','.join(map(str, part.replicas))}\t"
                      f"Isr: {','.join(map(str, part.isrs))}\t"
                      f"EarliestOffset: {low}\tLatestOffset: {high}"
                      + _tiering_columns(tiering.get(part.id) if tiering else None))
            if tiering is None:
                print(f"note: no local/remote tiering state for {topic.topic}: the admin API at "
                      f"{_admin_url(args)} did not answer (pass --admin-url)", file=sys.stderr)
    finally:
        consumer.close()
    return 0


def _admin_url(args: argparse.Namespace) -> str:
    if args.admin_url:
        return str(args.admin_url).rstrip("/")
    host = args.bootstrap_server.split(",")[0].rpartition(":")[0] or "localhost"
    return f"http://{host}:9644"


def _tiering_state(args: argparse.Namespace, topic: str) -> dict[int, dict[str, Any]] | None:
    """Per-partition tiering state from the broker's admin API, or None if it does not answer."""
    import json
    import urllib.error
    import urllib.parse
    import urllib.request

    url = f"{_admin_url(args)}/v1/topics/{urllib.parse.quote(topic, safe='')}/partitions"
    try:
        with urllib.request.urlopen(url, timeout=3) as resp:
            body = json.load(resp)
    except (urllib.error.URLError, OSError, ValueError):
        return None
    return {int(p["partition"]): p for p in body.get("partitions", [])}


def _tiering_columns(state: dict[str, Any] | None) -> str:
    if state is None:
        return ""
    remote_start = state["remote_log_start_offset"]
    return (f"\tLocalStart: {state['local_log_start_offset']}"
            f"\tRemoteStart: {'-' if remote_start is None else remote_start}"
            f"\tLocalBytes: {state['local_bytes']}\tRemoteBytes: {state['remote_bytes']}"
            f"\tUploadLag: {state['upload_lag_offsets']} offsets/{state['upload_lag_bytes']} bytes")


def _topics_delete(args: argparse.Namespace) -> int:
    admin = _admin(args)
    futures = admin.delete_topics(list(args.names), request_timeout=_CLIENT_TIMEOUT_S)
    _wait(futures, args)
    for name in args.names:
        print(f"deleted topic {name}", file=sys.stderr)
    return 0


def _topics_alter(args: argparse.Namespace) -> int:
    from confluent_kafka.admin import (  # type: ignore[attr-defined]
        AlterConfigOpType,
        ConfigEntry,
        ConfigResource,
        NewPartitions,
    )

    if args.partitions is None and not args.set_configs and not args.delete_config:
        raise CliError("nothing to alter: give --partitions, --set or --delete-config")
    admin = _admin(args)
    if args.set_configs or args.delete_config:
        entries = [ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET)
                   for k, v in args.set_configs]
        entries += [ConfigEntry(k, None, incremental_operation=AlterConfigOpType.DELETE)
                    for k in args.delete_config]
        resource = ConfigResource(ConfigResource.Type.TOPIC, args.name,
                                  incremental_configs=entries)
        futures = admin.incremental_alter_configs([resource], request_timeout=_CLIENT_TIMEOUT_S)
        _wait(futures, args)
        print(f"altered configs of topic {args.name}", file=sys.stderr)
    if args.partitions is not None:
        futures = admin.create_partitions([NewPartitions(args.name, args.partitions)],
                                          request_timeout=_CLIENT_TIMEOUT_S)
        _wait(futures, args)
        print(f"topic {args.name} now has {args.partitions} partitions", file=sys.stderr)
    return 0


# --------------------------------------------------------------------------- produce


def _produce(args: argparse.Namespace) -> int:
    from confluent_kafka import KafkaError, Producer

    _probe(args.bootstrap_server)
    producer = Producer({
        **_base_config(args.bootstrap_server),
        "acks": "all",
        "linger.ms": 5,
        "compression.type": args.compression,
        "message.timeout.ms": int(_CLIENT_TIMEOUT_S * 3 * 1000),
        "enable.idempotence": False,
    })
    topic = _topic_metadata(_metadata(producer, args, args.topic), args.topic, args)
    if args.partition is not None and args.partition not in topic.partitions:
        raise CliError(f"topic {args.topic!r} has no partition {args.partition} "
                       f"(it has {len(topic.partitions)}): see `strata topics describe`")

    headers = [(k, v.encode()) for k, v in args.header] or None
    separator = args.key_separator.encode() if args.key_separator else None
    errors: list[Any] = []
    delivered = 0

    def on_delivery(err: Any, _msg: Any) -> None:
        nonlocal delivered
        if err is not None:
            errors.append(err)
        else:
            delivered += 1

    sent = 0
    extra: dict[str, Any] = {}
    if args.partition is not None:
        extra["partition"] = args.partition
    if headers:
        extra["headers"] = headers
    for line in _lines(sys.stdin.buffer):
        key: bytes | None = None
        value = line
        if separator is not None:
            head, sep, tail = line.partition(separator)
            if sep:
                key, value = head, tail
        while True:
            try:
                producer.produce(args.topic, value=value, key=key, on_delivery=on_delivery,
                                 **extra)
                break
            except BufferError:
                producer.poll(0.1)
        sent += 1
        producer.poll(0)
        if errors:
            break

    remaining = producer.flush(_CLIENT_TIMEOUT_S * 3 + 5)
    if errors:
        detail = _describe_kafka_error(errors[0], args) if isinstance(errors[0], KafkaError) \
            else str(errors[0])
        raise CliError(f"{sent - delivered} of {sent} records were not produced to "
                       f"{args.topic}: {detail}")
    if remaining:
        raise CliError(f"{remaining} of {sent} records were not acknowledged by "
                       f"{args.bootstrap_server} in time: is the broker healthy?")
    print(f"produced {delivered} records to {args.topic}", file=sys.stderr)
    return 0


def _lines(stream: BinaryIO) -> Iterable[bytes]:
    for raw in stream:
        if raw.endswith(b"\n"):
            raw = raw[:-1]
            if raw.endswith(b"\r"):
                raw = raw[:-1]
        yield raw


# --------------------------------------------------------------------------- consume


def _consume(args: argparse.Namespace) -> int:
    from confluent_kafka import (
        OFFSET_BEGINNING,
        OFFSET_END,
        Consumer,
        KafkaError,
        TopicPartition,
    )

    _probe(args.bootstrap_server)
    reset = "earliest" if args.from_beginning else "latest"
    if args.offset is not None:
        reset = "error"
    consumer = Consumer({
        **_base_config(args.bootstrap_server),
        # librdkafka insists on a group.id; it is never joined and nothing is committed.
        "group.id": f"{_CLIENT_ID}-consume",
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "auto.offset.reset": reset,
        "enable.partition.eof": False,
    })
    try:
        topic = _topic_metadata(_metadata(consumer, args, args.topic), args.topic, args)
        if args.partition is not None:
            if args.partition not in topic.partitions:
                raise CliError(f"topic {args.topic!r} has no partition {args.partition} "
                               f"(it has {len(topic.partitions)})")
            partitions = [args.partition]
        else:
            partitions = sorted(topic.partitions)
        if args.offset is not None:
            start = args.offset
        elif args.from_beginning:
            start = OFFSET_BEGINNING
        else:
            start = OFFSET_END
        consumer.assign([TopicPartition(args.topic, p, start) for p in partitions])

        out = sys.stdout.buffer
        sep = args.key_separator.encode()
        count = 0
        idle_limit = None if args.timeout_ms is None else args.timeout_ms / 1000.0
        last_data = time.monotonic()
        while args.max_messages is None or count < args.max_messages:
            want = 500 if args.max_messages is None else min(500, args.max_messages - count)
            batch = consumer.consume(num_messages=want, timeout=0.2)
            now = time.monotonic()
            got_data = False
            for msg in batch:
                err = msg.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        continue
                    if err.code() in (KafkaError.OFFSET_OUT_OF_RANGE,
                                      KafkaError._AUTO_OFFSET_RESET):
                        raise CliError(f"offset {args.offset} is out of range for "
                                       f"{args.topic} partition {msg.partition()}: "
                                       "see `strata topics describe` for the valid range")
                    if err.fatal() or not err.retriable():
                        raise CliError(_describe_kafka_error(err, args))
                    continue
                got_data = True
                out.write(_format(msg, args, sep))
                count += 1
                if args.max_messages is not None and count >= args.max_messages:
                    break
            if got_data:
                out.flush()
                last_data = now
            elif idle_limit is not None and now - last_data >= idle_limit:
                break
        out.flush()
        print(f"consumed {count} records from {args.topic}", file=sys.stderr)
        return 0
    finally:
        consumer.close()


def _format(msg: Any, args: argparse.Namespace, sep: bytes) -> bytes:
    fields: list[bytes] = []
    if args.print_offset:
        fields.append(f"{msg.partition()}:{msg.offset()}".encode())
    if args.print_key:
        key = msg.key()
        fields.append(b"null" if key is None else key)
    if args.print_headers:
        headers = msg.headers() or []
        fields.append(b",".join(
            k.encode() + b"=" + (b"null" if v is None else v) for k, v in headers))
    value = msg.value()
    fields.append(b"null" if value is None else value)
    return sep.join(fields) + b"\n"


def main(argv: Sequence[str] | None = None) -> int:
    """Run these commands alone (``python -m service.cli.client_commands``), without cli.py."""
    parser = argparse.ArgumentParser(prog="strata")
    sub = parser.add_subparsers(dest="command")
    register(sub)
    args = parser.parse_args(argv)
    func = getattr(args, "func", None)
    if func is None:
        parser.print_usage(sys.stderr)
        return 2
    return int(func(args))


if __name__ == "__main__":
    sys.exit(main())
