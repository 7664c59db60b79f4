"""Latency histograms the broker fills on its hot paths, exported by ``/metrics``.

Observing costs a dict lookup and a ``bisect`` on the event loop; the buckets
are cumulated only when :mod:`service.http.metrics` renders them at scrape time.

Not thread-safe: observed and read on the event loop thread.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterator, Sequence

__all__ = ["REMOTE_READ_BUCKETS", "REQUEST_BUCKETS", "LatencyHistograms"]

#: seconds; Kafka request latencies span 50 µs (ApiVersions) to a fetch's long poll
REQUEST_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
                   1.0, 2.5, 5.0, 10.0, 30.0)

#: seconds; a tiered read is a cache hit (sub-ms) or ranged GETs (ms to seconds)
REMOTE_READ_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
                       10.0, 30.0)


class LatencyHistograms:
    """Histograms by one label (the API name, the kind of read), cumulated only on export."""

    def __init__(self, buckets: Sequence[float] = REQUEST_BUCKETS) -> None:
        self.buckets = tuple(buckets)
        self._counts: dict[str, list[int]] = {}
        self._sums: dict[str, float] = {}

    def observe(self, label: str, seconds: float) -> None:
        counts = self._counts.get(label)
        if counts is None:
            counts = self._counts[label] = [0] * (len(self.buckets) + 1)
            self._sums[label] = 0.0
        counts[bisect.bisect_left(self.buckets, seconds)] += 1
        self._sums[label] += seconds

    def series(self) -> Iterator[tuple[str, list[tuple[float, int]], float]]:
        """Per label, in label order: cumulative ``(upper bound, count)`` pairs, the last
        bound ``inf``, and the sum of the observations."""
        for label, counts in sorted(self._counts.items()):
            cumulative, running = [], 0
            for bound, count in zip((*self.buckets, float("inf")), counts):
                running += count
                cumulative.append((bound, running))
            yield label, cumulative, self._sums[label]
