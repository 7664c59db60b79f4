"""The one seam between Strata and the bucket: :class:`ObjectStore`.

Everything that reads or writes object storage (segment upload, manifests,
cluster metadata, Spark) goes through this protocol, so the filesystem store and
the S3 store are interchangeable and run the same contract tests.

Semantics every implementation must keep (they are S3's):

* Keys are ``/``-separated strings; there are no directories, only prefixes.
* ``put`` replaces an object atomically: a reader sees the old bytes or the new
  bytes, never a mix. The returned etag identifies the content that was written.
* ``put_if_absent`` and ``put_if_match`` are atomic compare-and-set operations
  (S3's ``If-None-Match: *`` and ``If-Match: <etag>``): of several writers racing
  on one key with the same expected state, exactly one succeeds and the others
  get :class:`PreconditionFailed`.
* ``get(key, start, end)`` returns bytes ``[start, end)``; ``end`` beyond the
  object's size is clamped to it, and a ``start`` at or beyond the size gives
  ``b""``. A missing key raises :class:`ObjectNotFound` whatever the range.
* ``list(prefix)`` yields the objects whose key starts with ``prefix``, sorted by
  key. ``delete`` is idempotent.

Every call is **blocking I/O**. Never call an ``ObjectStore`` on the event loop:
use a worker thread (the tiered fetch pool, the uploader thread, or
``asyncio.to_thread``). Implementations are thread-safe.

Errors are drawn in :mod:`remote_tier.errors` (foreign exceptions such as
``OSError`` or botocore errors are translated into them at the implementation's
edge, once) and re-exported here.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol, runtime_checkable

from remote_tier.errors import (
    ObjectNotFound,
    ObjectStoreError,
    ObjectStoreUnavailable,
    PreconditionFailed,
)

__all__ = [
    "ObjectInfo",
    "ObjectNotFound",
    "ObjectStore",
    "ObjectStoreError",
    "ObjectStoreUnavailable",
    "PreconditionFailed",
    "clamp_range",
    "get_control",
    "get_with_etag",
]

_CONSISTENT_READ_ATTEMPTS = 10


@dataclass(frozen=True, slots=True)
class ObjectInfo:
    """What ``head`` and ``list`` report about one object.

    ``etag`` is opaque: compare it for equality only (it happens to be the hex MD5
    of the content for single-part S3 uploads and for the filesystem store).
    ``last_modified_ms`` is when the current version was written (milliseconds
    since the epoch; S3 keeps whole seconds in listings). It does not take part in
    equality: two infos are equal when key, size and etag are.
    """

    key: str
    size: int
    etag: str
    last_modified_ms: int = field(default=0, compare=False)


def clamp_range(size: int, start: int | None, end: int | None) -> tuple[int, int]:
    """``[start, end)`` of ``get`` resolved against an object of ``size`` bytes.

    Defaults to the whole object; ``end`` is clamped to ``size`` and a ``start`` at or
    past the end gives an empty range. A negative bound or ``end < start`` is a caller bug
    (``ValueError``), checked the same way by every implementation.
    """
    if (start is not None and start < 0) or (end is not None and end < (start or 0)):
        raise ValueError(f"invalid byte range [{start}, {end})")
    hi = size if end is None else min(end, size)
    return min(start or 0, hi), hi


@runtime_checkable
class ObjectStore(Protocol):
    """A bucket of immutable-per-version objects with compare-and-set puts.

    Blocking; thread-safe; never to be called on the event loop.
    """

    def get(self, key: str, start: int | None = None, end: int | None = None) -> bytes:
        """Bytes ``[start, end)`` of ``key`` (whole object by default); ``ObjectNotFound``."""
        ...

    def head(self, key: str) -> ObjectInfo:
        """Size, etag and modification time of ``key``; ``ObjectNotFound`` if missing."""
        ...

    def put(self, key: str, data: bytes) -> str:
        """Create or replace ``key`` atomically; returns the new etag."""
        ...

    def put_file(self, key: str, path: Path) -> str:
        """Create or replace ``key`` with the content of the file at ``path``; returns the etag.

        Streams from disk (never the whole file in memory); large files may go up in
        parts (the etag is then not an MD5). Atomic like :meth:`put`.
        """
        ...

    def put_if_absent(self, key: str, data: bytes) -> str:
        """Create ``key``; ``PreconditionFailed`` if it already exists."""
        ...

    def put_if_match(self, key: str, data: bytes, etag: str) -> str:
        """Replace ``key`` only if its current etag is ``etag``; else ``PreconditionFailed``."""
        ...

    def list(self, prefix: str) -> Iterator[ObjectInfo]:
        """Objects whose key starts with ``prefix``, sorted by key."""
        ...

    def delete(self, key: str) -> None:
        """Remove ``key``; deleting a missing key is not an error."""
        ...


def get_control(store: ObjectStore, key: str) -> bytes:
    """The whole object ``key``, read as a control-plane request (the metadata log's slots
    and snapshots): on S3, with the control timeout and its immediate retries
    (``S3ObjectStore.get_control``); any other store's plain ``get``. An optional
    capability, as :func:`get_with_etag` is."""
    own = getattr(store, "get_control", None)
    return bytes(own(key)) if own is not None else store.get(key)


def get_with_etag(store: ObjectStore, key: str) -> tuple[bytes, str]:
    """The whole object ``key`` and the etag of exactly those bytes; ``ObjectNotFound``.

    An optional capability: a store with its own ``get_with_etag`` method answers in
    one request (S3 returns the etag with the body; the filesystem store hashes the
    bytes it read). Any other store is read with ``head``, ``get``, ``head`` until
    both heads agree, which pairs bytes and etag only if the object never repeats
    its bytes (see ``controller.metadata_store``). It is not part of the
    :class:`ObjectStore` protocol, so wrappers that lack it keep working.
    """
    own = getattr(store, "get_with_etag", None)
    if own is not None:
        data, etag = own(key)
        return bytes(data), str(etag)
    for _ in range(_CONSISTENT_READ_ATTEMPTS):
        before = store.head(key).etag
        data = store.get(key)
        if store.head(key).etag == before:
            return data, before
    raise ObjectStoreUnavailable(f"object {key!r} kept changing while being read; retry")
