"""Behaviour specific to S3ObjectStore, against moto's server over HTTP."""

from __future__ import annotations

from pathlib import Path

import boto3
import botocore.exceptions
import pytest

from remote_tier import FileSystemObjectStore, ObjectStoreUnavailable, PreconditionFailed
from remote_tier.errors import ObjectStoreUnreachable
from remote_tier.s3 import S3ObjectStore
from remote_tier.url import open_object_store
from tests.conftest import free_port
from tests.s3_fixtures import MotoServer, S3Bucket


def _client(bucket: S3Bucket):  # type: ignore[no-untyped-def]
    return boto3.client("s3", endpoint_url=bucket.endpoint_url)


def test_moto_server_enforces_conditional_puts_over_http(s3_bucket: S3Bucket) -> None:
    """The premise of our compare-and-set: the endpoint itself answers 412."""
    client = _client(s3_bucket)
    first = client.put_object(Bucket=s3_bucket.bucket, Key="k", Body=b"1", IfNoneMatch="*")
    with pytest.raises(botocore.exceptions.ClientError) as exists:
        client.put_object(Bucket=s3_bucket.bucket, Key="k", Body=b"2", IfNoneMatch="*")
    assert exists.value.response["ResponseMetadata"]["HTTPStatusCode"] == 412
    with pytest.raises(botocore.exceptions.ClientError) as stale:
        client.put_object(Bucket=s3_bucket.bucket, Key="k", Body=b"3", IfMatch='"0000"')
    assert stale.value.response["ResponseMetadata"]["HTTPStatusCode"] == 412
    client.put_object(Bucket=s3_bucket.bucket, Key="k", Body=b"4", IfMatch=first["ETag"])
    body = client.get_object(Bucket=s3_bucket.bucket, Key="k")["Body"].read()
    assert body == b"4"


def test_objects_live_under_the_prefix_and_keys_come_back_without_it(s3_bucket: S3Bucket) -> None:
    store = S3ObjectStore(s3_bucket.bucket, "/strata/one/", endpoint_url=s3_bucket.endpoint_url)
    store.put("topics/x", b"1")
    raw = _client(s3_bucket).list_objects_v2(Bucket=s3_bucket.bucket)["Contents"]
    assert [o["Key"] for o in raw] == ["strata/one/topics/x"]
    assert [i.key for i in store.list("")] == ["topics/x"]


def test_large_files_go_up_as_multipart_and_read_back_by_range(
    s3_bucket: S3Bucket, tmp_path: Path
) -> None:
    store = S3ObjectStore(
        s3_bucket.bucket,
        endpoint_url=s3_bucket.endpoint_url,
        multipart_threshold=5 * 1024 * 1024,
        multipart_chunksize=5 * 1024 * 1024,
    )
    source = tmp_path / "big.log"
    chunk = bytes(range(256)) * 4096  # 1 MiB
    source.write_bytes(chunk * 11)
    etag = store.put_file("big.log", source)
    assert etag.endswith("-3")  # S3's multipart etag: <md5 of part md5s>-<parts>
    assert store.head("big.log").size == 11 * len(chunk)
    assert store.get("big.log", 6 * len(chunk) - 5, 6 * len(chunk) + 5) == chunk[-5:] + chunk[:5]


def test_a_missing_bucket_is_unavailable_with_a_message_saying_so(s3_bucket: S3Bucket) -> None:
    store = S3ObjectStore("no-such-bucket-here", endpoint_url=s3_bucket.endpoint_url)
    with pytest.raises(ObjectStoreUnavailable, match="bucket 'no-such-bucket-here' does not exist") as raised:
        store.check()
    assert not isinstance(raised.value, ObjectStoreUnreachable)  # no wait mends it: a start ends at once
    with pytest.raises(ObjectStoreUnavailable, match="does not exist at http://127.0.0.1"):
        store.put("k", b"x")


def test_server_errors_are_unreachable_what_a_start_waits_out(
    s3_bucket: S3Bucket, moto_server: MotoServer
) -> None:
    server = moto_server
    store = S3ObjectStore(s3_bucket.bucket, endpoint_url=s3_bucket.endpoint_url, max_attempts=1)
    store.put("k", b"v")
    # S3's own busy answer, and a starting MinIO's (a 503 with a code of its own)
    for answer in (("SlowDown", "Please reduce your request rate."),
                   ("XMinioServerNotInitialized", "Server not initialized yet, please try again.")):
        server.fail("GET", "/k", answer)
        try:
            with pytest.raises(ObjectStoreUnreachable, match=answer[0]):
                store.get("k")
            with pytest.raises(ObjectStoreUnreachable, match=answer[0]):
                store.get_with_etag("k")
        finally:
            server.heal()
    server.fail("HEAD", "/k", ("XMinioServerNotInitialized", "Server not initialized yet."))
    try:
        with pytest.raises(ObjectStoreUnreachable, match="503"):
            store.head("k")
    finally:
        server.heal()
    assert store.get("k") == b"v"


def test_an_endpoint_that_does_not_answer_is_unavailable_naming_it(
    s3_credentials_env: dict[str, str],
) -> None:
    endpoint = f"http://127.0.0.1:{free_port()}"
    store = S3ObjectStore("bucket", endpoint_url=endpoint, max_attempts=1)
    with pytest.raises(ObjectStoreUnreachable, match=f"endpoint URL {endpoint}"):
        store.get("k")
    with pytest.raises(ObjectStoreUnreachable, match=f"endpoint URL {endpoint}"):
        store.check()


def test_missing_credentials_are_unavailable_saying_what_to_set(
    s3_bucket: S3Bucket, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.delenv(name)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    store = S3ObjectStore(s3_bucket.bucket, endpoint_url=s3_bucket.endpoint_url)
    with pytest.raises(ObjectStoreUnavailable, match="AWS_ACCESS_KEY_ID"):
        store.check()


def test_explicit_credentials_are_used_without_the_environment(
    s3_bucket: S3Bucket, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.delenv(name)
    store = S3ObjectStore(
        s3_bucket.bucket,
        endpoint_url=s3_bucket.endpoint_url,
        access_key="explicit",
        secret_key="explicit-secret",
    )
    store.put("k", b"v")
    assert store.get("k") == b"v"


def test_a_stopped_endpoint_is_unavailable_and_data_survives_a_restart(
    s3_credentials_env: dict[str, str],
) -> None:
    server = MotoServer().start()
    try:
        bucket = server.create_bucket()
        store = S3ObjectStore(bucket.bucket, endpoint_url=bucket.endpoint_url, max_attempts=1)
        store.put("k", b"kept")
        server.stop()
        with pytest.raises(ObjectStoreUnavailable):
            store.get("k")
        server.start()
        assert store.get("k") == b"kept"
    finally:
        server.stop()


def test_put_if_match_on_a_deleted_object_is_a_lost_precondition(s3_bucket: S3Bucket) -> None:
    store = S3ObjectStore(s3_bucket.bucket, endpoint_url=s3_bucket.endpoint_url)
    etag = store.put("k", b"1")
    store.delete("k")
    with pytest.raises(PreconditionFailed, match="does not exist"):
        store.put_if_match("k", b"2", etag)


def test_open_object_store_parses_file_and_s3_urls(s3_bucket: S3Bucket, tmp_path: Path) -> None:
    fs = open_object_store(f"file://{tmp_path}/bucket")
    assert isinstance(fs, FileSystemObjectStore) and fs.root == tmp_path / "bucket"
    s3 = open_object_store(f"s3://{s3_bucket.bucket}/a/b/", s3_endpoint=s3_bucket.endpoint_url)
    assert isinstance(s3, S3ObjectStore)
    assert (s3.bucket, s3.prefix) == (s3_bucket.bucket, "a/b/")
    s3.put("x", b"1")
    assert [
        o["Key"] for o in _client(s3_bucket).list_objects_v2(Bucket=s3_bucket.bucket)["Contents"]
    ] == ["a/b/x"]


def test_open_object_store_checks_the_bucket_at_once(s3_bucket: S3Bucket) -> None:
    with pytest.raises(ObjectStoreUnavailable, match="does not exist"):
        open_object_store("s3://missing-bucket", s3_endpoint=s3_bucket.endpoint_url)


@pytest.mark.parametrize("url", ["http://x/y", "s3://", "file://host/path", "file://"])
def test_open_object_store_rejects_urls_it_cannot_use(url: str) -> None:
    with pytest.raises(ValueError, match="object store URL"):
        open_object_store(url)
