"""What one broker costs as its partition count grows: the baseline of issue 33.

    nice python bench/metadata_scale.py [--sizes 10 100 1000 5000] [--with-10k]
        [--cluster-sizes 10 100 1000] [--failover-runs 1] [--step-timeout 600] [--idle-s 20] [--out-json F] [--out-md F]

For each size, a fresh single broker (``python -m service up``, default ``file://``
store inside its data dir) is started and measured:

* **create**: topics of 100 partitions (one topic of N below 100), ten topics per
  CreateTopics request (1,000 partitions, the per-request cap), replication factor
  1; wall time in total and per 1,000 partitions, and of the last request (whether
  a create slows down as the cluster grows).
* **idle** over ``--idle-s`` seconds after a ``--settle-s`` settle (3 s): the broker's CPU (utime +
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

With ``--cluster-sizes``, three brokers on one bucket (node 1 first, so it holds the
controller lease) and topics with replication factor 3, per size: each broker's idle CPU
and bucket traffic, the bytes of the metadata document each broker reads per change
(``--changes`` topic config changes, one a second so that none coalesce), full Metadata
latency, and the time from kill -9 of the broker (not the controller) that leads the most
partitions until the controller committed its fencing (every leadership it held moved), until
every new leadership was in effect on every live broker (the partition takes writes: the
figure; since stop 53 a broker taking more than 100 partitions at once has them in effect from
its apply on, each taken by the first request naming it if its slice of the loop has not come
yet; since stop 55 only the survivors that took a leadership count: one that took none has
only followings to change, and its line's "leaderships" moment was when its apply's first slice
ran; the old figure is kept as ``failover_any_survivor_s``), and until every follower change
was too, from the lines the brokers log at those moments (``--failover-runs`` times, the victim restarted and back in every ISR in between,
then ``--quiet-s`` of steady state: its return changed every registration, and the controller
plans each broker's fencing only once the metadata is still; a death right after a large
change is computed in its path, as before).
Only once those lines are in does a Metadata poll every 0.5 s of the survivors check that
every partition is led by a live broker in every broker's own answer: polling during the
failover cost the survivors part of the CPU it was timing (10,000 partitions every 0.1 s, as
the bench did first, a sixth of it; every 0.5 s, about 0.1 s of a survivor's interpreter).

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
import contextlib
import json
import os
import re
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
sys.path.insert(0, str(BENCH))
sys.path.insert(0, str(REPO))  # the controller package reads the bucket's metadata (snapshot size)

from foundation import BrokerProcess, free_port, log  # noqa: E402

PER_TOPIC = 100
TOPICS_PER_REQUEST = 10
COUNTS_ENV = "STRATA_BENCH_STORE_COUNTS"
LIST_PAGE = 1000
#: between timed metadata changes: longer than the brokers' 500 ms poll, so every change
#: is read on its own (faster changes coalesce into one read)
CHANGE_GAP_S = 1.0


class DidNotFinish(Exception):
    """A step overran its time limit."""

    def __init__(self, step: str, limit_s: float) -> None:
        super().__init__(f"{step}: did not finish in {limit_s:g} s")
        self.step = step


# ---------------------------------------------------------------------------
# the counted broker (runs inside the broker process)


def _area(key: str) -> str:
    """``cluster/<name>`` (``metadata.json``, the head; ``metadata``, the log and its
    snapshots; the controller lease) or ``data``."""
    if key.startswith("cluster/"):
        return "cluster/" + key.split("/")[1]
    return "data"


def _install_store_counters(path: Path) -> None:
    """Wrap FileSystemObjectStore's requests so every call is counted with its bytes."""
    from remote_tier.filesystem import FileSystemObjectStore

    counts: dict[str, list[int]] = {}
    lock = threading.Lock()
    nested = threading.local()  # get_with_etag calls get: count the outer request only

    def add(op: str, key: str, requests: int, nbytes: int) -> None:
        with lock:
            entry = counts.setdefault(f"{_area(key)} {op}", [0, 0])
            entry[0] += requests
            entry[1] += nbytes

    def wrap(name: str, size_of: Callable[[tuple, object], int]) -> None:
        original = getattr(FileSystemObjectStore, name)

        def counted(self, key, *args, **kwargs):  # type: ignore[no-untyped-def]
            if getattr(nested, "inside", False):
                return original(self, key, *args, **kwargs)
            nested.inside = True
            try:
                result = original(self, key, *args, **kwargs)
            except Exception:
                add(name, key, 1, 0)  # a 404 (the metadata log's idle probe) is a request too
                raise
            finally:
                nested.inside = False
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

    def __init__(self, data_dir: Path, extra: tuple[str, ...] = ()) -> None:
        self.data_dir = data_dir
        self.port = free_port()
        self.bootstrap = f"127.0.0.1:{self.port}"
        self.counts_path = data_dir.parent / f"{data_dir.name}.counts.json"
        self.log_path = data_dir.parent / f"{data_dir.name}.log"
        self.cmd = [
            sys.executable, str(Path(__file__).resolve()), "--counted-broker", "up",
            "--data-dir", str(data_dir), "--listen", self.bootstrap, "--http", "off", *extra,
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
        return self.metadata_document_bytes_in(self.data_dir / "bucket")

    @staticmethod
    def metadata_document_bytes_at(work: Path, partitions: int) -> int:
        return Broker.metadata_document_bytes_in(work / f"cluster-{partitions}-bucket")

    @staticmethod
    def metadata_document_bytes_in(bucket: Path) -> int:
        """The bytes a snapshot of the cluster's metadata would have now (the whole image,
        gzipped, as the controller writes it; what a broker reads once at start)."""
        import gzip

        from controller.commit import current_document
        from remote_tier.filesystem import FileSystemObjectStore

        document = current_document(FileSystemObjectStore(bucket))
        if document is None:
            return 0
        return len(gzip.compress(json.dumps(document, separators=(",", ":")).encode(), 6))


# ---------------------------------------------------------------------------
# the steps


def topic_plan(partitions: int) -> list[tuple[str, int]]:
    if partitions <= PER_TOPIC:
        return [("scale-00000", partitions)]
    return [(f"scale-{t:05d}", PER_TOPIC) for t in range(partitions // PER_TOPIC)]


def create_topics(bootstrap: str, plan: list[tuple[str, int]], limit_s: float,
                  replication_factor: int = 1, per_request: int = TOPICS_PER_REQUEST) -> dict:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    started = time.monotonic()
    last_request_s = 0.0
    created = 0
    for i in range(0, len(plan), per_request):
        remaining = limit_s - (time.monotonic() - started)
        if remaining <= 0:
            raise DidNotFinish(f"create (after {created:,} partitions)", limit_s)
        batch = plan[i:i + per_request]
        request_started = time.monotonic()
        futures = admin.create_topics(
            [NewTopic(name, num_partitions=n, replication_factor=replication_factor)
             for name, n in batch],
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
        if len(plan) > per_request:
            log(f"  created {created:,} partitions in {time.monotonic() - started:.1f} s "
                f"(last request {last_request_s:.1f} s)")
    total = time.monotonic() - started
    return {"create_s": total, "create_s_per_1000": total * 1000 / created,
            "last_request_s": last_request_s}


def percentile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, max(0, round(q / 100 * len(ordered) + 0.5) - 1))]


def bucket_delta(before: dict, after: dict, window: float) -> dict:
    """Requests and bytes per second between two snapshots of a broker's bucket counts."""
    delta = {k: [v[0] - before.get(k, [0, 0])[0], v[1] - before.get(k, [0, 0])[1]]
             for k, v in after.items()}
    delta = {k: v for k, v in delta.items() if v[0]}
    return {
        "bucket_requests_per_s": sum(v[0] for v in delta.values()) / window,
        "bucket_read_bytes_per_s": sum(v[1] for k, v in delta.items()
                                       if k.split()[1] in ("get", "get_with_etag")) / window,
        "bucket_by_op": {k: {"requests_per_s": v[0] / window, "bytes_per_s": v[1] / window}
                         for k, v in sorted(delta.items())},
    }


def idle_many(brokers: list[Broker], seconds: float, settle_s: float = 3.0) -> list[dict]:
    """Each broker's CPU, memory, descriptors and bucket traffic over ``seconds`` of idle,
    after ``settle_s`` (``--settle-s``: past 60 s, the first checkpoint writes and tiering
    rounds of the partitions just created fall before the window)."""
    time.sleep(settle_s)
    before = [(b.cpu_seconds(), b.store_counts()) for b in brokers]
    t0 = time.monotonic()
    time.sleep(seconds)
    time.sleep(1.1)  # the counts file is written once a second
    window = time.monotonic() - t0
    return [
        {"idle_cpu_pct": 100 * (b.cpu_seconds() - cpu0) / window, "rss_mib": b.rss_mib(),
         "open_fds": b.open_fds(), **bucket_delta(counts0, b.store_counts(), window)}
        for b, (cpu0, counts0) in zip(brokers, before, strict=True)
    ]


def idle(broker: Broker, seconds: float, settle_s: float = 3.0) -> dict:
    return idle_many([broker], seconds, settle_s)[0]


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


def wait_all_led(bootstrap: str, partitions: int, limit_s: float,
                 dead: frozenset[int] = frozenset(), every_s: float = 0.1) -> None:
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
                  for p in t.partitions.values()
                  if p.leader >= 0 and p.leader not in dead and p.error is None)
        if led == partitions:
            return
        time.sleep(every_s)
    raise DidNotFinish("every partition led" + (f" by a broker but {sorted(dead)}" if dead else ""),
                       limit_s)


def led_in_view(bootstrap: str, dead: frozenset[int]) -> int:
    """Partitions of the scale topics that this one broker's own Metadata answer (its applied
    metadata, not the cluster's) shows led by a live broker."""
    from tests.service.kafka_wire import WireConnection, example_request

    with WireConnection(bootstrap, timeout=60) as conn:
        md = conn.call(example_request(3, 12, topics=None, allow_auto_topic_creation=False,
                                       include_topic_authorized_operations=False))
    return sum(1 for t in md.topics if t.name and t.name.startswith("scale-") for p in t.partitions
               if p.error_code == 0 and p.leader_id >= 0 and p.leader_id not in dead)


def wait_every_view_led(bootstraps: list[str], partitions: int, limit_s: float,
                        dead: frozenset[int], since: float, every_s: float = 0.05) -> float:
    """Seconds from ``since`` until every broker in ``bootstraps`` has applied metadata in
    which every partition is led by a live broker: the new leaders know they lead."""
    pending = list(bootstraps)
    while pending:
        if time.monotonic() - since > limit_s:
            raise DidNotFinish("every broker's metadata shows every partition led", limit_s)
        pending = [b for b in pending if led_in_view(b, dead) != partitions]
        if pending:
            time.sleep(every_s)
    return time.monotonic() - since


_LOG_TIME = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d),(\d{3}) ", re.M)


def _logged(broker: Broker, offset: int, pattern: str) -> list[tuple[float, re.Match]]:
    """The lines after ``offset`` of ``broker``'s log that match ``pattern``, each with its
    wall-clock time (the broker logs local time to the millisecond)."""
    found = []
    for line in broker._log_since(offset).splitlines():
        match, stamp = re.search(pattern, line), _LOG_TIME.match(line)
        if match is not None and stamp is not None:
            seconds = time.mktime(time.strptime(stamp.group(1), "%Y-%m-%d %H:%M:%S"))
            found.append((seconds + int(stamp.group(2)) / 1000, match))
    return found


def fencing_committed_at(controller: Broker, offset: int, victim: int) -> tuple[float, int]:
    """When the controller committed the fencing of ``victim``, and its metadata revision."""
    lines = _fencing_lines(controller, offset, victim)
    if not lines:
        raise SystemExit(f"{controller.log_path}: the controller logged no fencing of broker {victim}")
    at, match = lines[0]
    return at, int(match.group(1))


def fencing_applied_at(broker: Broker, offset: int, revision: int) -> tuple[float, float, int] | None:
    """When the leaderships ``broker`` took from the fencing (metadata ``revision``) were in
    effect, when its leader and follower changes all were (the broker applies the leaderships
    first and logs both), and how many leaderships it took; None when it took nothing (it
    hosts none of what moved)."""
    pattern = (r"metadata revision (\d+) in effect after (\d+) ms(?: \(its leaderships after (\d+) ms\))?"
               r": leader of (\d+) more")
    for at, match in _logged(broker, offset, pattern):
        if int(match.group(1)) >= revision:
            total = int(match.group(2))
            leaders = total if match.group(3) is None else int(match.group(3))
            return at - (total - leaders) / 1000, at, int(match.group(4))
    return None


def _fencing_lines(controller: Broker, offset: int, victim: int) -> list[tuple[float, re.Match]]:
    """The controller's lines after ``offset`` saying it fenced ``victim`` (its revision)."""
    return _logged(controller, offset, rf"broker\(s\) \[[^]]*\b{victim}\b[^]]*\] fenced at metadata revision (\d+)")


def wait_for_lines(brokers: list[Broker], offsets: list[int], controller: Broker, victim: int,
                   limit_s: float) -> None:
    """Until the controller logged the fencing of ``victim`` and every broker in ``brokers``
    logged it in effect (at most 10 s: a broker that took nothing from it never does),
    reading only their log files: requests to the brokers (a Metadata of 10,000 partitions)
    would cost them CPU in the very failover being timed."""
    deadline = time.monotonic() + min(limit_s, 10.0)
    offset = offsets[brokers.index(controller)]
    while time.monotonic() < deadline:
        lines = _fencing_lines(controller, offset, victim)
        if lines:
            revision = int(lines[0][1].group(1))
            if all(fencing_applied_at(b, o, revision) is not None for b, o in zip(brokers, offsets, strict=True)):
                return
        time.sleep(0.05)


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
    with one_size(result, [broker], args):
        log(f"{partitions:,} partitions: starting a fresh broker")
        result["first_start_s"] = broker.start(limit)
        log(f"{partitions:,} partitions: creating {len(plan)} topic(s)")
        result.update(create_topics(broker.bootstrap, plan, limit))
        result["metadata_document_bytes"] = broker.metadata_document_bytes()
        log(f"  created in {result['create_s']:.1f} s ({result['create_s_per_1000']:.1f} s per 1,000); "
            f"metadata document {result['metadata_document_bytes']:,} B; idle {args.idle_s:.0f} s")
        result.update(idle(broker, args.idle_s, args.settle_s))
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
    return result


def wait_brokers(bootstrap: str, count: int, limit_s: float) -> None:
    """Until Metadata lists ``count`` brokers (it lists the unfenced ones only)."""
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    started = time.monotonic()
    while time.monotonic() - started < limit_s:
        if len(admin.list_topics(timeout=limit_s).brokers) >= count:
            return
        time.sleep(0.1)
    raise DidNotFinish(f"{count} brokers unfenced", limit_s)


def wait_isr_full(bootstrap: str, size: int, limit_s: float) -> None:
    """Until every partition's ISR has ``size`` replicas."""
    from confluent_kafka.admin import AdminClient

    deadline = time.monotonic() + limit_s
    while True:
        md = AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=60)
        short = sum(1 for name, t in md.topics.items() if name.startswith("scale-")
                    for p in t.partitions.values() if len(p.isrs) < size)
        if not short:
            return
        if time.monotonic() > deadline:
            raise DidNotFinish(f"full ISRs ({short:,} partitions still short)", limit_s)
        time.sleep(1)


def controller_of(bootstrap: str) -> int:
    from confluent_kafka.admin import AdminClient

    return AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=60).controller_id


def led_by(bootstrap: str, node_id: int) -> int:
    """How many partitions ``node_id`` leads now."""
    from confluent_kafka.admin import AdminClient

    md = AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=60)
    return sum(1 for name, t in md.topics.items() if name.startswith("scale-")
               for p in t.partitions.values() if p.leader == node_id)


def alter_configs(bootstrap: str, topic: str, changes: int, limit_s: float) -> None:
    """``changes`` committed metadata changes, one at a time (a topic config each)."""
    from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource

    admin = AdminClient({"bootstrap.servers": bootstrap})
    for i in range(changes):
        entry = ConfigEntry("retention.ms", str(86_400_000 + i),
                            incremental_operation=AlterConfigOpType.SET)
        resource = ConfigResource(ConfigResource.Type.TOPIC, topic, incremental_configs=[entry])
        for future in admin.incremental_alter_configs([resource]).values():
            future.result(timeout=limit_s)
        time.sleep(CHANGE_GAP_S)


def per_metadata_change(delta: dict, window: float, changes: int) -> dict:
    """Bytes and GETs of the cluster metadata per change: the head, the log's batches and
    snapshots (the lease's polls left out: they are idle traffic, counted under idle)."""
    reads = [v for k, v in delta["bucket_by_op"].items()
             if k.startswith("cluster/metadata") and k.split()[1] in ("get", "get_with_etag")]
    return {"read_bytes": sum(v["bytes_per_s"] for v in reads) * window / changes,
            "gets": sum(v["requests_per_s"] for v in reads) * window / changes,
            "bucket_by_op": delta["bucket_by_op"]}


def measure_cluster(partitions: int, work: Path, args: argparse.Namespace) -> dict:
    """Three brokers on one bucket, RF 3: idle traffic per broker, the bucket bytes each
    broker reads per metadata change, Metadata latency, and the time until every partition
    is led again after kill -9 of a broker that is not the controller."""
    size = 3
    result: dict = {"partitions": partitions, "brokers": size}
    store = (work / f"cluster-{partitions}-bucket").as_uri()
    brokers = [Broker(work / f"cluster-{partitions}-broker-{n}",
                      ("--node-id", str(n), "--object-store", store)) for n in range(1, size + 1)]
    plan = topic_plan(partitions)
    limit = args.step_timeout
    with one_size(result, brokers, args):
        log(f"{size} brokers, {partitions:,} partitions (RF {size}): starting")
        for b in brokers:  # the first holds the controller lease
            b.start(limit)
        wait_brokers(brokers[0].bootstrap, size, limit)
        result.update(create_topics(brokers[0].bootstrap, plan, limit, replication_factor=size,
                                    per_request=args.cluster_topics_per_request))
        result["metadata_document_bytes"] = brokers[0].metadata_document_bytes_at(work, partitions)
        log(f"  created in {result['create_s']:.1f} s; document {result['metadata_document_bytes']:,} B;"
            f" idle {args.idle_s:.0f} s")
        wait_isr_full(brokers[0].bootstrap, size, limit)  # the followers' ISR changes are done
        result["idle"] = idle_many(brokers, args.idle_s, args.settle_s)
        for n, r in enumerate(result["idle"], 1):
            log(f"  broker {n}: idle CPU {r['idle_cpu_pct']:.1f}%, RSS {r['rss_mib']:.0f} MiB, "
                f"bucket {r['bucket_requests_per_s']:.1f} req/s {r['bucket_read_bytes_per_s']:,.0f} B/s read")
        before = [b.store_counts() for b in brokers]
        started = time.monotonic()
        alter_configs(brokers[0].bootstrap, plan[0][0], args.changes, limit)
        time.sleep(1.1)  # the counts file
        window = time.monotonic() - started
        per_change = [bucket_delta(c0, b.store_counts(), window) for b, c0 in zip(brokers, before, strict=True)]
        result["per_change"] = [per_metadata_change(d, window, args.changes) for d in per_change]
        log("  per change, bytes of the metadata document read by each broker: "
            + ", ".join(f"{c['read_bytes']:,.0f}" for c in result["per_change"]))
        result.update(metadata_latency(brokers[0].bootstrap, partitions))
        log(f"  Metadata p50 {result['metadata_p50_ms']:.1f} ms p99 {result['metadata_p99_ms']:.1f} ms")
        runs = []
        victim: Broker | None = None
        for _ in range(args.failover_runs):
            if victim is not None:  # the last victim back, and in every ISR, before the next kill
                victim.start(limit)
                wait_brokers(brokers[0].bootstrap, size, limit)
                wait_isr_full(brokers[0].bootstrap, size, limit)
                time.sleep(args.quiet_s)  # a death in a steady cluster, not in its last one's wake
            survivor = next(b for b in brokers if b.proc is not None and b.proc.poll() is None)
            controller = controller_of(survivor.bootstrap)
            led = {n: led_by(survivor.bootstrap, n) for n in range(1, size + 1) if n != controller}
            victim_id = max(led, key=led.__getitem__)
            victim = brokers[victim_id - 1]
            asker = next(b for b in brokers if b is not victim)
            survivors = [b for b in brokers if b is not victim]
            offsets = [b.log_path.stat().st_size for b in survivors]
            killed, killed_wall = time.monotonic(), time.time()
            victim.kill()  # returns once the process is reaped: its kernel is done tearing it down
            reaped = time.monotonic() - killed
            # the brokers' own lines first, from their log files; then the gate: every partition
            # led in the asker's answer and in every survivor's own metadata (polled only now: a
            # Metadata of 10,000 partitions every 0.5 s cost a survivor ~0.1 s of its interpreter
            # during the failover it was timing)
            wait_for_lines(survivors, offsets, brokers[controller - 1], victim_id, limit)
            wait_all_led(asker.bootstrap, partitions, limit, dead=frozenset({victim_id}), every_s=0.5)
            polled = wait_every_view_led([b.bootstrap for b in survivors], partitions,
                                         limit, frozenset({victim_id}), killed, every_s=0.5)
            # the figures: when the controller committed the fencing, and when the last survivor
            # had its new leaderships (and followings) in effect (the lines each broker logs)
            at_controller = survivors.index(brokers[controller - 1])  # never the victim
            committed, revision = fencing_committed_at(survivors[at_controller], offsets[at_controller],
                                                       victim_id)
            applied = [at for b, off in zip(survivors, offsets, strict=True)
                       if (at := fencing_applied_at(b, off, revision)) is not None]
            if not applied:
                raise SystemExit(f"no survivor logged the fencing of broker {victim_id} in effect")
            # a survivor that took no leadership (it only follows the new leaders) has none to
            # put in effect: its line's "leaderships" moment is when its apply's first slice ran
            leading = [leaders for leaders, _, taken in applied if taken] or [a[0] for a in applied]
            every_view = max(leading) - killed_wall
            every_view_any = max(a[0] for a in applied) - killed_wall
            every_change = max(done for _, done, _ in applied) - killed_wall
            in_controller_view = committed - killed_wall
            runs.append({"victim": victim_id, "led_by_victim": led[victim_id],
                         "failover_s": every_view, "failover_all_s": every_change,
                         "failover_any_survivor_s": every_view_any, "victim_reaped_s": reaped,
                         "controller_view_s": in_controller_view,
                         "applied_s": [[a[0] - killed_wall, a[1] - killed_wall, a[2]] for a in applied],
                         "polled_s": polled})
            log(f"  kill -9 of broker {victim_id} (leader of {led[victim_id]:,}; the controller is "
                f"{controller}): fencing committed after {in_controller_view:.3f} s, every leadership in "
                f"effect after {every_view:.3f} s, every follower too after {every_change:.3f} s (seen by "
                f"a Metadata poll every 0.5 s: {polled:.2f} s); its process reaped after {reaped:.3f} s")
        result["failover_runs"] = runs
        result["led_by_victim"] = runs[-1]["led_by_victim"]
        result["failover_s"] = statistics.median(r["failover_s"] for r in runs)
        result["failover_max_s"] = max(r["failover_s"] for r in runs)
        result["failover_all_s"] = statistics.median(r["failover_all_s"] for r in runs)
        result["failover_any_survivor_s"] = statistics.median(r["failover_any_survivor_s"] for r in runs)
        result["victim_reaped_s"] = statistics.median(r["victim_reaped_s"] for r in runs)
        result["failover_controller_view_s"] = statistics.median(r["controller_view_s"] for r in runs)
    return result


@contextlib.contextmanager
def one_size(result: dict, brokers: list[Broker], args: argparse.Namespace) -> Iterator[None]:
    """The steps of one size: the first that overruns or is refused ends the size (its reason
    recorded in ``result``), never the sweep; the brokers are killed and their logs kept."""
    try:
        yield
    except DidNotFinish as exc:
        log(f"  {exc}")
        result["did_not_finish"] = str(exc)
    except Exception as exc:  # noqa: BLE001 - a refused step ends this size, not the sweep
        log(f"  failed: {exc}")
        result["did_not_finish"] = f"failed: {exc}"
    finally:
        for b in brokers:
            b.kill()
        keep_logs(args, brokers)


def keep_logs(args: argparse.Namespace, brokers: list[Broker]) -> None:
    """Copy the brokers' logs to ``--keep-logs`` (the work dir is removed at the end)."""
    if args.keep_logs:
        args.keep_logs.mkdir(parents=True, exist_ok=True)
        for b in brokers:
            shutil.copy(b.log_path, args.keep_logs / b.log_path.name)


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
    ("metadata_document_bytes", "snapshot (B, gzip)", "{:,}"),
]


def markdown_table(results: list[dict]) -> str:
    return "\n\n".join(filter(None, [
        single_table([r for r in results if "brokers" not in r]),
        cluster_table([r for r in results if "brokers" in r]),
    ]))


def cluster_table(results: list[dict]) -> str:
    if not results:
        return ""
    lines = ["| partitions (3 brokers, RF 3) | create | idle CPU per broker | bucket req/s idle per broker"
             " | bucket B/s read idle per broker | document bytes read per change per broker | Metadata p50"
             " | kill -9 to every leadership in effect (every live broker)"
             " | kill -9 to every follower change in effect too"
             " | kill -9 to the fencing committed by the controller |",
             "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for r in results:
        idle = r.get("idle", [])
        cells = [
            f"{r['partitions']:,}",
            f"{r['create_s']:.1f} s" if "create_s" in r else "",
            " / ".join(f"{i['idle_cpu_pct']:.1f}%" for i in idle),
            " / ".join(f"{i['bucket_requests_per_s']:.1f}" for i in idle),
            " / ".join(f"{i['bucket_read_bytes_per_s']:,.0f}" for i in idle),
            " / ".join(f"{c['read_bytes']:,.0f}" for c in r.get("per_change", [])),
            f"{r['metadata_p50_ms']:.1f} ms" if "metadata_p50_ms" in r else "",
            _failover_cell(r),
            f"{r['failover_all_s']:.3f} s median" if "failover_all_s" in r else "",
            f"{r['failover_controller_view_s']:.3f} s median" if "failover_controller_view_s" in r else "",
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _failover_cell(r: dict) -> str:
    if "failover_s" not in r:
        return r.get("did_not_finish", "")
    runs = r.get("failover_runs", [])
    if len(runs) > 1:
        return f"{r['failover_s']:.3f} s median, {r['failover_max_s']:.3f} s slowest of {len(runs)}"
    return f"{r['failover_s']:.3f} s"


def single_table(results: list[dict]) -> str:
    if not results:
        return ""
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
    parser.add_argument("--sizes", type=int, nargs="*", default=[10, 100, 1000, 5000])
    parser.add_argument("--with-10k", action="store_true", help="also 10,000 partitions")
    parser.add_argument("--step-timeout", type=float, default=600)
    parser.add_argument("--idle-s", type=float, default=20)
    parser.add_argument("--settle-s", type=float, default=3.0,
                        help="wait this long after the create (and full ISRs) before the idle window; "
                             "70 puts the first offset checkpoints of the new partitions before it")
    parser.add_argument("--rate", type=int, default=500, help="records/s of the produce load")
    parser.add_argument("--produce-s", type=float, default=10)
    parser.add_argument("--cluster-sizes", type=int, nargs="*", default=[],
                        help="also three brokers with RF 3 at these partition counts")
    parser.add_argument("--cluster-topics-per-request", type=int, default=TOPICS_PER_REQUEST,
                        help="topics of 100 partitions per CreateTopics request with three brokers")
    parser.add_argument("--quiet-s", type=float, default=15.0,
                        help="between kills, wait this long once the last victim is back in every ISR "
                             "(its return changes every partition's registration; a death then is "
                             "not one in a steady cluster)")
    parser.add_argument("--failover-runs", type=int, default=1,
                        help="kill -9 a broker this many times per cluster size (restarted between); "
                             "the table shows the median and the slowest")
    parser.add_argument("--changes", type=int, default=10,
                        help="metadata changes timed per cluster size (bucket bytes per change)")
    parser.add_argument("--work-dir", type=Path, default=None)
    parser.add_argument("--keep-logs", type=Path, default=None, metavar="DIR",
                        help="copy every broker's log here")
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
        for n in args.cluster_sizes:
            results.append(measure_cluster(n, Path(tmp), args))
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
                     "cluster_topics_per_request": args.cluster_topics_per_request,
                     "idle_s": args.idle_s, "settle_s": args.settle_s, "rate": args.rate, "produce_s": args.produce_s,
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
