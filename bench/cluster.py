"""A cluster's two figures (issue #16): what a second broker process buys on one machine,
and how long a controller failover takes.

    python bench/cluster.py [--records 1000000] [--failover-runs 10] [--out docs/benchmarks-cluster.json]

* **cores**: produce 100-byte records to a 6-partition topic (``strata perf produce``:
  librdkafka, acks=all, ``--producers`` processes at once, once per ``--linger-ms``
  value: 5, and 0 where the broker's cost per request dominates) against one broker,
  then against a cluster of two broker processes on the same machine (the topic's
  leaders spread 3 and 3), in the same run; records/s of each, their ratio, and
  the brokers' CPU seconds. One broker is one event loop on one core: the ratio
  says what the second core buys, with the producer sharing the machine.
* **failover**: three brokers on a shared ``file://`` store with the default lease
  timings (``controller.lease.ms`` 10 s, 1 s skew, 0.5 s polls); each run kill -9
  the active controller (the lease holder) and time the first successful
  CreateTopics sent to the survivors (a new attempt every 0.25 s, each with a 2 s
  timeout) and the moment another broker holds the lease, then restart the killed
  broker (it rejoins as a plain broker). Median and max over the runs.

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

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
sys.path.insert(0, str(BENCH))

from foundation import BrokerProcess, log, machine_info

_RATE = re.compile(r"(\d+) records sent, ([0-9.]+) records/sec")


def start_cluster(work: Path, size: int, sets: dict[str, str]) -> list[BrokerProcess]:
    work.mkdir(parents=True, exist_ok=True)
    store = (work / "bucket").as_uri()
    brokers = []
    for n in range(1, size + 1):
        b = BrokerProcess(work / f"broker-{n}", work / f"broker-{n}.log")
        b.cmd += ["--node-id", str(n), "--object-store", store]
        for key, value in sets.items():
            b.cmd += ["--set", f"{key}={value}"]
        brokers.append(b)
    for b in brokers:  # each returns once serving; the first holds the lease
        b.start()
    return brokers


def stop_all(brokers: list[BrokerProcess]) -> None:
    for b in brokers:
        b.stop()


def create_topic(bootstrap: str, name: str, partitions: int, timeout_s: float = 30) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(name, num_partitions=partitions, replication_factor=1)],
                                  request_timeout=timeout_s)
    for future in futures.values():
        future.result(timeout_s + 5)


def leaders(bootstrap: str, name: str) -> dict[int, int]:
    from confluent_kafka.admin import AdminClient

    md = AdminClient({"bootstrap.servers": bootstrap}).list_topics(name, timeout=30)
    return {p: m.leader for p, m in md.topics[name].partitions.items()}


def produce(bootstrap: str, topic: str, records: int, producers: int, linger_ms: int) -> float:
    """``producers`` ``strata perf produce`` processes at once, ``records`` in all; their summed
    records/s."""
    cmd = [sys.executable, "-m", "service", "perf", "produce", "--bootstrap-server", bootstrap,
           "--topic", topic, "--num-records", str(records // producers), "--record-size", "100",
           "--producer-props", "acks=all", f"linger.ms={linger_ms}"]
    procs = [subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, text=True) for _ in range(producers)]
    total = 0.0
    for proc in procs:
        out, _ = proc.communicate()
        assert proc.returncode == 0, out
        sent, rate = _RATE.findall(out)[-1]
        assert int(sent) == records // producers, out
        total += float(rate)
    return total


def cores(work: Path, records: int, producers: int, linger_ms: int) -> dict:
    results: dict = {"producers": producers, "linger_ms": linger_ms, "records": records}
    for size in (1, 2):
        brokers = start_cluster(work / f"cores-{size}-linger-{linger_ms}", size, {})
        try:
            bootstrap = ",".join(b.bootstrap for b in brokers)
            create_topic(bootstrap, "bench-cores", 6)
            time.sleep(1.0)  # every broker has applied the leaderships
            spread = sorted(leaders(bootstrap, "bench-cores").values())
            cpu_before = [b.cpu_seconds() for b in brokers]
            started = time.monotonic()
            rate = produce(bootstrap, "bench-cores", records, producers, linger_ms)
            wall = time.monotonic() - started
            cpu = [round(b.cpu_seconds() - c, 2) for b, c in zip(brokers, cpu_before, strict=True)]
        finally:
            stop_all(brokers)
        log(f"{size} broker(s), {producers} producer(s), linger.ms={linger_ms}: {rate:.0f} records/s; "
            f"leaders {spread}; broker CPU s {cpu} in {wall:.1f} s")
        results[f"brokers_{size}"] = {"records_per_s": rate, "leaders": spread,
                                      "broker_cpu_s": cpu, "wall_s": wall}
    results["ratio_two_to_one"] = results["brokers_2"]["records_per_s"] / results["brokers_1"]["records_per_s"]
    log(f"two brokers / one broker: {results['ratio_two_to_one']:.2f}")
    return results


def lease_holder(work: Path) -> int:
    try:
        return int(json.loads((work / "bucket" / "cluster" / "controller-lease").read_text())["holder"])
    except (OSError, ValueError, KeyError):
        return -1


def _first_creation(work: Path, survivors: str, topic: str, old: int, killed: float) -> tuple[float, int, float]:
    """From the kill: the first CreateTopics answered without error, how many attempts it
    took, and when another broker held the lease. A new attempt starts every 0.25 s while
    earlier ones wait out their 2 s timeout, so the figure is not rounded up to the
    client's timeout (an attempt sent just before the takeover waits it out)."""
    taken: list[float] = []
    done = threading.Event()

    def watch_lease() -> None:
        while time.monotonic() - killed < 120:
            holder = lease_holder(work)
            if holder not in (-1, old):
                taken.append(time.monotonic() - killed)
                return
            time.sleep(0.02)

    def attempt() -> None:
        try:
            create_topic(survivors, topic, 1, timeout_s=2)
        except Exception as exc:  # noqa: BLE001 - no controller yet: another attempt follows
            if "TOPIC_ALREADY_EXISTS" not in str(exc):
                return  # (already exists: an earlier attempt was applied, the answer counts)
        if not done.is_set():
            created.append(time.monotonic() - killed)
            done.set()

    created: list[float] = []
    threading.Thread(target=watch_lease, daemon=True).start()
    attempts = 0
    while not done.is_set():
        attempts += 1
        threading.Thread(target=attempt, daemon=True).start()
        done.wait(0.25)
    while not taken and time.monotonic() - killed < created[0] + 5:
        time.sleep(0.02)
    return created[0], attempts, taken[0] if taken else float("nan")


def failover(work: Path, runs: int) -> dict:
    work = work / "failover"
    brokers = start_cluster(work, 3, {})
    by_id = {n + 1: b for n, b in enumerate(brokers)}
    times: list[float] = []
    lease_times: list[float] = []
    try:
        for run in range(runs):
            old = lease_holder(work)
            while old == -1:
                time.sleep(0.2)
                old = lease_holder(work)
            survivors = ",".join(b.bootstrap for n, b in by_id.items() if n != old)
            victim = by_id[old]
            assert victim.proc is not None
            victim.proc.kill()
            killed = time.monotonic()
            victim.proc.wait()
            took, attempts, taken = _first_creation(work, survivors, f"after-failover-{run}", old, killed)
            times.append(took)
            lease_times.append(taken)
            log(f"run {run}: controller {old} killed; lease taken {taken:.2f} s later, a topic created "
                f"{took:.2f} s later (attempts {attempts}); new controller {lease_holder(work)}")
            victim._log.close()
            restarted = BrokerProcess(victim.data_dir, victim.log_path)
            restarted.cmd = victim.cmd
            restarted.start()  # rejoins as a plain broker
            by_id[old] = restarted
            brokers[brokers.index(victim)] = restarted
    finally:
        stop_all(list(by_id.values()))
    return {"runs": runs, "seconds": times, "median_s": statistics.median(times), "max_s": max(times),
            "lease_taken_seconds": lease_times, "lease_taken_median_s": statistics.median(lease_times),
            "lease": {"controller.lease.ms": 10000, "controller.lease.clock.skew.ms": 1000,
                      "controller.lease.poll.ms": 500}}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--failover-runs", type=int, default=10)
    parser.add_argument("--producers", type=int, default=2, help="producer processes at once")
    parser.add_argument("--linger-ms", type=int, nargs="+", default=[5, 0],
                        help="one cores run per value (0: a request per few records, the broker's "
                             "per-request cost dominates)")
    parser.add_argument("--skip-cores", action="store_true")
    parser.add_argument("--skip-failover", action="store_true")
    parser.add_argument("--out", type=Path, default=None, help="write the figures as JSON here")
    args = parser.parse_args()
    report: dict = {"command": " ".join(sys.argv)}
    with tempfile.TemporaryDirectory(prefix="strata-bench-cluster-") as tmp:
        work = Path(tmp)
        report["machine"] = machine_info(work)
        if not args.skip_cores:
            report["cores"] = [cores(work, args.records, args.producers, linger) for linger in args.linger_ms]
        if not args.skip_failover:
            report["failover"] = failover(work, args.failover_runs)
            f = report["failover"]
            log(f"failover: median {f['median_s']:.2f} s, max {f['max_s']:.2f} s over {f['runs']} runs")
    text = json.dumps(report, indent=2)
    if args.out:
        args.out.write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
