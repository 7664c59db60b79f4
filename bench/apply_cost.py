"""What a broker's apply of new metadata costs at scale, in-process (issue 33).

One :class:`ReplicaManager` on a temporary data dir hosts ``--partitions`` partitions of RF 3
(three brokers, this one node 1), then applies, with the event loop out of the picture:

* **a death**: broker 3 is fenced and each partition it led moves to its next replica (a
  third of them come here), then it comes back, ``--runs`` times;
* **one change**: a single ISR change in one topic holding every partition, ``--runs`` times
  (the steady state of a large cluster: ISR changes and elections one at a time).

It prints the median and slowest apply of each. Run it on two checkouts to compare:
``python bench/apply_cost.py --partitions 10000``.
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from controller.document import ClusterMetadata  # noqa: E402
from controller.records import TopicInfo  # noqa: E402
from controller.registrations import BrokerRegistration, Endpoint, PartitionRegistration  # noqa: E402
from fetch.waiter import AppendWaiters  # noqa: E402
from local_tier.config import LogConfig  # noqa: E402
from local_tier.manager import LogManager  # noqa: E402
from service.replication.replica_manager import ReplicaManager  # noqa: E402

CONFIG = LogConfig(segment_bytes=1 << 20, segment_index_bytes=1 << 16)


def _brokers(fenced: int | None) -> dict[int, BrokerRegistration]:
    return {n: BrokerRegistration(n, uuid.UUID(int=n), 1, (Endpoint("PLAINTEXT", "h", 9000 + n),),
                                  fenced=n == fenced) for n in (1, 2, 3)}


def _manager(work: Path) -> tuple[LogManager, ReplicaManager]:
    logs = LogManager(work)
    logs.load(lambda _topic: CONFIG)
    return logs, ReplicaManager(1, logs, lambda _topic: CONFIG, AppendWaiters())


def _timed(apply: ReplicaManager, md: ClusterMetadata) -> float:
    started = time.perf_counter()
    apply.apply(md)
    return (time.perf_counter() - started) * 1000


def death(work: Path, partitions: int, runs: int) -> list[float]:
    """Applies of broker 3's fencing (its leaderships to the next replica), each one after
    its return."""
    per_topic = 100
    topics = {f"t{i:04d}": TopicInfo(f"t{i:04d}", uuid.UUID(int=1000 + i), per_topic)
              for i in range(max(1, partitions // per_topic))}
    first = {t.topic_id: tuple(PartitionRegistration(r, r, r[0], 0, 0) for r in (
        ((i + p) % 3 + 1, (i + p + 1) % 3 + 1, (i + p + 2) % 3 + 1) for p in range(per_topic)))
        for i, t in enumerate(topics.values())}

    def at(epoch: int, dead: bool) -> ClusterMetadata:
        parts = {tid: tuple(
            reg if reg.leader != 3 else PartitionRegistration(
                reg.replicas, tuple(b for b in reg.replicas if b != 3) if dead else reg.replicas,
                reg.replicas[1] if dead else 3, epoch, epoch)
            for reg in regs) for tid, regs in first.items()}
        return ClusterMetadata("c", brokers=_brokers(3 if dead else None), topics=topics,
                               partitions=parts)

    logs, manager = _manager(work)
    try:
        started = time.perf_counter()
        manager.apply(ClusterMetadata("c", brokers=_brokers(None), topics=topics, partitions=first))
        took = time.perf_counter() - started
        print(f"  opened {len(manager.partitions):,} logs in {took:.1f} s", flush=True)
        gc.collect()
        gc.disable()  # a collection inside one timing would be most of it
        times = []
        for run in range(runs):
            times.append(_timed(manager, at(2 * run + 1, dead=True)))
            manager.apply(at(2 * run + 2, dead=False))
        return times
    finally:
        gc.enable()
        logs.shutdown()


def one_change(work: Path, partitions: int, runs: int) -> list[float]:
    """Applies of one ISR change in a topic of ``partitions`` partitions."""
    topic = TopicInfo("big", uuid.UUID(int=77), partitions)
    regs = [PartitionRegistration((1, 2, 3), (1, 2, 3), 1, 0, 0) for _ in range(partitions)]
    logs, manager = _manager(work)
    try:
        manager.apply(ClusterMetadata("c", brokers=_brokers(None), topics={"big": topic},
                                      partitions={topic.topic_id: tuple(regs)}))
        gc.collect()
        gc.disable()
        times = []
        for run in range(1, runs + 1):
            index = run % partitions
            isr = (1, 2) if run % 2 else (1, 2, 3)
            regs[index] = PartitionRegistration((1, 2, 3), isr, 1, 0, run)
            md = ClusterMetadata("c", brokers=_brokers(None), topics={"big": topic},
                                 partitions={topic.topic_id: tuple(regs)})
            times.append(_timed(manager, md))
        return times
    finally:
        gc.enable()
        logs.shutdown()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--partitions", type=int, default=10_000)
    parser.add_argument("--runs", type=int, default=20)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="strata-apply-cost-") as tmp:
        print(f"a death, {args.partitions:,} partitions of RF 3 hosted here ...", flush=True)
        dying = death(Path(tmp) / "death", args.partitions, args.runs)
        print(f"one ISR change in a topic of {args.partitions:,} partitions ...", flush=True)
        single = one_change(Path(tmp) / "one", args.partitions, args.runs)
    for label, times in (("a death (a third of the leaderships here)", dying),
                         ("one ISR change", single)):
        print(f"{label}: apply median {statistics.median(times):.2f} ms, "
              f"slowest {max(times):.2f} ms ({len(times)} applies)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
