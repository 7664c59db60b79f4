"""The broker's HTTP side: Prometheus metrics and the admin API (round trips and a
schemathesis run against its OpenAPI document). The console in headless Chromium, the
record browser and the kafka_exporter-named series: tests/e2e/test_console.py."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from typing import Any

import pytest
from confluent_kafka import TopicPartition
from prometheus_client.parser import text_string_to_metric_families

from tests.e2e import helpers, rawkafka

RECORDS = 500


def _call(broker: Any, method: str, path: str, body: Any = None, raw: bytes | None = None) -> tuple[int, Any]:
    data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
    req = urllib.request.Request(f"{broker.admin_url}{path}", data=data, method=method,
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


def _metrics(broker: Any) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    with urllib.request.urlopen(f"{broker.admin_url}/metrics", timeout=10) as resp:
        assert resp.headers["Content-Type"].startswith("text/plain")
        text = resp.read().decode()
    out = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return out


def test_metrics_count_what_was_produced_and_consumed(broker: Any) -> None:
    topic = helpers.topic_name("metrics")
    helpers.create_topic(broker.bootstrap, topic, partitions=1)
    values = [b"m" * (i % 90 + 10) for i in range(RECORDS)]
    helpers.produce_values(broker.bootstrap, topic, values, **{"batch.num.messages": 50})
    group = helpers.topic_name("metrics-group")
    c = helpers.consumer(broker.bootstrap, **{"group.id": group})
    try:
        c.assign([TopicPartition(topic, 0, 0)])
        got = []
        deadline = time.monotonic() + 60
        while len(got) < RECORDS and time.monotonic() < deadline:
            got += [m for m in c.consume(num_messages=RECORDS, timeout=5) if m.error() is None]
        c.commit(offsets=[TopicPartition(topic, 0, RECORDS - 100)], asynchronous=False)
    finally:
        c.close()
    assert len(got) == RECORDS
    m = _metrics(broker)
    t = (("topic", topic),)
    assert m[("strata_topic_records_in_total", t)] == RECORDS
    assert m[("strata_topic_bytes_in_total", t)] > sum(len(v) for v in values)
    assert m[("strata_topic_records_out_total", t)] == RECORDS
    assert m[("strata_topic_bytes_out_total", t)] > sum(len(v) for v in values)
    p = (("partition", "0"), ("topic", topic))
    assert m[("strata_partition_log_end_offset", p)] == RECORDS
    assert m[("strata_partition_high_watermark", p)] == RECORDS
    assert m[("strata_partition_local_bytes", p)] > 0
    g = (("group", group), ("partition", "0"), ("topic", topic))
    assert m[("strata_consumer_group_committed_offset", g)] == RECORDS - 100
    assert m[("strata_consumer_group_lag", g)] == 100
    produce = m[("strata_kafka_requests_total", (("api", "Produce"),))]
    assert produce >= RECORDS // 50
    assert m[("strata_kafka_request_duration_seconds_count", (("api", "Produce"),))] == produce
    assert m[("strata_kafka_request_duration_seconds_bucket", (("api", "Produce"), ("le", "+Inf")))] == produce
    assert ("strata_tiered_fetch_queue_depth", ()) in m
    assert ("strata_tiering_upload_failures_total", ()) in m

    # strata_connections counts the Kafka listener's open connections
    # the clients above close their connections asynchronously: count from a settled gauge
    idle = _settled_connections(broker)
    conns = [rawkafka.Connection.to(broker.bootstrap) for _ in range(3)]
    try:
        for conn in conns:  # answered, so accepted by the broker
            conn.call(rawkafka.API_VERSIONS, 0, b"")
        assert _metrics(broker)[("strata_connections", ())] == idle + 3
    finally:
        for conn in conns:
            conn.close()
    helpers.wait_until(lambda: _metrics(broker)[("strata_connections", ())] == idle,
                       "closed connections to leave the gauge", timeout=10)


def test_metrics_count_error_codes(broker: Any) -> None:
    from tests.e2e import rawkafka  # raw protocol: a produce to a partition that does not exist

    topic = helpers.topic_name("errors")
    helpers.create_topic(broker.bootstrap, topic, partitions=1)
    result = rawkafka.produce(broker.bootstrap, topic, 7, rawkafka.record_batch([b"x"]))
    assert result.error_code == 3  # UNKNOWN_TOPIC_OR_PARTITION
    m = _metrics(broker)
    assert m[("strata_kafka_request_errors_total",
              (("api", "Produce"), ("error", "UNKNOWN_TOPIC_OR_PARTITION")))] >= 1


def test_admin_api_round_trips_a_topic(broker: Any) -> None:
    name = helpers.topic_name("rest")
    status, body = _call(broker, "POST", "/v1/topics",
                         {"name": name, "partitions": 3, "configs": {"retention.ms": "3600000"}})
    assert status == 201, body
    assert body["partitions"] == 3 and body["configs"]["retention.ms"]["value"] == "3600000"
    assert body["configs"]["retention.ms"]["source"] == "DYNAMIC_TOPIC_CONFIG"
    helpers.wait_for_topic(broker.bootstrap, name, 3)  # real Kafka clients see it
    status, body = _call(broker, "GET", f"/v1/topics/{name}")
    assert status == 200 and [s["partition"] for s in body["partition_states"]] == [0, 1, 2]
    assert name in [t["name"] for t in _call(broker, "GET", "/v1/topics")[1]["topics"]]

    status, body = _call(broker, "PATCH", f"/v1/topics/{name}/configs",
                         {"set": {"segment.bytes": "1048576"}, "delete": ["retention.ms"]})
    assert status == 200, body
    assert body["configs"]["segment.bytes"]["value"] == "1048576"
    assert body["configs"]["retention.ms"]["source"] != "DYNAMIC_TOPIC_CONFIG"

    assert _call(broker, "POST", "/v1/topics", {"name": name})[0] == 409
    status, body = _call(broker, "PATCH", f"/v1/topics/{name}/configs", {"set": {"retention.ms": "soon"}})
    assert (status, body["error_code"]) == (400, "INVALID_CONFIG")
    assert _call(broker, "POST", "/v1/topics", raw=b"{not json")[0] == 400
    assert _call(broker, "POST", "/v1/topics", {"name": "bad/name"})[0] == 400
    assert _call(broker, "POST", "/v1/topics", {"name": name + "x", "partitions": "3"})[0] == 400

    status, body = _call(broker, "DELETE", f"/v1/topics/{name}")
    assert (status, body) == (200, {"deleted": name})
    status, body = _call(broker, "GET", f"/v1/topics/{name}")
    assert (status, body["error_code"]) == (404, "UNKNOWN_TOPIC_OR_PARTITION")
    assert _call(broker, "GET", "/v1/groups/no-such-group")[0] == 404
    status, body = _call(broker, "GET", "/v1/cluster")
    assert status == 200 and body["brokers"][0]["port"] == broker.port


def test_admin_api_conforms_to_its_openapi_document(broker: Any) -> None:
    """schemathesis: generated requests for every operation; no 500, every answer in the schema."""
    import schemathesis
    from hypothesis import HealthCheck, given, settings
    from schemathesis.checks import not_a_server_error
    from schemathesis.specs.openapi.checks import (
        content_type_conformance,
        response_schema_conformance,
        status_code_conformance,
    )

    # Not positive_data_acceptance: a schema-valid body may still name a config value the
    # broker rejects (retention.ms=abc), which is a documented 400, not a bug.
    checks = [not_a_server_error, status_code_conformance, content_type_conformance,
              response_schema_conformance]

    helpers.create_topic(broker.bootstrap, helpers.topic_name("fuzz"), partitions=2)
    schema = schemathesis.openapi.from_url(f"{broker.admin_url}/v1/openapi.json")
    schema.config.base_url = broker.admin_url
    failures = []
    operations = [op.ok() for op in schema.get_all_operations()]
    assert len(operations) >= 12
    for operation in operations:

        @settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck), database=None)
        @given(case=operation.as_strategy())
        def run(case: Any) -> None:
            case.call_and_validate(checks=checks)

        try:
            run()
        except Exception as exc:  # noqa: BLE001 - gather every operation's failure
            failures.append(f"{operation.method.upper()} {operation.path}: {exc}")
    assert not failures, "\n\n".join(failures)


def test_a_create_past_kafkas_bound_of_one_operation_is_refused_and_the_broker_carries_on(broker: Any) -> None:
    """More than 10,000 partitions in one create: POLICY_VIOLATION, as Kafka's controller answers,
    before anything is placed; the broker goes on serving (the descriptors a partition needs are
    bounded apart: tests/e2e/test_connection_limits.py)."""
    from confluent_kafka import KafkaError
    from confluent_kafka.admin import NewTopic

    client = helpers.admin(broker.bootstrap)
    future = client.create_topics([NewTopic("too-many", num_partitions=10_001, replication_factor=1)],
                                  request_timeout=30)["too-many"]
    with pytest.raises(Exception, match="excessively large batch operation") as refused:
        future.result(timeout=60)
    assert refused.value.args[0].code() == KafkaError.POLICY_VIOLATION
    assert "too-many" not in client.list_topics(timeout=10).topics
    name = helpers.topic_name("after")
    helpers.create_topic(broker.bootstrap, name, partitions=2)
    assert helpers.produce_values(broker.bootstrap, name, [b"still fine"]) == [0]


def _settled_connections(broker: Any) -> int:
    """The open-connection gauge once it reads the same twice, 0.5 s apart."""
    seen: list[int] = []

    def settled() -> bool:
        seen.append(_metrics(broker)[("strata_connections", ())])
        time.sleep(0.5)
        return len(seen) >= 2 and seen[-1] == seen[-2]

    helpers.wait_until(settled, "the connection gauge to settle", timeout=15)
    return seen[-1]
