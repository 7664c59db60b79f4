"""Remote tier: the object store seam and what lives in the bucket.

Everything here is blocking I/O and must run off the event loop (on the uploader
or tiered-fetch threads). See :mod:`remote_tier.store` for the
:class:`ObjectStore` contract, :mod:`remote_tier.errors` for the errors,
:mod:`remote_tier.layout` and ``docs/object-layout.md`` for the bucket layout.
"""

from __future__ import annotations

from remote_tier.errors import (
    FencedError,
    ManifestConflictError,
    ManifestFormatError,
    RemoteStorageError,
    SegmentOverlapError,
)
from remote_tier.filesystem import FileSystemObjectStore
from remote_tier.layout import PartitionLayout, SegmentFile
from remote_tier.manifest import FORMAT_VERSION, ManifestStore, PartitionManifest, RemoteSegment
from remote_tier.retrying import RetryingObjectStore
from remote_tier.storage_manager import RemoteStorageManager, SegmentSummary, summarize_segment
from remote_tier.store import (
    ObjectInfo,
    ObjectNotFound,
    ObjectStore,
    ObjectStoreError,
    ObjectStoreUnavailable,
    PreconditionFailed,
    clamp_range,
    get_with_etag,
)
from remote_tier.url import open_object_store

__all__ = [
    "FORMAT_VERSION",
    "FencedError",
    "FileSystemObjectStore",
    "ManifestConflictError",
    "ManifestFormatError",
    "ManifestStore",
    "ObjectInfo",
    "ObjectNotFound",
    "ObjectStore",
    "ObjectStoreError",
    "ObjectStoreUnavailable",
    "PartitionLayout",
    "PartitionManifest",
    "PreconditionFailed",
    "RemoteStorageManager",
    "RemoteSegment",
    "RemoteStorageError",
    "RetryingObjectStore",
    "S3ObjectStore",
    "SegmentFile",
    "SegmentOverlapError",
    "SegmentSummary",
    "clamp_range",
    "get_with_etag",
    "open_object_store",
    "summarize_segment",
]


def __getattr__(name: str) -> object:
    # boto3 takes 0.2 s to import: a broker on a file:// bucket never pays it.
    if name == "S3ObjectStore":
        from remote_tier.s3 import S3ObjectStore

        return S3ObjectStore
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
