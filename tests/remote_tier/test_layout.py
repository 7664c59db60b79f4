"""The object layout's keys: made and parsed in remote_tier.layout only."""

from __future__ import annotations

import uuid

import pytest

from remote_tier.layout import PartitionLayout, SegmentFile, SegmentObjectKey, new_upload_id

TOPIC_ID = "3f1c1a7e-8f0e-4c0b-9a57-2f2f1d0d6b11"


def test_partition_objects_sit_under_topics_topic_id_partition() -> None:
    layout = PartitionLayout("strata/prod/", TOPIC_ID, 7)
    upload = "0123456789abcdef0123456789abcdef"
    assert layout.directory == f"strata/prod/topics/{TOPIC_ID}/7/"
    assert layout.manifest_key == f"strata/prod/topics/{TOPIC_ID}/7/manifest.json"
    assert layout.segment_keys(42, upload) == (
        f"strata/prod/topics/{TOPIC_ID}/7/00000000000000000042-{upload}.log",
        f"strata/prod/topics/{TOPIC_ID}/7/00000000000000000042-{upload}.index",
        f"strata/prod/topics/{TOPIC_ID}/7/00000000000000000042-{upload}.timeindex",
    )


def test_an_empty_prefix_starts_at_topics_and_uuids_are_canonical() -> None:
    layout = PartitionLayout("", str(uuid.UUID(TOPIC_ID)).upper(), 0)
    assert layout.manifest_key == f"topics/{TOPIC_ID}/0/manifest.json"


def test_segment_keys_parse_back_and_other_keys_do_not() -> None:
    layout = PartitionLayout("p", TOPIC_ID, 1)
    upload = new_upload_id()
    for file in SegmentFile:
        key = layout.segment_key(12, upload, file)
        assert layout.parse_segment_key(key) == SegmentObjectKey(12, upload, file)
    assert layout.parse_segment_key(layout.manifest_key) is None
    assert layout.parse_segment_key(f"p/topics/{TOPIC_ID}/2/{12:020d}-{upload}.log") is None
    assert layout.parse_segment_key(f"p/topics/{TOPIC_ID}/1/{12:020d}-{upload}.log.tmp") is None


def test_upload_ids_are_fresh_hex() -> None:
    ids = {new_upload_id() for _ in range(100)}
    assert len(ids) == 100 and all(len(i) == 32 and int(i, 16) >= 0 for i in ids)


@pytest.mark.parametrize(
    ("topic_id", "partition", "base", "upload"),
    [
        ("not-a-uuid", 0, 0, "0" * 32),
        (TOPIC_ID, -1, 0, "0" * 32),
        (TOPIC_ID, 0, -1, "0" * 32),
        (TOPIC_ID, 0, 0, "../x"),
    ],
)
def test_invalid_parts_are_refused(topic_id: str, partition: int, base: int, upload: str) -> None:
    with pytest.raises(ValueError):
        PartitionLayout("", topic_id, partition).segment_key(base, upload, SegmentFile.LOG)
