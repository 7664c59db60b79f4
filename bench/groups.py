"""Strata consumer group benchmark: rebalance time and offset commit throughput.

    python bench/groups.py [--quick] [--out docs/benchmarks.md]

Starts its own single-node broker (bench/foundation.py's BrokerProcess, a
temporary data dir under --work-dir) and measures, all in one run:

(a) rebalance: 10 confluent-kafka consumers (one thread each) in one group on a
    10-partition topic; one member leaves (close() → LeaveGroup) and we time
    from the close() call until DescribeGroups shows the group Stable with 9
    members, and until the 9 survivors all hold their new assignment. A new
    member then joins (not timed) and the leave is repeated. Run with
    heartbeat.interval.ms=3000 (librdkafka's default: survivors learn of the
    rebalance from their next heartbeat) and 100.
(b) commits: 100 consumers (4 worker processes x 25 threads) on a 100-partition
    topic, each committing synchronously after every poll() (one record per
    poll); commits/s = records appended to __consumer_offsets per second.
    While they run, ``kcat -P`` of 100-byte records (foundation.py's produce
    workload) is timed and compared with the same run before the consumers
    started.

Writes its section of docs/benchmarks.md between ``<!-- groups:start -->`` and
``<!-- groups:end -->`` (foundation.py keeps it when it rewrites the rest) and
docs/benchmarks-groups.json. Every figure comes from this run.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import shlex
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

import foundation
from foundation import KCAT, BrokerProcess, log, machine_info

OFFSETS_TOPIC = "__consumer_offsets"
FULL = {"leaves": 5, "commit_members": 100, "commit_seconds": 20, "produce_records": 3_000_000,
        "data_records": 600_000}
QUICK = {"leaves": 2, "commit_members": 100, "commit_seconds": 6, "produce_records": 300_000,
         "data_records": 200_000}
WORKERS = 4
MARK_START, MARK_END = "<!-- groups:start -->", "<!-- groups:end -->"


# --------------------------------------------------------------------------- helpers


def create_topic(bootstrap: str, name: str, partitions: int) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    for fut in admin.create_topics([NewTopic(name, partitions, 1)], request_timeout=30).values():
        fut.result(timeout=30)


def describe(admin, group: str):
    return admin.describe_consumer_groups([group], request_timeout=10)[group].result(timeout=15)


def offsets_records(bootstrap: str) -> int:
    """Records in __consumer_offsets (sum of high watermarks)."""
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "strata-bench-hw"})
    try:
        md = c.list_topics(OFFSETS_TOPIC, timeout=10)
        total = 0
        for p in md.topics[OFFSETS_TOPIC].partitions:
            total += c.get_watermark_offsets(TopicPartition(OFFSETS_TOPIC, p), timeout=10,
                                             cached=False)[1]
        return total
    finally:
        c.close()


# --------------------------------------------------------------------------- (a) rebalance


class Member:
    """A confluent-kafka consumer polling in its own thread; records when it gets assignments."""

    def __init__(self, bootstrap: str, group: str, topic: str, heartbeat_ms: int) -> None:
        from confluent_kafka import Consumer

        self.assigned_at = 0.0
        self.partitions: set[int] = set()
        self.stop = threading.Event()
        self.consumer = Consumer({
            "bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False,
            "session.timeout.ms": 10_000, "heartbeat.interval.ms": heartbeat_ms,
            "auto.offset.reset": "latest"})
        self.consumer.subscribe([topic], on_assign=self._assigned, on_revoke=self._revoked)
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _assigned(self, _c, parts) -> None:
        self.partitions = {p.partition for p in parts}
        self.assigned_at = time.perf_counter()

    def _revoked(self, _c, _parts) -> None:
        self.partitions = set()

    def _run(self) -> None:
        while not self.stop.is_set():
            self.consumer.poll(0.05)

    def close(self) -> None:
        self.stop.set()
        self.thread.join()
        self.consumer.close()


def wait_stable(admin, group: str, members: int, timeout: float = 120) -> float:
    """Poll DescribeGroups until Stable with ``members``; the perf_counter when seen."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        d = describe(admin, group)
        if d.state.name == "STABLE" and len(d.members) == members:
            return time.perf_counter()
        time.sleep(0.005)
    raise SystemExit(f"group {group} not Stable with {members} members within {timeout} s")


def run_rebalance(b: BrokerProcess, heartbeat_ms: int, leaves: int) -> dict:
    from confluent_kafka.admin import AdminClient

    topic, group = f"bench-rebalance-{heartbeat_ms}", f"bench-rebalance-{heartbeat_ms}"
    create_topic(b.bootstrap, topic, 10)
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    members = [Member(b.bootstrap, group, topic, heartbeat_ms) for _ in range(10)]
    log(f"  heartbeat.interval.ms={heartbeat_ms}: waiting for 10 members to be Stable")
    wait_stable(admin, group, 10)
    to_stable, to_assigned = [], []
    try:
        for i in range(leaves):
            while not all(m.partitions for m in members):
                time.sleep(0.01)
            leaver = members.pop(0)
            for m in members:
                m.assigned_at = 0.0
            t0 = time.perf_counter()
            leaver.close()
            stable = wait_stable(admin, group, 9)
            while not all(m.assigned_at and m.partitions for m in members):
                time.sleep(0.001)
            assigned = max(m.assigned_at for m in members)
            to_stable.append((stable - t0) * 1000)
            to_assigned.append((assigned - t0) * 1000)
            log(f"    leave {i + 1}/{leaves}: Stable again after {to_stable[-1]:.0f} ms, "
                f"all 9 assigned after {to_assigned[-1]:.0f} ms")
            members.append(Member(b.bootstrap, group, topic, heartbeat_ms))
            wait_stable(admin, group, 10)
    finally:
        for m in members:
            m.close()
    return {"heartbeat_interval_ms": heartbeat_ms, "members": 10, "leaves": leaves,
            "to_stable_ms": to_stable, "to_all_assigned_ms": to_assigned,
            "median_to_stable_ms": statistics.median(to_stable),
            "max_to_stable_ms": max(to_stable),
            "median_to_all_assigned_ms": statistics.median(to_assigned)}


# --------------------------------------------------------------------------- (b) commits

WORKER_CODE = r"""
import sys, threading, time
from confluent_kafka import Consumer
bootstrap, group, topic, n, stop_file = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5]
import os
commits = [0] * n
errors = [0] * n
def run(i):
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False,
                  "auto.offset.reset": "earliest", "session.timeout.ms": 30000,
                  "queued.min.messages": 1000})
    c.subscribe([topic])
    while not os.path.exists(stop_file):
        msg = c.poll(0.5)
        if msg is None or msg.error():
            continue
        try:
            c.commit(message=msg, asynchronous=False)   # after every poll
            commits[i] += 1
        except Exception:
            errors[i] += 1
    c.close()
threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
for t in threads: t.start()
for t in threads: t.join()
print(sum(commits), sum(errors), flush=True)
"""


def start_committers(b: BrokerProcess, work: Path, members: int) -> tuple[list, Path]:
    stop_file = work / "stop-committers"
    stop_file.unlink(missing_ok=True)
    per = members // WORKERS
    procs = [subprocess.Popen([sys.executable, "-c", WORKER_CODE, b.bootstrap, "bench-commit",
                               "bench-commit-data", str(per), str(stop_file)],
                              stdout=subprocess.PIPE, text=True) for _ in range(WORKERS)]
    return procs, stop_file


def commit_rate(b: BrokerProcess, seconds: float) -> dict:
    r0, t0, c0 = offsets_records(b.bootstrap), time.perf_counter(), b.cpu_seconds()
    time.sleep(seconds)
    r1, t1, c1 = offsets_records(b.bootstrap), time.perf_counter(), b.cpu_seconds()
    return {"seconds": t1 - t0, "commits": r1 - r0, "commits_per_s": (r1 - r0) / (t1 - t0),
            "broker_cpu_busy": (c1 - c0) / (t1 - t0)}


def run_commits(b: BrokerProcess, work: Path, cfg: dict) -> dict:
    from confluent_kafka.admin import AdminClient

    members = cfg["commit_members"]
    records = work / "records-100.txt"
    foundation.generate_records(records, 100, max(cfg["produce_records"], cfg["data_records"]))
    log("  baseline: kcat produce of 100 B records with no consumers")
    alone = foundation.run_produce(b, "bench-groups-produce-alone", records, 100,
                                   cfg["produce_records"], None, "")
    create_topic(b.bootstrap, "bench-commit-data", 100)
    data = work / "records-data.txt"
    foundation.generate_records(data, 100, cfg["data_records"])
    log(f"  filling bench-commit-data (100 partitions) with {cfg['data_records']:,} records")
    subprocess.run([KCAT, "-b", b.bootstrap, "-P", "-t", "bench-commit-data", "-l",
                    *foundation.xargs(foundation.KCAT_PRODUCE_X), str(data)], check=True)
    log(f"  starting {members} committing consumers ({WORKERS} processes)")
    procs, stop_file = start_committers(b, work, members)
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    try:
        wait_stable(admin, "bench-commit", members, timeout=300)
        log(f"  group Stable with {members} members; measuring commits for {cfg['commit_seconds']} s")
        quiet = commit_rate(b, cfg["commit_seconds"])
        log(f"    {quiet['commits_per_s']:,.0f} commits/s (broker {quiet['broker_cpu_busy']:.0%} busy)")
        log("  kcat produce of 100 B records while the consumers commit")
        r0, t0 = offsets_records(b.bootstrap), time.perf_counter()
        loaded = foundation.run_produce(b, "bench-groups-produce-loaded", records, 100,
                                        cfg["produce_records"], None, "")
        during = (offsets_records(b.bootstrap) - r0) / (time.perf_counter() - t0)
        log(f"    commits/s during the produce run: {during:,.0f}")
        state = describe(admin, "bench-commit")
        still_stable = state.state.name == "STABLE" and len(state.members) == members
    finally:
        stop_file.touch()
        totals = [p.communicate(timeout=120)[0].split() for p in procs]
    commits, errors = sum(int(t[0]) for t in totals), sum(int(t[1]) for t in totals)
    ratio = loaded["records_per_s"] / alone["records_per_s"]
    log(f"  produce {alone['records_per_s']:,.0f} rec/s alone, {loaded['records_per_s']:,.0f} rec/s "
        f"with the commit load: ratio {ratio:.2f}")
    return {"members": members, "workers": WORKERS, "commits_quiet": quiet,
            "commits_per_s_during_produce": during, "client_commits": commits,
            "client_commit_errors": errors, "group_still_stable": still_stable,
            "produce_alone": alone, "produce_under_commit_load": loaded, "produce_ratio": ratio}


# --------------------------------------------------------------------------- report


def write_report(data: dict, md_path: Path) -> None:
    json_path = md_path.with_name("benchmarks-groups.json")
    json_path.write_text(json.dumps(data, indent=2) + "\n")
    m = data["machine"]
    c = data["commits"]
    lines = [
        MARK_START,
        "## Consumer groups (`bench/groups.py`)",
        "",
        (f"Command: `{data['command']}` — {data['date']}; {m['nproc']} CPUs {m['cpu_model']}, "
         f"{m['memory_gib']} GiB, Python {m['python']}, librdkafka {m['confluent_kafka'].get('librdkafka')}. "
         "Broker and clients share the cores. Raw figures: `docs/benchmarks-groups.json`."),
        "",
        ("**(a) Rebalance after a member leaves, 10 members** (confluent-kafka, range assignor, "
         "10 partitions; from `close()` of one member to DescribeGroups showing Stable with 9, and to "
         "all 9 survivors holding their new partitions):"),
        "",
        "| heartbeat.interval.ms | leaves | to Stable, median ms | to Stable, max ms | all assigned, median ms |",
        "| ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in data["rebalance"]:
        lines.append(f"| {r['heartbeat_interval_ms']} | {r['leaves']} | {r['median_to_stable_ms']:.0f} | "
                     f"{r['max_to_stable_ms']:.0f} | {r['median_to_all_assigned_ms']:.0f} |")
    lines += [
        "",
        ("The survivors learn of the rebalance from their next heartbeat, so the time is bounded "
         "below by the heartbeat interval; beyond it, the time goes to the eager protocol's round "
         "trips (revoke, JoinGroup of all 9, SyncGroup), not broken down further here."),
        "",
        (f"**(b) Offset commits, {c['members']} consumers** ({c['workers']} processes x "
         f"{c['members'] // c['workers']} threads, 100-partition topic, `commit(asynchronous=False)` "
         "after every `poll()`; counted as records appended to `__consumer_offsets`):"),
        "",
        "| measurement | value |",
        "| --- | ---: |",
        (f"| commits/s, consumers alone ({c['commits_quiet']['seconds']:.0f} s) | "
         f"{c['commits_quiet']['commits_per_s']:,.0f} |"),
        f"| broker CPU busy meanwhile | {c['commits_quiet']['broker_cpu_busy']:.0%} |",
        f"| commits/s while kcat produces | {c['commits_per_s_during_produce']:,.0f} |",
        f"| produce 100 B records/s, no consumers | {c['produce_alone']['records_per_s']:,.0f} |",
        (f"| produce 100 B records/s, with the commit load | "
         f"{c['produce_under_commit_load']['records_per_s']:,.0f} |"),
        f"| ratio | {c['produce_ratio']:.2f} |",
        f"| commit errors seen by clients | {c['client_commit_errors']} of {c['client_commits'] + c['client_commit_errors']:,} |",
        f"| group still Stable with {c['members']} members at the end | {c['group_still_stable']} |",
        "",
        (f"Produce: `{c['produce_alone']['command']}` ({c['produce_alone']['records']:,} records, "
         "high watermark verified)."),
        MARK_END,
    ]
    section = "\n".join(lines)
    foundation.write_section(md_path, "groups", section)
    log(f"wrote {md_path} (groups section) and {json_path}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="fewer repeats, shorter windows")
    ap.add_argument("--out", default=str(REPO / "docs" / "benchmarks.md"))
    ap.add_argument("--work-dir", default="/tmp")
    args = ap.parse_args()
    cfg = QUICK if args.quick else FULL
    work = Path(tempfile.mkdtemp(prefix="strata-bench-groups-", dir=args.work_dir))
    data: dict = {"command": "python bench/groups.py" + (" --quick" if args.quick else ""),
                  "date": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
                  "machine": machine_info(work)}
    broker = BrokerProcess(work / "data", work / "broker.log")
    broker.cmd += ["--set", "offsets.topic.num.partitions=50"]
    data["broker"] = {"command": shlex.join(broker.cmd)}
    try:
        broker.start()
        log("== (a) time from a member leaving to Stable again, 10 members")
        data["rebalance"] = [run_rebalance(broker, hb, cfg["leaves"]) for hb in (3000, 100)]
        log("== (b) offset commits/s with 100 consumers committing after every poll")
        data["commits"] = run_commits(broker, work, cfg)
    finally:
        broker.stop()
    write_report(data, Path(args.out))
    subprocess.run(["rm", "-rf", str(work)], check=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
