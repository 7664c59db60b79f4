"""The clients of a round, and the history they record.

* idempotent producers (``enable.idempotence``, ``acks=all``) writing unique values
  ``r<round>-p<producer>-<seq>`` round-robin over every partition of the main topic at a
  steady rate; each send time, each acknowledgement (partition, offset, value, time) and
  each error is recorded;
* a consumer group of two members reading the main topic and committing synchronously
  every second (each successful commit recorded), and a poller reading the group's
  committed offsets (OffsetFetch) twice a second;
* transactional producers writing two values to two partitions of the transaction topic
  per transaction, then committing (70 %) or aborting it; each transaction's outcome is
  committed, aborted, or unknown (the client could not tell).

Every time is ``time.monotonic()`` of this process, the clock the nemesis uses too.
"""

from __future__ import annotations

import logging
import random
import threading
import time
import traceback
import uuid
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

__all__ = ["History", "Workload", "read_all"]


@dataclass
class History:
    sends: dict[str, tuple[int, float]] = field(default_factory=dict)  # value -> (partition, t)
    acks: list[tuple[int, int, str, float]] = field(default_factory=list)  # (p, offset, value, t)
    errors: list[tuple[str, str, float]] = field(default_factory=list)  # (value, error, t)
    reads: list[tuple[int, int, str]] = field(default_factory=list)  # group members' (p, offset, value)
    commits: list[tuple[float, float, int, int]] = field(default_factory=list)  # (t0, t1, p, offset)
    observed: list[tuple[float, float, int, int]] = field(default_factory=list)  # OffsetFetch (t0, t1, p, offset)
    txns: list[dict[str, Any]] = field(default_factory=list)
    client_errors: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)


class Workload:
    def __init__(self, bootstrap: str, topic: str, txn_topic: str, partitions: int, round_id: str,
                 producers: int = 2, rate: float = 100.0, txn_producers: int = 1,
                 txn_interval_s: float = 0.2, request_timeout_ms: int = 10000, seed: int = 0,
                 client_log: Path | None = None, txn_partitions: int = 4) -> None:
        self.bootstrap, self.topic, self.txn_topic = bootstrap, topic, txn_topic
        self.partitions, self.round_id = partitions, round_id
        self.txn_partitions = txn_partitions  # of txn_topic
        self.producers, self.rate, self.txn_producers = producers, rate, txn_producers
        self.txn_interval_s, self.request_timeout_ms = txn_interval_s, request_timeout_ms
        self.group = f"jepsen-{round_id}-{uuid.uuid4().hex[:6]}"
        self.history = History()
        self.seed = seed
        self._stop = threading.Event()
        self._stop_consumers = threading.Event()
        self._threads: list[threading.Thread] = []
        self.unflushed = 0
        #: librdkafka's own log lines go to ``client_log`` (or nowhere), not to the terminal
        self.logger = logging.getLogger(f"jepsen.clients.{round_id}.{uuid.uuid4().hex[:6]}")
        self.logger.propagate = False
        if client_log is not None:
            self.logger.addHandler(logging.FileHandler(client_log))
        self.common: dict[str, Any] = {"bootstrap.servers": bootstrap, "logger": self.logger}

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self) -> None:
        targets: list[tuple[Any, tuple[Any, ...]]] = [(self._produce, (i,)) for i in range(self.producers)]
        targets += [(self._transact, (i,)) for i in range(self.txn_producers)]
        targets += [(self._consume, (i,)) for i in range(2)] + [(self._poll_offsets, ())]
        for fn, args in targets:
            t = threading.Thread(target=self._guard, args=(fn, *args), daemon=True, name=f"jepsen-{fn.__name__}")
            t.start()
            self._threads.append(t)

    def _guard(self, fn: Any, *args: Any) -> None:
        try:
            fn(*args)
        except Exception:  # noqa: BLE001 - a client thread's crash is part of the history
            self._record(f"{fn.__name__} crashed: {traceback.format_exc()}")
            raise

    def stop(self, flush_s: float = 30.0) -> None:
        """Stop sending, wait up to ``flush_s`` for outstanding acknowledgements, then let the
        consumers catch up for a few seconds and stop them."""
        self._flush_s = flush_s
        self._stop.set()
        deadline = time.monotonic() + flush_s + 20
        for t in self._threads:
            if "consume" not in t.name and "offsets" not in t.name:
                t.join(max(0.1, deadline - time.monotonic()))
        time.sleep(3)
        self._stop_consumers.set()
        for t in self._threads:
            t.join(max(0.1, deadline + 15 - time.monotonic()))

    def close(self) -> None:
        """Close the client log (after the final reads, which log through it too)."""
        for handler in list(self.logger.handlers):
            self.logger.removeHandler(handler)
            handler.close()

    def _record(self, what: str) -> None:
        with self.history.lock:
            self.history.client_errors.append(what)

    # -- idempotent producers ----------------------------------------------------------------

    def _producer(self, extra: dict[str, Any] | None = None) -> tuple[Producer, threading.Event]:
        fatal = threading.Event()

        def on_error(err: KafkaError) -> None:
            if err.fatal():
                fatal.set()
                self._record(f"fatal: {err}")

        p = Producer({**self.common, "enable.idempotence": True, "acks": "all",
                      "linger.ms": 5, "message.timeout.ms": 60000,
                      "request.timeout.ms": self.request_timeout_ms, "retry.backoff.ms": 100,
                      "reconnect.backoff.max.ms": 1000, "error_cb": on_error, **(extra or {})})
        return p, fatal

    def _produce(self, index: int) -> None:
        h = self.history
        p, fatal = self._producer()
        seq, interval, next_t = 0, self.producers / self.rate, time.monotonic()

        def delivered(err: KafkaError | None, msg: Any) -> None:
            value = msg.value().decode()
            now = time.monotonic()
            with h.lock:
                if err is not None:
                    h.errors.append((value, str(err), now))
                else:
                    h.acks.append((msg.partition(), msg.offset(), value, now))

        while not self._stop.is_set():
            value = f"{self.round_id}-p{index}-{seq}"
            partition = seq % self.partitions
            try:
                with h.lock:
                    h.sends[value] = (partition, time.monotonic())
                p.produce(self.topic, value=value.encode(), partition=partition, on_delivery=delivered)
                seq += 1
            except BufferError:
                p.poll(0.1)
                continue
            except KafkaException as exc:
                self._record(f"produce: {exc}")
            p.poll(0)
            if fatal.is_set():
                p.flush(5)
                p, fatal = self._producer()
            next_t += interval
            time.sleep(max(0.0, next_t - time.monotonic()))
        self.unflushed += p.flush(getattr(self, "_flush_s", 30.0))

    # -- the consumer group ------------------------------------------------------------------

    def _consume(self, index: int) -> None:
        h = self.history
        c = Consumer({**self.common, "group.id": self.group,
                      "enable.auto.commit": False, "auto.offset.reset": "earliest",
                      "session.timeout.ms": 10000, "heartbeat.interval.ms": 1000,
                      "client.id": f"jepsen-member-{index}"})
        c.subscribe([self.topic])
        last_commit = time.monotonic()
        try:
            while not self._stop_consumers.is_set():
                m = c.poll(0.2)
                if m is not None and m.error() is None:
                    with h.lock:
                        h.reads.append((m.partition(), m.offset(), m.value().decode()))
                if time.monotonic() - last_commit >= 1.0:
                    self._commit(c)
                    last_commit = time.monotonic()
            self._commit(c)
        finally:
            c.close()

    def _commit(self, c: Consumer) -> None:
        t0 = time.monotonic()
        try:
            done = c.commit(asynchronous=False) or []
        except KafkaException:
            return  # nothing to commit, or failed: not a successful commit
        t1 = time.monotonic()
        with self.history.lock:
            for tp in done:
                if tp.error is None and tp.offset >= 0:
                    self.history.commits.append((t0, t1, tp.partition, tp.offset))

    def _poll_offsets(self) -> None:
        c = Consumer({**self.common, "group.id": self.group, "enable.auto.commit": False})
        tps = [TopicPartition(self.topic, p) for p in range(self.partitions)]
        try:
            while not self._stop_consumers.is_set():
                t0 = time.monotonic()
                try:
                    got = c.committed(tps, timeout=5)
                except KafkaException:
                    got = []
                t1 = time.monotonic()
                with self.history.lock:
                    for tp in got:
                        if tp.error is None and tp.offset >= 0:
                            self.history.observed.append((t0, t1, tp.partition, tp.offset))
                self._stop_consumers.wait(0.5)
        finally:
            c.close()

    # -- transactional producers -------------------------------------------------------------

    def _transact(self, index: int) -> None:
        rng = random.Random(self.seed * 1000 + index)
        tid = f"jepsen-{self.round_id}-tx{index}"
        p: Producer | None = None
        n = 0
        while not self._stop.is_set():
            if p is None:
                try:
                    p, _ = self._producer({"transactional.id": tid, "transaction.timeout.ms": 10000,
                                           "message.timeout.ms": 10000})
                    p.init_transactions(30)
                    p.list_topics(self.txn_topic, timeout=10)  # know its partitions before producing
                except KafkaException as exc:
                    self._record(f"init_transactions: {exc}")
                    p = None
                    self._stop.wait(1)
                    continue
            pa, pb = rng.sample(range(self.txn_partitions), 2)
            name = f"{self.round_id}-t{index}-{n}"
            n += 1
            rec: dict[str, Any] = {"id": name, "values": [(pa, f"{name}-a"), (pb, f"{name}-b")],
                                   "intent": "commit" if rng.random() < 0.7 else "abort",
                                   "outcome": "unknown", "t0": time.monotonic()}
            try:
                p.begin_transaction()
                for part, value in rec["values"]:
                    p.produce(self.txn_topic, value=value.encode(), partition=part)
                if rec["intent"] == "commit":
                    self._retrying(p.commit_transaction)
                    rec["outcome"] = "committed"
                else:
                    self._retrying(p.abort_transaction)
                    rec["outcome"] = "aborted"
            except KafkaException as exc:
                err = exc.args[0]
                rec["error"] = str(err)
                if err.fatal():
                    p = None  # a new producer with the same id fences this one
                else:  # abortable, or a produce refused before the commit: abort it
                    try:
                        self._retrying(p.abort_transaction)
                        rec["outcome"] = "aborted"
                    except KafkaException as exc2:
                        rec["error"] += f"; abort: {exc2}"
                        p = None
            rec["t1"] = time.monotonic()
            with self.history.lock:
                self.history.txns.append(rec)
            self._stop.wait(self.txn_interval_s)

    def _retrying(self, call: Any, total_s: float = 40.0) -> None:
        """``call(10)`` again while it fails retriably, for up to ``total_s`` and not once
        the workload stops: a thread left retrying outlived its round and, on the next
        round's brokers (the same addresses), auto-created that round's topics."""
        deadline = time.monotonic() + total_s
        while True:
            try:
                call(10)
                return
            except KafkaException as exc:
                if not exc.args[0].retriable() or time.monotonic() > deadline or self._stop.is_set():
                    raise


def read_all(bootstrap: str, topic: str, partitions: int, isolation: str = "read_uncommitted",
             timeout_s: float = 60.0, logger: logging.Logger | None = None) -> tuple[dict[int, list[tuple[int, str]]], list[int]]:
    """Every record of ``topic`` from the start to its end as of now: {partition: [(offset,
    value)]}, and the partitions that could not be read to the end in time."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"jepsen-check-{uuid.uuid4().hex[:8]}",
                  "enable.auto.commit": False, "isolation.level": isolation,
                  "auto.offset.reset": "earliest", "enable.partition.eof": True,
                  **({"logger": logger} if logger is not None else {})})
    out: dict[int, list[tuple[int, str]]] = defaultdict(list)
    deadline = time.monotonic() + timeout_s
    try:
        ends: dict[int, int] = {}
        for p in range(partitions):
            while p not in ends:
                try:
                    ends[p] = c.get_watermark_offsets(TopicPartition(topic, p), timeout=5)[1]
                except KafkaException:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.5)
        done = {p for p, end in ends.items() if end <= 0}
        c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        while len(done) < partitions and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is None:
                continue
            if m.error() is not None:
                if m.error().code() == KafkaError._PARTITION_EOF and m.offset() >= ends[m.partition()]:
                    done.add(m.partition())
                continue
            out[m.partition()].append((m.offset(), m.value().decode()))
            if m.offset() + 1 >= ends[m.partition()]:
                done.add(m.partition())
    finally:
        c.close()
    return dict(out), sorted(set(range(partitions)) - done)
