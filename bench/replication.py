"""Replication's two figures (issue #17): what acks=all with three replicas costs, and how
long a leader failover takes.

    python bench/replication.py [--records 1000000] [--rounds 3] [--failover-runs 20]
                                [--out docs/benchmarks-replication.json]

* **throughput**: ``strata perf produce`` (librdkafka, linger.ms=5) to one partition,
  100-byte and 1 KiB records: acks=1 to a single broker (replication factor 1) against
  acks=all to three brokers (replication factor 3, ``min.insync.replicas=2``: every
  acknowledgement waits for both followers' fetches). Rounds alternate between the
  two set-ups (each round starts its brokers afresh), so a busy machine weighs on
  both; the figure is the median records/s of each and their ratio. All four broker
  processes of a round and the producer share this machine's cores.
* **failover**: three brokers with the default timings, a topic with replication
  factor 3 (``min.insync.replicas=2``) whose leader is not the controller; a probe
  producer (idempotent, acks=all) sends a record every 10 ms. Each run kill -9 the
  partition's leader and time from the kill to the first record acknowledged
  afterwards (by the new leader, the old one being dead), then restart the killed
  broker and wait for it to rejoin the ISR. Median and max over the runs.

Every broker is a ``python -m service up`` process with its own data dir under a
temporary directory; every figure comes from this run.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
sys.path.insert(0, str(BENCH))

from cluster import lease_holder, start_cluster, stop_all
from foundation import BrokerProcess, log, machine_info

_RATE = re.compile(r"(\d+) records sent, ([0-9.]+) records/sec")


def _create(bootstrap: str, name: str, replicas: list[int] | None, factor: int) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    topic = (NewTopic(name, num_partitions=1, replica_assignment=[replicas], config={"min.insync.replicas": "2"})
             if replicas else NewTopic(name, num_partitions=1, replication_factor=factor))
    for future in admin.create_topics([topic], request_timeout=30).values():
        future.result(35)


def _partition(bootstrap: str, name: str) -> Any:
    from confluent_kafka.admin import AdminClient

    md = AdminClient({"bootstrap.servers": bootstrap}).list_topics(name, timeout=10)
    return md.topics[name].partitions[0]


def _wait(what: str, check: Any, timeout_s: float = 60) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            value = check()
        except Exception:  # noqa: BLE001 - a broker mid-failover may not answer
            value = None
        if value:
            return value
        time.sleep(0.05)
    raise RuntimeError(f"{what} did not happen within {timeout_s:.0f} s")


def _perf(bootstrap: str, topic: str, records: int, size: int, acks: str) -> float:
    cmd = [sys.executable, "-m", "service", "perf", "produce", "--bootstrap-server", bootstrap,
           "--topic", topic, "--num-records", str(records), "--record-size", str(size),
           "--throughput", "-1", "--producer-props", f"acks={acks}", "linger.ms=5"]
    out = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, check=True).stdout
    print(out.strip().splitlines()[-1])
    sent, rate = _RATE.findall(out)[-1]
    assert int(sent) == records, out
    return float(rate)


def throughput(work: Path, records: int, size: int, rounds: int) -> dict[str, Any]:
    runs: dict[str, list[float]] = {"acks1_rf1": [], "acksall_rf3": []}
    for r in range(rounds):
        order = ("acks1_rf1", "acksall_rf3") if r % 2 == 0 else ("acksall_rf3", "acks1_rf1")
        for mode in order:
            size_brokers = 1 if mode == "acks1_rf1" else 3
            brokers = start_cluster(work / f"tp-{size}-{r}-{mode}", size_brokers, {})
            try:
                bootstrap = ",".join(b.bootstrap for b in brokers)
                if mode == "acks1_rf1":
                    _create(bootstrap, "bench-repl", None, 1)
                else:
                    _create(bootstrap, "bench-repl", [1, 2, 3], 3)
                    _wait("a full ISR", lambda b=bootstrap: len(_partition(b, "bench-repl").isrs) == 3)
                rate = _perf(bootstrap, "bench-repl", records, size, "1" if mode == "acks1_rf1" else "all")
            finally:
                stop_all(brokers)
            runs[mode].append(rate)
            log(f"{size} B round {r} {mode}: {rate:,.0f} records/s")
    one = statistics.median(runs["acks1_rf1"])
    three = statistics.median(runs["acksall_rf3"])
    log(f"{size} B: acks=all RF 3 / acks=1 RF 1 = {three / one:.2f}")
    return {"record_size": size, "records": records, "runs": runs, "acks1_rf1_records_per_s": one,
            "acksall_rf3_records_per_s": three, "ratio": three / one}


def _preferred_election(bootstrap: str, name: str) -> None:
    from confluent_kafka import ElectionType, TopicPartition
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.elect_leaders(ElectionType.PREFERRED, [TopicPartition(name, 0)]).result(30)


class _Probe:
    """An idempotent acks=all producer sending a record every 10 ms; ack times."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        from confluent_kafka import Producer

        self._producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True,
                                   "acks": "all", "linger.ms": 0, "message.timeout.ms": 60_000})
        self._topic = topic
        self.acks: list[tuple[float, float]] = []  # (sent, acknowledged)
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _on_delivery(self, sent: float, err: Any, _msg: Any) -> None:
        if err is None:
            self.acks.append((sent, time.monotonic()))
        else:
            self.errors.append(str(err))

    def _run(self) -> None:
        i = 0
        while not self._stop.is_set():
            sent = time.monotonic()
            self._producer.produce(self._topic, b"probe-%d" % i, partition=0,
                                   on_delivery=lambda err, msg, sent=sent: self._on_delivery(sent, err, msg))
            i += 1
            self._producer.poll(0.01)

    def first_ack_after(self, t: float, timeout_s: float = 60) -> float:
        """When the first record sent after ``t`` was acknowledged (an acknowledgement of one
        sent before may reach the callback a poll later: the old leader's)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            after = [acked for sent, acked in self.acks if sent > t]
            if after:
                return min(after)
            time.sleep(0.005)
        raise RuntimeError("no record acknowledged after the kill")

    def close(self) -> None:
        self._stop.set()
        self._thread.join()
        self._producer.flush(60)


def failover(work: Path, runs: int) -> dict[str, Any]:
    work = work / "failover"
    brokers = start_cluster(work, 3, {})
    by_id = {n + 1: b for n, b in enumerate(brokers)}
    bootstrap = ",".join(b.bootstrap for b in brokers)
    controller = lease_holder(work)
    others = [n for n in by_id if n != controller]
    # the leaders move only between the two that are not the controller: each run kills a
    # leader, never the lease holder (that is the controller failover of bench/cluster.py)
    _create(bootstrap, "bench-failover", [others[0], others[1], controller], 3)
    _wait("a full ISR", lambda: len(_partition(bootstrap, "bench-failover").isrs) == 3)
    probe = _Probe(bootstrap, "bench-failover")
    times: list[float] = []
    try:
        _wait("the probe acknowledged", lambda: len(probe.acks) > 10)
        for run in range(runs):
            leader = _partition(bootstrap, "bench-failover").leader
            if leader == controller:  # the last run moved it there: back to a preferred replica
                _preferred_election(bootstrap, "bench-failover")
                leader = _wait("a leader other than the controller",
                               lambda: (p := _partition(bootstrap, "bench-failover")).leader != controller
                               and p.leader)
            victim = by_id[leader]
            assert victim.proc is not None
            victim.proc.kill()
            killed = time.monotonic()
            victim.proc.wait()
            took = probe.first_ack_after(killed) - killed
            times.append(took)
            log(f"run {run}: leader {leader} killed; first record acknowledged {took:.2f} s later")
            if victim._log is not None:
                victim._log.close()
            restarted = BrokerProcess(victim.data_dir, victim.log_path)
            restarted.cmd = victim.cmd
            restarted.start()
            by_id[leader] = restarted
            _wait("the restarted broker in the ISR",
                  lambda n=leader: n in _partition(bootstrap, "bench-failover").isrs)
    finally:
        probe.close()
        stop_all(list(by_id.values()))
    return {"runs": runs, "seconds": times, "median_s": statistics.median(times), "max_s": max(times),
            "probe_errors": probe.errors[:5],
            "timings": {"broker.session.connection.loss.ms": 500, "broker.heartbeat.interval.ms": 2000,
                        "metadata.poll.interval.ms": 500}}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--records", type=int, default=1_000_000, help="per round, 100 B (1 KiB: a third)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--failover-runs", type=int, default=20)
    parser.add_argument("--skip-throughput", action="store_true")
    parser.add_argument("--skip-failover", action="store_true")
    parser.add_argument("--out", type=Path, default=None, help="write the figures as JSON here")
    args = parser.parse_args()
    report: dict[str, Any] = {"command": " ".join(sys.argv)}
    with tempfile.TemporaryDirectory(prefix="strata-bench-replication-") as tmp:
        work = Path(tmp)
        report["machine"] = machine_info(work)
        if not args.skip_throughput:
            report["throughput"] = [
                throughput(work, args.records, 100, args.rounds),
                throughput(work, max(1, args.records // 3), 1024, args.rounds),
            ]
        if not args.skip_failover:
            report["failover"] = failover(work, args.failover_runs)
            f = report["failover"]
            log(f"leader failover: median {f['median_s']:.2f} s, max {f['max_s']:.2f} s over {f['runs']} runs")
    text = json.dumps(report, indent=2)
    if args.out:
        args.out.write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
