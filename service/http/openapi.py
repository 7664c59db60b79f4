"""The OpenAPI 3.0 document of the admin API, served at ``/v1/openapi.json``.

Kept beside the handlers (``service/http/server.py``) and checked against them by
a schemathesis run in the tests: every status a route can answer is listed, and
every body matches its schema.
"""

from __future__ import annotations

from typing import Any

__all__ = ["OPENAPI"]


def _obj(required: list[str], **props: Any) -> dict[str, Any]:
    """An object schema; ``required`` is left out when empty (OpenAPI 3.0 wants it non-empty)."""
    out: dict[str, Any] = {"type": "object", "properties": props}
    if required:
        out["required"] = required
    return out


_INT = {"type": "integer"}
_STR = {"type": "string"}
_NULL_STR = {"type": "string", "nullable": True}
_NULL_INT = {"type": "integer", "nullable": True}


def _ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}


def _json(schema: dict[str, Any], description: str) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


def _errors(*statuses: int) -> dict[str, Any]:
    text = {400: "Bad input", 404: "Not found", 409: "Conflict", 503: "Not ready"}
    return {str(s): _json(_ref("Error"), text[s]) for s in statuses}


_BOOL = {"type": "boolean"}
_NUM = {"type": "number"}
_NUM_SERIES = {"type": "array", "items": {"type": "number", "nullable": True}}
_INTS = {"type": "array", "items": _INT}


def _path(name: str, schema: dict[str, Any]) -> dict[str, Any]:
    return {"name": name, "in": "path", "required": True, "schema": schema}


def _query(name: str, schema: dict[str, Any], description: str = "") -> dict[str, Any]:
    out = {"name": name, "in": "query", "required": False, "schema": schema}
    if description:
        out["description"] = description
    return out


def _array(name: str) -> dict[str, Any]:
    return {"type": "array", "items": _ref(name)}


_TOPIC_PARAM = _path("topic", {"type": "string", "minLength": 1})
_GROUP_PARAM = _path("group", {"type": "string", "minLength": 1})
_PAGE = [_query("offset", {"type": "integer", "minimum": 0, "maximum": 2**31 - 1}, "first item (default 0)"),
         _query("limit", {"type": "integer", "minimum": 1, "maximum": 1000}, "items per page (default: all)")]

_SCHEMAS: dict[str, Any] = {
    "Error": _obj(["error_code", "message"], error_code=_STR, message=_STR),
    "Broker": _obj(["node_id", "host", "port"], node_id=_INT, host=_STR, port=_INT, rack=_NULL_STR,
                   fenced=_BOOL, controller=_BOOL, this_broker=_BOOL),
    "Rates": _obj(["bytes_in_per_sec", "bytes_out_per_sec", "records_in_per_sec", "records_out_per_sec"],
                  bytes_in_per_sec=_NUM, bytes_out_per_sec=_NUM, records_in_per_sec=_NUM,
                  records_out_per_sec=_NUM),
    "Cluster": _obj(["cluster_id", "controller_id", "brokers", "topics"], cluster_id=_STR,
                    controller_id=_INT, node_id=_INT, brokers=_array("Broker"), topics=_INT,
                    user_topics=_INT, internal_topics=_INT, partitions=_INT, groups=_INT,
                    object_store={"type": "string", "description": "file:///path or s3://bucket/prefix"},
                    object_store_endpoint=_NULL_STR, tiering_enabled=_BOOL, version=_STR,
                    throughput=_ref("Rates")),
    "TopicSummary": _obj(
        ["name", "topic_id", "partitions"], name=_STR, topic_id=_STR, partitions=_INT, internal=_BOOL,
        hosted_partitions=_INT, records=_INT, local_bytes=_INT, remote_bytes=_INT,
        local_and_remote_bytes=_INT, active_segment_bytes=_INT, upload_lag_offsets=_INT,
        upload_lag_bytes=_INT, upload_failures=_INT, last_upload_error=_NULL_STR,
        remote_storage_enable=_BOOL, bytes_in_per_sec=_NUM, bytes_out_per_sec=_NUM),
    "ConfigValue": _obj(["value", "source"], value=_NULL_STR, source=_STR, is_default=_BOOL,
                        read_only=_BOOL, sensitive=_BOOL),
    "PartitionState": _obj(
        ["topic", "partition", "log_start_offset", "high_watermark", "log_end_offset", "local_bytes",
         "remote_bytes", "upload_lag_offsets", "upload_lag_bytes"],
        topic=_STR, partition=_INT, leader=_INT, replicas=_INTS, isr=_INTS, log_start_offset=_INT,
        local_log_start_offset=_INT, remote_log_start_offset=_NULL_INT, remote_next_offset=_NULL_INT,
        high_watermark=_INT, log_end_offset=_INT, local_bytes=_INT, local_segments=_INT,
        remote_bytes=_INT, remote_segments=_INT, local_and_remote_bytes=_INT,
        active_segment_base_offset=_INT, active_segment_bytes=_INT, remote_storage_enable=_BOOL,
        upload_lag_offsets=_INT, upload_lag_bytes=_INT, upload_failures=_INT, last_upload_error=_NULL_STR,
        cleaner={**_obj(["tier", "dirty_ratio", "state"], tier={"type": "string", "enum": ["local", "remote"]},
                        dirty_ratio=_NUM, cleaned_up_to=_NULL_INT, state=_STR, passes=_INT, error=_NULL_STR),
                 "nullable": True,
                 "description": "compacted topics: the log cleaner's progress (the remote cleaner's when tiered)"}),
    "Topic": _obj(["name", "topic_id", "partitions", "configs"], name=_STR, topic_id=_STR, partitions=_INT,
                  internal=_BOOL, configs={"type": "object", "additionalProperties": _ref("ConfigValue")},
                  partition_states=_array("PartitionState")),
    "NewTopic": {**_obj(["name"], name={"type": "string", "pattern": "^[a-zA-Z0-9._-]{1,249}$"},
                        partitions={"type": "integer", "minimum": 1, "maximum": 1000},
                        replication_factor={"type": "integer"},
                        configs={"type": "object", "additionalProperties": _STR}),
                 "additionalProperties": False},
    "ConfigChange": {**_obj([], set={"type": "object", "additionalProperties": _STR},
                            delete={"type": "array", "items": _STR}), "additionalProperties": False},
    "GroupSummary": _obj(["group_id", "protocol_type", "state", "lag"], group_id=_STR, protocol_type=_STR,
                         state=_STR, lag=_INT, members=_INT, partitions=_INT,
                         type={"type": "string", "enum": ["classic", "consumer"]}),
    "GroupOffset": _obj(["topic", "partition", "committed_offset", "lag"], topic=_STR, partition=_INT,
                        committed_offset=_INT, high_watermark=_NULL_INT, lag=_INT, member_id=_NULL_STR),
    "Member": _obj(["member_id", "client_id", "client_host"], member_id=_STR, group_instance_id=_NULL_STR,
                   client_id=_STR, client_host=_STR, member_epoch=_INT,
                   assignment=_array("TopicPartitions"), target_assignment=_array("TopicPartitions")),
    "TopicPartitions": _obj(["topic", "partitions"], topic=_STR, partitions=_INTS),
    "Group": _obj(["group_id", "state", "members", "offsets", "lag"], group_id=_STR, state=_STR,
                  protocol_type=_STR, protocol=_STR, generation_id=_INT, assignment_epoch=_INT,
                  type={"type": "string", "enum": ["classic", "consumer"]},
                  members=_array("Member"), offsets=_array("GroupOffset"), lag=_INT),
    "History": _obj(
        ["interval_s", "timestamps", "totals", "topics", "groups"], interval_s=_NUM,
        timestamps={**_NUM_SERIES, "description": "sample times, unix seconds, oldest first"},
        totals={"type": "object", "additionalProperties": _NUM_SERIES},
        topics={"type": "object", "additionalProperties": {
            "type": "object", "additionalProperties": _NUM_SERIES}},
        groups={"type": "object", "additionalProperties": {
            "type": "object", "additionalProperties": _NUM_SERIES}}),
    "Record": _obj(["offset", "timestamp", "key", "value"], offset=_INT, timestamp=_INT, key=_NULL_STR,
                   key_format={"type": "string", "enum": ["text", "hex", "null"]}, key_size=_INT,
                   value=_NULL_STR, value_format={"type": "string", "enum": ["text", "hex", "null"]},
                   value_size=_INT, transactional=_BOOL,
                   headers={"type": "array", "items": _obj(["key"], key=_STR, value=_NULL_STR)}),
    "Records": _obj(["topic", "partition", "records", "next_offset", "high_watermark"], topic=_STR,
                    partition=_INT, log_start_offset=_INT, high_watermark=_INT, from_offset=_INT,
                    next_offset=_INT, bytes_read=_INT, records=_array("Record"),
                    sources={"type": "array", "items": {"type": "string", "enum": ["local", "remote"]}},
                    note=_NULL_STR),
}

_STATUS_OBJ = _obj(["status"], status=_STR)
_RECORDS_PARAMS = [
    _path("partition", {"type": "integer", "minimum": 0, "maximum": 2**31 - 1}),
    _query("offset", {"type": "integer", "minimum": 0}, "first offset (default: the last max_records)"),
    _query("timestamp", {"type": "integer", "minimum": 0},
           "epoch ms: from the first record at or after it (not with offset)"),
    _query("max_records", {"type": "integer", "minimum": 1, "maximum": 500}, "default 50"),
    _query("max_bytes", {"type": "integer", "minimum": 1, "maximum": 8 * 1024 * 1024},
           "batch bytes read at most (default 1 MiB)"),
    _query("encoding", {"type": "string", "enum": ["text", "hex"]}, "keys and values as UTF-8 text "
           "(hex where they are not) or hex"),
    _query("preview_bytes", {"type": "integer", "minimum": 1, "maximum": 65536},
           "bytes shown of each key, value and header (default 1024)"),
]

OPENAPI: dict[str, Any] = {
    "openapi": "3.0.3",
    "info": {"title": "Strata admin API", "version": "1",
             "description": "Cluster, topics (with tiering state), consumer groups, counter history "
                            "and records of a Strata broker. Errors are JSON {error_code, message}."},
    "paths": {
        "/v1/health": {"get": {"summary": "Liveness", "responses": {"200": _json(_STATUS_OBJ, "Alive")}}},
        "/v1/ready": {"get": {"summary": "Readiness: recovery done and the object store answers",
                              "responses": {"200": _json(_STATUS_OBJ, "Ready"), **_errors(503)}}},
        "/v1/cluster": {"get": {"summary": "Cluster id, brokers, controller, object store, counts and "
                                           "this broker's throughput",
                                "responses": {"200": _json(_ref("Cluster"), "The cluster")}}},
        "/v1/brokers": {"get": {"summary": "Registered brokers", "responses": {"200": _json(
            _obj(["brokers"], brokers=_array("Broker")), "Brokers")}}},
        "/v1/history": {"get": {
            "summary": "Per-second rates and group lag over the last minutes (sampled in the broker)",
            "parameters": [_query("topic", {"type": "array", "items": _STR, "maxItems": 100},
                                  "topics whose rates to include"),
                           _query("group", {"type": "array", "items": _STR, "maxItems": 100},
                                  "groups whose lag to include")],
            "responses": {"200": _json(_ref("History"), "History"), **_errors(400)}}},
        "/v1/topics": {
            "get": {"summary": "Topics summed over their partitions: bytes by tier, upload lag, rates",
                    "parameters": [_query("kind", {"type": "string", "enum": ["all", "user", "internal"]},
                                          "internal: Kafka's internal and __-prefixed topics"),
                                   _query("q", _STR, "only names containing this"), *_PAGE],
                    "responses": {"200": _json(_obj(["topics", "total"], topics=_array("TopicSummary"),
                                                    total=_INT, internal_topics=_INT), "Topics"),
                                  **_errors(400)}},
            "post": {"summary": "Create a topic",
                     "requestBody": {"required": True, "content": {"application/json": {"schema": _ref("NewTopic")}}},
                     "responses": {"201": _json(_ref("Topic"), "Created"), **_errors(400, 409, 503)}},
        },
        "/v1/topics/{topic}": {
            "parameters": [_TOPIC_PARAM],
            "get": {"summary": "A topic: configs and partitions",
                    "responses": {"200": _json(_ref("Topic"), "The topic"), **_errors(400, 404)}},
            "delete": {"summary": "Delete a topic (and its data in the bucket)",
                       "responses": {"200": _json(_obj(["deleted"], deleted=_STR), "Deleted"),
                                     **_errors(400, 404, 503)}},
        },
        "/v1/topics/{topic}/configs": {
            "parameters": [_TOPIC_PARAM],
            "patch": {"summary": "Set and delete config overrides",
                      "requestBody": {"required": True,
                                      "content": {"application/json": {"schema": _ref("ConfigChange")}}},
                      "responses": {"200": _json(_ref("Topic"), "The topic after the change"),
                                    **_errors(400, 404, 503)}},
        },
        "/v1/topics/{topic}/partitions": {
            "parameters": [_TOPIC_PARAM],
            "get": {"summary": "Partitions (paged): leader, ISR, offsets, local and remote ranges and bytes, "
                               "upload lag of sealed segments",
                    "parameters": _PAGE,
                    "responses": {"200": _json(_obj(["topic", "topic_id", "partitions"], topic=_STR,
                                                    topic_id=_STR, total=_INT,
                                                    partitions=_array("PartitionState")),
                                               "Partitions"), **_errors(400, 404)}},
        },
        "/v1/topics/{topic}/partitions/{partition}/records": {
            "parameters": [_TOPIC_PARAM],
            "get": {"summary": "Records of a partition from an offset or a time, bounded in count and bytes",
                    "parameters": _RECORDS_PARAMS,
                    "responses": {"200": _json(_ref("Records"), "Records"), **_errors(400, 404, 503)}},
        },
        "/v1/groups": {"get": {"summary": "Consumer groups (paged) with members and total lag",
                               "parameters": _PAGE, "responses": {
            "200": _json(_obj(["groups"], groups=_array("GroupSummary"), total=_INT), "Groups"),
            **_errors(400, 503)}}},
        "/v1/groups/{group}": {
            "parameters": [_GROUP_PARAM],
            "get": {"summary": "A group: members and their assignments, committed offsets and lag per partition",
                    "responses": {"200": _json(_ref("Group"), "The group"), **_errors(400, 404, 503)}},
        },
    },
    "components": {"schemas": _SCHEMAS},
}
