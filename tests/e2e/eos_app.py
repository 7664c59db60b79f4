"""A consume-transform-produce application for the exactly-once test (run as a subprocess).

Reads ``input`` in its consumer group, writes one output record per input record
(same value) and commits the consumed offsets inside the same transaction
(``send_offsets_to_transaction``), a few records per transaction. Exits when it
has seen nothing new for 3 s (30 s before the first record). The clients are on
their defaults plus the transactional id and a static member id (so the restarted
instance takes over at once, without waiting for the killed member's session to
expire): confluent-kafka (read_committed is librdkafka's default isolation
level), or aiokafka when the sixth argument is ``aiokafka``.

    python -m tests.e2e.eos_app BOOTSTRAP INPUT OUTPUT GROUP TRANSACTIONAL_ID [confluent-kafka|aiokafka]
"""

from __future__ import annotations

import asyncio
import sys
import time

from confluent_kafka import Consumer, Producer

BATCH = 7
IDLE_S = 3.0
FIRST_RECORD_S = 30.0  # the first rebalance may take a while


def main(bootstrap: str, source: str, sink: str, group: str, tid: str) -> int:
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": tid})
    producer.init_transactions(30)
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "group.instance.id": tid,
                         "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    consumer.subscribe([source])
    idle_since = time.monotonic() + FIRST_RECORD_S
    while time.monotonic() - idle_since < IDLE_S:
        batch = [m for m in consumer.consume(num_messages=BATCH, timeout=0.5) if m.error() is None]
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


async def main_aiokafka(bootstrap: str, source: str, sink: str, group: str, tid: str) -> int:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, transactional_id=tid)
    consumer = AIOKafkaConsumer(source, bootstrap_servers=bootstrap, group_id=group, group_instance_id=tid,
                                enable_auto_commit=False, auto_offset_reset="earliest")
    await producer.start()
    await consumer.start()
    try:
        idle_since = time.monotonic() + FIRST_RECORD_S
        while time.monotonic() - idle_since < IDLE_S:
            batches = await consumer.getmany(timeout_ms=500, max_records=BATCH)
            records = [m for ms in batches.values() for m in ms]
            if not records:
                continue
            idle_since = time.monotonic()
            async with producer.transaction():
                for m in records:
                    await producer.send(sink, m.value, partition=0)
                await producer.flush()  # in the log, so a kill here leaves an open transaction
                offsets = {tp: ms[-1].offset + 1 for tp, ms in batches.items() if ms}
                await producer.send_offsets_to_transaction(offsets, group)
            print(f"committed {records[-1].offset + 1}", flush=True)
            await asyncio.sleep(0.02)
    finally:
        await consumer.stop()
        await producer.stop()
    return 0


if __name__ == "__main__":
    if sys.argv[6:7] == ["aiokafka"]:
        sys.exit(asyncio.run(main_aiokafka(*sys.argv[1:6])))
    sys.exit(main(*sys.argv[1:6]))
