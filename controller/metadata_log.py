"""Reading and writing the metadata log's objects: :class:`MetadataLog`.

The store-level half of format 3 (``docs/adr/0025-metadata-log.md``): the head, the
snapshot it names, the log's slots read forward in windows of parallel GETs until
the first missing one, a slot written with ``put_if_absent``, snapshots written and
the log below them trimmed. :class:`controller.commit.MetadataCommitter` decides what
to write; this module only moves bytes and decodes them.

Blocking object store I/O; thread-safe (no state besides the store, which is).
"""

from __future__ import annotations

import functools
import json
import logging
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from controller.document import ClusterMetadata
from controller.document_codec import decode, encode
from controller.metadata_log_format import (
    HEAD_FORMAT,
    Batch,
    Head,
    KnownLines,
    MetadataLogError,
    batch_object,
    batch_text,
    decode_batch,
    decode_head,
    decode_snapshot,
    encode_head,
    encode_snapshot,
    log_key,
    snapshot_key,
    stored_batch_text,
)
from controller.metadata_store import MetadataConflict, ObjectStoreMetadataStore
from remote_tier.slot_chain import read_forward

__all__ = ["HeadDocument", "MetadataLog", "WINDOW"]

_log = logging.getLogger(__name__)

#: slots fetched in parallel while catching up (a window costs at most WINDOW - 1 wasted 404s)
WINDOW = 16
_POOL = ThreadPoolExecutor(max_workers=WINDOW, thread_name_prefix="strata-metadata-log")


@dataclass(frozen=True, slots=True)
class HeadDocument:
    """What ``cluster/metadata.json`` holds now: a format-3 :class:`Head`, or a whole
    format 1/2 document (``document``), with the object's etag."""

    etag: str
    head: Head | None = None
    document: ClusterMetadata | None = None


class MetadataLog:
    """The metadata objects of one cluster in one store (see the module docstring)."""

    def __init__(self, store: ObjectStoreMetadataStore) -> None:
        self._store = store
        self._prefix = store.log_prefix

    @property
    def store(self) -> ObjectStoreMetadataStore:
        return self._store

    # -- the head -----------------------------------------------------------------------

    def read_head(self) -> HeadDocument | None:
        """The head object (None if the cluster was never initialised)."""
        current = self._store.read()
        if current is None:
            return None
        data, etag = current
        try:
            parsed = json.loads(data)
            version = parsed["version"] if isinstance(parsed, dict) else None
        except (ValueError, KeyError) as err:
            raise ValueError(f"cluster metadata document is malformed: {err!r}") from err
        if version == HEAD_FORMAT:
            return HeadDocument(etag, head=decode_head(parsed))
        return HeadDocument(etag, document=decode(data))

    def write_head(self, head: Head, expected_etag: str | None) -> str | None:
        """Compare-and-set the head; its new etag, or None when another writer moved it. A
        head found moved to exactly ``head`` is this write (a retried request whose first
        attempt landed): its etag."""
        try:
            return self._store.write(encode_head(head, self._prefix), expected_etag)
        except MetadataConflict:
            current = self.read_head()
            return current.etag if current is not None and current.head == head else None

    # -- snapshots ----------------------------------------------------------------------

    def read_snapshot(self, revision: int) -> ClusterMetadata:
        data = self._store.get_object(snapshot_key(self._prefix, revision))
        if data is None:
            raise MetadataLogError(f"metadata snapshot {revision} is missing (trimmed meanwhile?)")
        image = decode(decode_snapshot(data, revision))
        if image.revision != revision:
            raise MetadataLogError(f"metadata snapshot {revision} holds revision {image.revision}")
        return image

    def create_snapshot(self, image: ClusterMetadata) -> bool:
        """Write the snapshot of ``image`` if there is none at its revision (a new cluster's
        first, whose content is not determined by its revision alone); False if there was."""
        data = encode_snapshot(encode(image))
        return self._store.create_object(snapshot_key(self._prefix, image.revision), data)

    def write_snapshot(self, image: ClusterMetadata) -> int:
        """Write the snapshot of ``image`` (a plain PUT: its bytes follow from its
        revision); returns its size."""
        data = encode_snapshot(encode(image))
        self._store.put_object(snapshot_key(self._prefix, image.revision), data)
        return len(data)

    # -- the log ------------------------------------------------------------------------

    def append(self, batch: Batch) -> int | None:
        """Write ``batch`` into its slot; the bytes of its records before gzip (what replaying
        it costs, as Kafka counts the bytes between snapshots), or None when the slot is taken
        by another batch. A slot found taken by this very batch (a retried request whose
        first attempt landed and whose answer was lost) is this write's success."""
        text = batch_text(batch)
        if not self._store.create_object(log_key(self._prefix, batch.revision), batch_object(text, batch)):
            landed = self.read_slot(batch.revision)
            if landed is None or landed.batch_id != batch.batch_id:
                return None
        return len(text)

    def read_slot(self, revision: int) -> Batch | None:
        data = self._store.get_object(log_key(self._prefix, revision))
        return None if data is None else decode_batch(data, revision)

    def read_after(self, revision: int) -> list[Batch]:
        """Every batch after ``revision`` up to the first missing slot: one GET when there
        is nothing new (the idle probe), then windows of :data:`WINDOW` parallel GETs."""
        return read_forward(self.read_slot, revision + 1, _POOL, WINDOW)

    def read_slot_text(self, revision: int, known: Sequence[KnownLines] = ()) -> bytes | None:
        """The JSON Lines of the batch in slot ``revision``, not decoded (None: no batch);
        ``known``: record lines that need not be inflated (``stored_batch_text``)."""
        data = self._store.get_object(log_key(self._prefix, revision))
        return None if data is None else stored_batch_text(data, revision, known)

    def read_texts_after(self, revision: int, known: Sequence[KnownLines] = ()) -> list[bytes]:
        """:meth:`read_after`, each batch's text not decoded."""
        return read_forward(functools.partial(self.read_slot_text, known=known), revision + 1, _POOL, WINDOW)

    def delete_slots(self, first: int, last: int) -> None:
        """Delete slots ``first .. last`` (the log below a snapshot, after the head moved)."""
        keys = [log_key(self._prefix, r) for r in range(first, last + 1)]
        list(_POOL.map(self._store.delete_object, keys))

    def delete_snapshot(self, revision: int) -> None:
        self._store.delete_object(snapshot_key(self._prefix, revision))
