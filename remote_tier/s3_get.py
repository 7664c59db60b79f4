"""Lean S3 GETs for the read path: SigV4 over ``http.client``, one connection per thread.

Tiered fetches and Spark executors issue many ranged GETs of large objects. Through
botocore each costs about 2.5 ms of Python (event hooks, endpoint rules, the
request model, response parsing), time in which the calling thread holds the GIL
and the broker's event loop, serving live consumers, waits for it. This module
signs a GET with AWS Signature Version 4 (``UNSIGNED-PAYLOAD``, as S3 allows for
GETs) and sends it on a kept-alive :class:`http.client.HTTPConnection` owned by
the calling thread, about a third of botocore's CPU per request; the body is read
with ``recv`` calls that release the GIL.

Only GET goes this way; writes, lists and the conditional puts stay on boto3,
whose multipart and retry machinery they need. Credentials are botocore's
(``Credentials.get_frozen_credentials()`` per request, so refreshable role
credentials keep working). Transient failures (connection errors, 500, 502, 503,
504, throttling) are retried with exponential backoff and jitter up to
``max_attempts`` times, like botocore's ``standard`` mode.

Errors are reported as :class:`S3GetError` carrying S3's error code, or
``OSError`` / ``http.client.HTTPException`` for the transport; the store
translates both at its edge.
"""

from __future__ import annotations

import datetime
import hashlib
import hmac
import http.client
import random
import re
import ssl
import threading
import time
from collections.abc import Callable
from typing import Any, cast
from urllib.parse import quote, urlsplit

__all__ = ["RETRY_CODES", "S3GetError", "S3Getter"]

_RETRY_STATUS = frozenset({500, 502, 503, 504})
#: what S3 answers when it is busy or failing, whatever the status (retried; a start waits them out)
RETRY_CODES = frozenset({"SlowDown", "Throttling", "RequestTimeout", "InternalError", "ServiceUnavailable"})
_CODE = re.compile(rb"<Code>([^<]*)</Code>")
_MESSAGE = re.compile(rb"<Message>([^<]*)</Message>")
_UNSIGNED = "UNSIGNED-PAYLOAD"


class S3GetError(Exception):
    """S3 answered a GET with an error status; ``code`` is S3's error code."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(f"{status} {code}: {message}")
        self.status = status
        self.code = code
        self.message = message


class S3Getter:
    """Signs and sends GETs of one bucket. Thread-safe: each thread has its own connection.

    ``credentials`` returns ``(access_key, secret_key, session_token | None)`` or
    ``None`` when there are none (then :class:`S3GetError` ``NoCredentials``).
    """

    def __init__(
        self,
        endpoint_url: str,
        bucket: str,
        region: str,
        credentials: Callable[[], tuple[str, str, str | None] | None],
        *,
        path_style: bool = True,
        timeout_s: float = 30.0,
        max_attempts: int = 3,
        ca_bundle: str | None = None,
    ) -> None:
        url = urlsplit(endpoint_url)
        if url.scheme not in ("http", "https") or not url.hostname:
            raise ValueError(f"endpoint URL {endpoint_url!r} is not http(s)://host[:port]")
        self._https = url.scheme == "https"
        self._port = url.port
        base_host = url.hostname if url.port is None else f"{url.hostname}:{url.port}"
        if path_style:
            self._connect_host, self._host = url.hostname, base_host
            self._path_prefix = url.path.rstrip("/") + "/" + quote(bucket, safe="")
        else:
            self._connect_host = f"{bucket}.{url.hostname}"
            self._host = f"{bucket}.{base_host}"
            self._path_prefix = url.path.rstrip("/")
        self._region = region
        self._credentials = credentials
        self._timeout = timeout_s
        self._attempts = max(1, max_attempts)
        self._ssl: ssl.SSLContext | None = (
            ssl.create_default_context(cafile=ca_bundle) if self._https else None
        )
        self._local = threading.local()
        self._keys: tuple[str, str, bytes] | None = None  # (date, secret, signing key)

    def get(self, key: str, range_header: str | None = None) -> tuple[int, bytes]:
        """``(status, body)`` of a GET of ``key`` (200 or 206); raises on anything else.

        An error status raises :class:`S3GetError` (after retries for transient
        ones); a transport failure that outlives the retries raises ``OSError`` or
        ``http.client.HTTPException``.
        """
        return cast(tuple[int, bytes], self._get(key, range_header, None))  # bytes without ``into``

    def get_into(self, key: str, range_header: str | None, buf: memoryview) -> tuple[int, bytes | memoryview]:
        """Like :meth:`get`, but a body that fits is received straight into ``buf``.

        Returns the filled slice of ``buf`` (no allocation, no copy), or the body as
        bytes when it does not fit. The slice is valid until ``buf`` is reused.
        """
        return self._get(key, range_header, buf)

    def _get(self, key: str, range_header: str | None, into: memoryview | None) -> tuple[int, bytes | memoryview]:
        path = self._path_prefix + "/" + quote(key, safe="/~")
        for attempt in range(1, self._attempts + 1):
            try:
                status, body = self._once(path, range_header, into)
            except (OSError, http.client.HTTPException):
                self._drop_connection()
                if attempt == self._attempts:
                    raise
            else:
                if status in (200, 206):
                    return status, body
                err = _error(status, bytes(body))  # error bodies are never read into a buffer
                if (status not in _RETRY_STATUS and err.code not in RETRY_CODES) or (
                    attempt == self._attempts
                ):
                    raise err
            time.sleep(random.uniform(0, min(2.0, 0.05 * 2**attempt)))  # full jitter
        raise AssertionError("unreachable")

    def close(self) -> None:
        self._drop_connection()

    # -- one request --------------------------------------------------------------

    def _once(self, path: str, range_header: str | None, into: memoryview | None) -> tuple[int, bytes | memoryview]:
        conn = self._connection()
        headers = self._sign(path, range_header)
        conn.request("GET", path, headers=headers)
        response = conn.getresponse()
        body: bytes | memoryview
        length = response.length
        if into is not None and response.status in (200, 206) and length is not None and length <= len(into):
            got = 0
            while got < length:
                n = response.readinto(into[got:length])
                if not n:
                    raise http.client.IncompleteRead(bytes(into[:got]), length - got)
                got += n
            body = into[:length]
        else:
            body = response.read()
        if response.will_close:
            self._drop_connection()
        return response.status, body

    def _connection(self) -> http.client.HTTPConnection:
        conn: http.client.HTTPConnection | None = getattr(self._local, "conn", None)
        if conn is None:
            if self._https:
                conn = http.client.HTTPSConnection(
                    self._connect_host, self._port, timeout=self._timeout, context=self._ssl
                )
            else:
                conn = http.client.HTTPConnection(self._connect_host, self._port, timeout=self._timeout)
            self._local.conn = conn
        return conn

    def _drop_connection(self) -> None:
        conn = getattr(self._local, "conn", None)
        self._local.conn = None
        if conn is not None:
            conn.close()

    # -- AWS Signature Version 4 ------------------------------------------------

    def _sign(self, path: str, range_header: str | None) -> dict[str, str]:
        creds = self._credentials()
        if creds is None:
            raise S3GetError(0, "NoCredentials", "no AWS credentials were found")
        access_key, secret_key, token = creds
        stamp = datetime.datetime.now(datetime.UTC).strftime("%Y%m%dT%H%M%SZ")
        date = stamp[:8]
        headers: dict[str, str] = {"host": self._host, "x-amz-content-sha256": _UNSIGNED, "x-amz-date": stamp}
        if range_header is not None:
            headers["range"] = range_header
        if token:
            headers["x-amz-security-token"] = token
        names = sorted(headers)
        signed = ";".join(names)
        canonical = "\n".join(
            ("GET", path, "", "".join(f"{n}:{headers[n]}\n" for n in names), signed, _UNSIGNED)
        )
        scope = f"{date}/{self._region}/s3/aws4_request"
        to_sign = "\n".join(
            ("AWS4-HMAC-SHA256", stamp, scope, hashlib.sha256(canonical.encode()).hexdigest())
        )
        signature = hmac.new(self._signing_key(date, secret_key), to_sign.encode(), hashlib.sha256).hexdigest()
        headers["authorization"] = (
            f"AWS4-HMAC-SHA256 Credential={access_key}/{scope}, "
            f"SignedHeaders={signed}, Signature={signature}"
        )
        return headers

    def _signing_key(self, date: str, secret_key: str) -> bytes:
        cached = self._keys
        if cached is not None and cached[0] == date and cached[1] == secret_key:
            return cached[2]
        key = ("AWS4" + secret_key).encode()
        for part in (date, self._region, "s3", "aws4_request"):
            key = hmac.new(key, part.encode(), hashlib.sha256).digest()
        self._keys = (date, secret_key, key)
        return key


def _error(status: int, body: bytes) -> S3GetError:
    code_match = _CODE.search(body)
    message_match = _MESSAGE.search(body)
    code = code_match.group(1).decode(errors="replace") if code_match else str(status)
    message = message_match.group(1).decode(errors="replace") if message_match else ""
    return S3GetError(status, code, message)


def frozen_credentials(credentials: Any) -> Callable[[], tuple[str, str, str | None] | None]:
    """Adapts a botocore ``Credentials`` (or ``None``) to :class:`S3Getter`'s callable."""

    def current() -> tuple[str, str, str | None] | None:
        if credentials is None:
            return None
        frozen = credentials.get_frozen_credentials()
        return frozen.access_key, frozen.secret_key, frozen.token

    return current
