"""Diskless topics on three brokers and moto's S3 server (issue 35, ADR 0027).

    python bench/diskless.py [--seconds 20] [--rate 1500] [--records 500000] [--out docs/benchmarks-diskless.json]
                             [--java-client DIR]

* **latency**: for ``diskless.batch.ms`` 250 and then 50 (a fresh cluster and bucket each,
  brokers in racks r1-r3), three producers offer ``--rate`` records/s in all of 1 KiB
  (acks=all, idempotent, linger.ms 5) to a 6-partition diskless topic for ``--seconds``;
  produce latency (send to acknowledgement) p50/p99/max after a 3 s warm-up, and the
  produce requests' round trip (librdkafka's ``rtt`` p99). Four times: writing to each
  partition's sequencer (what Metadata names); zone-local (each producer names one
  broker's rack in its client.id and writes every partition through it, so commits cross
  to the other sequencers); and to the sequencers without idempotence, librdkafka's
  default, at linger.ms 5 and at a fifth of ``diskless.batch.ms`` (its idempotent producer
  keeps one request per partition in flight, so its records wait for the previous
  request's whole commit cycle before theirs starts: ADR 0027, "As built"). Targets
  (issue 35): p99 ≤ 400 ms at 250, ≤ 150 ms at 50. With ``--java-client DIR`` (the Apache
  Kafka Java client as ``shared/tools/java-client/build.sh`` builds it), also three Java
  producers with the client's defaults (``bench/java/ProduceLatency.java``): idempotent,
  five requests in flight per connection and several per partition, where librdkafka's
  idempotent producer keeps one per partition; then with ``batch.size`` 1 MiB, the one
  setting Redpanda's and WarpStream's guides change first (five requests of 16 KiB per
  partition per commit cycle cap a partition at about 270 KB/s at 250 ms); then with
  ``linger.ms`` a fifth of the window too, so that the five requests a connection may
  have in flight are spread over the commit cycle instead of all sent at its start.
* **throughput and request costs** (on the batch.ms 250 cluster): ``--records`` 1 KiB
  records through ``strata perf produce`` (three processes, acks=all) to a
  6-partition diskless topic, then to a classic 6-partition RF 3 topic with
  ``min.insync.replicas`` 2 on the same brokers; records/s of each and their ratio. From
  the brokers' metrics: write-ahead objects and commit slots written (the PUTs of the
  write path) per GB and MiB per PUT (target: ≤ 1 PUT per 4 MiB); record bytes copied
  between brokers (``strata_replica_fetched_bytes``: target 0 for diskless) beside the
  entries the diskless APIs carried (``strata_diskless_rpc_bytes``).
* **request costs with full objects**: ``diskless.batch.ms`` 5000, all writes through one
  broker (its rack named), so objects close at ``diskless.batch.bytes`` (8 MiB) as they do on a broker
  writing ≥ 32 MiB/s at the default 250 ms; PUTs per GB to a 6-partition topic (three
  sequencers: each object costs one commit slot per sequencer) and to a 1-partition one.

Every figure comes from this run; moto is one process on the same two cores, so its PUT
costs a few milliseconds instead of S3's 30-80.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
sys.path.insert(0, str(BENCH))
sys.path.insert(0, str(REPO))

from foundation import BrokerProcess, free_port, java_classpath, log, machine_info  # noqa: E402
from tiering import CLEARED, CREDENTIALS, Moto  # noqa: E402

_RATE = re.compile(r"(\d+) records sent, ([0-9.]+) records/sec")
PARTITIONS = 6
RECORD = 1024


class Cluster:
    """Three brokers on a fresh bucket of the moto server."""

    def __init__(self, work: Path, moto: Moto, sets: dict[str, str]) -> None:
        import boto3

        bucket = f"diskless-{int(time.time() * 1000)}"
        boto3.client("s3", endpoint_url=moto.endpoint, region_name="us-east-1").create_bucket(Bucket=bucket)
        self.brokers: list[BrokerProcess] = []
        self.http: list[int] = []
        work.mkdir(parents=True, exist_ok=True)
        for n in (1, 2, 3):
            b = BrokerProcess(work / f"broker-{n}", work / f"broker-{n}.log")
            http = free_port()
            b.cmd[b.cmd.index("--http") + 1] = f"127.0.0.1:{http}"
            b.cmd += ["--node-id", str(n), "--object-store", f"s3://{bucket}/strata", "--s3-endpoint", moto.endpoint,
                      "--set", f"broker.rack=r{n}"]
            for key, value in sets.items():
                b.cmd += ["--set", f"{key}={value}"]
            self.brokers.append(b)
            self.http.append(http)
        for b in self.brokers:
            b.start()
        self.bootstrap = ",".join(b.bootstrap for b in self.brokers)
        self.command = " ".join(self.brokers[0].cmd[1:])

    def metric(self, name: str) -> float:
        """``name`` summed over the brokers' /metrics (every label)."""
        total = 0.0
        pattern = re.compile(rf"^{name}(_total)?(\{{[^}}]*\}})? ([0-9.e+-]+)$", re.M)
        for port in self.http:
            text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
            total += sum(float(m.group(3)) for m in pattern.finditer(text))
        return total

    def stop(self) -> None:
        for b in self.brokers:
            b.stop()


def create(bootstrap: str, name: str, config: dict[str, str], partitions: int = PARTITIONS) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(name, partitions, 3, config=config)], request_timeout=30).values():
        future.result(35)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        md = admin.list_topics(name, timeout=10).topics[name]
        if md.error is None and len(md.partitions) == partitions and all(p.leader >= 0 for p in md.partitions.values()):
            return
        time.sleep(0.2)
    raise SystemExit(f"topic {name} has no leaders after 60 s")


def latency(cluster: Cluster, topic: str, rate: int, seconds: float, linger_ms: int,
            zone_local: bool, idempotent: bool = True) -> dict[str, Any]:
    """Three producers, one per broker, at ``rate`` records/s in all (module docstring); with
    the produce requests' round trip as librdkafka measures it (its ``rtt`` p99, the broker's
    side of the latency without the client's queueing)."""
    from confluent_kafka import Producer

    value = os.urandom(RECORD)
    samples: list[float] = []
    failures: list[str] = []
    rtt_p99: list[float] = []
    lock = threading.Lock()
    start = time.monotonic()
    warm = start + 3

    def stats(text: str) -> None:
        brokers = json.loads(text).get("brokers", {})
        with lock:
            rtt_p99.extend(b["rtt"]["p99"] / 1000 for b in brokers.values()
                           if b.get("nodeid", -1) >= 0 and b.get("rtt", {}).get("cnt", 0) > 0)

    def run(node: int, share: int) -> None:
        p = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "linger.ms": linger_ms,
                      "enable.idempotence": idempotent,
                      # an idempotent producer keeps at most 5 requests in flight per connection;
                      # without idempotence, librdkafka's default (1,000,000)
                      **({"max.in.flight.requests.per.connection": 5} if idempotent else {}),
                      "statistics.interval.ms": 5000, "stats_cb": stats,
                      # zone-local: every write of this producer goes through broker ``node``
                      "client.id": f"bench-strata_rack=r{node}" if zone_local else "bench"})

        def done(err: Any, msg: Any, sent: float) -> None:
            now = time.monotonic()
            with lock:
                if err is not None:
                    failures.append(str(err))
                elif sent >= warm:
                    samples.append(now - sent)

        interval = 1 / share
        due = time.monotonic()
        i = 0
        while time.monotonic() < start + seconds:
            now = time.monotonic()
            if now < due:
                p.poll(min(due - now, 0.01))
                continue
            sent = time.monotonic()
            p.produce(topic, value=value, partition=i % PARTITIONS,
                      on_delivery=lambda err, msg, sent=sent: done(err, msg, sent))
            i += 1
            due += interval
            p.poll(0)
        p.flush(60)

    threads = [threading.Thread(target=run, args=(n, max(1, rate // 3))) for n in (1, 2, 3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    samples.sort()
    if not samples:
        raise SystemExit(f"no acknowledgement measured: {failures[:3]}")
    pick = lambda q: samples[min(len(samples) - 1, int(q * len(samples)))] * 1000  # noqa: E731
    return {"linger_ms": linger_ms, "zone_local": zone_local, "idempotent": idempotent, "records": len(samples), "failures": len(failures),
            "p50_ms": round(pick(0.5), 1), "p99_ms": round(pick(0.99), 1), "max_ms": round(samples[-1] * 1000, 1),
            "mean_ms": round(statistics.fmean(samples) * 1000, 1),
            "request_rtt_p99_ms": round(max(rtt_p99), 1) if rtt_p99 else None}


def java_latency(cluster: Cluster, topic: str, rate: int, seconds: float, classpath: str,
                 batch_size: int | None = None, linger_ms: int = 5) -> dict[str, Any]:
    """Three Java producers with the client's defaults (``bench/java/ProduceLatency.java``),
    or those and ``batch_size`` and ``linger_ms``."""
    extra = [str(batch_size or 16384), str(linger_ms)] if batch_size is not None or linger_ms != 5 else []
    out = subprocess.run(["java", "-cp", classpath, "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn", "ProduceLatency",
                          cluster.bootstrap, topic, str(rate), str(seconds), str(PARTITIONS), *extra],
                         capture_output=True, text=True, timeout=seconds + 120)
    found = [line.split() for line in out.stdout.splitlines() if line.startswith("RESULT ")]
    if out.returncode != 0 or not found:
        raise SystemExit(f"the Java producers failed:\n{out.stdout}\n{out.stderr[-2000:]}")
    _, records, failures, p50, p99, top = found[-1]
    return {"client": "java", "batch_size": batch_size or 16384, "linger_ms": linger_ms, "zone_local": False,
            "idempotent": True, "records": int(records),
            "failures": int(failures), "p50_ms": float(p50), "p99_ms": float(p99), "max_ms": float(top)}


def produce(cluster: Cluster, topic: str, records: int, through: int | None = None) -> float:
    """``records`` 1 KiB records from three ``strata perf produce`` processes, writing to the
    partitions' sequencers, or all through broker ``through`` (its rack named); records/s."""
    per = records // 3
    procs = []
    for _ in range(3):
        client = [f"client.id=perf-strata_rack=r{through}"] if through is not None else []
        cmd = [sys.executable, "-m", "service", "perf", "produce", "--bootstrap-server", cluster.bootstrap,
               "--topic", topic, "--num-records", str(per), "--record-size", str(RECORD),
               "--producer-props", "acks=all", "linger.ms=5", *client]
        procs.append(subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, text=True))
    total = 0.0
    for proc in procs:
        out, _ = proc.communicate()
        if proc.returncode != 0:
            raise SystemExit(f"perf produce failed:\n{out}")
        sent, rate = _RATE.findall(out)[-1]
        assert int(sent) == per, out
        total += float(rate)
    return total


def costs(cluster: Cluster, topic: str, records: int, diskless: bool, through: int | None = None) -> dict[str, Any]:
    before = {m: cluster.metric(m) for m in ("strata_diskless_wal_objects", "strata_diskless_commit_slots",
                                             "strata_replica_fetched_bytes", "strata_diskless_rpc_bytes")}
    rate = produce(cluster, topic, records, through)
    time.sleep(2)  # the followers' last fetches
    after = {m: cluster.metric(m) for m in before}
    delta = {m: after[m] - before[m] for m in before}
    gb = records * RECORD / 1e9
    puts = delta["strata_diskless_wal_objects"] + delta["strata_diskless_commit_slots"]
    out: dict[str, Any] = {"records_per_s": round(rate), "mb_per_s": round(rate * RECORD / 1e6, 1),
                           "replica_fetched_bytes": int(delta["strata_replica_fetched_bytes"])}
    if diskless:
        out |= {"wal_objects": int(delta["strata_diskless_wal_objects"]),
                "commit_slots": int(delta["strata_diskless_commit_slots"]),
                "puts_per_gb": round(puts / gb, 1), "mib_per_put": round(records * RECORD / 2**20 / max(1, puts), 2),
                "rpc_bytes": int(delta["strata_diskless_rpc_bytes"]),
                "rpc_bytes_per_record": round(delta["strata_diskless_rpc_bytes"] / records, 1)}
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=20)
    parser.add_argument("--rate", type=int, default=1500)
    parser.add_argument("--records", type=int, default=500_000)
    parser.add_argument("--out", type=Path, default=REPO / "docs" / "benchmarks-diskless.json")
    parser.add_argument("--java-client", type=Path, default=None, metavar="DIR",
                        help="also measure Java producers (kafka-clients-*.jar and lib/ in DIR)")
    args = parser.parse_args()
    for k in CLEARED:
        os.environ.pop(k, None)
    os.environ.update(CREDENTIALS)
    moto = Moto()
    result: dict[str, Any] = {"machine": machine_info(Path(tempfile.gettempdir())), "command": " ".join(sys.argv),
                              "when": time.strftime("%Y-%m-%d %H:%M:%S"), "latency": {}}
    try:
        with tempfile.TemporaryDirectory(prefix="strata-diskless-bench-") as tmp:
            classpath = (java_classpath(args.java_client, Path(tmp) / "java", "ProduceLatency.java")
                         if args.java_client is not None else None)
            for batch_ms in (250, 50):
                log(f"--- diskless.batch.ms={batch_ms}")
                cluster = Cluster(Path(tmp) / f"b{batch_ms}", moto, {"diskless.batch.ms": str(batch_ms)})
                try:
                    create(cluster.bootstrap, "lat", {"diskless.enable": "true"})
                    # writes to each partition's sequencer (Metadata names it); zone-local writes
                    # (each producer names its broker's rack and writes through that broker); a
                    # producer without idempotence (librdkafka's default), at linger.ms 5 and at a
                    # fifth of the window (fewer, larger requests)
                    runs = []
                    for linger, zone_local, idempotent in ((5, False, True), (5, True, True), (5, False, False),
                                                           (batch_ms // 5, False, False)):
                        runs.append(latency(cluster, "lat", args.rate, args.seconds, linger, zone_local, idempotent))
                        log(f"batch.ms {batch_ms}: {runs[-1]}")
                    # the Java client's defaults; batch.size 1 MiB; and linger.ms a fifth of the window
                    # too, which spreads its five requests in flight over the commit cycle
                    java_rows = ((None, 5), (1 << 20, 5), (1 << 20, batch_ms // 5)) if classpath is not None else ()
                    for batch_size, linger in java_rows:
                        runs.append(java_latency(cluster, "lat", args.rate, args.seconds, classpath, batch_size, linger))
                        log(f"batch.ms {batch_ms}, Java producers: {runs[-1]}")
                    result["latency"][str(batch_ms)] = runs
                    if batch_ms == 250:
                        result["broker_command"] = cluster.command
                        create(cluster.bootstrap, "dl", {"diskless.enable": "true"})
                        create(cluster.bootstrap, "rf3", {"min.insync.replicas": "2"})
                        result["diskless"] = costs(cluster, "dl", args.records, True)
                        log(f"diskless: {result['diskless']}")
                        result["classic_rf3"] = costs(cluster, "rf3", args.records, False)
                        log(f"classic RF3: {result['classic_rf3']}")
                        result["throughput_ratio"] = round(
                            result["diskless"]["records_per_s"] / result["classic_rf3"]["records_per_s"], 2)
                finally:
                    cluster.stop()
            # request costs when objects close by size (8 MiB) rather than by time: one
            # writing broker, diskless.batch.ms long enough not to matter
            log("--- diskless.batch.ms=5000, all writes through broker 1")
            cluster = Cluster(Path(tmp) / "bulk", moto, {"diskless.batch.ms": "5000"})
            try:
                create(cluster.bootstrap, "bulk6", {"diskless.enable": "true"})
                result["bulk_6_partitions"] = costs(cluster, "bulk6", args.records, True, through=1)
                log(f"bulk, 6 partitions: {result['bulk_6_partitions']}")
                create(cluster.bootstrap, "bulk1", {"diskless.enable": "true"}, partitions=1)
                result["bulk_1_partition"] = costs(cluster, "bulk1", args.records, True, through=1)
                log(f"bulk, 1 partition: {result['bulk_1_partition']}")
            finally:
                cluster.stop()
    finally:
        moto.stop()
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    log(f"wrote {args.out}")
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
