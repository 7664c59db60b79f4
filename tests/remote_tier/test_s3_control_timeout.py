"""A stalled S3 connection (the request went out, no answer ever comes: a pooled connection
a NAT dropped silently) holds the control plane's small requests only
``control_timeout_s``, then they are retried at once on a new connection; uploads and
reads of data keep the long read timeout. Real moto S3 server over HTTP,
behind a TCP proxy that holds, unanswered, the connections opened during a short window."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from remote_tier.errors import ObjectStoreUnavailable, PreconditionFailed
from remote_tier.s3 import S3ObjectStore
from remote_tier.store import get_with_etag
from tests.e2e.tcp_proxy import CuttingProxy
from tests.s3_fixtures import MotoServer, S3Bucket


@pytest.fixture
def proxy(moto_server: MotoServer, s3_bucket: S3Bucket) -> Iterator[CuttingProxy]:
    p = CuttingProxy(moto_server.port)
    yield p
    p.close()


def _store(bucket: S3Bucket, proxy: CuttingProxy, **timeouts: float) -> S3ObjectStore:
    return S3ObjectStore(bucket.bucket, "ctl", endpoint_url=f"http://{proxy.address}", **timeouts)


def _timed(call: Callable[[], Any]) -> tuple[Any, float]:
    start = time.monotonic()
    result = call()
    return result, time.monotonic() - start


def test_control_requests_on_a_stalled_connection_are_retried_after_the_control_timeout(
        s3_bucket: S3Bucket, proxy: CuttingProxy) -> None:
    store = _store(s3_bucket, proxy, control_timeout_s=0.5, read_timeout_s=30.0)
    proxy.stall_new(0.3)
    etag, took = _timed(lambda: store.put_if_absent("cluster/controller-lease", b"epoch 1"))
    assert proxy.stalled == 1 and took < 2.0, f"the conditional create took {took:.1f}s"
    with pytest.raises(PreconditionFailed):  # written once: the held attempt never reached S3
        store.put_if_absent("cluster/controller-lease", b"epoch 2")
    for name, call in (
        ("a renewal", lambda: store.put_if_match("cluster/controller-lease", b"epoch 1, renewed", etag)),
        ("a lease read", lambda: get_with_etag(store, "cluster/controller-lease")),
        ("a metadata slot read", lambda: store.get_control("cluster/controller-lease")),
        ("a head", lambda: store.head("cluster/controller-lease")),
    ):
        store = _store(s3_bucket, proxy, control_timeout_s=0.5, read_timeout_s=30.0)  # a fresh pool
        before = proxy.stalled
        proxy.stall_new(0.3)
        _, took = _timed(call)
        assert proxy.stalled == before + 1 and took < 2.0, f"{name} on a stalled connection took {took:.1f}s"
    assert store.get("cluster/controller-lease") == b"epoch 1, renewed"


def test_segment_data_keeps_the_long_read_timeout(s3_bucket: S3Bucket, proxy: CuttingProxy) -> None:
    setup = _store(s3_bucket, proxy)
    setup.put("topics/t/00000.log", b"x" * 1000)
    store = _store(s3_bucket, proxy, control_timeout_s=0.3, read_timeout_s=2.0, max_attempts=1)
    proxy.stall_new(0.3)
    start = time.monotonic()
    with pytest.raises(ObjectStoreUnavailable):  # one attempt: the held one, to its read timeout
        store.get("topics/t/00000.log", 0, 100)
    assert time.monotonic() - start >= 1.8
