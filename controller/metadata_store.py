"""Where the cluster metadata lives: the head document, read and written with
compare-and-set, and the objects of the metadata log beside it (format 3,
``docs/adr/0025-metadata-log.md``).

:class:`MetadataStore` is the seam: one opaque document plus an opaque version.
``write(data, expected_version)`` succeeds only if the stored version is still
``expected_version`` (None: nothing is stored yet), else raises
:class:`MetadataConflict`. That is all the controller needs for the
read-change-CAS cycle (see ``docs/adr/0001-metadata-in-the-object-store.md``).

:class:`ObjectStoreMetadataStore` keeps the document as one object and maps the
cycle onto ``put_if_absent`` / ``put_if_match``; the version is the object's etag.
Blocking I/O; thread-safe (all state is in the object store).
"""

from __future__ import annotations

from typing import Protocol

from common.errors import KafkaStorageError
from remote_tier.store import (
    ObjectNotFound,
    ObjectStore,
    ObjectStoreError,
    PreconditionFailed,
    get_control,
    get_with_etag,
)

__all__ = ["MetadataConflict", "MetadataStore", "ObjectStoreMetadataStore"]


class MetadataConflict(Exception):
    """Someone else wrote the metadata since the version this write expected."""


class MetadataStore(Protocol):
    """A single versioned document with compare-and-set writes. Blocking."""

    def read(self) -> tuple[bytes, str] | None:
        """The document and its version, or None if it was never written."""
        ...

    def write(self, data: bytes, expected_version: str | None) -> str:
        """Store ``data`` if the current version is ``expected_version`` (None: must not
        exist yet); returns the new version; raises :class:`MetadataConflict`."""
        ...

    def version(self) -> str | None:
        """The current version without the document (None if never written)."""
        ...

    @property
    def log_prefix(self) -> str:
        """Where the metadata log and its snapshots live (format 3), beside the document."""
        ...

    def get_object(self, key: str) -> bytes | None:
        """Object ``key`` of the log or a snapshot, or None if there is none."""
        ...

    def create_object(self, key: str, data: bytes) -> bool:
        """Write ``key`` if it does not exist; False if it does (a log slot taken)."""
        ...

    def put_object(self, key: str, data: bytes) -> None: ...

    def delete_object(self, key: str) -> None: ...


class ObjectStoreMetadataStore:
    """The metadata document as one object at ``key`` of an :class:`ObjectStore`.

    A read returns the etag of exactly the returned bytes
    (:func:`remote_tier.store.get_with_etag`: one GET on S3 and on the filesystem
    store; ``head``, ``get``, ``head`` on a store without that capability, which
    relies on a document never repeating its bytes: the controller guarantees it
    with a revision counter inside the document).

    Object store failures other than a lost precondition become
    ``KafkaStorageError`` (retriable from the client's point of view).
    """

    def __init__(self, store: ObjectStore, key: str = "cluster/metadata.json") -> None:
        self._store = store
        self._key = key

    @property
    def key(self) -> str:
        return self._key

    def read(self) -> tuple[bytes, str] | None:
        try:
            return get_with_etag(self._store, self._key)
        except ObjectNotFound:
            return None
        except ObjectStoreError as err:
            raise _storage_error("read", self._key, err) from err

    def version(self) -> str | None:
        """The current version (one HEAD), or None if the document was never written;
        cheaper than :meth:`read` for polling whether it changed."""
        try:
            return self._store.head(self._key).etag
        except ObjectNotFound:
            return None
        except ObjectStoreError as err:
            raise _storage_error("read", self._key, err) from err

    @property
    def log_prefix(self) -> str:
        return self._key[: -len(".json")] if self._key.endswith(".json") else self._key

    def get_object(self, key: str) -> bytes | None:
        try:
            return get_control(self._store, key)
        except ObjectNotFound:
            return None
        except ObjectStoreError as err:
            raise _storage_error("read", key, err) from err

    def create_object(self, key: str, data: bytes) -> bool:
        try:
            self._store.put_if_absent(key, data)
        except PreconditionFailed:
            return False
        except ObjectStoreError as err:
            raise _storage_error("write", key, err) from err
        return True

    def put_object(self, key: str, data: bytes) -> None:
        try:
            self._store.put(key, data)
        except ObjectStoreError as err:
            raise _storage_error("write", key, err) from err

    def delete_object(self, key: str) -> None:
        try:
            self._store.delete(key)
        except ObjectNotFound:
            pass
        except ObjectStoreError as err:
            raise _storage_error("delete", key, err) from err

    def write(self, data: bytes, expected_version: str | None) -> str:
        try:
            if expected_version is None:
                return self._store.put_if_absent(self._key, data)
            return self._store.put_if_match(self._key, data, expected_version)
        except PreconditionFailed as err:
            raise MetadataConflict(str(err)) from err
        except ObjectStoreError as err:
            raise _storage_error("write", self._key, err) from err


def _storage_error(op: str, key: str, err: ObjectStoreError) -> KafkaStorageError:
    return KafkaStorageError(f"cannot {op} cluster metadata {key!r}: {err}")
