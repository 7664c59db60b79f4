"""`strata perf produce|consume`: the measuring parts, then the CLI as a subprocess.

The end-to-end tests share one real broker (``module_start_broker``) with topic
auto-creation off, so an unknown topic stays unknown, and no initial rebalance
delay, so group runs stay short. Timing is only ever asserted as a lower bound
(``--throughput`` must slow a run down), never as an upper one.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from confluent_kafka import Consumer, TopicPartition

from service.cli.perf.consume import HEADER
from service.cli.perf.stats import (
    LatencyRecorder,
    ProducerMetrics,
    ThroughputThrottler,
    format_metrics_table,
)
from tests.conftest import free_port
from tests.e2e.helpers import consume, create_topic, produce_values, topic_name, watermarks
from tests.service.cli.helpers import REPO_ROOT, fails_cleanly, ok, strata

SUMMARY = re.compile(
    r"^(?P<count>\d+) records sent, (?P<rate>[\d.]+) records/sec \((?P<mb>[\d.]+) MB/sec\), "
    r"(?P<avg>[\d.]+) ms avg latency, (?P<max>[\d.]+) ms max latency, (?P<p50>\d+) ms 50th, "
    r"(?P<p95>\d+) ms 95th, (?P<p99>\d+) ms 99th, (?P<p999>\d+) ms 99\.9th\.$")
PROGRESS = re.compile(
    r"^\d+ records sent, [\d.]+ records/sec \([\d.]+ MB/sec\), [\d.]+ ms avg latency, "
    r"[\d.]+ ms max latency\.$")
METRIC = re.compile(
    r"^producer-metrics:(?P<name>[a-z-]+):\{client-id=perf-producer-client\}\s+: "
    r"(?P<value>-?\d+\.\d{3})$")
FIVE_METRICS = {"batch-size-avg", "record-queue-time-avg", "request-latency-avg",
                "outgoing-byte-rate", "bufferpool-wait-ratio"}


# --------------------------------------------------------------------------- measuring parts


def kafka_percentiles(latencies_s: np.ndarray, quantiles: tuple[float, ...]) -> list[int]:
    """Kafka's ProducerPerformance method on whole-ms latencies: sorted[int(q * n)]."""
    ms = sorted(int(x) for x in np.floor(latencies_s * 1000.0))
    return [ms[int(q * len(ms))] for q in quantiles]


def test_latency_recorder_gives_kafkas_percentiles_across_ring_wraps() -> None:
    rng = np.random.default_rng(7)
    latencies = rng.gamma(2.0, 0.004, size=5000)  # seconds, a few ms with a long tail
    recorder = LatencyRecorder(expected=100, max_unfolded=10)
    assert recorder.capacity == 128  # small ring: the 5000 writes wrap it many times
    for n, value in enumerate(latencies, 1):
        recorder.ring[(n - 1) & recorder.mask] = value  # what the delivery callback does
        if recorder.needs_fold(n) or n % 37 == 0:
            recorder.fold(n)
    recorder.fold(len(latencies))

    quantiles = (0.5, 0.95, 0.99, 0.999)
    assert recorder.count == len(latencies)
    assert recorder.percentiles_ms(quantiles) == kafka_percentiles(latencies, quantiles)
    assert recorder.avg_ms == pytest.approx(latencies.mean() * 1000.0)
    assert recorder.max_ms == pytest.approx(latencies.max() * 1000.0)


def test_latency_recorder_windows_reset_and_overrun_is_refused() -> None:
    recorder = LatencyRecorder(expected=8, max_unfolded=1)
    recorder.ring[:2] = (0.001, 0.003)
    recorder.fold(2)
    window = recorder.take_window()
    assert window.count == 2
    assert window.avg_ms == pytest.approx(2.0) and window.max_ms == pytest.approx(3.0)
    assert recorder.take_window().count == 0
    with pytest.raises(RuntimeError, match="overrun"):
        recorder.fold(2 + recorder.capacity + 1)


def test_throttler_paces_to_the_target_like_kafkas() -> None:
    clock = [100.0]

    def wait(seconds: float) -> None:
        clock[0] += seconds

    throttler = ThroughputThrottler(1000.0, start=clock[0], clock=lambda: clock[0])
    for i in range(5000):  # an infinitely fast sender: only the throttler spends time
        clock[0] += 1e-6
        if throttler.should_throttle(i, clock[0]):
            throttler.throttle(wait)
    assert clock[0] - 100.0 == pytest.approx(5.0, rel=0.02)
    assert ThroughputThrottler(-1, start=0.0).unthrottled
    assert not ThroughputThrottler(-1, start=0.0).should_throttle(10**9, 1.0)


def _stats(tx_bytes: int, int_latency: tuple[int, int], rtt: tuple[int, int],
           batchsize: tuple[int, int]) -> str:
    def window(total: int, count: int) -> dict[str, int]:
        return {"sum": total, "cnt": count, "avg": total // max(count, 1)}

    return json.dumps({
        "tx_bytes": tx_bytes,
        "brokers": {"127.0.0.1:9092/1": {"int_latency": window(*int_latency),
                                          "rtt": window(*rtt)},
                    "127.0.0.1:9092/bootstrap": {"int_latency": window(0, 0),
                                                 "rtt": window(*rtt)}},
        "topics": {"t": {"batchsize": window(*batchsize)}},
    })


def test_producer_metrics_sum_librdkafka_windows_into_run_averages() -> None:
    metrics = ProducerMetrics()
    metrics(_stats(1000, int_latency=(3000, 3), rtt=(2000, 1), batchsize=(300, 2)))
    metrics(_stats(5000, int_latency=(1000, 1), rtt=(6000, 1), batchsize=(100, 2)))
    values = metrics.metrics(elapsed_s=2.0, blocked_s=0.5)
    assert metrics.emissions == 2
    assert values == {
        "batch-size-avg": pytest.approx(100.0),  # (300 + 100) bytes / 4 batches
        "record-queue-time-avg": pytest.approx(1.0),  # 4000 us / 4 messages, in ms
        "request-latency-avg": pytest.approx(4.0),  # (2000*2 + 6000*2) us / 4 requests, in ms
        "outgoing-byte-rate": pytest.approx(2500.0),  # the last cumulative tx_bytes / 2 s
        "bufferpool-wait-ratio": pytest.approx(0.25),
    }
    table = format_metrics_table("producer-metrics", {"client-id": "c"}, values).splitlines()
    assert table[0] == ""
    assert table[1].startswith("Metric Name") and table[1].endswith("   Value")
    assert table[2] == "producer-metrics:batch-size-avg:{client-id=c}        : 100.000"
    assert [line.split(":")[1] for line in table[2:]] == sorted(values)


# --------------------------------------------------------------------------- end to end


@pytest.fixture(scope="module")
def perf_broker(module_start_broker: Any) -> Any:
    return module_start_broker(sets={"auto.create.topics.enable": "false",
                                     "group.initial.rebalance.delay.ms": "0"})


def perf(*args: str, bootstrap: str) -> subprocess.CompletedProcess[str]:
    return strata("perf", *args, bootstrap=bootstrap)


def summary(stdout: str) -> dict[str, str]:
    matches = [m for m in map(SUMMARY.match, stdout.splitlines()) if m]
    assert len(matches) == 1, stdout
    return matches[0].groupdict()


def consumer_row(stdout: str) -> list[str]:
    lines = stdout.splitlines()
    assert lines[0] == HEADER, stdout
    assert len(lines) == 2, stdout
    fields = lines[1].split(", ")
    assert len(fields) == 10, lines[1]
    assert all(re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d:\d{3}", f) for f in fields[:2])
    return fields


def test_produce_reports_n_records_and_the_topic_holds_exactly_n_of_size_b(
        perf_broker: Any) -> None:
    b = perf_broker.bootstrap
    topic = topic_name("perf-produce")
    create_topic(b, topic, partitions=2)

    proc = ok(perf("produce", "--topic", topic, "--num-records", "3000", "--record-size", "137",
                   "--throughput", "-1", "--producer-props", "acks=all", "linger.ms=2",
                   bootstrap=b))
    result = summary(proc.stdout)
    assert int(result["count"]) == 3000
    assert float(result["rate"]) > 0 and float(result["mb"]) >= 0
    assert float(result["max"]) >= float(result["avg"]) > 0
    assert int(result["p50"]) <= int(result["p95"]) <= int(result["p99"]) <= int(result["p999"])

    ends = [watermarks(b, topic, p) for p in (0, 1)]
    assert sum(high - low for low, high in ends) == 3000
    records = consume(b, topic, [0, 1], 3000)
    assert {len(m.value()) for m in records} == {137}
    assert all(re.fullmatch(rb"[A-Z]+", m.value()) for m in records[:50])


def test_throughput_paces_the_run_and_progress_lines_appear(perf_broker: Any) -> None:
    b = perf_broker.bootstrap
    topic = topic_name("perf-paced")
    create_topic(b, topic)
    records, rate = 300, 150.0  # at least 2 s

    began = time.monotonic()
    proc = ok(perf("produce", "--topic", topic, "--num-records", str(records), "--record-size",
                   "10", "--throughput", str(rate), "--reporting-interval", "500",
                   bootstrap=b))
    wall = time.monotonic() - began
    result = summary(proc.stdout)
    assert int(result["count"]) == records
    assert records / float(result["rate"]) >= 0.85 * records / rate  # the tool's own clock
    assert wall >= 0.85 * records / rate
    progress = [line for line in proc.stdout.splitlines() if PROGRESS.match(line)]
    assert progress, proc.stdout


def test_print_metrics_prints_the_five_kafka_producer_metrics(perf_broker: Any) -> None:
    b = perf_broker.bootstrap
    topic = topic_name("perf-metrics")
    create_topic(b, topic)

    proc = ok(perf("produce", "--topic", topic, "--num-records", "2000", "--record-size", "100",
                   "--print-metrics", bootstrap=b))
    assert int(summary(proc.stdout)["count"]) == 2000
    metrics = {m["name"]: float(m["value"])
               for m in map(METRIC.match, proc.stdout.splitlines()) if m}
    assert set(metrics) == FIVE_METRICS, proc.stdout
    assert metrics["batch-size-avg"] > 100  # batches of many 100-byte records
    assert metrics["outgoing-byte-rate"] > 0
    assert metrics["request-latency-avg"] > 0
    assert metrics["record-queue-time-avg"] >= 0
    assert 0 <= metrics["bufferpool-wait-ratio"] <= 1
    assert "Metric Name" in proc.stdout


def test_payload_file_records_are_drawn_from_the_file(perf_broker: Any,
                                                      tmp_path: Path) -> None:
    b = perf_broker.bootstrap
    topic = topic_name("perf-payloads")
    create_topic(b, topic)
    payloads = tmp_path / "payloads.txt"
    payloads.write_text("alpha\nbravo-bravo\ncharlie-charlie-charlie\n")

    proc = ok(perf("produce", "--topic", topic, "--num-records", "300", "--payload-file",
                   str(payloads), bootstrap=b))
    assert "Number of messages read: 3" in proc.stdout
    assert int(summary(proc.stdout)["count"]) == 300
    values = {m.value() for m in consume(b, topic, [0], 300)}
    assert values == {b"alpha", b"bravo-bravo", b"charlie-charlie-charlie"}


def test_consume_reads_exactly_the_asked_messages(perf_broker: Any) -> None:
    b = perf_broker.bootstrap
    topic = topic_name("perf-consume")
    create_topic(b, topic, partitions=3)
    for p in range(3):
        produce_values(b, topic, [b"v" * 200] * 500, partition=p)

    fields = consumer_row(ok(perf("consume", "--topic", topic, "--messages", "1000",
                                  bootstrap=b)).stdout)
    assert int(fields[4]) == 1000  # data.consumed.in.nMsg
    assert float(fields[2]) == pytest.approx(1000 * 200 / 2**20, abs=1e-4)  # in MB
    assert int(fields[6]) == 0  # no group: no rebalance
    assert float(fields[5]) > 0 and float(fields[3]) > 0


def test_consume_with_group_subscribes_and_commits(perf_broker: Any) -> None:
    b = perf_broker.bootstrap
    topic = topic_name("perf-group")
    group = topic_name("perf-group-g")
    create_topic(b, topic, partitions=2)
    for p in range(2):
        produce_values(b, topic, [b"x" * 50] * 300, partition=p)

    fields = consumer_row(ok(perf("consume", "--topic", topic, "--messages", "600",
                                  "--group", group, bootstrap=b)).stdout)
    assert int(fields[4]) == 600
    assert int(fields[6]) >= 0 and int(fields[7]) >= 0  # rebalance.time.ms, fetch.time.ms

    probe = Consumer({"bootstrap.servers": b, "group.id": group, "enable.auto.commit": False})
    try:
        committed = probe.committed([TopicPartition(topic, p) for p in range(2)], timeout=15)
    finally:
        probe.close()
    assert sum(tp.offset for tp in committed) == 600


def test_consume_gives_up_after_timeout_with_a_clear_error(perf_broker: Any) -> None:
    b = perf_broker.bootstrap
    topic = topic_name("perf-short")
    create_topic(b, topic)
    produce_values(b, topic, [b"r"] * 5)

    proc = perf("consume", "--topic", topic, "--messages", "10", "--timeout", "500",
                bootstrap=b)
    line = fails_cleanly(proc)
    assert "consumed only 5 of 10" in line and "--timeout" in line
    assert int(consumer_row(proc.stdout)[4]) == 5


@pytest.mark.parametrize("command", ["produce", "consume"])
def test_unknown_topic_fails_cleanly(perf_broker: Any, command: str) -> None:
    args = (["--num-records", "10", "--record-size", "10"] if command == "produce"
            else ["--messages", "10"])
    line = fails_cleanly(perf(command, "--topic", "perf-no-such-topic", *args,
                              bootstrap=perf_broker.bootstrap))
    assert "does not exist" in line and "strata topics create" in line


@pytest.mark.parametrize("command", ["produce", "consume"])
def test_refused_broker_fails_fast_with_a_clear_message(command: str) -> None:
    args = (["--num-records", "10", "--record-size", "10"] if command == "produce"
            else ["--messages", "10"])
    began = time.monotonic()
    proc = perf(command, "--topic", "t", *args, bootstrap=f"127.0.0.1:{free_port()}")
    line = fails_cleanly(proc)
    assert "cannot reach a broker" in line
    assert time.monotonic() - began < 30  # the CLI bounds its waits; no hang


@pytest.mark.parametrize("args", [
    ["produce", "--topic", "t", "--num-records", "10", "--record-size", "0"],
    ["produce", "--topic", "t", "--num-records", "10", "--record-size", "-3"],
    ["produce", "--topic", "t", "--num-records", "0", "--record-size", "10"],
    ["produce", "--topic", "t", "--num-records", "10"],
    ["produce", "--topic", "t", "--num-records", "10", "--record-size", "10",
     "--throughput", "0"],
    ["produce", "--topic", "t", "--num-records", "10", "--record-size", "10",
     "--producer-props", "acks"],
    ["produce", "--topic", "t", "--num-records", "10", "--record-size", "10",
     "--producer-props", "=1"],
    ["produce", "--topic", "t", "--num-records", "10", "--record-size", "10",
     "--producer-props", "no.such.property=1"],
    ["consume", "--topic", "t", "--messages", "0"],
    ["consume", "--topic", "t"],
], ids=["record-size-0", "record-size-negative", "num-records-0", "no-payload",
        "throughput-0", "props-no-equals", "props-no-key", "props-unknown",
        "messages-0", "messages-missing"])
def test_bad_flags_are_usage_errors(args: list[str]) -> None:
    # No broker listens there: the flags must be refused before any connection.
    proc = perf(*args, bootstrap=f"127.0.0.1:{free_port()}")
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    assert "usage: strata perf" in proc.stderr and "error:" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_perf_without_a_subcommand_is_a_usage_error() -> None:
    proc = subprocess.run([sys.executable, "-m", "service", "perf"], capture_output=True,
                          text=True, timeout=60, check=False,
                          cwd=REPO_ROOT)
    assert proc.returncode == 2
    assert "a command is required" in proc.stderr
