"""Controllers over a real FileSystemObjectStore in a temp dir, and cluster fixtures:
a fake monotonic clock and store factories over the filesystem and moto's S3 server."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

import pytest

from controller import BrokerConfig, ClusterController, Controller, ObjectStoreMetadataStore
from remote_tier import FileSystemObjectStore, ObjectInfo, ObjectStore
from remote_tier.s3 import S3ObjectStore
from tests.controller.cluster_helpers import (
    FakeClock,
    join,
    make_cluster_controller,
    tick_until_active,
)
from tests.s3_fixtures import (  # noqa: F401 - fixtures registered for this directory
    TEST_ACCESS_KEY,
    TEST_REGION,
    TEST_SECRET_KEY,
    MotoServer,
    moto_server,
)

MakeController = Callable[..., Controller]


@pytest.fixture
def object_store(tmp_path: Path) -> FileSystemObjectStore:
    return FileSystemObjectStore(tmp_path / "bucket")


@pytest.fixture
def make_controller(object_store: FileSystemObjectStore) -> MakeController:
    """A new Controller on the shared store, with the given broker overrides."""

    def make(overrides: Mapping[str, str] | None = None) -> Controller:
        return Controller(ObjectStoreMetadataStore(object_store), BrokerConfig(overrides))

    return make


@pytest.fixture
def controller(make_controller: MakeController) -> Controller:
    return make_controller()


# -- cluster tests: a fake monotonic clock and both store implementations ----------------------


MakeStore = Callable[[], ObjectStore]


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def active(make_fs_store: MakeStore, clock: FakeClock) -> ClusterController:
    """An active ClusterController (node 1) on the filesystem store, no broker registered."""
    return tick_until_active(clock, [make_cluster_controller(make_fs_store(), clock, 1)])


@pytest.fixture
def ctl3(active: ClusterController) -> ClusterController:
    """``active`` with brokers 1, 2 and 3 registered and unfenced."""
    for node in (1, 2, 3):
        join(active, node)
    return active


class PrefixedStore:
    """An ObjectStore under ``prefix`` of another one: each test gets a fresh "bucket"
    on one session-wide S3 client (a boto3 client takes ~0.3 s to create)."""

    def __init__(self, inner: S3ObjectStore, prefix: str) -> None:
        self.inner, self.prefix = inner, prefix.rstrip("/") + "/"

    def get(self, key: str, start: int | None = None, end: int | None = None) -> bytes:
        return self.inner.get(self.prefix + key, start, end)

    def get_with_etag(self, key: str) -> tuple[bytes, str]:
        return self.inner.get_with_etag(self.prefix + key)

    def head(self, key: str) -> ObjectInfo:
        info = self.inner.head(self.prefix + key)
        return ObjectInfo(key, info.size, info.etag, info.last_modified_ms)

    def put(self, key: str, data: bytes) -> str:
        return self.inner.put(self.prefix + key, data)

    def put_file(self, key: str, path: Path) -> str:
        return self.inner.put_file(self.prefix + key, path)

    def put_if_absent(self, key: str, data: bytes) -> str:
        return self.inner.put_if_absent(self.prefix + key, data)

    def put_if_match(self, key: str, data: bytes, etag: str) -> str:
        return self.inner.put_if_match(self.prefix + key, data, etag)

    def list(self, prefix: str) -> Iterator[ObjectInfo]:
        cut = len(self.prefix)
        for info in self.inner.list(self.prefix + prefix):
            yield ObjectInfo(info.key[cut:], info.size, info.etag, info.last_modified_ms)

    def delete(self, key: str) -> None:
        self.inner.delete(self.prefix + key)


@pytest.fixture(scope="session")
def shared_s3(moto_server: MotoServer) -> S3ObjectStore:
    """One S3 client on one bucket of the session's moto server (explicit test credentials)."""
    bucket = moto_server.start().create_bucket()
    return S3ObjectStore(
        bucket.bucket,
        endpoint_url=bucket.endpoint_url,
        region=TEST_REGION,
        access_key=TEST_ACCESS_KEY,
        secret_key=TEST_SECRET_KEY,
    )


@pytest.fixture(params=["filesystem", "s3-moto"])
def make_store(request: pytest.FixtureRequest, tmp_path: Path) -> MakeStore:
    """A fresh, empty store per test, over the filesystem and over moto's S3 server;
    ``make_store()`` returns a client of it (the same one: clients are thread-safe)."""
    store: ObjectStore
    if request.param == "filesystem":
        store = FileSystemObjectStore(tmp_path / "bucket")
    else:
        moto: MotoServer = request.getfixturevalue("moto_server")
        moto.start()  # another test may have stopped it
        store = PrefixedStore(request.getfixturevalue("shared_s3"), f"t-{uuid.uuid4().hex}")
    return lambda: store


@pytest.fixture
def make_fs_store(tmp_path: Path) -> MakeStore:
    """Like ``make_store``, filesystem only (for tests of logic that needs a store)."""
    store = FileSystemObjectStore(tmp_path / "bucket")
    return lambda: store
