"""Stores for the diskless tests: a directory and the moto S3 server over HTTP."""

from __future__ import annotations

from pathlib import Path

import pytest

from remote_tier import FileSystemObjectStore, ObjectStore
from remote_tier.s3 import S3ObjectStore
from tests.s3_fixtures import S3Bucket, moto_server, s3_bucket, s3_credentials_env  # noqa: F401 - fixtures


@pytest.fixture(params=["filesystem", "s3-moto"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> ObjectStore:
    """A fresh, empty store of each kind that runs everywhere."""
    if request.param == "filesystem":
        return FileSystemObjectStore(tmp_path / "bucket")
    bucket: S3Bucket = request.getfixturevalue("s3_bucket")
    return S3ObjectStore(bucket.bucket, "pre", endpoint_url=bucket.endpoint_url)
