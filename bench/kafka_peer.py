"""Strata against Apache Kafka 4.1.2: the same workloads on both, in one run, alternating.

    python bench/kafka_peer.py [--quick] [--only W,...] [--out docs/benchmarks.md] [--work-dir /tmp]

Starts, on loopback under a temporary directory of ``--work-dir``, a Strata broker and a
Kafka 4.1.2 node (bench/kafka_peer_systems.py; ``KAFKA_HOME`` defaults to
/work/kafka-4.1.2), runs the workloads below on each in turn (which system goes first
alternates from one run to the next), then stops both and, for ``rf3``, starts three
brokers of each. Every run reports records/s, MB/s, the server processes' CPU seconds
per GB of payload (/proc/PID/stat, summed over the brokers) and their RSS afterwards;
latency runs report end-to-end percentiles. Workloads (``--only`` picks some):

* ``single``: one partition, 100 B and 1 KiB records; kcat produce (acks=1, linger 5 ms,
  1 MiB batches) then kcat consume from the start; the same through confluent-kafka
  from Python (bench/peer_clients.py);
* ``partitions``: 100 partitions, 20 kcat producers at once of keyed records
  (``-K:``; 10,000 keys), lz4 and zstd, then a 10-member confluent-kafka consumer group
  reading it all (bench/kafka_peer_clients.py group-consume);
* ``latency``: bench/latency.py's paced producer and consumer (100 B, one partition) at
  1k, 5k, 20k, 100k records/s, linger.ms 0 and 5: p50/p99/p99.9 produce-to-consume;
* ``txn``: transactions of 1,000 records of 100 B committed back to back, confluent-kafka
  and the Apache Kafka Java client 4.1.2 (bench/java/TxnBench.java);
* ``rf3``: three brokers of each, one partition with replication factor 3 and
  ``min.insync.replicas=2``, kcat produce with acks=all, then kcat consume.

Writes its section of docs/benchmarks.md between ``<!-- kafka-peer:start -->`` and
``<!-- kafka-peer:end -->`` (bench/kafka_peer_report.py) and docs/benchmarks-kafka-peer.json.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import os
import re
import shlex
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
sys.path[:0] = [str(BENCH), str(REPO)]

import foundation  # noqa: E402
import guest_memory  # noqa: E402
import kafka_peer_report  # noqa: E402
from foundation import KCAT, log, machine_info, timed_child, xargs  # noqa: E402
from kafka_peer_systems import (  # noqa: E402
    KAFKA_CLIENT_CP,
    STRATA_SETS,
    System,
    kafka_missing,
    start_kafka,
    start_strata,
)

CLIENTS = str(BENCH / "kafka_peer_clients.py")
PEER_CLIENTS = str(BENCH / "peer_clients.py")
WORKLOADS = ("single", "partitions", "latency", "txn", "tls", "history", "rf3")
#: Strata's tiered storage in the history phase: uploads looked for every 200 ms, local copies
#: deleted as soon as they are in the bucket
TIERED = {"remote.log.storage.system.enable": "true", "remote.log.manager.task.interval.ms": "200",
          "log.retention.check.interval.ms": "500"}
HISTORY_SEGMENT = 16 * 1024 * 1024
SATURATED_P50_MS = 1000.0
#: --profile DIR: py-spy records Strata's (first) broker during each of its measured runs
PROFILE_DIR: Path | None = None
FULL = {"single": [(100, 1_000_000), (1024, 300_000)], "partitions": 2_000_000, "partition_count": 100,
        "producers": 20, "members": 10, "latency_rates": [1000, 5000, 20000, 100000], "latency_seconds": 10.0,
        "txn_records": 200_000, "rf3": [(100, 1_000_000), (1024, 300_000)], "repeats": 3, "history": 500_000,
        "warmup": [(100, 1_000_000), (1024, 300_000)], "consume_passes": 3, "prewarm_gib": 8}
QUICK = {"single": [(100, 100_000), (1024, 30_000)], "partitions": 200_000, "partition_count": 100,
         "producers": 20, "members": 10, "latency_rates": [1000, 20000], "latency_seconds": 2.0,
         "txn_records": 20_000, "rf3": [(100, 100_000)], "repeats": 1, "history": 60_000,
         "warmup": [(100, 100_000)], "consume_passes": 1, "prewarm_gib": 1}
KEYED_VALUE = 100  # bytes of value per keyed record; the key is 6 more


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="seconds per workload, one run each (development)")
    ap.add_argument("--only", default=",".join(WORKLOADS), help=f"comma-separated subset of {','.join(WORKLOADS)}")
    ap.add_argument("--out", default=str(REPO / "docs" / "benchmarks.md"))
    ap.add_argument("--work-dir", default="/tmp", help="temporary data dirs and record files (a real disk)")
    ap.add_argument("--heap", default="1g", help="Kafka's -Xmx/-Xms (run.sh's HEAP)")
    ap.add_argument("--strata-set", action="append", default=[], metavar="KEY=VALUE",
                    help="extra Strata broker config for experiments (recorded in the report's command)")
    ap.add_argument("--profile", type=Path, default=None,
                    help="py-spy record (raw) of Strata's broker during each of its runs, into DIR (skews CPU)")
    args = ap.parse_args(argv)
    args.only = [w for w in args.only.split(",") if w]
    for item in args.strata_set:
        key, sep, value = item.partition("=")
        if not sep:
            ap.error(f"--strata-set wants KEY=VALUE, not {item!r}")
        STRATA_SETS[key] = value
    unknown = set(args.only) - set(WORKLOADS)
    if unknown:
        ap.error(f"unknown workload(s) {sorted(unknown)}; choose from {', '.join(WORKLOADS)}")
    return args


# --------------------------------------------------------------------------- measuring


def measured(system: System, run) -> dict:
    """Run ``run()`` (which returns records, bytes, seconds and the client's CPU) and add what
    the system's server processes spent on it."""
    foundation.sync_disks()  # no run pays for writing back the pages of the one before
    cpu0, user0 = system.cpu_seconds(), system.user_cpu_seconds()
    name = f"{system.key}-{len(list(PROFILE_DIR.glob('*'))) if PROFILE_DIR else 0:03d}"
    with foundation.Profiler(system.proc.pid, PROFILE_DIR if system.key == "strata" else None, name):
        res = run()
    cpu, user = system.cpu_seconds() - cpu0, system.user_cpu_seconds() - user0
    gb = res["bytes"] / 1e9
    res.update({"system": system.key, "records_per_s": res["records"] / res["seconds"],
                "mb_per_s": res["bytes"] / res["seconds"] / 1e6, "server_cpu_seconds": cpu,
                "server_cpu_s_per_gb": cpu / gb if gb else None, "server_user_cpu_seconds": user,
                "server_user_cpu_s_per_gb": user / gb if gb else None, "rss_mib": system.rss_mib(),
                "peak_rss_mib": system.peak_rss_mib(), "loadavg_1m_after": os.getloadavg()[0]})
    log(f"      {system.name}: {res['records']:,} records in {res['seconds']:.2f} s = "
        f"{res['records_per_s']:,.0f}/s, {res['mb_per_s']:,.1f} MB/s; server CPU {cpu:.2f} s "
        f"({res['server_cpu_s_per_gb'] or 0:.1f} s/GB), client CPU {res['client_cpu_seconds']:.2f} s, "
        f"RSS {res['rss_mib']:,.0f} MiB")
    return res


def admin_create(bootstrap: str, topic: str, partitions: int = 1, rf: int = 1, config: dict | None = None) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    new = NewTopic(topic, num_partitions=partitions, replication_factor=rf, config=config or {})
    for fut in admin.create_topics([new], request_timeout=60).values():
        fut.result(timeout=65)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:  # every leader known, every replica in sync
        md = admin.list_topics(topic, timeout=30).topics.get(topic)
        if md and md.error is None and len(md.partitions) == partitions and all(
                p.leader >= 0 and len(p.isrs) == rf for p in md.partitions.values()):
            return
        time.sleep(0.2)
    raise SystemExit(f"{topic}: partitions not all led and in sync within 60 s")


def end_offsets(bootstrap: str, topic: str, partitions: int) -> list[int]:
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "peer-offsets", "enable.auto.commit": False})
    try:
        return [c.get_watermark_offsets(TopicPartition(topic, p), timeout=30, cached=False)[1]
                for p in range(partitions)]
    finally:
        c.close()


def kcat(cmd: list[str], end_offset: int | None = None) -> dict:
    """Run kcat; a consumer (``end_offset`` given) must have reached exactly that offset."""
    log(f"    {shlex.join(cmd)}")
    wall, proc, client_cpu = timed_child(cmd, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"kcat failed (rc {proc.returncode}): {proc.stderr[-2000:]}")
    if end_offset is not None and not re.search(rf"Reached end of topic \S+ \[0\] at offset {end_offset}\b",
                                                proc.stderr):
        raise SystemExit(f"FAIL: kcat consumer did not end at offset {end_offset:,}: {proc.stderr[-2000:]}")
    return {"seconds": wall, "client_cpu_seconds": client_cpu, "stderr": proc.stderr, "command": shlex.join(cmd)}


def python_client(script: str, role: str, args: list[str]) -> dict:
    cmd = [sys.executable, script, role, *args]
    shown = "python " + shlex.join([os.path.relpath(script, REPO), role, *args])
    log(f"    {shown}")
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
    res = foundation.drain_json(proc)
    if proc.returncode != 0 or res is None:
        raise SystemExit(f"FAIL: {shown} exited with {proc.returncode}")
    if "cpu_seconds" in res:
        res["client_cpu_seconds"] = res.pop("cpu_seconds")
    res["command"] = shown
    return res


def read_passes(read, count: int, size: int, passes: int) -> dict:
    """``read()`` (a consumer from offset 0 to the end) ``passes`` times, one after another, as one
    measured run of ``passes × count`` records: a single read of a one-partition topic lasts 0.1-0.6 s,
    too short for its rate to be compared within 10%."""
    runs = [read() for _ in range(passes)]
    return {**runs[0], "seconds": sum(r["seconds"] for r in runs), "pass_seconds": [r["seconds"] for r in runs],
            "client_cpu_seconds": sum(r["client_cpu_seconds"] for r in runs), "passes": passes,
            "records": count * passes, "bytes": count * size * passes}


# --------------------------------------------------------------------------- workloads
# Each takes (system, rep, ctx) and returns {"<row name>": result, ...}.


def single(system: System, rep: int, ctx: dict) -> dict:
    out, passes = {}, ctx["cfg"]["consume_passes"]
    for size, count in ctx["cfg"]["single"]:
        records = ctx["files"][size]
        for client in ("kcat", "confluent-kafka"):
            topic = f"peer-1p-{client[:5]}-{size}-r{rep}".replace("-r-1", "-warm")
            admin_create(system.bootstrap, topic)
            if client == "kcat":
                produce = lambda: kcat([KCAT, "-b", system.bootstrap, "-P", "-t", topic, "-p", "0", "-l",  # noqa: E731
                                        *xargs(foundation.KCAT_PRODUCE_X), str(records)])
                consume = lambda: kcat([KCAT, "-b", system.bootstrap, "-C", "-t", topic, "-p", "0",  # noqa: E731
                                        "-o", "beginning", "-e", "-f", "", *xargs(foundation.CONSUME_X)], count)
            else:
                produce = lambda: python_client(PEER_CLIENTS, "kafka-produce", [  # noqa: E731
                    "--bootstrap", system.bootstrap, "--topic", topic, "--file", str(records), "--count", str(count)])
                consume = lambda: python_client(PEER_CLIENTS, "kafka-consume", [  # noqa: E731
                    "--bootstrap", system.bootstrap, "--topic", topic, "--count", str(count), "--size", str(size)])
            row = f"1 partition, {foundation.human_size(size)}, {client}"
            p = measured(system, lambda: {**produce(), "records": count, "bytes": count * size})
            if end_offsets(system.bootstrap, topic, 1) != [count]:
                raise SystemExit(f"FAIL: {topic} does not end at {count:,} after the produce")
            out[f"{row}: produce"] = p
            out[f"{row}: consume"] = measured(system, lambda: read_passes(consume, count, size, passes))
            delete_topic(system, topic)
    return out


def partitions(system: System, rep: int, ctx: dict) -> dict:
    cfg, out = ctx["cfg"], {}
    nparts, producers = cfg["partition_count"], cfg["producers"]
    per = cfg["partitions"] // producers
    total, size = per * producers, KEYED_VALUE + 6
    for codec in ("lz4", "zstd"):
        topic = f"peer-{nparts}p-{codec}-r{rep}"
        admin_create(system.bootstrap, topic, nparts)
        cmd = [KCAT, "-b", system.bootstrap, "-P", "-t", topic, "-K", ":", "-l", "-z", codec,
               *xargs(foundation.KCAT_PRODUCE_X), str(ctx["keyed"])]

        def produce() -> dict:
            log(f"    {producers} x {shlex.join(cmd)}")
            before = os.times()
            t0 = time.perf_counter()
            procs = [subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE) for _ in range(producers)]
            errs = [p.communicate()[1] for p in procs]
            wall = time.perf_counter() - t0
            after = os.times()
            if any(p.returncode for p in procs):
                raise SystemExit(f"kcat producer failed: {errs[0][-2000:]!r}")
            return {"records": total, "bytes": total * size, "seconds": wall, "command": f"{producers} x " + shlex.join(cmd),
                    "client_processes": producers, "client_cpu_seconds": (after.children_user + after.children_system)
                    - (before.children_user + before.children_system)}

        row = f"{nparts} partitions, keyed {size} B, {codec}"
        out[f"{row}: produce ({producers} kcat)"] = measured(system, produce)
        ends = end_offsets(system.bootstrap, topic, nparts)
        if sum(ends) != total:
            raise SystemExit(f"FAIL: {topic} holds {sum(ends):,} records, not {total:,}")
        group = ["--bootstrap", system.bootstrap, "--topic", topic, "--group", f"g-{topic}",
                 "--partitions", str(nparts), "--members", str(cfg["members"]), "--count", str(total),
                 "--size", str(size)]
        out[f"{row}: consume ({cfg['members']}-member group)"] = measured(
            system, lambda: {**python_client(CLIENTS, "group-consume", group), "client_processes": cfg["members"]})
        delete_topic(system, topic)
    return out


def latency(system: System, rep: int, ctx: dict) -> dict:
    """Offered loads from low to high; past the first one a system cannot keep up with (its p50
    over a second, under 90% of the rate sent, or a run that failed), the higher ones are skipped
    for it."""
    cfg = {"latency_warmup_seconds": 1.0, "latency_seconds": ctx["cfg"]["latency_seconds"]}
    out = {}
    for linger in (0, 5):
        for rate in ctx["cfg"]["latency_rates"]:
            topic = f"peer-lat-{rate}-l{linger}-r{rep}"
            foundation.sync_disks()
            try:
                res = foundation.run_latency(system, ctx["work"], cfg, None, linger, rate, topic, admin_create)
            except SystemExit as exc:  # e.g. the producer's local queue overflowed: past saturation
                log(f"    {system.name} failed at {rate:,} rec/s with linger {linger} ms ({exc}): higher loads skipped")
                ctx.setdefault("latency_failures", []).append(f"{system.name}, {rate:,} rec/s, linger {linger} ms")
                break
            res.update({"system": system.key, "rss_mib": system.rss_mib(), "loadavg_1m_after": os.getloadavg()[0],
                        "server_cpu_seconds": res.pop("broker_cpu_seconds")})
            out[f"latency {rate} rec/s, linger {linger} ms"] = res
            delete_topic(system, topic)
            if res["p50_ms"] > SATURATED_P50_MS or res["rate_achieved"] < 0.9 * rate:
                log(f"    {system.name} saturated at {rate:,} rec/s with linger {linger} ms: higher loads skipped")
                break
    return out


def txn(system: System, rep: int, ctx: dict) -> dict:
    count, out = ctx["cfg"]["txn_records"], {}
    for client in ("confluent-kafka", "java"):
        topic = f"peer-txn-{client[:4]}-r{rep}".replace("-r-1", "-warm")
        admin_create(system.bootstrap, topic)
        if client == "java":
            def run() -> dict:
                cmd = ["java", "-cp", ctx["java_cp"], "TxnBench", system.bootstrap, "txn", topic, str(count), "1000"]
                log(f"    {shlex.join(cmd)}")
                wall, proc, cpu = timed_child(cmd, text=True)
                line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT")), None)
                if proc.returncode or line is None or int(line.split()[3]):
                    raise SystemExit(f"FAIL: TxnBench: {proc.stdout[-1000:]} {proc.stderr[-2000:]}")
                return {"records": count, "bytes": count * 100, "seconds": float(line.split()[2]),
                        "client_cpu_seconds": cpu, "command": shlex.join(cmd[:1] + ["-cp", "CP"] + cmd[3:])}
        else:
            def run() -> dict:
                return python_client(CLIENTS, "txn-produce", ["--bootstrap", system.bootstrap, "--topic", topic,
                                                              "--count", str(count), "--per-txn", "1000"])
        out[f"transactions of 1,000 x 100 B, {client}"] = measured(system, run)
        markers = count // 1000
        if end_offsets(system.bootstrap, topic, 1) != [count + markers]:
            raise SystemExit(f"FAIL: {topic} does not end at {count + markers:,} (records and commit markers)")
        delete_topic(system, topic)
    return out


def rf3(system: System, rep: int, ctx: dict) -> dict:
    out, passes = {}, ctx["cfg"]["consume_passes"]
    for size, count in ctx["cfg"]["rf3"]:
        topic = f"peer-rf3-{size}-r{rep}"
        admin_create(system.bootstrap, topic, 1, 3, {"min.insync.replicas": "2"})
        prod = [KCAT, "-b", system.bootstrap, "-P", "-t", topic, "-p", "0", "-l",
                *xargs({**foundation.KCAT_PRODUCE_X, "acks": "all"}), str(ctx["files"][size])]
        cons = [KCAT, "-b", system.bootstrap, "-C", "-t", topic, "-p", "0", "-o", "beginning", "-e",
                "-f", "", *xargs(foundation.CONSUME_X)]
        row = f"RF 3, acks=all, min.insync 2, {foundation.human_size(size)}, kcat"
        out[f"{row}: produce"] = measured(system, lambda: {**kcat(prod), "records": count, "bytes": count * size})
        if end_offsets(system.bootstrap, topic, 1) != [count]:
            raise SystemExit(f"FAIL: {topic} does not end at {count:,}")
        out[f"{row}: consume"] = measured(system, lambda: read_passes(lambda: kcat(cons, count), count, size, passes))
        delete_topic(system, topic)
    return out


def tls(system: System, rep: int, ctx: dict) -> dict:
    """kcat over each system's SSL listener: 1 KiB records, one partition."""
    size, count = ctx["cfg"]["single"][-1]
    tls_x = {"security.protocol": "SSL", "ssl.ca.location": str(ctx["pki"].ca)}
    topic = f"peer-tls-{size}-r{rep}"
    admin_create(system.bootstrap, topic)
    prod = [KCAT, "-b", system.tls_bootstrap, "-P", "-t", topic, "-p", "0", "-l",
            *xargs({**foundation.KCAT_PRODUCE_X, **tls_x}), str(ctx["files"][size])]
    cons = [KCAT, "-b", system.tls_bootstrap, "-C", "-t", topic, "-p", "0", "-o", "beginning", "-e", "-f", "",
            *xargs({**foundation.CONSUME_X, **tls_x})]
    row = f"TLS, 1 partition, {foundation.human_size(size)}, kcat"
    out = {f"{row}: produce": measured(system, lambda: {**kcat(prod), "records": count, "bytes": count * size})}
    passes = ctx["cfg"]["consume_passes"]
    out[f"{row}: consume"] = measured(system, lambda: read_passes(lambda: kcat(cons, count), count, size, passes))
    delete_topic(system, topic)
    return out


def history(system: System, rep: int, ctx: dict) -> dict:
    """Catch-up read of a topic's history from offset 0: Strata's sealed segments only in its bucket
    (local copies deleted after upload), Kafka's in its local log; both in 16 MiB segments. Read
    ``consume_passes`` times as one run (a pass is under a second)."""
    size, count = 1024, ctx["cfg"]["history"]
    topic = f"peer-history-r{rep}"
    config = {"segment.bytes": str(HISTORY_SEGMENT)}
    if system.key == "strata":
        config.update({"remote.storage.enable": "true", "local.retention.bytes": "0"})
    admin_create(system.bootstrap, topic, config=config)
    kcat([KCAT, "-b", system.bootstrap, "-P", "-t", topic, "-p", "0", "-l", *xargs(foundation.KCAT_PRODUCE_X),
          str(ctx["files"]["history"])])
    local = 1.0
    if system.key == "strata":
        local = wait_tiered(system.servers[0].data_dir / "logs" / f"{topic}-0", count * size)
    cons = [KCAT, "-b", system.bootstrap, "-C", "-t", topic, "-p", "0", "-o", "beginning", "-e", "-f", "",
            *xargs(foundation.CONSUME_X)]
    where = "Strata from its bucket, Kafka from its local log"
    passes = ctx["cfg"]["consume_passes"]
    res = measured(system, lambda: {**read_passes(lambda: kcat(cons, count), count, size, passes),
                                    "share_read_locally": local})
    delete_topic(system, topic)
    return {f"catch-up read of {count * size / 1e6:,.0f} MB history, 1 KiB, kcat ({where})": res}


def delete_topic(system: System, topic: str) -> None:
    """Delete ``topic`` and wait until its files are gone from every server's disk, so that the
    next run is not charged for removing them (both systems unlink a deleted topic's files on a
    thread of their own, Kafka ``log.segment.delete.delay.ms`` later: 1 s in this bench)."""
    foundation.delete_topic(system.bootstrap, topic)
    took = system.wait_deleted(topic)
    log(f"    {topic}: its files gone from {system.name}'s disks {took:.1f} s after the delete")


def wait_tiered(logdir: Path, total: int, timeout: float = 300) -> float:
    """Wait until only the active segment is left in ``logdir``, and the uploaded ones are
    unlinked (``log.segment.delete.delay.ms`` after their upload); the share of bytes still local."""
    deadline = time.monotonic() + timeout
    while True:
        logs = sorted(logdir.glob("*.log"))
        if len(logs) == 1 and not any(logdir.glob("*.deleted")):
            share = logs[0].stat().st_size / total
            log(f"    history: only the active segment is local ({share:.1%} of the bytes); the rest is in the bucket")
            return share
        if time.monotonic() > deadline:
            raise SystemExit(f"{len(logs)} local segments in {logdir} after {timeout} s")
        time.sleep(0.2)


RUNNERS = {"single": single, "partitions": partitions, "latency": latency, "txn": txn, "tls": tls,
           "history": history, "rf3": rf3}


def warm_up(systems: list[System], ctx: dict) -> None:
    """One untimed pass of the one-partition workload on each system, so the JVM has compiled
    its hot paths (and both have touched their code and caches) before anything is measured."""
    warm = {**ctx, "cfg": {**ctx["cfg"], "single": ctx["cfg"]["warmup"], "txn_records": 2000}}
    for system in systems:
        log(f"== warm-up: {system.name}")
        single(system, -1, warm)
        if "txn" in ctx["names"]:  # Kafka creates its transaction log on first use
            txn(system, -1, warm)
        if "latency" in ctx["names"]:  # one request per record: a path the batches above leave cold
            lat_cfg = {"latency_warmup_seconds": 1.0, "latency_seconds": 4.0}
            foundation.run_latency(system, ctx["work"], lat_cfg, None, 0, 5000, "peer-lat-warm", admin_create)
            delete_topic(system, "peer-lat-warm")


def run_phase(systems: list[System], names: list[str], ctx: dict, data: dict) -> None:
    """Each workload ``repeats`` times on every system, who goes first alternating."""
    warm_up(systems, ctx)
    for wi, name in enumerate(names):
        for rep in range(ctx["cfg"]["repeats"]):
            order = systems if (wi + rep) % 2 == 0 else systems[::-1]
            for system in order:
                log(f"== {name}, run {rep + 1}/{ctx['cfg']['repeats']}: {system.name}")
                try:
                    rows = RUNNERS[name](system, rep, ctx)
                except SystemExit as exc:  # one failed run is reported; the others still run
                    log(f"FAILED: {name} on {system.name}: {exc}")
                    data["failures"].append(f"{name}, run {rep + 1}, {system.name}: {str(exc)[:500]}")
                    continue
                for row, res in rows.items():
                    res.pop("stderr", None)
                    data["rows"].setdefault(row, {"workload": name, "runs": {}})["runs"].setdefault(
                        system.key, []).append(res)


def keyed_file(path: Path, count: int) -> None:
    """``key:value`` lines for kcat -K: 10,000 keys, values half random (hex) so codecs do some work."""
    with open(path, "w") as f:
        for i in range(count):
            f.write(f"k{i % 10000:05d}:{os.urandom(KEYED_VALUE // 4).hex()}{'x' * (KEYED_VALUE // 2)}\n")


def prepare(work: Path, cfg: dict, names: list[str]) -> dict:
    ctx = {"cfg": cfg, "work": work, "files": {}, "names": names}
    for size, count in sorted({*cfg["single"], *cfg["rf3"]}):
        path = work / f"records-{size}-{count}.txt"
        foundation.generate_records(path, size, count)
        ctx["files"][size] = path
    if "partitions" in names:
        ctx["keyed"] = work / "keyed.txt"
        keyed_file(ctx["keyed"], cfg["partitions"] // cfg["producers"])
    if "history" in names:
        ctx["files"]["history"] = work / "history-1024.txt"
        foundation.generate_records(ctx["files"]["history"], 1024, cfg["history"])
    if "tls" in names:
        from tests.security_fixtures import Pki

        ctx["pki"] = Pki(work)
    if "txn" in names:
        build = work / "java-classes"
        subprocess.run(["javac", "-d", str(build), "-cp", KAFKA_CLIENT_CP, str(BENCH / "java" / "TxnBench.java")],
                       check=True)
        ctx["java_cp"] = f"{build}:{KAFKA_CLIENT_CP}"
    return ctx


#: (name, brokers of each system, workloads): each phase starts its own servers
PHASES = (("one-broker", 1, ("single", "partitions", "latency", "txn", "tls")),
          ("history", 1, ("history",)), ("three-brokers", 3, ("rf3",)))


def _interrupt(_sig, _frame) -> None:
    """SIGTERM stops the run like Ctrl-C, so the servers it started are stopped too."""
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    global PROFILE_DIR
    args = parse_args(argv)
    if (missing := kafka_missing()) is not None:
        log(f"ERROR: {missing}")
        return 2
    signal.signal(signal.SIGTERM, _interrupt)
    cfg = QUICK if args.quick else FULL
    if args.profile:
        args.profile.mkdir(parents=True, exist_ok=True)
        PROFILE_DIR = args.profile
    command = "nice python bench/kafka_peer.py" + (" --quick" if args.quick else "")
    if args.only != list(WORKLOADS):
        command += f" --only {','.join(args.only)}"
    command += "".join(f" --strata-set {item}" for item in args.strata_set)
    work = Path(tempfile.mkdtemp(prefix="strata-bench-kafka-peer-", dir=args.work_dir))
    data: dict = {"command": command, "mode": "quick" if args.quick else "full",
                  "date": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"), "machine": machine_info(work),
                  "config": cfg, "work_dir": str(work), "rows": {}, "servers": {}, "exit_codes": {}, "notes": [], "failures": []}
    ctx = prepare(work, cfg, args.only)
    with guest_memory.freed_pages_kept() as kept:
        data["memory"] = {"freed_pages": kept, "prewarm": foundation.prewarm_memory(work, cfg["prewarm_gib"])}
        log(f"freed memory: {kept}")
        run_phases(args, work, ctx, data)
    data["failures"] += [f"latency stopped early (the run failed): {f}" for f in ctx.get("latency_failures", [])]
    kafka_peer_report.summarise(data)
    out = Path(args.out)
    kafka_peer_report.write_report(data, out)
    if all(rc == 0 for rcs in data["exit_codes"].values() for rc in rcs):
        subprocess.run(["rm", "-rf", str(work)], check=False)
    else:
        log(f"WARNING: a server exited with {data['exit_codes']}; kept {work}")
    return 0


def run_phases(args: argparse.Namespace, work: Path, ctx: dict, data: dict) -> None:
    """Each phase's servers (one broker each, the history pair, three brokers each) started,
    its workloads run on both (:func:`run_phase`), the servers stopped."""
    started = time.monotonic()
    for phase, size, names in PHASES:
        names = [w for w in names if w in args.only]
        if not names:
            continue
        systems: list[System] = []
        try:
            systems.append(start_strata(work / phase, size, pki=ctx.get("pki") if phase == "one-broker" else None,
                                        tiered=TIERED if phase == "history" else None))
            systems.append(start_kafka(work / phase, size, args.heap,
                                       pki=ctx.get("pki") if phase == "one-broker" else None))
            for s in systems:
                data["servers"][f"{s.key}-{phase}"] = s.commands()
                data.setdefault("cpu_sources", {})[f"{s.key}-{phase}"] = s.cpu_source
                data.setdefault("idle_rss_mib", {})[f"{s.key}-{phase}"] = s.rss_mib()
            run_phase(systems, names, ctx, data)
        finally:
            for s in systems:
                data["exit_codes"][f"{s.key}-{phase}"] = s.stop()
    data["total_seconds"] = time.monotonic() - started


if __name__ == "__main__":
    sys.exit(main())
