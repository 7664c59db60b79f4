"""Wire fuzzing, the long run: mutated request frames of every API against one broker process.

    python bench/fuzz.py [--frames 100000] [--seed 21] [--json PATH] [--work-dir DIR]

The suite's ``tests/service/test_fuzz_wire.py`` runs the same fuzzer
(``tests/service/wire_fuzz.py``: flipped bytes, forged lengths, truncated and
extended frames, unknown tagged fields, size prefixes that lie, record batches
that lie inside a correct CRC) for ~20 s; this runs it for ``--frames`` frames and
reports: cases and frames by kind, answers, connections the broker closed,
crashes (the broker process exiting; must be 0 — each is restarted and the frames
before it are saved), the broker's RSS before, at its peak and after, tracebacks
in its log (must be 0: every bad frame refused on purpose), and whether a normal
client still produces and reads every acknowledged record afterwards.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import platform
import random
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from confluent_kafka import Producer

from tests.conftest import BrokerProcess, free_port
from tests.service.kafka_wire import (
    WireConnection,
    error_codes,
    example_request,
    offsets_held,
    read_to_end,
    records,
)
from tests.service.wire_fuzz import Fuzzer, RandomDraw, rss_bytes

TOPIC = "fuzz"
SETS = {"auto.create.topics.enable": "false", "group.initial.rebalance.delay.ms": "0",
        "offsets.topic.num.partitions": "1"}


def _prepare(broker: BrokerProcess) -> None:
    with WireConnection(broker.bootstrap) as conn:
        answer = conn.call(example_request(19, 7, name=TOPIC, num_partitions=2))
        assert error_codes(answer) in ([0], [36]), answer
        assert error_codes(conn.call(example_request(0, 9, name=TOPIC, index=0, records=records(5)))) == [0]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--frames", type=int, default=100_000)
    parser.add_argument("--seed", type=int, default=21)
    parser.add_argument("--json", type=Path, help="write the figures as JSON here")
    parser.add_argument("--work-dir", type=Path, help="broker data and logs (default: a temp dir)")
    args = parser.parse_args()
    work = args.work_dir or Path(tempfile.mkdtemp(prefix="strata-fuzz-"))
    broker = BrokerProcess(work / "data", free_port(), sets=SETS, log_path=work / "broker.log").start()
    started_at = _dt.datetime.now(_dt.UTC)
    crashes: list[dict[str, object]] = []
    try:
        _prepare(broker)
        rss_before = peak = rss_bytes(broker.pid)
        fuzzer = Fuzzer(broker.bootstrap, TOPIC)
        draw = RandomDraw(random.Random(args.seed))
        started = time.monotonic()
        while fuzzer.stats.frames < args.frames:
            for _ in range(500):
                try:
                    fuzzer.case(draw)
                except OSError:  # the broker went away mid-case: counted below
                    fuzzer.close()
            if not broker.running:
                saved = work / f"crash-{len(crashes)}.frames"
                saved.write_text("\n".join(f"{kind} api={api} {data.hex()}" for kind, api, data in fuzzer.recent))
                crashes.append({"after_frames": fuzzer.stats.frames, "exit_code": broker.proc.returncode,
                                "frames_file": str(saved)})
                print(f"CRASH after {fuzzer.stats.frames} frames (exit {broker.proc.returncode}); "
                      f"last frames in {saved}", flush=True)
                broker.start()
                fuzzer = _restart_fuzzer(fuzzer, broker)
                continue
            peak = max(peak, rss_bytes(broker.pid))
            if fuzzer.stats.frames % 10_000 < 500:
                print(f"{fuzzer.stats.frames} frames, {time.monotonic() - started:.0f} s, "
                      f"broker RSS {rss_bytes(broker.pid) >> 20} MiB", flush=True)
        seconds = time.monotonic() - started
        fuzzer.close()
        rss_after = rss_bytes(broker.pid)
        producer = Producer({"bootstrap.servers": broker.bootstrap})
        for i in range(1000):
            producer.produce(TOPIC, b"after-%d" % i, partition=i % 2)
        unflushed = producer.flush(30)
        exist = offsets_held(broker.bootstrap, TOPIC, 2)  # from the log start: DeleteRecords is fuzzed too
        read = len(read_to_end(broker.bootstrap, TOPIC, 2, timeout=120))
        log_text = broker.log_text()
        result = {
            "command": " ".join([sys.executable, *sys.argv]),
            "date": started_at.isoformat(timespec="seconds"),
            "machine": f"{platform.machine()}, {platform.system()} {platform.release()}, Python {platform.python_version()}",
            "broker": " ".join(broker.command()),
            "seed": args.seed,
            "seconds": round(seconds, 1),
            "stats": vars(fuzzer.stats),
            "crashes": len(crashes),
            "crash_details": crashes,
            "tracebacks_in_broker_log": log_text.count("Traceback"),
            "rss_before_mib": round(rss_before / 2**20, 1),
            "rss_peak_mib": round(peak / 2**20, 1),
            "rss_after_mib": round(rss_after / 2**20, 1),
            "normal_client_unflushed": unflushed,
            "records_read_after": read,
            "records_in_topic": exist,
        }
    finally:
        broker.stop()
    print(json.dumps(result, indent=2))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    ok = not crashes and result["tracebacks_in_broker_log"] == 0 and unflushed == 0 and read == exist
    return 0 if ok else 1


def _restart_fuzzer(old: Fuzzer, broker: BrokerProcess) -> Fuzzer:
    """A fuzzer for the restarted broker that keeps counting where the old one stopped."""
    fresh = Fuzzer(broker.bootstrap, TOPIC)
    fresh.stats = old.stats
    return fresh


if __name__ == "__main__":
    raise SystemExit(main())
