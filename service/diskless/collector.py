"""Collecting what diskless topics leave in the bucket: :func:`collect`.

ADR 0027, section 8. A commit slot is dead once every entry in it is merged (its
partition's manifest ends past it) or its topic is gone; each chain loses its dead slots as
a prefix (a reader goes forward from a slot until the first missing one, so a chain never
gets a hole). A write-ahead object is deleted once it is older than
``diskless.orphan.grace.ms`` and no live slot names it: an object whose writer died before
its commit, or one whose every batch was merged. The grace is several commit deadlines
long, so an object whose commit is still being written is never taken: a commit names only
objects younger than the deadline (the sequencer checks).

One pass costs a LIST of the chains and one of the write-ahead objects, a GET of each slot
not read by an earlier pass (slots never change: ``seen`` keeps them) and a manifest load
per partition named. Blocking: run it off the event loop; one pass at a time.
"""

from __future__ import annotations

import functools
import logging
import uuid
from collections.abc import Callable
from dataclasses import dataclass

from remote_tier.diskless.commits import ChainId, CommitBatch, CommitChain, CommitFormatError
from remote_tier.diskless.wal import WalFormatError, WalKey
from remote_tier.manifest import ManifestStore
from remote_tier.store import ObjectStore

__all__ = ["CollectReport", "collect"]

_log = logging.getLogger("strata.diskless")


@dataclass(frozen=True, slots=True)
class CollectReport:
    slots_deleted: int
    objects_deleted: int
    objects_kept: int


def collect(store: ObjectStore, prefix: str, *, now_ms: int, grace_ms: int,
            topic_exists: Callable[[uuid.UUID], bool], seen: dict[str, CommitBatch] | None = None) -> CollectReport:
    """One pass (see the module docstring); ``seen`` carries slots between passes."""
    seen = {} if seen is None else seen
    head = f"{prefix}/" if prefix else ""
    manifests = ManifestStore(store, prefix)

    @functools.cache
    def merged_end(topic_id: uuid.UUID, partition: int) -> int:
        loaded = manifests.load(topic_id, partition)
        return loaded[0].next_offset if loaded is not None else 0

    def dead(batch: CommitBatch) -> bool:
        return all(not topic_exists(e.topic_id) or e.last_offset < merged_end(e.topic_id, e.partition)
                   for e in batch.entries)

    referenced: set[str] = set()
    unreadable = False  # a slot we cannot read may name any object: delete none this pass
    slots_deleted = 0
    for chain_id in _chains(store, head):
        chain = CommitChain(store, prefix, chain_id)
        slots = chain.slots()
        live_from: int | None = None  # the first slot kept: every later one is kept too
        for slot in slots:
            try:
                batch = _read(chain, slot, seen)
            except CommitFormatError as exc:  # kept, and everything after it: never guess
                _log.warning("diskless commit slot %s is unreadable (%s); the collector keeps it and "
                             "deletes no write-ahead object", chain.key(slot), exc)
                unreadable, batch = True, None
            if live_from is None and batch is not None and dead(batch):
                continue
            live_from = slot if live_from is None else live_from
            if batch is not None:
                referenced.update(batch.objects)
        if not slots:
            continue
        # the newest slot stays even when dead: the chain's writer goes on from it
        first_live = slots[-1] if live_from is None else live_from
        if first_live > slots[0]:
            slots_deleted += chain.delete_below(first_live)
            for slot in slots:
                if slot < first_live:
                    seen.pop(chain.key(slot), None)
    deleted = kept = 0
    for info in () if unreadable else store.list(f"{head}diskless/wal/"):
        try:
            created = WalKey.parse(info.key).created_ms
        except WalFormatError:
            continue
        if now_ms - created <= grace_ms or info.key in referenced:
            kept += 1
            continue
        store.delete(info.key)
        deleted += 1
    return CollectReport(slots_deleted, deleted, kept)


def _read(chain: CommitChain, slot: int, seen: dict[str, CommitBatch]) -> CommitBatch | None:
    """The batch at ``slot``, read once across passes (slots never change)."""
    key = chain.key(slot)
    if key not in seen:
        batch = chain.read(slot)
        if batch is None:
            return None
        seen[key] = batch
    return seen[key]


def _chains(store: ObjectStore, head: str) -> list[ChainId]:
    base = f"{head}diskless/commits/"
    found = set()
    for info in store.list(base):
        name = info.key[len(base):].partition("/")[0]
        try:
            found.add(ChainId.parse(name))
        except CommitFormatError:
            continue
    return sorted(found)
