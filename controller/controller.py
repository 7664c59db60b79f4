"""The metadata authority of a single-node cluster.

Every mutation follows the compare-and-set cycle of the design: take the last
committed snapshot and its version, apply the change (validating against that
snapshot), write it with ``expected_version``; on :class:`MetadataConflict`
re-read the document and apply the change again, a few times, then give up
with ``NotControllerError`` (retriable). A change can therefore never overwrite
another writer's change unseen: it is re-validated against it (and may then
fail with a clear error, e.g. ``TopicAlreadyExistsError``).
"""

from __future__ import annotations

import base64
import logging
import re
import time
import uuid
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import replace
from enum import IntEnum
from typing import TypeVar

from controller.broker_config import BrokerConfig
from controller.config_keys import (
    TOPIC_CONFIGS,
    check_topic_config_combination,
    validate_topic_config,
)
from controller.document import ClusterMetadata, decode, encode
from controller.errors import NotControllerError, TopicDeletionDisabledError
from controller.events import MetadataListener, diff
from controller.metadata_store import MetadataConflict, MetadataStore
from controller.records import BrokerInfo, ConfigEntry, TopicInfo
from local_tier.errors import (
    InvalidConfigError,
    InvalidPartitionsError,
    InvalidReplicationFactorError,
    InvalidRequestError,
    InvalidTopicError,
    TopicAlreadyExistsError,
    UnknownTopicOrPartitionError,
)

__all__ = ["AlterConfigOp", "Controller", "new_cluster_id"]

_log = logging.getLogger(__name__)
_T = TypeVar("_T")
_MAX_ATTEMPTS = 5
_MAX_TOPIC_NAME = 249
_LEGAL_TOPIC_NAME = re.compile(r"[a-zA-Z0-9._-]+")


class AlterConfigOp(IntEnum):
    """Kafka's IncrementalAlterConfigs operation types."""

    SET = 0
    DELETE = 1
    APPEND = 2
    SUBTRACT = 3


def _random_uuid() -> uuid.UUID:
    """A random UUID as Kafka makes them: never zero, never base64 with a leading '-'."""
    while True:
        value = uuid.uuid4()
        if value.int > 1 and not _base64(value).startswith("-"):
            return value


def _base64(value: uuid.UUID) -> str:
    return base64.urlsafe_b64encode(value.bytes).decode().rstrip("=")


def new_cluster_id() -> str:
    """22-char URL-safe base64 of a random UUID (Kafka's ``Uuid.randomUuid().toString()``)."""
    return _base64(_random_uuid())


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


class Controller:
    """Topics, topic ids, partitions, configs and brokers of the cluster.

    Invariants: the metadata is only ever changed through a compare-and-set write
    to ``store`` (memory holds a cache of the last committed snapshot, never the
    only copy); listeners hear of a change only after it is committed.

    Thread-safety: not thread-safe. Call it from the broker's event loop thread
    only. Its store I/O is blocking; that is acceptable in single-node mode with
    a local filesystem store (small document, local disk), and the multi-broker
    controller will move it off the loop. Reads (``topics()``...) are served from
    the last committed snapshot; :meth:`refresh` re-reads the store.
    """

    def __init__(
        self,
        store: MetadataStore,
        config: BrokerConfig,
        *,
        clock: Callable[[], int] = _now_ms,
    ) -> None:
        self._store = store
        self._config = config
        self._clock = clock
        self._listeners: list[MetadataListener] = []
        self._metadata, self._version = self._load_or_initialise()

    # -- identity -----------------------------------------------------------------

    @property
    def node_id(self) -> int:
        return self._config.node_id

    @property
    def controller_id(self) -> int:
        """The active controller's node id: this node in single-node mode."""
        return self._config.node_id

    @property
    def cluster_id(self) -> str:
        return self._metadata.cluster_id

    @property
    def config(self) -> BrokerConfig:
        return self._config

    # -- brokers --------------------------------------------------------------------

    def register_broker(self, host: str, port: int, rack: str | None = None) -> BrokerInfo:
        """Persist this node's endpoint, replacing its previous one."""
        if not 0 < port < 65536:
            raise ValueError(f"port {port} is not a TCP port")
        broker = BrokerInfo(self.node_id, host, port, rack)
        return self._commit(lambda md: (md.with_broker(broker), broker))

    def brokers(self) -> list[BrokerInfo]:
        return sorted(self._metadata.brokers.values(), key=lambda b: b.node_id)

    # -- topics: reads --------------------------------------------------------------

    def topics(self) -> list[TopicInfo]:
        return sorted(self._metadata.topics.values(), key=lambda t: t.name)

    def topic(self, name: str) -> TopicInfo | None:
        return self._metadata.topics.get(name)

    def topic_by_id(self, topic_id: uuid.UUID) -> TopicInfo | None:
        return self._metadata.topic_by_id(topic_id)

    def effective_topic_config(self, name: str) -> dict[str, str]:
        """Every topic config of ``name``: its override, else the broker default."""
        return {**self._config.topic_defaults(), **_require(self._metadata, name).configs}

    def describe_topic_config(
        self, name: str, keys: Collection[str] | None = None
    ) -> list[ConfigEntry]:
        """DescribeConfigs entries (with synonyms) of topic ``name``; unknown keys are skipped."""
        return self._config.topic_entries(_require(self._metadata, name).configs, keys)

    def describe_broker_config(self, keys: Collection[str] | None = None) -> list[ConfigEntry]:
        return self._config.entries(keys)

    # -- topics: mutations -------------------------------------------------------------

    def create_topic(
        self,
        name: str,
        num_partitions: int = -1,
        replication_factor: int = -1,
        configs: Mapping[str, str | None] | None = None,
        validate_only: bool = False,
    ) -> TopicInfo:
        """Create a topic; -1 means the broker's ``num.partitions`` / ``default.replication.factor``.

        Raises InvalidTopicError, TopicAlreadyExistsError, InvalidPartitionsError,
        InvalidReplicationFactorError, InvalidConfigError. With ``validate_only``
        nothing is written and the returned topic is what would have been created.
        """

        def change(md: ClusterMetadata) -> tuple[ClusterMetadata, TopicInfo]:
            _check_topic_name(name)
            if name in md.topics:
                raise TopicAlreadyExistsError(f"Topic '{name}' already exists.")
            _check_collision(name, md)
            partitions = self._partition_count(num_partitions)
            self._check_replication_factor(replication_factor, md)
            overrides = {k: validate_topic_config(k, v) for k, v in (configs or {}).items()}
            self._check_combination(overrides, None)
            topic = TopicInfo(name, _random_uuid(), partitions, overrides, self._clock())
            return md.with_topic(topic), topic

        return self._apply(change, validate_only)

    def delete_topic(self, name: str) -> TopicInfo:
        """Delete a topic; returns it as it was. UnknownTopicOrPartitionError if missing."""
        if not self._config.get_bool("delete.topic.enable"):
            raise TopicDeletionDisabledError(
                "Topic deletion is disabled (delete.topic.enable=false)."
            )

        def change(md: ClusterMetadata) -> tuple[ClusterMetadata, TopicInfo]:
            topic = _require(md, name)
            return md.without_topic(name), topic

        return self._commit(change)

    def create_partitions(
        self, name: str, total_count: int, validate_only: bool = False
    ) -> TopicInfo:
        """Grow topic ``name`` to ``total_count`` partitions (never shrink)."""

        def change(md: ClusterMetadata) -> tuple[ClusterMetadata, TopicInfo]:
            topic = _require(md, name)
            if total_count == topic.partitions:
                raise InvalidPartitionsError(f"Topic already has {topic.partitions} partitions.")
            if total_count < topic.partitions:
                raise InvalidPartitionsError(
                    f"Topic currently has {topic.partitions} partitions, which is higher "
                    f"than the requested {total_count}."
                )
            grown = replace(topic, partitions=total_count)
            return md.with_topic(grown), grown

        return self._apply(change, validate_only)

    def incremental_alter_configs(
        self,
        name: str,
        ops: Sequence[tuple[str, int, str | None]],
        validate_only: bool = False,
    ) -> TopicInfo:
        """Apply Kafka's IncrementalAlterConfigs ``(key, op, value)`` to topic ``name``.

        SET and DELETE work on any config, APPEND and SUBTRACT on list configs only
        (InvalidConfigError otherwise); an unknown op is InvalidRequestError. All ops
        apply together or not at all.
        """

        def change(md: ClusterMetadata) -> tuple[ClusterMetadata, TopicInfo]:
            topic = _require(md, name)
            overrides = dict(topic.configs)
            if len({key for key, _, _ in ops}) != len(ops):
                raise InvalidRequestError("Error due to duplicate config keys")
            for key, op, value in ops:
                self._apply_op(overrides, key, op, value)
            self._check_combination(overrides, topic.configs)
            altered = replace(topic, configs=overrides)
            return md.with_topic(altered), altered

        return self._apply(change, validate_only)

    # -- listeners & refresh ---------------------------------------------------------

    def add_listener(self, listener: MetadataListener) -> None:
        """Call ``listener(event)`` after every committed change, on the caller's thread.

        A listener that raises is logged and does not affect the change or the
        other listeners.
        """
        self._listeners.append(listener)

    def refresh(self) -> None:
        """Re-read the store; listeners hear of changes committed by other writers."""
        current = self._store.read()
        if current is None:
            raise NotControllerError("cluster metadata disappeared from the store")
        data, version = current
        if version != self._version:
            self._install(decode(data), version)

    # -- the compare-and-set cycle --------------------------------------------------------

    def _apply(
        self,
        change: Callable[[ClusterMetadata], tuple[ClusterMetadata, _T]],
        validate_only: bool,
    ) -> _T:
        if validate_only:
            return change(self._metadata)[1]
        return self._commit(change)

    def _commit(self, change: Callable[[ClusterMetadata], tuple[ClusterMetadata, _T]]) -> _T:
        for attempt in range(_MAX_ATTEMPTS):
            if attempt:
                self.refresh()
            current = self._metadata
            updated, result = change(current)
            if updated == current:
                return result
            updated = replace(updated, revision=current.revision + 1)
            try:
                version = self._store.write(encode(updated), self._version)
            except MetadataConflict:
                _log.info(
                    "cluster metadata changed concurrently; re-reading (attempt %d)", attempt + 1
                )
                continue
            self._install(updated, version)
            return result
        raise NotControllerError(
            f"cluster metadata was changed by another writer {_MAX_ATTEMPTS} times in a row; "
            "retry the request"
        )

    def _install(self, metadata: ClusterMetadata, version: str) -> None:
        previous = self._metadata
        self._metadata, self._version = metadata, version
        for event in diff(previous.topics.values(), metadata.topics.values()):
            for listener in list(self._listeners):
                try:
                    listener(event)
                except Exception:  # noqa: BLE001 - a listener bug must not undo a commit
                    _log.exception("metadata listener %r failed on %r", listener, event)

    def _load_or_initialise(self) -> tuple[ClusterMetadata, str]:
        for _ in range(_MAX_ATTEMPTS):
            current = self._store.read()
            if current is not None:
                data, version = current
                return decode(data), version
            fresh = ClusterMetadata(cluster_id=new_cluster_id())
            try:
                return fresh, self._store.write(encode(fresh), None)
            except MetadataConflict:
                continue  # another node initialised it first: use theirs
        raise NotControllerError("could not read or initialise the cluster metadata")

    # -- validation helpers -----------------------------------------------------------

    def _partition_count(self, requested: int) -> int:
        if requested == -1:
            return self._config.get_int("num.partitions")
        if requested <= 0:
            raise InvalidPartitionsError("Number of partitions must be larger than 0.")
        return requested

    def _check_replication_factor(self, requested: int, md: ClusterMetadata) -> None:
        factor = (
            self._config.get_int("default.replication.factor") if requested == -1 else requested
        )
        if factor <= 0:
            raise InvalidReplicationFactorError(
                "Replication factor must be larger than 0, or -1 to use the default value."
            )
        registered = max(1, len(md.brokers))  # this node counts even before it registers
        if factor > registered:
            raise InvalidReplicationFactorError(
                f"Unable to replicate the partition {factor} time(s): The target replication "
                f"factor of {factor} cannot be reached because only {registered} broker(s) "
                "are registered."
            )

    def _check_combination(
        self, overrides: Mapping[str, str], previous: Mapping[str, str] | None
    ) -> None:
        defaults = self._config.topic_defaults()
        check_topic_config_combination(
            {**defaults, **overrides},
            None if previous is None else {**defaults, **previous},
            self._config.get_bool("remote.log.storage.system.enable"),
        )

    def _apply_op(self, overrides: dict[str, str], key: str, op: int, value: str | None) -> None:
        definition = TOPIC_CONFIGS.get(key)
        if definition is None:
            raise InvalidConfigError(f"Unknown topic config name: {key}")
        if op == AlterConfigOp.SET:
            overrides[key] = validate_topic_config(key, value)
        elif op == AlterConfigOp.DELETE:
            overrides.pop(key, None)
        elif op in (AlterConfigOp.APPEND, AlterConfigOp.SUBTRACT):
            verb = AlterConfigOp(op).name.lower()
            if definition.type != "list":
                raise InvalidConfigError(
                    f"Config value {verb} is not allowed for config key: {key}"
                )
            items = _split(validate_topic_config(key, value))
            current = _split(overrides.get(key, self._config.topic_defaults()[key]))
            if op == AlterConfigOp.APPEND:
                result = current + [item for item in items if item not in current]
            else:
                result = [item for item in current if item not in items]
            overrides[key] = ",".join(result)
        else:
            raise InvalidRequestError(f"Unknown alter config operation type: {op}")


def _split(value: str) -> list[str]:
    return [item for item in value.split(",") if item]


def _require(md: ClusterMetadata, name: str) -> TopicInfo:
    topic = md.topics.get(name)
    if topic is None:
        raise UnknownTopicOrPartitionError(f"Topic '{name}' does not exist.")
    return topic


def _check_topic_name(name: str) -> None:
    """Kafka's ``Topic.validate``; names starting with ``__`` (internal topics) are legal."""
    if not name:
        raise InvalidTopicError("Topic name is illegal, it can't be empty")
    if name in (".", ".."):
        raise InvalidTopicError('Topic name cannot be "." or ".."')
    if len(name) > _MAX_TOPIC_NAME:
        raise InvalidTopicError(
            f"Topic name is illegal, it can't be longer than {_MAX_TOPIC_NAME} characters, "
            f"topic name: {name}"
        )
    if not _LEGAL_TOPIC_NAME.fullmatch(name):
        raise InvalidTopicError(
            f'Topic name "{name}" is illegal, it contains a character other than '
            "ASCII alphanumerics, '.', '_' and '-'"
        )


def _check_collision(name: str, md: ClusterMetadata) -> None:
    """Kafka rejects names equal to an existing one up to '.' vs '_' (metric names clash)."""
    folded = name.replace(".", "_")
    for existing in md.topics:
        if existing.replace(".", "_") == folded:
            raise InvalidTopicError(f"Topic '{name}' collides with existing topic: {existing}")
