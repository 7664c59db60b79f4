"""Connection limits and connection-creation quotas: :class:`ConnectionQuotas`, Kafka's
``ConnectionQuotas`` (KIP-308, KIP-402, KIP-612) with an open-files guard of Strata's.

One per broker, shared by its Kafka listeners. Each listener's accept loop calls
:meth:`ConnectionQuotas.before_accept` (waits for room and for the creation rates)
and, once a socket is accepted, :meth:`ConnectionQuotas.screen` (room again, as another
listener may have taken it, then :meth:`ConnectionQuotas.admit`); an admitted
connection is :meth:`ConnectionQuotas.release`\\d exactly once when it closes. Limits
change at run time through :meth:`ConnectionQuotas.follow` (dynamic broker configs).

Kafka's semantics:

- ``max.connections`` (broker) and ``listener.name.<l>.max.connections``: when either is
  reached the listener stops accepting; new connections wait in the kernel's backlog
  until one closes. The inter-broker listener, when the broker has other listeners,
  is exempt from the broker-wide limit: a broker connecting over it is accepted, and
  the least recently active connection of another listener is closed instead.
- ``max.connections.per.ip`` and ``max.connections.per.ip.overrides``: a connection
  beyond its address's limit is closed at once (on every listener).
- ``max.connection.creation.rate`` (broker, except the inter-broker listener) and
  ``listener.name.<l>.max.connection.creation.rate``: the listener waits before its
  next accept for as long as the rate is over, at most one quota window at a time.
- The ``connection_creation_rate`` client quota of an ``ip`` entity (or the ``<default>``
  ip): a connection over it is held, unserved, for the throttle time and then closed;
  it is not counted in the rate (``kafka-configs.sh --entity-type ips``). Held sockets are
  bounded (a quarter of the reserve below); beyond that they are closed at once.

Strata's open-files guard: a broker that runs out of file descriptors cannot open
segment files or reach its bucket, loses its controller lease and stops serving
everyone, so one client opening connections in a loop could take it down. The
process's soft open-files limit is raised to its hard limit at start (as the JVM
does), and ``connections.reserved.fds`` descriptors are kept for everything else. Linux
gives out the lowest free descriptor, so a new socket numbered ``n`` means ``n``
descriptors are open: a connection accepted on a descriptor inside the reserve is
closed at once, and the listener pauses until a connection closes or a second has
passed (files may have closed meanwhile). On the inter-broker listener, beside others,
it is kept, and another listener's least recently active connection is closed.

Rates are Kafka's sampled rates (:class:`service.quotas.manager.Rate`, ``quota.window.num``
samples of ``quota.window.size.seconds``). Logs of refused connections are
rate-limited: a flood of connections does not become a flood of log lines.

Not thread-safe: used on the event loop.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import resource
import socket
import time
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from service.quotas.manager import Rate

__all__ = ["Admission", "ConnectionQuotas", "ConnectionSettings", "ListenerLimits", "connection_quotas",
           "connection_settings", "override_pairs", "parse_overrides", "raise_open_files_limit"]

log = logging.getLogger("strata.connections")

_UNLIMITED = 2**31 - 1
_LOG_EVERY_S = 10.0
#: while descriptors are short, the listener looks again this often even if no connection closed
_FD_RETRY_S = 1.0

#: reasons a connection is refused (the ``reason`` label of the metric)
PER_IP, IP_THROTTLED, OPEN_FILES = "max_connections_per_ip", "ip_connection_rate", "open_files"


@dataclass(frozen=True)
class Admission:
    """What the accept loop does with a socket: serve it (``reason`` None), close it now,
    or hold it unserved for ``delay_s`` and then close it (an IP over its rate quota)."""

    reason: str | None = None
    delay_s: float = 0.0

    @property
    def admitted(self) -> bool:
        return self.reason is None


_ADMITTED = Admission()


@dataclass(frozen=True)
class ListenerLimits:
    max_connections: int = _UNLIMITED
    creation_rate: int = _UNLIMITED


@dataclass(frozen=True)
class ConnectionSettings:
    """The limits as configured (statically, or dynamically: service.dynamic_config)."""

    max_connections: int = _UNLIMITED
    per_ip: int = _UNLIMITED
    #: None: the configured overrides could not be read (a host name that does not resolve)
    per_ip_overrides: Mapping[str, int] | None = field(default_factory=dict)
    creation_rate: int = _UNLIMITED
    listeners: Mapping[str, ListenerLimits] = field(default_factory=dict)


class ConnectionQuotas:
    """See the module docstring."""

    def __init__(
        self,
        *,
        max_connections: int = _UNLIMITED,
        per_ip: int = _UNLIMITED,
        per_ip_overrides: Mapping[str, int] | None = None,
        creation_rate: int = _UNLIMITED,
        listeners: Mapping[str, ListenerLimits] | None = None,
        protected: str | None = None,
        fd_limit: int = _UNLIMITED,
        fd_reserve: int = 0,
        ip_rate: Callable[[str], float | None] = lambda ip: None,
        samples: int = 11,
        window_s: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._protected = protected
        self.fd_limit, self.fd_reserve = fd_limit, fd_reserve
        self._ip_rate = ip_rate
        self._samples, self._window = samples, window_s
        self._clock = clock
        self._broker_rate = (creation_rate, Rate(samples, window_s))
        self._listener_rates: dict[str, Rate] = {}
        self._waiters: list[asyncio.Future[None]] = []
        self.reconfigure(ConnectionSettings(max_connections, per_ip, dict(per_ip_overrides or {}), creation_rate,
                                            dict(listeners or {})))
        self._ip_sensors: dict[str, Rate] = {}
        self._swept = 0.0
        #: sockets held unserved until their IP's throttle time has passed, and how many may be
        self.held = 0
        self._max_held = max(16, fd_reserve // 4) if fd_reserve else 1024
        self.total = 0
        self.by_listener: Counter[str] = Counter()
        self._by_ip: Counter[str] = Counter()
        #: refused connections by (listener, reason); seconds listeners waited on creation rates
        self.refused: Counter[tuple[str, str]] = Counter()
        self.accept_throttle_s: Counter[str] = Counter()
        #: connections given a small receive buffer for a backlog of small requests (service.network.backlog)
        self.receive_backlogs: Counter[str] = Counter()
        self._fd_short = False
        self._evictors: dict[str, Callable[[], bool]] = {}
        self._logged: dict[str, float] = {}
        self._follow: tuple[Callable[[], int], Callable[[], ConnectionSettings]] | None = None
        self._revision = -2

    def reconfigure(self, settings: ConnectionSettings, *, strict: bool = True) -> None:
        """New limits; the connections already open stay. Settings no client could connect
        with (``max.connections.per.ip`` 0 without overrides), or overrides that could not be
        read (None), raise ValueError when ``strict`` (at start), else keep the per-IP limits
        as they were, with a warning, and take the rest (a dynamic change)."""
        per_ip, overrides = settings.per_ip, settings.per_ip_overrides
        problem = None
        if overrides is None:
            problem = "max.connections.per.ip.overrides could not be read (see the log)"
        elif per_ip == 0 and not overrides:
            problem = "max.connections.per.ip can be 0 only with max.connections.per.ip.overrides"
        if problem is not None:
            if strict:
                raise ValueError(f"{problem} (else no client could connect)")
            log.warning("keeping the per-IP connection limits as they were: %s", problem)
            per_ip, overrides = self._per_ip, self._overrides
        assert overrides is not None
        self.max_connections = settings.max_connections
        self._per_ip, self._overrides = per_ip, {_normal_ip(ip): n for ip, n in overrides.items()}
        self._listeners = dict(settings.listeners)
        self._broker_rate = (settings.creation_rate, self._broker_rate[1])
        self._wake()  # a limit may have gone up

    def follow(self, revision: Callable[[], int], settings: Callable[[], ConnectionSettings]) -> None:
        """Take ``settings()`` again whenever ``revision()`` changes (dynamic broker configs)."""
        self._follow = (revision, settings)

    def _sync(self) -> None:
        if self._follow is None:
            return
        revision, settings = self._follow
        now = revision()
        if now == self._revision:
            return
        self._revision = now
        self.reconfigure(settings(), strict=False)

    def limits(self, listener: str) -> ListenerLimits:
        return self._listeners.get(listener, ListenerLimits())

    def register(self, listener: str, evict: Callable[[], bool]) -> None:
        """``evict()`` closes the listener's least recently active connection (False: none)."""
        self._evictors[listener] = evict
        self._listener_rates.setdefault(listener, Rate(self._samples, self._window))

    def _is_protected(self, listener: str) -> bool:
        return listener == self._protected

    def _room(self, listener: str) -> bool:
        if self.by_listener[listener] >= self.limits(listener).max_connections:
            return False
        return self._is_protected(listener) or (self.total < self.max_connections and not self._fd_short)

    # -- the accept loop ------------------------------------------------------------------

    async def before_accept(self, listener: str) -> None:
        """Return once ``listener`` may accept its next connection (see the module docstring)."""
        await self._wait_for_room(listener)
        delay = self._creation_delay(listener)
        if delay > 0:
            self.accept_throttle_s[listener] += delay
            self._log_refusal(f"rate:{listener}", "listener %s: connections come faster than "
                              "max.connection.creation.rate; accepting the next in %.0f ms", listener, delay * 1000)
            await asyncio.sleep(delay)

    async def _wait_for_room(self, listener: str) -> None:
        loop = asyncio.get_running_loop()
        self._sync()
        while not self._room(listener):
            waiter: asyncio.Future[None] = loop.create_future()
            self._waiters.append(waiter)
            # while files are short, or limits may change (dynamic configs), look again each second
            retry = _FD_RETRY_S if self._fd_short or self._follow is not None else None
            try:
                await asyncio.wait_for(waiter, retry)
            except TimeoutError:
                self._fd_short = False  # files may have been closed meanwhile
            finally:
                if waiter in self._waiters:
                    self._waiters.remove(waiter)
            self._sync()

    def _creation_delay(self, listener: str) -> float:
        now = self._clock()
        rates = [(self.limits(listener).creation_rate, self._listener_rates.setdefault(
            listener, Rate(self._samples, self._window)))]
        if not self._is_protected(listener):
            rates.append(self._broker_rate)
        delay = 0.0
        for bound, rate in rates:
            if bound >= _UNLIMITED:
                continue
            measured, window = rate.measure(now)
            if measured > bound:  # 0: no new connection, one window's wait at a time
                delay = max(delay, (measured - bound) / bound * window if bound > 0 else self._window)
        return min(delay, self._window)  # Kafka bounds a connection throttle to one window

    def admit(self, listener: str, ip: str, fd: int) -> Admission:
        """The fate of a connection just accepted on ``listener`` from ``ip`` on descriptor
        ``fd``; an admitted one is counted until :meth:`release`."""
        self._sync()
        protected = self._is_protected(listener)
        fd_short = fd >= self.fd_limit - self.fd_reserve
        if fd_short and not protected:
            self._fd_short = True
            return self.refuse(listener, OPEN_FILES, *self._files_short(listener, ip, fd))
        address = _normal_ip(ip)
        limit = self._overrides.get(address, self._per_ip)
        if self._by_ip[address] >= limit:
            return self.refuse(listener, PER_IP, "listener %s: refusing a connection from %s: it has the "
                                "%d connections max.connections.per.ip allows", listener, ip, limit)
        delay = self._ip_throttle(address)
        if delay > 0:
            refusal = self.refuse(listener, IP_THROTTLED, "listener %s: %s opens connections faster than "
                                   "its connection_creation_rate quota; closing one after %.0f ms",
                                   listener, ip, delay * 1000)
            return Admission(refusal.reason, delay)
        now = self._clock()
        self._listener_rates.setdefault(listener, Rate(self._samples, self._window)).record(1, now)
        if not protected:
            self._broker_rate[1].record(1, now)
        self.total += 1
        self.by_listener[listener] += 1
        self._by_ip[address] += 1
        if protected and (self.total > self.max_connections or fd_short):
            self._evict_other(listener)
        return _ADMITTED

    async def screen(self, listener: str, sock: socket.socket, ip: str) -> bool:
        """:meth:`admit` a socket just accepted, once there is room (another listener may have
        taken the last of it since :meth:`before_accept`); a refused one is closed, now or
        (an IP over its creation rate) once its throttle time has passed, unserved."""
        await self._wait_for_room(listener)
        verdict = self.admit(listener, ip, sock.fileno())  # no await since the room was seen
        if verdict.admitted:
            return True
        if verdict.delay_s > 0 and self.held < self._max_held:  # held ones use descriptors too: bounded
            self.held += 1
            asyncio.get_running_loop().call_later(verdict.delay_s, self._close_held, sock)
        else:
            sock.close()
        return False

    def _close_held(self, sock: socket.socket) -> None:
        self.held -= 1
        sock.close()

    def files_allow(self, listener: str, ip: str, fd: int) -> bool:
        """Whether a connection on descriptor ``fd`` leaves the second half of the reserve
        alone: the one limit of the HTTP listener (its connections are not Kafka's, counted in
        none of the others). The operator's health checks and metrics still answer when Kafka
        clients have taken all they may; a flood of HTTP connections leaves half the reserve."""
        if fd < self.fd_limit - self.fd_reserve // 2:
            return True
        self.refuse(listener, OPEN_FILES, *self._files_short(listener, ip, fd))
        return False

    def _files_short(self, listener: str, ip: str, fd: int) -> tuple[Any, ...]:
        return ("listener %s: refusing a connection from %s: %d of the %d open files are in use and "
                "connections.reserved.fds (%d) are kept for segments and the bucket; raise the open-files "
                "limit (ulimit -n) or set max.connections", listener, ip, fd, self.fd_limit, self.fd_reserve)

    def _ip_throttle(self, address: str) -> float:
        quota = self._ip_rate(address)
        if quota is None:
            self._ip_sensors.pop(address, None)
            return 0.0
        now = self._clock()
        if now - self._swept >= 60:  # sensors of addresses gone quiet hold nothing: drop them
            self._swept = now
            horizon = now - self._samples * self._window
            for quiet in [a for a, r in self._ip_sensors.items() if r.last_used < horizon]:
                del self._ip_sensors[quiet]
        sensor = self._ip_sensors.get(address)
        if sensor is None:
            sensor = self._ip_sensors[address] = Rate(self._samples, self._window)
        sensor.record(1, now)
        rate, window = sensor.measure(now)
        if rate <= quota:
            return 0.0
        sensor.record(-1, now)  # a refused connection does not count (Kafka's unrecord)
        return min((rate - quota) / quota * window, self._window)

    def _evict_other(self, listener: str) -> None:
        for name, count in self.by_listener.most_common():
            if name != listener and count and name in self._evictors and self._evictors[name]():
                log.info("closing the least recently active connection of listener %s: listener %s "
                         "(inter-broker) took a connection beyond max.connections (%d) or the open files "
                         "connections may use", name, listener, self.max_connections)
                return

    def release(self, listener: str, ip: str) -> None:
        """An admitted connection closed."""
        address = _normal_ip(ip)
        self.total -= 1
        self.by_listener[listener] -= 1
        self._by_ip[address] -= 1
        if self._by_ip[address] <= 0:
            del self._by_ip[address]
        self._fd_short = False
        self._wake()

    def _wake(self) -> None:
        """Listeners waiting for room look again."""
        waiters, self._waiters = self._waiters, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)

    def connections_from(self, ip: str) -> int:
        return self._by_ip[_normal_ip(ip)]

    def refuse(self, listener: str, reason: str, message: str, *args: Any) -> Admission:
        """Count (and log, rate-limited) a connection closed unserved."""
        self.refused[listener, reason] += 1
        self._log_refusal(f"{reason}:{listener}", message, *args)
        return Admission(reason)

    def _log_refusal(self, key: str, message: str, *args: Any) -> None:
        now = self._clock()
        if now - self._logged.get(key, -_LOG_EVERY_S) >= _LOG_EVERY_S:
            self._logged[key] = now
            log.warning(message + " (logged at most every %.0f s)", *args, _LOG_EVERY_S)


def _normal_ip(ip: str) -> str:
    try:
        address = ipaddress.ip_address(ip.split("%", 1)[0])
    except ValueError:
        return ip
    mapped = getattr(address, "ipv4_mapped", None)
    return str(mapped or address)


def override_pairs(text: str) -> list[tuple[str, int]]:
    """``max.connections.per.ip.overrides``, ``host-or-ip:count`` pairs, comma-separated, as
    read (raises ValueError naming the config and the pair that is not one)."""
    pairs = []
    for item in filter(None, (part.strip() for part in text.split(","))):
        host, sep, count = item.rpartition(":")
        host = host.strip().strip("[]")
        if not sep or not host or not count.strip().isdigit():
            raise ValueError(f"max.connections.per.ip.overrides: {item!r} is not HOST:COUNT")
        pairs.append((host, int(count)))
    return pairs


def parse_overrides(text: str) -> dict[str, int]:
    """:func:`override_pairs` by address (host names resolved now, as Kafka does when it
    applies the value)."""
    out: dict[str, int] = {}
    for host, count in override_pairs(text):
        try:
            addresses = [str(ipaddress.ip_address(host))]
        except ValueError:
            try:
                addresses = sorted({info[4][0] for info in socket.getaddrinfo(host, None)})
            except OSError as exc:
                raise ValueError(f"max.connections.per.ip.overrides: cannot resolve {host!r}: {exc}") from None
        for address in addresses:
            out[address] = count
    return out


def raise_open_files_limit() -> tuple[int, int]:
    """Raise the soft open-files limit to the hard one (as the JVM does); (before, after)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = hard if hard != resource.RLIM_INFINITY else max(soft, 1 << 20)
    if soft != resource.RLIM_INFINITY and soft < target:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        except (ValueError, OSError):
            return soft, soft
        return soft, target
    return soft, soft


def connection_quotas(config: Any, listeners: list[str], protected: str | None,
                      ip_rate: Callable[[str], float | None]) -> ConnectionQuotas:
    """The broker's :class:`ConnectionQuotas` from its configs; raises the open-files limit."""
    before, fd_limit = raise_open_files_limit()
    if fd_limit != before:
        log.info("open-files limit raised from %d to %d (the hard limit)", before, fd_limit)
    reserve = config.get_int("connections.reserved.fds")
    if reserve < 0:
        reserve = max(64, fd_limit // 8)
    if reserve >= fd_limit:
        raise ValueError(f"connections.reserved.fds ({reserve}) leaves no descriptor for connections: the "
                         f"open-files limit is {fd_limit}; raise it (ulimit -n) or lower the reserve")
    if fd_limit - reserve < 1024:
        log.warning("at most %d client connections: the open-files limit is %d and %d are kept for files; "
                    "raise the limit (ulimit -n) for more", fd_limit - reserve, fd_limit, reserve)
    quotas = ConnectionQuotas(
        protected=protected if len(listeners) > 1 else None,
        fd_limit=fd_limit, fd_reserve=reserve, ip_rate=ip_rate,
        samples=config.get_int("quota.window.num"), window_s=config.get_int("quota.window.size.seconds"),
    )
    quotas.reconfigure(connection_settings(config, listeners))
    return quotas


def connection_settings(config: Any, listeners: list[str], resolved: dict[str, Any] | None = None
                        ) -> ConnectionSettings:
    """The limits a broker config view gives. ``resolved`` (a dynamic change): the overrides
    read before, by text, failures too, so a host name is looked up once per value, and an
    unreadable value gives None (kept as it was) rather than an error."""
    text = config.get("max.connections.per.ip.overrides") or ""
    parsed: dict[str, int] | None
    if resolved is None:
        parsed = parse_overrides(text)
    elif text in resolved:
        parsed = resolved[text]
    else:
        try:
            parsed = parse_overrides(text)
        except ValueError as exc:
            log.warning("%s", exc)
            parsed = None
        resolved.clear()
        resolved[text] = parsed
    return ConnectionSettings(
        max_connections=config.get_int("max.connections"),
        per_ip=config.get_int("max.connections.per.ip"),
        per_ip_overrides=parsed,
        creation_rate=config.get_int("max.connection.creation.rate"),
        listeners={name: ListenerLimits(config.for_listener(name).get_int("max.connections"),
                                        config.for_listener(name).get_int("max.connection.creation.rate"))
                   for name in listeners},
    )
