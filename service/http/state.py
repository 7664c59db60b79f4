"""What operators see of the broker's partitions, topics and groups (admin API, console, ``/metrics``).

Read on demand (a request, a scrape or the console's sampler), never on the
produce or fetch path; everything here runs on the event loop and reads only
in-memory state (segment lists, cached manifests, committed offsets).

The picture of one partition's log, in offsets ``[start, end)``::

    remote   [remote_log_start_offset, remote_next_offset)      segments in the bucket
    local    [local_log_start_offset, log_end_offset)           segments on disk
    both     the intersection: uploaded segments still kept on disk

Bytes follow the same cut: ``local_and_remote_bytes`` are the sealed local
segments the bucket also holds, so the log's distinct size is
``local_bytes + remote_bytes - local_and_remote_bytes``. Upload lag counts only
*sealed* segments that are not in the bucket yet: the active segment is never
uploaded until it rolls (``segment.bytes`` / ``segment.ms``), so counting it would
show a quiet topic on 1 GiB segments as lagging for days. The active segment's
bytes are reported on their own (``active_segment_bytes``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from service.http.views import PartitionsView

__all__ = ["INTERNAL_TOPICS", "cleaner_state", "group_lag", "is_internal", "member_count", "partition_state", "topic_totals"]

#: Kafka's internal topics (``Topic.isInternal``); any other ``__``-prefixed name is
#: folded away with them by the console as well.
INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state", "__share_group_state"})


def is_internal(topic: str) -> bool:
    return topic in INTERNAL_TOPICS or topic.startswith("__")


def partition_state(broker: PartitionsView, topic: str, partition: int) -> dict[str, Any]:
    """What an operator wants to know of one partition, local and remote."""
    local = broker.log_for(topic, partition)
    tier = broker.tiering.state(topic, partition)
    tiered = local.config.remote_storage_enable
    remote_start = tier.remote_log_start_offset if tier is not None else None
    remote_next = tier.remote_next_offset if tier is not None else None
    segments = local.segments
    both_bytes = lag_bytes = lag_offsets = 0
    for segment, upper in zip(segments, [s.base_offset for s in segments[1:]]):  # sealed only
        in_bucket = remote_next is not None and upper <= remote_next
        if in_bucket and remote_start is not None and segment.base_offset >= remote_start:
            both_bytes += segment.size
        elif tiered and not in_bucket:
            lag_bytes += segment.size
            lag_offsets += upper - max(segment.base_offset, remote_next or 0)
    active = segments[-1] if segments else None
    return {
        "topic": topic,
        "partition": partition,
        "log_start_offset": broker.tiering.log_start_offset(topic, partition, local, exact=False),
        "local_log_start_offset": local.log_start_offset,
        "remote_log_start_offset": remote_start,
        "remote_next_offset": remote_next,
        "high_watermark": local.high_watermark,
        "log_end_offset": local.log_end_offset,
        "local_bytes": local.size_in_bytes,
        "local_segments": len(segments),
        "remote_bytes": tier.remote_bytes if tier is not None else 0,
        "remote_segments": len(tier.manifest.segments) if tier is not None and tier.manifest else 0,
        "local_and_remote_bytes": both_bytes,
        "active_segment_base_offset": active.base_offset if active is not None else local.log_end_offset,
        "active_segment_bytes": active.size if active is not None else 0,
        "remote_storage_enable": tiered,
        "upload_lag_offsets": lag_offsets,
        "upload_lag_bytes": lag_bytes,
        "upload_failures": tier.upload_failures if tier is not None else 0,
        "last_upload_error": tier.last_error if tier is not None else None,
        "cleaner": cleaner_state(broker, topic, partition) if local.config.compact else None,
    }


def cleaner_state(broker: PartitionsView, topic: str, partition: int) -> dict[str, Any] | None:
    """A compacted partition's cleaning (ADR 0019): the local log cleaner's, or for a tiered
    topic the remote cleaner's (it compacts the bucket); None until a cleaner looked at it."""
    remote = getattr(broker, "remote_cleaner", None)
    if remote is not None and remote.enabled and (topic, partition) in remote.progress:
        tier, found = "remote", remote.progress[(topic, partition)]
    else:
        cleaner = broker.logs.cleaner
        tier, found = "local", cleaner.progress(topic, partition) if cleaner is not None else None
    if found is None:
        return None
    return {"tier": tier, "dirty_ratio": round(found.dirty_ratio, 4), "cleaned_up_to": found.checkpoint,
            "state": found.state, "passes": found.passes, "error": found.error}


_SUMMED = ("local_bytes", "remote_bytes", "local_and_remote_bytes", "active_segment_bytes",
           "upload_lag_offsets", "upload_lag_bytes", "upload_failures")


def topic_totals(states: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """One topic's partitions summed: bytes by where they are, records, upload lag."""
    out: dict[str, Any] = dict.fromkeys(_SUMMED, 0)
    out.update(records=0, remote_storage_enable=False, last_upload_error=None, hosted_partitions=0)
    for s in states:
        out["hosted_partitions"] += 1
        for key in _SUMMED:
            out[key] += s[key]
        out["records"] += max(0, s["high_watermark"] - s["log_start_offset"])
        out["remote_storage_enable"] |= bool(s["remote_storage_enable"])
        if out["last_upload_error"] is None and s["last_upload_error"]:
            out["last_upload_error"] = f"partition {s['partition']}: {s['last_upload_error']}"
    return out


def group_lag(broker: PartitionsView, offsets: Mapping[tuple[str, int], int]) -> list[dict[str, Any]]:
    """Per partition of one group: committed offset, high watermark (None if not hosted) and lag."""
    rows = []
    for (topic, partition), offset in sorted(offsets.items()):
        found = broker.logs.get_log(topic, partition)
        hw = found.high_watermark if found is not None else None
        rows.append({"topic": topic, "partition": partition, "committed_offset": offset,
                     "high_watermark": hw, "lag": max(0, hw - offset) if hw is not None else 0})
    return rows


def member_count(groups: Any, group_id: str, kind: str) -> int:
    """Live members of a group of either protocol (``kind``: classic or consumer)."""
    if kind == "consumer":
        return len(groups.consumer_group_describe(group_id).members)
    return len(groups.describe_group(group_id)[1].members)
