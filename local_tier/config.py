"""Per-log configuration, in Kafka's topic-config vocabulary.

``LogConfig`` is what a partition's log needs to know; it is built from the
effective topic configs (topic overrides on top of broker defaults), whose names,
types, defaults and validation live in :mod:`common.config`. Values reaching
:meth:`LogConfig.from_properties` have already been validated there.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache

__all__ = ["LogConfig"]


@dataclass(frozen=True, slots=True)
class LogConfig:
    segment_bytes: int = 1024 * 1024 * 1024
    segment_ms: int = 7 * 24 * 3600 * 1000
    segment_index_bytes: int = 10 * 1024 * 1024
    index_interval_bytes: int = 4096
    retention_ms: int = 7 * 24 * 3600 * 1000  # -1: keep forever
    retention_bytes: int = -1  # -1: no size limit
    flush_messages: int = 2**63 - 1  # default: rely on the page cache
    flush_ms: int = 2**63 - 1
    max_message_bytes: int = 1048588
    message_timestamp_type: str = "CreateTime"  # or "LogAppendTime"
    file_delete_delay_ms: int = 60_000
    cleanup_policy: str = "delete"
    remote_storage_enable: bool = False
    local_retention_ms: int = -2  # -2: same as retention.ms
    local_retention_bytes: int = -2  # -2: same as retention.bytes
    delete_retention_ms: int = 86_400_000  # tombstones and markers kept this long once cleaned
    min_cleanable_dirty_ratio: float = 0.5
    min_compaction_lag_ms: int = 0
    max_compaction_lag_ms: int = 2**63 - 1
    min_insync_replicas: int = 1  # acks=all needs this many replicas in the ISR

    @property
    def compact(self) -> bool:
        """``cleanup.policy`` holds ``compact``: the log cleaner keeps the last record per key."""
        return "compact" in _policies(self.cleanup_policy)

    @property
    def delete(self) -> bool:
        """``cleanup.policy`` holds ``delete``: retention.ms and retention.bytes apply."""
        return "delete" in _policies(self.cleanup_policy)

    @classmethod
    def from_properties(cls, props: Mapping[str, str]) -> LogConfig:
        """Build from Kafka topic-config names (``segment.bytes`` ...); unknown keys are ignored."""
        kwargs: dict[str, object] = {}
        for key, raw in props.items():
            field = _FIELDS.get(key)
            if field is None:
                continue
            name, kind = field
            if kind is bool:
                kwargs[name] = str(raw).strip().lower() == "true"
            elif kind is int:
                kwargs[name] = int(raw)
            elif kind is float:
                kwargs[name] = float(raw)
            else:
                kwargs[name] = str(raw)
        return cls(**kwargs)  # type: ignore[arg-type]


_FIELDS: dict[str, tuple[str, type]] = {
    "segment.bytes": ("segment_bytes", int),
    "segment.ms": ("segment_ms", int),
    "segment.index.bytes": ("segment_index_bytes", int),
    "index.interval.bytes": ("index_interval_bytes", int),
    "retention.ms": ("retention_ms", int),
    "retention.bytes": ("retention_bytes", int),
    "flush.messages": ("flush_messages", int),
    "flush.ms": ("flush_ms", int),
    "max.message.bytes": ("max_message_bytes", int),
    "message.timestamp.type": ("message_timestamp_type", str),
    "file.delete.delay.ms": ("file_delete_delay_ms", int),
    "cleanup.policy": ("cleanup_policy", str),
    "remote.storage.enable": ("remote_storage_enable", bool),
    "local.retention.ms": ("local_retention_ms", int),
    "local.retention.bytes": ("local_retention_bytes", int),
    "delete.retention.ms": ("delete_retention_ms", int),
    "min.cleanable.dirty.ratio": ("min_cleanable_dirty_ratio", float),
    "min.compaction.lag.ms": ("min_compaction_lag_ms", int),
    "max.compaction.lag.ms": ("max_compaction_lag_ms", int),
    "min.insync.replicas": ("min_insync_replicas", int),
}


@lru_cache(maxsize=64)
def _policies(value: str) -> frozenset[str]:
    """The policies a ``cleanup.policy`` value names (asked on every append: cached)."""
    return frozenset(p.strip() for p in value.split(","))
