"""Kafka's ``partition.metadata`` file in each partition directory: the topic id.

A log left from a deleted topic is thus never taken for a new topic of the same name
(:mod:`service.replication.replica_manager`). Blocking file I/O on small files.
"""

from __future__ import annotations

import base64
import uuid
from pathlib import Path

__all__ = ["PARTITION_METADATA", "read_topic_id", "write_topic_id"]

PARTITION_METADATA = "partition.metadata"


def _encode_topic_id(topic_id: uuid.UUID) -> str:
    return base64.urlsafe_b64encode(topic_id.bytes).rstrip(b"=").decode()


def read_topic_id(log_dir: Path) -> uuid.UUID | None:
    """The topic id in a partition dir's ``partition.metadata`` (None: none or unreadable)."""
    try:
        text = (log_dir / PARTITION_METADATA).read_text()
    except OSError:
        return None
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "topic_id":
            raw = value.strip()
            try:
                return uuid.UUID(bytes=base64.urlsafe_b64decode(raw + "=" * (-len(raw) % 4)))
            except ValueError:
                return None
    return None


def write_topic_id(log_dir: Path, topic_id: uuid.UUID) -> None:
    """Kafka's ``partition.metadata``: ``version: 0`` and the topic id (written once)."""
    path = log_dir / PARTITION_METADATA
    if read_topic_id(log_dir) == topic_id:
        return
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(f"version: 0\ntopic_id: {_encode_topic_id(topic_id)}\n")
    tmp.replace(path)
