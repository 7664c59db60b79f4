"""One broker per data directory: a second `strata up` on it refuses to start and harms nothing.

Also: a start-up failure that is not a port in use says what failed, instead of
asking whether another broker is running.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

from confluent_kafka import Producer

from tests.conftest import REPO_ROOT, BrokerProcess, free_port, subprocess_env

from . import helpers


def _strata_up(data_dir: Path, timeout: float = 30.0) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "service", "up", "--data-dir", str(data_dir),
               "--listen", f"127.0.0.1:{free_port()}", "--http", f"127.0.0.1:{free_port()}"]
    proc = subprocess.Popen(command, cwd=REPO_ROOT, env=subprocess_env(), text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        raise AssertionError(f"`strata up` on {data_dir} did not exit within {timeout} s; "
                             f"it is serving:\n{out}{err}") from None
    return subprocess.CompletedProcess(command, proc.returncode, out, err)


def _produce(bootstrap: str, topic: str, values: list[bytes]) -> list[int]:
    """confluent-kafka on its defaults (acks=all); the acknowledged offsets."""
    producer = Producer({"bootstrap.servers": bootstrap})
    offsets: list[int] = []

    def on_delivery(err: Any, msg: Any) -> None:
        assert err is None, err
        offsets.append(msg.offset())

    for value in values:
        producer.produce(topic, value=value, partition=0, on_delivery=on_delivery)
    assert producer.flush(30) == 0
    return offsets


def _tree(root: Path) -> dict[str, int]:
    """Files and sizes, but for the checkpoints the running broker rewrites on its own."""
    return {str(p.relative_to(root)): p.stat().st_size for p in sorted(root.rglob("*"))
            if p.is_file() and "checkpoint" not in p.name}


def test_a_second_broker_on_the_same_data_dir_refuses_to_start(start_broker: Any) -> None:
    first: BrokerProcess = start_broker()
    topic = helpers.topic_name("locked")
    helpers.create_topic(first.bootstrap, topic)
    values = [b"v%d" % i for i in range(50)]
    assert _produce(first.bootstrap, topic, values) == list(range(50))
    before = _tree(first.data_dir)

    second = _strata_up(first.data_dir)
    assert second.returncode == 1
    assert f"the data directory {first.data_dir} is in use" in second.stderr
    assert f"process {first.pid} holds its lock {first.data_dir / '.lock'}" in second.stderr
    assert "--data-dir" in second.stderr
    assert "Is another broker running" not in second.stdout + second.stderr
    assert _tree(first.data_dir) == before  # it opened and created nothing

    # The first broker is unharmed. (That kill -9 drops the lock, so the next start takes
    # it, is shown by tests/e2e/test_disk_full.py and tests/local_tier/test_dirlock.py.)
    assert [m.value() for m in helpers.consume(first.bootstrap, topic, [0], 50)] == values
    assert _produce(first.bootstrap, topic, [b"after"]) == [50]


def test_a_start_failure_that_is_not_a_port_in_use_names_what_failed(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    (data_dir / "logs").write_text("a file where the log directory belongs\n")
    result = _strata_up(data_dir)
    assert result.returncode == 1
    output = result.stdout + result.stderr
    assert "Is another broker running" not in output
    assert f"cannot start the broker with data in {data_dir}" in output
    assert str(data_dir / "logs") in output
