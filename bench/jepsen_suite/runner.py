"""One round: a fresh cluster, the workload, a schedule of faults, the final reads, the check.

A round starts three brokers on a fresh network and bucket, creates the main topic
(``partitions``, replication factor 3, ``min.insync.replicas=2``) and the transaction
topic (4 partitions, the same), runs the workload for ``warmup_s``, then cycles through
``nemeses`` for ``duration_s`` (each fault held ``fault_s``, healed, then ``rest_s`` of
calm), heals everything, lets the workload run ``tail_s`` more, stops it, reads both
topics to their ends and checks the history (:mod:`.checker`). Everything it made is
removed in the end, whatever happened.
"""

from __future__ import annotations

import random
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .checker import check, duplicate_offsets
from .cluster import FAST, JepsenCluster
from .identity import producer_identities
from .nemesis import Nemesis, fault_record
from .net import NetnsNetwork, Network, ProxyNetwork, netns_available
from .workload import Workload, read_all

__all__ = ["RoundConfig", "make_network", "run_round"]

TXN_PARTITIONS = 4


@dataclass
class RoundConfig:
    nemeses: list[str]
    name: str = ""
    duration_s: float = 30.0
    faults: int | None = None  # exactly this many faults (cycling through nemeses), not duration_s
    fault_s: float = 8.0
    rest_s: float = 6.0
    warmup_s: float = 3.0
    tail_s: float = 8.0
    partitions: int = 6
    producers: int = 2
    rate: float = 100.0
    txn_producers: int = 1
    fast: bool = False
    network: str = "auto"  # auto | netns | proxy
    work_dir: Path | None = None
    seed: int = 0
    request_timeout_ms: int = 10000
    free_port: Callable[[], int] | None = None
    sets: dict[str, str] = field(default_factory=dict)
    log: Callable[[str], None] = print


def make_network(mode: str, size: int, free_port: Callable[[], int] | None = None) -> Network:
    why = netns_available() if mode in ("auto", "netns") else "proxies asked for"
    if why is None:
        return NetnsNetwork(size)
    if mode == "netns":
        raise RuntimeError(f"network namespaces unavailable: {why}")
    return ProxyNetwork(size, free_port)


def _create_topics(bootstrap: str, specs: list[tuple[str, int]], timeout_s: float = 90) -> None:
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    topics = [NewTopic(n, num_partitions=p, replication_factor=3, config={"min.insync.replicas": "2"})
              for n, p in specs]
    for future in admin.create_topics(topics, request_timeout=30).values():
        try:
            future.result(35)
        except KafkaException as exc:  # a retry of a create that the first attempt made
            if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                raise
    deadline, state = time.monotonic() + timeout_s, {}
    while time.monotonic() < deadline:
        md = admin.list_topics(timeout=10)
        state = {n: {i: (m.leader, list(m.isrs)) for i, m in md.topics[n].partitions.items()}
                 for n, _ in specs if n in md.topics}
        if all(n in state and len(state[n]) == p and all(leader >= 0 and len(isr) == 3
                                                         for leader, isr in state[n].values())
               for n, p in specs):
            return
        time.sleep(0.2)
    raise RuntimeError(f"topics not led with a full ISR within {timeout_s:.0f} s: (leader, ISR) {state}")


class _Ticker:
    """Prints the workload's progress every few seconds while the round runs."""

    def __init__(self, wl: Workload, log: Callable[[str], None], every_s: float = 5.0) -> None:
        self.wl, self.log, self.every_s = wl, log, every_s
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)
        self._t.start()

    def _run(self) -> None:
        last = 0
        while not self._stop.wait(self.every_s):
            h = self.wl.history
            with h.lock:
                acked, errors, txns = len(h.acks), len(h.errors), len(h.txns)
            self.log(f"    acked {acked} (+{acked - last}), send errors {errors}, transactions {txns}")
            last = acked

    def close(self) -> None:
        self._stop.set()
        self._t.join()


def run_round(cfg: RoundConfig) -> dict[str, Any]:
    log, name = cfg.log, cfg.name or "+".join(cfg.nemeses)
    work = cfg.work_dir or Path(tempfile.mkdtemp(prefix="strata-jepsen-"))
    work = work / f"{name}-{int(time.time())}"
    net = make_network(cfg.network, 3, cfg.free_port)
    cluster: JepsenCluster | None = None
    result: dict[str, Any] = {"nemesis": name, "network": net.kind, "work_dir": str(work)}
    try:
        t = time.monotonic()
        s3_port = cfg.free_port() if cfg.free_port is not None and net.kind == "proxy" else None
        # no auto-creation: a client of an earlier round still alive (librdkafka's threads) on
        # the same addresses created this round's transactional topic with one partition
        sets = {"auto.create.topics.enable": "false", **(FAST if cfg.fast else {}), **cfg.sets}
        cluster = JepsenCluster(net, work, 3, sets, s3_port).start()
        log(f"  [{name}] cluster up on {net.kind} in {time.monotonic() - t:.1f} s "
            f"(controller {cluster.controller_id()}); logs in {work}")
        topic, txn_topic = "jepsen", "jepsen-txn"
        _create_topics(cluster.bootstrap, [(topic, cfg.partitions), (txn_topic, TXN_PARTITIONS)])
        wl = Workload(cluster.bootstrap, topic, txn_topic, cfg.partitions, f"s{cfg.seed}",
                      producers=cfg.producers, rate=cfg.rate, txn_producers=cfg.txn_producers,
                      request_timeout_ms=cfg.request_timeout_ms, seed=cfg.seed,
                      client_log=work / "clients.log", txn_partitions=TXN_PARTITIONS)
        wl.start()
        ticker = _Ticker(wl, log)
        nem = Nemesis(cluster, random.Random(cfg.seed), log)
        faults: list[dict[str, Any]] = []
        t_start = time.monotonic()
        try:
            time.sleep(cfg.warmup_s)
            t_start, i = time.monotonic(), 0
            while (i < cfg.faults if cfg.faults is not None
                   else time.monotonic() - t_start < cfg.duration_s or i == 0):
                kind = cfg.nemeses[i % len(cfg.nemeses)]
                i += 1
                t0 = time.monotonic()
                what = nem.start(kind)
                t1 = time.monotonic()
                log(f"  [{name}] t={t0 - t_start:5.1f} s fault: {what}")
                if kind != "rolling-restart":
                    time.sleep(cfg.fault_s)
                th = time.monotonic()
                nem.heal(kind)
                log(f"  [{name}] t={th - t_start:5.1f} s healed ({time.monotonic() - th:.1f} s to heal)")
                faults.append(fault_record(kind, what, t0, t1, th))
                time.sleep(cfg.rest_s)
        finally:
            nem.heal_everything()
            time.sleep(cfg.tail_s)
            window = (t_start if faults else time.monotonic(), time.monotonic())
            ticker.close()
            wl.stop()
        log(f"  [{name}] workload stopped; reading both topics to their ends")
        final, unread = read_all(cluster.bootstrap, topic, cfg.partitions, logger=wl.logger)
        final_txn, unread_txn = read_all(cluster.bootstrap, txn_topic, TXN_PARTITIONS, "read_committed",
                                         logger=wl.logger)
        wl.close()
        dup_offsets = duplicate_offsets(final)
        identities = producer_identities(cluster.bootstrap.split(","), topic, dup_offsets) if dup_offsets else None
        result.update(check(wl.history, final, final_txn, cfg.partitions, window, faults, identities))
        result.update({
            "faults": [{**f, "t0": round(f["t0"] - window[0], 3), "t_made": round(f["t_made"] - window[0], 3),
                        "t_heal": round(f["t_heal"] - window[0], 3)} for f in faults],
            "unread_partitions": unread, "unread_txn_partitions": unread_txn,
            "unflushed": wl.unflushed, "notes": nem.notes,
            "config": {k: v for k, v in vars(cfg).items() if k not in ("log", "free_port", "work_dir")},
        })
        return result
    finally:
        if cluster is not None:
            cluster.close()
        net.close()
