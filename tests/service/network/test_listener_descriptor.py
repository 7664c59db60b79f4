"""A killed broker's listener refuses connections no later than its connections drop.

The controller fences a broker whose connection dropped once a probe of its listener is
refused (``controller.liveness``). A killed process's kernel closes its files highest
descriptor first, so a listener opened at start, under thousands of log files, outlived the
connections by the time those files took to release. :func:`service.network.server._closed_first`
moves it above them. A real child process, a real kill -9: the connection's end is seen, and
the listener is probed at that very moment.
"""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

from service.network.server import LISTENER_FD_MARGIN, _closed_first

_REPO = Path(__file__).resolve().parents[3]
_CHILD = textwrap.dedent("""
    import os, socket, sys, time
    from service.network.server import _closed_first
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    if sys.argv[1] == "moved":
        listener = _closed_first(listener)
    files = []
    for i in range(3000):  # the logs: opened after the listener, written
        f = open(os.path.join(sys.argv[2], f"{i}.log"), "ab", buffering=0)
        f.write(b"x" * 512)
        files.append(f)
    conn = socket.create_connection(("127.0.0.1", int(sys.argv[3])))  # opened last
    conn.sendall(listener.getsockname()[1].to_bytes(2, "big"))
    time.sleep(60)
""")


def _refused_when_connection_drops(tmp_path, mode: str) -> bool:
    parent = socket.create_server(("127.0.0.1", 0))
    child = subprocess.Popen([sys.executable, "-c", _CHILD, mode, str(tmp_path), str(parent.getsockname()[1])],
                             cwd=_REPO)
    conn = None
    try:
        parent.settimeout(30)
        conn, _ = parent.accept()
        conn.settimeout(30)
        port = int.from_bytes(conn.recv(2), "big")
        child.send_signal(signal.SIGKILL)
        assert conn.recv(1) == b""  # the end of the connection: now probe, as the controller does
        try:
            socket.create_connection(("127.0.0.1", port), timeout=5).close()
        except ConnectionRefusedError:
            return True
        return False
    finally:
        child.kill()
        child.wait()
        if conn is not None:
            conn.close()
        parent.close()


def test_a_killed_process_refuses_on_its_moved_listener_before_its_connection_drops(tmp_path):
    assert all(_refused_when_connection_drops(tmp_path, "moved") for _ in range(3))


def test_the_listener_moves_near_the_open_files_limit_and_still_accepts():
    import resource

    listener = socket.create_server(("127.0.0.1", 0))
    low = listener.fileno()
    moved = _closed_first(listener)
    try:
        soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
        if soft - LISTENER_FD_MARGIN > low:
            assert moved.fileno() > low
            assert moved.fileno() >= min(soft, 16384) - LISTENER_FD_MARGIN
        assert not moved.get_inheritable()
        with socket.create_connection(moved.getsockname()[:2], timeout=5):
            accepted, _ = moved.accept()
            accepted.close()
    finally:
        moved.close()
