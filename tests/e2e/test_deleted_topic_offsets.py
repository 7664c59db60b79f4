"""A deleted topic's committed offsets go with it, as in Kafka (issue 21, defect 12):
tombstoned in __consumer_offsets, so OffsetFetch, `strata groups describe`, the admin
API and a restarted broker no longer see them, and a topic made again under the same
name starts with none."""

from __future__ import annotations

import json
import urllib.request
from typing import Any

from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition

from tests.e2e import helpers
from tests.service.cli.helpers import ok, strata

T = helpers.CLIENT_TIMEOUT_S


def _committed(bootstrap: str, group: str) -> dict[tuple[str, int], int]:
    client = helpers.admin(bootstrap)
    futures = client.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)],
                                                 request_timeout=T)
    result = futures[group].result(timeout=T + 5)
    return {(tp.topic, tp.partition): tp.offset for tp in result.topic_partitions if tp.offset >= 0}


def _rest_offsets(broker: Any, group: str) -> set[str]:
    with urllib.request.urlopen(f"{broker.admin_url}/v1/groups/{group}", timeout=10) as resp:
        return {row["topic"] for row in json.loads(resp.read())["offsets"]}


def test_deleting_a_topic_removes_its_committed_offsets(start_broker: Any) -> None:
    b = start_broker(sets={"offsets.topic.num.partitions": "3"})
    gone, kept = helpers.topic_name("gone"), helpers.topic_name("kept")
    group = helpers.topic_name("g-deleted")
    for topic in (gone, kept):
        helpers.create_topic(b.bootstrap, topic)
        helpers.produce_values(b.bootstrap, topic, [b"x"] * 10)
    c = helpers.consumer(b.bootstrap, **{"group.id": group})
    try:
        c.commit(offsets=[TopicPartition(gone, 0, 5), TopicPartition(kept, 0, 7)],
                 asynchronous=False)
    finally:
        c.close()
    assert _committed(b.bootstrap, group) == {(gone, 0): 5, (kept, 0): 7}

    client = helpers.admin(b.bootstrap)
    client.delete_topics([gone], request_timeout=T)[gone].result(timeout=T + 5)

    assert _committed(b.bootstrap, group) == {(kept, 0): 7}
    out = ok(strata("groups", "describe", group, bootstrap=b.bootstrap)).stdout
    assert kept in out and gone not in out
    assert _rest_offsets(b, group) == {kept}

    b.restart()  # the tombstones are in __consumer_offsets: replayed, the offsets stay gone
    assert _committed(b.bootstrap, group) == {(kept, 0): 7}
    helpers.create_topic(b.bootstrap, gone)  # the same name again starts with no offset
    assert _committed(b.bootstrap, group) == {(kept, 0): 7}
