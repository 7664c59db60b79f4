"""The timed work of diskless topics on a broker: :func:`run_upkeep` (ADR 0027, sections 7 and 8).

* On every broker, for each partition it sequences: once its oldest unmerged entry is
  ``diskless.merge.interval.ms`` old, or its unmerged entries reach ``segment.bytes``, the
  entries past the commit deadline are merged into a tiered segment
  (:func:`~service.diskless.merge.merge`), then the topic's ``retention.ms`` and
  ``retention.bytes`` apply to its tiered segments as to a classic tiered topic's (the
  unmerged bytes count towards ``retention.bytes``).
* On the active controller, every ``diskless.collect.interval.ms``: the collector
  (:func:`~service.diskless.collector.collect`) deletes dead commit slots and orphaned
  write-ahead objects.

A failed pass is logged and tried again at the next one. Runs on the event loop; the work
goes to the diskless I/O threads.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from typing import TYPE_CHECKING

from local_tier.config import LogConfig
from remote_tier.diskless.commits import CommitBatch
from remote_tier.diskless.wal import WalKey
from remote_tier.errors import FencedError
from remote_tier.tier_state import NEVER, retention_due_at
from service.diskless.collector import collect
from service.diskless.merge import merge, mergeable
from service.diskless.sequence import PartitionSequence

if TYPE_CHECKING:
    from service.diskless.host import DisklessHost
    from service.diskless.node import DisklessNode

__all__ = ["collect_once", "merge_due", "run_upkeep"]

_log = logging.getLogger("strata.diskless")

#: a partition whose merge or retention failed is left alone this long
_BACKOFF_MS = 30_000


async def run_upkeep(node: DisklessNode, broker: DisklessHost) -> None:
    """Merge, apply retention and collect until the broker closes (module docstring)."""
    tick_s = max(0.1, min(node.merge_interval_ms, node.collect_interval_ms, 5_000) / 4000)
    last_collect = time.monotonic()
    seen: dict[str, CommitBatch] = {}
    while not broker.closing:
        await asyncio.sleep(tick_s)
        try:
            await merge_due(node, broker)
        except Exception as exc:  # noqa: BLE001 - the next pass tries again
            _log.warning("diskless merge pass failed: %r", exc)
        if broker.is_active_controller() and time.monotonic() - last_collect >= node.collect_interval_ms / 1000:
            last_collect = time.monotonic()
            try:
                await collect_once(node, broker, seen)
            except Exception as exc:  # noqa: BLE001
                _log.warning("diskless collection failed: %r", exc)


async def merge_due(node: DisklessNode, broker: DisklessHost, *, force: bool = False) -> int:
    """Merge every partition sequenced here that is due (``force``: every one with entries
    past the commit deadline), then apply retention where it is due; the number of segments
    published."""
    sequencer = node.sequencer
    if sequencer is None:
        return 0
    published = 0
    md = broker.controller.metadata
    for key in sequencer.led():
        sequence = sequencer.get(*key)
        info = md.topic_by_id(key[0])
        now_ms = time.time() * 1000
        if sequence is None or info is None or node.upkeep_backoff.get(key, 0) > now_ms:
            continue
        if not sequence.durable and node.retention_at.get(key, 0) > now_ms:
            continue  # idle and nothing to expire: no work per partition on a timer
        try:
            config = broker.log_config(info.name)
            if sequence.durable and await _merge(node, broker, key, sequence, info.name, config, force):
                published += 1
                node.retention_at[key] = 0  # the merge may have made it due
            if node.retention_at.get(key, 0) <= time.time() * 1000 and sequencer.get(*key) is sequence:
                if config.delete:
                    await _retain(node, broker, key, sequence, config)
                else:
                    node.retention_at[key] = NEVER
        except Exception as exc:  # noqa: BLE001 - the bucket, a damaged object: the others go on
            _log.warning("diskless %s-%d: merge or retention failed (tried again in %d s): %r", info.name, key[1],
                         _BACKOFF_MS // 1000, exc)
            node.upkeep_backoff[key] = time.time() * 1000 + _BACKOFF_MS
    return published


async def _merge(node: DisklessNode, broker: DisklessHost, key: tuple[uuid.UUID, int], sequence: PartitionSequence,
                 name: str, config: LogConfig, force: bool) -> bool:
    now_ms = int(time.time() * 1000)
    oldest_ms = WalKey.parse(sequence.durable[0].object_key).created_ms
    unmerged = sum(e.size for e in sequence.durable)
    if not force and now_ms - oldest_ms < node.merge_interval_ms and unmerged < config.segment_bytes:
        return False
    entries = mergeable(sequence, now_ms=now_ms, commit_deadline_ms=node.commit_deadline_ms,
                        max_bytes=config.segment_bytes)
    if not entries:
        return False
    # the cache is the loop's: what it holds now is handed over, the rest read on the merge's
    # thread one object at a time (the objects of a merge may be gigabytes)
    cached = {e.object_key: data for e in entries if (data := node.cache.get(e.object_key)) is not None}
    read_object = lambda object_key: cached.get(object_key) or node.store.get(object_key)  # noqa: E731
    sequencer = node.sequencer
    if sequencer is None or sequencer.get(*key) is not sequence or not broker.replicas.may_lead():
        return False  # resigned, or not sure it still may: its successor merges
    try:
        merged = await node.run_io(merge, broker.tiering.rsm, name, key[0], key[1], sequence.leader_epoch, entries,
                                   read_object, config, list(sequence.base_producers), broker.data_dir)
    except FencedError as exc:
        _log.info("diskless %s-%d: a newer sequencer publishes now: %s", name, key[1], exc)
        return False
    if sequencer.get(*key) is not sequence:
        return False  # resigned meanwhile: the successor reads the manifest
    sequence.merged_up_to(merged.next_offset, merged.producers)
    node.forget_manifest(key)
    node.merged_segments += 1
    _log.info("diskless %s-%d: merged offsets %d-%d into a tiered segment", name, key[1],
              entries[0].base_offset, merged.next_offset - 1)
    return True


async def _retain(node: DisklessNode, broker: DisklessHost, key: tuple[uuid.UUID, int],
                  sequence: PartitionSequence, config: LogConfig) -> None:
    """``retention.ms`` and ``retention.bytes`` over the partition's tiered segments (the
    unmerged bytes count in its size); when next due by time alone is remembered, so an
    idle partition costs no request until then."""
    unmerged = sum(e.size for e in sequence.durable)
    rsm = broker.tiering.rsm

    def retain() -> int:
        rsm.apply_retention(key[0], key[1], retention_ms=config.retention_ms, retention_bytes=config.retention_bytes,
                            now_ms=int(time.time() * 1000), leader_epoch=sequence.leader_epoch,
                            local_only_bytes=unmerged)
        loaded = node.manifests.load(*key)
        return retention_due_at(loaded[0] if loaded is not None else None, config)

    try:
        node.retention_at[key] = await node.run_io(retain)
    except FencedError:
        node.retention_at[key] = NEVER  # a newer sequencer: it applies retention now
    node.forget_manifest(key)


async def collect_once(node: DisklessNode, broker: DisklessHost, seen: dict[str, CommitBatch] | None = None) -> None:
    md = broker.controller.metadata
    report = await node.run_io(lambda: collect(
        node.store, "", now_ms=int(time.time() * 1000), grace_ms=node.orphan_grace_ms,
        topic_exists=lambda topic_id: md.topic_by_id(topic_id) is not None, seen=seen))
    if report.slots_deleted or report.objects_deleted:
        _log.info("diskless collection: %d commit slots and %d write-ahead objects deleted, %d objects kept",
                  report.slots_deleted, report.objects_deleted, report.objects_kept)
