"""Every error the remote tier raises, drawn once.

Foreign exceptions (``OSError``, botocore and urllib3 errors) are translated into
these at the edge of the object store implementation that met them, once; code
above the :class:`~remote_tier.store.ObjectStore` seam only sees this tree::

    ObjectStoreError             base of what an ObjectStore raises
    ├── ObjectNotFound           the key does not exist
    ├── PreconditionFailed       a conditional put lost: exists / etag differs / gone
    └── ObjectStoreUnavailable   the store cannot be used; says what to check
        └── ObjectStoreUnreachable   no answer, or busy (5xx, 429): may pass by itself
    RemoteStorageError           base of what manifests and the uploader raise
    ├── FencedError              a writer with a higher leader epoch owns the manifest
    ├── ManifestConflictError    the compare-and-set kept losing; retriable
    ├── ManifestFormatError      a manifest that this version cannot read
    └── SegmentOverlapError      a segment that overlaps committed ones differently
"""

from __future__ import annotations

__all__ = [
    "FencedError",
    "ManifestConflictError",
    "ManifestFormatError",
    "ObjectNotFound",
    "ObjectStoreError",
    "ObjectStoreUnavailable",
    "ObjectStoreUnreachable",
    "PreconditionFailed",
    "RemoteStorageError",
    "SegmentOverlapError",
    "unreachable_store",
]


class ObjectStoreError(Exception):
    """Base of every error an :class:`~remote_tier.store.ObjectStore` raises."""


class ObjectNotFound(ObjectStoreError):
    """The key does not exist (``str(err)`` names it)."""


class PreconditionFailed(ObjectStoreError):
    """A conditional put lost: the object exists, or its etag differs, or it is gone."""


class ObjectStoreUnavailable(ObjectStoreError):
    """The store cannot be used right now; the message tells the user what to check."""


class ObjectStoreUnreachable(ObjectStoreUnavailable):
    """The store did not answer (no connection, a timeout) or answered with a server error
    (5xx, 429, SlowDown): what a store restarting or overloaded does, and may pass by itself.
    A missing bucket, refused credentials or an untrusted certificate are plain
    :class:`ObjectStoreUnavailable`."""


def unreachable_store(exc: BaseException) -> ObjectStoreUnreachable | None:
    """The :class:`ObjectStoreUnreachable` that ``exc`` is or was raised from (its chain of
    causes), if any: layers above the store wrap its errors in their own."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, ObjectStoreUnreachable):
            return seen
        seen = seen.__cause__
    return None


class RemoteStorageError(Exception):
    """Base of the errors of partition manifests and the remote log manager."""


class FencedError(RemoteStorageError):
    """The stored manifest was written by a higher leader epoch than this writer's.

    Not retriable by this writer: it is no longer the partition's leader.
    """


class ManifestConflictError(RemoteStorageError):
    """The manifest changed under every compare-and-set attempt; try again later."""


class ManifestFormatError(RemoteStorageError):
    """A manifest that is not valid JSON of a format version this code knows."""


class SegmentOverlapError(RemoteStorageError):
    """A segment to publish overlaps committed segments without being one of them."""
