"""A few slow or lying clients never stop the others (issue #36, item 1).

On a real broker with its default request-memory pool (256 MiB) and request size
limit (100 MiB): three connections that declare 100 MiB requests and stall, three that
trickle one byte at a time, and a frame fuzzer run together while a normal producer
sends, and a new connection asks for ApiVersions. Before, three stalled 100 MiB
declarations exhausted the pool and no connection's requests were read for as long
as a stalled one was left open; a trickle was never closed.
"""

from __future__ import annotations

from typing import Any

from tests.e2e import helpers
from tests.e2e.slow_clients import api_versions_seconds, drip, fuzz, measure_produce, stall


def test_stalled_trickled_and_fuzzed_requests_leave_a_normal_producer_served(start_broker: Any) -> None:
    broker = start_broker(sets={"request.receive.grace.ms": "1500", "auto.create.topics.enable": "false"})
    topic = helpers.topic_name("slow-clients")
    helpers.create_topic(broker.bootstrap, topic)
    fuzz_topic = helpers.topic_name("fuzzed")
    helpers.create_topic(broker.bootstrap, fuzz_topic)
    attacks = [stall(broker.bootstrap), drip(broker.bootstrap, interval_s=0.5), fuzz(broker.bootstrap, fuzz_topic)]
    try:
        helpers.wait_until(lambda: sum(a.closed_by_broker for a in attacks[:2]) >= 0, "attacks running", 5)
        probe_s = api_versions_seconds(broker.bootstrap, timeout=10)
        result = measure_produce(broker.bootstrap, topic, seconds=6, rate=100)
        probe_after_s = api_versions_seconds(broker.bootstrap, timeout=10)
        # the trickles and the stalls are closed once the grace has passed (and come back)
        helpers.wait_until(lambda: attacks[1].closed_by_broker >= 3, "trickled requests closed", 10)
        helpers.wait_until(lambda: attacks[0].closed_by_broker >= 3, "stalled requests closed", 10)
    finally:
        for attack in attacks:
            attack.stop()
    assert probe_s < 2 and probe_after_s < 2, (probe_s, probe_after_s)
    assert result.failed == 0 and result.delivered == result.sent, vars(result) | {"latencies_ms": None}
    # every acknowledged record is in the topic, in order
    values = [m.value() for m in helpers.consume(broker.bootstrap, topic, [0], result.sent)]
    assert values == [b"normal-%d" % i for i in range(result.sent)]
    assert result.percentile(99) < 1000, f"p99 {result.percentile(99):.0f} ms"
    assert broker.running and "Traceback" not in broker.log_text()
