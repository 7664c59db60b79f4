"""Open an :class:`~remote_tier.store.ObjectStore` from a URL (``strata up --object-store``).

* ``file:///abs/path`` (or a plain path): :class:`FileSystemObjectStore` on that directory.
* ``s3://bucket`` or ``s3://bucket/prefix``: :class:`S3ObjectStore`; ``s3_endpoint``
  points it at MinIO or another S3-compatible service. Credentials come from the
  AWS chain unless given.

Blocking (creating the S3 store with ``check=True`` talks to the endpoint): call it
at start-up or from a worker thread, never on the event loop.
"""

from __future__ import annotations

from pathlib import Path
from urllib.parse import unquote, urlsplit

from remote_tier.filesystem import FileSystemObjectStore
from remote_tier.start_wait import StartWait
from remote_tier.store import ObjectStore

__all__ = ["open_object_store"]


def open_object_store(
    url: str,
    *,
    s3_endpoint: str | None = None,
    s3_region: str | None = None,
    s3_access_key: str | None = None,
    s3_secret_key: str | None = None,
    s3_path_style: bool = True,
    s3_ca_bundle: str | None = None,
    multipart_threshold: int | None = None,
    s3_control_timeout_s: float | None = None,
    check: bool = True,
    wait: StartWait | None = None,
) -> ObjectStore:
    """The store named by ``url``; ``ValueError`` for a URL of no known form.

    With ``check`` (the default) an S3 store is verified at once (endpoint reachable,
    bucket exists, credentials accepted) and :class:`ObjectStoreUnavailable` says
    which of them is wrong. With ``wait``, a store that does not answer yet is tried
    again until it does or the wait gives up (a broker's start).
    """
    parts = urlsplit(url)
    if parts.scheme in ("", "file"):
        if parts.scheme == "file" and parts.netloc not in ("", "localhost"):
            raise ValueError(
                f"object store URL {url!r}: a file URL needs an absolute path, "
                "as in file:///var/lib/strata/bucket"
            )
        path = unquote(parts.path) if parts.scheme else url
        if not path:
            raise ValueError(f"object store URL {url!r} names no directory")
        return FileSystemObjectStore(Path(path))
    if parts.scheme == "s3":
        if not parts.netloc:
            raise ValueError(f"object store URL {url!r} names no bucket: use s3://BUCKET/PREFIX")
        # Here, not at the top: boto3 takes 0.2 s to import, which a file:// bucket never needs.
        from remote_tier.s3 import DEFAULT_MULTIPART_THRESHOLD, S3ObjectStore

        store = S3ObjectStore(
            parts.netloc,
            unquote(parts.path).strip("/"),
            endpoint_url=s3_endpoint,
            region=s3_region,
            access_key=s3_access_key,
            secret_key=s3_secret_key,
            path_style=s3_path_style,
            multipart_threshold=DEFAULT_MULTIPART_THRESHOLD if multipart_threshold is None
            else multipart_threshold,
            ca_bundle=s3_ca_bundle,
            control_timeout_s=s3_control_timeout_s,
        )
        if check and wait is not None:
            wait.run(store.check)
        elif check:
            store.check()
        return store
    raise ValueError(
        f"object store URL {url!r}: unknown scheme {parts.scheme!r}; "
        "use file:///PATH or s3://BUCKET/PREFIX"
    )
