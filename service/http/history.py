"""A few minutes of the broker's own counters, kept in memory for the console's sparklines.

:class:`History` samples the broker every ``interval_s`` seconds from an asyncio
task of the HTTP listener: it copies the per-topic byte and record counters
(dict copies, O(topics)) and sums each group's lag (O(committed partitions)).
The produce and fetch paths only bump their counters as before; nothing here
runs on them.

Memory is bounded: every series is a fixed ring of ``keep`` floats (150 × 2 s =
five minutes by default), and at most ``max_series`` topics and as many groups
get a series of their own (totals always do). Only topics that have seen traffic
have a series; a topic or group that disappears has its series dropped.

Not thread-safe: sampled and read on the event loop only.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from array import array
from collections.abc import Callable, Collection, Iterable, Mapping
from typing import Any

from service.http.state import group_lag
from service.http.views import MetricsView

__all__ = ["History"]

log = logging.getLogger("strata.http.history")

_TOTALS = ("bytes_in", "bytes_out", "records_in", "records_out")


class _Ring:
    """``size`` floats, oldest first on read; NaN where nothing was sampled."""

    __slots__ = ("_head", "_values")

    def __init__(self, size: int) -> None:
        self._values = array("d", [math.nan]) * size
        self._head = 0

    def push(self, value: float) -> None:
        self._values[self._head] = value
        self._head = (self._head + 1) % len(self._values)

    def last(self) -> float:
        return self._values[self._head - 1]

    def values(self, n: int) -> list[float | None]:
        """The last ``n`` values, oldest first; None where nothing was sampled."""
        size = len(self._values)
        out: list[float | None] = []
        for i in range(size - min(n, size), size):
            v = self._values[(self._head + i) % size]
            out.append(None if math.isnan(v) else v)
        return out


class History:
    """Per-second rates of bytes and records in and out (total and per topic), and each
    group's total lag, over the last ``keep`` samples."""

    def __init__(
        self,
        view: MetricsView,
        *,
        interval_s: float = 2.0,
        keep: int = 150,
        max_series: int = 2000,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._view = view
        self.interval_s = interval_s
        self.keep = keep
        self._max_series = max_series
        self._clock = clock
        self._times = _Ring(keep)
        self._samples = 0
        self._totals = {name: _Ring(keep) for name in _TOTALS}
        self._topics_in: dict[str, _Ring] = {}
        self._topics_out: dict[str, _Ring] = {}
        self._groups: dict[str, _Ring] = {}
        self._last: dict[str, dict[str, int]] | None = None
        self._last_at = 0.0

    # -- sampling -------------------------------------------------------------------------

    async def run(self) -> None:
        while True:
            try:
                self.sample()
            except Exception:  # a failing sample must not stop the next ones
                log.exception("sampling the broker's counters failed")
            await asyncio.sleep(self.interval_s)

    def sample(self) -> None:
        v = self._view
        now = self._clock()
        snap = {"bytes_in": dict(v.bytes_in), "bytes_out": dict(v.bytes_out),
                "records_in": dict(v.records_in), "records_out": dict(v.records_out)}
        last, dt = self._last, now - self._last_at
        self._last, self._last_at = snap, now
        if last is None or dt <= 0:
            return  # the first sample only sets the baseline
        self._times.push(now)
        self._samples += 1
        for name in _TOTALS:
            self._totals[name].push(max(0, sum(snap[name].values()) - sum(last[name].values())) / dt)
        hosted = v.logs.hosted_topics()  # deleted topics lose their series
        self._push_each(self._topics_in, _deltas(snap["bytes_in"], last["bytes_in"], dt, hosted))
        self._push_each(self._topics_out, _deltas(snap["bytes_out"], last["bytes_out"], dt, hosted))
        self._push_each(self._groups, self._group_lags())

    def _group_lags(self) -> dict[str, float]:
        groups = self._view.groups
        if groups is None:
            return {}
        lags: dict[str, float] = {g: 0.0 for g, *_ in groups.list_groups_by_type()}
        for group, offsets in groups.committed_offsets().items():
            lags[group] = float(sum(r["lag"] for r in group_lag(self._view, offsets)))
        return lags

    def _push_each(self, series: dict[str, _Ring], values: Mapping[str, float]) -> None:
        """One value onto each named series; series not named any more are dropped."""
        for name in [n for n in series if n not in values]:
            del series[name]
        for name, value in values.items():
            ring = series.get(name)
            if ring is None:
                if len(series) >= self._max_series:
                    continue
                ring = series[name] = _Ring(self.keep)
                for _ in range(min(self._samples - 1, self.keep)):
                    ring.push(math.nan)  # aligned with the timestamps: nothing known before
            ring.push(value)

    # -- reading --------------------------------------------------------------------------

    def rates(self) -> dict[str, float]:
        """The last sample's per-second rates of the totals (0 before two samples)."""
        return {f"{name}_per_sec": _or_zero(ring.last()) if self._samples else 0.0
                for name, ring in self._totals.items()}

    def topic_rates(self, topic: str) -> tuple[float, float]:
        """Bytes in and out per second of ``topic`` at the last sample."""
        return (_or_zero(self._topics_in[topic].last()) if topic in self._topics_in else 0.0,
                _or_zero(self._topics_out[topic].last()) if topic in self._topics_out else 0.0)

    def series(self, topics: Iterable[str] = (), groups: Iterable[str] = ()) -> dict[str, Any]:
        """Timestamps, total rates and the asked topics' rates and groups' lag, oldest first."""
        n = min(self._samples, self.keep)
        return {
            "interval_s": self.interval_s,
            "timestamps": self._times.values(n),
            "totals": {f"{name}_per_sec": ring.values(n) for name, ring in self._totals.items()},
            "topics": {t: {"bytes_in_per_sec": _values(self._topics_in.get(t), n),
                           "bytes_out_per_sec": _values(self._topics_out.get(t), n)}
                       for t in topics},
            "groups": {g: {"lag": _values(self._groups.get(g), n)} for g in groups},
        }


def _deltas(now: Mapping[str, int], before: Mapping[str, int], dt: float,
            only: Collection[str]) -> dict[str, float]:
    return {name: max(0, value - before.get(name, 0)) / dt for name, value in now.items()
            if name in only}


def _values(ring: _Ring | None, n: int) -> list[float | None]:
    return ring.values(n) if ring is not None else [None] * n


def _or_zero(value: float) -> float:
    return 0.0 if math.isnan(value) else value
