"""How long a leader's event loop is held while it answers a follower's first (full) fetch.

    python bench/follower_fetch_hold.py [--partitions 3000] [--fetches 3]

In process: a ``ReplicaManager`` leading ``--partitions`` partitions of five records each on
a temporary disk, the heap then frozen out of the collector as a broker's is
(``service/gc_policy.py``); each fetch is a new follower session's first request, built by
the follower's own code (``FollowerSession``, ``fetch_request``) and answered by
``read_for_follower``, while a task yielding in a loop measures the longest the loop was held.
Stop 72 measured 118-168 ms in one turn before the read went in turns (issue 34's notes).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import sys
import tempfile
import time
import uuid
from pathlib import Path
from types import SimpleNamespace

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from controller.document import ClusterMetadata  # noqa: E402
from controller.records import TopicInfo  # noqa: E402
from controller.registrations import PartitionRegistration  # noqa: E402
from fetch.sessions import FetchSessionCache  # noqa: E402
from fetch.waiter import AppendWaiters  # noqa: E402
from local_tier.manager import LogManager  # noqa: E402
from service.replication.fetch_session import FollowerSession, fetch_request  # noqa: E402
from service.replication.leader import read_for_follower  # noqa: E402
from service.replication.replica_manager import ReplicaManager  # noqa: E402
from tests.local_tier.batches import make_batch, small_config  # noqa: E402

FOLLOWER = 2
LIMITS = SimpleNamespace(node_id=FOLLOWER, max_wait_ms=0, min_bytes=1, max_bytes=10 << 20,
                         partition_max_bytes=8 << 20)


async def _longest_hold(host: SimpleNamespace, partitions: int) -> tuple[float, float, int]:
    """One first fetch: (its seconds, the loop's longest hold in seconds, turns it gave)."""
    session = FollowerSession()
    plan = session.plan({("t", p): (0, 0, -1, 0) for p in range(partitions)}, lambda position: position)
    request = fetch_request(12, plan, True, LIMITS, {})
    gaps: list[float] = []
    done = False

    async def tick() -> None:
        last = time.perf_counter()
        while not done:
            await asyncio.sleep(0)
            now = time.perf_counter()
            gaps.append(now - last)
            last = now

    ticker = asyncio.ensure_future(tick())
    await asyncio.sleep(0)
    started = time.perf_counter()
    answer = await read_for_follower(host, request, FOLLOWER, 0)
    took = time.perf_counter() - started
    done = True
    await ticker
    assert len(answer.partitions) == partitions, len(answer.partitions)
    return took, max(gaps), len(gaps)


async def main(partitions: int, fetches: int) -> None:
    with tempfile.TemporaryDirectory(prefix="strata-follower-hold-") as tmp:
        logs = LogManager(Path(tmp))
        logs.load(lambda _topic: small_config())
        topic = TopicInfo("t", uuid.uuid4(), partitions)
        registrations = tuple(PartitionRegistration((1, FOLLOWER), (1, FOLLOWER), 1, 0, 0) for _ in range(partitions))
        waiters = AppendWaiters()
        manager = ReplicaManager(1, logs, lambda _topic: small_config(), waiters)
        manager.apply(ClusterMetadata("c", topics={"t": topic}, partitions={topic.topic_id: registrations}))
        print(f"opening {partitions} partitions ...", flush=True)
        while len(manager.partitions) < partitions or manager.unopened:
            await asyncio.sleep(0.005)
        for p in range(partitions):
            partition = manager.partitions[("t", p)]
            partition.log.append_as_leader(make_batch(5), partition.leader_epoch)
        gc.collect()
        gc.freeze()  # as the broker does
        host = SimpleNamespace(replicas=manager, waiters=waiters, fetch_max_bytes=1 << 26,
                               fetch_sessions=FetchSessionCache(fetches + 1))
        for n in range(fetches):
            took, hold, turns = await _longest_hold(host, partitions)
            print(f"fetch {n + 1}/{fetches}: answered {partitions} partitions in {took * 1000:.0f} ms; "
                  f"the loop's longest hold {hold * 1000:.1f} ms ({turns} turns)", flush=True)
        gc.unfreeze()
        logs.shutdown()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--partitions", type=int, default=3000)
    parser.add_argument("--fetches", type=int, default=3)
    args = parser.parse_args()
    asyncio.run(main(args.partitions, args.fetches))
