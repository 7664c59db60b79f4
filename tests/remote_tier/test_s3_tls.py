"""The S3 store over TLS: the endpoint's certificate is verified, with a custom CA bundle
when given, and the credentials never show up in a repr, an error or a log line.

A TLS-terminating proxy (a thread, certificate from the test CA) sits in front of the
session's moto server, so the store talks real HTTPS."""

from __future__ import annotations

import logging
import socket
import ssl
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from remote_tier.errors import ObjectStoreError
from remote_tier.s3 import S3ObjectStore
from remote_tier.url import open_object_store
from tests.s3_fixtures import S3Bucket
from tests.security_fixtures import Pki

SECRET = "secret-that-must-not-be-logged"  # moto accepts any credentials


@pytest.fixture
def https_endpoint(s3_bucket: S3Bucket, pki: Pki) -> Iterator[str]:
    """https://127.0.0.1:PORT in front of the bucket's moto endpoint."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(str(pki.server_cert), str(pki.server_key))
    upstream = s3_bucket.endpoint_url.split("//", 1)[1].rsplit(":", 1)
    listener = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()

    def pipe(src: Any, dst: Any) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.close()
                except OSError:
                    pass

    def serve() -> None:
        listener.settimeout(0.2)
        while not stop.is_set():
            try:
                raw, _ = listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            try:
                client = ctx.wrap_socket(raw, server_side=True)
            except (ssl.SSLError, OSError):
                raw.close()
                continue
            server = socket.create_connection((upstream[0], int(upstream[1])))
            threading.Thread(target=pipe, args=(client, server), daemon=True).start()
            threading.Thread(target=pipe, args=(server, client), daemon=True).start()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield f"https://127.0.0.1:{listener.getsockname()[1]}"
    finally:
        stop.set()
        listener.close()
        thread.join(5)


def test_the_endpoint_certificate_is_verified_with_the_given_ca_bundle(
    s3_bucket: S3Bucket, https_endpoint: str, pki: Pki, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    keys = {"s3_access_key": "AKIDSTRATATEST", "s3_secret_key": SECRET}
    store = open_object_store(f"s3://{s3_bucket.bucket}/tls", s3_endpoint=https_endpoint,
                              s3_ca_bundle=str(pki.ca), **keys)
    store.put("hello", b"over tls")
    assert store.get("hello") == b"over tls"
    with pytest.raises(ObjectStoreError) as refused:  # the system's CAs do not know the test CA
        open_object_store(f"s3://{s3_bucket.bucket}/tls", s3_endpoint=https_endpoint, **keys)
    assert "certificate" in str(refused.value).lower()
    for shown in (repr(store), str(refused.value), repr(refused.value), caplog.text):
        assert SECRET not in shown


def test_credentials_in_the_endpoint_url_are_not_shown(s3_bucket: S3Bucket) -> None:
    host = s3_bucket.endpoint_url.split("//", 1)[1]
    store = S3ObjectStore(s3_bucket.bucket, "x", endpoint_url=f"http://key:hunter2@{host}",
                          access_key="AKIDEXAMPLE", secret_key="hunter2")
    assert "hunter2" not in repr(store) and "hunter2" not in store.endpoint
