"""FlakyObjectStore: fault injection as a wrapper around a real ObjectStore.

Faults are chosen per call: fail the Nth put (counting every kind of put),
every Nth request of any kind, or any request on a key matching a predicate;
``succeed_then_fail`` makes a put *happen* and then report
:class:`ObjectStoreUnavailable` (a lost response, the ambiguous case). The
default error is :class:`ObjectStoreUnavailable`; pass ``error`` for another (a
"crash" is any exception the code under test does not catch).

Thread-safe (counters under a lock). Blocking like the store it wraps.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from pathlib import Path

from remote_tier import ObjectInfo, ObjectStore, ObjectStoreUnavailable

__all__ = ["FlakyObjectStore"]


class FlakyObjectStore:
    """Delegates to ``inner``, failing the calls the rules pick."""

    def __init__(
        self,
        inner: ObjectStore,
        *,
        fail_puts: set[int] | None = None,
        fail_every: int = 0,
        fail_key: Callable[[str, str], bool] | None = None,
        succeed_then_fail: Callable[[str, str], bool] | None = None,
        error: Callable[[str], BaseException] = ObjectStoreUnavailable,
    ) -> None:
        self.inner = inner
        self.fail_puts = set(fail_puts or ())  # 1-based numbers of puts to fail
        self.fail_every = fail_every  # every Nth request of any kind fails (0: never)
        self.fail_key = fail_key  # (operation, key) -> fail it?
        self.succeed_then_fail = succeed_then_fail  # (operation, key) -> lose the response?
        self.error = error
        self.puts = 0
        self.requests = 0
        self.failures = 0
        self._lock = threading.Lock()

    def _check(self, op: str, key: str) -> None:
        with self._lock:
            self.requests += 1
            fail = bool(self.fail_every) and self.requests % self.fail_every == 0
            if op.startswith("put"):
                self.puts += 1
                fail = fail or self.puts in self.fail_puts
            fail = fail or (self.fail_key is not None and self.fail_key(op, key))
            if fail:
                self.failures += 1
        if fail:
            raise self.error(f"injected failure: {op} {key!r}")

    def _after(self, op: str, key: str) -> None:
        if self.succeed_then_fail is not None and self.succeed_then_fail(op, key):
            with self._lock:
                self.failures += 1
            raise self.error(f"injected lost response after {op} {key!r}")

    def get(self, key: str, start: int | None = None, end: int | None = None) -> bytes:
        self._check("get", key)
        return self.inner.get(key, start, end)

    def head(self, key: str) -> ObjectInfo:
        self._check("head", key)
        return self.inner.head(key)

    def list(self, prefix: str) -> Iterator[ObjectInfo]:
        self._check("list", prefix)
        return self.inner.list(prefix)

    def put(self, key: str, data: bytes) -> str:
        self._check("put", key)
        etag = self.inner.put(key, data)
        self._after("put", key)
        return etag

    def put_file(self, key: str, path: Path) -> str:
        self._check("put_file", key)
        etag = self.inner.put_file(key, path)
        self._after("put_file", key)
        return etag

    def put_if_absent(self, key: str, data: bytes) -> str:
        self._check("put_if_absent", key)
        etag = self.inner.put_if_absent(key, data)
        self._after("put_if_absent", key)
        return etag

    def put_if_match(self, key: str, data: bytes, etag: str) -> str:
        self._check("put_if_match", key)
        new_etag = self.inner.put_if_match(key, data, etag)
        self._after("put_if_match", key)
        return new_etag

    def delete(self, key: str) -> None:
        self._check("delete", key)
        self.inner.delete(key)
