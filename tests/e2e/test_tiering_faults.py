"""Tiered storage under faults: a broker subprocess on moto's S3 server over HTTP.

* The S3 endpoint goes away for a while: producing continues, nothing that is not
  in the bucket is deleted locally, uploads resume when it returns, no record is
  lost or duplicated.
* ``kill -9`` in the middle of an upload (held at the manifest commit by a proxy
  in front of the endpoint, before and after the commit reached the bucket): after
  restart every sealed segment is in the manifest exactly once and the startup
  clean-up leaves no object that the manifest does not reference.
* ``kill -9`` and a restart whose manifest reads fail: until the broker has
  read a partition's manifest it answers the reads that need it (the earliest
  offset, a fetch below the local log start) with the retriable
  REPLICA_NOT_AVAILABLE, never with the local log start; the live tail is served
  meanwhile, and a consumer from the beginning gets every record.
* Bad object-store configuration (wrong endpoint, missing bucket, bad
  credentials) stops ``strata up`` at once with exit code 1 and a message naming
  what to fix.
"""

from __future__ import annotations

import itertools
import json
import os
import select
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kafka.protocol.consumer import ListOffsetsRequest

from tests.conftest import BrokerProcess, free_port, subprocess_env
from tests.e2e import helpers
from tests.e2e import rawkafka as rk
from tests.s3_fixtures import MotoServer, S3Bucket

SEGMENT_BYTES = 64 * 1024
PREFIX = "cluster-a"


def _value(i: int) -> bytes:
    return b"%08d:" % i + b"v" * 150


def _manifest(s3: Any, bucket: str) -> dict[str, Any] | None:
    keys = [k for k in helpers.s3_keys(s3, bucket, f"{PREFIX}/topics/") if k.endswith("/manifest.json")]
    if not keys:
        return None
    (key,) = keys
    return json.loads(s3.get_object(Bucket=bucket, Key=key)["Body"].read())


def _manifest_in_backend(bucket: str) -> dict[str, Any] | None:
    """The manifest straight from moto's in-process backend (works while the endpoint is down)."""
    from moto.core import DEFAULT_ACCOUNT_ID
    from moto.s3.models import s3_backends

    keys = s3_backends[DEFAULT_ACCOUNT_ID]["aws"].buckets[bucket].keys
    found = [k for k in list(keys.keys()) if k.startswith(f"{PREFIX}/topics/") and k.endswith("/manifest.json")]
    if not found:
        return None
    (key,) = found
    return json.loads(keys[key].value)


def _next_offset(manifest: dict[str, Any] | None) -> int:
    return manifest["segments"][-1]["last_offset"] + 1 if manifest and manifest["segments"] else 0


def _local_bases(data_dir: Path, topic: str) -> list[int]:
    return sorted(int(p.stem) for p in (data_dir / "logs" / f"{topic}-0").glob("*.log"))


def _partition_state(broker: BrokerProcess, topic: str) -> dict[str, Any]:
    with urllib.request.urlopen(f"{broker.admin_url}/v1/topics/{topic}/partitions", timeout=10) as r:
        (state,) = json.load(r)["partitions"]
    return state


def _assert_dense(manifest: dict[str, Any]) -> None:
    segments = manifest["segments"]
    assert segments and segments[0]["base_offset"] == 0
    bases = [s["base_offset"] for s in segments]
    assert len(bases) == len(set(bases)), f"a segment is in the manifest twice: {bases}"
    for prev, nxt in itertools.pairwise(segments):
        assert nxt["base_offset"] == prev["last_offset"] + 1, (prev, nxt)


def _assert_all_uploaded_and_local_gone(b: BrokerProcess, s3: Any, bucket: str, topic: str) -> dict[str, Any]:
    """Waits until every sealed segment is in the manifest and only the active one is local."""

    def settled() -> dict[str, Any] | None:
        bases = _local_bases(b.data_dir, topic)
        manifest = _manifest(s3, bucket)
        if len(bases) == 1 and _next_offset(manifest) == bases[0]:
            return manifest
        return None

    manifest = helpers.wait_until(settled, "every sealed segment uploaded and its local copy deleted", 90)
    _assert_dense(manifest)
    return manifest


def _assert_nothing_dangles(s3: Any, bucket: str, manifest: dict[str, Any]) -> None:
    referenced = {f"{s['base_offset']:020d}-{s['upload_id']}" for s in manifest["segments"]}
    objects = [k for k in helpers.s3_keys(s3, bucket, f"{PREFIX}/topics/") if not k.endswith("/manifest.json")]
    names = {k.rsplit("/", 1)[1].rsplit(".", 1)[0] for k in objects}
    assert names == referenced, f"unreferenced objects: {sorted(names - referenced)}"
    # .log, .index, .timeindex each, plus the .snapshot / .txnindex the manifest lists
    extra = sum(bool(s["producer_snapshot_bytes"]) + bool(s["txn_index_bytes"]) for s in manifest["segments"])
    assert len(objects) == 3 * len(referenced) + extra


def _produce(bootstrap: str, topic: str, start: int, count: int) -> list[int]:
    """Records ``start .. start+count-1`` (acks=all), in batches well under segment.bytes."""
    return helpers.produce_values(bootstrap, topic, (_value(i) for i in range(start, start + count)),
                                  **{"batch.size": 16384})


def _assert_reads_back(b: BrokerProcess, topic: str, total: int) -> None:
    msgs = helpers.consume(b.bootstrap, topic, [0], total, timeout=90)
    assert [m.offset() for m in msgs] == list(range(total))
    assert [m.value() for m in msgs] == [_value(i) for i in range(total)]


def _tiered_sets(**extra: str) -> dict[str, str]:
    return {
        "log.segment.bytes": str(SEGMENT_BYTES),
        "remote.log.manager.task.interval.ms": "200",
        "log.retention.check.interval.ms": "200",
        "log.local.retention.bytes": "0",
        "log.segment.delete.delay.ms": "0",
        **extra,
    }


def _tiered_broker_with_records(
    start_broker: Any, s3_bucket: S3Bucket, name: str, count: int
) -> tuple[BrokerProcess, str]:
    """A tiered broker on ``s3_bucket`` and a new topic holding records ``0 .. count-1``."""
    endpoint, bucket = s3_bucket
    b = start_broker(sets=_tiered_sets(),
                     args=["--object-store", f"s3://{bucket}/{PREFIX}", "--s3-endpoint", endpoint])
    topic = helpers.topic_name(name)
    helpers.create_topic(b.bootstrap, topic)
    _produce(b.bootstrap, topic, 0, count)
    return b, topic


# -- the endpoint goes away ------------------------------------------------------------


def test_uploads_wait_out_an_s3_outage_and_nothing_unuploaded_is_deleted(
    start_broker: Any, s3_bucket: S3Bucket, moto_server: MotoServer
) -> None:
    endpoint, bucket = s3_bucket
    s3 = helpers.s3_client(endpoint)
    before = 1500
    b, topic = _tiered_broker_with_records(start_broker, s3_bucket, "outage", before)
    helpers.wait_until(lambda: len((_manifest(s3, bucket) or {"segments": []})["segments"]) >= 2, "first uploads")

    during = 2500
    try:
        moto_server.stop()
        # producing goes on: every record acknowledged while the bucket is unreachable
        offsets = _produce(b.bootstrap, topic, before, during)
        assert offsets == list(range(before, before + during))
        # the broker tried to upload and failed (it noticed the outage) ...
        state = helpers.wait_until(lambda: (s := _partition_state(b, topic))["upload_failures"] > 0 and s,
                      "the broker to notice the outage", 90)
        assert state["last_upload_error"]
        # ... and deleted nothing the bucket does not hold: every offset from the
        # manifest's next offset on is still in a local segment file
        frozen = _manifest_in_backend(bucket)
        remote_next = _next_offset(frozen)
        bases = _local_bases(b.data_dir, topic)
        assert bases[0] <= remote_next, (bases, remote_next)
        assert len(bases) >= 5  # the segments sealed during the outage are all still here
        assert state["local_log_start_offset"] <= remote_next
        assert state["high_watermark"] == before + during
        # the live tail is still served from local disk
        tail = helpers.consume(b.bootstrap, topic, [0], 10, start=before + during - 10)
        assert [m.value() for m in tail] == [_value(i) for i in range(before + during - 10, before + during)]
        assert b.running
    finally:
        moto_server.start()

    # uploads resume, local copies go, and the history is whole: no loss, no duplicate
    manifest = _assert_all_uploaded_and_local_gone(b, s3, bucket, topic)
    assert sum(s["record_count"] for s in manifest["segments"]) == _next_offset(manifest)
    _assert_reads_back(b, topic, before + during)
    assert b.running


# -- a restart while the manifests cannot be read -------------------------------------------

REPLICA_NOT_AVAILABLE = 9


def _earliest(bootstrap: str, topic: str) -> tuple[int, int]:
    """(error code, offset) of ListOffsets(EARLIEST) for partition 0."""
    part = ListOffsetsRequest.ListOffsetsTopic.ListOffsetsPartition(partition_index=0, timestamp=-2)
    request = ListOffsetsRequest(replica_id=-1, isolation_level=0, topics=[
        ListOffsetsRequest.ListOffsetsTopic(name=topic, partitions=[part])])
    (answer,) = rk.call(bootstrap, request, 7).topics[0].partitions
    return int(answer.error_code), int(answer.offset)


def test_history_is_never_skipped_while_a_restarted_broker_reads_its_manifests(
    start_broker: Any, s3_bucket: S3Bucket, moto_server: MotoServer
) -> None:
    endpoint, bucket = s3_bucket
    total = 1500
    b, topic = _tiered_broker_with_records(start_broker, s3_bucket, "restart-unread", total)
    _assert_all_uploaded_and_local_gone(b, helpers.s3_client(endpoint), bucket, topic)
    (local_start,) = _local_bases(b.data_dir, topic)
    assert 0 < local_start < total

    b.kill()
    failed = moto_server.fail("GET", "/manifest.json")
    try:
        b.start()
        assert failed.wait(60), "the restarted broker did not read its manifest"
        # only the manifest says where the log starts: a retriable error until it is read
        # (the local start here would send a consumer past every record in the bucket)
        assert _earliest(b.bootstrap, topic) == (REPLICA_NOT_AVAILABLE, -1)
        assert rk.fetch(b.bootstrap, topic, 0, 0).error_code == REPLICA_NOT_AVAILABLE
        # the live tail needs no manifest
        tail = helpers.consume(b.bootstrap, topic, [0], total - local_start, start=local_start)
        assert [m.value() for m in tail] == [_value(i) for i in range(local_start, total)]
        # a consumer from the beginning retries until the manifest is in, then reads it all
        threading.Timer(1.0, moto_server.heal).start()
        _assert_reads_back(b, topic, total)
    finally:
        moto_server.heal()
    assert _earliest(b.bootstrap, topic) == (0, 0)


# -- kill -9 in the middle of an upload ---------------------------------------------------


class ManifestStallingProxy:
    """A TCP proxy in front of the S3 endpoint that can hold a manifest PUT.

    ``stall = "request"``: the next manifest PUT is never forwarded (the segment's
    objects are up, the commit is not). ``stall = "response"``: it is forwarded and
    committed, but the answer never reaches the broker. ``stalled`` is set once a
    PUT is being held. The upstream connection is opened only for requests that are
    forwarded (moto serves one request at a time, so an idle connection would block it).
    """

    def __init__(self, upstream_port: int) -> None:
        self.upstream_port = upstream_port
        self.stall: str | None = None
        self.stalled = threading.Event()
        self._server = socket.create_server(("127.0.0.1", 0))
        self.port = self._server.getsockname()[1]
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()
        self._closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def endpoint_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def arm(self, mode: str) -> None:
        self.stalled.clear()
        self.stall = mode

    def close(self) -> None:
        self._closed = True
        with self._lock:
            socks, self._sockets = self._sockets, []
        for s in [self._server, *socks]:
            try:
                s.close()
            except OSError:
                pass

    def _track(self, s: socket.socket) -> socket.socket:
        with self._lock:
            self._sockets.append(s)
        return s

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._server.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(self._track(client),), daemon=True).start()

    def _serve(self, client: socket.socket) -> None:
        try:
            head = b""
            while b"\r\n" not in head:
                chunk = client.recv(65536)
                if not chunk:
                    return
                head += chunk
            line = head.split(b"\r\n", 1)[0]
            held = self.stall if line.startswith(b"PUT ") and b"/manifest.json" in line else None
            if held is not None:
                self.stall = None  # one PUT only
            if held == "request":
                self.stalled.set()
                self._drain(client)  # swallow it until the broker dies
                return
            upstream = self._track(socket.create_connection(("127.0.0.1", self.upstream_port)))
            upstream.sendall(head)
            self._pump(client, upstream, hold_response=held == "response")
        except (OSError, ValueError):
            # close() from the test thread closes these sockets under us: select()
            # then raises ValueError on the fd of -1, recv() raises OSError.
            pass
        finally:
            client.close()

    def _drain(self, client: socket.socket) -> None:
        while client.recv(65536):
            pass

    def _pump(self, client: socket.socket, upstream: socket.socket, hold_response: bool) -> None:
        try:
            peers = {client: upstream, upstream: client}
            while True:
                ready, _, _ = select.select(list(peers), [], [], 1.0)
                if self._closed:
                    return
                for s in ready:
                    data = s.recv(65536)
                    if not data:
                        return
                    if s is upstream and hold_response:
                        self.stalled.set()  # committed in the bucket; the answer is lost
                        continue
                    peers[s].sendall(data)
        finally:
            upstream.close()


@pytest.fixture
def stalling_proxy(s3_bucket: S3Bucket, moto_server: MotoServer) -> Iterator[ManifestStallingProxy]:
    proxy = ManifestStallingProxy(moto_server.port)
    yield proxy
    proxy.close()


def test_kill_9_during_uploads_leaves_each_segment_once_and_nothing_dangling(
    start_broker: Any, s3_bucket: S3Bucket, stalling_proxy: ManifestStallingProxy
) -> None:
    endpoint, bucket = s3_bucket
    s3 = helpers.s3_client(endpoint)
    proxy = stalling_proxy
    b = start_broker(
        sets=_tiered_sets(**{"remote.log.orphan.cleanup.min.age.ms": "0"}),
        args=["--object-store", f"s3://{bucket}/{PREFIX}", "--s3-endpoint", proxy.endpoint_url],
    )
    topic = helpers.topic_name("kill9")
    helpers.create_topic(b.bootstrap, topic)
    total = 0

    def produce(n: int) -> None:
        nonlocal total
        _produce(b.bootstrap, topic, total, n)
        total += n

    produce(1000)
    helpers.wait_until(lambda: len((_manifest(s3, bucket) or {"segments": []})["segments"]) >= 2, "first uploads")

    for mode in ("request", "response"):
        committed_before = _manifest(s3, bucket)
        proxy.arm(mode)
        produce(1000)  # seals more segments; the next upload's manifest commit is held
        assert proxy.stalled.wait(60), "no manifest commit was attempted"
        manifest = _manifest(s3, bucket)
        objects = [k for k in helpers.s3_keys(s3, bucket, f"{PREFIX}/topics/") if not k.endswith("manifest.json")]
        referenced = {s["upload_id"] for s in manifest["segments"]}
        in_flight = [k for k in objects if k.rsplit("-", 1)[1].split(".")[0] not in referenced]
        if mode == "request":
            # the segment's objects are in the bucket, not yet in the manifest
            assert manifest == committed_before or _next_offset(manifest) >= _next_offset(committed_before)
            # .log, .index, .timeindex and the producer snapshot (format 2)
            assert len(in_flight) == 4 and any(k.endswith(".snapshot") for k in in_flight), objects
        else:
            # the commit reached the bucket; the broker never heard back
            assert _next_offset(manifest) > _next_offset(committed_before)
        b.kill()  # kill -9, in the middle of the upload
        epoch = _manifest(s3, bucket)["leader_epoch"]
        b.start()
        # the restarted leader's first round claims the manifest with its new epoch (a write
        # of its own): the next stall is for an upload's commit, not for that claim
        helpers.wait_until(lambda: _manifest(s3, bucket)["leader_epoch"] > epoch, "the new leader's claim")

    # no more stalls: after the last restart everything settles
    produce(500)
    manifest = _assert_all_uploaded_and_local_gone(b, s3, bucket, topic)
    _assert_nothing_dangles(s3, bucket, manifest)
    _assert_reads_back(b, topic, total)


# -- bad configuration -------------------------------------------------------------------


@pytest.fixture
def authenticating_s3() -> Iterator[str]:
    """A moto server (own process) that checks credentials: unknown access keys get 403."""
    port = free_port()
    env = {**subprocess_env(), "INITIAL_NO_AUTH_ACTION_COUNT": "0"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            assert proc.poll() is None, "moto server exited"
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                    break
            except OSError:
                assert time.monotonic() < deadline, "moto server did not listen"
                time.sleep(0.1)
        yield f"http://127.0.0.1:{port}"
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def _strata_up(tmp_path: Path, url: str, endpoint: str, env: dict[str, str],
               more: tuple[str, ...] = ()) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "service", "up", "--data-dir", str(tmp_path / "data"),
           "--listen", f"127.0.0.1:{free_port()}", "--http", f"127.0.0.1:{free_port()}",
           "--object-store", url, "--s3-endpoint", endpoint, *more]
    return subprocess.run(cmd, check=False, capture_output=True, text=True, timeout=120, env=env)


@pytest.mark.parametrize("fault", ["wrong endpoint", "missing bucket", "bad credentials"])
def test_bad_object_store_configuration_stops_start_with_a_clear_message(
    fault: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    env = subprocess_env()
    more: tuple[str, ...] = ()
    if fault == "wrong endpoint":
        endpoint = f"http://127.0.0.1:{free_port()}"  # nothing listens there
        bucket = "strata-bucket"
        env.update(AWS_ACCESS_KEY_ID="testing", AWS_SECRET_ACCESS_KEY="testing")
        # a store that does not answer may be starting: waited for, here 1 s (test_start_before_bucket.py)
        more = ("--set", "object.store.start.wait.ms=1000")
        expected = [endpoint, "endpoint", "gave up waiting"]
    elif fault == "missing bucket":
        endpoint = request.getfixturevalue("moto_server").endpoint_url
        bucket = "strata-no-such-bucket"
        env.update(AWS_ACCESS_KEY_ID="testing", AWS_SECRET_ACCESS_KEY="testing")
        expected = [f"'{bucket}' does not exist", "create it"]
    else:
        endpoint = request.getfixturevalue("authenticating_s3")
        bucket = "strata-bucket"
        env.update(AWS_ACCESS_KEY_ID="AKIAWRONGWRONGWRONG1", AWS_SECRET_ACCESS_KEY="wrong")
        expected = ["credentials", "AWS_ACCESS_KEY_ID"]
    env["AWS_DEFAULT_REGION"] = "us-east-1"
    for name in ("AWS_SESSION_TOKEN", "AWS_PROFILE", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3"):
        env.pop(name, None)

    result = _strata_up(tmp_path, f"s3://{bucket}/{PREFIX}", endpoint, env, more)
    out = result.stdout + result.stderr
    assert result.returncode == 1, out
    assert "Traceback" not in out
    assert "object store" in result.stderr and f"s3://{bucket}/{PREFIX}" in result.stderr
    for fragment in expected:
        assert fragment in result.stderr, result.stderr
