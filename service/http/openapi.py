"""The OpenAPI 3.0 document of the admin API, served at ``/v1/openapi.json``.

Kept beside the handlers (``service/http/server.py``) and checked against them by
a schemathesis run in the tests: every status a route can answer is listed, and
every body matches its schema.
"""

from __future__ import annotations

from typing import Any

__all__ = ["OPENAPI"]


def _obj(required: list[str], **props: Any) -> dict[str, Any]:
    return {"type": "object", "required": required, "properties": props}


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


_TOPIC_PARAM = {"name": "topic", "in": "path", "required": True, "schema": {"type": "string", "minLength": 1}}
_GROUP_PARAM = {"name": "group", "in": "path", "required": True, "schema": {"type": "string", "minLength": 1}}

_SCHEMAS: dict[str, Any] = {
    "Error": _obj(["error_code", "message"], error_code=_STR, message=_STR),
    "Broker": _obj(["node_id", "host", "port"], node_id=_INT, host=_STR, port=_INT, rack=_NULL_STR),
    "Cluster": _obj(["cluster_id", "controller_id", "brokers", "topics"], cluster_id=_STR,
                    controller_id=_INT, brokers={"type": "array", "items": _ref("Broker")}, topics=_INT,
                    object_store=_STR, tiering_enabled={"type": "boolean"}),
    "TopicSummary": _obj(["name", "topic_id", "partitions"], name=_STR, topic_id=_STR, partitions=_INT,
                         local_bytes=_INT, remote_bytes=_INT, upload_lag_bytes=_INT),
    "ConfigValue": _obj(["value", "source"], value=_NULL_STR, source=_STR, is_default={"type": "boolean"},
                        read_only={"type": "boolean"}, sensitive={"type": "boolean"}),
    "PartitionState": _obj(
        ["topic", "partition", "log_start_offset", "high_watermark", "log_end_offset", "local_bytes",
         "remote_bytes", "upload_lag_offsets", "upload_lag_bytes"],
        topic=_STR, partition=_INT, log_start_offset=_INT, local_log_start_offset=_INT,
        remote_log_start_offset=_NULL_INT, high_watermark=_INT, log_end_offset=_INT, local_bytes=_INT,
        local_segments=_INT, remote_bytes=_INT, remote_segments=_INT,
        remote_storage_enable={"type": "boolean"}, upload_lag_offsets=_INT, upload_lag_bytes=_INT,
        upload_failures=_INT, last_upload_error=_NULL_STR),
    "Topic": _obj(["name", "topic_id", "partitions", "configs"], name=_STR, topic_id=_STR, partitions=_INT,
                  configs={"type": "object", "additionalProperties": _ref("ConfigValue")},
                  partition_states={"type": "array", "items": _ref("PartitionState")}),
    "NewTopic": {**_obj(["name"], name={"type": "string", "pattern": "^[a-zA-Z0-9._-]{1,249}$"},
                        partitions={"type": "integer", "minimum": 1, "maximum": 1000},
                        replication_factor={"type": "integer"},
                        configs={"type": "object", "additionalProperties": _STR}),
                 "additionalProperties": False},
    "ConfigChange": {**_obj([], set={"type": "object", "additionalProperties": _STR},
                            delete={"type": "array", "items": _STR}), "additionalProperties": False},
    "GroupSummary": _obj(["group_id", "protocol_type", "state", "lag"], group_id=_STR, protocol_type=_STR,
                         state=_STR, lag=_INT, type={"type": "string", "enum": ["classic", "consumer"]}),
    "GroupOffset": _obj(["topic", "partition", "committed_offset", "lag"], topic=_STR, partition=_INT,
                        committed_offset=_INT, high_watermark=_NULL_INT, lag=_INT),
    "Member": _obj(["member_id", "client_id", "client_host"], member_id=_STR, group_instance_id=_NULL_STR,
                   client_id=_STR, client_host=_STR, member_epoch=_INT,
                   assignment={"type": "array", "items": _ref("TopicPartitions")},
                   target_assignment={"type": "array", "items": _ref("TopicPartitions")}),
    "TopicPartitions": _obj(["topic", "partitions"], topic=_STR,
                            partitions={"type": "array", "items": _INT}),
    "Group": _obj(["group_id", "state", "members", "offsets", "lag"], group_id=_STR, state=_STR,
                  protocol_type=_STR, protocol=_STR, generation_id=_INT, assignment_epoch=_INT,
                  type={"type": "string", "enum": ["classic", "consumer"]},
                  members={"type": "array", "items": _ref("Member")},
                  offsets={"type": "array", "items": _ref("GroupOffset")}, lag=_INT),
}

_STATUS_OBJ = _obj(["status"], status=_STR)

OPENAPI: dict[str, Any] = {
    "openapi": "3.0.3",
    "info": {"title": "Strata admin API", "version": "1",
             "description": "Cluster, topics (with tiering state) and consumer groups of a Strata broker. "
                            "Errors are JSON {error_code, message}."},
    "paths": {
        "/v1/health": {"get": {"summary": "Liveness", "responses": {"200": _json(_STATUS_OBJ, "Alive")}}},
        "/v1/ready": {"get": {"summary": "Readiness: recovery done and the object store answers",
                              "responses": {"200": _json(_STATUS_OBJ, "Ready"), **_errors(503)}}},
        "/v1/cluster": {"get": {"summary": "Cluster id, controller and brokers",
                                "responses": {"200": _json(_ref("Cluster"), "The cluster")}}},
        "/v1/brokers": {"get": {"summary": "Registered brokers", "responses": {"200": _json(
            _obj(["brokers"], brokers={"type": "array", "items": _ref("Broker")}), "Brokers")}}},
        "/v1/topics": {
            "get": {"summary": "Topics with their local and remote bytes", "responses": {"200": _json(
                _obj(["topics"], topics={"type": "array", "items": _ref("TopicSummary")}), "Topics")}},
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
            "get": {"summary": "Partitions: offsets, local and remote log start and bytes, upload lag",
                    "responses": {"200": _json(_obj(["topic", "topic_id", "partitions"], topic=_STR,
                                                    topic_id=_STR,
                                                    partitions={"type": "array",
                                                                "items": _ref("PartitionState")}),
                                               "Partitions"), **_errors(400, 404)}},
        },
        "/v1/groups": {"get": {"summary": "Consumer groups with their total lag", "responses": {
            "200": _json(_obj(["groups"], groups={"type": "array", "items": _ref("GroupSummary")}), "Groups"),
            **_errors(503)}}},
        "/v1/groups/{group}": {
            "parameters": [_GROUP_PARAM],
            "get": {"summary": "A group: members, committed offsets and lag per partition",
                    "responses": {"200": _json(_ref("Group"), "The group"), **_errors(400, 404, 503)}},
        },
    },
    "components": {"schemas": _SCHEMAS},
}
