"""Read-only access to the bucket for the Spark source: whole or ranged GETs of keys.

The source never writes and never lists: it reads ``cluster/metadata.json``, the
partition manifests and segment objects by the keys ``docs/object-layout.md``
defines. Two forms, from the same URL the broker takes:

* ``file:///path``: files under ``path`` (``pread``);
* ``s3://bucket/prefix``: SigV4-signed GETs over HTTP(S) (:class:`remote_tier.s3_get.S3Getter`,
  one kept-alive connection per thread, retries with backoff), credentials from the
  options or the usual AWS chain (environment, profile, instance role).

A client is built per process from the options, on first use, so the objects
Spark pickles to executors carry only strings. ``gets`` counts requests, per key,
for tests and for the benchmark.
"""

from __future__ import annotations

import functools
import http.client
import os
import threading
from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

from spark.options import StrataSourceError

__all__ = ["Bucket", "MissingObject", "open_bucket"]


class MissingObject(StrataSourceError):
    """The key does not exist in the bucket."""


class Bucket:
    """``get(key, start, end)``: bytes ``[start, end)`` of an object (all of it by default)."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.gets: Counter[str] = Counter()
        self._lock = threading.Lock()

    def get(self, key: str, start: int | None = None, end: int | None = None) -> bytes:
        with self._lock:
            self.gets[key] += 1
        return self._get(key, start, end)

    def get_into(self, key: str, start: int, end: int, buf: memoryview) -> bytes | memoryview:
        """Bytes ``[start, end)`` of an object, received into ``buf`` when they fit.

        Returns the filled slice of ``buf`` (valid until ``buf`` is reused) or, when
        the range does not fit or the store cannot, the bytes.
        """
        with self._lock:
            self.gets[key] += 1
        return self._get_into(key, start, end, buf)

    def locate(self, key: str) -> str:
        """A URL another process can GET ``key`` from without credentials (the JVM reader)."""
        raise NotImplementedError

    def _get(self, key: str, start: int | None, end: int | None) -> bytes:
        raise NotImplementedError

    def _get_into(self, key: str, start: int, end: int, buf: memoryview) -> bytes | memoryview:
        return self._get(key, start, end)


class _FileBucket(Bucket):
    def __init__(self, url: str, root: Path) -> None:
        super().__init__(url)
        self._root = root
        if not root.is_dir():
            raise StrataSourceError(
                f"object store {url}: directory {root} does not exist; point object.store at the "
                "directory the broker was started with (strata up --object-store)"
            )

    def _get_into(self, key: str, start: int, end: int, buf: memoryview) -> bytes | memoryview:
        if end - start > len(buf):
            return self._get(key, start, end)
        fd = self._open(key)
        try:
            got = 0
            while got < end - start:
                n = os.preadv(fd, [buf[got:end - start]], start + got)
                if not n:
                    break  # the object is shorter: the caller sees a short read
                got += n
            return buf[:got]
        finally:
            os.close(fd)

    def locate(self, key: str) -> str:
        return self._root.joinpath(*key.split("/")).resolve().as_uri()

    def _open(self, key: str) -> int:
        try:
            return os.open(self._root.joinpath(*key.split("/")), os.O_RDONLY)
        except FileNotFoundError:
            raise MissingObject(f"{self.url}: no object {key!r}") from None

    def _get(self, key: str, start: int | None, end: int | None) -> bytes:
        fd = self._open(key)
        try:
            lo = start or 0
            hi = os.fstat(fd).st_size if end is None else end
            return os.pread(fd, max(0, hi - lo), lo)
        finally:
            os.close(fd)


class _S3Bucket(Bucket):
    def __init__(self, url: str, bucket: str, prefix: str, s3: Mapping[str, str]) -> None:
        super().__init__(url)
        import boto3
        from botocore.config import Config
        from botocore.httpsession import DEFAULT_CA_BUNDLE

        from remote_tier.s3_get import S3Getter, frozen_credentials

        session = boto3.session.Session(
            aws_access_key_id=s3.get("access_key"),
            aws_secret_access_key=s3.get("secret_key"),
            aws_session_token=s3.get("session_token"),
            region_name=s3.get("region"),
        )
        region = s3.get("region") or session.region_name or "us-east-1"
        endpoint = s3.get("endpoint") or f"https://s3.{region}.amazonaws.com"
        path_style = s3.get("path_style", "true").lower() != "false"
        self._prefix = prefix.strip("/") + "/" if prefix.strip("/") else ""
        self._bucket = bucket
        # the JVM reader's URLs are signed by botocore; its client is made on first use only
        self._presigner: Any = None
        self._new_presigner = functools.partial(
            session.client, "s3", endpoint_url=endpoint, region_name=region,
            config=Config(signature_version="s3v4", s3={"addressing_style": "path" if path_style else "virtual"}))
        self._where = f"s3://{bucket}/{self._prefix} at {endpoint}"
        try:
            self._getter = S3Getter(
                endpoint,
                bucket,
                region,
                frozen_credentials(session.get_credentials()),
                path_style=path_style,
                ca_bundle=os.environ.get("AWS_CA_BUNDLE") or DEFAULT_CA_BUNDLE,
            )
        except ValueError as exc:
            raise StrataSourceError(f"option s3.endpoint: {exc}") from exc

    def locate(self, key: str) -> str:
        if self._presigner is None:
            self._presigner = self._new_presigner()
        url: str = self._presigner.generate_presigned_url(
            "get_object", Params={"Bucket": self._bucket, "Key": self._prefix + key},
            ExpiresIn=PRESIGN_SECONDS)
        return url

    def _get(self, key: str, start: int | None, end: int | None) -> bytes:
        return bytes(self._request(key, start, end, None))

    def _get_into(self, key: str, start: int, end: int, buf: memoryview) -> bytes | memoryview:
        return self._request(key, start, end, buf)

    def _request(self, key: str, start: int | None, end: int | None,
                 buf: memoryview | None) -> bytes | memoryview:
        from remote_tier.s3_get import S3GetError

        if start is None and end is None:
            range_header = None
        elif end is not None and end <= (start or 0):
            return b""
        else:
            range_header = f"bytes={start or 0}-" + ("" if end is None else str(end - 1))
        body: bytes | memoryview
        try:
            if buf is None:
                status, body = self._getter.get(self._prefix + key, range_header)
            else:
                status, body = self._getter.get_into(self._prefix + key, range_header, buf)
        except S3GetError as err:
            if err.code == "NoSuchKey":
                raise MissingObject(f"{self._where}: no object {key!r}") from None
            if err.code == "NoSuchBucket":
                raise StrataSourceError(
                    f"{self._where}: the bucket does not exist; check object.store and s3.endpoint"
                ) from None
            if err.code in ("InvalidRange",):
                return b""
            if err.status == 403 or err.code in ("NoCredentials", "InvalidAccessKeyId",
                                                  "SignatureDoesNotMatch", "AccessDenied"):
                raise StrataSourceError(
                    f"{self._where}: reading {key!r} was refused ({err.code}); check the "
                    "credentials (s3.accessKey / s3.secretKey options, AWS_ACCESS_KEY_ID / "
                    "AWS_SECRET_ACCESS_KEY, or the profile) and that they may read the bucket"
                ) from None
            raise StrataSourceError(f"{self._where}: reading {key!r} failed: {err}") from None
        except (OSError, http.client.HTTPException) as err:
            raise StrataSourceError(
                f"{self._where}: cannot reach the object store ({err}); check s3.endpoint"
            ) from None
        if status == 200 and range_header is not None:
            body = body[start or 0:] if end is None else body[start or 0:end]
        return body


#: how long a URL signed at planning stays valid for the JVM reader (12 hours)
PRESIGN_SECONDS = 12 * 3600

_OPEN: dict[tuple[str, tuple[tuple[str, str], ...]], Bucket] = {}
_OPEN_LOCK = threading.Lock()


def open_bucket(url: str, s3: Mapping[str, str] | None = None) -> Bucket:
    """The bucket client for ``url``, one per process and configuration."""
    s3 = dict(s3 or {})
    cache_key = (url, tuple(sorted(s3.items())))
    with _OPEN_LOCK:
        bucket = _OPEN.get(cache_key)
        if bucket is None:
            bucket = _OPEN[cache_key] = _make(url, s3)
        return bucket


def _make(url: str, s3: Mapping[str, str]) -> Bucket:
    parts = urlsplit(url)
    if parts.scheme in ("", "file"):
        path = unquote(parts.path) if parts.scheme else url
        if not path or (parts.scheme == "file" and parts.netloc not in ("", "localhost")):
            raise StrataSourceError(f"object.store {url!r}: use file:///ABSOLUTE/PATH")
        return _FileBucket(url, Path(path))
    if parts.scheme == "s3":
        if not parts.netloc:
            raise StrataSourceError(f"object.store {url!r} names no bucket: use s3://BUCKET/PREFIX")
        return _S3Bucket(url, parts.netloc, unquote(parts.path), s3)
    raise StrataSourceError(
        f"object.store {url!r}: unknown scheme {parts.scheme!r}; use file:///PATH or s3://BUCKET/PREFIX"
    )
