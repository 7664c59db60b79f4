"""Object stores for the remote_tier tests: one factory per implementation.

``store_factories`` maps an implementation name to a factory taking the pytest
request (so it can pull fixtures such as the moto server); tests that must run
against every implementation use the ``any_store`` fixture, parametrized over it.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from remote_tier import FileSystemObjectStore, ObjectStore
from remote_tier.s3 import S3ObjectStore
from tests.s3_fixtures import (  # noqa: F401 - fixtures registered for this directory
    MinioEndpoint,
    S3Bucket,
    minio,
    moto_server,
    s3_bucket,
    s3_credentials_env,
)


def filesystem_store(request: pytest.FixtureRequest) -> ObjectStore:
    tmp_path: Path = request.getfixturevalue("tmp_path")
    return FileSystemObjectStore(tmp_path / "bucket")


def moto_store(request: pytest.FixtureRequest) -> ObjectStore:
    bucket: S3Bucket = request.getfixturevalue("s3_bucket")
    # Credentials from the environment (set by the s3_bucket fixture): the AWS chain.
    return S3ObjectStore(
        bucket.bucket,
        "pre/fix",
        endpoint_url=bucket.endpoint_url,
        multipart_threshold=5 * 1024 * 1024,
    )


def minio_store(request: pytest.FixtureRequest) -> ObjectStore:
    endpoint: MinioEndpoint = request.getfixturevalue("minio")
    import boto3

    name = f"strata-{request.node.name.lower()[:40].strip('-_[]')}-{id(request) % 10**6}"
    name = "".join(c if c.isalnum() or c == "-" else "-" for c in name)
    boto3.client(
        "s3",
        endpoint_url=endpoint.endpoint_url,
        region_name="us-east-1",
        aws_access_key_id=endpoint.access_key,
        aws_secret_access_key=endpoint.secret_key,
    ).create_bucket(Bucket=name)
    return S3ObjectStore(
        name,
        endpoint_url=endpoint.endpoint_url,
        access_key=endpoint.access_key,
        secret_key=endpoint.secret_key,
    )


STORE_FACTORIES: dict[str, Callable[[pytest.FixtureRequest], ObjectStore]] = {
    "filesystem": filesystem_store,
    "s3-moto": moto_store,
    "s3-minio": minio_store,
}


@pytest.fixture(params=["filesystem", "s3-moto"])
def any_store(request: pytest.FixtureRequest) -> ObjectStore:
    """A fresh, empty store of each implementation that runs everywhere."""
    return STORE_FACTORIES[request.param](request)
