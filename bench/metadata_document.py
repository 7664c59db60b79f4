"""What one change of the cluster metadata document costs at 1,000 and 10,000 partitions.

Builds format-2 documents (replication factor 3 over 6 brokers in 3 racks, 100
partitions per topic, a few topic configs) and times what a change costs the
controller (apply an ISR change, compare, encode) and every other broker (decode
what it fetched), and the bytes each change PUTs and each broker GETs. Pure CPU
and sizes; the object store round trip comes on top (see
docs/adr/0001-metadata-in-the-object-store.md for the figures).

    python bench/metadata_document.py [--partitions 1000 10000] [--repeat 20]
"""

from __future__ import annotations

import argparse
import gzip
import statistics
import time
import uuid
from dataclasses import replace

from controller.document import ClusterMetadata
from controller.document_codec import decode, encode
from controller.placement import PlacementBroker, ReplicaPlacer
from controller.records import TopicInfo
from controller.registrations import BrokerRegistration, Endpoint
from controller.replication_control import new_partition

PER_TOPIC = 100


def build(partitions: int) -> ClusterMetadata:
    brokers = [
        BrokerRegistration(
            n, uuid.uuid4(), 100 + n, (Endpoint("PLAINTEXT", f"broker-{n}.internal", 9092),),
            rack=f"rack-{n % 3}", fenced=False,
        )
        for n in range(1, 7)
    ]
    md = ClusterMetadata(cluster_id="q1Sh-9_ISia_zwGINzRvyQ", controller_id=1, controller_epoch=4)
    for broker in brokers:
        md = md.with_broker(broker)
    placer = ReplicaPlacer(1)
    usable = [PlacementBroker(b.node_id, b.rack) for b in brokers]
    live = {b.node_id for b in brokers}
    for t in range(partitions // PER_TOPIC):
        topic = TopicInfo(
            f"service-{t:05d}.events", uuid.uuid4(), PER_TOPIC,
            {"retention.ms": "604800000", "remote.storage.enable": "true"}, 1_700_000_000_000,
        )
        registrations = [new_partition(r, live) for r in placer.place(usable, PER_TOPIC, 3)]
        md = md.with_topic(topic, registrations)
    return md


def timed(repeat: int, fn) -> float:  # type: ignore[no-untyped-def]
    samples = []
    for _ in range(repeat):
        start = time.process_time()
        fn()
        samples.append(time.process_time() - start)
    return statistics.median(samples) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--partitions", type=int, nargs="+", default=[1000, 10000])
    parser.add_argument("--repeat", type=int, default=20)
    args = parser.parse_args()
    print("partitions  bytes      gzip      CPU ms: encode  decode  change")
    for count in args.partitions:
        md = build(count)
        data = encode(md)
        topic = next(iter(md.topics.values()))
        first = md.partitions[topic.topic_id][0]

        def change() -> None:
            shrunk = replace(first, isr=first.isr[:2], partition_epoch=first.partition_epoch + 1)
            updated = md.with_partitions({(topic.topic_id, 0): shrunk})
            assert updated != md
            encode(updated)

        print(
            f"{count:>10}  {len(data):>9,}  {len(gzip.compress(data)):>8,}  "
            f"{timed(args.repeat, lambda: encode(md)):>14.1f}  "
            f"{timed(args.repeat, lambda: decode(data)):>6.1f}  "
            f"{timed(args.repeat, change):>6.1f}"
        )


if __name__ == "__main__":
    main()
