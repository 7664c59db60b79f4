"""RetryingObjectStore: bounded retries with exponential backoff around any ObjectStore.

Each call is retried on :class:`ObjectStoreUnavailable` only, at most
``max_attempts`` times in all, sleeping ``backoff_s``, then twice that, ... up to
``max_backoff_s`` between attempts; the last error is raised. Other errors
(``ObjectNotFound``, ``PreconditionFailed``) pass through at once.

Retrying a conditional put is safe: if the first attempt did happen and only its
answer was lost, the retry gets :class:`PreconditionFailed`, and a
compare-and-set cycle then re-reads and sees its own write (see
``RemoteStorageManager.upload_segment``). Retrying a plain ``put`` or ``put_file``
rewrites the same bytes, and ``delete`` is idempotent.

Thread-safe if the wrapped store is (it holds no mutable state). Blocking, and
its backoff sleeps block too: never call it on the event loop.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

from remote_tier.errors import ObjectStoreUnavailable
from remote_tier.store import ObjectInfo, ObjectStore, get_control, get_with_etag

__all__ = ["RetryingObjectStore"]

_log = logging.getLogger("strata.remote_tier")
_T = TypeVar("_T")


class RetryingObjectStore:
    """Delegates to ``inner``, retrying unavailable-store failures (see module docstring)."""

    def __init__(
        self,
        inner: ObjectStore,
        *,
        max_attempts: int = 5,
        backoff_s: float = 0.1,
        max_backoff_s: float = 5.0,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        if max_attempts < 1:
            raise ValueError("max_attempts must be at least 1")
        self.inner = inner
        #: requests made (each once, however often retried) and bytes moved, by operation
        #: (``get``, ``put``, ``head``, ``list``, ``delete``): the broker's ``/metrics``
        self.requests: Counter[str] = Counter()
        self.bytes: Counter[str] = Counter()
        self._counting = threading.Lock()  # the store is called from many threads
        self._max_attempts = max_attempts
        self._backoff_s = backoff_s
        self._max_backoff_s = max_backoff_s
        self._sleep = sleep

    def __repr__(self) -> str:
        return f"RetryingObjectStore({self.inner!r}, max_attempts={self._max_attempts})"

    def _call(self, what: str, op: Callable[[], _T]) -> _T:
        delay = self._backoff_s
        for attempt in range(1, self._max_attempts + 1):
            try:
                return op()
            except ObjectStoreUnavailable as err:
                if attempt == self._max_attempts:
                    raise
                _log.warning(
                    "%s failed (attempt %d of %d), retrying in %.2fs: %s",
                    what,
                    attempt,
                    self._max_attempts,
                    delay,
                    err,
                )
                self._sleep(delay)
                delay = min(delay * 2, self._max_backoff_s)
        raise AssertionError("unreachable")

    def _count(self, op: str, size: int = 0) -> None:
        with self._counting:
            self.requests[op] += 1
            self.bytes[op] += size

    def get(self, key: str, start: int | None = None, end: int | None = None) -> bytes:
        data = self._call(f"get {key!r}", lambda: self.inner.get(key, start, end))
        self._count("get", len(data))
        return data

    def get_control(self, key: str) -> bytes:
        data = self._call(f"get {key!r}", lambda: get_control(self.inner, key))
        self._count("get", len(data))
        return data

    def get_with_etag(self, key: str) -> tuple[bytes, str]:
        data, etag = self._call(f"get {key!r}", lambda: get_with_etag(self.inner, key))
        self._count("get", len(data))
        return data, etag

    def head(self, key: str) -> ObjectInfo:
        self._count("head")
        return self._call(f"head {key!r}", lambda: self.inner.head(key))

    def list(self, prefix: str) -> Iterator[ObjectInfo]:
        self._count("list")
        return iter(self._call(f"list {prefix!r}", lambda: list(self.inner.list(prefix))))

    def put(self, key: str, data: bytes) -> str:
        self._count("put", len(data))
        return self._call(f"put {key!r}", lambda: self.inner.put(key, data))

    def put_file(self, key: str, path: Path) -> str:
        self._count("put", path.stat().st_size)
        return self._call(f"put {key!r}", lambda: self.inner.put_file(key, path))

    def put_if_absent(self, key: str, data: bytes) -> str:
        self._count("put", len(data))
        return self._call(f"put {key!r}", lambda: self.inner.put_if_absent(key, data))

    def put_if_match(self, key: str, data: bytes, etag: str) -> str:
        self._count("put", len(data))
        return self._call(f"put {key!r}", lambda: self.inner.put_if_match(key, data, etag))

    def delete(self, key: str) -> None:
        self._count("delete")
        self._call(f"delete {key!r}", lambda: self.inner.delete(key))
