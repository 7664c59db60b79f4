"""Strata foundation benchmark: produce, consume from the page cache, latency.

    python bench/foundation.py [--quick] [--out docs/benchmarks.md] [--profile DIR]

Starts its own single-node broker (a temporary data dir on the real disk, a free
loopback port, ``--set log.segment.bytes=1073741824``), runs every workload and
its baseline in the same run, stops the broker, and writes ``docs/benchmarks.md``
and ``docs/benchmarks.json`` (next to ``--out``). Nothing in the output is
hard-coded: every figure comes from this run. See ``bench/README.md``.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import platform
import re
import resource
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
sys.path.insert(0, str(BENCH))

import sendfile_baseline  # noqa: E402

KCAT = shutil.which("kcat") or "/usr/bin/kcat"
DD = shutil.which("dd") or "/usr/bin/dd"
SEGMENT_BYTES = 1073741824

# librdkafka producer settings (the workload: acks=1, linger 5 ms, 1 MiB batches).
KCAT_PRODUCE_X = {
    "linger.ms": "5",
    "batch.size": "1048576",
    "acks": "1",
    "queue.buffering.max.messages": "10000000",
    "queue.buffering.max.kbytes": "2097151",
}
# librdkafka consumer settings. queued.min.messages is raised because with the
# default (100000) a single 16 MB fetch of 100-byte records overfills the local
# queue and librdkafka then idles until its 1 s fetcher timer (client-side stall,
# measured at ~150k records/s instead of ~3M/s).
CONSUME_X = {
    "fetch.max.bytes": "52428800",
    "max.partition.fetch.bytes": "16777216",
    "fetch.wait.max.ms": "10",
    "queued.min.messages": "10000000",
    "queued.max.messages.kbytes": "2097151",
}

FULL = {
    "produce": [(100, 3_000_000), (1024, 1_000_000), (16384, 65_536)],
    "repeats": 3,
    "latency_seconds": 20.0,
    "latency_warmup_seconds": 1.0,
    "prewarm_gib": 12,
}
QUICK = {
    "produce": [(100, 300_000), (1024, 100_000), (16384, 6_400)],
    "repeats": 1,
    "latency_seconds": 4.0,
    "latency_warmup_seconds": 1.0,
    "prewarm_gib": 1,
}
LATENCY_RATE = 5000

TARGETS = {
    "produce_100": ("Produce 100 B records", "records/s", 800_000),
    "produce_1024_vs_dd": ("Produce 1 KiB records vs dd to the page cache", "ratio", 0.60),
    "consume_100": ("Consume 100 B records from the page cache", "records/s", 800_000),
    "consume_16384_vs_sendfile": ("Consume 16 KiB records vs plain sendfile", "ratio", 0.80),  # 0.50 before issue 34
    "latency_p99_ms": ("Produce-to-consume p99 at 5,000 records/s (producer linger.ms=1)", "ms (at most)", 5.0),
    "latency_p99_ms_linger0": ("Produce-to-consume p99 at 5,000 records/s (producer linger.ms=0)",
                               "ms (at most)", 5.0),
}


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def human_size(n: int) -> str:
    return f"{n // 1024} KiB" if n >= 1024 else f"{n} B"


# ---------------------------------------------------------------------------
# machine description

def machine_info(work_dir: Path) -> dict:
    cpu = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem_kib = 0
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                mem_kib = int(line.split()[1])
    except OSError:
        pass
    try:
        from confluent_kafka import libversion, version
        v = version()
        ck = {"confluent_kafka": v if isinstance(v, str) else v[0], "librdkafka": libversion()[0]}
    except Exception as exc:  # pragma: no cover - reported, not fatal
        ck = {"error": str(exc)}
    kcat_v = subprocess.run([KCAT, "-V"], capture_output=True, text=True).stdout
    m = re.search(r"Version (\S+) .*?librdkafka (\S+)", kcat_v, re.S)
    df = subprocess.run(["df", "-T", str(work_dir)], capture_output=True, text=True).stdout.splitlines()
    fs = df[-1].split() if len(df) > 1 else []
    return {
        "nproc": os.cpu_count(),
        "nproc_cmd": subprocess.run(["nproc"], capture_output=True, text=True).stdout.strip(),
        "cpu_model": cpu,
        "memory_gib": round(mem_kib / 1024 / 1024, 1),
        "kernel": platform.release(),
        "python": platform.python_version(),
        "confluent_kafka": ck,
        "kcat": m.group(1) if m else kcat_v.strip(),
        "kcat_librdkafka": m.group(2) if m else None,
        "data_dir_filesystem": {"device": fs[0], "type": fs[1]} if len(fs) >= 2 else None,
        "note": "broker and load generator share the same cores",
    }


# ---------------------------------------------------------------------------
# broker

def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class BrokerProcess:
    def __init__(self, data_dir: Path, log_path: Path):
        self.data_dir = data_dir
        self.port = free_port()
        self.http = f"127.0.0.1:{free_port()}"  # the console, /metrics and the admin API
        self.cmd = [sys.executable, "-m", "service", "up", "--data-dir", str(data_dir),
                    "--listen", f"127.0.0.1:{self.port}", "--http", self.http,
                    "--set", f"log.segment.bytes={SEGMENT_BYTES}"]
        self.log_path = log_path
        self.proc: subprocess.Popen | None = None
        self.bootstrap = f"127.0.0.1:{self.port}"

    def start(self) -> None:
        log(f"starting broker: {shlex.join(self.cmd)}")
        self._log = open(self.log_path, "w+")
        self.proc = subprocess.Popen(self.cmd, cwd=REPO, stdout=self._log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            text = self.log_path.read_text()
            m = re.search(r"listening on 127\.0\.0\.1:(\d+)", text)
            if m:
                self.port = int(m.group(1))
                self.bootstrap = f"127.0.0.1:{self.port}"
                log(f"broker pid {self.proc.pid} listening on {self.bootstrap}")
                return
            if self.proc.poll() is not None:
                raise SystemExit(f"broker exited with {self.proc.returncode}:\n{text}")
            time.sleep(0.1)
        raise SystemExit(f"broker did not report 'listening on' within 60 s:\n{self.log_path.read_text()}")

    def cpu_seconds(self) -> float:
        """utime + stime of the broker so far, from /proc."""
        fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def rss_mib(self) -> float:
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
        return 0.0

    def stop(self) -> int | None:
        if self.proc is None or self.proc.poll() is not None:
            return self.proc.returncode if self.proc else None
        log("stopping broker (SIGTERM)")
        self.proc.send_signal(signal.SIGTERM)
        try:
            rc = self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            log("broker did not stop within 60 s; killing it")
            self.proc.kill()
            rc = self.proc.wait()
        self._log.close()
        return rc


# ---------------------------------------------------------------------------
# helpers

def create_topic(bootstrap: str, name: str) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    for fut in admin.create_topics([NewTopic(name, 1, 1)], request_timeout=30).values():
        fut.result(timeout=30)


def high_watermark(bootstrap: str, topic: str) -> tuple[int, int]:
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "strata-bench-offsets",
                  "enable.auto.commit": False})
    try:
        return c.get_watermark_offsets(TopicPartition(topic, 0), timeout=30, cached=False)
    finally:
        c.close()


def xargs(settings: dict) -> list[str]:
    out: list[str] = []
    for k, v in settings.items():
        out += ["-X", f"{k}={v}"]
    return out


class Watch:
    """Print progress (records landed, from ListOffsets) once a second while a run goes on."""

    def __init__(self, bootstrap: str, topic: str, total: int, what: str):
        self.bootstrap, self.topic, self.total, self.what = bootstrap, topic, total, what
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        from confluent_kafka import Consumer, TopicPartition

        c = Consumer({"bootstrap.servers": self.bootstrap, "group.id": "strata-bench-watch",
                      "enable.auto.commit": False})
        try:
            while not self.stop.wait(1.0):
                try:
                    _, high = c.get_watermark_offsets(TopicPartition(self.topic, 0), timeout=2, cached=False)
                    log(f"    {self.what}: {high:,}/{self.total:,} records")
                except Exception:
                    pass
        finally:
            c.close()

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        self.thread.join(timeout=5)


def timed_child(cmd: list[str], **kw) -> tuple[float, subprocess.CompletedProcess, float]:
    """Run a command; return (wall seconds, completed process, child CPU seconds)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, **kw)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, proc, cpu


def java_classpath(client: Path, build: Path, source: str) -> str:
    """Compile ``bench/java/<source>`` against the Java client in ``client`` (a directory
    holding ``kafka-clients-*.jar`` and its ``lib/``, as ``shared/tools/java-client/build.sh``
    builds it); the classpath to run it with."""
    jars = sorted(client.glob("kafka-clients-*.jar"))
    if not jars:
        raise SystemExit(f"no kafka-clients-*.jar in {client} (shared/tools/java-client/build.sh builds it)")
    classpath = f"{jars[-1]}:{client / 'lib'}/*"
    subprocess.run(["javac", "-d", str(build), "-cp", classpath, str(Path(__file__).resolve().parent / "java" / source)],
                   check=True)
    return f"{build}:{classpath}"


class Profiler:
    """Optional py-spy record of the broker during one phase."""

    def __init__(self, pid: int, out_dir: Path | None, name: str):
        self.pid, self.out_dir, self.name = pid, out_dir, name
        self.proc = None

    def __enter__(self):
        if self.out_dir is not None:
            exe = shutil.which("py-spy")
            if exe is None:
                log("    (py-spy not installed; no profile)")
                return self
            self.path = self.out_dir / f"{self.name}.collapsed"
            self.proc = subprocess.Popen(
                [exe, "record", "--pid", str(self.pid), "--rate", "250", "--format", "raw",
                 "--nonblocking", "--output", str(self.path)],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            time.sleep(1.0)  # let py-spy attach
        return self

    def __exit__(self, *exc):
        if self.proc is not None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
            log(f"    profile written to {self.path}")


def stop_and_clean(broker: BrokerProcess, data: dict, work: Path) -> None:
    """Stop the broker, note its exit code in ``data["broker"]``, and remove ``work`` if it
    exited cleanly (kept for a look otherwise)."""
    rc = broker.stop()
    data.setdefault("broker", {"command": shlex.join(broker.cmd)})["exit_code"] = rc
    if rc == 0:
        subprocess.run(["rm", "-rf", str(work)], check=False)
    else:
        log(f"WARNING: broker exited with {rc}; kept {work}")


def finish_report(data: dict, started: float, quick_note: str | None, out: str, write) -> int:
    """Stamp the duration (and the ``--quick`` note), write the report to ``out``; exit code 0."""
    data["total_seconds"] = time.monotonic() - started
    if quick_note:
        data["notes"].append(quick_note)
    path = Path(out)
    path.parent.mkdir(parents=True, exist_ok=True)
    write(data, path)
    return 0


def sync_disks() -> None:
    """Flush dirty pages so each measured write starts from the same state."""
    os.sync()


# ---------------------------------------------------------------------------
# workloads

def generate_records(path: Path, size: int, count: int) -> None:
    """count newline-terminated lines whose content (the record value) is exactly size bytes."""
    log(f"generating {count:,} x {size} B records into {path}")
    alphabet = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
    body = (alphabet * (size // len(alphabet) + 2))
    chunk = 10_000
    with open(path, "wb", buffering=16 * 1024 * 1024) as f:
        for start in range(0, count, chunk):
            lines = []
            for i in range(start, min(count, start + chunk)):
                head = b"%010d" % i
                rot = i % len(alphabet)
                lines.append(head + body[rot:rot + size - len(head)] + b"\n")
            f.write(b"".join(lines))
    assert path.stat().st_size == count * (size + 1)


def run_dd(work_dir: Path, nbytes: int) -> dict:
    count = -(-nbytes // (1024 * 1024))
    target = work_dir / "dd.bin"
    target.unlink(missing_ok=True)
    sync_disks()
    cmd = [DD, "if=/dev/zero", f"of={target}", "bs=1M", f"count={count}"]
    wall, proc, _ = timed_child(cmd, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"dd failed: {proc.stderr}")
    m = re.search(r"(\d+) bytes .*? copied, ([\d.]+) s", proc.stderr)
    copied, secs = int(m.group(1)), float(m.group(2))
    target.unlink()
    return {"command": shlex.join(cmd), "bytes": copied, "seconds": secs, "wall_seconds": wall,
            "mb_per_s": copied / secs / 1e6}


def prewarm_memory(work_dir: Path, gib: float, *, quiet: bool = False) -> dict:
    """Write and delete a gib-sized file through the page cache before measuring.

    On this kind of VM the first touch of a guest memory page is several times
    slower than later touches (measured: dd of 1000 MiB into the page cache took
    2.4 s on fresh memory and 0.23 s right after). Without this step whichever of
    broker, kcat or dd happens to touch fresh memory first pays that cost, and the
    ratios are noise. The figures here are for a machine whose memory is warm, as
    on a long-running server. ``quiet``: no log lines (a bench that warms before each run).
    """
    if gib <= 0:
        return {"gib": 0}
    target = work_dir / "prewarm.bin"
    cmd = [DD, "if=/dev/zero", f"of={target}", "bs=1M", f"count={int(gib * 1024)}"]
    if not quiet:
        log(f"pre-warming {gib:g} GiB of memory through the page cache: {shlex.join(cmd)}")
    wall, proc, _ = timed_child(cmd, text=True)
    target.unlink(missing_ok=True)
    if not quiet:
        log(f"    took {wall:.1f} s")
    return {"gib": gib, "command": shlex.join(cmd), "seconds": wall,
            "dd_output": proc.stderr.strip().splitlines()[-1] if proc.stderr else ""}


def delete_topic(bootstrap: str, name: str) -> None:
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    for fut in admin.delete_topics([name], request_timeout=30).values():
        fut.result(timeout=30)


def run_produce(b: BrokerProcess, topic: str, records: Path, size: int, count: int,
                profile: Path | None, profile_name: str, *, bootstrap: str | None = None,
                extra_x: dict | None = None) -> dict:
    """kcat produces ``records``; ``bootstrap``/``extra_x``: another listener and its
    client settings (bench/tls.py: TLS)."""
    create_topic(b.bootstrap, topic)
    sync_disks()
    cmd = [KCAT, "-b", bootstrap or b.bootstrap, "-P", "-t", topic, "-p", "0", "-l",
           *xargs({**KCAT_PRODUCE_X, **(extra_x or {})}), str(records)]
    log(f"  produce {count:,} x {size} B -> {topic}: {shlex.join(cmd)}")
    cpu0 = b.cpu_seconds()
    with Profiler(b.proc.pid, profile, profile_name), Watch(b.bootstrap, topic, count, "produced"):
        wall, proc, client_cpu = timed_child(cmd, text=True)
    broker_cpu = b.cpu_seconds() - cpu0
    if proc.returncode != 0:
        raise SystemExit(f"kcat producer failed (rc {proc.returncode}): {proc.stderr[-2000:]}")
    low, high = high_watermark(b.bootstrap, topic)
    if (low, high) != (0, count):
        raise SystemExit(f"FAIL: {topic} holds offsets [{low}, {high}) after producing {count:,} records "
                         f"(kcat stderr: {proc.stderr[-2000:]})")
    payload = size * count
    res = {"topic": topic, "record_size": size, "records": count, "payload_bytes": payload,
           "seconds": wall, "records_per_s": count / wall, "mb_per_s": payload / wall / 1e6,
           "broker_cpu_seconds": broker_cpu, "client_cpu_seconds": client_cpu,
           "broker_mb_per_cpu_s": payload / 1e6 / broker_cpu if broker_cpu else None,
           "verified_high_watermark": high, "command": shlex.join(cmd)}
    log(f"    {count:,} records in {wall:.3f} s = {res['records_per_s']:,.0f} records/s, "
        f"{res['mb_per_s']:,.1f} MB/s (broker CPU {broker_cpu:.2f} s, kcat CPU {client_cpu:.2f} s); "
        f"high watermark {high:,} verified")
    return res


def run_consume_kcat(b: BrokerProcess, topic: str, size: int, count: int,
                     profile: Path | None = None, profile_name: str = "", *,
                     bootstrap: str | None = None, extra_x: dict | None = None) -> dict:
    cmd = [KCAT, "-b", bootstrap or b.bootstrap, "-C", "-t", topic, "-p", "0", "-o", "beginning", "-e",
           "-f", "", *xargs({**CONSUME_X, **(extra_x or {})})]
    log(f"  consume {count:,} x {size} B <- {topic} with kcat: {shlex.join(cmd)}")
    cpu0 = b.cpu_seconds()
    with Profiler(b.proc.pid, profile, profile_name):
        wall, proc, client_cpu = timed_child(cmd, text=True)
    broker_cpu = b.cpu_seconds() - cpu0
    m = re.search(r"Reached end of topic \S+ \[0\] at offset (\d+)", proc.stderr)
    if proc.returncode != 0 or not m or int(m.group(1)) != count or proc.stdout:
        raise SystemExit(f"FAIL: kcat consumer (rc {proc.returncode}) did not read exactly {count:,} "
                         f"records: {proc.stderr[-2000:]}")
    payload = size * count
    res = {"client": "kcat", "topic": topic, "record_size": size, "records": count,
           "payload_bytes": payload, "seconds": wall, "records_per_s": count / wall,
           "mb_per_s": payload / wall / 1e6, "broker_cpu_seconds": broker_cpu,
           "broker_mb_per_cpu_s": payload / 1e6 / broker_cpu if broker_cpu else None,
           "client_cpu_seconds": client_cpu, "verified_end_offset": int(m.group(1)),
           "command": shlex.join(cmd)}
    log(f"    {count:,} records in {wall:.3f} s = {res['records_per_s']:,.0f} records/s, "
        f"{res['mb_per_s']:,.1f} MB/s (broker CPU {broker_cpu:.2f} s, kcat CPU {client_cpu:.2f} s); "
        f"end offset {count:,} verified")
    return res


PYCLIENT_CODE = r"""
import json, sys, time
from confluent_kafka import Consumer, TopicPartition
bootstrap, topic, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
conf = json.loads(sys.argv[4])
t0 = time.perf_counter()
c = Consumer({"bootstrap.servers": bootstrap, "group.id": "strata-bench-consume",
              "enable.auto.commit": False, "enable.auto.offset.store": False, **conf})
c.assign([TopicPartition(topic, 0, 0)])
n = nbytes = 0
last = t0
while n < count:
    msgs = c.consume(num_messages=min(100000, count - n), timeout=1.0)  # waits for a full batch
    for m in msgs:
        if m.error():
            continue
        n += 1
        nbytes += len(m.value())
    now = time.perf_counter()
    if now - last >= 1.0:
        last = now
        print(f"progress {n}", flush=True)
    if now - t0 > 300:
        break
t1 = time.perf_counter()
c.close()
print(json.dumps({"records": n, "bytes": nbytes, "seconds": t1 - t0}), flush=True)
"""


def run_consume_pyclient(b: BrokerProcess, topic: str, size: int, count: int) -> dict:
    cmd = [sys.executable, "-c", PYCLIENT_CODE, b.bootstrap, topic, str(count), json.dumps(CONSUME_X)]
    shown = "python -c '<confluent-kafka consume(num_messages=100000) loop>' " + shlex.join(cmd[3:])
    log(f"  consume {count:,} x {size} B <- {topic} with confluent-kafka: {shown}")
    cpu0 = b.cpu_seconds()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
    result = None
    for line in proc.stdout:
        if line.startswith("progress "):
            log(f"    consumed: {int(line.split()[1]):,}/{count:,} records")
        elif line.startswith("{"):
            result = json.loads(line)
    proc.wait()
    broker_cpu = b.cpu_seconds() - cpu0
    if not result or result["records"] != count or result["bytes"] != count * size:
        raise SystemExit(f"FAIL: confluent-kafka consumer read {result} instead of {count:,} records")
    wall = result["seconds"]
    res = {"client": "confluent-kafka", "topic": topic, "record_size": size, "records": count,
           "payload_bytes": count * size, "seconds": wall, "records_per_s": count / wall,
           "mb_per_s": count * size / wall / 1e6, "broker_cpu_seconds": broker_cpu,
           "command": shown}
    log(f"    {count:,} records in {wall:.3f} s = {res['records_per_s']:,.0f} records/s, "
        f"{res['mb_per_s']:,.1f} MB/s")
    return res


def run_sendfile(path: Path) -> dict:
    cmd = [sys.executable, str(BENCH / "sendfile_baseline.py"), str(path)]
    log(f"  baseline: {shlex.join(cmd)}")
    res = sendfile_baseline.measure(str(path))
    res["command"] = shlex.join(cmd)
    log(f"    {res['bytes']:,} bytes in {res['seconds']:.3f} s = {res['mb_per_s']:,.1f} MB/s")
    return res


def run_latency(b: BrokerProcess, work_dir: Path, cfg: dict, profile: Path | None, linger_ms: int,
                rate: int = LATENCY_RATE, topic: str | None = None, create=create_topic) -> dict:
    """bench/latency.py at ``rate`` records/s (also used by bench/latency_sweep.py and
    bench/kafka_peer.py, whose ``create`` also waits for the topic's leader: a consumer that
    starts before another broker knows its new topic fetches seconds late)."""
    topic = topic or f"bench-latency-linger{linger_ms}"
    create(b.bootstrap, topic)
    total_seconds = cfg["latency_warmup_seconds"] + cfg["latency_seconds"]
    count = int(rate * total_seconds)
    warm = int(rate * cfg["latency_warmup_seconds"])
    out = work_dir / "latency.bin"
    script = str(BENCH / "latency.py")
    ccmd = [sys.executable, script, "consume", "--bootstrap", b.bootstrap, "--topic", topic,
            "--count", str(count), "--out", str(out)]
    pcmd = [sys.executable, script, "produce", "--bootstrap", b.bootstrap, "--topic", topic,
            "--rate", str(rate), "--seconds", str(total_seconds), "--linger-ms", str(linger_ms)]
    log(f"  latency consumer: {shlex.join(ccmd)}")
    cons = subprocess.Popen(ccmd, stdout=subprocess.PIPE, text=True)
    line = cons.stdout.readline()
    if line.strip() != "ready":
        raise SystemExit(f"latency consumer did not start: {line!r}")
    log(f"  latency producer: {shlex.join(pcmd)}")
    cpu0 = b.cpu_seconds()
    prof_name = f"latency-linger{linger_ms}" + ("" if rate == LATENCY_RATE else f"-{rate}")
    with Profiler(b.proc.pid, profile, prof_name):
        prod = subprocess.Popen(pcmd, stdout=subprocess.PIPE, text=True)
        pres = drain_json(prod)
        if prod.returncode != 0 or not pres:  # the consumer would wait out its timeout for records never sent
            cons.terminate()
        cres = drain_json(cons)
    broker_cpu = b.cpu_seconds() - cpu0
    if prod.returncode != 0 or not pres or pres["undelivered"] or pres["failure_count"]:
        raise SystemExit(f"FAIL: latency producer: {pres}")
    if cons.returncode != 0 or not cres or cres["received"] != count:
        raise SystemExit(f"FAIL: latency consumer: {cres}")
    import numpy as np

    lat = np.fromfile(out, dtype="<i8")[warm:] / 1e6  # ms, warm-up excluded
    pct = np.percentile(lat, [50, 99, 99.9])
    res = {"rate_target": rate, "rate_achieved": pres["rate"], "records": count,
           "warmup_records_excluded": warm, "measured_records": int(lat.size),
           "linger_ms": linger_ms, "producer": f"confluent-kafka, acks=1, linger.ms={linger_ms}", "consumer":
           "confluent-kafka poll(), fetch.wait.max.ms=100, fetch.min.bytes=1",
           "p50_ms": float(pct[0]), "p99_ms": float(pct[1]), "p999_ms": float(pct[2]),
           "max_ms": float(lat.max()), "mean_ms": float(lat.mean()), "broker_cpu_seconds": broker_cpu,
           "command_consumer": shlex.join(ccmd), "command_producer": shlex.join(pcmd)}
    log(f"    {res['measured_records']:,} records at {pres['rate']:,.0f}/s: p50 {res['p50_ms']:.2f} ms, "
        f"p99 {res['p99_ms']:.2f} ms, p99.9 {res['p999_ms']:.2f} ms, max {res['max_ms']:.2f} ms")
    return res


# ---------------------------------------------------------------------------
# report

def median_run(runs: list[dict], key: str) -> dict:
    """The run whose ``key`` is the median (upper median for even counts)."""
    ordered = sorted(runs, key=lambda r: r[key])
    return ordered[len(ordered) // 2]


def fmt_rate(x: float) -> str:
    return f"{x:,.0f}"


def drain_json(proc: subprocess.Popen) -> dict | None:
    """Wait for a bench child process; its last JSON line is the result, other lines are logged."""
    result = None
    for line in proc.stdout:
        if line.startswith("{"):
            result = json.loads(line)
        else:
            log(line.rstrip())
    proc.wait()
    return result


def write_section(md_path: Path, name: str, section: str) -> None:
    """Put ``section`` (which starts and ends with the ``<!-- NAME:start/end -->`` markers)
    in place of the old one in the report, or append it; the rest stays as it is."""
    start, end = f"<!-- {name}:start -->", f"<!-- {name}:end -->"
    old = md_path.read_text() if md_path.exists() else ""
    pattern = re.compile(re.escape(start) + r".*?" + re.escape(end), re.DOTALL)
    if pattern.search(old):
        new = pattern.sub(lambda _m: section, old)
    else:
        new = old.rstrip("\n") + ("\n\n" if old else "") + section + "\n"
    md_path.write_text(new)


REPORT_TITLE = "# Strata benchmarks"
#: the section bench/run_all.py writes; it stays at the top of the report
SUMMARY = "summary"
#: this benchmark's own section
FOUNDATION = "foundation"


def place_section(md_path: Path, name: str, section: str) -> None:
    """Put this benchmark's ``section`` (markers included) in place of its old one; a report
    without it gets it after the run_all summary, or under the title. Everything else in the
    report, hand-written analysis included, stays as it is."""
    old = md_path.read_text() if md_path.exists() else ""
    if f"<!-- {name}:start -->" in old:
        write_section(md_path, name, section)
        return
    end = f"<!-- {SUMMARY}:end -->"
    if end in old:
        i = old.index(end) + len(end)
    elif old.startswith(REPORT_TITLE):
        i = len(REPORT_TITLE)
    else:
        old, i = REPORT_TITLE + "\n" + old, len(REPORT_TITLE)
    md_path.write_text(old[:i].rstrip("\n") + "\n\n" + section + "\n\n" + old[i:].lstrip("\n"))


def write_reports(data: dict, md_path: Path) -> None:
    json_path = md_path.with_suffix(".json")
    json_path.write_text(json.dumps(data, indent=2) + "\n")
    m = data["machine"]
    L: list[str] = []
    L.append("## Foundation: produce, consume, latency (`bench/foundation.py`)")
    L.append("")
    L.append("Generated by `bench/foundation.py`; every figure in this part comes from the run described here "
             "and is also in [`benchmarks.json`](benchmarks.json). Re-run with the same command to "
             "refresh. Do not edit by hand.")
    L.append("")
    L.append(f"- **Command:** `{data['command']}` (mode: {data['mode']}; each produce/consume/baseline "
             f"figure is the median of {data['repeats']} run(s), all runs are in the JSON)")
    L.append(f"- **Date:** {data['date']}")
    L.append(f"- **Machine:** {m['nproc']} CPUs ({m['cpu_model']}), {m['memory_gib']} GiB RAM, "
             f"Linux {m['kernel']}, Python {m['python']}, kcat {m['kcat']} (librdkafka "
             f"{m['kcat_librdkafka']}), confluent-kafka {m['confluent_kafka'].get('confluent_kafka')} "
             f"(librdkafka {m['confluent_kafka'].get('librdkafka')}); data dir on "
             f"{(m['data_dir_filesystem'] or {}).get('device')} "
             f"({(m['data_dir_filesystem'] or {}).get('type')})")
    L.append(f"- **Broker:** `{data['broker']['command']}` (one Python process, asyncio). "
             "**The broker and the load generators share the same "
             f"{m['nproc']} cores**, so every figure includes client CPU competing with the broker.")
    pw = data.get("prewarm") or {}
    if pw.get("gib"):
        L.append(f"- **Memory pre-warm:** before measuring, {pw['gib']:g} GiB were written and deleted through "
                 f"the page cache (`{pw['command']}`, {pw['seconds']:.1f} s: {pw['dd_output']}). On this VM "
                 "the first touch of a guest memory page is several times slower than later touches, "
                 "which otherwise turns every figure (and dd) into noise; see `prewarm_memory` in "
                 "`bench/foundation.py`.")
    L.append("- MB/s is 10^6 bytes of record values per second (record overhead and headers not counted).")
    L.append("")

    L.append("### Targets")
    L.append("")
    L.append("| target | required | measured | met |")
    L.append("| --- | --- | --- | --- |")
    for t in data["targets"]:
        req = (f"≤ {t['required']:g} ms" if t["unit"].startswith("ms") else
               f"≥ {t['required']:.0%}" if t["unit"] == "ratio" else f"≥ {fmt_rate(t['required'])} records/s")
        got = (f"{t['measured']:.2f} ms" if t["unit"].startswith("ms") else
               f"{t['measured']:.0%}" if t["unit"] == "ratio" else f"{fmt_rate(t['measured'])} records/s")
        L.append(f"| {t['name']} | {req} | {got} | {'**yes**' if t['met'] else '**NO**'} |")
    L.append("")
    missed = [t for t in data["targets"] if not t["met"]]
    if missed:
        L.append("**Missed:** " + "; ".join(f"{t['name']} ({t['measured']:.4g} vs {t['required']:g})"
                                          for t in missed) + ". See the notes at the end for where "
                 "the time goes.")
    else:
        L.append("All targets met in this run.")
    L.append("")

    L.append("### 1. Produce (one partition, acks=1, kcat/librdkafka, linger.ms=5, batch.size=1 MiB)")
    L.append("")
    L.append("kcat reads a pre-generated file of newline-separated records (`-l`; the record value is "
             "the line without its newline) and exits once every record is acknowledged; the time "
             "is from starting kcat to its exit (connection and metadata included). Afterwards "
             "ListOffsets must show exactly the expected number of records or the run fails. "
             "Baseline: `dd if=/dev/zero bs=1M` writing the same number of bytes (rounded up to "
             "1 MiB) into the page cache on the same file system, no fsync (dd's own timing). "
             "`sync` runs before each measured write.")
    L.append("")
    L.append("| record | records | seconds | records/s | MB/s | dd MB/s (range) | ratio to dd | broker CPU s | "
             "broker MB per CPU-s | kcat CPU s |")
    L.append("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for w in data["produce"]:
        r = w["median"]
        L.append(f"| {human_size(w['record_size'])} | {r['records']:,} | {r['seconds']:.3f} | "
                 f"{fmt_rate(r['records_per_s'])} | {r['mb_per_s']:,.1f} | {w['dd_median']['mb_per_s']:,.1f} "
                 f"({min(d['mb_per_s'] for d in w['dd_runs']):,.0f}–{max(d['mb_per_s'] for d in w['dd_runs']):,.0f}) | "
                 f"{w['ratio_to_dd']:.0%} | {r['broker_cpu_seconds']:.2f} | {r['broker_mb_per_cpu_s']:,.0f} | "
                 f"{r['client_cpu_seconds']:.2f} |")
    L.append("")
    L.append("Commands (median run of each size, and its baseline):")
    L.append("")
    L.append("```")
    for w in data["produce"]:
        L.append(w["median"]["command"])
        L.append(w["dd_median"]["command"])
    L.append("```")
    L.append("")

    c = data["consume"]
    L.append("### 2. Consume from the page cache (one partition)")
    L.append("")
    L.append(f"Reads back, from offset 0 to the end, the topics written in section 1 (still in the page "
             f"cache). Client: **{c['client']}** — both kcat (`-C -e -f ''`, which prints nothing per "
             f"record; it must report reaching the end offset) and a confluent-kafka "
             f"`consume(num_messages=100000)` loop were measured on the 100 B topic in this run "
             f"({fmt_rate(c['client_comparison']['kcat'])} vs "
             f"{fmt_rate(c['client_comparison']['confluent-kafka'])} records/s) and the faster is used. "
             "Time is from starting the client to its exit (connection and metadata included). "
             "Consumer settings: " + ", ".join(f"`{k}={v}`" for k, v in CONSUME_X.items()) + ". "
             "Baseline, at every record size (the target is for 16 KiB): `os.sendfile` of the topic's "
             "own `.log` segment file (more bytes than the record values: record and batch headers, "
             "about 10% at 100 B) in one go to a Python process on 127.0.0.1 that `recv_into`s and "
             "discards, measured in the same run; the ratio is record-value MB/s over file MB/s.")
    L.append("")
    L.append("| record | records | seconds | records/s | MB/s | baseline | baseline MB/s | ratio | broker CPU s |")
    L.append("| --- | ---: | ---: | ---: | ---: | --- | ---: | ---: | ---: |")
    for w in c["runs"]:
        r = w["median"]
        base = w.get("sendfile_median")
        L.append(f"| {human_size(w['record_size'])} | {r['records']:,} | {r['seconds']:.3f} | "
                 f"{fmt_rate(r['records_per_s'])} | {r['mb_per_s']:,.1f} | "
                 + (f"sendfile | {base['mb_per_s']:,.1f} | {w['ratio_to_sendfile']:.0%} | "
                    if base else "none (target is absolute) | — | — | ")
                 + f"{r['broker_cpu_seconds']:.2f} |")
    L.append("")
    L.append(f"Client overhead: kcat on an empty topic (start, metadata, first fetch, exit) took "
             f"{c['empty_topic_seconds']:.3f} s; it is included in every consume time above.")
    L.append("")
    L.append("Commands:")
    L.append("")
    L.append("```")
    for w in c["runs"]:
        L.append(w["median"]["command"])
        if w.get("sendfile_median"):
            L.append(w["sendfile_median"]["command"])
    L.append(c["pyclient"]["command"])
    L.append("```")
    L.append("")

    lts = data["latency"]
    L.append("### 3. Produce-to-consume latency at 5,000 records/s")
    L.append("")
    L.append(f"A confluent-kafka producer (acks=1) paced at {LATENCY_RATE:,} records/s with 100-byte records "
             "carrying `time.time_ns()` taken at `produce()`; " + lts[0]["consumer"] + " in another "
             "process records `time.time_ns()` when `poll()` returns the record. Same machine, same "
             "clock. Measured twice, with producer `linger.ms=1` (the figure held against the target) "
             "and `linger.ms=0` (one Produce request per record, which multiplies the broker's request "
             f"rate). The first {lts[0]['warmup_records_excluded']:,} records of each run (warm-up) are "
             "excluded. No baseline: the target is absolute.")
    L.append("")
    L.append("| producer linger.ms | achieved rate | records | p50 ms | p99 ms | p99.9 ms | max ms | mean ms | "
             "broker CPU s (busy %) |")
    L.append("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for lt in lts:
        secs = lt["records"] / lt["rate_achieved"]
        L.append(f"| {lt['linger_ms']} | {lt['rate_achieved']:,.0f}/s | {lt['measured_records']:,} | "
                 f"{lt['p50_ms']:.2f} | {lt['p99_ms']:.2f} | {lt['p999_ms']:.2f} | {lt['max_ms']:.2f} | "
                 f"{lt['mean_ms']:.2f} | {lt['broker_cpu_seconds']:.2f} ({lt['broker_cpu_seconds'] / secs:.0%}) |")
    L.append("")
    L.append("```")
    for lt in lts:
        L.append(lt["command_consumer"])
        L.append(lt["command_producer"])
    L.append("```")
    L.append("")
    if data.get("notes"):
        L.append("### Notes")
        L.append("")
        for n in data["notes"]:
            L.append(f"- {n}")
        L.append("")
    place_section(md_path, FOUNDATION, f"<!-- {FOUNDATION}:start -->\n" + "\n".join(L).strip("\n")
                  + f"\n<!-- {FOUNDATION}:end -->")
    log(f"wrote {md_path} and {json_path}")


# ---------------------------------------------------------------------------

def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="everything smaller (a ~1 minute smoke test)")
    ap.add_argument("--out", default=str(REPO / "docs" / "benchmarks.md"),
                    help="markdown report; the JSON goes next to it (default docs/benchmarks.md)")
    ap.add_argument("--work-dir", default="/tmp",
                    help="where the temporary broker data dir, record files and dd file go "
                         "(must be a real disk, not tmpfs; default /tmp)")
    ap.add_argument("--profile", metavar="DIR", default=None,
                    help="py-spy record the broker during produce/consume/latency into DIR (collapsed stacks)")
    ap.add_argument("--prewarm-gib", type=float, default=None,
                    help="GiB written and deleted through the page cache before measuring "
                         "(default 12, --quick 1; 0 disables)")
    ap.add_argument("--keep", action="store_true", help="keep the temporary data dir")
    args = ap.parse_args()

    cfg = QUICK if args.quick else FULL
    command = "python bench/foundation.py" + (" --quick" if args.quick else "")
    if Path(args.out).resolve() != (REPO / "docs" / "benchmarks.md"):
        command += f" --out {args.out}"
    work = Path(tempfile.mkdtemp(prefix="strata-bench-", dir=args.work_dir))
    profile = Path(args.profile).resolve() if args.profile else None
    if profile:
        profile.mkdir(parents=True, exist_ok=True)
    machine = machine_info(work)
    if machine["data_dir_filesystem"] and machine["data_dir_filesystem"]["type"] in ("tmpfs", "ramfs"):
        raise SystemExit(f"{work} is on {machine['data_dir_filesystem']['type']}; use --work-dir on a real disk")
    log(f"work dir {work} ({machine['data_dir_filesystem']}); machine: {machine['nproc']} CPUs "
        f"{machine['cpu_model']}, {machine['memory_gib']} GiB")
    data: dict = {"command": command, "mode": "quick" if args.quick else "full", "repeats": cfg["repeats"],
                  "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
                  "machine": machine, "notes": []}

    files = {}
    for size, count in cfg["produce"]:
        files[size] = work / f"records-{size}.txt"
        generate_records(files[size], size, count)

    data["prewarm"] = prewarm_memory(work, args.prewarm_gib if args.prewarm_gib is not None
                                     else cfg["prewarm_gib"])

    broker = BrokerProcess(work / "data", work / "broker.log")
    data["broker"] = {"command": shlex.join(broker.cmd)}
    started = time.monotonic()
    try:
        broker.start()
        data["broker"]["command"] = shlex.join(broker.cmd)
        # warm up: connections, metadata, topic creation paths
        create_topic(broker.bootstrap, "bench-empty")

        # 1. produce
        log("== 1. produce (kcat, acks=1, linger.ms=5, batch.size=1048576) vs dd")
        data["produce"] = []
        first_topic = {}
        for size, count in cfg["produce"]:
            runs, dds = [], []
            for rep in range(cfg["repeats"]):
                topic = f"bench-p{size}-r{rep}"
                prof = profile if rep == 0 else None  # profile the first repeat only
                runs.append(run_produce(broker, topic, files[size], size, count, prof, f"produce-{size}"))
                first_topic.setdefault(size, topic)
                if rep > 0:  # keep only the first copy (read back in section 2); bounds memory use
                    delete_topic(broker.bootstrap, topic)
                log(f"  baseline: dd {size * count:,} bytes")
                dds.append(run_dd(work, size * count))
                log(f"    dd: {dds[-1]['bytes']:,} bytes in {dds[-1]['seconds']:.3f} s = "
                    f"{dds[-1]['mb_per_s']:,.1f} MB/s")
            med, dmed = median_run(runs, "records_per_s"), median_run(dds, "mb_per_s")
            data["produce"].append({"record_size": size, "runs": runs, "dd_runs": dds, "median": med,
                                    "dd_median": dmed, "ratio_to_dd": med["mb_per_s"] / dmed["mb_per_s"]})
            log(f"  produce {size} B median: {fmt_rate(med['records_per_s'])} records/s, "
                f"{med['mb_per_s']:,.1f} MB/s = {med['mb_per_s'] / dmed['mb_per_s']:.0%} of dd")

        # 2. consume
        log("== 2. consume from the page cache")
        s100, n100 = cfg["produce"][0]
        kc = run_consume_kcat(broker, first_topic[s100], s100, n100)
        pc = run_consume_pyclient(broker, first_topic[s100], s100, n100)
        best = "kcat" if kc["records_per_s"] >= pc["records_per_s"] else "confluent-kafka"
        log(f"  faster client: {best}")
        empty_seconds, _, _ = timed_child([KCAT, "-b", broker.bootstrap, "-C", "-t", "bench-empty", "-p",
                                           "0", "-o", "beginning", "-e", "-f", "", *xargs(CONSUME_X)],
                                          text=True)
        consume = {"client": best, "client_comparison": {"kcat": kc["records_per_s"],
                                                         "confluent-kafka": pc["records_per_s"]},
                   "client_comparison_records": n100, "pyclient": pc, "kcat_first": kc,
                   "empty_topic_seconds": empty_seconds, "runs": []}
        for size, count in cfg["produce"]:
            topic = first_topic[size]
            runs, sends = [], []
            for rep in range(cfg["repeats"]):
                prof_name = f"consume-{size}" if (profile and rep == 0) else ""
                if best == "kcat":
                    runs.append(run_consume_kcat(broker, topic, size, count, profile if prof_name else None,
                                                 prof_name))
                else:
                    runs.append(run_consume_pyclient(broker, topic, size, count))
                # plain sendfile of the topic's own segment, at every size (the target is for 16 KiB)
                seg = broker.data_dir / "logs" / f"{topic}-0" / f"{0:020d}.log"
                sends.append(run_sendfile(seg))
            w = {"record_size": size, "runs": runs, "median": median_run(runs, "records_per_s")}
            if sends:
                w["sendfile_runs"] = sends
                w["sendfile_median"] = median_run(sends, "mb_per_s")
                w["ratio_to_sendfile"] = w["median"]["mb_per_s"] / w["sendfile_median"]["mb_per_s"]
            consume["runs"].append(w)
            log(f"  consume {size} B median: {fmt_rate(w['median']['records_per_s'])} records/s, "
                f"{w['median']['mb_per_s']:,.1f} MB/s"
                + (f" = {w['ratio_to_sendfile']:.0%} of sendfile" if sends else ""))
        data["consume"] = consume

        # 3. latency
        log(f"== 3. produce-to-consume latency at {LATENCY_RATE:,} records/s for "
            f"{cfg['latency_seconds']:g} s (+{cfg['latency_warmup_seconds']:g} s warm-up)")
        data["latency"] = [run_latency(broker, work, cfg, profile, linger) for linger in (1, 0)]
        data["broker"]["rss_mib_at_end"] = round(broker.rss_mib(), 1)
    finally:
        rc = broker.stop()
        data.setdefault("broker", {})["exit_code"] = rc
        if rc not in (0, None):
            log(f"WARNING: broker exited with {rc}; log at {broker.log_path}")
        if not args.keep and rc == 0:
            shutil.rmtree(work, ignore_errors=True)
        else:
            log(f"kept {work}")
    data["total_seconds"] = time.monotonic() - started

    p100 = next(w for w in data["produce"] if w["record_size"] == 100)
    p1k = next(w for w in data["produce"] if w["record_size"] == 1024)
    c100 = next(w for w in data["consume"]["runs"] if w["record_size"] == 100)
    c16k = next(w for w in data["consume"]["runs"] if w["record_size"] == 16384)
    measured = {
        "produce_100": p100["median"]["records_per_s"],
        "produce_1024_vs_dd": p1k["ratio_to_dd"],
        "consume_100": c100["median"]["records_per_s"],
        "consume_16384_vs_sendfile": c16k["ratio_to_sendfile"],
        "latency_p99_ms": data["latency"][0]["p99_ms"],
        "latency_p99_ms_linger0": data["latency"][1]["p99_ms"],
    }
    data["targets"] = []
    for key, (name, unit, req) in TARGETS.items():
        got = measured[key]
        met = got <= req if unit.startswith("ms") else got >= req
        data["targets"].append({"id": key, "name": name, "unit": unit, "required": req,
                                "measured": got, "met": met})
    # How far the client alone lets produce go on this machine: kcat's own CPU per payload byte.
    ncpu = os.cpu_count() or 1
    for w in data["produce"]:
        r = w["median"]
        if r["client_cpu_seconds"] > 0:
            client_bound = r["payload_bytes"] / 1e6 / r["client_cpu_seconds"] * ncpu
            data["notes"].append(
                f"Produce {human_size(w['record_size'])}: kcat alone used {r['client_cpu_seconds']:.2f} CPU-s "
                f"and the broker {r['broker_cpu_seconds']:.2f} CPU-s for {r['payload_bytes'] / 1e6:,.0f} MB. "
                f"Even with a broker that cost nothing, kcat on all {ncpu} cores would top out near "
                f"{client_bound:,.0f} MB/s = {client_bound / w['dd_median']['mb_per_s']:.0%} of dd; the "
                f"broker alone processes {r['broker_mb_per_cpu_s']:,.0f} MB per CPU-second.")
    for lt in data["latency"]:
        busy = lt["broker_cpu_seconds"] / (lt["records"] / lt["rate_achieved"])
        if busy > 0.9:
            data["notes"].append(
                f"Latency with linger.ms={lt['linger_ms']}: the broker's single event-loop thread was "
                f"{busy:.0%} busy at 5,000 records/s (one Produce request per record plus a Fetch "
                "response per append), so it is at saturation and its tail latency swings widely from "
                "run to run on this 2-core machine; treat this row's p99 as unstable.")
    if args.quick:
        data["notes"].append("`--quick` run: sizes are 10x smaller than the full run, so fixed costs "
                             "(client start-up, metadata) weigh more; use the full run for figures.")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    write_reports(data, out)
    for t in data["targets"]:
        log(f"target {t['name']}: {t['measured']:.4g} (need {t['required']:g}) "
            f"{'met' if t['met'] else 'MISSED'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
