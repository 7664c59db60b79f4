"""kcat (librdkafka's command-line client) lists, produces to and consumes from the broker."""

from __future__ import annotations

import subprocess
from typing import Any

from . import helpers

TIMEOUT_S = 60


def run_kcat(kcat: str, *args: str,
             stdin: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
    proc = subprocess.run([kcat, *args], input=stdin, capture_output=True, timeout=TIMEOUT_S,
                          check=False)
    assert proc.returncode == 0, (proc.returncode, proc.stderr.decode(errors="replace"))
    return proc


def test_kcat_metadata_lists_the_topic(kcat: str, module_broker: Any) -> None:
    topic = helpers.topic_name("kcat-list")
    helpers.create_topic(module_broker.bootstrap, topic, partitions=2)

    out = run_kcat(kcat, "-L", "-b", module_broker.bootstrap, "-m", "15").stdout.decode()

    assert f'topic "{topic}" with 2 partitions' in out, out
    assert "1 brokers:" in out, out


def test_kcat_produce_then_consume_returns_the_same_lines(kcat: str, module_broker: Any) -> None:
    topic = helpers.topic_name("kcat-lines")
    helpers.create_topic(module_broker.bootstrap, topic, partitions=1)
    lines = [f"line {i} " + "x" * (i % 17) for i in range(200)]

    run_kcat(kcat, "-P", "-b", module_broker.bootstrap, "-t", topic, "-p", "0",
             stdin=("\n".join(lines) + "\n").encode())
    out = run_kcat(kcat, "-C", "-b", module_broker.bootstrap, "-t", topic, "-e", "-q",
                   "-o", "beginning").stdout.decode()

    assert out.splitlines() == lines


def test_kcat_keys_survive_with_key_delimiter(kcat: str, module_broker: Any) -> None:
    topic = helpers.topic_name("kcat-keys")
    helpers.create_topic(module_broker.bootstrap, topic, partitions=1)
    pairs = [(f"k{i}", f"value {i}") for i in range(50)]

    run_kcat(kcat, "-P", "-b", module_broker.bootstrap, "-t", topic, "-p", "0", "-K:",
             stdin="".join(f"{k}:{v}\n" for k, v in pairs).encode())
    out = run_kcat(kcat, "-C", "-b", module_broker.bootstrap, "-t", topic, "-e", "-q",
                   "-o", "beginning", "-K:").stdout.decode()
    assert out.splitlines() == [f"{k}:{v}" for k, v in pairs]

    fmt = run_kcat(kcat, "-C", "-b", module_broker.bootstrap, "-t", topic, "-e", "-q",
                   "-o", "beginning", "-f", "%o %k %s\n").stdout.decode()
    assert fmt.splitlines() == [f"{i} {k} {v}" for i, (k, v) in enumerate(pairs)]


def test_kcat_produce_with_compression_is_readable_by_confluent(
        kcat: str, module_broker: Any) -> None:
    topic = helpers.topic_name("kcat-zstd")
    helpers.create_topic(module_broker.bootstrap, topic, partitions=1)
    lines = [f"compressed {i}" for i in range(100)]

    run_kcat(kcat, "-P", "-b", module_broker.bootstrap, "-t", topic, "-p", "0", "-z", "zstd",
             stdin=("\n".join(lines) + "\n").encode())

    msgs = helpers.consume(module_broker.bootstrap, topic, [0], len(lines))
    assert [m.value().decode() for m in msgs] == lines
    assert [m.offset() for m in msgs] == list(range(len(lines)))
