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

__all__ = ["PartitionTierState", "follow_remote_start", "retention_due"]


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


def follow_remote_start(local: Log, state: PartitionTierState) -> None:
    """Raise the local log start to the manifest's (as Kafka's log follows the remote tier).

    Remote retention and DeleteRecords move the manifest's log start; records below
    it are deleted, so the local log must not serve them either (its segments wholly
    below then go at the next retention pass).
    """
    manifest = state.manifest
    if manifest is not None and manifest.log_start_offset > local.log_start_offset:
        local.maybe_increment_log_start_offset(min(manifest.log_start_offset, local.high_watermark))
