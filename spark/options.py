"""The options of the ``strata`` data source, parsed and checked once, on the driver.

They follow Spark's own Kafka source (``spark.read.format("kafka")``) so a job
switches by changing the format name: ``subscribe`` / ``subscribePattern`` /
``assign``; ``startingOffsets`` / ``endingOffsets`` (``earliest``, ``latest`` or
JSON ``{"topic": {"0": 23, "1": -2}}`` with -2 meaning earliest and -1 latest);
``startingTimestamp`` / ``endingTimestamp`` and ``startingOffsetsByTimestamp`` /
``endingOffsetsByTimestamp`` (which take precedence over the offsets, in that
order, as in Spark); ``includeHeaders``; ``minPartitions``; ``failOnDataLoss``;
``maxOffsetsPerTrigger``; ``kafka.bootstrap.servers`` (and other ``kafka.*``
consumer settings); ``kafka.isolation.level`` (``read_uncommitted``, the default
as in Spark, or ``read_committed``: records of aborted transactions are skipped
and reads end at the last stable offset). Where the bucket is: ``object.store`` (``file:///path`` or
``s3://bucket/prefix``), ``s3.endpoint``, ``s3.region``, ``s3.pathStyle``,
``s3.accessKey`` / ``s3.secretKey`` / ``s3.sessionToken`` (else the AWS chain).
Option names are case-insensitive, as Spark's are.

Every mistake raises :class:`StrataSourceError` naming the option and what it
accepts, before any task runs.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ["EARLIEST", "LATEST", "Bounds", "ReadOptions", "StrataSourceError", "parse_options"]

EARLIEST = -2
LATEST = -1
DEFAULT_CHUNK_BYTES = 32 * 1024 * 1024
#: the values of ``kafka.isolation.level`` (the Kafka consumer's ``isolation.level``)
READ_UNCOMMITTED = "read_uncommitted"
READ_COMMITTED = "read_committed"


class StrataSourceError(ValueError):
    """A bad option, a missing bucket or topic, or data that is gone; the message says which."""


@dataclass(frozen=True)
class Bounds:
    """One side (start or end) of the range to read, in the form the user gave it.

    Exactly one of: ``default`` (``EARLIEST`` or ``LATEST`` for every partition),
    ``per_partition`` offsets, ``global_timestamp`` or ``per_partition_timestamp``.
    Partitions a JSON form does not name take ``default``.
    """

    default: int
    per_partition: Mapping[tuple[str, int], int] = field(default_factory=dict)
    global_timestamp: int | None = None
    per_partition_timestamp: Mapping[tuple[str, int], int] = field(default_factory=dict)


@dataclass(frozen=True)
class ReadOptions:
    """Every option of one read, checked. Picklable: it travels to the executors."""

    subscribe: tuple[str, ...] = ()
    subscribe_pattern: str | None = None
    assign: Mapping[str, tuple[int, ...]] = field(default_factory=dict)
    starting: Bounds = field(default_factory=lambda: Bounds(EARLIEST))
    ending: Bounds = field(default_factory=lambda: Bounds(LATEST))
    include_headers: bool = False
    min_partitions: int | None = None
    fail_on_data_loss: bool = True
    max_offsets_per_trigger: int | None = None
    object_store: str = ""
    s3: Mapping[str, str] = field(default_factory=dict)
    kafka: Mapping[str, str] = field(default_factory=dict)
    #: ``read.chunk.bytes`` as given (None: not set). The JVM reader streams each slice in one
    #: GET unless it is set; the Python reader holds a whole GET in memory (``chunk_bytes``).
    chunk_option: int | None = None
    #: what a start timestamp that matches no record means: "error" (Spark's default) or "latest"
    starting_timestamp_strategy: str = "error"
    #: set by the JVM source (``strata.jvm``): slices carry locations the JVM reader can open
    jvm: bool = False
    #: ``kafka.isolation.level=read_committed``: skip aborted transactions, end at the stable offset
    read_committed: bool = False

    @property
    def chunk_bytes(self) -> int:
        """The Python reader's GET size: ``read.chunk.bytes``, else 32 MiB."""
        return self.chunk_option or DEFAULT_CHUNK_BYTES

    @property
    def bootstrap_servers(self) -> str | None:
        return self.kafka.get("bootstrap.servers")

    def matches(self, topic: str) -> bool:
        """Whether ``topic`` is one this read subscribes to (``assign`` is per partition)."""
        if self.subscribe:
            return topic in self.subscribe
        if self.subscribe_pattern is not None:
            return re.fullmatch(self.subscribe_pattern, topic) is not None
        return topic in self.assign


_KNOWN = {
    "subscribe", "subscribepattern", "assign", "startingoffsets", "endingoffsets",
    "startingtimestamp", "endingtimestamp", "startingoffsetsbytimestamp",
    "endingoffsetsbytimestamp", "startingoffsetsbytimestampstrategy", "includeheaders",
    "minpartitions", "failondataloss", "maxoffsetspertrigger", "object.store", "s3.endpoint",
    "s3.region", "s3.pathstyle", "s3.accesskey", "s3.secretkey", "s3.sessiontoken",
    "read.chunk.bytes", "path", "strata.jvm",
}
_S3 = {"s3.endpoint": "endpoint", "s3.region": "region", "s3.pathstyle": "path_style",
       "s3.accesskey": "access_key", "s3.secretkey": "secret_key", "s3.sessiontoken": "session_token"}


def parse_options(raw: Mapping[str, str], *, streaming: bool) -> ReadOptions:
    """Checks ``raw`` (Spark's option map) and returns the read it describes."""
    opts = {str(k).lower(): str(v) for k, v in raw.items()}
    unknown = sorted(k for k in opts if k not in _KNOWN and not k.startswith("kafka."))
    if unknown:
        raise StrataSourceError(
            f"unknown option(s) {', '.join(unknown)}; the strata source takes Spark's Kafka "
            "source options (subscribe, startingOffsets, ...) plus object.store and s3.*"
        )
    subscriptions = [k for k in ("subscribe", "subscribepattern", "assign") if k in opts]
    if len(subscriptions) != 1:
        raise StrataSourceError(
            "give exactly one of the options subscribe, subscribePattern or assign"
            + (f" (got {', '.join(subscriptions)})" if subscriptions else "")
        )
    subscribe: tuple[str, ...] = ()
    pattern: str | None = None
    assign: dict[str, tuple[int, ...]] = {}
    if "subscribe" in opts:
        subscribe = tuple(t.strip() for t in opts["subscribe"].split(",") if t.strip())
        if not subscribe:
            raise StrataSourceError("option subscribe needs a comma-separated list of topics")
    elif "subscribepattern" in opts:
        pattern = opts["subscribepattern"]
        try:
            re.compile(pattern)
        except re.error as exc:
            raise StrataSourceError(f"option subscribePattern {pattern!r} is not a regex: {exc}") from exc
    else:
        assign = _parse_assign(opts["assign"])

    store = opts.get("object.store", opts.get("path", ""))
    if not store:
        raise StrataSourceError(
            "option object.store is required: where the topics are tiered, the same URL the "
            "broker takes (file:///path or s3://bucket/prefix)"
        )
    starting = _bounds(opts, "starting", default=LATEST if streaming else EARLIEST)
    ending = _bounds(opts, "ending", default=LATEST)
    if streaming and any(k.startswith("ending") for k in opts):
        raise StrataSourceError("ending offsets and timestamps are for batch reads, not streams")
    if not streaming:
        if opts.get("startingoffsets", "").strip().lower() == "latest":
            raise StrataSourceError("startingOffsets='latest' is not valid for a batch query")
        if any(v == LATEST for v in starting.per_partition.values()):
            raise StrataSourceError("startingOffsets: -1 (latest) is not valid for a batch query")
        if ending.default == EARLIEST or any(v == EARLIEST for v in ending.per_partition.values()):
            raise StrataSourceError("endingOffsets: earliest (-2) is not valid for a batch query")
    kafka = _kafka(opts)
    return ReadOptions(
        subscribe=subscribe,
        subscribe_pattern=pattern,
        assign=assign,
        starting=starting,
        ending=ending,
        include_headers=_bool(opts, "includeheaders", False),
        min_partitions=_positive(opts, "minpartitions"),
        fail_on_data_loss=_bool(opts, "failondataloss", True),
        max_offsets_per_trigger=_positive(opts, "maxoffsetspertrigger"),
        object_store=store,
        s3={_S3[k]: v for k, v in opts.items() if k in _S3},
        kafka=kafka,
        chunk_option=_positive(opts, "read.chunk.bytes"),
        starting_timestamp_strategy=_strategy(opts),
        jvm=_bool(opts, "strata.jvm", False),
        read_committed=kafka.get("isolation.level") == READ_COMMITTED,
    )


def _kafka(opts: Mapping[str, str]) -> dict[str, str]:
    """The ``kafka.*`` options without their prefix, ``isolation.level`` checked and lower-cased."""
    kafka = {k[len("kafka."):]: v for k, v in opts.items() if k.startswith("kafka.")}
    level = kafka.get("isolation.level")
    if level is not None:
        kafka["isolation.level"] = level = level.strip().lower()
        if level not in (READ_UNCOMMITTED, READ_COMMITTED):
            raise StrataSourceError(
                f"option kafka.isolation.level must be {READ_UNCOMMITTED} or {READ_COMMITTED}, got {level!r}"
            )
    return kafka


def _strategy(opts: Mapping[str, str]) -> str:
    value = opts.get("startingoffsetsbytimestampstrategy", "error").strip().lower()
    if value not in ("error", "latest"):
        raise StrataSourceError(
            f"option startingOffsetsByTimestampStrategy must be error or latest, got {value!r}"
        )
    return value


def _bounds(opts: Mapping[str, str], side: str, *, default: int) -> Bounds:
    """Spark's precedence: global timestamp, then per-partition timestamps, then offsets."""
    name = f"{side}timestamp"
    if name in opts:
        return Bounds(default, global_timestamp=_long(opts[name], f"{side}Timestamp"))
    name = f"{side}offsetsbytimestamp"
    if name in opts:
        table = _partition_json(opts[name], f"{side}OffsetsByTimestamp")
        return Bounds(default, per_partition_timestamp=table)
    name = f"{side}offsets"
    if name not in opts:
        return Bounds(default)
    value = opts[name].strip()
    if value.lower() == "earliest":
        return Bounds(EARLIEST)
    if value.lower() == "latest":
        return Bounds(LATEST)
    table = _partition_json(value, f"{side}Offsets")
    for (topic, partition), offset in table.items():
        if offset < EARLIEST:
            raise StrataSourceError(
                f"{side}Offsets: offset {offset} of {topic}-{partition} is not an offset, "
                "-2 (earliest) or -1 (latest)"
            )
    return Bounds(default, per_partition=table)


def _partition_json(text: str, option: str) -> dict[tuple[str, int], int]:
    try:
        obj = json.loads(text)
        if not isinstance(obj, dict):
            raise TypeError
        out: dict[tuple[str, int], int] = {}
        for topic, partitions in obj.items():
            if not isinstance(partitions, dict):
                raise TypeError
            for partition, value in partitions.items():
                if isinstance(value, bool) or not isinstance(value, int):
                    raise TypeError
                out[(str(topic), int(partition))] = value
        return out
    except (ValueError, TypeError) as exc:
        raise StrataSourceError(
            f"option {option} must be JSON like {{\"topicA\": {{\"0\": 23, \"1\": -1}}}}, got {text!r}"
        ) from exc


def _parse_assign(text: str) -> dict[str, tuple[int, ...]]:
    try:
        obj = json.loads(text)
        if not isinstance(obj, dict) or not obj:
            raise TypeError
        out = {}
        for topic, partitions in obj.items():
            if not isinstance(partitions, list) or not all(
                isinstance(p, int) and not isinstance(p, bool) and p >= 0 for p in partitions
            ):
                raise TypeError
            out[str(topic)] = tuple(sorted(set(partitions)))
        return out
    except (ValueError, TypeError) as exc:
        raise StrataSourceError(
            f"option assign must be JSON like {{\"topicA\": [0, 1], \"topicB\": [2]}}, got {text!r}"
        ) from exc


def _bool(opts: Mapping[str, str], name: str, default: bool) -> bool:
    value = opts.get(name)
    if value is None:
        return default
    if value.lower() in ("true", "false"):
        return value.lower() == "true"
    raise StrataSourceError(f"option {name} must be true or false, got {value!r}")


def _positive(opts: Mapping[str, str], name: str) -> int | None:
    value = opts.get(name)
    if value is None:
        return None
    number = _long(value, name)
    if number <= 0:
        raise StrataSourceError(f"option {name} must be a positive integer, got {value!r}")
    return number


def _long(value: Any, name: str) -> int:
    try:
        return int(str(value).strip())
    except ValueError as exc:
        raise StrataSourceError(f"option {name} must be an integer, got {value!r}") from exc
