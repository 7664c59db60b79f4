"""Strata consumer group benchmark: rebalance time and offset commit throughput.

    python bench/groups.py [--quick] [--out docs/benchmarks.md]

Starts its own single-node broker (bench/foundation.py's BrokerProcess, a
temporary data dir under --work-dir) and measures, all in one run:

(a) rebalance, under each protocol in the same run: 10 confluent-kafka
    consumers (one thread each) in one group on a 10-partition topic; one member
    leaves (close(): LeaveGroup, or a heartbeat with epoch -1) and we time from
    the close() call until the group's description (DescribeGroups, or
    ConsumerGroupDescribe) shows it Stable with 9 members, and until every
    partition is consumed again (owned by a survivor, each survivor holding its
    new assignment), counting the partitions survivors had to give up on the
    way. A new member then joins (not timed) and the leave is repeated. Classic
    (eager, range) with the client's heartbeat.interval.ms 3000 (librdkafka's
    default) and 100; consumer (KIP-848, group.protocol=consumer) with the
    broker's group.consumer.heartbeat.interval.ms 5000 (Kafka's default) and
    100 (a second broker, since the interval is the broker's).
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
    """A confluent-kafka consumer polling in its own thread; notes when its assignment changes.

    ``protocol`` is ``classic`` (eager rebalance, range assignor, the client's heartbeat
    interval) or ``consumer`` (KIP-848: the broker assigns and sets the heartbeat interval).
    The assignment is read from ``assignment()`` after each poll, the same for both.
    """

    def __init__(self, bootstrap: str, group: str, topic: str, protocol: str, heartbeat_ms: int) -> None:
        from confluent_kafka import Consumer

        self.changed_at = 0.0
        self.partitions: set[int] = set()
        self.lost = 0  # partitions it held that were taken away (revoked) while timing
        self.stop = threading.Event()
        conf = {"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False,
                "auto.offset.reset": "latest"}
        if protocol == "consumer":
            conf["group.protocol"] = "consumer"
        else:
            conf.update({"session.timeout.ms": 10_000, "heartbeat.interval.ms": heartbeat_ms})
        self.consumer = Consumer(conf)
        self.consumer.subscribe([topic])
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.stop.is_set():
            self.consumer.poll(0.02)
            now = {tp.partition for tp in self.consumer.assignment()}
            if now != self.partitions:
                self.lost += len(self.partitions - now)
                self.partitions = now
                self.changed_at = time.perf_counter()

    def close(self) -> None:
        self.stop.set()
        self.thread.join()
        self.consumer.close()


def wait_stable(admin, group: str, members: int, timeout: float = 120) -> float:
    """Poll the group's description until Stable with ``members``; the perf_counter when seen."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        d = describe(admin, group)
        if d.state.name == "STABLE" and len(d.members) == members:
            return time.perf_counter()
        time.sleep(0.005)
    raise SystemExit(f"group {group} not Stable with {members} members within {timeout} s")


def run_rebalance(b: BrokerProcess, protocol: str, heartbeat_ms: int, leaves: int) -> dict:
    """Time from one of 10 members leaving until the 9 others consume every partition again."""
    from confluent_kafka.admin import AdminClient

    name = f"bench-rebalance-{protocol}-{heartbeat_ms}"
    create_topic(b.bootstrap, name, 10)
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    members = [Member(b.bootstrap, name, name, protocol, heartbeat_ms) for _ in range(10)]
    log(f"  {protocol} protocol, heartbeat interval {heartbeat_ms} ms: waiting for 10 members")
    wait_stable(admin, name, 10)
    to_stable, to_consuming, paused = [], [], []
    try:
        for i in range(leaves):
            while sorted(len(m.partitions) for m in members) != [1] * 10:
                time.sleep(0.01)
            leaver = members.pop(0)
            for m in members:
                m.lost = 0
            t0 = time.perf_counter()
            leaver.close()
            stable = wait_stable(admin, name, 9)
            while set().union(*(m.partitions for m in members)) != set(range(10)) \
                    or not all(m.partitions for m in members):
                time.sleep(0.001)
            consuming = max(m.changed_at for m in members)
            to_stable.append((stable - t0) * 1000)
            to_consuming.append((max(consuming, t0) - t0) * 1000)
            paused.append(sum(m.lost for m in members))
            log(f"    leave {i + 1}/{leaves}: Stable after {to_stable[-1]:.0f} ms, every partition "
                f"consumed again after {to_consuming[-1]:.0f} ms, {paused[-1]} survivor partition(s) revoked")
            members.append(Member(b.bootstrap, name, name, protocol, heartbeat_ms))
            wait_stable(admin, name, 10)
    finally:
        for m in members:
            m.close()
    return {"protocol": protocol, "heartbeat_interval_ms": heartbeat_ms, "members": 10, "leaves": leaves,
            "to_stable_ms": to_stable, "to_all_consuming_ms": to_consuming,
            "survivor_partitions_revoked": paused,
            "median_to_stable_ms": statistics.median(to_stable),
            "max_to_stable_ms": max(to_stable),
            "median_to_all_consuming_ms": statistics.median(to_consuming),
            "max_to_all_consuming_ms": max(to_consuming),
            "median_survivor_partitions_revoked": statistics.median(paused)}


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
        ("**(a) Rebalance after a member leaves, 10 members, both protocols** (confluent-kafka; "
         "10 partitions, one per member; from `close()` of one member to the group's description "
         "showing Stable with 9 members, and to every partition being consumed again, i.e. owned by "
         "one of the 9 survivors, each holding its new assignment. *Survivor partitions revoked* "
         "counts partitions the survivors had to stop consuming on the way):"),
        "",
        ("| protocol | heartbeat interval ms | leaves | to Stable, median ms | to Stable, max ms | "
         "all consuming again, median ms | max ms | survivor partitions revoked (median) |"),
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in data["rebalance"]:
        label = ("classic (eager, range)" if r["protocol"] == "classic"
                 else "consumer (KIP-848, uniform)")
        lines.append(f"| {label} | {r['heartbeat_interval_ms']} | {r['leaves']} | "
                     f"{r['median_to_stable_ms']:.0f} | {r['max_to_stable_ms']:.0f} | "
                     f"{r['median_to_all_consuming_ms']:.0f} | {r['max_to_all_consuming_ms']:.0f} | "
                     f"{r['median_survivor_partitions_revoked']:.0f} |")
    lines += [
        "",
        ("Kafka's own definition of a consumer-protocol rebalance is the group reaching its new "
         "target assignment epoch with every member reconciled (what *to Stable* shows); "
         "*all consuming again* is the client-side view. Both protocols learn of the leave at each "
         "survivor's next heartbeat, so the interval bounds the time from below: classic members "
         "set it themselves (librdkafka's default 3000 ms), consumer-protocol members get it from "
         "the broker (`group.consumer.heartbeat.interval.ms`, Kafka's default 5000 ms). The classic "
         "eager protocol then stops all 9 survivors (revoke, JoinGroup, SyncGroup); the consumer "
         "protocol moves only the leaver's partition and the others never stop. The leave "
         "comes just after a round of heartbeats (when every member holds its partition), so both "
         "protocols' figures are about one interval; survivor partitions are sampled every 20 ms "
         "(a lower bound: an eager revoke-and-reassign faster than that is not seen)."),
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
        log("== (a) time from a member leaving until every partition is consumed again, 10 members")
        data["rebalance"] = [run_rebalance(broker, "classic", hb, cfg["leaves"]) for hb in (3000, 100)]
        data["rebalance"].append(run_rebalance(broker, "consumer", 5000, cfg["leaves"]))
        log("== (b) offset commits/s with 100 consumers committing after every poll")
        data["commits"] = run_commits(broker, work, cfg)
    finally:
        broker.stop()
    # The consumer protocol's heartbeat interval is the broker's: a second broker for 100 ms.
    fast = BrokerProcess(work / "data-fast", work / "broker-fast.log")
    fast.cmd += ["--set", "offsets.topic.num.partitions=50", "--set", "group.consumer.heartbeat.interval.ms=100"]
    data["broker_fast_heartbeats"] = {"command": shlex.join(fast.cmd)}
    try:
        fast.start()
        data["rebalance"].append(run_rebalance(fast, "consumer", 100, cfg["leaves"]))
    finally:
        fast.stop()
    write_report(data, Path(args.out))
    subprocess.run(["rm", "-rf", str(work)], check=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
