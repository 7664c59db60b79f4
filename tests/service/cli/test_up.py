"""`strata up` refusing what it cannot honour, `strata --version`, and a failed start that
leaves nothing behind (but never touches data that was there before)."""

from __future__ import annotations

import socket
from importlib import metadata
from pathlib import Path

import pytest

from service.cli.main import _check_hostport
from tests.service.cli.helpers import ok, strata, unused_port


def test_version_is_the_installed_distributions() -> None:
    assert ok(strata("--version")).stdout.strip() == f"strata {metadata.version('strata')}"


@pytest.mark.parametrize(("option", "value", "problem"), [
    ("--listen", "localhost", "--listen needs HOST:PORT, e.g. --listen localhost:9092; got 'localhost'"),
    ("--http", "localhost", "--http needs HOST:PORT, e.g. --http localhost:9644"),
    ("--advertise", "broker.example.com", "--advertise needs HOST:PORT, e.g. --advertise localhost:9092"),
    ("--listen", "localhost:http", "the port must be a number from 0 to 65535"),
    ("--listen", "::1", "--listen needs HOST:PORT"),
    ("--listen", "[::1]:9092", None),
    ("--listen", ":9092", None),
    ("--http", "0.0.0.0:0", None),
])
def test_addresses_need_a_port(option: str, value: str, problem: str | None) -> None:
    found = _check_hostport(value, option)
    assert (found is None) if problem is None else (problem in str(found)), found


def test_strata_up_refuses_an_address_without_a_port_before_creating_anything(tmp_path: Path) -> None:
    data = tmp_path / "data"
    proc = strata("up", "--data-dir", str(data), "--listen", "localhost",
                  "--http", f"127.0.0.1:{unused_port()}")
    assert proc.returncode == 2, proc
    assert "--listen localhost:9092" in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
    assert not data.exists()


def _fail_on_busy_port(data: Path) -> str:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        proc = strata("up", "--data-dir", str(data), "--listen", f"127.0.0.1:{port}",
                      "--http", f"127.0.0.1:{unused_port()}")
    assert proc.returncode == 1, proc
    assert "Is another broker running?" in proc.stdout, proc.stdout
    return proc.stdout


def test_a_failed_start_leaves_no_directories_it_created(tmp_path: Path) -> None:
    _fail_on_busy_port(tmp_path / "new" / "deeper" / "data")
    assert not (tmp_path / "new").exists()


def test_a_failed_start_keeps_what_was_there_and_removes_only_what_it_made(tmp_path: Path) -> None:
    data = tmp_path / "data"
    (data / "logs" / "t-0").mkdir(parents=True)
    (data / "logs" / "t-0" / "00000000000000000000.log").write_bytes(b"")
    (data / "notes.txt").write_text("mine")
    _fail_on_busy_port(data)
    assert sorted(p.name for p in data.iterdir()) == ["logs", "notes.txt"]  # no bucket/, no .lock
    assert (data / "logs" / "t-0" / "00000000000000000000.log").exists()


def test_strata_up_brokers_makes_the_data_dir_before_any_broker_starts(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each broker of ``strata up --brokers N`` removes what its failed start created (see the
    tests above); the DATA_DIR they share must therefore exist before the first one starts,
    or the first to fail (a port in use) removes it with every other broker's data in it
    ('No such file or directory: .../broker-2/logs' on the others)."""
    import io

    from service.cli import local_cluster
    from service.cli.main import build_parser

    data = tmp_path / "new" / "strata-data"
    seen: list[bool] = []

    class FailedStart:  # a broker that could not listen: exits 1 at once
        def __init__(self, cmd: list[str], **kwargs: object) -> None:
            seen.append(data.is_dir())
            self.stdout = io.BytesIO(b"")
            self.pid, self.returncode = -1, 1

        def poll(self) -> int:
            return 1

        def wait(self, timeout: float | None = None) -> int:
            return 1

    monkeypatch.setattr(local_cluster.subprocess, "Popen", FailedStart)
    monkeypatch.setattr(local_cluster.signal, "signal", lambda *a: None)  # pytest keeps its Ctrl-C
    args = build_parser().parse_args(["up", "--brokers", "2", "--data-dir", str(data), "--http", "off"])
    assert local_cluster.run_local_cluster(args) == 1  # every broker exited
    assert seen == [True, True]
