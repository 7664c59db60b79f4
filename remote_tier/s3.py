"""An :class:`~remote_tier.store.ObjectStore` on an S3-compatible bucket, through boto3.

Works with AWS S3, MinIO and moto's server. Object ``k`` is ``<prefix>/k`` in
``bucket`` (``prefix`` may be empty).

* Conditional writes are S3's: ``put_if_absent`` sends ``If-None-Match: *``,
  ``put_if_match`` sends ``If-Match: "<etag>"``; a 412 (or a 409
  ``ConditionalRequestConflict``, S3's answer to a concurrent conditional write,
  or a 404 for ``If-Match`` on a missing key) becomes :class:`PreconditionFailed`.
* ``get`` with a range sends ``Range: bytes=a-b`` (inclusive), so only the asked
  bytes cross the network. GETs go through :class:`~remote_tier.s3_get.S3Getter`
  (SigV4 over ``http.client``, a third of botocore's CPU per request, which the
  tiered-fetch threads would otherwise spend holding the GIL the event loop
  needs); every other call goes through boto3.
* ``put_file`` streams from disk; files of at least ``multipart_threshold`` bytes
  go up as a multipart upload (boto3's transfer manager; parts are retried and a
  failed upload is aborted). Its etag is then S3's multipart etag, not an MD5.
* Credentials come from the explicit ``access_key`` / ``secret_key`` when given,
  else from the usual AWS chain (environment, shared config and credentials
  files, container or instance roles).
* ``path_style`` (the default) addresses ``endpoint/bucket/key``, which MinIO and
  moto need; AWS accepts it too.
* Transient failures (connection errors, throttling, 5xx) are retried by
  botocore's ``standard`` retry mode, with exponential backoff and jitter, at most
  ``max_attempts`` times per call.
* ``control_timeout_s`` (when given) is the read timeout of the small requests the
  control plane waits on: conditional writes (the controller lease, metadata log slots,
  commit slots), ``get_with_etag``, ``get_control`` (the metadata log's reads), ``head``,
  ``list`` and ``delete``.
  A request that hears nothing that long, as on a pooled connection a NAT dropped
  silently, is retried on a new connection instead of holding its caller for
  ``read_timeout_s`` (30 s): long enough to lose a lease. Uploads and every ``get`` of
  data keep ``read_timeout_s``. Every conditional write's caller recognizes its own write
  when a retry finds the key taken, so retrying them early is safe.

Every botocore / urllib3 exception is translated once, in :meth:`S3ObjectStore._edge`,
into :class:`ObjectNotFound`, :class:`PreconditionFailed` or
:class:`ObjectStoreUnavailable` (whose message says what to check: the endpoint,
that the bucket exists, the credentials).

Thread-safety: safe to share between threads (one boto3 client, which is
thread-safe). Blocking: every method does network I/O; call it from the
tiered-storage threads (uploader, tiered fetch pool), never on the event loop.
"""

from __future__ import annotations

import http.client
import os
import ssl
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any

import boto3
import botocore.exceptions
import urllib3.exceptions
from boto3.exceptions import S3UploadFailedError
from boto3.s3.transfer import TransferConfig
from botocore.config import Config
from botocore.httpsession import DEFAULT_CA_BUNDLE

from remote_tier.errors import (
    ObjectNotFound,
    ObjectStoreUnavailable,
    ObjectStoreUnreachable,
    PreconditionFailed,
)
from remote_tier.s3_control import control_call
from remote_tier.s3_get import RETRY_CODES, S3GetError, S3Getter, frozen_credentials
from remote_tier.store import ObjectInfo, clamp_range

__all__ = ["DEFAULT_MULTIPART_THRESHOLD", "S3ObjectStore"]

DEFAULT_MULTIPART_THRESHOLD = 64 * 1024 * 1024
_DEFAULT_REGION = "us-east-1"
_NOT_FOUND = frozenset({"NoSuchKey", "404", "NotFound"})
_LOST_CONDITION = frozenset({"PreconditionFailed", "412", "ConditionalRequestConflict", "409"})
_CREDENTIALS = frozenset(
    {
        "AccessDenied",
        "403",
        "Forbidden",
        "InvalidAccessKeyId",
        "SignatureDoesNotMatch",
        "ExpiredToken",
        "InvalidToken",
    }
)


def redact_url(url: str) -> str:
    """``url`` without the credentials of its authority (``http://key:secret@host`` → ``http://host``)."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        return url
    authority, slash, path = rest.partition("/")
    return f"{scheme}://{authority.rpartition('@')[2]}{slash}{path}"


class S3ObjectStore:
    """Objects under ``prefix`` in an S3 ``bucket`` (see the module docstring).

    Thread-safe; blocking (network I/O on every call).
    """

    def __init__(
        self,
        bucket: str,
        prefix: str = "",
        *,
        endpoint_url: str | None = None,
        region: str | None = None,
        access_key: str | None = None,
        secret_key: str | None = None,
        session_token: str | None = None,
        path_style: bool = True,
        multipart_threshold: int = DEFAULT_MULTIPART_THRESHOLD,
        multipart_chunksize: int | None = None,
        max_attempts: int = 3,
        connect_timeout_s: float = 5.0,
        read_timeout_s: float = 30.0,
        control_timeout_s: float | None = None,
        max_pool_connections: int = 32,
        ca_bundle: str | None = None,
    ) -> None:
        """``ca_bundle``: a PEM file of the CAs the endpoint's certificate is verified
        with (default: ``AWS_CA_BUNDLE``, else the system's); the certificate is always
        verified."""
        if (access_key is None) != (secret_key is None):
            raise ValueError("give both access_key and secret_key, or neither")
        self._bucket = bucket
        self._prefix = prefix.strip("/") + "/" if prefix.strip("/") else ""
        self._endpoint_url = endpoint_url
        session = boto3.session.Session(
            aws_access_key_id=access_key,
            aws_secret_access_key=secret_key,
            aws_session_token=session_token,
            region_name=region,
        )
        self._region = region or session.region_name or _DEFAULT_REGION
        config = Config(
            region_name=self._region,
            s3={"addressing_style": "path" if path_style else "auto"},
            retries={"mode": "standard", "total_max_attempts": max_attempts},
            connect_timeout=connect_timeout_s,
            read_timeout=read_timeout_s,
            max_pool_connections=max_pool_connections,
            # Only send/validate checksums where S3 requires them: MinIO and older
            # S3-compatible stores reject the newer default trailing checksums.
            request_checksum_calculation="when_required",
            response_checksum_validation="when_required",
        )
        ca_bundle = ca_bundle or os.environ.get("AWS_CA_BUNDLE") or None
        if ca_bundle is not None and not os.path.isfile(ca_bundle):
            raise ValueError(f"the S3 CA bundle {ca_bundle} is not a file")
        self._client: Any = session.client("s3", endpoint_url=endpoint_url, config=config,
                                           verify=ca_bundle if ca_bundle else True)
        control_s = read_timeout_s if control_timeout_s is None else min(control_timeout_s, read_timeout_s)
        #: the client of the control plane's small requests (see the module docstring): its
        #: retries are :func:`~remote_tier.s3_control.control_call`'s, not botocore's
        self._control: Any = session.client(
            "s3", endpoint_url=endpoint_url, verify=ca_bundle if ca_bundle else True,
            config=config.merge(Config(connect_timeout=min(connect_timeout_s, control_s), read_timeout=control_s,
                                       retries={"mode": "standard", "total_max_attempts": 1})))
        self._attempts = max(1, max_attempts)
        chunk = multipart_chunksize or max(8 * 1024 * 1024, multipart_threshold // 8)
        self._transfer = TransferConfig(
            multipart_threshold=multipart_threshold,
            multipart_chunksize=chunk,
            max_concurrency=4,
        )
        self._multipart_threshold = multipart_threshold
        self._getter, self._control_getter = (S3Getter(
            str(self._client.meta.endpoint_url),
            bucket,
            self._region,
            frozen_credentials(session.get_credentials()),
            path_style=path_style,
            timeout_s=timeout_s,
            max_attempts=max_attempts,
            ca_bundle=ca_bundle or DEFAULT_CA_BUNDLE,
        ) for timeout_s in (read_timeout_s, control_s))

    @property
    def bucket(self) -> str:
        return self._bucket

    @property
    def prefix(self) -> str:
        """The key prefix inside the bucket, ``""`` or ending with ``/``."""
        return self._prefix

    @property
    def endpoint(self) -> str:
        """The endpoint URL in use (AWS's regional endpoint when none was given), without
        any ``user:password@`` it was given with: it is shown in logs and errors."""
        return redact_url(str(self._endpoint_url or self._client.meta.endpoint_url))

    @property
    def url(self) -> str:
        """The store as ``strata up --object-store`` takes it: ``s3://bucket/prefix``."""
        return f"s3://{self._bucket}/{self._prefix}"

    def __repr__(self) -> str:
        return f"S3ObjectStore(s3://{self._bucket}/{self._prefix} at {self.endpoint})"

    # -- configuration check ----------------------------------------------------

    def check(self) -> None:
        """Verify that the endpoint answers, the bucket exists and the credentials work.

        Raises :class:`ObjectStoreUnavailable` with a message naming what to fix.
        Meant for start-up, so bad configuration fails at once and clearly.
        """
        with self._edge("check", "", bucket_level=True):
            self._client.head_bucket(Bucket=self._bucket)
        with self._edge("list", self._prefix):
            self._client.list_objects_v2(Bucket=self._bucket, Prefix=self._prefix, MaxKeys=1)

    # -- reads ------------------------------------------------------------------

    def get(self, key: str, start: int | None = None, end: int | None = None) -> bytes:
        lo, hi = clamp_range(sys.maxsize, start, end)  # validates the range
        if start is None and end is None:
            range_header = None
        elif hi == lo:
            self.head(key)  # an empty range still needs the object to exist
            return b""
        else:
            range_header = f"bytes={lo}-" if end is None else f"bytes={lo}-{hi - 1}"
        return self._get(self._getter, key, range_header, lo, None if end is None else hi)

    def get_control(self, key: str) -> bytes:
        """The whole object, as a control-plane request: the control timeout, retried at once
        (the metadata log's slots and snapshots; data keeps :meth:`get`)."""
        return self._get(self._control_getter, key, None, 0, None)

    def _get(self, getter: S3Getter, key: str, range_header: str | None, lo: int, hi: int | None) -> bytes:
        try:
            status, body = getter.get(self._key(key), range_header)
            if status == 200 and range_header is not None:
                # a store that ignores Range sends the whole object
                body = body[lo:] if hi is None else body[lo:hi]
        except S3GetError as err:
            if err.code in ("InvalidRange", "416"):
                return b""  # start at or past the end of an existing object
            raise self._translate(
                "get", key, err.code, err.message, bucket_level=False, status=err.status
            ) from err
        except ssl.SSLError as err:  # a certificate no wait mends
            raise ObjectStoreUnavailable(
                f"{self}: cannot get {key!r}: {err}. Check the endpoint's certificate "
                "and the CA bundle (--s3-ca-bundle)."
            ) from err
        except (OSError, http.client.HTTPException) as err:
            raise ObjectStoreUnreachable(
                f"{self}: cannot get {key!r}: {err}. Check that the endpoint URL "
                f"{self.endpoint} is right and reachable from this host."
            ) from err
        return body

    def get_with_etag(self, key: str) -> tuple[bytes, str]:
        """The whole object and the etag S3 sent with it, in one GET (through boto3:
        meant for small objects such as the controller lease, not segment data)."""
        def get() -> tuple[bytes, str]:
            response = self._control.get_object(Bucket=self._bucket, Key=self._key(key))
            return response["Body"].read(), _etag(response["ETag"])

        with self._edge("get", key):
            return control_call(get, self._attempts)

    def head(self, key: str) -> ObjectInfo:
        with self._edge("head", key):
            response = control_call(lambda: self._control.head_object(Bucket=self._bucket, Key=self._key(key)),
                                    self._attempts)
        return ObjectInfo(
            key,
            int(response["ContentLength"]),
            _etag(response["ETag"]),
            _ms(response["LastModified"]),
        )

    def list(self, prefix: str) -> Iterator[ObjectInfo]:
        cut = len(self._prefix)

        def listing() -> list[ObjectInfo]:
            paginator = self._control.get_paginator("list_objects_v2")
            return [ObjectInfo(item["Key"][cut:], int(item["Size"]), _etag(item["ETag"]), _ms(item["LastModified"]))
                    for page in paginator.paginate(Bucket=self._bucket, Prefix=self._key(prefix))
                    for item in page.get("Contents", ())]

        with self._edge("list", prefix):
            found = control_call(listing, self._attempts)
        found.sort(key=lambda info: info.key)
        return iter(found)

    # -- writes -----------------------------------------------------------------

    def put(self, key: str, data: bytes) -> str:
        return self._put(key, data, self._client)

    def put_file(self, key: str, path: Path) -> str:
        """Streams ``path``; a multipart upload from ``multipart_threshold`` bytes on.

        The multipart etag is read back with a HEAD after the upload completes, so
        keys written by ``put_file`` should not be written concurrently by others
        (segment keys are unique per upload).
        """
        path = Path(path)
        size = path.stat().st_size
        if size < self._multipart_threshold:
            with open(path, "rb") as f, self._edge("put", key):
                response = self._client.put_object(Bucket=self._bucket, Key=self._key(key), Body=f)
            return _etag(response["ETag"])
        with self._edge("put", key):
            try:
                self._client.upload_file(
                    str(path), self._bucket, self._key(key), Config=self._transfer
                )
            except S3UploadFailedError as err:
                cause = err.__cause__ or err.__context__
                if isinstance(
                    cause, botocore.exceptions.BotoCoreError | botocore.exceptions.ClientError
                ):
                    raise cause from err
                raise ObjectStoreUnavailable(
                    f"{self}: multipart upload of {key!r} failed: {err}"
                ) from err
        return self.head(key).etag

    def put_if_absent(self, key: str, data: bytes) -> str:
        return self._put(key, data, self._control, IfNoneMatch="*")

    def put_if_match(self, key: str, data: bytes, etag: str) -> str:
        return self._put(key, data, self._control, IfMatch=f'"{etag}"')

    def delete(self, key: str) -> None:
        with self._edge("delete", key):
            control_call(lambda: self._control.delete_object(Bucket=self._bucket, Key=self._key(key)), self._attempts)

    # -- helpers ----------------------------------------------------------------

    def _put(self, key: str, data: bytes, client: Any, **conditions: str) -> str:
        def put() -> Any:
            return client.put_object(Bucket=self._bucket, Key=self._key(key), Body=data, **conditions)

        with self._edge("put", key):
            response = control_call(put, self._attempts) if client is self._control else put()
        return _etag(response["ETag"])

    def _key(self, key: str) -> str:
        return self._prefix + key

    @contextmanager
    def _edge(self, op: str, key: str, *, bucket_level: bool = False) -> Iterator[None]:
        """Translates botocore / urllib3 exceptions raised inside into ours (the one edge)."""
        try:
            yield
        except botocore.exceptions.ClientError as err:
            status = int(err.response.get("ResponseMetadata", {}).get("HTTPStatusCode") or 0)
            raise self._translate(op, key, _code(err), _message(err), bucket_level, status) from err
        except (botocore.exceptions.SSLError, urllib3.exceptions.SSLError) as err:  # a certificate no wait mends
            raise ObjectStoreUnavailable(
                f"{self}: cannot {op} {key!r}: {err}. Check the endpoint's certificate "
                "and the CA bundle (--s3-ca-bundle)."
            ) from err
        except (
            botocore.exceptions.NoCredentialsError,
            botocore.exceptions.PartialCredentialsError,
        ) as err:
            raise ObjectStoreUnavailable(
                f"{self}: no usable AWS credentials ({err}). Set AWS_ACCESS_KEY_ID and "
                "AWS_SECRET_ACCESS_KEY (or a profile / instance role), or pass the access "
                "and secret key in the object store configuration."
            ) from err
        except (botocore.exceptions.BotoCoreError, urllib3.exceptions.HTTPError) as err:
            # no connection, a timeout, a connection closed: what a store starting or restarting
            # does; the rest (a bad parameter, no region) no wait mends
            unreachable = isinstance(err, botocore.exceptions.ConnectionError | botocore.exceptions.HTTPClientError
                                     | urllib3.exceptions.HTTPError)
            raise (ObjectStoreUnreachable if unreachable else ObjectStoreUnavailable)(
                f"{self}: cannot {op} {key!r}: {err}. Check that the endpoint URL "
                f"{self.endpoint} is right and reachable from this host."
            ) from err

    def _translate(
        self, op: str, key: str, code: str, message: str, bucket_level: bool, status: int = 0
    ) -> Exception:
        if code == "NoSuchBucket" or (bucket_level and code in _NOT_FOUND):
            return ObjectStoreUnavailable(
                f"bucket {self._bucket!r} does not exist at {self.endpoint}: create it "
                "(e.g. `aws s3 mb s3://BUCKET --endpoint-url ENDPOINT`) or point the object "
                "store URL at an existing bucket."
            )
        if code in _LOST_CONDITION and op == "put":
            return PreconditionFailed(f"conditional put of {key!r} lost: {code}")
        if code in _NOT_FOUND:
            if op == "put":  # If-Match on a key that is gone
                return PreconditionFailed(f"object {key!r} does not exist")
            return ObjectNotFound(key)
        if code == "NoCredentials":
            return ObjectStoreUnavailable(
                f"{self}: no usable AWS credentials. Set AWS_ACCESS_KEY_ID and "
                "AWS_SECRET_ACCESS_KEY (or a profile / instance role), or pass the access "
                "and secret key in the object store configuration."
            )
        if code in _CREDENTIALS:
            return ObjectStoreUnavailable(
                f"{self}: {op} {key!r} was refused ({code}). Check the credentials "
                "(AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY or the configured keys) and "
                f"that they may read and write bucket {self._bucket!r}."
            )
        if status >= 500 or status == 429 or code in RETRY_CODES:  # busy or starting (MinIO: 503 XMinio...)
            return ObjectStoreUnreachable(f"{self}: cannot {op} {key!r}: the store answered {status or code}"
                                          f" {code}: {message}")
        return ObjectStoreUnavailable(
            f"{self}: cannot {op} {key!r}: {code}: {message}. Check the endpoint "
            "URL, the region and that the bucket exists."
        )


def _code(err: botocore.exceptions.ClientError) -> str:
    return str(err.response.get("Error", {}).get("Code", ""))


def _message(err: botocore.exceptions.ClientError) -> str:
    return str(err.response.get("Error", {}).get("Message", ""))


def _etag(raw: str) -> str:
    return raw.strip('"')


def _ms(value: datetime) -> int:
    return int(value.timestamp() * 1000)
