"""The measuring parts of ``strata perf``: latencies, pacing, and producer metrics.

Nothing here talks to a broker; :mod:`service.cli.perf` drives librdkafka and feeds
these.

Latencies (:class:`LatencyRecorder`)
    Kafka's ``ProducerPerformance`` keeps one latency per record (a sample of at
    most 500,000 of them on long runs) in whole milliseconds and reports
    ``sorted[int(p * n)]``. Here the delivery callback stores ``msg.latency()``
    (librdkafka's time from ``produce()`` to the delivery callback, in seconds
    with microsecond resolution) into a preallocated numpy ring, and the main
    loop folds the ring, between polls, into a histogram of whole milliseconds.
    The percentiles are therefore Kafka's, computed over every record rather
    than a sample, in bounded memory; average and maximum keep microseconds.

Pacing (:class:`ThroughputThrottler`)
    Kafka's ``ThroughputThrottler``: when the records sent so far divided by the
    elapsed time exceed the target, add ``1/target`` seconds to a sleep deficit,
    and sleep it off once it reaches 2 ms. The sleep is spent in
    ``producer.poll()`` so delivery callbacks keep being served.

Producer metrics (:class:`ProducerMetrics`, ``--print-metrics``)
    librdkafka has no Java metrics registry; its statistics JSON (emitted every
    ``statistics.interval.ms`` to ``stats_cb``) carries the same measurements.
    Its "window" averages (``sum``/``cnt``) are reset at every emission, so the
    run's averages are Σsum / Σcnt over all emissions. The mapping:

    ``batch-size-avg``
        ``topics[*].batchsize``: bytes per produced message set (batch), as
        Kafka's average bytes per partition batch.
    ``record-queue-time-avg``
        ``brokers[*].int_latency``: microseconds a message waited in the
        producer's partition queue before it went into a request, reported in
        ms. Kafka measures the time a *batch* spent in the accumulator; this is
        the same wait measured per message.
    ``request-latency-avg``
        ``brokers[*].rtt``: microseconds from sending a request to its
        response, in ms, over every request to every broker (mostly Produce).
        Kafka's figure also includes the time a request waited for the socket;
        librdkafka reports that separately (``outbuf_latency``), not included.
    ``outgoing-byte-rate``
        top-level ``tx_bytes`` (every byte written to every broker, headers and
        all) divided by the run's elapsed time. Kafka's is a rate over its last
        sampled windows (about 30-60 s), which equals this on short runs.
    ``bufferpool-wait-ratio``
        librdkafka has no buffer pool; its equivalent of a full
        ``buffer.memory`` is a full queue (``queue.buffering.max.messages`` or
        ``.kbytes``), which ``produce()`` signals with ``BufferError``. The
        ratio is the time the tool spent waiting for room after a
        ``BufferError`` divided by the elapsed time, measured by the tool
        itself, not taken from the statistics.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = [
    "KAFKA_PERCENTILES",
    "LatencyRecorder",
    "ProducerMetrics",
    "ThroughputThrottler",
    "Window",
    "format_metrics_table",
]

#: The percentiles Kafka's producer perf tool prints: 50th, 95th, 99th, 99.9th.
KAFKA_PERCENTILES = (0.5, 0.95, 0.99, 0.999)

_MIN_RING = 1 << 20
_MIN_SLEEP_S = 0.002  # Kafka's ThroughputThrottler.MIN_SLEEP_NS
_MIN_WAIT_S = 0.001


class _Totals:
    """``avg_ms`` and ``max_ms`` of anything with ``count``, ``total_s`` and ``max_s``."""

    count: int
    total_s: float
    max_s: float

    @property
    def avg_ms(self) -> float:
        return 1000.0 * self.total_s / self.count if self.count else 0.0

    @property
    def max_ms(self) -> float:
        return 1000.0 * self.max_s


@dataclass(frozen=True)
class Window(_Totals):
    """Records delivered in one reporting window: count and latencies in seconds."""

    count: int
    total_s: float
    max_s: float


class LatencyRecorder(_Totals):
    """Per-record latencies: a preallocated ring the delivery callback writes, and totals.

    The callback does only ``store[n & mask] = latency`` and ``n += 1``; the owner
    calls :meth:`fold` with that ``n`` between polls, which moves entries
    ``[folded, n)`` into the totals, the current window and a histogram of whole
    milliseconds. Invariant: ``n - folded <= capacity`` at every fold (the ring
    would otherwise have overwritten unfolded entries); :meth:`needs_fold` says
    when to fold early, and the capacity leaves room for ``max_unfolded`` more
    deliveries between two checks.

    Not thread-safe: confluent-kafka runs delivery callbacks inside ``poll()`` /
    ``flush()`` on the calling thread, which is also the thread that folds.
    """

    def __init__(self, expected: int, max_unfolded: int) -> None:
        want = min(max(expected, 1), max(_MIN_RING, 4 * max_unfolded))
        capacity = 1 << (want - 1).bit_length()
        self.ring = np.zeros(capacity, dtype=np.float64)
        # Item assignment through a memoryview costs about half of numpy's __setitem__.
        self.store: Any = self.ring.data
        self.mask = capacity - 1
        self.capacity = capacity
        self.folded = 0
        self.count = 0
        self.total_s = 0.0
        self.max_s = 0.0
        self._hist = np.zeros(1024, dtype=np.int64)  # records per whole millisecond
        self._win_count = 0
        self._win_total_s = 0.0
        self._win_max_s = 0.0

    def needs_fold(self, n: int) -> bool:
        return n - self.folded >= self.capacity // 2

    def fold(self, n: int) -> None:
        """Take the latencies of deliveries ``[folded, n)`` out of the ring."""
        pending = n - self.folded
        if pending <= 0:
            return
        if pending > self.capacity:
            raise RuntimeError(f"latency ring overrun: {pending} unfolded > {self.capacity}")
        start = self.folded & self.mask
        end = start + pending
        if end <= self.capacity:
            chunk = self.ring[start:end]
        else:
            chunk = np.concatenate((self.ring[start:], self.ring[:end - self.capacity]))
        total = float(chunk.sum())
        peak = float(chunk.max())
        ms = np.floor(chunk * 1000.0).astype(np.int64)
        np.clip(ms, 0, None, out=ms)
        top = int(ms.max())
        if top >= len(self._hist):
            grown = np.zeros(max(top + 1, 2 * len(self._hist)), dtype=np.int64)
            grown[:len(self._hist)] = self._hist
            self._hist = grown
        self._hist += np.bincount(ms, minlength=len(self._hist))
        self.folded = n
        self.count += pending
        self.total_s += total
        self.max_s = max(self.max_s, peak)
        self._win_count += pending
        self._win_total_s += total
        self._win_max_s = max(self._win_max_s, peak)

    def take_window(self) -> Window:
        """The deliveries folded since the last call, and start a new window."""
        window = Window(self._win_count, self._win_total_s, self._win_max_s)
        self._win_count = 0
        self._win_total_s = 0.0
        self._win_max_s = 0.0
        return window

    def percentiles_ms(self, quantiles: Sequence[float] = KAFKA_PERCENTILES) -> list[int]:
        """Kafka's percentiles: ``sorted_ms[int(q * count)]`` for each quantile, in whole ms."""
        if self.count == 0:
            return [0 for _ in quantiles]
        cumulative = np.cumsum(self._hist)
        out: list[int] = []
        for q in quantiles:
            index = min(int(q * self.count), self.count - 1)
            out.append(int(np.searchsorted(cumulative, index, side="right")))
        return out


class ThroughputThrottler:
    """Kafka's ThroughputThrottler: pace sends to about ``target`` per second.

    A negative target never throttles. ``throttle(wait)`` spends the accumulated
    sleep deficit in ``wait(seconds)`` calls (``producer.poll``), which may return
    early; it keeps waiting until the deficit has passed.
    """

    def __init__(self, target_per_s: float, start: float,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if target_per_s == 0:
            raise ValueError("a throughput of 0 would never send")
        self.target = target_per_s
        self.start = start
        self._sleep_s = 1.0 / target_per_s if target_per_s > 0 else 0.0
        self._deficit_s = 0.0
        self._clock = clock

    @property
    def unthrottled(self) -> bool:
        return self.target < 0

    def should_throttle(self, amount_so_far: int, now: float) -> bool:
        if self.target < 0:
            return False
        elapsed = now - self.start
        return elapsed > 0 and amount_so_far / elapsed > self.target

    def throttle(self, wait: Callable[[float], object]) -> None:
        self._deficit_s += self._sleep_s
        if self._deficit_s < _MIN_SLEEP_S:
            return
        deadline = self._clock() + self._deficit_s
        while (remaining := deadline - self._clock()) > 0:
            # poll() takes whole milliseconds: a shorter wait would return at once and spin.
            wait(max(remaining, _MIN_WAIT_S))
        self._deficit_s = 0.0


class ProducerMetrics:
    """librdkafka statistics (``stats_cb``) accumulated into Kafka's producer metrics.

    Call the instance with each statistics JSON string; :meth:`metrics` gives the
    five Kafka metric names with their values (see the module docstring for where
    each comes from). Not thread-safe; confluent-kafka calls ``stats_cb`` from
    ``poll()`` on the polling thread.
    """

    NAMES = ("batch-size-avg", "bufferpool-wait-ratio", "outgoing-byte-rate",
             "record-queue-time-avg", "request-latency-avg")

    def __init__(self) -> None:
        self.emissions = 0
        self.tx_bytes = 0
        self._sums: dict[str, float] = {"batchsize": 0.0, "int_latency": 0.0, "rtt": 0.0}
        self._counts: dict[str, int] = {"batchsize": 0, "int_latency": 0, "rtt": 0}

    def __call__(self, stats_json: str) -> None:
        self.add(json.loads(stats_json))

    def add(self, stats: dict[str, Any]) -> None:
        """Fold one statistics emission (already parsed) into the totals."""
        self.emissions += 1
        self.tx_bytes = max(self.tx_bytes, int(stats.get("tx_bytes", 0)))
        for broker in stats.get("brokers", {}).values():
            for key in ("int_latency", "rtt"):
                self._add_window(key, broker.get(key))
        for topic in stats.get("topics", {}).values():
            self._add_window("batchsize", topic.get("batchsize"))

    def _add_window(self, key: str, window: dict[str, Any] | None) -> None:
        if not window:
            return
        self._sums[key] += float(window.get("sum", 0))
        self._counts[key] += int(window.get("cnt", 0))

    def _avg(self, key: str) -> float:
        count = self._counts[key]
        return self._sums[key] / count if count else 0.0

    def metrics(self, elapsed_s: float, blocked_s: float) -> dict[str, float]:
        """Kafka metric name → value, for a run of ``elapsed_s`` that waited ``blocked_s``."""
        return {
            "batch-size-avg": self._avg("batchsize"),
            "bufferpool-wait-ratio": blocked_s / elapsed_s if elapsed_s > 0 else 0.0,
            "outgoing-byte-rate": self.tx_bytes / elapsed_s if elapsed_s > 0 else 0.0,
            "record-queue-time-avg": self._avg("int_latency") / 1000.0,
            "request-latency-avg": self._avg("rtt") / 1000.0,
        }


def format_metrics_table(group: str, tags: dict[str, str], metrics: dict[str, float]) -> str:
    """Kafka's ``ToolsUtils.printMetrics`` layout: ``group:name:{tags} : value``, sorted."""
    tag_text = "{" + ", ".join(f"{k}={v}" for k, v in tags.items()) + "}"
    rows = sorted((f"{group}:{name}:{tag_text}", value) for name, value in metrics.items())
    if not rows:
        return ""
    width = max(len(name) for name, _ in rows)
    lines = ["", f"{'Metric Name':<{width}}   Value"]
    lines += [f"{name:<{width}} : {value:.3f}" for name, value in rows]
    return "\n".join(lines)
