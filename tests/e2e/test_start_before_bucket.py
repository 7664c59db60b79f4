"""A broker started before its object store answers waits for it, then serves; it gives up
after ``object.store.start.wait.ms``; and what no wait mends (a missing bucket) ends the start
at once. Before, a start whose first bucket requests failed exited with code 1, in the
check of the bucket or in the first read of the cluster metadata: a cluster restarted
together with its MinIO came up only as far as a supervisor's restarts carried it."""

from __future__ import annotations

import re
import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path

from tests.conftest import BrokerProcess, free_port
from tests.e2e import helpers
from tests.s3_fixtures import MotoServer


def _broker(tmp_path: Path, endpoint: str, bucket: str, **sets: str) -> BrokerProcess:
    return BrokerProcess(tmp_path / "data", free_port(), sets=sets, log_path=tmp_path / "broker.log",
                         args=["--object-store", f"s3://{bucket}/strata", "--s3-endpoint", endpoint])


def _once_logged(broker: BrokerProcess, text: str, action: Callable[[], object]) -> threading.Thread:
    """A thread that runs ``action`` once the broker's log holds ``text`` (not if the broker
    exits first, or after 60 s)."""
    def watch() -> None:
        deadline = time.monotonic() + 60
        while text not in broker.log_text():
            if time.monotonic() > deadline or (broker.proc is not None and broker.proc.poll() is not None):
                return
            time.sleep(0.1)
        action()

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    return thread


def test_a_broker_started_before_its_bucket_answers_waits_then_serves(
    tmp_path: Path, s3_credentials_env: dict[str, str]
) -> None:
    store = MotoServer().start()
    bucket = store.create_bucket().bucket
    store.stop()  # refused connections, as a MinIO not started yet
    broker = _broker(tmp_path, store.endpoint_url, bucket)
    try:
        # the store comes back once the broker has said it waits for it
        _once_logged(broker, f"the object store at s3://{bucket}/strata does not answer yet", store.start)
        broker.start()  # returns once it listens: after the store answered
        assert "answers: waited" in broker.log_text()
        values = [b"%d" % i for i in range(20)]
        assert helpers.produce_values(broker.bootstrap, "after-the-wait", values) == list(range(20))
        assert [m.value() for m in helpers.consume(broker.bootstrap, "after-the-wait", [0], 20)] == values
    finally:
        broker.kill()
        store.stop()


def test_a_broker_waits_through_a_starting_minio_that_answers_503_to_the_cluster_metadata(
    tmp_path: Path, s3_credentials_env: dict[str, str]
) -> None:
    """The bucket's check passes; the first read of the cluster metadata (the controller's
    start) meets the 503 a MinIO answers until it has its quorum."""
    store = MotoServer().start()
    bucket = store.create_bucket().bucket
    failing = store.fail("GET", "/cluster/metadata.json", ("XMinioServerNotInitialized", "not initialized yet"))
    broker = _broker(tmp_path, store.endpoint_url, bucket)
    try:
        waiting = "broker 1's cluster metadata in the object store does not answer yet"
        _once_logged(broker, waiting, store.heal)  # MinIO has its quorum once the broker waits
        broker.start()
        assert failing.is_set()
        log = broker.log_text()
        assert waiting in log and "XMinioServerNotInitialized" in log and "answers: waited" in log
        assert helpers.produce_values(broker.bootstrap, "after-the-503s", [b"v"]) == [0]
    finally:
        broker.kill()
        store.stop()


def test_a_stop_while_it_waits_for_the_bucket_ends_the_start_saying_so(
    tmp_path: Path, s3_credentials_env: dict[str, str]
) -> None:
    broker = _broker(tmp_path, f"http://127.0.0.1:{free_port()}", "b")  # nothing listens; the default wait
    try:
        broker.start(wait=False)
        deadline = time.monotonic() + 60
        while "does not answer yet" not in broker.log_text():
            assert time.monotonic() < deadline, broker.log_text()
            time.sleep(0.1)
        assert broker.proc is not None
        broker.proc.send_signal(signal.SIGTERM)  # as systemd or Kubernetes stops it
        assert broker.proc.wait(10) == 130
        assert "stopped while waiting for the object store at s3://b/strata" in broker.log_text()
        assert list(broker.data_dir.iterdir()) == []  # what the start made is gone, its lock file too
    finally:
        broker.kill()


def test_a_start_gives_up_on_a_bucket_that_never_answers_after_its_wait(
    tmp_path: Path, s3_credentials_env: dict[str, str]
) -> None:
    endpoint = f"http://127.0.0.1:{free_port()}"  # nothing listens
    broker = _broker(tmp_path, endpoint, "b", **{"object.store.start.wait.ms": "2000"})
    try:
        code, took = broker.start_that_ends()
        log = broker.log_text()
        assert code == 1
        assert re.search(r"gave up waiting for the object store at s3://b/strata after \d+ s", log)
        assert "is not usable" in log and f"Check that the endpoint URL {endpoint}" in log
        assert 2 <= took < 30, f"exited after {took:.1f} s"
    finally:
        broker.kill()


def test_a_missing_bucket_ends_the_start_at_once_however_long_the_wait(
    tmp_path: Path, s3_credentials_env: dict[str, str], moto_server: MotoServer
) -> None:
    broker = _broker(tmp_path, moto_server.endpoint_url, "no-such-bucket-here")  # the default wait: 5 min
    try:
        code, took = broker.start_that_ends()
        log = broker.log_text()
        assert code == 1
        assert "bucket 'no-such-bucket-here' does not exist" in log
        assert "does not answer yet" not in log
        assert took < 20, f"exited after {took:.1f} s"
    finally:
        broker.kill()
