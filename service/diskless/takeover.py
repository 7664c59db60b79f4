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
from remote_tier.diskless.commits import ChainId, CommitChain, CommitEntry
from remote_tier.manifest import DisklessChainStart, ManifestStore, PartitionManifest
from remote_tier.store import ObjectStore
from service.diskless.sequence import PartitionSequence

__all__ = ["read_unmerged", "take_over"]


def read_unmerged(store: ObjectStore, prefix: str, manifest: PartitionManifest | None,
                  topic_id: uuid.UUID, partition: int) -> tuple[int, list[CommitEntry]]:
    """The partition's first unmerged offset and its committed entries from there, in offset
    order, from the chains ``manifest`` lists (none: a new partition, from offset 0)."""
    start = manifest.next_offset if manifest is not None else 0
    found: dict[int, CommitEntry] = {}
    for link in manifest.diskless if manifest is not None else ():
        chain = CommitChain(store, prefix, ChainId.parse(link.chain))
        batches = chain.read_from(link.slot)
        if not batches:  # the collector trimmed the chain past the listed slot (merged entries)
            later = [slot for slot in chain.slots() if slot > link.slot]
            batches = chain.read_from(later[0]) if later else []
        for batch in batches:
            for entry in batch.entries:
                if entry.topic_id == topic_id and entry.partition == partition and entry.base_offset >= start:
                    found.setdefault(entry.base_offset, entry)
    return start, [found[offset] for offset in sorted(found)]


def take_over(store: ObjectStore, prefix: str, manifests: ManifestStore, topic_id: uuid.UUID, partition: int,
              topic: str, leader_epoch: int, own: ChainId, own_next_slot: int,
              producers: Iterable[ProducerStateEntry] = ()) -> PartitionSequence:
    """The partition's sequence for the sequencer at ``leader_epoch``, whose chain ``own``
    writes its next slot at ``own_next_slot`` (its commits for this partition come there
    or later). ``producers``: the producer state at the merged end (the last merged
    segment's snapshot; none before the first merge)."""
    loaded = manifests.load(topic_id, partition)
    manifest = loaded[0] if loaded is not None else None
    start, entries = read_unmerged(store, prefix, manifest, topic_id, partition)
    sequence = PartitionSequence.resume(topic_id, partition, leader_epoch, start, producers, entries)
    mine = DisklessChainStart(str(own), own_next_slot, leader_epoch)

    def record(current: PartitionManifest | None) -> PartitionManifest:
        base = current or PartitionManifest(topic=topic, topic_id=str(topic_id), partition=partition,
                                            leader_epoch=leader_epoch, log_start_offset=0)
        if any(c.chain == mine.chain for c in base.diskless):  # led here before: read from the first slot
            return replace(base)
        return replace(base, diskless=(*base.diskless, mine))

    manifests.update(topic_id, partition, record, leader_epoch=leader_epoch)
    return sequence
