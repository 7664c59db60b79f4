"""Plain ``sendfile`` over loopback: the ceiling for serving bytes from the page cache.

Baseline for the 16 KiB consume workload in ``bench/foundation.py``. A receiver
process listens on 127.0.0.1, ``recv_into``s a reusable buffer and discards the
bytes; the sender (this process) ``os.sendfile``s a whole file (the broker's own
``.log`` segment of the topic the consumer read) in one go. Elapsed time runs
from just before the first ``sendfile`` call to the moment the receiver has the
last byte (both sides use CLOCK_MONOTONIC, which is system-wide on Linux).

    python bench/sendfile_baseline.py FILE        # prints a JSON line
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time

_RECV_BUF = 4 * 1024 * 1024


def _receiver() -> None:
    """Child process: accept one connection, drain it, report bytes and end time."""
    lsock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    lsock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    lsock.bind(("127.0.0.1", 0))
    lsock.listen(1)
    print(lsock.getsockname()[1], flush=True)
    conn, _ = lsock.accept()
    conn.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, _RECV_BUF)
    buf = bytearray(_RECV_BUF)
    view = memoryview(buf)
    total = 0
    while True:
        n = conn.recv_into(view)
        if not n:
            break
        total += n
    end = time.monotonic()
    conn.close()
    print(json.dumps({"bytes": total, "end": end}), flush=True)


def measure(path: str) -> dict:
    """Send ``path`` over loopback with ``os.sendfile``; return bytes, seconds, MB/s."""
    size = os.path.getsize(path)
    child = subprocess.Popen(
        [sys.executable, os.path.abspath(__file__), "--receiver"],
        stdout=subprocess.PIPE, text=True,
    )
    try:
        port = int(child.stdout.readline())
        sock = socket.create_connection(("127.0.0.1", port))
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, _RECV_BUF)
        with open(path, "rb") as f:
            fd = f.fileno()
            offset = 0
            start = time.monotonic()
            while offset < size:
                sent = os.sendfile(sock.fileno(), fd, offset, size - offset)
                if sent == 0:
                    break
                offset += sent
        sock.shutdown(socket.SHUT_WR)
        report = json.loads(child.stdout.readline())
        sock.close()
    finally:
        child.wait(timeout=60)
    if report["bytes"] != size:
        raise RuntimeError(f"sendfile baseline: receiver got {report['bytes']} of {size} bytes")
    seconds = report["end"] - start
    return {"bytes": size, "seconds": seconds, "mb_per_s": size / seconds / 1e6}


if __name__ == "__main__":
    if sys.argv[1:] == ["--receiver"]:
        _receiver()
    elif len(sys.argv) == 2:
        print(json.dumps(measure(sys.argv[1])))
    else:
        sys.exit(__doc__)
