"""get_with_etag: the whole object and the etag of exactly those bytes, on every store."""

from __future__ import annotations

import pytest

from remote_tier import ObjectNotFound, ObjectStore, RetryingObjectStore, get_with_etag
from tests.remote_tier.flaky import FlakyObjectStore


def test_the_etag_returned_is_the_one_of_the_bytes_returned(any_store: ObjectStore) -> None:
    first = any_store.put("cluster/lease", b"one")
    assert get_with_etag(any_store, "cluster/lease") == (b"one", first)
    second = any_store.put_if_match("cluster/lease", b"two", first)
    assert get_with_etag(any_store, "cluster/lease") == (b"two", second)
    with pytest.raises(ObjectNotFound):
        get_with_etag(any_store, "cluster/missing")


def test_a_store_without_the_capability_is_read_with_head_get_head(any_store: ObjectStore) -> None:
    etag = any_store.put("k", b"bytes")
    wrapper = FlakyObjectStore(any_store)  # has no get_with_etag of its own
    assert get_with_etag(wrapper, "k") == (b"bytes", etag)
    assert wrapper.requests == 3


def test_the_retrying_store_retries_an_unavailable_store(any_store: ObjectStore) -> None:
    etag = any_store.put("k", b"bytes")
    failed: list[str] = []

    def once(op: str, key: str) -> bool:
        failed.append(op)
        return len(failed) == 2  # the GET between the two HEADs

    flaky = FlakyObjectStore(any_store, fail_key=once)
    retrying = RetryingObjectStore(flaky, backoff_s=0, sleep=lambda _: None)
    assert get_with_etag(retrying, "k") == (b"bytes", etag)
    assert flaky.failures == 1 and failed == ["head", "get", "head", "get", "head"]
