"""`strata up` refusing what it cannot honour, `strata --version`, and a failed start that
leaves nothing behind (but never touches data that was there before)."""

from __future__ import annotations

import socket
from importlib import metadata
from pathlib import Path

import pytest

from tests.service.cli.helpers import ok, strata, unused_port


def test_version_is_the_installed_distributions() -> None:
    assert ok(strata("--version")).stdout.strip() == f"strata {metadata.version('strata')}"


@pytest.mark.parametrize(("option", "value", "example"), [
    ("--listen", "localhost", "--listen localhost:9092"),
    ("--http", "localhost", "--http localhost:9644"),
    ("--advertise", "broker.example.com", "--advertise localhost:9092"),
    ("--listen", "localhost:http", "port must be a number"),
])
def test_an_address_without_a_port_is_refused_with_an_example(tmp_path: Path, option: str, value: str,
                                                              example: str) -> None:
    data = tmp_path / "data"
    args = ["up", "--data-dir", str(data), "--listen", f"127.0.0.1:{unused_port()}",
            "--http", f"127.0.0.1:{unused_port()}", option, value]
    proc = strata(*args)
    assert proc.returncode == 2, proc
    assert example in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
    assert not data.exists()  # refused before anything was created


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
