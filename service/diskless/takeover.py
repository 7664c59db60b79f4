"""A new sequencer taking a diskless partition over: :func:`take_over`.

ADR 0027, section 4 ("Handing over"). The partition's manifest says where its merged data
ends and which sequencers' chains hold its commits since, each from a slot (one
:class:`~remote_tier.manifest.DisklessChainStart` per sequencer since the last merge,
oldest first). The new sequencer reads those chains from those slots, keeps the
partition's entries, checks they are dense from the merged end, and resumes the sequence
from them; then it records its own chain in the manifest, with the manifest's
compare-and-set and leader-epoch fencing, before it accepts anything (a stale sequencer's
write fails on the epoch). The caller runs it only once the previous sequencer can no
longer acknowledge a commit (its leadership lease lapsed, ADR 0024), so the chains read
are final for this partition.

Blocking object-store I/O: run it off the event loop. Thread-safe (no state).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from dataclasses import replace

from local_tier.producer_entry import ProducerStateEntry
from remote_tier.diskless.commits import ChainId, CommitBatch, CommitChain, CommitEntry
from remote_tier.errors import FencedError
from remote_tier.manifest import DisklessChainStart, ManifestStore, PartitionManifest
from remote_tier.store import ObjectStore
from service.diskless.sequence import PartitionSequence

__all__ = ["read_unmerged", "take_over"]


def read_unmerged(store: ObjectStore, prefix: str, manifest: PartitionManifest | None,
                  topic_id: uuid.UUID, partition: int) -> tuple[int, list[CommitEntry], list[int | None]]:
    """The partition's first unmerged offset, its committed entries from there in offset
    order, from the chains ``manifest`` lists (none: a new partition, from offset 0), and the
    last slot read of each listed chain (None: none found)."""
    start = manifest.next_offset if manifest is not None else 0
    found: dict[int, CommitEntry] = {}
    ends: list[int | None] = []
    for link in manifest.diskless if manifest is not None else ():
        batches = _read_range(CommitChain(store, prefix, ChainId.parse(link.chain)), link.slot, link.end_slot)
        ends.append(batches[-1].slot if batches else None)
        for batch in batches:
            for entry in batch.entries:
                if entry.topic_id != topic_id or entry.partition != partition or entry.base_offset < start:
                    continue
                if found.setdefault(entry.base_offset, entry) != entry:
                    raise ValueError(f"{topic_id}-{partition}: two different commits at offset "
                                     f"{entry.base_offset} ({found[entry.base_offset].object_key}, {entry.object_key})")
    return start, [found[offset] for offset in sorted(found)], ends


def _read_range(chain: CommitChain, first: int, last: int | None) -> list[CommitBatch]:
    """The slots of ``chain`` from ``first`` to ``last`` (None: its end). A missing slot is
    not the end when later ones exist (the collector trims dead slots as a prefix, perhaps
    during this read): one LIST after each run of slots read says whether to go on."""
    batches: list[CommitBatch] = []
    nxt = first
    while last is None or nxt <= last:
        batches += [b for b in chain.read_from(nxt) if last is None or b.slot <= last]
        if batches:
            nxt = max(nxt, batches[-1].slot + 1)
        later = [slot for slot in chain.slots() if slot >= nxt and (last is None or slot <= last)]
        if not later:
            break
        nxt = later[0]
    return batches


def take_over(store: ObjectStore, prefix: str, manifests: ManifestStore, topic_id: uuid.UUID, partition: int,
              topic: str, leader_epoch: int, own: ChainId, own_next_slot: int,
              producers: Iterable[ProducerStateEntry] = ()) -> PartitionSequence:
    """The partition's sequence for the sequencer at ``leader_epoch``, whose chain ``own``
    writes its next slot at ``own_next_slot`` (its commits for this partition come there
    or later). ``producers``: the producer state at the merged end (the last merged
    segment's snapshot; none before the first merge)."""
    loaded = manifests.load(topic_id, partition)
    manifest = loaded[0] if loaded is not None else None
    start, entries, ends = read_unmerged(store, prefix, manifest, topic_id, partition)
    sequence = PartitionSequence.resume(topic_id, partition, leader_epoch, start, producers, entries)
    read = manifest.diskless if manifest is not None else ()
    # every chain read is closed where this read ended: later slots there are not commits
    sealed = tuple(replace(link, end_slot=link.slot - 1 if end is None else end) if link.end_slot is None else link
                   for link, end in zip(read, ends, strict=True))
    mine = DisklessChainStart(str(own), own_next_slot, leader_epoch)

    def record(current: PartitionManifest | None) -> PartitionManifest:
        # another sequencer took over meanwhile (its epoch fences us below anyway), or the
        # previous one published a merge or moved the log start after our read: read again
        if _shape(current) != _shape(manifest):
            raise FencedError(f"{topic_id}-{partition}: the manifest changed during the takeover")
        base = current or PartitionManifest.empty(topic, topic_id, partition, leader_epoch)
        return replace(base, diskless=(*sealed, mine))

    manifests.update(topic_id, partition, record, leader_epoch=leader_epoch)
    return sequence


def _shape(manifest: PartitionManifest | None) -> tuple[object, ...] | None:
    """What a takeover read of the manifest depends on."""
    if manifest is None:
        return None
    return manifest.diskless, manifest.next_offset, manifest.log_start_offset
