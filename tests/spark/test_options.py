"""Option parsing of the strata source: Spark's Kafka forms, precedence and clear errors."""

from __future__ import annotations

import pytest

from spark.options import EARLIEST, LATEST, StrataSourceError, parse_options
from spark.source import _rate_limit

BASE = {"object.store": "file:///tmp/x"}


def test_kafka_forms_and_defaults() -> None:
    o = parse_options({**BASE, "subscribe": "a, b", "startingOffsets": '{"a": {"0": 5, "1": -2}}',
                       "endingOffsets": '{"a": {"0": 9}}', "kafka.bootstrap.servers": "h:1",
                       "includeHeaders": "TRUE", "minPartitions": "4", "s3.endpoint": "http://e"},
                      streaming=False)
    assert o.subscribe == ("a", "b")
    assert dict(o.starting.per_partition) == {("a", 0): 5, ("a", 1): EARLIEST}
    assert o.starting.default == EARLIEST and o.ending.default == LATEST
    assert dict(o.ending.per_partition) == {("a", 0): 9}
    assert o.bootstrap_servers == "h:1" and o.include_headers and o.min_partitions == 4
    assert o.s3 == {"endpoint": "http://e"}
    assert parse_options({**BASE, "subscribe": "a"}, streaming=True).starting.default == LATEST
    # option names are case-insensitive, as Spark's
    assert parse_options({**BASE, "SUBSCRIBEPATTERN": "or.*"}, streaming=False).matches("orders")


def test_timestamps_take_precedence_over_offsets() -> None:
    o = parse_options({**BASE, "subscribe": "a", "startingOffsets": "earliest", "startingTimestamp": "1000",
                       "startingOffsetsByTimestamp": '{"a": {"0": 5}}'}, streaming=False)
    assert o.starting.global_timestamp == 1000
    o = parse_options({**BASE, "subscribe": "a", "startingOffsets": "earliest",
                       "startingOffsetsByTimestamp": '{"a": {"0": 5}}'}, streaming=False)
    assert o.starting.global_timestamp is None and dict(o.starting.per_partition_timestamp) == {("a", 0): 5}


@pytest.mark.parametrize(("options", "streaming", "message"), [
    ({"subscribe": "a"}, False, None),
    ({}, False, "exactly one of"),
    ({"subscribe": "a", "subscribePattern": "b"}, False, "exactly one of"),
    ({"assign": "[1]"}, False, "assign must be JSON"),
    ({"assign": '{"a": [-1]}'}, False, "assign must be JSON"),
    ({"subscribePattern": "("}, False, "not a regex"),
    ({"subscribe": "a", "startingOffsets": "latest"}, False, "not valid for a batch"),
    ({"subscribe": "a", "startingOffsets": '{"a": {"0": -1}}'}, False, "not valid for a batch"),
    ({"subscribe": "a", "endingOffsets": "earliest"}, False, "not valid for a batch"),
    ({"subscribe": "a", "endingOffsets": "latest"}, True, "for batch reads"),
    ({"subscribe": "a", "startingOffsets": '{"a": {"0": -3}}'}, False, "is not an offset"),
    ({"subscribe": "a", "startingOffsets": '{"a": {"0": "x"}}'}, False, "must be JSON"),
    ({"subscribe": "a", "startingTimestamp": "soon"}, False, "must be an integer"),
    ({"subscribe": "a", "failOnDataLoss": "maybe"}, False, "true or false"),
    ({"subscribe": "a", "maxOffsetsPerTrigger": "-5"}, True, "positive integer"),
    ({"subscribe": "a", "startingOffsetsByTimestampStrategy": "random"}, False, "error or latest"),
    ({"subscribe": "a", "kafkaa.bootstrap": "x"}, False, "unknown option"),
])
def test_bad_options_say_what_is_wrong(options: dict, streaming: bool, message: str | None) -> None:
    if message is None:
        parse_options({**BASE, **options}, streaming=streaming)
        return
    with pytest.raises(StrataSourceError, match=message):
        parse_options({**BASE, **options}, streaming=streaming)


def test_object_store_is_required() -> None:
    with pytest.raises(StrataSourceError, match="object.store is required"):
        parse_options({"subscribe": "a"}, streaming=False)


def test_max_offsets_per_trigger_is_spread_by_lag() -> None:
    first = {("a", 0): 0, ("a", 1): 100, ("a", 2): 50}
    latest = {("a", 0): 900, ("a", 1): 200, ("a", 2): 50}
    out = _rate_limit(first, latest, 500)
    assert out == {("a", 0): 450, ("a", 1): 150, ("a", 2): 50}
    assert sum(out[tp] - first[tp] for tp in out) <= 500
    assert _rate_limit(first, latest, 10_000) == latest
