"""What one broker costs as its partition count grows: the baseline of issue 33.

    nice python bench/metadata_scale.py [--sizes 10 100 1000 5000] [--with-10k]
        [--step-timeout 600] [--idle-s 20] [--out-json F] [--out-md F]

For each size, a fresh single broker (``python -m service up``, default ``file://``
store inside its data dir) is started and measured:

* **create**: topics of 100 partitions (one topic of N below 100), ten topics per
  CreateTopics request (1,000 partitions, the per-request cap), replication factor
  1; wall time in total and per 1,000 partitions, and of the last request (whether
  a create slows down as the cluster grows).
* **idle** over ``--idle-s`` seconds after a 3 s settle: the broker's CPU (utime +
  stime from /proc, % of one core), RSS, open file descriptors, and the requests
  and bytes it sent to the bucket (see *Counting the bucket* below).
* **Metadata**: 20 full Metadata requests (confluent-kafka ``list_topics()``, all
  topics) after one to connect; p50 and p99 (of 20 samples, p99 is the slowest).
* **produce**: a light fixed load, ``--rate`` records/s of 100 B for
  ``--produce-s`` seconds, round-robin over every partition (acks=all,
  linger.ms=1), after one warm-up record per partition; p50/p99 from ``produce()``
  to its delivery report.
* **stop / restart**: SIGTERM until the process exits (clean stop); start again
  and time until it logs "listening on" and until a full Metadata answer lists
  every partition with a leader; then a second clean stop.

A step that fails (e.g. a create refused for lack of file descriptors: the broker
needs about three per partition, against ``ulimit -n``) ends its size likewise, with the
error in the report.

Every step has a time limit (``--step-timeout``, for the create of one size and
for each later step): a step that overruns is reported as "did not finish in
N s" and the size's remaining steps are skipped (the broker is killed). 10,000
partitions runs only with ``--with-10k`` since today it may not finish.

Counting the bucket: the broker runs under this script's ``--counted-broker``
mode, which wraps the methods of ``remote_tier.filesystem.FileSystemObjectStore``
in the broker process (before ``service`` starts; no broker code changes) and
counts requests and bytes per operation and per key (``cluster/metadata.json``,
``cluster/controller-lease``; all other keys together as ``data``), written to a JSON file once a second. A
``list`` counts one request per 1,000 keys returned (S3's ListObjectsV2 page).
These are the requests the broker would send to S3 with the same code paths.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
sys.path.insert(0, str(BENCH))

from foundation import BrokerProcess, free_port, log  # noqa: E402

PER_TOPIC = 100
TOPICS_PER_REQUEST = 10
COUNTS_ENV = "STRATA_BENCH_STORE_COUNTS"
LIST_PAGE = 1000


class DidNotFinish(Exception):
    """A step overran its time limit."""

    def __init__(self, step: str, limit_s: float) -> None:
        super().__init__(f"{step}: did not finish in {limit_s:.0f} s")
        self.step = step


# ---------------------------------------------------------------------------
# the counted broker (runs inside the broker process)


def _area(key: str) -> str:
    """``cluster/<name>`` (the metadata document, the controller lease) or ``data``."""
    if key.startswith("cluster/"):
        return "cluster/" + key.split("/")[1]
    return "data"


def _install_store_counters(path: Path) -> None:
    """Wrap FileSystemObjectStore's requests so every call is counted with its bytes."""
    from remote_tier.filesystem import FileSystemObjectStore

    counts: dict[str, list[int]] = {}
    lock = threading.Lock()

    def add(op: str, key: str, requests: int, nbytes: int) -> None:
        with lock:
            entry = counts.setdefault(f"{_area(key)} {op}", [0, 0])
            entry[0] += requests
            entry[1] += nbytes

    def wrap(name: str, size_of: Callable[[tuple, object], int]) -> None:
        original = getattr(FileSystemObjectStore, name)

        def counted(self, key, *args, **kwargs):  # type: ignore[no-untyped-def]
            result = original(self, key, *args, **kwargs)
            add(name, key, 1, size_of(args, result))
            return result

        setattr(FileSystemObjectStore, name, counted)

    wrap("get", lambda args, result: len(result))
    wrap("get_with_etag", lambda args, result: len(result[0]))
    wrap("head", lambda args, result: 0)
    wrap("delete", lambda args, result: 0)
    wrap("put", lambda args, result: len(args[0]))
    wrap("put_if_absent", lambda args, result: len(args[0]))
    wrap("put_if_match", lambda args, result: len(args[0]))
    wrap("put_file", lambda args, result: Path(args[0]).stat().st_size)
    original_list = FileSystemObjectStore.list

    def counted_list(self, prefix):  # type: ignore[no-untyped-def]
        listed = 0
        try:
            for info in original_list(self, prefix):
                listed += 1
                yield info
        finally:
            add("list", prefix, 1 + listed // LIST_PAGE, 0)

    FileSystemObjectStore.list = counted_list  # type: ignore[method-assign]

    def dump() -> None:
        last = None
        while True:
            with lock:
                text = json.dumps(counts, sort_keys=True)
            if text != last:
                tmp = path.with_suffix(".tmp")
                tmp.write_text(text)
                os.replace(tmp, path)
                last = text
            time.sleep(1)

    threading.Thread(target=dump, name="bench-store-counts", daemon=True).start()


def run_counted_broker(argv: list[str]) -> None:
    """``python bench/metadata_scale.py --counted-broker ARGS``: ``python -m service ARGS``
    with the bucket counted."""
    import runpy

    sys.path.insert(0, str(REPO))
    _install_store_counters(Path(os.environ[COUNTS_ENV]))
    sys.argv = ["service", *argv]
    runpy.run_module("service", run_name="__main__", alter_sys=True)


# ---------------------------------------------------------------------------
# the broker, from outside


class Broker(BrokerProcess):
    """One counted broker process with its data dir; figures read from /proc (CPU and
    RSS as :class:`foundation.BrokerProcess` reads them)."""

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir
        self.port = free_port()
        self.bootstrap = f"127.0.0.1:{self.port}"
        self.counts_path = data_dir.parent / f"{data_dir.name}.counts.json"
        self.log_path = data_dir.parent / f"{data_dir.name}.log"
        self.cmd = [
            sys.executable, str(Path(__file__).resolve()), "--counted-broker", "up",
            "--data-dir", str(data_dir), "--listen", self.bootstrap, "--http", "off",
        ]
        self.proc: subprocess.Popen | None = None
        self.started_at = 0.0

    def start(self, limit_s: float) -> float:
        """Start; seconds until the broker logs that it listens."""
        self.data_dir.mkdir(parents=True, exist_ok=True)
        env = dict(os.environ, **{COUNTS_ENV: str(self.counts_path)})
        self._log = open(self.log_path, "a")
        self.started_at = started = time.monotonic()
        self.proc = subprocess.Popen(self.cmd, cwd=REPO, env=env, stdout=self._log,
                                     stderr=subprocess.STDOUT)
        offset = self.log_path.stat().st_size
        while time.monotonic() - started < limit_s:
            if re.search(r"listening on 127\.0\.0\.1", self._log_since(offset)):
                return time.monotonic() - started
            if self.proc.poll() is not None:
                raise SystemExit(f"broker exited with {self.proc.returncode}; see {self.log_path}")
            time.sleep(0.05)
        raise DidNotFinish("start", limit_s)

    def _log_since(self, offset: int) -> str:
        with open(self.log_path) as f:
            f.seek(offset)
            return f.read()

    def stop(self, limit_s: float) -> float:
        """SIGTERM; seconds until the process exited (DidNotFinish after ``limit_s``)."""
        started = time.monotonic()
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=limit_s)
        except subprocess.TimeoutExpired:
            self.kill()
            raise DidNotFinish("clean stop", limit_s) from None
        self._log.close()
        return time.monotonic() - started

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def open_fds(self) -> int:
        return len(os.listdir(f"/proc/{self.proc.pid}/fd"))

    def store_counts(self) -> dict[str, list[int]]:
        try:
            return json.loads(self.counts_path.read_text())
        except (OSError, ValueError):
            return {}

    def metadata_document_bytes(self) -> int:
        doc = self.data_dir / "bucket" / "cluster" / "metadata.json"
        return doc.stat().st_size if doc.exists() else 0


# ---------------------------------------------------------------------------
# the steps


def topic_plan(partitions: int) -> list[tuple[str, int]]:
    if partitions <= PER_TOPIC:
        return [("scale-00000", partitions)]
    return [(f"scale-{t:05d}", PER_TOPIC) for t in range(partitions // PER_TOPIC)]


def create_topics(bootstrap: str, plan: list[tuple[str, int]], limit_s: float) -> dict:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    started = time.monotonic()
    last_request_s = 0.0
    created = 0
    for i in range(0, len(plan), TOPICS_PER_REQUEST):
        remaining = limit_s - (time.monotonic() - started)
        if remaining <= 0:
            raise DidNotFinish(f"create (after {created:,} partitions)", limit_s)
        batch = plan[i:i + TOPICS_PER_REQUEST]
        request_started = time.monotonic()
        futures = admin.create_topics(
            [NewTopic(name, num_partitions=n, replication_factor=1) for name, n in batch],
            request_timeout=max(1.0, remaining), operation_timeout=max(1.0, remaining))
        try:
            for future in futures.values():
                future.result(timeout=max(1.0, remaining) + 5)
        except Exception as exc:
            if time.monotonic() - started >= limit_s:
                raise DidNotFinish(f"create (after {created:,} partitions)", limit_s) from exc
            raise
        last_request_s = time.monotonic() - request_started
        created += sum(n for _, n in batch)
        if len(plan) > TOPICS_PER_REQUEST:
            log(f"  created {created:,} partitions in {time.monotonic() - started:.1f} s "
                f"(last request {last_request_s:.1f} s)")
    total = time.monotonic() - started
    return {"create_s": total, "create_s_per_1000": total * 1000 / created,
            "last_request_s": last_request_s}


def percentile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, max(0, round(q / 100 * len(ordered) + 0.5) - 1))]


def idle(broker: Broker, seconds: float) -> dict:
    time.sleep(3)
    cpu0, counts0, t0 = broker.cpu_seconds(), broker.store_counts(), time.monotonic()
    time.sleep(seconds)
    time.sleep(1.1)  # the counts file is written once a second
    cpu1, counts1, t1 = broker.cpu_seconds(), broker.store_counts(), time.monotonic()
    window = t1 - t0
    delta = {k: [v[0] - counts0.get(k, [0, 0])[0], v[1] - counts0.get(k, [0, 0])[1]]
             for k, v in counts1.items()}
    delta = {k: v for k, v in delta.items() if v[0]}
    return {
        "idle_cpu_pct": 100 * (cpu1 - cpu0) / window,
        "rss_mib": broker.rss_mib(),
        "open_fds": broker.open_fds(),
        "bucket_requests_per_s": sum(v[0] for v in delta.values()) / window,
        "bucket_read_bytes_per_s": sum(v[1] for k, v in delta.items()
                                       if k.split()[1] in ("get", "get_with_etag")) / window,
        "bucket_by_op": {k: {"requests_per_s": v[0] / window, "bytes_per_s": v[1] / window}
                         for k, v in sorted(delta.items())},
    }


def metadata_latency(bootstrap: str, partitions: int, calls: int = 20) -> dict:
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.list_topics(timeout=60)  # connect first: the samples time the request only
    samples = []
    for _ in range(calls):
        started = time.monotonic()
        md = admin.list_topics(timeout=60)
        samples.append((time.monotonic() - started) * 1000)
    seen = sum(len(t.partitions) for name, t in md.topics.items() if name.startswith("scale-"))
    if seen != partitions:
        raise SystemExit(f"Metadata listed {seen} partitions, expected {partitions}")
    return {"metadata_p50_ms": statistics.median(samples), "metadata_p99_ms": percentile(samples, 99)}


def wait_all_led(bootstrap: str, partitions: int, limit_s: float) -> None:
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    started = time.monotonic()
    while time.monotonic() - started < limit_s:
        try:
            md = admin.list_topics(timeout=max(1.0, limit_s - (time.monotonic() - started)))
        except Exception:  # noqa: BLE001 - not serving yet
            time.sleep(0.1)
            continue
        led = sum(1 for name, t in md.topics.items() if name.startswith("scale-")
                  for p in t.partitions.values() if p.leader >= 0 and p.error is None)
        if led == partitions:
            return
        time.sleep(0.1)
    raise DidNotFinish("restart (every partition led)", limit_s)


def produce_load(bootstrap: str, plan: list[tuple[str, int]], rate: int, seconds: float,
                 limit_s: float) -> dict:
    from confluent_kafka import Producer

    targets = [(name, p) for name, n in plan for p in range(n)]
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 1,
                         "message.timeout.ms": int(limit_s * 1000)})
    latencies: list[float] = []
    errors: list[str] = []

    def report(started: float):  # type: ignore[no-untyped-def]
        def on_delivery(err, msg):  # type: ignore[no-untyped-def]
            if err is not None:
                errors.append(str(err))
            else:
                latencies.append((time.monotonic() - started) * 1000)
        return on_delivery

    payload = b"x" * 100
    for name, p in targets:  # warm-up: metadata, connections, every partition's first append
        producer.produce(name, payload, partition=p)
        producer.poll(0)
    if producer.flush(limit_s) > 0:
        raise DidNotFinish("produce warm-up", limit_s)
    latencies.clear()
    total = int(rate * seconds)
    started = time.monotonic()
    for i in range(total):
        due = started + i / rate
        while (now := time.monotonic()) < due:
            producer.poll(min(0.005, due - now))
        name, p = targets[i % len(targets)]
        producer.produce(name, payload, partition=p, on_delivery=report(time.monotonic()))
        producer.poll(0)
    if producer.flush(limit_s) > 0:
        raise DidNotFinish("produce", limit_s)
    if errors:
        raise SystemExit(f"{len(errors)} produce errors, first: {errors[0]}")
    return {"produce_p50_ms": statistics.median(latencies),
            "produce_p99_ms": percentile(latencies, 99), "produce_records": len(latencies)}


def measure(partitions: int, work: Path, args: argparse.Namespace) -> dict:
    """Every figure at one size, on a fresh broker."""
    result: dict = {"partitions": partitions}
    broker = Broker(work / f"broker-{partitions}")
    plan = topic_plan(partitions)
    limit = args.step_timeout
    try:
        log(f"{partitions:,} partitions: starting a fresh broker")
        result["first_start_s"] = broker.start(limit)
        log(f"{partitions:,} partitions: creating {len(plan)} topic(s)")
        result.update(create_topics(broker.bootstrap, plan, limit))
        result["metadata_document_bytes"] = broker.metadata_document_bytes()
        log(f"  created in {result['create_s']:.1f} s ({result['create_s_per_1000']:.1f} s per 1,000); "
            f"metadata document {result['metadata_document_bytes']:,} B; idle {args.idle_s:.0f} s")
        result.update(idle(broker, args.idle_s))
        log(f"  idle CPU {result['idle_cpu_pct']:.1f}%, RSS {result['rss_mib']:.0f} MiB, "
            f"{result['open_fds']:,} fds, bucket {result['bucket_requests_per_s']:.1f} req/s "
            f"{result['bucket_read_bytes_per_s']:,.0f} B/s read")
        result.update(metadata_latency(broker.bootstrap, partitions))
        log(f"  Metadata p50 {result['metadata_p50_ms']:.1f} ms p99 {result['metadata_p99_ms']:.1f} ms")
        result.update(produce_load(broker.bootstrap, plan, args.rate, args.produce_s, limit))
        log(f"  produce p50 {result['produce_p50_ms']:.1f} ms p99 {result['produce_p99_ms']:.1f} ms")
        result["clean_stop_s"] = broker.stop(limit)
        log(f"  clean stop {result['clean_stop_s']:.1f} s; restarting")
        result["restart_listening_s"] = broker.start(limit)
        wait_all_led(broker.bootstrap, partitions, limit)
        result["restart_serving_s"] = time.monotonic() - broker.started_at
        result["second_stop_s"] = broker.stop(limit)
        log(f"  restart: listening {result['restart_listening_s']:.1f} s, every partition led "
            f"{result['restart_serving_s']:.1f} s; stop {result['second_stop_s']:.1f} s")
    except DidNotFinish as exc:
        log(f"  {exc}")
        result["did_not_finish"] = str(exc)
    except Exception as exc:  # noqa: BLE001 - a refused step ends this size, not the sweep
        log(f"  failed: {exc}")
        result["did_not_finish"] = f"failed: {exc}"
    finally:
        broker.kill()
    return result


# ---------------------------------------------------------------------------
# the report


COLUMNS = [
    ("partitions", "partitions", "{:,}"),
    ("create_s", "create", "{:.1f} s"),
    ("create_s_per_1000", "per 1,000", "{:.1f} s"),
    ("idle_cpu_pct", "idle CPU", "{:.1f}%"),
    ("rss_mib", "RSS", "{:.0f} MiB"),
    ("open_fds", "open fds", "{:,}"),
    ("metadata_p50_ms", "Metadata p50", "{:.1f} ms"),
    ("metadata_p99_ms", "Metadata p99", "{:.1f} ms"),
    ("produce_p99_ms", "produce p99", "{:.1f} ms"),
    ("clean_stop_s", "clean stop", "{:.1f} s"),
    ("restart_listening_s", "restart (listening)", "{:.1f} s"),
    ("restart_serving_s", "restart (all led)", "{:.1f} s"),
    ("bucket_requests_per_s", "bucket req/s idle", "{:.1f}"),
    ("bucket_read_bytes_per_s", "bucket B/s read idle", "{:,.0f}"),
    ("metadata_document_bytes", "document (B per change per other broker)", "{:,}"),
]


def markdown_table(results: list[dict]) -> str:
    lines = ["| " + " | ".join(title for _, title, _ in COLUMNS) + " |",
             "| " + " | ".join("---:" for _ in COLUMNS) + " |"]
    for r in results:
        cells = [fmt.format(r[key]) if key in r else "" for key, _, fmt in COLUMNS]
        if "did_not_finish" in r:
            cells[-1] += f" — {r['did_not_finish']}"
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "--counted-broker":
        run_counted_broker(sys.argv[2:])
        return 0
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10, 100, 1000, 5000])
    parser.add_argument("--with-10k", action="store_true", help="also 10,000 partitions")
    parser.add_argument("--step-timeout", type=float, default=600)
    parser.add_argument("--idle-s", type=float, default=20)
    parser.add_argument("--rate", type=int, default=500, help="records/s of the produce load")
    parser.add_argument("--produce-s", type=float, default=10)
    parser.add_argument("--work-dir", type=Path, default=None)
    parser.add_argument("--out-json", type=Path, default=None)
    parser.add_argument("--out-md", type=Path, default=None)
    args = parser.parse_args()
    sizes = args.sizes + ([10_000] if args.with_10k and 10_000 not in args.sizes else [])
    started = time.time()
    results: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="metadata-scale-", dir=args.work_dir) as tmp:
        for n in sizes:
            results.append(measure(n, Path(tmp), args))
            write_report(args, started, results)
    print(markdown_table(results))
    return 0


def write_report(args: argparse.Namespace, started: float, results: list[dict]) -> None:
    """The JSON and the table so far (rewritten after every size: a later size that
    hangs the machine loses nothing)."""
    report = {
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "started_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started)),
        "duration_s": time.time() - started,
        "machine": {"nproc": os.cpu_count(), "cpu": _cpu_model(), "loadavg": os.getloadavg(),
                    "nofile": resource.getrlimit(resource.RLIMIT_NOFILE)[0]},
        "settings": {"per_topic": PER_TOPIC, "topics_per_request": TOPICS_PER_REQUEST,
                     "idle_s": args.idle_s, "rate": args.rate, "produce_s": args.produce_s,
                     "step_timeout_s": args.step_timeout},
        "results": results,
    }
    if args.out_json:
        args.out_json.write_text(json.dumps(report, indent=1) + "\n")
    if args.out_md:
        args.out_md.write_text(markdown_table(results) + "\n")


def _cpu_model() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return "unknown"


if __name__ == "__main__":
    sys.exit(main())
