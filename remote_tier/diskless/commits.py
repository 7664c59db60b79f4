"""The sequencers' commit chains of diskless topics: keys, bytes and I/O (ADR 0027, section 4).

Each broker that sequences diskless partitions writes one chain per broker epoch::

    {prefix}/diskless/commits/{broker_id}-{broker_epoch}/{slot:020d}.json

A slot holds one :class:`CommitBatch`: the entries the sequencer accepted since its
previous slot, each naming a write-ahead object and a byte range in it. The object is
JSON, gzipped from 64 KiB (told apart by the gzip magic, which never begins JSON)::

    {"version": 1, "chain": "3-17", "slot": 5, "batch_id": "…", "written_ms": …,
     "objects": ["<wal key>", …],
     "entries": [[topic_id, partition, leader_epoch, base_offset, record_count,
                  object index, position, size, max_timestamp,
                  producer_id, producer_epoch, base_sequence], …]}

``objects`` lists every write-ahead object the slot references once, so the collector
(section 8) reads references without decoding entries. A slot is created with
``put_if_absent``, so a chain has one writer; a writer whose create answered with an error
reads the slot back and finds its own ``batch_id`` there or not (:meth:`CommitChain.append`).

:class:`CommitChain` does blocking I/O and keeps no state besides its store: thread-safe.
Sizes are bounded before anything is decoded.
"""

from __future__ import annotations

import gzip
import re
import uuid
import zlib
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import orjson

from remote_tier.errors import ObjectNotFound, PreconditionFailed
from remote_tier.slot_chain import read_forward
from remote_tier.store import ObjectStore

__all__ = [
    "MAX_COMMIT_BYTES",
    "ChainId",
    "CommitBatch",
    "CommitChain",
    "CommitEntry",
    "CommitFormatError",
    "decode_commit",
    "encode_commit",
    "entries_of_rows",
    "entry_rows",
    "id_row",
]

_VERSION = 1
#: a commit object (and its JSON once inflated) is refused above this: about 300,000 entries
MAX_COMMIT_BYTES = 64 * 1024 * 1024
_GZIP_FROM = 64 * 1024
_GZIP_MAGIC = b"\x1f\x8b"
_CHAIN = re.compile(r"([0-9]+)-([0-9]+)")
_SLOT_NAME = re.compile(r"([0-9]{20})\.json")
_ENTRY_FIELDS = 12
#: slots read in parallel while a new sequencer reads its predecessor's chain
WINDOW = 16
_POOL = ThreadPoolExecutor(max_workers=WINDOW, thread_name_prefix="strata-diskless-chain")


class CommitFormatError(ValueError):
    """A commit object (or key) that is not one this module wrote."""


@dataclass(frozen=True, slots=True, order=True)
class ChainId:
    """A sequencer's chain: its broker id and the broker epoch it registered with."""

    broker_id: int
    broker_epoch: int

    def __str__(self) -> str:
        return f"{self.broker_id}-{self.broker_epoch}"

    @classmethod
    def parse(cls, text: str) -> ChainId:
        match = _CHAIN.fullmatch(text)
        if match is None:
            raise CommitFormatError(f"not a commit chain: {text!r}")
        return cls(int(match.group(1)), int(match.group(2)))


@dataclass(frozen=True, slots=True)
class CommitEntry:
    """One committed batch of a partition: its offsets and where its bytes are."""

    topic_id: uuid.UUID
    partition: int
    leader_epoch: int
    base_offset: int
    record_count: int
    object_key: str
    position: int
    size: int
    max_timestamp: int
    producer_id: int = -1
    producer_epoch: int = -1
    base_sequence: int = -1

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.record_count - 1


@dataclass(frozen=True, slots=True)
class CommitBatch:
    """What one slot of a chain holds."""

    chain: ChainId
    slot: int
    batch_id: str
    written_ms: int
    entries: tuple[CommitEntry, ...]

    @property
    def objects(self) -> list[str]:
        """The write-ahead objects the entries reference, each once, in first-use order."""
        return list(dict.fromkeys(e.object_key for e in self.entries))


def entry_rows(entries: Sequence[CommitEntry]) -> tuple[list[str], list[list[object]]]:
    """``entries`` as JSON rows naming their objects by index into the list returned (the
    layout of a slot's ``entries``, and of the inter-broker index answer)."""
    objects = list(dict.fromkeys(e.object_key for e in entries))
    index = {key: i for i, key in enumerate(objects)}
    return objects, [[str(e.topic_id), e.partition, e.leader_epoch, e.base_offset, e.record_count,
                      index[e.object_key], e.position, e.size, e.max_timestamp,
                      e.producer_id, e.producer_epoch, e.base_sequence] for e in entries]


def id_row(raw: object, length: int) -> tuple[uuid.UUID, list[int]] | None:
    """``raw`` (decoded JSON) as a row of ``length`` fields, a topic id then integers; None
    when it is not one (the shape of entries here and of the inter-broker APIs' rows)."""
    if not isinstance(raw, list) or len(raw) != length or not isinstance(raw[0], str) or any(
            not isinstance(v, int) or isinstance(v, bool) for v in raw[1:]):
        return None
    try:
        return uuid.UUID(raw[0]), raw[1:]
    except ValueError:
        return None


def entries_of_rows(objects: Sequence[object], rows: Sequence[object], where: str) -> list[CommitEntry]:
    """The entries of :func:`entry_rows`' output, every field checked (CommitFormatError,
    naming ``where``)."""
    if not isinstance(objects, list) or not isinstance(rows, list) or not all(isinstance(k, str) for k in objects):
        raise CommitFormatError(f"malformed entries in {where}")
    entries = []
    for raw in rows:
        row = id_row(raw, _ENTRY_FIELDS)
        if row is None:
            raise CommitFormatError(f"a malformed entry in {where}: {raw!r}")
        tid, (partition, epoch, base, count, obj, position, size, max_ts, pid, pepoch, seq) = row
        if not 0 <= obj < len(objects) or partition < 0 or base < 0 or count < 1 or position < 0 or size < 1:
            raise CommitFormatError(f"a malformed entry in {where}: {raw!r}")
        entries.append(CommitEntry(tid, partition, epoch, base, count, str(objects[obj]), position, size,
                                   max_ts, pid, pepoch, seq))
    return entries


def encode_commit(batch: CommitBatch) -> bytes:
    objects, rows = entry_rows(batch.entries)
    text = orjson.dumps({
        "version": _VERSION, "chain": str(batch.chain), "slot": batch.slot, "batch_id": batch.batch_id,
        "written_ms": batch.written_ms, "objects": objects, "entries": rows,
    })
    return gzip.compress(text, 6, mtime=0) if len(text) >= _GZIP_FROM else text


def _inflate(data: bytes) -> bytes:
    if len(data) > MAX_COMMIT_BYTES:
        raise CommitFormatError(f"a commit object of {len(data):,} bytes is above {MAX_COMMIT_BYTES:,}")
    if not data.startswith(_GZIP_MAGIC):
        return data
    inflater = zlib.decompressobj(wbits=31)
    try:
        text = inflater.decompress(data, MAX_COMMIT_BYTES + 1)
    except zlib.error as err:
        raise CommitFormatError(f"a commit object does not inflate: {err}") from err
    if len(text) > MAX_COMMIT_BYTES or inflater.unconsumed_tail:
        raise CommitFormatError(f"a commit object inflates past {MAX_COMMIT_BYTES:,} bytes")
    return text


def decode_commit(data: bytes, chain: ChainId, slot: int) -> CommitBatch:
    """The batch in ``data``, read from ``slot`` of ``chain`` (both checked against it)."""
    try:
        doc = orjson.loads(_inflate(data))
        if doc["version"] != _VERSION:
            raise CommitFormatError(f"commit object version {doc['version']} is not one this broker reads")
        if ChainId.parse(doc["chain"]) != chain or doc["slot"] != slot:
            raise CommitFormatError(f"slot {slot} of chain {chain} holds {doc['chain']} slot {doc['slot']}")
        entries = entries_of_rows(doc["objects"], doc["entries"], f"slot {slot} of chain {chain}")
        return CommitBatch(chain, slot, str(doc["batch_id"]), int(doc["written_ms"]), tuple(entries))
    except (KeyError, TypeError, ValueError, AttributeError) as err:
        if isinstance(err, CommitFormatError):
            raise
        raise CommitFormatError(f"slot {slot} of chain {chain} is malformed: {err!r}") from err


class CommitChain:
    """One sequencer's chain in ``store`` (see the module docstring)."""

    def __init__(self, store: ObjectStore, prefix: str, chain: ChainId) -> None:
        self._store = store
        self.chain = chain
        head = f"{prefix}/" if prefix else ""
        self._dir = f"{head}diskless/commits/{chain}/"

    def key(self, slot: int) -> str:
        return f"{self._dir}{slot:020d}.json"

    def append(self, batch: CommitBatch) -> bool:
        """Create ``batch``'s slot; False when another batch holds it. A create whose answer
        was lost (an error) is settled by reading the slot back: ours, or not there (the
        error is raised again), or another batch's (False); so is a slot found taken, which
        may be this very batch (a retried request whose first attempt landed)."""
        if batch.chain != self.chain:
            raise ValueError(f"a batch of chain {batch.chain} appended to chain {self.chain}")
        try:
            self._store.put_if_absent(self.key(batch.slot), encode_commit(batch))
            return True
        except PreconditionFailed:
            found = self.read(batch.slot)
            return found is not None and found.batch_id == batch.batch_id
        except Exception:
            found = self.read(batch.slot)
            if found is None:
                raise
            return found.batch_id == batch.batch_id

    def read(self, slot: int) -> CommitBatch | None:
        """The batch at ``slot`` (None when there is none yet)."""
        try:
            data = self._store.get(self.key(slot))
        except ObjectNotFound:
            return None
        return decode_commit(data, self.chain, slot)

    def read_from(self, slot: int) -> list[CommitBatch]:
        """The batches from ``slot`` up to the first missing one."""
        return read_forward(self.read, slot, _POOL, WINDOW)

    def slots(self) -> list[int]:
        """The slots the chain holds now (one LIST: the collector, a takeover's bounds)."""
        found = []
        for info in self._store.list(self._dir):
            match = _SLOT_NAME.fullmatch(info.key[len(self._dir):])
            if match is not None:
                found.append(int(match.group(1)))
        return sorted(found)

    def delete_below(self, slot: int) -> int:
        """Delete the slots below ``slot`` (every partition they name merged past them);
        how many were deleted."""
        doomed = [s for s in self.slots() if s < slot]
        for s in doomed:
            self._store.delete(self.key(s))
        return len(doomed)
