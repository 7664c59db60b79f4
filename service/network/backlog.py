"""A connection whose small requests queue up in the kernel gets a small receive buffer.

Strata leaves a client connection's receive buffer to the kernel (``socket.receive.buffer.bytes``
-1), which grows it with the traffic to megabytes: a 1 MiB produce request then arrives in a few
reads, and Kafka's fixed 100 KiB made Strata's produce 12% slower (docs/benchmarks.md).

The same megabytes hurt a client that sends a request per record (librdkafka or the Java client
at linger.ms 0) faster than the broker's one event loop answers them. The kernel takes its
requests into the grown buffer: tens of thousands of one-record requests, seconds of the loop's
work, all already sent as far as the client knows. The client does not back up, so it never
puts more records into one request: its latency grows until its own queue is full
(``BufferError: Local: Queue full`` at 100,000 records/s). With Kafka's 100 KiB the client's
sends stop after a few hundred requests, and librdkafka (``queue.buffering.backpressure.threshold``)
and the Java client (``max.in.flight.requests.per.connection``) then gather the records that
wait into larger requests.

:class:`ReceiveBacklog` gives a connection that small buffer once it has shown such a backlog:
after :data:`CHECK_EVERY` small requests in a row it asks the kernel how many bytes are waiting
to be read (``FIONREAD``, one system call), and if that is :data:`BACKLOG_BYTES` or more it sets
``SO_RCVBUF`` to ``socket.receive.backlog.buffer.bytes`` (102400 by default, Kafka's receive
buffer; 0 or less: never). A large request resets the count, so a client sending 1 MiB batches
keeps the kernel's buffer. Setting ``SO_RCVBUF`` stops the kernel's autotuning for the socket
for good; the bytes already waiting stay, and the window the client is offered shrinks as they
are read.
"""

from __future__ import annotations

import fcntl
import socket
import struct
import termios

__all__ = ["BACKLOG_BYTES", "BACKLOG_REQUEST_BYTES", "CHECK_EVERY", "ReceiveBacklog"]

#: a request up to this size counts toward a backlog (a one-record produce is about 150 bytes;
#: not service.network.body's SMALL_REQUEST_BYTES, which is about memory)
BACKLOG_REQUEST_BYTES = 16 * 1024
#: small requests in a row between two looks at the kernel's queue
CHECK_EVERY = 64
#: bytes waiting in the kernel that make a backlog: at about 150 bytes a request, over 400 requests,
#: some 40 ms or more of the event loop's work (a client the broker keeps up with has none waiting)
BACKLOG_BYTES = 64 * 1024

_INT = struct.Struct("i")


class ReceiveBacklog:
    __slots__ = ("_sock", "_buffer_bytes", "_small", "clamped")

    def __init__(self, sock: socket.socket, buffer_bytes: int) -> None:
        self._sock = sock
        self._buffer_bytes = buffer_bytes
        self._small = 0
        #: whether this connection's receive buffer was set small
        self.clamped = buffer_bytes <= 0  # nothing to do: never looks

    def read(self, size: int) -> bool:
        """A request of ``size`` bytes was read; True when this call set the small buffer."""
        if self.clamped:
            return False
        if size > BACKLOG_REQUEST_BYTES:
            self._small = 0
            return False
        self._small += 1
        if self._small < CHECK_EVERY:
            return False
        self._small = 0
        try:
            (waiting,) = _INT.unpack(fcntl.ioctl(self._sock.fileno(), termios.FIONREAD, b"\0" * _INT.size))
            if waiting < BACKLOG_BYTES:
                return False
            self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, self._buffer_bytes)
        except (OSError, ValueError):  # closed meanwhile: the reader finds out on its next read
            return False
        self.clamped = True
        return True
