"""What both controllers share: reads, topic changes and the compare-and-set cycle.

Every mutation follows the compare-and-set cycle of the design: take the last
committed snapshot and its version, apply the change (validating against that
snapshot), commit it with :class:`controller.commit.MetadataCommitter` (which
stamps the writer's controller epoch and refuses to write over a higher one);
when another writer got there first, apply the change again to what it wrote,
a few times, then give up with ``NotControllerError`` (retriable). A change can
therefore never overwrite another writer's change unseen: it is re-validated
against it (and may then fail with a clear error, e.g.
``TopicAlreadyExistsError``).

Subclasses say who writes (:meth:`MetadataWriter._writer_epoch`), whether they
may (:meth:`MetadataWriter._require_active`, :meth:`MetadataWriter._check_lease`)
and where replicas may go (:meth:`MetadataWriter._placement`).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import TypeVar

from common.config.broker import BrokerConfig
from common.errors import KafkaError
from controller.commit import LogPolicy, MetadataCommitter, Snapshot, StaleSnapshot
from controller.document import ClusterMetadata
from controller.errors import ControllerFencedError, NotControllerError, TopicDeletionDisabledError
from controller.events import MetadataListener, diff_metadata
from controller.metadata_reads import MetadataReads
from controller.metadata_store import MetadataConflict, MetadataStore
from controller.placement import ReplicaPlacer
from controller.records import BrokerInfo, TopicInfo
from controller.registrations import (
    NO_LEADER,
    PRODUCER_ID_BLOCK_SIZE,
    ProducerIdsBlock,
)
from controller.replication_control import check_broker_epoch
from controller.topic_changes import Placement, TopicChanges, new_cluster_id

__all__ = ["MetadataWriter", "allocate_producer_ids"]

_log = logging.getLogger(__name__)
_T = TypeVar("_T")
_MAX_ATTEMPTS = 5
_LONG_MAX = 2**63 - 1
Change = Callable[[ClusterMetadata], tuple[ClusterMetadata, _T]]


def allocate_producer_ids(
    md: ClusterMetadata, broker_id: int
) -> tuple[ClusterMetadata, ProducerIdsBlock]:
    """The next block of producer ids for ``broker_id`` (Kafka's AllocateProducerIds);
    the metadata it returns no longer hands those ids out."""
    first = md.next_producer_id
    if first > _LONG_MAX - PRODUCER_ID_BLOCK_SIZE:
        raise KafkaError(
            "Exhausted all producerIds as the next block's end producerId has exceeded the "
            "int64 type limit"
        )
    block = ProducerIdsBlock(broker_id, first)
    return replace(md, next_producer_id=block.next_block_first_id), block


#: a commit slower than this is logged with where its time went
SLOW_COMMIT_S = 0.25


def _log_slow_commit(revision: int, started: float, computed: float, written: float) -> None:
    done = time.perf_counter()
    if done - started >= SLOW_COMMIT_S:
        _log.info("metadata revision %d took %.0f ms: %.0f ms to compute the change, %.0f ms to "
                  "write it, %.0f ms for this node's listeners", revision, (done - started) * 1000,
                  (computed - started) * 1000, (written - computed) * 1000, (done - written) * 1000)


class MetadataWriter(MetadataReads):
    """Reads and topic changes over the compare-and-set cycle (see the module docstring).

    Invariants: the metadata is only ever changed through a commit to the store
    (memory holds a cache of the last committed snapshot, never the only copy);
    listeners hear of a change only after it is committed, on the thread that
    committed or refreshed it.

    Thread-safety: mutations and refreshes serialise on one lock; reads return
    the last installed snapshot (an immutable value) without locking. Store I/O
    is blocking: call from a worker thread, never on the event loop (the
    single-node broker still calls it on its loop with a local filesystem store).
    """

    def __init__(
        self,
        store: MetadataStore,
        config: BrokerConfig,
        *,
        clock: Callable[[], int],
        placement_seed: int | None = None,
    ) -> None:
        self._committer = MetadataCommitter(store, LogPolicy.from_config(config), clock=clock)
        self._config = config
        self._clock = clock
        self._listeners: list[MetadataListener] = []
        self._snapshot_listeners: list[Callable[[Snapshot], object]] = []
        self._lock = threading.RLock()
        self._changes = TopicChanges(config, clock, ReplicaPlacer(placement_seed), current=self.broker_config)
        self._snapshot = self._load_or_initialise()

    # -- hooks --------------------------------------------------------------------------

    def _writer_epoch(self) -> int:
        """The controller epoch stamped on this writer's commits (0: no lease)."""
        return 0

    def _writer_id(self) -> int:
        return NO_LEADER

    def _require_active(self) -> None:
        """Raise ``NotControllerError`` if this writer may not serve mutations now."""

    def _check_lease(self) -> None:
        """Raise ``NotControllerError`` if this writer may not send a write now."""

    def _on_fenced(self, error: ControllerFencedError) -> None:
        """Called when a commit found a higher controller epoch in the store."""

    def _placement(self, md: ClusterMetadata) -> Placement:
        raise NotImplementedError

    # -- identity -----------------------------------------------------------------------

    @property
    def node_id(self) -> int:
        return self._config.node_id

    @property
    def cluster_id(self) -> str:
        return self._snapshot.metadata.cluster_id

    @property
    def config(self) -> BrokerConfig:
        return self._config

    @property
    def snapshot(self) -> Snapshot:
        """The last committed snapshot this writer knows, with its store version."""
        return self._snapshot

    @property
    def metadata(self) -> ClusterMetadata:
        return self._snapshot.metadata

    # -- reads ----------------------------------------------------------------------------

    def brokers(self) -> list[BrokerInfo]:
        """Every registered broker's first endpoint, by node id."""
        return [b.as_broker_info() for _, b in sorted(self.metadata.brokers.items())]

    # -- topic mutations --------------------------------------------------------------------

    def create_topic(
        self,
        name: str,
        num_partitions: int = -1,
        replication_factor: int = -1,
        configs: Mapping[str, str | None] | None = None,
        validate_only: bool = False,
        assignments: Mapping[int, Sequence[int]] | None = None,
    ) -> TopicInfo:
        """Create a topic; -1 means ``num.partitions`` / ``default.replication.factor``.

        ``assignments`` (partition index -> replicas, preferred leader first) places
        the partitions by hand; both counts must then be -1. Raises
        InvalidTopicError, TopicAlreadyExistsError, InvalidPartitionsError,
        InvalidReplicationFactorError, InvalidReplicaAssignmentError,
        InvalidConfigError. With ``validate_only`` nothing is written and the
        returned topic is what would have been created.
        """
        return self._apply(
            lambda md: self._changes.create_topic(
                md,
                self._placement(md),
                name,
                num_partitions,
                replication_factor,
                configs,
                assignments,
            ),
            validate_only,
        )

    def delete_topic(self, name: str) -> TopicInfo:
        """Delete a topic; returns it as it was. UnknownTopicOrPartitionError if missing."""
        if not self._config.get_bool("delete.topic.enable"):
            raise TopicDeletionDisabledError(
                "Topic deletion is disabled (delete.topic.enable=false)."
            )
        return self._apply(lambda md: self._changes.delete_topic(md, name), False)

    def create_partitions(
        self,
        name: str,
        total_count: int,
        validate_only: bool = False,
        assignments: Sequence[Sequence[int]] | None = None,
    ) -> TopicInfo:
        """Grow topic ``name`` to ``total_count`` partitions (never shrink)."""
        return self._apply(
            lambda md: self._changes.create_partitions(
                md, self._placement(md), name, total_count, assignments
            ),
            validate_only,
        )

    def incremental_alter_configs(
        self,
        name: str,
        ops: Sequence[tuple[str, int, str | None]],
        validate_only: bool = False,
    ) -> TopicInfo:
        """Apply Kafka's IncrementalAlterConfigs ``(key, op, value)`` to topic ``name``."""
        return self._apply(
            lambda md: self._changes.incremental_alter_configs(md, name, ops), validate_only
        )

    def alter_section(self, name: str, change: Callable[[object], tuple[object, _T]]) -> _T:
        """Change section ``name`` (SCRAM credentials, ACLs, client quotas...) by the pure
        function ``change(current JSON value or None) -> (new value, result)``, in the
        compare-and-set cycle (a conflict re-runs it on what the other writer committed);
        ``change`` raises a ``KafkaError`` to refuse. A new value equal to the old writes
        nothing."""

        def apply(md: ClusterMetadata) -> tuple[ClusterMetadata, _T]:
            current = md.section(name)
            updated, result = change(current)
            return (md if updated == current else md.with_section(name, updated)), result

        return self._apply(apply, False)

    def _allocate_producer_ids(self, broker_id: int, broker_epoch: int | None) -> ProducerIdsBlock:
        def change(md: ClusterMetadata) -> tuple[ClusterMetadata, ProducerIdsBlock]:
            if broker_epoch is not None:
                check_broker_epoch(md, broker_id, broker_epoch)
            return allocate_producer_ids(md, broker_id)

        return self._apply(change, False)

    # -- listeners & refresh ---------------------------------------------------------------

    def add_listener(self, listener: MetadataListener) -> None:
        """Call ``listener(event)`` after every committed change, on the committing thread.

        A listener that raises is logged and does not affect the change or the
        other listeners.
        """
        self._listeners.append(listener)

    def add_snapshot_listener(self, listener: Callable[[Snapshot], object]) -> None:
        """Call ``listener(snapshot)`` with every snapshot installed after a commit or refresh."""
        self._snapshot_listeners.append(listener)

    def refresh(self) -> None:
        """Re-read the store; listeners hear of changes committed by other writers."""
        with self._lock:
            current = self._committer.latest(self._snapshot)
            if current is None:
                raise NotControllerError("cluster metadata disappeared from the store")
            if current is not self._snapshot:
                self._install(current)

    # -- the compare-and-set cycle ----------------------------------------------------------

    def _apply(self, change: Change[_T], validate_only: bool) -> _T:
        self._require_active()
        if validate_only:
            with self._lock:
                return change(self._snapshot.metadata)[1]
        return self._commit(change)

    def _commit(self, change: Change[_T]) -> _T:
        with self._lock:
            for attempt in range(_MAX_ATTEMPTS):
                self._check_lease()
                base = self._snapshot
                started = time.perf_counter()
                updated, result = change(base.metadata)
                if updated is base.metadata:
                    return result
                computed = time.perf_counter()
                try:
                    committed = self._committer.commit(
                        base,
                        updated,
                        controller_epoch=self._writer_epoch(),
                        controller_id=self._writer_id(),
                    )
                except StaleSnapshot as stale:
                    _log.info(
                        "cluster metadata changed concurrently; re-reading (attempt %d)",
                        attempt + 1,
                    )
                    if stale.current is None:
                        raise NotControllerError(
                            "cluster metadata disappeared from the store"
                        ) from None
                    self._install(stale.current)
                    continue
                except ControllerFencedError as fenced:
                    self._on_fenced(fenced)
                    raise
                if committed is not base:
                    written = time.perf_counter()
                    self._install(committed)
                    _log_slow_commit(committed.revision, started, computed, written)
                return result
            raise NotControllerError(
                f"cluster metadata was changed by another writer {_MAX_ATTEMPTS} times in a "
                "row; retry the request"
            )

    def _install(self, snapshot: Snapshot) -> None:
        previous = self._snapshot.metadata
        self._snapshot = snapshot
        for hear in list(self._snapshot_listeners):
            _call_safely(hear, snapshot)
        for event in diff_metadata(previous, snapshot.metadata) if self._listeners else ():
            for listener in list(self._listeners):
                _call_safely(listener, event)

    def _load_or_initialise(self) -> Snapshot:
        for _ in range(_MAX_ATTEMPTS):
            current = self._committer.read()
            if current is not None:
                return current
            try:
                return self._committer.create(ClusterMetadata(cluster_id=new_cluster_id()))
            except MetadataConflict:
                continue  # another node initialised it first: use theirs
        raise NotControllerError("could not read or initialise the cluster metadata")


def _call_safely(listener: Callable[[_T], object], value: _T) -> None:
    try:
        listener(value)
    except Exception:  # noqa: BLE001 - a listener bug must not undo a commit
        _log.exception("metadata listener %r failed on %r", listener, value)
