"""`strata topics|produce|consume` end to end: the CLI as a subprocess against a real broker."""

from __future__ import annotations

from typing import Any

import pytest

from tests.service.cli.helpers import describe_partitions, fails_cleanly, ok, strata, unused_port


def test_topic_lifecycle_create_list_describe_alter_delete(module_broker: Any) -> None:
    b = module_broker.bootstrap
    ok(strata("topics", "create", "cli-life", "--partitions", "2", "--replication-factor", "1",
              "--config", "retention.ms=3600000", "--config", "cleanup.policy=delete",
              bootstrap=b))

    assert "cli-life" in ok(strata("topics", "list", bootstrap=b)).stdout.splitlines()

    out = ok(strata("topics", "describe", "cli-life", bootstrap=b)).stdout
    header = out.splitlines()[0]
    assert header.startswith("Topic: cli-life\tPartitionCount: 2\tReplicationFactor: 1"), out
    assert "retention.ms=3600000" in header
    parts = describe_partitions(out)
    assert sorted(parts) == [0, 1]
    for fields in parts.values():
        assert int(fields["Leader"]) >= 0
        assert (fields["EarliestOffset"], fields["LatestOffset"]) == ("0", "0")

    ok(strata("topics", "alter", "cli-life", "--partitions", "4", "--set", "retention.ms=60000",
              "--delete-config", "cleanup.policy", bootstrap=b))
    out = ok(strata("topics", "describe", "cli-life", bootstrap=b)).stdout
    header = out.splitlines()[0]
    assert "PartitionCount: 4" in header, out
    assert "retention.ms=60000" in header, out
    assert "cleanup.policy=" not in header, out
    assert sorted(describe_partitions(out)) == [0, 1, 2, 3]

    ok(strata("topics", "delete", "cli-life", bootstrap=b))
    assert "cli-life" not in ok(strata("topics", "list", bootstrap=b)).stdout.splitlines()


def test_create_existing_topic_fails_unless_if_not_exists(module_broker: Any) -> None:
    b = module_broker.bootstrap
    ok(strata("topics", "create", "cli-twice", "--partitions", "2", bootstrap=b))
    line = fails_cleanly(strata("topics", "create", "cli-twice", "--partitions", "2",
                                bootstrap=b))
    assert "already exists" in line and "--if-not-exists" in line
    same = ok(strata("topics", "create", "cli-twice", "--partitions", "2", "--if-not-exists",
                     bootstrap=b))
    assert same.stderr.strip() == "topic cli-twice already exists (2 partition(s)); nothing changed"
    other = ok(strata("topics", "create", "cli-twice", "--partitions", "5", "--if-not-exists",
                      bootstrap=b))
    assert "created" not in other.stderr
    assert other.stderr.startswith("warning: topic cli-twice already exists with 2 partition(s), "
                                   "not the 5 asked for"), other.stderr
    assert "strata topics alter cli-twice --partitions 5" in other.stderr
    out = ok(strata("topics", "describe", "cli-twice", bootstrap=b)).stdout
    assert len(describe_partitions(out)) == 2  # left as it was


def test_create_with_broker_default_partitions(module_broker: Any) -> None:
    b = module_broker.bootstrap
    ok(strata("topics", "create", "cli-defaults", bootstrap=b))
    out = ok(strata("topics", "describe", "cli-defaults", bootstrap=b)).stdout
    assert len(describe_partitions(out)) >= 1


def test_produce_lines_with_keys_then_consume_them_back(module_broker: Any) -> None:
    b = module_broker.bootstrap
    ok(strata("topics", "create", "cli-data", "--partitions", "3", bootstrap=b))
    lines = [f"user{i % 5}:event number {i}" for i in range(60)]

    proc = ok(strata("produce", "cli-data", "--key-separator", ":", "--compression", "zstd",
                     "--header", "source=cli", bootstrap=b, stdin="\n".join(lines) + "\n"))
    assert "produced 60 records to cli-data" in proc.stderr

    proc = ok(strata("consume", "cli-data", "--from-beginning", "--max-messages", "60",
                     "--timeout-ms", "10000", "--print-key", "--print-offset",
                     "--print-headers", bootstrap=b))
    rows = [line.split("\t") for line in proc.stdout.splitlines()]
    assert len(rows) == 60
    got = sorted((key, value) for _, key, _, value in rows)
    assert got == sorted(tuple(line.split(":", 1)) for line in lines)
    assert {headers for _, _, headers, _ in rows} == {"source=cli"}
    # Same key, same partition; offsets dense per partition.
    partition_of: dict[str, str] = {}
    offsets: dict[str, list[int]] = {}
    for pos, key, _, _ in rows:
        partition, offset = pos.split(":")
        assert partition_of.setdefault(key, partition) == partition
        offsets.setdefault(partition, []).append(int(offset))
    for partition, seen in offsets.items():
        assert seen == list(range(len(seen))), (partition, seen)

    out = ok(strata("topics", "describe", "cli-data", bootstrap=b)).stdout
    latest = {p: int(f["LatestOffset"]) for p, f in describe_partitions(out).items()}
    assert sum(latest.values()) == 60


def test_produce_to_partition_and_consume_from_offset(module_broker: Any) -> None:
    b = module_broker.bootstrap
    ok(strata("topics", "create", "cli-offsets", "--partitions", "2", bootstrap=b))
    ok(strata("produce", "cli-offsets", "--partition", "1", bootstrap=b,
              stdin="".join(f"v{i}\n" for i in range(10))))

    proc = ok(strata("consume", "cli-offsets", "--partition", "1", "--offset", "7",
                     "--timeout-ms", "3000", bootstrap=b))
    assert proc.stdout.splitlines() == ["v7", "v8", "v9"]

    proc = ok(strata("consume", "cli-offsets", "--partition", "0", "--from-beginning",
                     "--timeout-ms", "2000", bootstrap=b))
    assert proc.stdout == ""


def test_bootstrap_from_environment(module_broker: Any) -> None:
    proc = ok(strata("topics", "list", env={"STRATA_BOOTSTRAP": module_broker.bootstrap}))
    assert "Traceback" not in proc.stderr


def test_unknown_topic_is_one_clear_line(module_broker: Any) -> None:
    b = module_broker.bootstrap
    line = fails_cleanly(strata("topics", "describe", "cli-no-such-topic", bootstrap=b))
    assert "cli-no-such-topic" in line and "does not exist" in line
    line = fails_cleanly(strata("consume", "cli-no-such-topic", "--timeout-ms", "1000",
                                bootstrap=b))
    assert "does not exist" in line
    line = fails_cleanly(strata("topics", "delete", "cli-no-such-topic", bootstrap=b))
    assert "does not exist: nothing to delete" in line and "topics create" not in line
    ok(strata("topics", "create", "cli-deleted", "--partitions", "1", bootstrap=b))
    proc = strata("topics", "delete", "cli-deleted", "cli-no-such-topic", bootstrap=b)
    assert "deleted topic cli-deleted" in proc.stderr  # what was deleted is said, then the failure
    assert fails_cleanly_lines(proc)[-1].endswith("does not exist: nothing to delete "
                                                  "(`strata topics list` shows the topics)")


def fails_cleanly_lines(proc: Any) -> list[str]:
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
    return [line for line in proc.stderr.splitlines() if line.strip()]


def test_consume_group_refuses_a_partition_or_offset(module_broker: Any) -> None:
    line = fails_cleanly(strata("consume", "t", "--group", "g", "--partition", "0",
                                bootstrap=module_broker.bootstrap))
    assert "--group cannot go with --partition or --offset" in line


def test_refused_request_is_one_clear_line(module_broker: Any) -> None:
    b = module_broker.bootstrap
    line = fails_cleanly(strata("topics", "create", "cli-bad-config", "--config",
                                "retention.ms=soon", bootstrap=b))
    assert "config" in line
    line = fails_cleanly(strata("topics", "create", "bad topic name!", bootstrap=b))
    assert "invalid topic name" in line


def test_produce_to_missing_partition_fails_cleanly(module_broker: Any) -> None:
    b = module_broker.bootstrap
    ok(strata("topics", "create", "cli-one", "--partitions", "1", bootstrap=b))
    line = fails_cleanly(strata("produce", "cli-one", "--partition", "3", bootstrap=b,
                                stdin="x\n"))
    assert "no partition 3" in line


@pytest.mark.parametrize("command", [
    ["topics", "list"],
    ["topics", "create", "t", "--partitions", "1"],
    ["topics", "describe", "t"],
    ["topics", "delete", "t"],
    ["topics", "alter", "t", "--partitions", "2"],
    ["produce", "t"],
    ["consume", "t", "--timeout-ms", "1000"],
])
def test_no_broker_listening_exits_1_with_clear_message(command: list[str]) -> None:
    proc = strata(*command, bootstrap=f"127.0.0.1:{unused_port()}", stdin="x\n")
    line = fails_cleanly(proc)
    assert "cannot reach a broker at 127.0.0.1:" in line
    assert "strata up" in line
