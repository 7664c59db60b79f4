"""Topic changes as pure functions of the metadata: create, delete, grow, alter configs.

:class:`TopicChanges` validates a change against one :class:`ClusterMetadata`
and returns the next one with the result, ``(metadata, topic)``; both
controllers (:class:`controller.Controller` and
:class:`controller.ClusterController`) run these inside their compare-and-set
cycle, so a change is validated again against whatever another writer
committed first. Errors are Kafka's, with Kafka's messages.

Where partitions go is the caller's :class:`Placement`: the brokers replicas may
be put on (the live, unfenced ones) and every registered node id (for manual
assignments). Not thread-safe (the placer's random generator): callers hold
their commit lock.
"""

from __future__ import annotations

import base64
import re
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from enum import IntEnum

from common.config.broker import BrokerConfig
from common.config.keys import (
    TOPIC_CONFIGS,
    check_topic_config_combination,
    validate_topic_config,
)
from common.errors import (
    InvalidConfigError,
    InvalidPartitionsError,
    InvalidReplicationFactorError,
    InvalidRequestError,
    InvalidTopicError,
    PolicyViolationError,
    TopicAlreadyExistsError,
    UnknownTopicOrPartitionError,
)
from controller.document import ClusterMetadata
from controller.errors import InvalidReplicaAssignmentError
from controller.placement import PlacementBroker, ReplicaPlacer, validate_manual_assignment
from controller.records import TopicInfo
from controller.registrations import PartitionRegistration
from controller.replication_control import new_partition

__all__ = [
    "MAX_PARTITIONS_PER_OPERATION", "AlterConfigOp", "Placement", "TopicChanges", "check_operation_size",
    "check_topic_name", "default_replication_factor",
    "new_cluster_id", "random_uuid", "require",
]

_MAX_TOPIC_NAME = 249
_LEGAL_TOPIC_NAME = re.compile(r"[a-zA-Z0-9._-]+")
Assignments = Mapping[int, Sequence[int]]


#: the most partitions one create or grow of a topic may add: Kafka's bound on the records of
#: one controller operation (``MAX_RECORDS_PER_USER_OP``), so a request that asks for
#: millions is refused before anything is placed; larger topics grow in steps
MAX_PARTITIONS_PER_OPERATION = 10_000


def check_operation_size(partitions: int) -> None:
    """PolicyViolationError, as Kafka's controller answers, when one operation adds too many."""
    if partitions > MAX_PARTITIONS_PER_OPERATION:
        raise PolicyViolationError(
            f"Unable to perform excessively large batch operation: {partitions} partitions in one "
            f"create, at most {MAX_PARTITIONS_PER_OPERATION}; create fewer and add the rest with "
            "CreatePartitions"
        )


class AlterConfigOp(IntEnum):
    """Kafka's IncrementalAlterConfigs operation types."""

    SET = 0
    DELETE = 1
    APPEND = 2
    SUBTRACT = 3


def random_uuid() -> uuid.UUID:
    """A random UUID as Kafka makes them: never zero, never base64 with a leading '-'."""
    while True:
        value = uuid.uuid4()
        if value.int > 1 and not _base64(value).startswith("-"):
            return value


def _base64(value: uuid.UUID) -> str:
    return base64.urlsafe_b64encode(value.bytes).decode().rstrip("=")


def new_cluster_id() -> str:
    """22-char URL-safe base64 of a random UUID (Kafka's ``Uuid.randomUuid().toString()``)."""
    return _base64(random_uuid())


@dataclass(frozen=True, slots=True)
class Placement:
    """Where replicas may go: ``usable`` brokers (live, unfenced) and ``registered`` ids."""

    usable: tuple[PlacementBroker, ...]
    registered: frozenset[int]

    @property
    def live(self) -> frozenset[int]:
        return frozenset(b.node_id for b in self.usable)


class TopicChanges:
    """Validated topic changes for one broker configuration (see the module docstring)."""

    def __init__(
        self, config: BrokerConfig, clock: Callable[[], int], placer: ReplicaPlacer,
        current: Callable[[], BrokerConfig] | None = None,
    ) -> None:
        #: the configs now, dynamic ones included (``log.cleanup.policy``,
        #: ``unclean.leader.election.enable`` ... change at run time: ADR 0022)
        self._current = current if current is not None else lambda: config
        self._clock = clock
        self._placer = placer

    @property
    def _config(self) -> BrokerConfig:
        return self._current()

    def unclean_election_enabled(self, topic: TopicInfo) -> bool:
        """``unclean.leader.election.enable`` of ``topic``: its override, else the default.
        Always for a diskless topic: its replicas hold no data, any of them may sequence
        (ADR 0027, section 1)."""
        if topic.diskless:
            return True
        value = topic.configs.get("unclean.leader.election.enable")
        if value is None:
            return self._config.get_bool("unclean.leader.election.enable")
        return value == "true"

    def create_topic(
        self,
        md: ClusterMetadata,
        placement: Placement,
        name: str,
        num_partitions: int,
        replication_factor: int,
        configs: Mapping[str, str | None] | None,
        assignments: Assignments | None = None,
    ) -> tuple[ClusterMetadata, TopicInfo]:
        check_topic_name(name)
        if name in md.topics:
            raise TopicAlreadyExistsError(f"Topic '{name}' already exists.")
        _check_collision(name, md)
        if assignments:
            if replication_factor != -1 or num_partitions != -1:
                raise InvalidRequestError(
                    "A manual partition assignment was specified, but the number of partitions "
                    "or the replication factor was not set to -1."
                )
            check_operation_size(len(assignments))
            registrations = _assigned(placement, assignments, 0, None)
        else:
            count = self._partition_count(num_partitions)
            registrations = self._placed(
                placement, count, self._replication_factor(replication_factor, len(md.brokers))
            )
        overrides = {k: validate_topic_config(k, v) for k, v in (configs or {}).items()}
        self._check_combination(overrides, None)
        topic = TopicInfo(name, random_uuid(), len(registrations), overrides, self._clock())
        return md.with_topic(topic, registrations), topic

    def delete_topic(self, md: ClusterMetadata, name: str) -> tuple[ClusterMetadata, TopicInfo]:
        topic = require(md, name)
        return md.without_topic(name), topic

    def create_partitions(
        self,
        md: ClusterMetadata,
        placement: Placement,
        name: str,
        total_count: int,
        assignments: Sequence[Sequence[int]] | None = None,
    ) -> tuple[ClusterMetadata, TopicInfo]:
        """Grow ``name`` to ``total_count`` partitions (never shrink); ``assignments``
        gives the replicas of each new partition, in order (Kafka's CreatePartitions)."""
        topic = require(md, name)
        if total_count == topic.partitions:
            raise InvalidPartitionsError(f"Topic already has {topic.partitions} partitions.")
        if total_count < topic.partitions:
            raise InvalidPartitionsError(
                f"Topic currently has {topic.partitions} partitions, which is higher than the "
                f"requested {total_count}."
            )
        existing = md.partitions[topic.topic_id]
        factor = len(existing[0].replicas)
        added = total_count - topic.partitions
        if assignments:
            if len(assignments) != added:
                raise InvalidReplicaAssignmentError(
                    f"Attempted to add {added} additional partition(s), but only "
                    f"{len(assignments)} assignment(s) were specified."
                )
            check_operation_size(len(assignments))
            new = _assigned(placement, dict(enumerate(assignments)), topic.partitions, factor)
        else:
            new = self._placed(placement, added, factor)
        grown = replace(topic, partitions=total_count)
        return md.with_topic(grown, (*existing, *new)), grown

    def incremental_alter_configs(
        self, md: ClusterMetadata, name: str, ops: Sequence[tuple[str, int, str | None]]
    ) -> tuple[ClusterMetadata, TopicInfo]:
        """Apply Kafka's IncrementalAlterConfigs ``(key, op, value)`` to topic ``name``.

        SET and DELETE work on any config, APPEND and SUBTRACT on list configs only
        (InvalidConfigError otherwise); an unknown op is InvalidRequestError. All ops
        apply together or not at all.
        """
        topic = require(md, name)
        overrides = dict(topic.configs)
        if len({key for key, _, _ in ops}) != len(ops):
            raise InvalidRequestError("Error due to duplicate config keys")
        for key, op, value in ops:
            self._apply_op(overrides, key, op, value)
        self._check_combination(overrides, topic.configs)
        altered = replace(topic, configs=overrides)
        return md.with_topic(altered), altered

    # -- helpers ------------------------------------------------------------------------

    def _placed(self, placement: Placement, count: int, factor: int) -> list[PartitionRegistration]:
        check_operation_size(count)
        replicas = self._placer.place(
            placement.usable, count, factor, registered=len(placement.registered)
        )
        return [new_partition(r, placement.live) for r in replicas]

    def _partition_count(self, requested: int) -> int:
        if requested == -1:
            return self._config.get_int("num.partitions")
        if requested <= 0:
            raise InvalidPartitionsError("Number of partitions must be larger than 0.")
        return requested

    def _replication_factor(self, requested: int, registered_brokers: int) -> int:
        factor = (
            default_replication_factor(self._config, "default.replication.factor", registered_brokers)
            if requested == -1
            else requested
        )
        if factor <= 0:
            raise InvalidReplicationFactorError(
                "Replication factor must be larger than 0, or -1 to use the default value."
            )
        return factor

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


def _assigned(
    placement: Placement, assignments: Assignments, first: int, factor: int | None
) -> list[PartitionRegistration]:
    """Registrations of manually assigned partitions ``first, first + 1, ...``."""
    if sorted(assignments) != list(range(len(assignments))):
        raise InvalidReplicaAssignmentError(
            "partitions should be a consecutive 0-based integer sequence"
        )
    out: list[PartitionRegistration] = []
    for index in range(len(assignments)):
        replicas = list(assignments[index])
        validate_manual_assignment(replicas, placement.registered, factor)
        factor = len(replicas)
        registration = new_partition(replicas, placement.live)
        if not registration.isr:
            raise InvalidReplicaAssignmentError(
                f"All brokers specified in the manual partition assignment for partition "
                f"{first + index} are fenced or in controlled shutdown."
            )
        out.append(registration)
    return out


def _split(value: str) -> list[str]:
    return [item for item in value.split(",") if item]


def require(md: ClusterMetadata, name: str) -> TopicInfo:
    """Topic ``name``, or ``UnknownTopicOrPartitionError``."""
    topic = md.topics.get(name)
    if topic is None:
        raise UnknownTopicOrPartitionError(f"Topic '{name}' does not exist.")
    return topic


def check_topic_name(name: str) -> None:
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


def default_replication_factor(config: BrokerConfig, key: str, registered_brokers: int) -> int:
    """``key`` (``default.replication.factor``, ``offsets.topic.replication.factor``,
    ``transaction.state.log.replication.factor``) when it is set; when it is not, its
    default (3), or the number of registered brokers when there are fewer: a single
    broker's topics have one replica, a cluster's of three or more have three."""
    if key in config.overrides:
        return config.get_int(key)
    return max(1, min(config.get_int(key), registered_brokers))
