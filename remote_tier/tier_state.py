"""What the broker knows of one partition's remote tier, and the rules read from it.

Not thread-safe: touched on the event loop only (see :mod:`remote_tier.log_manager`).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from remote_tier.manifest import PartitionManifest

if TYPE_CHECKING:
    from local_tier.log import Log

__all__ = ["NEVER", "PartitionTierState", "follow_remote_start", "retention_due", "retention_due_at"]

#: a time no rest lasts until (in ms): only a change wakes the partition
NEVER = 2**63


@dataclass(slots=True)
class PartitionTierState:
    """What the broker knows of one partition's remote tier (from its manifest)."""

    topic_id: uuid.UUID
    manifest: PartitionManifest | None = None
    loaded: bool = False
    #: the manifest was read at least once since start (``loaded`` goes back to False
    #: after a failed round, but the manifest read before stays right to answer from)
    known: bool = False
    uploading: bool = False
    upload_failures: int = 0
    last_error: str | None = None
    next_orphan_cleanup_ms: int = 0
    claimed_epoch: int = -1  # the leader epoch this broker wrote into the manifest (a cluster's leader)
    #: the highest DeleteRecords offset seen: the log start never goes below it, even
    #: while the cached manifest predates the change
    log_start_floor: int = 0
    #: a round found nothing to do here (:meth:`rest`): the local log then, its change count
    #: (``Log.changes``), until when nothing can fall due without a change, and whether the
    #: partition was led (a leader's orphan clean-up falls due too). None: not resting.
    resting_log: Log | None = None
    resting_changes: int = -1
    resting_until_ms: int = 0
    resting_led: bool = False

    def rest(self, local: Log, until_ms: int, *, led: bool) -> None:
        """A round found nothing to do: later rounds skip the partition (:meth:`resting`) until
        its log changes, its manifest is replaced, its leadership changes (:meth:`wake`), or
        ``until_ms`` passes. At 10,000 idle partitions a round then reads one counter each."""
        self.resting_log, self.resting_changes = local, local.changes
        self.resting_until_ms, self.resting_led = until_ms, led

    def wake(self) -> None:
        """Something a round reads changed: the next round looks at the partition again."""
        self.resting_log = None

    def resting(self, local: Log, now_ms: int) -> bool:
        """Whether a round may skip the partition: nothing changed since it found nothing to do."""
        return (
            self.resting_log is local
            and self.resting_changes == local.changes
            and now_ms < self.resting_until_ms
            and not (self.resting_led and now_ms >= self.next_orphan_cleanup_ms)
        )

    def adopt(self, manifest: PartitionManifest | None) -> None:
        """Cache ``manifest`` unless the cached one is newer (a higher revision).

        Manifests are read and committed on copier threads and cached back on the
        event loop in whatever order those finish: a DeleteRecords' commit can come
        back after a round cached the manifest an upload published on top of it.
        Caching the older one would drop that segment from what the broker serves
        (its local copy may already be gone): a consumer would skip its records and
        DeleteRecords would answer a low watermark past the offset it was given.
        """
        if manifest is None or (self.manifest is not None and manifest.revision < self.manifest.revision):
            return
        if manifest is not self.manifest:
            self.wake()
        self.manifest = manifest

    @property
    def remote_next_offset(self) -> int | None:
        """First offset not in the bucket (None: nothing uploaded yet)."""
        if self.manifest is None or not self.manifest.segments:
            return None
        return self.manifest.next_offset

    @property
    def remote_log_start_offset(self) -> int | None:
        if self.manifest is None or not self.manifest.segments:
            return None
        return self.manifest.log_start_offset

    @property
    def remote_bytes(self) -> int:
        return self.manifest.size_bytes if self.manifest is not None else 0


def retention_due(
    manifest: PartitionManifest | None, config: Any, local_only_bytes: int, now_ms: int
) -> bool:
    """Whether the cached manifest has a segment that retention would remove.

    Checked in memory first, so an idle partition costs no object-store request
    per round (on S3 every request is billed).
    """
    if manifest is None or not manifest.segments:
        return False
    oldest = manifest.segments[0]
    if config.retention_ms >= 0 and oldest.max_timestamp < now_ms - config.retention_ms:
        return True
    return bool(
        config.retention_bytes >= 0
        and manifest.size_bytes + local_only_bytes - oldest.size_bytes >= config.retention_bytes
    )


def retention_due_at(manifest: PartitionManifest | None, config: Any) -> int:
    """From when :func:`retention_due` holds by time alone (``retention.ms`` of the oldest
    remote segment): until then only a new manifest, a local change or a new config can make
    it hold (:data:`NEVER`: time never does)."""
    if manifest is None or not manifest.segments or not config.delete or config.retention_ms < 0:
        return NEVER
    return manifest.segments[0].max_timestamp + config.retention_ms + 1


def follow_remote_start(local: Log, state: PartitionTierState) -> None:
    """Raise the local log start to the manifest's (as Kafka's log follows the remote tier).

    Remote retention and DeleteRecords move the manifest's log start; records below
    it are deleted, so the local log must not serve them either (its segments wholly
    below then go at the next retention pass).
    """
    manifest = state.manifest
    if manifest is not None and manifest.log_start_offset > local.log_start_offset:
        local.maybe_increment_log_start_offset(min(manifest.log_start_offset, local.high_watermark))
