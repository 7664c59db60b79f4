"""The event loop stays responsive through heavy metadata changes (issue 32, item 4).

Read from the broker's own ``strata_event_loop_lag_seconds`` histogram (its probe
runs every 5 ms here, so any stall longer than 55 ms lands above the 50 ms bucket):

* deleting a topic of 1,000 partitions: each partition's directory was removed and
  the checkpoints rewritten and fsynced on the loop, one partition at a time;
* a transaction-coordinator failover: the broker that takes over a
  ``__transaction_state`` partition replayed its whole log on the loop, inside the
  metadata apply.

Each test counts only the samples taken during the change (the histogram read just
before it is subtracted), so start-up and topic creation do not count.
"""

from __future__ import annotations

import os
import socket
import struct
import tempfile
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import NewTopic
from prometheus_client.parser import text_string_to_metric_families

from tests.cluster_fixtures import Cluster, _ClusterPool
from tests.conftest import BrokerProcess, free_port
from tests.e2e.helpers import CLIENT_TIMEOUT_S, admin, wait_for_topic, wait_until
from tests.e2e.rawconsumer import cstring
from tests.e2e.rawkafka import string

LAG_LIMIT_S = 0.05
#: what a probe may be late by when the machine itself starved processes of a core
STARVED_LIMIT_S = 0.25
NO_STALL = "(no stall)"
PROBE = {
    "event.loop.lag.probe.interval.ms": "5",
    # the periodic checkpoints' fsyncs are moved off the loop on their own (issue 32); they
    # must not land in the windows measured here
    "replica.high.watermark.checkpoint.interval.ms": "600000",
    "log.flush.offset.checkpoint.interval.ms": "600000",
    # a stall is logged with what the loop ran: the failure message quotes it
    "event.loop.stall.log.ms": "40",
}
TXN_IDS = 20_000
API_INIT_PRODUCER_ID = 22


def _lag(broker: BrokerProcess) -> dict[float, int]:
    """The broker's loop-lag histogram: cumulative count by upper bound (``inf``: all samples)."""
    with urllib.request.urlopen(f"{broker.admin_url}/metrics", timeout=10) as resp:
        text = resp.read().decode()
    families = {family.name: family for family in text_string_to_metric_families(text)}
    assert {"strata_event_loop_stalls", "strata_gc_pauses"} <= families.keys()  # the stall watch's counters
    for family in families.values():
        if family.name == "strata_event_loop_lag_seconds":
            return {float(s.labels["le"]): int(s.value) for s in family.samples if s.name.endswith("_bucket")}
    raise AssertionError("no strata_event_loop_lag_seconds in /metrics")


def _late(histogram: dict[float, int]) -> int:
    return histogram[float("inf")] - histogram[LAG_LIMIT_S]


def _settled(broker: BrokerProcess, timeout_s: float = 30.0) -> dict[float, int]:
    """The loop lag once the loop runs freely: two reads 1 s apart with no late probe
    between them and the probe firing all along (a stall still going on when the first
    read is answered shows only in a later one)."""
    deadline = time.monotonic() + timeout_s
    previous = _lag(broker)
    while time.monotonic() < deadline:
        time.sleep(1.0)
        now = _lag(broker)
        if _late(now) == _late(previous) and now[float("inf")] - previous[float("inf")] >= 100:
            return now
        previous = now
    raise AssertionError(f"the broker's loop did not settle in {timeout_s:.0f} s: {previous}")


class Starvation:
    """How starved of CPU the machine was while a test ran: a control probe in this process
    (the most a 5 ms sleep overslept) and the load average. On a shared, overloaded machine
    (two cores, other test runs) a broker's threads may wait for a core, or for the GIL held
    by a thread that waits for one, for more than 50 ms however free its event loop is;
    then only stalls beyond :data:`STARVED_LIMIT_S` count against the broker (the stalls
    this test is about were 0.7 s and 5.7 s)."""

    def __init__(self, broker_pid: int | None = None) -> None:
        self.worst_s = 0.0
        self.load = 0.0
        #: how long the broker's loop thread (its main thread) waited for a core meanwhile, in all
        self.loop_waited_s = 0.0
        self._schedstat = None if broker_pid is None else f"/proc/{broker_pid}/task/{broker_pid}/schedstat"
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Starvation:
        self.loop_waited_s = -self._run_delay_s()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.load = os.getloadavg()[0]
        self.loop_waited_s += self._run_delay_s()

    def _run_delay_s(self) -> float:
        """The thread's time on the run queue, waiting for a core (schedstat's second field)."""
        if self._schedstat is None:
            return 0.0
        with open(self._schedstat) as f:
            return int(f.read().split()[1]) / 1e9

    def _run(self) -> None:
        while not self._stop.is_set():
            start = time.monotonic()
            time.sleep(0.005)
            self.worst_s = max(self.worst_s, time.monotonic() - start - 0.005)

    @property
    def starved(self) -> bool:
        return self.worst_s > LAG_LIMIT_S or self.load > 2 * (os.cpu_count() or 1)

    def __str__(self) -> str:
        return f"load average {self.load:.1f} on {os.cpu_count()} cores, this process waited up to " \
               f"{self.worst_s * 1000:.0f} ms for a core, the broker's loop thread " \
               f"{self.loop_waited_s * 1000:.0f} ms in all"


def _assert_no_late_probe(broker: BrokerProcess, before: dict[float, int], machine: Starvation,
                          log_from: int = 0) -> None:
    """No probe ran more than 50 ms late since ``before`` (more than :data:`STARVED_LIMIT_S`
    when the machine was starved of CPU meanwhile, :class:`Starvation`).

    One probe in (50, 100] ms is let pass when the broker logged no stall since ``log_from``
    (its stall watch logs the loop running one thing for 40 ms): the loop was then waiting
    for a core, not working. Two CI runs failed on a single such probe among ~500, at a load
    average of 2.7 with other tests' brokers on the same two cores; the stalls this test
    is about were 0.7 s and 5.7 s. So are late probes up to 250 ms, when no stall was logged
    and the broker's loop thread itself waited on the run queue for at least 50 ms per late
    probe (``Starvation(broker_pid)``; a loop held by a worker's GIL waits asleep, not
    there): a CI run at a load average of 2.6 had two, at 50-100 and 100-250 ms."""
    after = _lag(broker)
    delta = {bound: after[bound] - before[bound] for bound in after}
    samples = delta[float("inf")]
    assert samples > 100, delta  # the probe ran all along
    late = {f"<={bound * 1000:g} ms": n - delta[lower] for lower, (bound, n)
            in zip(sorted(delta), sorted(delta.items())[1:]) if bound > LAG_LIMIT_S and n > delta[lower]}
    limit = STARVED_LIMIT_S if machine.starved else LAG_LIMIT_S
    stalls = _stalls_logged(broker, log_from)
    print(f"loop lag: {samples} probes, {_late(delta)} more than 50 ms late {late}; {machine}; "
          f"limit {limit * 1000:g} ms; stalls the broker logged:\n{stalls}")
    too_late = delta[float("inf")] - delta[limit]
    if too_late == 1 and limit == LAG_LIMIT_S and delta[float("inf")] == delta[0.1] and stalls == NO_STALL:
        return  # one probe in (50, 100] ms, the loop doing nothing that long: a core was busy elsewhere
    if (stalls == NO_STALL and delta[float("inf")] == delta[STARVED_LIMIT_S]
            and machine.loop_waited_s >= LAG_LIMIT_S * too_late):
        return  # none past 250 ms, the loop running nothing long, its thread waiting for a core that long
    assert too_late == 0, f"{too_late} of {samples} probes ran more than {limit * 1000:g} ms late: {late} " \
                          f"({machine}); the broker logged:\n{stalls}"


def _stalls_logged(broker: BrokerProcess, log_from: int = 0) -> str:
    """The broker's own account of its stalls (:class:`service.loop_lag.StallWatch`), in its
    log from byte ``log_from`` on."""
    with broker.log_path.open("rb") as f:
        f.seek(log_from)
        lines = f.read().decode(errors="replace").splitlines()
    told = [n for n, line in enumerate(lines) if "event loop stalled" in line or "garbage collection of" in line]
    return "\n".join("\n".join(lines[n:n + 30]) for n in told[-5:]) or NO_STALL


def _log_size(broker: BrokerProcess) -> int:
    return broker.log_path.stat().st_size


@pytest.fixture
def memory_dir() -> Iterator[Path]:
    """A directory in memory (tmpfs): fsyncs cost nothing there, so what a test measures is
    the event loop's own work, not the shared disk's latency (the periodic checkpoints'
    fsyncs are moved off the loop on their own, issue 32)."""
    shm = Path("/dev/shm")
    if not shm.is_dir() or not os.access(shm, os.W_OK):
        pytest.skip("no writable /dev/shm")
    with tempfile.TemporaryDirectory(dir=shm, prefix="strata-loop-lag-") as path:
        yield Path(path)


def test_deleting_a_topic_of_1000_partitions_keeps_the_loop_lag_under_50_ms(memory_dir: Path) -> None:
    broker = BrokerProcess(memory_dir / "data", free_port(), sets=PROBE, log_path=memory_dir / "broker.log")
    try:
        broker.start()
        _delete_1000_partitions(broker)
    except BaseException:
        print(broker.log_tail())
        raise
    finally:
        broker.kill()


def _delete_1000_partitions(broker: BrokerProcess) -> None:
    client = admin(broker.bootstrap)  # held: its futures die with it
    created = client.create_topics([NewTopic("wide", num_partitions=1000, replication_factor=1)],
                                   request_timeout=90)  # a 1,000-partition creation is slow on 2 busy cores
    created["wide"].result(timeout=95)
    wait_for_topic(broker.bootstrap, "wide", 1000, timeout=90)
    logs = broker.data_dir / "logs"
    # the logs open in slices of about 20 ms of the loop each, after the metadata names them
    deadline = time.monotonic() + 60
    while sum(1 for p in logs.iterdir() if p.name.startswith("wide-")) < 1000 and time.monotonic() < deadline:
        time.sleep(0.2)
    assert sum(1 for p in logs.iterdir() if p.name.startswith("wide-")) == 1000
    before = _settled(broker)  # creating the partitions has its own stalls (not this test's)
    log_from = _log_size(broker)

    with Starvation(broker.proc.pid if broker.proc is not None else None) as machine:
        futures = client.delete_topics(["wide"], request_timeout=CLIENT_TIMEOUT_S)
        futures["wide"].result(timeout=CLIENT_TIMEOUT_S)
        wait_until(lambda: not any(p.name.startswith("wide") for p in logs.iterdir()),
                   "the 1,000 partition directories are removed", timeout=30)
        time.sleep(0.5)
    _assert_no_late_probe(broker, before, machine, log_from)


def _init_producer_ids(bootstrap: str, ids: list[str]) -> list[tuple[int, int]]:
    """InitProducerId v3 for each id, pipelined on one connection: ``(error code, epoch)`` each."""
    host, _, port = bootstrap.rpartition(":")
    answers: list[tuple[int, int]] = []
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        reader = sock.makefile("rb")
        for start in range(0, len(ids), 500):
            chunk = ids[start:start + 500]
            frames = []
            for n, tid in enumerate(chunk):
                header = struct.pack(">hhi", API_INIT_PRODUCER_ID, 3, n) + string("lag") + b"\0"
                body = cstring(tid) + struct.pack(">iqh", 60_000, -1, -1) + b"\0"
                payload = header + body
                frames.append(struct.pack(">i", len(payload)) + payload)
            sock.sendall(b"".join(frames))
            for _ in chunk:
                (size,) = struct.unpack(">i", reader.read(4))
                payload = reader.read(size)
                # correlation id, header tags, throttle, then error code, producer id, epoch
                error, _, epoch = struct.unpack_from(">hqh", payload, 4 + 1 + 4)
                answers.append((error, epoch))
    return answers


def _leader(broker: BrokerProcess, topic: str) -> int:
    md = admin(broker.bootstrap).list_topics(topic, timeout=CLIENT_TIMEOUT_S)
    t = md.topics.get(topic)
    return -1 if t is None or t.error is not None else t.partitions[0].leader


def test_a_transaction_coordinator_failover_keeps_the_loop_lag_under_50_ms(memory_dir: Path) -> None:
    """In memory, as the deletion above: on the shared disk of a CI machine, a segment append's
    write() into the page cache waited 50-130 ms behind other tests' fsyncs (the broker's
    stall log showed it in ``LogSegment.append``), which is the disk's latency, not this
    test's subject."""
    cluster = _ClusterPool(memory_dir)(2, sets={
        **PROBE,
        "transaction.state.log.num.partitions": "1",
        "transaction.state.log.replication.factor": "2",
        "offsets.topic.replication.factor": "2",
    })
    try:
        _failover(cluster)
    finally:
        cluster.close()


def _failover(cluster: Cluster) -> None:
    first = cluster.brokers[1]
    ids = [f"txn-{n:05d}" for n in range(TXN_IDS)]
    Producer({"bootstrap.servers": first.bootstrap, "transactional.id": ids[0]}).init_transactions(
        CLIENT_TIMEOUT_S)  # FindCoordinator creates __transaction_state
    leader = cluster.wait_for("a __transaction_state leader", lambda: _leader(first, "__transaction_state") > 0
                              and _leader(first, "__transaction_state"))
    assert _init_producer_ids(cluster.brokers[leader].bootstrap, ids[1:]) == [(0, 0)] * (TXN_IDS - 1)
    survivor = cluster.brokers[3 - leader]
    before = _settled(survivor)  # every id is on both brokers: InitProducerId waits for the ISR
    log_from = _log_size(survivor)

    with Starvation(survivor.proc.pid if survivor.proc is not None else None) as machine:
        cluster.kill(leader)
        cluster.wait_for("the survivor leads __transaction_state",
                         lambda: _leader(survivor, "__transaction_state") == 3 - leader, timeout_s=30)
        # COORDINATOR_LOAD_IN_PROGRESS (14) while it replays, then the id's next epoch: the
        # survivor's coordinator has the 20,000 ids again
        again = cluster.wait_for("the survivor coordinates again", lambda: [
            a for a in _init_producer_ids(survivor.bootstrap, ids[-1:]) if a[0] != 14], timeout_s=30)
        assert again == [(0, 1)]
        time.sleep(0.5)
    _assert_no_late_probe(survivor, before, machine, log_from)
