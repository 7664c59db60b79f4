"""What operators see of the broker's partitions and groups, for the admin API and ``/metrics``.

Read on demand (a request or a scrape), never on the produce or fetch path.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from service.http.views import PartitionsView

__all__ = ["group_lag", "partition_state"]


def partition_state(broker: PartitionsView, topic: str, partition: int) -> dict[str, Any]:
    """What an operator wants to know of one partition, local and remote."""
    local = broker.log_for(topic, partition)
    tier = broker.tiering.state(topic, partition)
    remote_next = tier.remote_next_offset if tier is not None else None
    pending = [s for s in local.segments if remote_next is None or s.base_offset >= remote_next]
    return {
        "topic": topic,
        "partition": partition,
        "log_start_offset": broker.tiering.log_start_offset(topic, partition, local),
        "local_log_start_offset": local.log_start_offset,
        "remote_log_start_offset": tier.remote_log_start_offset if tier is not None else None,
        "high_watermark": local.high_watermark,
        "log_end_offset": local.log_end_offset,
        "local_bytes": local.size_in_bytes,
        "local_segments": len(local.segments),
        "remote_bytes": tier.remote_bytes if tier is not None else 0,
        "remote_segments": len(tier.manifest.segments) if tier is not None and tier.manifest else 0,
        "remote_storage_enable": local.config.remote_storage_enable,
        "upload_lag_offsets": (
            local.high_watermark - (remote_next if remote_next is not None else local.log_start_offset)
            if local.config.remote_storage_enable
            else 0
        ),
        "upload_lag_bytes": sum(s.size for s in pending) if local.config.remote_storage_enable else 0,
        "upload_failures": tier.upload_failures if tier is not None else 0,
        "last_upload_error": tier.last_error if tier is not None else None,
    }


def group_lag(broker: PartitionsView, offsets: Mapping[tuple[str, int], int]) -> list[dict[str, Any]]:
    """Per partition of one group: committed offset, high watermark (None if not hosted) and lag."""
    rows = []
    for (topic, partition), offset in sorted(offsets.items()):
        found = broker.logs.get_log(topic, partition)
        hw = found.high_watermark if found is not None else None
        rows.append({"topic": topic, "partition": partition, "committed_offset": offset,
                     "high_watermark": hw, "lag": max(0, hw - offset) if hw is not None else 0})
    return rows
