"""Measuring rates and throttling: :class:`QuotaManager` (client quotas, Kafka's
``ClientQuotaManager``) and :class:`ByteRateLimit` (the broker's remote-read quota,
KIP-956's ``remote.log.manager.fetch.max.bytes.per.second``).

A rate is Kafka's sampled rate: ``quota.window.num`` samples of
``quota.window.size.seconds``; the rate is the samples' total over the time they
cover (at least all but one full window, so a first burst is not seen as infinite).
A client over its quota gets Kafka's throttle time,
``(rate - quota) / quota * window`` milliseconds (a request-time throttle at most one
sample window, as Kafka's): the broker answers at once with
``throttle_time_ms`` and does not read from the connection for that long (KIP-219);
a client that honours it settles at the quota. Sensors are per matched quota entity
(a ``<default>`` user quota is each user's own), and idle ones are dropped.

Not thread-safe: used on the event loop.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from typing import Any

from service.quotas.entities import IP_RATE_KEY, SECTION, ip_rates, quota_for

__all__ = ["FETCH", "PRODUCE", "REQUEST", "ByteRateLimit", "QuotaManager", "Rate", "client_quotas"]

PRODUCE, FETCH, REQUEST = "producer_byte_rate", "consumer_byte_rate", "request_percentage"
_IDLE_S = 3600.0


class Rate:
    """Kafka's sampled rate (see the module docstring)."""

    def __init__(self, samples: int, window_s: float) -> None:
        self._samples: deque[list[float]] = deque()  # [start, total]
        self._count = samples
        self._window = window_s
        self.last_used = 0.0

    def record(self, value: float, now: float) -> None:
        self._purge(now)
        if not self._samples or now >= self._samples[-1][0] + self._window:
            self._samples.append([now, 0.0])
        self._samples[-1][1] += value
        self.last_used = now

    def measure(self, now: float) -> tuple[float, float]:
        """(rate per second, the window it was measured over in seconds)."""
        self._purge(now)
        if not self._samples:
            return 0.0, self._window * (self._count - 1)
        covered = max(now - self._samples[0][0], self._window * (self._count - 1))
        return sum(s[1] for s in self._samples) / covered, covered

    def _purge(self, now: float) -> None:
        horizon = now - self._count * self._window
        while self._samples and self._samples[0][0] + self._window <= horizon:
            self._samples.popleft()


class QuotaManager:
    """Client quotas over the newest metadata's ``client_quotas`` section."""

    def __init__(self, revision: Callable[[], int], section: Callable[[], Any], samples: int, window_s: float,
                 clock: Callable[[], float] = time.monotonic, remote_fetch: ByteRateLimit | None = None,
                 remote_rate: Callable[[], int] | None = None) -> None:
        self._revision, self._section = revision, section
        self._remote_fetch = remote_fetch or ByteRateLimit(2**63 - 1, samples, window_s, clock)
        self._remote_rate = remote_rate  # its bound as the newest metadata says (a dynamic config)
        self._samples, self._window = samples, window_s
        self._clock = clock
        #: (revision, the quotas section, the quota keys any entity has) of the newest metadata
        self._cached: tuple[int, Any, frozenset[str]] = (-2, None, frozenset())
        self._sensors: dict[tuple[str, Any, str, str], Rate] = {}
        self._swept = 0.0
        #: connection_creation_rate by address, and the <default> ip's, of the newest metadata
        self._ip_rates: tuple[dict[str, float], float | None] = ({}, None)

    @property
    def remote_fetch(self) -> ByteRateLimit:
        """The broker's remote-read byte rate (KIP-956), its bound the newest."""
        self._current()
        return self._remote_fetch

    def _current(self) -> tuple[int, Any, frozenset[str]]:
        revision = self._revision()
        if self._cached[0] != revision:
            section = self._section() if revision >= 0 else None
            self._cached = (revision, section, frozenset(k for item in section or () for k in item["values"]))
            self._ip_rates = ip_rates(section) if IP_RATE_KEY in self._cached[2] else ({}, None)
            if self._remote_rate is not None and revision >= 0:
                self._remote_fetch.bytes_per_second = self._remote_rate()
        return self._cached

    def _quotas(self) -> Any:
        return self._current()[1]

    def kinds(self) -> frozenset[str]:
        """The quota keys some client has (nothing to measure for the others)."""
        return self._current()[2]

    def has(self, key: str) -> bool:
        """Whether any client has a ``key`` quota (nothing to measure otherwise)."""
        return key in self._current()[2]

    def ip_rate(self, address: str) -> float | None:
        """The ``connection_creation_rate`` quota of ``address`` (normalised, as
        :mod:`ipaddress` writes it): its own, else the ``<default>`` ip's, else None."""
        self._current()
        rates, default = self._ip_rates
        return rates.get(address, default)

    def record(self, key: str, user: str, client_id: str, value: float) -> int:
        """Record ``value`` (bytes, or milliseconds of request time) for (user, client id);
        the throttle time in milliseconds (0 within the quota or with none)."""
        section = self._quotas()
        if not section:
            return 0
        found = quota_for(section, key, user, client_id)
        if found is None:
            return 0
        bound, entity = found
        if key == REQUEST:
            bound = bound * 10.0  # percent of one thread = 10 ms of request time per second
        names = dict(entity)
        sensor_key = (key, entity, user if "user" in names else "", client_id if "client-id" in names else "")
        now = self._clock()
        sensor = self._sensors.get(sensor_key)
        if sensor is None:
            sensor = self._sensors[sensor_key] = Rate(self._samples, self._window)
        sensor.record(value, now)
        self._sweep(now)
        rate, window = sensor.measure(now)
        if rate <= bound:
            return 0
        throttle = round((rate - bound) / bound * window * 1000)
        # Kafka bounds a request-time throttle to one sample window (ClientRequestQuotaManager):
        # request time comes in lumps, and one slow request must not mute a client for minutes
        return min(throttle, round(self._window * 1000)) if key == REQUEST else throttle

    def _sweep(self, now: float) -> None:
        if now - self._swept < 60:
            return
        self._swept = now
        for key in [k for k, s in self._sensors.items() if now - s.last_used > _IDLE_S]:
            del self._sensors[key]


class ByteRateLimit:
    """A broker-wide byte rate (KIP-956): :meth:`exceeded` before starting a read,
    :meth:`record` the bytes read."""

    def __init__(self, bytes_per_second: int, samples: int, window_s: float,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.bytes_per_second = bytes_per_second
        self._rate = Rate(samples, window_s)
        self._clock = clock

    @property
    def unlimited(self) -> bool:
        return self.bytes_per_second >= 2**63 - 1

    def exceeded(self) -> bool:
        return not self.unlimited and self._rate.measure(self._clock())[0] > self.bytes_per_second

    def record(self, size: int) -> None:
        if not self.unlimited:
            self._rate.record(size, self._clock())


def client_quotas(config: Any, image: Any, effective: Callable[[], Any] | None = None) -> QuotaManager:
    """The broker's client quota manager, reading quotas from its metadata image;
    ``effective()``: the broker's configs with the dynamic ones (the remote-read rate is one)."""
    remote = ByteRateLimit(config.get_int("remote.log.manager.fetch.max.bytes.per.second"),
                           config.get_int("remote.log.manager.fetch.quota.window.num"),
                           config.get_int("remote.log.manager.fetch.quota.window.size.seconds"))
    rate = None if effective is None else (
        lambda: effective().get_int("remote.log.manager.fetch.max.bytes.per.second"))
    return QuotaManager(lambda: image.revision, lambda: image.metadata.section(SECTION),
                        config.get_int("quota.window.num"), config.get_int("quota.window.size.seconds"),
                        remote_fetch=remote, remote_rate=rate)
