"""S3 endpoints for tests: moto's server over real HTTP on loopback, and MinIO.

Fixtures (import them into a conftest, e.g. ``from tests.s3_fixtures import *``):

* ``moto_server`` (session): a :class:`MotoServer` serving moto's S3 on
  ``127.0.0.1:<free port>``; its ``endpoint_url`` is ``http://127.0.0.1:PORT``.
  This is a real HTTP endpoint (boto3 and a broker subprocess talk to it over the
  socket), not ``mock_aws`` patching. ``stop()`` / ``start()`` take the endpoint
  away and bring it back *on the same port with the same buckets and objects*
  (moto keeps its state in this process), for outage tests.
* ``s3_bucket`` (function): a fresh, uniquely named bucket on that server, as
  ``S3Bucket(endpoint_url, bucket)``; for the duration of the test the AWS
  credential variables (``AWS_ACCESS_KEY_ID=testing`` ...) are set in
  ``os.environ`` (so child processes inherit them) and restored afterwards.
* ``minio`` (session): MinIO in a container through testcontainers, as
  ``MinioEndpoint``; skips at once when testcontainers is not installed or no
  Docker engine answers.

Why requests are served one at a time by default: moto (5.2) checks
``If-None-Match`` / ``If-Match`` and then stores the object in two steps with no
lock held across them, so on a threaded server two racing conditional PUTs could
in principle both win, which S3 and MinIO never allow. (The window is small: 190
rounds of 8-16 racing writers on a threaded server did not hit it.) Serving
requests serially makes each conditional PUT atomic, as on the real services.
``MotoServer(threaded=True)`` is there for throughput runs.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import uuid
from collections.abc import Iterator
from typing import NamedTuple
from urllib.parse import urlsplit

import boto3
import pytest
from werkzeug.serving import BaseWSGIServer, make_server

from tests.conftest import free_port

__all__ = [
    "MinioEndpoint",
    "MotoServer",
    "S3Bucket",
    "minio",
    "moto_server",
    "s3_bucket",
    "s3_credentials_env",
]

TEST_ACCESS_KEY = "testing"
TEST_SECRET_KEY = "testing"
TEST_REGION = "us-east-1"
_ERROR_503 = '<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>{code}</Code><Message>{message}</Message></Error>'
_SLOW_DOWN = ("SlowDown", "Please reduce your request rate.")

_CREDENTIAL_ENV = {
    "AWS_ACCESS_KEY_ID": TEST_ACCESS_KEY,
    "AWS_SECRET_ACCESS_KEY": TEST_SECRET_KEY,
    "AWS_DEFAULT_REGION": TEST_REGION,
}
# Variables that could point boto3 at real credentials or another endpoint.
_CLEARED_ENV = (
    "AWS_SESSION_TOKEN",
    "AWS_SECURITY_TOKEN",
    "AWS_PROFILE",
    "AWS_ENDPOINT_URL",
    "AWS_ENDPOINT_URL_S3",
)


class S3Bucket(NamedTuple):
    """A bucket on a test S3 endpoint."""

    endpoint_url: str
    bucket: str


class MinioEndpoint(NamedTuple):
    endpoint_url: str
    access_key: str
    secret_key: str


class MotoServer:
    """moto's S3 server on ``127.0.0.1:port`` in a background thread of this process.

    Requests are served one at a time (see the module docstring). ``stop()`` closes
    the listener; ``start()`` opens it again on the same port, and buckets survive
    (they live in moto's in-process backend). Thread-safe for start/stop from the
    test thread only.
    """

    def __init__(self, port: int | None = None, *, threaded: bool = False) -> None:
        self.port = port or free_port()
        self.threaded = threaded  # True only for throughput runs that need no CAS races
        self.host = "127.0.0.1"
        self._server: BaseWSGIServer | None = None
        self._thread: threading.Thread | None = None
        #: (method, path) of every request served, for tests that count GETs
        self.requests: list[tuple[str, str]] = []
        #: (path, body bytes) of every GET answered, for tests that count bytes read
        self.gets: list[tuple[str, int]] = []
        self._failing: tuple[str, str] | None = None
        self._answer = _SLOW_DOWN
        self._failed = threading.Event()

    @property
    def endpoint_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def running(self) -> bool:
        return self._server is not None

    def start(self) -> MotoServer:
        if self._server is not None:
            return self
        from moto.moto_server.werkzeug_app import (  # heavy, test-only import
            DomainDispatcherApplication,
            create_backend_app,
        )

        logging.getLogger("werkzeug").setLevel(logging.ERROR)  # one line per request otherwise
        moto_app = DomainDispatcherApplication(create_backend_app)

        def app(environ: dict, start_response: object) -> object:
            method, path = environ["REQUEST_METHOD"], environ.get("PATH_INFO", "")
            self.requests.append((method, path))
            failing = self._failing
            if failing is not None and method == failing[0] and path.endswith(failing[1]):
                # the body is read first, as S3 does: left unread, it would be taken for the
                # next request on the same keep-alive connection, which then hangs
                length = int(environ.get("CONTENT_LENGTH") or 0)
                if length > 0:
                    environ["wsgi.input"].read(length)
                self._failed.set()
                start_response("503 Service Unavailable", [("Content-Type", "application/xml")])
                code, message = self._answer
                return [_ERROR_503.format(code=code, message=message).encode()]
            body = moto_app(environ, start_response)
            if method != "GET":
                return body
            data = b"".join(body)
            self.gets.append((path, len(data)))
            return [data]

        self._server = make_server(self.host, self.port, app, threaded=self.threaded)
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": 0.05},
            name=f"moto-server-{self.port}",
            daemon=True,
        )
        self._thread.start()
        return self

    def fail(self, method: str, path_suffix: str, answer: tuple[str, str] = _SLOW_DOWN) -> threading.Event:
        """Answer ``503`` with S3's error ``answer`` (code, message; ``SlowDown`` by default) to
        ``method`` on paths ending in ``path_suffix`` until :meth:`heal`.

        Only those requests fail (the rest are served as usual: requests are served
        one at a time, so holding one instead would stall them all). Returns an event
        set once a request has been failed.
        """
        self._failed.clear()
        self._answer = answer
        self._failing = (method, path_suffix)
        return self._failed

    def heal(self) -> None:
        """Serve every request again."""
        self._failing = None

    def stop(self) -> None:
        """Close the listener: new connections are refused until :meth:`start`."""
        server, thread = self._server, self._thread
        self._server = self._thread = None
        if server is not None:
            server.shutdown()
            server.server_close()
        if thread is not None:
            thread.join(timeout=10)

    def create_bucket(self, name: str | None = None) -> S3Bucket:
        name = name or f"strata-test-{uuid.uuid4().hex[:16]}"
        client = boto3.client(
            "s3",
            endpoint_url=self.endpoint_url,
            region_name=TEST_REGION,
            aws_access_key_id=TEST_ACCESS_KEY,
            aws_secret_access_key=TEST_SECRET_KEY,
        )
        client.create_bucket(Bucket=name)
        return S3Bucket(self.endpoint_url, name)

    def __repr__(self) -> str:
        return f"MotoServer({self.endpoint_url}, running={self.running})"


_shared: MotoServer | None = None


@pytest.fixture(scope="session")
def moto_server() -> Iterator[MotoServer]:
    """One moto S3 server for the session (shared if this fixture is registered twice)."""
    global _shared
    if _shared is not None:
        yield _shared
        return
    server = MotoServer().start()
    _shared = server
    try:
        yield server
    finally:
        _shared = None
        server.stop()


@pytest.fixture
def s3_credentials_env(monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """Test credentials in ``os.environ`` for one test (restored afterwards)."""
    for name in _CLEARED_ENV:
        monkeypatch.delenv(name, raising=False)
    for name, value in _CREDENTIAL_ENV.items():
        monkeypatch.setenv(name, value)
    return dict(_CREDENTIAL_ENV)


@pytest.fixture
def s3_bucket(moto_server: MotoServer, s3_credentials_env: dict[str, str]) -> S3Bucket:
    """A fresh bucket on the session's moto server; AWS_* test credentials set meanwhile.

    If a test stopped the server or left requests failing, that is undone first.
    """
    moto_server.heal()
    moto_server.start()
    return moto_server.create_bucket()


def _docker_problem() -> str | None:
    """Why no Docker engine answers at ``DOCKER_HOST`` (or the default socket), or None.

    Probes with a plain socket, closed in every case: docker-py's own client leaks its
    socket when the engine is missing, which this suite's warning filters turn into
    an error.
    """
    url = urlsplit(os.environ.get("DOCKER_HOST") or "unix:///var/run/docker.sock")
    try:
        if url.scheme in ("unix", "http+unix"):
            if not os.path.exists(url.path):
                return f"{url.path} does not exist"
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
                s.settimeout(3)
                s.connect(url.path)
        elif url.scheme in ("tcp", "http", "https"):
            with socket.create_connection((url.hostname or "localhost", url.port or 2375), 3):
                pass
        else:
            return f"unsupported DOCKER_HOST {url.geturl()!r}"
    except OSError as err:
        return f"{url.geturl()}: {err}"
    return None


@pytest.fixture(scope="session")
def minio() -> Iterator[MinioEndpoint]:
    """MinIO in a container; skips (fast) when there is no Docker engine."""
    try:
        from testcontainers.core.container import DockerContainer
        from testcontainers.core.wait_strategies import HttpWaitStrategy
    except ImportError as err:
        pytest.skip(f"testcontainers is not installed ({err}); pip install -e '.[test]'")
    problem = _docker_problem()
    if problem is not None:
        pytest.skip(f"no Docker engine reachable for MinIO: {problem}")
    access, secret = "strataminio", "strataminio-secret"
    container = (
        DockerContainer(os.environ.get("STRATA_MINIO_IMAGE", "minio/minio:latest"))
        .with_env("MINIO_ROOT_USER", access)
        .with_env("MINIO_ROOT_PASSWORD", secret)
        .with_command("server /data")
        .with_exposed_ports(9000)
        .waiting_for(HttpWaitStrategy(9000, "/minio/health/live"))
    )
    with container:
        host = container.get_container_host_ip()
        port = container.get_exposed_port(9000)
        yield MinioEndpoint(f"http://{host}:{port}", access, secret)
