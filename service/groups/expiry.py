"""Offset retention: Kafka's periodic ``cleanupGroupMetadata``.

Every ``offsets.retention.check.interval.ms`` (at most the retention itself,
at least a second) :class:`OffsetExpiry` drops the committed offsets older than
``offsets.retention.minutes``, counted from when an empty group became empty,
from each commit for groups with no protocol (standalone consumers), and for a
stable group only on topics it no longer subscribes to; a group left empty with
no offsets is deleted. Tombstones go through the
:class:`~service.groups.store.GroupStore`; a failed write leaves that group for
the next pass.

Not thread-safe: the timer calls back on the broker's event loop thread.
"""

from __future__ import annotations

import logging
from collections.abc import Collection

from common.errors import KafkaError
from service.groups.group import GroupState
from service.groups.requests import GroupConfig
from service.groups.seams import Cancellable, Timer, cancel
from service.groups.store import GroupStore

__all__ = ["OffsetExpiry"]

log = logging.getLogger("strata.groups")


class OffsetExpiry:
    def __init__(self, store: GroupStore, timer: Timer, config: GroupConfig) -> None:
        self._store = store
        self._timer = timer
        self._config = config
        self._handle: Cancellable | None = None

    def cancel(self) -> None:
        """Stop the schedule."""
        cancel(self._handle)

    def schedule(self) -> None:
        """Run :meth:`expire_offsets` every ``offsets.retention.check.interval.ms`` from now on."""
        config = self._config
        interval = min(config.offsets_retention_check_interval_ms, config.offsets_retention_ms)

        def run() -> None:
            try:
                self.expire_offsets()
            except Exception:  # the schedule must survive a failed pass
                log.exception("offset expiry failed")
            self.schedule()

        self._handle = self._timer.call_later(max(interval, 1000), run)

    def remove_topics(self, topics: Collection[str]) -> int:
        """Kafka's ``onPartitionsDeleted``: tombstone every group's offsets of ``topics``.

        Called when topics are deleted, so a topic created again under the same name
        starts with no committed offsets, and lag is never computed against a
        partition that is gone. As in Kafka 4, only the offsets go: a group left empty
        with none is removed by the next :meth:`expire_offsets` pass. Returns the
        number of offsets removed.
        """
        removed = 0
        for group in list(self._store.groups.values()):
            gone = [tp for tp in self._store.known_partitions(group) if tp[0] in topics]
            if not gone:
                continue
            try:
                self._store.remove_offsets(group, gone)
                removed += len(gone)
            except KafkaError as exc:
                log.warning("group %s: could not remove offsets of deleted topics: %s",
                            group.group_id, exc)
        if removed:
            log.info("removed %d committed offset(s) of deleted topic(s) %s", removed, sorted(topics))
        return removed

    def expire_offsets(self) -> int:
        """Kafka's ``cleanupGroupMetadata``: drop expired offsets and groups left with none."""
        now = self._timer.now_ms()
        retention = self._config.offsets_retention_ms
        removed = 0
        for group in list(self._store.groups.values()):
            if group.is_empty():
                if group.protocol_type is not None:
                    # Everything expires once the group has been empty for the retention.
                    expired = list(group.offsets) if group.current_state_timestamp_ms + retention <= now else []
                else:  # standalone consumer: per offset, from its commit
                    expired = [
                        tp for tp, o in group.offsets.items() if o.commit_timestamp + retention <= now
                    ]
            elif (group.is_state(GroupState.STABLE) or group.consumer is not None) and (
                topics := group.subscribed_topics()
            ) is not None:
                expired = [
                    tp
                    for tp, o in group.offsets.items()
                    if tp[0] not in topics and o.commit_timestamp + retention <= now
                ]
            else:
                expired = []
            try:
                if expired:
                    self._store.remove_offsets(group, expired)
                    removed += len(expired)
                if group.is_empty() and group.consumer is None and not self._store.known_partitions(group):
                    log.info("group %s: empty with no offsets left; removing it", group.group_id)
                    self._store.delete_group(group, self._timer.now_ms())
            except KafkaError as exc:
                log.warning("group %s: could not expire offsets: %s", group.group_id, exc)
        if removed:
            log.info("expired %d committed offset(s)", removed)
        return removed
