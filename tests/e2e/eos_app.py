"""A consume-transform-produce application for the exactly-once test (run as a subprocess).

Reads ``input`` in its consumer group, writes one output record per input record
(same value) and commits the consumed offsets inside the same transaction
(``send_offsets_to_transaction``), a few records per transaction. Exits when it
has seen nothing new for 3 s (30 s before the first record). confluent-kafka on its defaults plus the
transactional id (read_committed is librdkafka's default isolation level).

    python -m tests.e2e.eos_app BOOTSTRAP INPUT OUTPUT GROUP TRANSACTIONAL_ID
"""

from __future__ import annotations

import sys
import time

from confluent_kafka import Consumer, Producer


def main(bootstrap: str, source: str, sink: str, group: str, tid: str) -> int:
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": tid})
    producer.init_transactions(30)
    # Static membership: the restarted instance takes over at once (no wait for the killed
    # member's session to expire).
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "group.instance.id": tid,
                         "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    consumer.subscribe([source])
    idle_since = time.monotonic() + 30  # the first rebalance may take a while
    while time.monotonic() - idle_since < 3:
        batch = [m for m in consumer.consume(num_messages=7, timeout=0.5) if m.error() is None]
        if not batch:
            continue
        idle_since = time.monotonic()
        producer.begin_transaction()
        for m in batch:
            producer.produce(sink, m.value(), partition=0)
        producer.flush(30)  # in the log, so a kill here leaves an open transaction
        producer.send_offsets_to_transaction(consumer.position(consumer.assignment()),
                                             consumer.consumer_group_metadata(), 30)
        producer.commit_transaction(30)
        print(f"committed {batch[-1].offset() + 1}", flush=True)
        time.sleep(0.02)
    consumer.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:6]))
