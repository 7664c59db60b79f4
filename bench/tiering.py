"""Strata tiered-storage benchmark: catch-up reads from the bucket, isolation, uploads.

    python bench/tiering.py [--quick] [--out docs/benchmarks.md] [--profile DIR]

Starts moto's S3 server (``moto.server.ThreadedMotoServer``: one thread per
request, in its own process on 127.0.0.1) as the S3 endpoint, and a single-node
broker (bench/foundation.py's BrokerProcess) with tiered storage on that bucket:
``--object-store s3://strata-bench/tiering --s3-endpoint URL``, small segments,
``log.local.retention.bytes=0``. Then, all in one run:

(1) upload: a topic is filled with 1 KiB records while its tiered storage is
    still off, the sealed segment files are ``put_object`` by boto3 directly (the
    baseline), then ``remote.storage.enable=true`` is set on the topic and the
    broker's upload rate is read from its "uploaded ... segment" log lines.
(2) catch-up read: once the manifest holds every segment and the local copies
    are gone, ``kcat -C -e`` reads the topic from offset 0 through the broker,
    against a direct sequential ranged-GET read of the same segment objects with
    boto3 (chunks of ``remote.fetch.chunk.bytes``, one thread), interleaved.
(3) isolation: produce-to-consume latency of a tail consumer at 2,000 records/s
    (bench/latency.py), alone and while two ``kcat -C -e`` readers loop over the
    whole history from the bucket; three rounds of the two in turn, the median
    round reported (one round swings too far to judge by).

Writes its section of docs/benchmarks.md between ``<!-- tiering:start -->`` and
``<!-- tiering:end -->`` and docs/benchmarks-tiering.json. Every figure comes from
this run. See bench/README.md.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as _dt
import json
import os
import re
import shlex
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
sys.path.insert(0, str(BENCH))

import foundation  # noqa: E402
import guest_memory  # noqa: E402
from foundation import KCAT, BrokerProcess, Profiler, log, machine_info, timed_child, xargs  # noqa: E402

MARK_START, MARK_END = "<!-- tiering:start -->", "<!-- tiering:end -->"
BUCKET, PREFIX = "strata-bench", "tiering"
RECORD_SIZE = 1024
LATENCY_RATE = 2000
CHUNK_BYTES = 1024 * 1024  # the broker's remote.fetch.chunk.bytes (its default), used by the baseline too
TASK_INTERVAL_MS = 200

FULL = {"records": 500_000, "segment_bytes": 16 * 1024 * 1024, "repeats": 3,
        "latency_seconds": 20.0, "latency_warmup_seconds": 1.0, "cache_bytes": None, "isolation_rounds": 3,
        "prewarm_gib": 6}
# --quick: history smaller than the broker's default 256 MiB chunk cache, so the
# cache is shrunk to keep every re-read of the history coming from the bucket.
QUICK = {"records": 60_000, "segment_bytes": 4 * 1024 * 1024, "repeats": 1,
         "latency_seconds": 5.0, "latency_warmup_seconds": 1.0, "cache_bytes": 8 * 1024 * 1024,
         "isolation_rounds": 1, "prewarm_gib": 1}

TARGETS = {
    "catchup_vs_direct": ("Catch-up read from the bucket through the broker vs direct boto3 ranged GETs",
                          "ratio", 0.80, "min"),
    "isolation_p99_ratio": ("Tail consumer p99 at 2,000 records/s: with two history readers / alone",
                            "ratio (at most)", 1.2, "max"),  # 1.5 before issue 34
}

CREDENTIALS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
               "AWS_DEFAULT_REGION": "us-east-1"}
CLEARED = ("AWS_SESSION_TOKEN", "AWS_SECURITY_TOKEN", "AWS_PROFILE", "AWS_ENDPOINT_URL",
           "AWS_ENDPOINT_URL_S3")

# moto's S3 in its own process, one thread per request (werkzeug's threaded server).
# Objects are kept in memory (MOTO_S3_DEFAULT_KEY_BUFFER_SIZE, set below), not spooled
# to temporary files.
MOTO_CODE = r"""
import logging, sys
logging.getLogger("werkzeug").setLevel(logging.ERROR)
from moto.server import ThreadedMotoServer
s = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
s.start()
print(s.get_host_and_port()[1], flush=True)
sys.stdin.read()   # until the benchmark closes our stdin
s.stop()
"""
MOTO_BUFFER = str(2 * 1024 ** 3)
#: command prefix (``taskset -c LIST``, ``nice -n N``) for the processes that stand for
#: other machines (moto, history readers, control readers); empty under ``--layout shared``
OTHERS: list[str] = []
#: command prefix (``taskset -c LIST``) for the broker and the tail producer and consumer
#: of the isolation runs; empty under ``--layout shared``
BROKER_SIDE: list[str] = []


def dedicated_layout(cpus: list[int]) -> tuple[str, str]:
    """(broker CPUs, other CPUs) as taskset lists: the first half of ``cpus`` and the rest.

    On this 2-core machine: the broker's event loop and the tail clients on CPU 0;
    moto, the history readers and the broker's history threads
    (``remote.log.reader.cpus``) on CPU 1.
    """
    half = max(1, len(cpus) // 2)
    return ",".join(map(str, cpus[:half])), ",".join(map(str, cpus[half:]))


# --------------------------------------------------------------------------- helpers


def proc_cpu(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Moto:
    def __init__(self) -> None:
        env = {**os.environ, "MOTO_S3_DEFAULT_KEY_BUFFER_SIZE": MOTO_BUFFER}
        self.cmd = [sys.executable, "-c", MOTO_CODE]
        self.shown = (f"MOTO_S3_DEFAULT_KEY_BUFFER_SIZE={MOTO_BUFFER} python -c '<moto.server."
                      "ThreadedMotoServer(ip_address=\"127.0.0.1\", port=0).start()>'")
        if OTHERS:
            self.cmd = [*OTHERS, *self.cmd]
            env_part, _, rest = self.shown.partition(" python ")
            self.shown = f"{env_part} {' '.join(OTHERS)} python {rest}"
        log(f"starting moto S3 server: {self.shown}")
        self.proc = subprocess.Popen(self.cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
        line = self.proc.stdout.readline()
        if not line.strip().isdigit():
            raise SystemExit(f"moto server did not start: {line!r}")
        self.port = int(line)
        self.endpoint = f"http://127.0.0.1:{self.port}"
        log(f"moto pid {self.proc.pid} serving S3 on {self.endpoint}")

    def cpu(self) -> float:
        return proc_cpu(self.proc.pid)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.stdin.close()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def s3_client(endpoint: str):
    """A boto3 client configured like the broker's S3ObjectStore (path style, checksums only when required)."""
    import boto3
    from botocore.config import Config

    return boto3.client("s3", endpoint_url=endpoint, config=Config(
        region_name="us-east-1", s3={"addressing_style": "path"},
        retries={"mode": "standard", "total_max_attempts": 3},
        request_checksum_calculation="when_required", response_checksum_validation="when_required"))


class Cpu:
    """Broker, moto and child-process CPU seconds over a block."""

    def __init__(self, broker: BrokerProcess, moto: Moto) -> None:
        self.broker, self.moto = broker, moto

    def __enter__(self):
        import resource

        self._r = resource.getrusage(resource.RUSAGE_SELF)
        self.b0, self.m0, self.t0 = self.broker.cpu_seconds(), self.moto.cpu(), time.perf_counter()
        return self

    def __exit__(self, *exc):
        import resource

        r = resource.getrusage(resource.RUSAGE_SELF)
        self.wall = time.perf_counter() - self.t0
        self.broker_cpu = self.broker.cpu_seconds() - self.b0
        self.moto_cpu = self.moto.cpu() - self.m0
        self.self_cpu = (r.ru_utime - self._r.ru_utime) + (r.ru_stime - self._r.ru_stime)

    def as_dict(self) -> dict:
        return {"wall_seconds": self.wall, "broker_cpu_seconds": self.broker_cpu,
                "moto_cpu_seconds": self.moto_cpu, "bench_process_cpu_seconds": self.self_cpu}


def admin(bootstrap: str):
    from confluent_kafka.admin import AdminClient

    return AdminClient({"bootstrap.servers": bootstrap})


def create_topic(bootstrap: str, name: str, config: dict | None = None) -> None:
    from confluent_kafka.admin import NewTopic

    a = admin(bootstrap)  # keep a reference until the futures are done
    for fut in a.create_topics([NewTopic(name, 1, 1, config=config or {})], request_timeout=30).values():
        fut.result(timeout=30)


def alter_topic(bootstrap: str, name: str, **configs: str) -> None:
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

    entries = [ConfigEntry(k.replace("_", "."), v, incremental_operation=AlterConfigOpType.SET)
               for k, v in configs.items()]
    res = ConfigResource(ResourceType.TOPIC, name, incremental_configs=entries)
    a = admin(bootstrap)
    for fut in a.incremental_alter_configs([res]).values():
        fut.result(timeout=30)


def topic_id(broker: BrokerProcess, name: str) -> str:
    """The topic's id, which names its directory in the bucket, from the broker's admin API."""
    with urllib.request.urlopen(f"http://{broker.http}/v1/topics/{name}", timeout=10) as answer:
        return json.loads(answer.read())["topic_id"]


def manifest(s3, tid: str) -> dict | None:
    try:
        body = s3.get_object(Bucket=BUCKET, Key=f"{PREFIX}/topics/{tid}/0/manifest.json")["Body"].read()
    except s3.exceptions.NoSuchKey:
        return None
    return json.loads(body)


def local_logs(broker: BrokerProcess, topic: str) -> list[Path]:
    return sorted((broker.data_dir / "logs" / f"{topic}-0").glob("*.log"))


def seg_key(tid: str, seg: dict, ext: str = "log") -> str:
    return f"{PREFIX}/topics/{tid}/0/{seg['base_offset']:020d}-{seg['upload_id']}.{ext}"


_LOG_LINE = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) \S+ \S+: uploaded (\S+)-0 segment "
                       r"\[(\d+), (\d+)\] \((\d+) bytes\)", re.M)


def upload_lines(broker: BrokerProcess, topic: str) -> list[tuple[float, int, int]]:
    """(epoch seconds, base offset, bytes) of every "uploaded TOPIC-0 segment" broker log line."""
    out = []
    for m in _LOG_LINE.finditer(broker.log_path.read_text()):
        if m.group(2) != topic:
            continue
        t = _dt.datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S,%f").timestamp()
        out.append((t, int(m.group(3)), int(m.group(5))))
    return out


def steady_rate(ends: list[float], sizes: list[int]) -> float:
    """Bytes/s between the first and the last upload's completion (segments 2..N), the same on both sides."""
    if len(ends) < 2 or ends[-1] <= ends[0]:
        return sum(sizes) / max(ends[-1] - ends[0], 1e-9) if ends else 0.0
    return sum(sizes[1:]) / (ends[-1] - ends[0])


# --------------------------------------------------------------------------- (1) fill + upload


def fill_topic(broker: BrokerProcess, records: Path, topic: str, count: int, one_more: Path) -> dict:
    """Produce ``count`` records, then roll by time and add one record so every one of them is sealed."""
    create_topic(broker.bootstrap, topic, {"remote.storage.enable": "false"})
    cmd = [KCAT, "-b", broker.bootstrap, "-P", "-t", topic, "-p", "0", "-l",
           *xargs(foundation.KCAT_PRODUCE_X), str(records)]
    log(f"  produce {count:,} x {RECORD_SIZE} B -> {topic} (tiering off): {shlex.join(cmd)}")
    with foundation.Watch(broker.bootstrap, topic, count, "produced"):
        wall, proc, _ = timed_child(cmd, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"kcat producer failed: {proc.stderr[-2000:]}")
    log(f"    {count:,} records in {wall:.1f} s")
    # seal the active segment: segment.ms=1, then one more record rolls it (then back to the default)
    alter_topic(broker.bootstrap, topic, segment_ms="1")
    time.sleep(0.2)
    subprocess.run([KCAT, "-b", broker.bootstrap, "-P", "-t", topic, "-p", "0", "-l",
                    *xargs(foundation.KCAT_PRODUCE_X), str(one_more)], check=True, capture_output=True)
    alter_topic(broker.bootstrap, topic, segment_ms="604800000")
    low, high = foundation.high_watermark(broker.bootstrap, topic)
    if (low, high) != (0, count + 1):
        raise SystemExit(f"FAIL: {topic} holds [{low}, {high}) instead of [0, {count + 1})")
    files = local_logs(broker, topic)
    log(f"    high watermark {high:,} verified; {len(files)} local segments "
        f"({len(files) - 1} sealed, the active one holds the last record)")
    return {"records": high, "produce_command": shlex.join(cmd), "produce_seconds": wall}


def direct_upload(s3, broker: BrokerProcess, moto: Moto, topic: str) -> dict:
    """boto3 put_object of the sealed segment files (.log, .index, .timeindex), one after the other."""
    logs = local_logs(broker, topic)[:-1]  # not the active segment
    ends, sizes, total = [], [], 0
    log(f"  baseline: boto3 put_object of {len(logs)} sealed segments' .log/.index/.timeindex, one thread")
    with Cpu(broker, moto) as cpu:
        t0 = time.time()
        for p in logs:
            for ext in (".log", ".index", ".timeindex"):
                f = p.with_suffix(ext)
                with open(f, "rb") as body:
                    s3.put_object(Bucket=BUCKET, Key=f"baseline-upload/{f.name}", Body=body)
                total += f.stat().st_size
            ends.append(time.time())
            sizes.append(p.stat().st_size)
    res = {"segments": len(logs), "log_bytes": sum(sizes), "all_bytes": total,
           "seconds": ends[-1] - t0, "mb_per_s": sum(sizes) / (ends[-1] - t0) / 1e6,
           "steady_mb_per_s": steady_rate(ends, sizes) / 1e6, **cpu.as_dict(),
           "command": "boto3 s3.put_object(Bucket, Key, Body=open(file)) for each sealed .log, .index, "
                      ".timeindex in turn (one thread; client configured like the broker's)"}
    log(f"    {res['log_bytes'] / 1e6:,.0f} MB of .log in {res['seconds']:.2f} s = {res['mb_per_s']:,.1f} MB/s "
        f"(steady {res['steady_mb_per_s']:,.1f} MB/s; moto CPU {cpu.moto_cpu:.1f} s)")
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix="baseline-upload/"):
        for item in page.get("Contents", ()):
            s3.delete_object(Bucket=BUCKET, Key=item["Key"])
    return res


def broker_upload(s3, broker: BrokerProcess, moto: Moto, topic: str, records: int,
                  profile: Path | None) -> tuple[dict, str, dict]:
    sealed = len(local_logs(broker, topic)) - 1
    log(f"  broker: alter {topic} remote.storage.enable=true; waiting for {sealed} uploads, the manifest "
        "and the local copies to go")
    with Cpu(broker, moto) as cpu, Profiler(broker.proc.pid, profile, "tiering-upload"):
        t0 = time.time()
        alter_topic(broker.bootstrap, topic, remote_storage_enable="true")
        tid = topic_id(broker, topic)
        deadline = time.monotonic() + 600
        last = 0.0
        while True:
            lines = upload_lines(broker, topic)
            if len(lines) >= sealed:
                break
            if time.monotonic() > deadline:
                raise SystemExit(f"only {len(lines)}/{sealed} segments uploaded after 600 s")
            if time.monotonic() - last > 1.0:
                last = time.monotonic()
                log(f"    uploaded {len(lines)}/{sealed} segments")
            time.sleep(0.05)
    # wait (not timed) for the manifest and for local retention to remove the local copies
    deadline = time.monotonic() + 120
    while True:
        man = manifest(s3, tid)
        files = local_logs(broker, topic)
        nxt = man["segments"][-1]["last_offset"] + 1 if man and man["segments"] else 0
        if nxt == records - 1 and len(files) == 1:
            break
        if time.monotonic() > deadline:
            raise SystemExit(f"manifest ends at {nxt}, {len(files)} local .log files after 120 s")
        time.sleep(0.2)
    log(f"    manifest holds {len(man['segments'])} segments [0, {nxt}); the topic's local dir has only "
        f"{files[0].name} (the active segment)")
    ends = [t for t, _, _ in lines]
    sizes = [n for _, _, n in lines]
    res = {"segments": len(lines), "log_bytes": sum(sizes), "first_upload_done_after_alter_s": ends[0] - t0,
           "seconds_from_alter": ends[-1] - t0, "mb_per_s_from_alter": sum(sizes) / (ends[-1] - t0) / 1e6,
           "steady_mb_per_s": steady_rate(ends, sizes) / 1e6, **cpu.as_dict(),
           "task_interval_ms": TASK_INTERVAL_MS,
           "how": "timestamps of the broker's 'uploaded TOPIC-0 segment [a, b] (n bytes)' log lines"}
    log(f"    broker: {res['log_bytes'] / 1e6:,.0f} MB in {res['seconds_from_alter']:.2f} s from the alter = "
        f"{res['mb_per_s_from_alter']:,.1f} MB/s (steady {res['steady_mb_per_s']:,.1f} MB/s; broker CPU "
        f"{cpu.broker_cpu:.1f} s, moto CPU {cpu.moto_cpu:.1f} s)")
    return res, tid, man


# --------------------------------------------------------------------------- (2) catch-up read


def direct_read(s3, broker: BrokerProcess, moto: Moto, tid: str, man: dict) -> dict:
    segs = man["segments"]
    total = 0
    requests = 0
    with Cpu(broker, moto) as cpu:
        for seg in segs:
            key, size = seg_key(tid, seg), seg["size_bytes"]
            for start in range(0, size, CHUNK_BYTES):
                end = min(size, start + CHUNK_BYTES) - 1
                body = s3.get_object(Bucket=BUCKET, Key=key, Range=f"bytes={start}-{end}")["Body"]
                total += len(body.read())
                body.close()
                requests += 1
    expected = sum(s["size_bytes"] for s in segs)
    if total != expected:
        raise SystemExit(f"FAIL: direct read got {total} bytes, manifest says {expected}")
    res = {"bytes": total, "requests": requests, "seconds": cpu.wall, "mb_per_s": total / cpu.wall / 1e6,
           **cpu.as_dict()}
    log(f"    direct: {total / 1e6:,.0f} MB in {cpu.wall:.2f} s = {res['mb_per_s']:,.1f} MB/s "
        f"({requests:,} GETs; moto CPU {cpu.moto_cpu:.1f} s, bench CPU {cpu.self_cpu:.1f} s)")
    return res


def broker_read(broker: BrokerProcess, moto: Moto, topic: str, records: int, remote_bytes: int,
                profile: Path | None, name: str) -> dict:
    m0 = moto.cpu()
    r = foundation.run_consume_kcat(broker, topic, RECORD_SIZE, records, profile, name)
    r["moto_cpu_seconds"] = moto.cpu() - m0
    r["remote_object_bytes"] = remote_bytes
    r["object_mb_per_s"] = remote_bytes / r["seconds"] / 1e6
    log(f"    broker: {remote_bytes / 1e6:,.0f} MB of segment objects in {r['seconds']:.2f} s = "
        f"{r['object_mb_per_s']:,.1f} MB/s (moto CPU {r['moto_cpu_seconds']:.1f} s)")
    return r


# --------------------------------------------------------------------------- (3) isolation


class HistoryReaders:
    """``n`` threads, each running ``kcat -C -e`` from offset 0 over and over until stopped."""

    def __init__(self, broker: BrokerProcess, topic: str, records: int, n: int = 2) -> None:
        self.cmd = [KCAT, "-b", broker.bootstrap, "-C", "-t", topic, "-p", "0", "-o", "beginning", "-e",
                    "-f", "", *xargs(foundation.CONSUME_X)]
        self.records = records
        self.stop = threading.Event()
        self.passes: list[dict] = []
        self.failures: list[str] = []
        self.procs: dict[int, subprocess.Popen] = {}
        self.lock = threading.Lock()
        self.threads = [threading.Thread(target=self._run, args=(i,), daemon=True) for i in range(n)]

    def _run(self, i: int) -> None:
        while not self.stop.is_set():
            t0 = time.perf_counter()
            p = subprocess.Popen([*OTHERS, *self.cmd], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                 text=True)
            with self.lock:
                self.procs[i] = p
            _, err = p.communicate()
            wall = time.perf_counter() - t0
            if self.stop.is_set():
                return
            m = re.search(r"Reached end of topic \S+ \[0\] at offset (\d+)", err)
            if p.returncode != 0 or not m or int(m.group(1)) != self.records:
                self.failures.append(err[-500:])
                return
            self.passes.append({"reader": i, "seconds": wall})

    def __enter__(self):
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        with self.lock:
            for p in self.procs.values():
                if p.poll() is None:
                    p.send_signal(signal.SIGTERM)
        for t in self.threads:
            t.join(timeout=30)


DIRECT_READER_CODE = r"""
import json, sys, time, boto3
from botocore.config import Config
endpoint, bucket, chunk, objects = sys.argv[1], sys.argv[2], int(sys.argv[3]), json.loads(sys.argv[4])
s3 = boto3.client("s3", endpoint_url=endpoint, config=Config(
    region_name="us-east-1", s3={"addressing_style": "path"},
    request_checksum_calculation="when_required", response_checksum_validation="when_required"))
while True:
    t0 = time.perf_counter()
    for key, size in objects:
        for start in range(0, size, chunk):
            body = s3.get_object(Bucket=bucket, Key=key, Range=f"bytes={start}-{min(size, start + chunk) - 1}")["Body"]
            body.read()
            body.close()
    print(time.perf_counter() - t0, flush=True)
"""


class DirectReaders:
    """Control load: ``n`` processes looping boto3 ranged GETs over the history objects (no broker)."""

    def __init__(self, endpoint: str, tid: str, man: dict, n: int = 2) -> None:
        objects = [[seg_key(tid, s), s["size_bytes"]] for s in man["segments"]]
        self.cmd = [sys.executable, "-c", DIRECT_READER_CODE, endpoint, BUCKET, str(CHUNK_BYTES),
                    json.dumps(objects)]
        self.shown = (f"python -c '<boto3 ranged get_object of every segment object in {CHUNK_BYTES} B "
                      "chunks, in a loop>' (x2 processes)")
        self.n = n
        self.passes: list[float] = []

    def __enter__(self):
        self.procs = [subprocess.Popen([*OTHERS, *self.cmd], stdout=subprocess.PIPE, text=True)
                      for _ in range(self.n)]
        return self

    def __exit__(self, *exc):
        for p in self.procs:
            p.terminate()
        for p in self.procs:
            out, _ = p.communicate(timeout=30)
            self.passes += [float(x) for x in out.split()]


def run_latency(broker: BrokerProcess, moto: Moto, work: Path, cfg: dict, topic: str,
                profile: Path | None, name: str) -> dict:
    import numpy as np

    create_topic(broker.bootstrap, topic)
    total_seconds = cfg["latency_warmup_seconds"] + cfg["latency_seconds"]
    count = int(LATENCY_RATE * total_seconds)
    warm = int(LATENCY_RATE * cfg["latency_warmup_seconds"])
    out = work / f"{topic}.bin"
    script = str(BENCH / "latency.py")
    ccmd = [sys.executable, script, "consume", "--bootstrap", broker.bootstrap, "--topic", topic,
            "--count", str(count), "--out", str(out)]
    pcmd = [sys.executable, script, "produce", "--bootstrap", broker.bootstrap, "--topic", topic,
            "--rate", str(LATENCY_RATE), "--seconds", str(total_seconds), "--linger-ms", "1"]
    ccmd, pcmd = [*BROKER_SIDE, *ccmd], [*BROKER_SIDE, *pcmd]
    cons = subprocess.Popen(ccmd, stdout=subprocess.PIPE, text=True)
    if cons.stdout.readline().strip() != "ready":
        raise SystemExit("latency consumer did not start")
    with Cpu(broker, moto) as cpu, Profiler(broker.proc.pid, profile, name):
        prod = subprocess.Popen(pcmd, stdout=subprocess.PIPE, text=True)
        pres = foundation.drain_json(prod)
        cres = foundation.drain_json(cons)
    if prod.returncode != 0 or not pres or pres["undelivered"] or pres["failure_count"]:
        raise SystemExit(f"FAIL: latency producer: {pres}")
    if cons.returncode != 0 or not cres or cres["received"] != count:
        raise SystemExit(f"FAIL: latency consumer: {cres}")
    lat = np.fromfile(out, dtype="<i8")[warm:] / 1e6
    pct = np.percentile(lat, [50, 99, 99.9])
    res = {"topic": topic, "rate_target": LATENCY_RATE, "rate_achieved": pres["rate"], "records": count,
           "warmup_records_excluded": warm, "measured_records": int(lat.size),
           "p50_ms": float(pct[0]), "p99_ms": float(pct[1]), "p999_ms": float(pct[2]),
           "max_ms": float(lat.max()), "mean_ms": float(lat.mean()), **cpu.as_dict(),
           "broker_busy": cpu.broker_cpu / cpu.wall,
           **{k: pres[k] for k in ("ack_p50_ms", "ack_p99_ms", "ack_p999_ms")},
           "command_consumer": shlex.join(ccmd), "command_producer": shlex.join(pcmd)}
    log(f"    {res['measured_records']:,} records at {pres['rate']:,.0f}/s: p50 {res['p50_ms']:.2f} ms, "
        f"p99 {res['p99_ms']:.2f} ms, p99.9 {res['p999_ms']:.2f} ms, max {res['max_ms']:.2f} ms "
        f"(broker {res['broker_busy']:.0%} busy, moto CPU {cpu.moto_cpu:.1f} s); produce acks p50 "
        f"{res['ack_p50_ms']:.2f} ms, p99 {res['ack_p99_ms']:.2f} ms")
    return res


# --------------------------------------------------------------------------- report


def pct(x: float) -> str:
    return f"{x:.0%}"


def _layout_text(layout: dict) -> str:
    if layout.get("name") == "dedicated":
        return (f"Layout (`--layout dedicated`, the default): the broker and the tail producer and consumer run "
                f"on CPU {layout['broker_and_tail_clients_cpus']} (`taskset`); moto, the history readers and the "
                f"control readers on CPU {layout['object_store_history_readers_and_history_threads_cpus']} at nice "
                f"{layout['others_nice']}, standing for the object store and the backfilling consumers on other "
                "machines; the broker runs with `remote.log.reader.cpus="
                f"{layout['object_store_history_readers_and_history_threads_cpus']}`, so its tiered-fetch and "
                "history-send threads use that CPU too. What is measured is what serving history costs the "
                "broker's tail path when the history work has cores of its own, as a deployment would give it.")
    return (f"Layout (`--layout shared`): nothing pinned; the broker, moto and every client compete for all "
            f"cores (others at nice {layout.get('others_nice', 0)}).")


def _rounds_sentence(rounds: list[dict]) -> str:
    """The isolation rounds behind the rows above (their median round by p99 ratio)."""
    if len(rounds) < 2:
        return ""
    each = "; ".join(f"{r['alone_p99_ms']:.2f} / {r['loaded_p99_ms']:.2f} ms, {r['p99_ratio']:.2f}" for r in rounds)
    return (f" The alone and loaded rows are the median of {len(rounds)} rounds, each alone then with the "
            f"readers in turn (p99 alone / with readers, ratio): {each}.")


def write_report(data: dict, md_path: Path) -> None:
    json_path = md_path.with_name("benchmarks-tiering.json")
    json_path.write_text(json.dumps(data, indent=2) + "\n")
    m, up, cu, iso = data["machine"], data["upload"], data["catchup"], data["isolation"]
    L = [
        MARK_START,
        "## Tiered storage (`bench/tiering.py`)",
        "",
        (f"Command: `{data['command']}` — {data['date']}; {m['nproc']} CPUs {m['cpu_model']}, "
         f"{m['memory_gib']} GiB, Linux {m['kernel']}, Python {m['python']}, kcat {m['kcat']} (librdkafka "
         f"{m['kcat_librdkafka']}), boto3 {data['versions']['boto3']}, moto {data['versions']['moto']}. "
         "Raw figures: `docs/benchmarks-tiering.json`." + guest_memory.describe(data.get("memory"))),
        "",
        (f"**S3 endpoint: moto's server** (`moto.server.ThreadedMotoServer`, one thread per request, in "
         f"its own process on 127.0.0.1, objects held in memory), not AWS or MinIO. Broker: `{data['broker']['command']}`. "
         f"**Broker, moto and clients share the same {m['nproc']} cores**; the tables give each one's CPU "
         "seconds. moto answers a ranged GET by copying the whole object and slicing it, so a GET costs "
         "time in proportion to the segment size; the broker and the baseline pay this alike."),
        "",
        "| target | required | measured | met |",
        "| --- | --- | --- | --- |",
    ]
    for t in data["targets"]:
        req = f"≤ {t['required']:g}" if t["kind"] == "max" else f"≥ {t['required']:.0%}"
        got = f"{t['measured']:.2f}" if t["kind"] == "max" else pct(t["measured"])
        L.append(f"| {t['name']} | {req} | {got} | {'**yes**' if t['met'] else '**NO**'} |")
    L.append(f"| Upload throughput vs direct `put_object` of the same files | (no target) | "
             f"{pct(up['ratio_steady'])} | — |")
    L += [
        "",
        (f"**1. Catch-up read from the bucket.** A topic of {cu['records']:,} records of 1 KiB "
         f"({cu['remote_object_bytes'] / 1e6:,.0f} MB of segment objects in {cu['segments']} segments of "
         f"`log.segment.bytes={data['config']['segment_bytes']}`; all but the last record only in the bucket, "
         "checked on the manifest and in the topic's local directory) read from offset 0 by "
         "`kcat -C -e` through the broker, until kcat reports the end offset (time from start to exit). "
         f"Baseline, interleaved with it in the same run: boto3 `get_object` with `Range` of each segment "
         f"object in {CHUNK_BYTES // 1024} KiB chunks (the broker's `remote.fetch.chunk.bytes`), sequential, "
         "one thread, in the benchmark's process. Ratio on bytes of segment objects per second; median of "
         f"{data['config']['repeats']} run(s) each"
         + (f", with the broker's chunk cache at {data['config']['cache_bytes']:,} bytes (smaller than the "
            "history, so re-reads come from the bucket)" if data["config"]["cache_bytes"] else
            ", broker chunk cache at its default (256 MiB, smaller than the history)") + "."),
        "",
        "| reader | seconds | object MB/s | records/s | value MB/s | broker CPU s | moto CPU s | ratio |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
        (f"| broker (kcat) | {cu['broker']['seconds']:.2f} | {cu['broker']['object_mb_per_s']:,.1f} | "
         f"{cu['broker']['records_per_s']:,.0f} | {cu['broker']['mb_per_s']:,.1f} | "
         f"{cu['broker']['broker_cpu_seconds']:.1f} | {cu['broker']['moto_cpu_seconds']:.1f} | "
         f"**{pct(cu['ratio'])}** |"),
        (f"| direct boto3 ranged GETs | {cu['direct']['seconds']:.2f} | {cu['direct']['mb_per_s']:,.1f} | — | — | "
         f"{cu['direct']['broker_cpu_seconds']:.1f} | {cu['direct']['moto_cpu_seconds']:.1f} | 100% |"),
        "",
        "All runs (object MB/s): broker " + ", ".join(f"{r['object_mb_per_s']:,.1f}" for r in cu["broker_runs"])
        + "; direct " + ", ".join(f"{r['mb_per_s']:,.1f}" for r in cu["direct_runs"]) + ".",
        "",
        (f"**2. Isolation.** `bench/latency.py` (confluent-kafka, acks=1, linger.ms=1, 100-byte records "
         f"stamped with `time.time_ns()`; consumer fetch.wait.max.ms=100) at {LATENCY_RATE:,} records/s for "
         f"{data['config']['latency_seconds']:g} s (+{data['config']['latency_warmup_seconds']:g} s warm-up, "
         "excluded) on a fresh topic each time: alone; while two `kcat -C -e` readers read the topic of "
         "section 1 from offset 0 in a loop (from the bucket, through the broker); and, as a control, while two "
         "processes loop boto3 ranged GETs over the same objects directly."),
        "",
        _layout_text(data.get("layout", {})),
        "",
        "| tail consumer | p50 ms | p99 ms | p99.9 ms | max ms | broker busy | moto CPU s | history read meanwhile |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |",
    ]
    rows = (("alone", iso["alone"], None),
            ("with 2 history readers through the broker", iso["loaded"],
             (iso["reader_passes"], iso["reader_mb_per_s"])),
            ("control: with 2 direct boto3 readers of the same objects (broker not involved)", iso["control"],
             (iso["control"]["reader_passes"], iso["control"]["reader_mb_per_s"])))
    for label, r, passes in rows:
        extra = "—"
        if passes is not None:
            extra = (f"{passes[0]} full passes ({passes[1]:,.1f} MB/s per reader per pass, median)"
                     if passes[0] else "no pass completed")
        L.append(f"| {label} | {r['p50_ms']:.2f} | {r['p99_ms']:.2f} | {r['p999_ms']:.2f} | {r['max_ms']:.2f} | "
                 f"{pct(r['broker_busy'])} | {r['moto_cpu_seconds']:.1f} | {extra} |")
    L += [
        "",
        (f"p99 ratio (with readers through the broker / alone): **{iso['p99_ratio']:.2f}**; p50 ratio "
         f"{iso['p50_ratio']:.2f}. The control row puts the same kind of S3 load on moto and the cores "
         f"without the broker (p99 ratio {iso['control_p99_ratio']:.2f}): the difference between the two "
         "loaded rows is what serving history costs the broker's tail consumers."
         + _rounds_sentence(iso.get("rounds", []))),
        "",
        (f"**3. Upload.** The same topic is filled with tiered storage off, the sealed segment files are "
         "uploaded directly with boto3 `put_object` (`.log`, `.index`, `.timeindex` of each in turn, one "
         "thread; then deleted), then `remote.storage.enable=true` is set on the topic and the broker uploads "
         f"them (its copier, task interval {TASK_INTERVAL_MS} ms: the three objects, then the manifest by "
         "compare-and-set, per segment). Rate = `.log` bytes of segments 2..N over the time from the first "
         "segment's completion to the last's (broker: from its 'uploaded ... segment' log lines), the same "
         "definition on both sides."),
        "",
        "| uploader | segments | MB | steady MB/s | end-to-end | broker CPU s | moto CPU s | ratio |",
        "| --- | ---: | ---: | ---: | --- | ---: | ---: | ---: |",
        (f"| broker | {up['broker']['segments']} | {up['broker']['log_bytes'] / 1e6:,.0f} | "
         f"{up['broker']['steady_mb_per_s']:,.1f} | {up['broker']['seconds_from_alter']:.2f} s from the alter "
         f"({up['broker']['mb_per_s_from_alter']:,.1f} MB/s) | {up['broker']['broker_cpu_seconds']:.1f} | "
         f"{up['broker']['moto_cpu_seconds']:.1f} | **{pct(up['ratio_steady'])}** |"),
        (f"| direct boto3 put_object | {up['direct']['segments']} | {up['direct']['log_bytes'] / 1e6:,.0f} | "
         f"{up['direct']['steady_mb_per_s']:,.1f} | {up['direct']['seconds']:.2f} s "
         f"({up['direct']['mb_per_s']:,.1f} MB/s) | {up['direct']['broker_cpu_seconds']:.1f} | "
         f"{up['direct']['moto_cpu_seconds']:.1f} | 100% |"),
        "",
    ]
    if data.get("notes"):
        L += [f"- {n}" for n in data["notes"]] + [""]
    L += [
        "Commands:",
        "",
        "```",
        data["moto_command"],
        data["broker"]["command"],
        data["fill"]["produce_command"],
        cu["broker"]["command"],
        iso["alone"]["command_consumer"],
        iso["alone"]["command_producer"],
        iso["control"]["reader_command"],
        "```",
        MARK_END,
    ]
    section = "\n".join(L)
    foundation.write_section(md_path, "tiering", section)
    log(f"wrote {md_path} (tiering section) and {json_path}")


# --------------------------------------------------------------------------- main


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="~8x less history, shorter latency windows")
    ap.add_argument("--out", default=str(REPO / "docs" / "benchmarks.md"))
    ap.add_argument("--work-dir", default="/tmp", help="temporary broker data dir and record files (a real disk)")
    ap.add_argument("--profile", metavar="DIR", default=None,
                    help="py-spy record the broker during upload, the first catch-up read and the loaded "
                         "latency run (collapsed stacks; summarise with bench/pyspy_top.py)")
    ap.add_argument("--keep", action="store_true", help="keep the temporary data dir")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="extra broker config for experiments (recorded in the report's broker command)")
    ap.add_argument("--others-nice", type=int, default=None, metavar="N",
                    help="run moto and the history readers at this nice level: they stand for the "
                         "object store and consumers on other machines, which in a deployment never "
                         "take the broker's cores")
    ap.add_argument("--layout", choices=("dedicated", "shared"), default="dedicated",
                    help="dedicated (default, needs 2+ CPUs): the broker and the tail clients on the first "
                         "half of the CPUs; moto, the history readers and the broker's history threads "
                         "(remote.log.reader.cpus) on the rest, as the object store and backfilling "
                         "consumers would be on other machines. shared: nothing pinned, everything "
                         "competes for every core")
    args = ap.parse_args()
    cfg = QUICK if args.quick else FULL
    import boto3
    import moto

    for k in CLEARED:
        os.environ.pop(k, None)
    os.environ.update(CREDENTIALS)
    work = Path(tempfile.mkdtemp(prefix="strata-bench-tiering-", dir=args.work_dir))
    profile = Path(args.profile).resolve() if args.profile else None
    if profile:
        profile.mkdir(parents=True, exist_ok=True)
    command = "python bench/tiering.py" + (" --quick" if args.quick else "")
    cpus = sorted(os.sched_getaffinity(0))
    layout = args.layout if len(cpus) >= 2 else "shared"
    broker_cpus = other_cpus = ""
    if layout == "dedicated":
        broker_cpus, other_cpus = dedicated_layout(cpus)
        OTHERS[:] = ["taskset", "-c", other_cpus, *OTHERS]
        BROKER_SIDE[:] = ["taskset", "-c", broker_cpus]
    else:
        command += " --layout shared"
    # dedicated: the others also yield the CPU to the broker's threads whenever both want it,
    # as processes on other machines would; nice 19 unless --others-nice says otherwise
    nice = args.others_nice if args.others_nice is not None else (19 if layout == "dedicated" else 0)
    if args.others_nice is not None:
        command += f" --others-nice {args.others_nice}"
    if nice:
        OTHERS[:] = ["nice", "-n", str(nice), *OTHERS]
    if Path(args.out).resolve() != (REPO / "docs" / "benchmarks.md"):
        command += f" --out {args.out}"
    data: dict = {"command": command, "mode": "quick" if args.quick else "full",
                  "date": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
                  "machine": machine_info(work),
                  "versions": {"boto3": boto3.__version__, "moto": moto.__version__},
                  "layout": {"name": layout, "others_nice": nice, "broker_and_tail_clients_cpus": broker_cpus,
                             "object_store_history_readers_and_history_threads_cpus": other_cpus},
                  "config": {**cfg, "record_size": RECORD_SIZE, "chunk_bytes": CHUNK_BYTES,
                             "task_interval_ms": TASK_INTERVAL_MS, "latency_rate": LATENCY_RATE},
                  "notes": []}
    log(f"work dir {work}; {data['machine']['nproc']} CPUs {data['machine']['cpu_model']}")
    records = work / "records-1024.txt"
    foundation.generate_records(records, RECORD_SIZE, cfg["records"])
    one_more = work / "one-more.txt"
    one_more.write_bytes(b"%010d" % cfg["records"] + b"z" * (RECORD_SIZE - 10) + b"\n")

    moto_srv = Moto()
    data["moto_command"] = moto_srv.shown
    s3 = s3_client(moto_srv.endpoint)
    s3.create_bucket(Bucket=BUCKET)
    broker = BrokerProcess(work / "data", work / "broker.log")
    i = broker.cmd.index(f"log.segment.bytes={foundation.SEGMENT_BYTES}")
    del broker.cmd[i - 1:i + 1]  # "--set log.segment.bytes=..." is set below
    sets = {"log.segment.bytes": cfg["segment_bytes"], "remote.log.manager.task.interval.ms": TASK_INTERVAL_MS,
            "log.local.retention.bytes": 0, "log.retention.check.interval.ms": 500}
    if cfg["cache_bytes"]:
        sets["remote.fetch.chunk.cache.bytes"] = cfg["cache_bytes"]
    if layout == "dedicated":
        sets["remote.log.reader.cpus"] = other_cpus
        broker.cmd[:0] = BROKER_SIDE
    for kv in args.set:
        k, _, v = kv.partition("=")
        sets[k] = v
        command += f" --set {kv}"
    data["command"] = command
    broker.cmd += ["--object-store", f"s3://{BUCKET}/{PREFIX}", "--s3-endpoint", moto_srv.endpoint]
    for k, v in sets.items():
        broker.cmd += ["--set", f"{k}={v}"]
    data["broker"] = {"command": "AWS_ACCESS_KEY_ID=testing AWS_SECRET_ACCESS_KEY=testing "
                                 "AWS_DEFAULT_REGION=us-east-1 " + shlex.join(broker.cmd)}
    topic = "bench-history"
    rc = None
    started = time.monotonic()
    memory = contextlib.ExitStack()  # this VM's freed pages kept in the guest for the run
    try:
        kept = memory.enter_context(guest_memory.freed_pages_kept())
        data["memory"] = {"freed_pages": kept, "prewarm": foundation.prewarm_memory(work, cfg["prewarm_gib"])}
        broker.start()
        log("== fill: 1 KiB records with tiered storage off on the topic")
        data["fill"] = fill_topic(broker, records, topic, cfg["records"], one_more)
        total_records = data["fill"]["records"]

        log("== 3. upload throughput: direct put_object vs the broker")
        direct_up = direct_upload(s3, broker, moto_srv, topic)
        broker_up, tid, man = broker_upload(s3, broker, moto_srv, topic, total_records, profile)
        data["upload"] = {"direct": direct_up, "broker": broker_up,
                          "ratio_steady": broker_up["steady_mb_per_s"] / direct_up["steady_mb_per_s"]}
        log(f"  upload ratio (steady): {data['upload']['ratio_steady']:.0%}")

        log("== 1. catch-up read from the bucket: kcat through the broker vs direct boto3 ranged GETs")
        remote_bytes = sum(s["size_bytes"] for s in man["segments"])
        d_runs, b_runs = [], []
        for rep in range(cfg["repeats"]):
            log(f"  repeat {rep + 1}/{cfg['repeats']}")
            d_runs.append(direct_read(s3, broker, moto_srv, tid, man))
            b_runs.append(broker_read(broker, moto_srv, topic, total_records, remote_bytes,
                                      profile if rep == 0 else None, "tiering-catchup"))
        bmed = foundation.median_run(b_runs, "object_mb_per_s")
        dmed = foundation.median_run(d_runs, "mb_per_s")
        data["catchup"] = {"records": total_records, "segments": len(man["segments"]),
                           "remote_object_bytes": remote_bytes, "broker": bmed, "direct": dmed,
                           "broker_runs": b_runs, "direct_runs": d_runs,
                           "ratio": bmed["object_mb_per_s"] / dmed["mb_per_s"]}
        log(f"  catch-up ratio: {data['catchup']['ratio']:.0%}")

        log(f"== 2. isolation: tail consumer at {LATENCY_RATE:,} records/s, alone and with 2 history readers")
        # rounds of (alone, with readers) in turn: one run of each swung the ratio from 1.2 to 2.0
        rounds, passes = [], []
        for rnd in range(cfg["isolation_rounds"]):
            log(f"  round {rnd + 1}/{cfg['isolation_rounds']}")
            alone = run_latency(broker, moto_srv, work, cfg, f"bench-tail-alone-r{rnd}", None, "")
            readers = HistoryReaders(broker, topic, total_records)
            log(f"  starting 2 history readers: {shlex.join(readers.cmd)} (looped)")
            with readers:
                time.sleep(1.0)
                loaded = run_latency(broker, moto_srv, work, cfg, f"bench-tail-loaded-r{rnd}",
                                     profile if rnd == 0 else None, "tiering-isolation-loaded")
            if readers.failures:
                raise SystemExit(f"FAIL: a history reader failed: {readers.failures[0]}")
            passes += readers.passes
            rounds.append({"alone": alone, "loaded": loaded, "p99_ratio": loaded["p99_ms"] / alone["p99_ms"]})
            log(f"  round {rnd + 1}: p99 ratio {rounds[-1]['p99_ratio']:.2f}")
        middle = sorted(rounds, key=lambda r: r["p99_ratio"])[len(rounds) // 2]
        alone, loaded = middle["alone"], middle["loaded"]
        control = DirectReaders(moto_srv.endpoint, tid, man)
        log(f"  control: 2 direct boto3 readers of the same objects, no broker involved: {control.shown}")
        with control:
            time.sleep(1.0)
            ctl = run_latency(broker, moto_srv, work, cfg, "bench-tail-control", None, "")
        ctl["reader_passes"] = len(control.passes)
        ctl["reader_mb_per_s"] = (remote_bytes / statistics.median(control.passes) / 1e6
                                  if control.passes else None)
        ctl["reader_command"] = control.shown
        data["isolation"] = {
            "alone": alone, "loaded": loaded, "reader_command": shlex.join(readers.cmd),
            "rounds": [{"alone_p99_ms": r["alone"]["p99_ms"], "loaded_p99_ms": r["loaded"]["p99_ms"],
                        "p99_ratio": r["p99_ratio"]} for r in rounds],
            "reader_passes": len(passes), "reader_pass_seconds": [p["seconds"] for p in passes],
            "reader_mb_per_s": (remote_bytes / statistics.median(p["seconds"] for p in passes) / 1e6
                                if passes else None),
            "p99_ratio": loaded["p99_ms"] / alone["p99_ms"], "p50_ratio": loaded["p50_ms"] / alone["p50_ms"],
            "control": ctl, "control_p99_ratio": ctl["p99_ms"] / alone["p99_ms"]}
        if not passes:
            data["notes"].append("No history reader completed a pass during the loaded latency window: "
                                 "the readers were still reading from the bucket throughout it.")
        log(f"  history readers completed {len(passes)} passes; p99 ratio {data['isolation']['p99_ratio']:.2f}")
        data["broker"]["rss_mib_at_end"] = round(broker.rss_mib(), 1)
    finally:
        rc = broker.stop()
        data.setdefault("broker", {})["exit_code"] = rc
        moto_srv.stop()
        memory.close()
        if rc not in (0, None):
            log(f"WARNING: broker exited with {rc}; log at {broker.log_path}")
        if not args.keep and rc == 0:
            subprocess.run(["rm", "-rf", str(work)], check=False)
        else:
            log(f"kept {work}")
    data["total_seconds"] = time.monotonic() - started
    measured = {"catchup_vs_direct": data["catchup"]["ratio"],
                "isolation_p99_ratio": data["isolation"]["p99_ratio"]}
    data["targets"] = []
    for key, (name, unit, req, kind) in TARGETS.items():
        got = measured[key]
        met = got <= req if kind == "max" else got >= req
        data["targets"].append({"id": key, "name": name, "unit": unit, "required": req, "kind": kind,
                                "measured": got, "met": met})
    if profile:
        import pyspy_top

        data["profiles"] = {}
        for f in sorted(profile.glob("tiering-*.collapsed")):
            data["profiles"][f.stem] = pyspy_top.summarise(str(f), 20).splitlines()
    if args.quick:
        data["notes"].append("`--quick` run: about 8x less history and shorter windows; use the full run "
                             "for figures.")
    write_report(data, Path(args.out))
    for t in data["targets"]:
        log(f"target {t['name']}: {t['measured']:.3g} (need {'≤' if t['kind'] == 'max' else '≥'} "
            f"{t['required']:g}) {'met' if t['met'] else 'MISSED'}")
    log(f"upload: broker {data['upload']['broker']['steady_mb_per_s']:,.1f} MB/s vs direct "
        f"{data['upload']['direct']['steady_mb_per_s']:,.1f} MB/s = {data['upload']['ratio_steady']:.0%}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
