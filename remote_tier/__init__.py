"""Remote tier: the object store seam and what lives in the bucket.

Everything here is blocking I/O and must run off the event loop. See
:mod:`remote_tier.store` for the :class:`ObjectStore` contract and its errors.
"""

from __future__ import annotations

from remote_tier.filesystem import FileSystemObjectStore
from remote_tier.store import (
    ObjectInfo,
    ObjectNotFound,
    ObjectStore,
    ObjectStoreError,
    ObjectStoreUnavailable,
    PreconditionFailed,
    clamp_range,
)

__all__ = [
    "FileSystemObjectStore",
    "ObjectInfo",
    "ObjectNotFound",
    "ObjectStore",
    "ObjectStoreError",
    "ObjectStoreUnavailable",
    "PreconditionFailed",
    "clamp_range",
]
