"""A producer's first request to a topic just created names every partition: does the broker's
event loop stall while their logs are created?

    python bench/create_stall.py [ROUNDS]   # default 3

One broker (its stall log at 20 ms: ``event.loop.stall.log.ms``). Each round creates a
500-partition topic, sends a record to every partition at once (confluent-kafka, linger.ms 5),
waits for every acknowledgement, then deletes the topic. Prints how long each round's records
took to be acknowledged, and the stalls of 20 ms or more the broker logged (count, longest).
Stop 73: the longest stall went from 2,690 ms to 95-131 ms (docs/adr/0025-metadata-log.md).
"""

from __future__ import annotations

import re
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import tests.conftest  # noqa: E402,F401 - the test helpers' import order
from tests.conftest import BrokerProcess, free_port  # noqa: E402

PARTITIONS = 500


def main() -> None:
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    with tempfile.TemporaryDirectory(prefix="strata-create-stall-") as tmp:
        log_path = Path(tmp) / "broker.log"
        broker = BrokerProcess(Path(tmp) / "data", free_port(), sets={"event.loop.stall.log.ms": "20"},
                               log_path=log_path)
        broker.start()
        try:
            admin = AdminClient({"bootstrap.servers": broker.bootstrap})
            for r in range(rounds):
                name = f"wide-{r}"
                admin.create_topics([NewTopic(name, PARTITIONS, 1)])[name].result(60)
                producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5})
                started = time.monotonic()
                for p in range(PARTITIONS):
                    producer.produce(name, b"x" * 100, partition=p)
                if producer.flush(60):
                    raise SystemExit(f"records to {name} not acknowledged in 60 s")
                print(f"round {r + 1}/{rounds}: all {PARTITIONS} acknowledged "
                      f"{time.monotonic() - started:.2f} s after the first send", flush=True)
                time.sleep(1)
                admin.delete_topics([name])[name].result(60)
                time.sleep(1)
        finally:
            broker.stop()
        stalls = sorted(int(m) for m in re.findall(r"stalled for at least (\d+) ms", log_path.read_text()))
    print(f"stalls of 20 ms or more: {len(stalls)}, the longest {max(stalls, default=0)} ms; "
          f"the last eight: {stalls[-8:]}")


if __name__ == "__main__":
    main()
