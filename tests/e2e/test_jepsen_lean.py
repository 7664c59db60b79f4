"""The Jepsen-style suite of bench/jepsen.py in small (issue 31): correctness under faults.

Three brokers (each in its own network namespace with nftables cuts when this machine can
make them, else on loopback behind per-broker proxies), FAST timings, idempotent acks=all
producers, a consumer group and transactional producers, and three faults in turn: kill -9
of the controller, a non-controller broker isolated from its peers, SIGSTOP of a broker.
Asserted: no acknowledged record lost, duplicated or given a conflicting offset, no
aborted record read, no transaction half visible, no committed offset going backwards. A
copy the client wrote again under a new producer epoch (``rewritten_by_new_epoch``: no
broker can tell it from a new record) is reported, not asserted.
Availability is measured by the bench (``python bench/jepsen.py``), never asserted here.
"""

from __future__ import annotations

import os
import re
import threading
from pathlib import Path

from bench.jepsen_suite.checker import check, duplicate_offsets
from bench.jepsen_suite.identity import producer_identities
from bench.jepsen_suite.runner import RoundConfig, run_round
from bench.jepsen_suite.workload import History, read_all
from tests.conftest import BrokerFactory, free_port
from tests.e2e import helpers, rawtxn
from tests.e2e.rawkafka import NONE, Connection


def test_no_acknowledged_record_is_lost_duplicated_or_moved_under_kill_isolate_and_pause(tmp_path: Path) -> None:
    lines: list[str] = []
    result = run_round(RoundConfig(
        nemeses=["kill-controller", "isolate", "pause"], faults=3, fault_s=4.0, rest_s=2.0,
        warmup_s=2.0, tail_s=4.0, fast=True, producers=2, rate=100.0, work_dir=tmp_path,
        free_port=free_port, log=lines.append,
        network=os.environ.get("STRATA_JEPSEN_NETWORK", "auto")))  # netns | proxy to force one
    report = "\n".join(lines) + f"\n{result}"
    if any(result[k] for k in ("lost", "duplicated", "conflicts", "aborted_read", "partial_txn", "offset_regressions")):
        report += _brokers_said(Path(result["work_dir"]))  # CI keeps no temporary directory
    assert [f["nemesis"] for f in result["faults"]] == ["kill-controller", "isolate", "pause"], report
    assert result["acked"] > 500, report  # the workload ran through the faults
    assert result["unread_partitions"] == [] and result["unread_txn_partitions"] == [], report
    assert result["lost"] == 0, report
    assert result["duplicated"] == 0, report
    assert result["conflicts"] == 0, report
    assert result["aborted_read"] == 0, report
    assert result["partial_txn"] == 0, report
    assert result["offset_regressions"] == 0, report


#: the lines of a broker's log that say who led, wrote and committed what around a fault
_EVIDENCE = re.compile(r"OffsetCommit|__consumer_offsets|coordinator|stops leading|fenc|truncat|lease|in effect|"
                       r"not the leader|WARNING|ERROR")


def _brokers_said(work: Path, per_broker: int = 80) -> str:
    """The last :data:`_EVIDENCE` lines of each broker's log, for the failure's report (one
    run in CI lost committed offsets and its logs went with its temporary directory)."""
    parts = []
    for log in sorted(work.glob("broker-*.log")):
        said = [line for line in log.read_text(errors="replace").splitlines() if _EVIDENCE.search(line)]
        parts.append(f"\n--- {log.name}, last {per_broker} of {len(said)} lines that say who led and wrote ---\n"
                     + "\n".join(said[-per_broker:]))
    return "".join(parts)


def test_the_checker_finds_each_anomaly_in_a_made_up_history() -> None:
    h = History(lock=threading.Lock())
    h.sends = {v: (0, 0.0) for v in ("a", "b", "c", "d", "e")}
    h.acks = [(0, 0, "a", 1.0), (0, 1, "b", 1.1), (0, 2, "c", 1.2), (0, 3, "d", 5.0)]
    final = {0: [(0, "a"), (1, "c"), (2, "x"), (3, "d"), (4, "d")]}  # b lost, c moved, d twice
    h.reads = [(0, 1, "b")]  # a member read b where c is in the end
    h.txns = [{"id": "t1", "values": [(0, "t1-a"), (1, "t1-b")], "outcome": "committed"},
              {"id": "t2", "values": [(0, "t2-a"), (1, "t2-b")], "outcome": "aborted"}]
    final_txn = {0: [(0, "t1-a"), (1, "t2-a")]}
    h.commits = [(1.0, 1.5, 0, 40)]
    h.observed = [(2.0, 2.1, 0, 40), (3.0, 3.1, 0, 10)]
    r = check(h, final, final_txn, 1, (2.0, 6.0), [{"t0": 2.0}])
    assert r["lost"] == 1
    assert r["duplicated"] == 1
    assert r["conflicts"] == 2  # c found away from its offset; a member's read of b where c is
    assert r["aborted_read"] == 1
    assert r["partial_txn"] == 1
    assert r["offset_regressions"] == 1
    assert r["max_unavailability_s"] == 3.8  # the last ack before the window (1.2) to the next (5.0)


def test_the_checker_tells_a_copy_renumbered_under_a_new_epoch_from_a_copy_the_broker_should_have_known(
    start_broker: BrokerFactory,
) -> None:
    """Both copies read back from a real broker with their writers: the second written under
    the producer's next epoch, as librdkafka renumbers what it holds unacknowledged after an
    epoch bump, is reported apart; the same two copies with one writer are duplicates."""
    broker = start_broker()
    topic = helpers.topic_name("jepsen-identity")
    helpers.create_topic(broker.bootstrap, topic)
    with Connection.to(broker.bootstrap) as conn:
        _, pid, _ = rawtxn.init_producer_id(conn)
        first = rawtxn.producer_batch([b"r-0", b"r-1"], producer_id=pid, epoch=0, sequence=0)
        assert rawtxn.produce(conn, topic, 0, first) == (NONE, 0)
        assert rawtxn.init_producer_id(conn, pid, 0) == (NONE, pid, 1)
        again = rawtxn.producer_batch([b"r-1", b"r-2"], producer_id=pid, epoch=1, sequence=0)
        assert rawtxn.produce(conn, topic, 0, again) == (NONE, 2)
    final, unread = read_all(broker.bootstrap, topic, 1)
    assert unread == [] and final == {0: [(0, "r-0"), (1, "r-1"), (2, "r-1"), (3, "r-2")]}
    wanted = duplicate_offsets(final)
    assert wanted == {0: {1, 2}}
    # a broker that cannot be reached first, as a dead one in a cluster's bootstrap list
    idents = producer_identities([f"127.0.0.1:{free_port()}", broker.bootstrap], topic, wanted)
    assert idents == {(0, 1): (pid, 0, 1), (0, 2): (pid, 1, 0)}

    h = History(lock=threading.Lock())
    h.acks = [(0, 0, "r-0", 1.0), (0, 1, "r-1", 1.1), (0, 3, "r-2", 1.2)]
    r = check(h, final, {}, 1, (0.0, 2.0), [], idents)
    assert (r["duplicated"], r["rewritten_by_new_epoch"], r["lost"], r["conflicts"]) == (0, 1, 0, 0)
    one_writer = {**idents, (0, 2): (pid, 0, 1)}
    r = check(h, final, {}, 1, (0.0, 2.0), [], one_writer)
    assert (r["duplicated"], r["rewritten_by_new_epoch"]) == (1, 0)
    r = check(h, final, {}, 1, (0.0, 2.0), [], {(0, 1): idents[(0, 1)]})  # a writer not read: counted
    assert (r["duplicated"], r["rewritten_by_new_epoch"]) == (1, 0)
