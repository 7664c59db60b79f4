"""``strata up --brokers N`` on a fresh data dir (issue 32, item 7).

A broker of the local cluster that cannot start (its port is taken) removes what it
created and nothing else: the other brokers' data and the shared bucket, which holds
the cluster's metadata, stay, and the cluster goes on without it. (Before, each broker
saw the fresh data dir missing and counted it as its own; the one that failed removed
all of it under the running brokers.) ``strata -v up --brokers N`` hands ``-v`` to every
broker where it is understood (before ``up``; it was put after it, and every broker
exited with "unrecognized arguments: -v").
"""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from tests.cluster_fixtures import FAST
from tests.conftest import subprocess_env
from tests.e2e.test_cluster import _free_ports

START_S = 45.0


class _Up:
    """``strata [GLOBAL] up --brokers N`` as a subprocess, its output collected as it comes."""

    def __init__(self, data_dir: Path, brokers: int, base: int, *global_flags: str) -> None:
        cmd = [sys.executable, "-m", "service", *global_flags, "up", "--brokers", str(brokers),
               "--listen", f"127.0.0.1:{base}", "--http", "off", "--data-dir", str(data_dir)]
        for key, value in FAST.items():
            cmd += ["--set", f"{key}={value}"]
        self.proc = subprocess.Popen(cmd, env=subprocess_env(), stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, text=True)
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._collect, daemon=True)
        self._reader.start()

    def _collect(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line)

    @property
    def text(self) -> str:
        return "".join(self.lines)

    def wait_for(self, what: str, check: object) -> None:
        deadline = time.monotonic() + START_S
        while not check():  # type: ignore[operator]
            assert time.monotonic() < deadline, f"{what}; output:\n{self.text[-4000:]}"
            time.sleep(0.3)

    def stop(self) -> int:
        """Ctrl-C, as a user stops it; the exit code once its output is read to the end."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
        try:
            code = self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            code = self.proc.wait()
        self._reader.join(timeout=10)
        assert self.proc.stdout is not None
        self.proc.stdout.close()
        return code


def _children(pid: int) -> list[list[str]]:
    """The command lines of ``pid``'s child processes (/proc)."""
    out = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
            if int(fields[1]) == pid:
                out.append((stat.parent / "cmdline").read_bytes().decode().split("\0")[:-1])
        except (OSError, IndexError, ValueError):
            continue  # gone meanwhile
    return out


def _brokers(bootstrap: str) -> list[int]:
    try:
        return sorted(AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=2).brokers)
    except Exception:  # noqa: BLE001 - not listening yet
        return []


def _roundtrip(bootstrap: str, topic: str) -> list[bytes]:
    """Create ``topic`` with two replicas, produce three records, read them back."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 1, 2)], request_timeout=30)[topic].result(timeout=30)
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    for value in (b"a", b"b", b"c"):
        producer.produce(topic, value)
    assert producer.flush(30) == 0
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "g", "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    values: list[bytes] = []
    deadline = time.monotonic() + 30
    while len(values) < 3 and time.monotonic() < deadline:
        message = consumer.poll(0.5)
        if message is not None and message.error() is None:
            values.append(message.value())
    consumer.close()
    return values


def test_a_broker_that_cannot_start_removes_only_what_it_created(tmp_path: Path) -> None:
    data = tmp_path / "strata-data"  # fresh: no broker's directory exists yet
    base = _free_ports(3)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", base + 1))  # broker 2's port
        taken.listen()
        up = _Up(data, 3, base)
        try:
            up.wait_for("broker 2 did not fail", lambda: "strata: broker 2 exited with code" in up.text)
            bootstrap = f"127.0.0.1:{base},127.0.0.1:{base + 2}"
            up.wait_for("brokers 1 and 3 did not come up", lambda: _brokers(bootstrap) == [1, 3])
            assert sorted(p.name for p in data.iterdir()) == ["broker-1", "broker-3", "bucket"]
            for k in (1, 3):
                assert (data / f"broker-{k}" / "meta.properties").is_file()
                assert (data / f"broker-{k}" / "logs").is_dir()
            assert any(p.is_file() for p in (data / "bucket").rglob("*")), "the cluster metadata is gone"
            assert _roundtrip(bootstrap, "survivors") == [b"a", b"b", b"c"]
        finally:
            code = up.stop()
    assert code == 0, up.text[-4000:]
    assert "Is another broker running?" in up.text
    assert (data / "broker-1" / "meta.properties").is_file()
    assert (data / "broker-3" / "meta.properties").is_file()


def test_global_flags_before_up_reach_every_broker(tmp_path: Path) -> None:
    base = _free_ports(2)
    up = _Up(tmp_path / "strata-data", 2, base, "-v")
    try:
        bootstrap = f"127.0.0.1:{base},127.0.0.1:{base + 1}"
        up.wait_for("the cluster did not start", lambda: _brokers(bootstrap) == [1, 2])
        assert "unrecognized arguments" not in up.text
        brokers = _children(up.proc.pid)
        assert len(brokers) == 2 and all(argv[argv.index("up") - 1] == "-v" for argv in brokers), brokers
    finally:
        code = up.stop()
    assert code == 0, up.text[-4000:]
