"""The operator's view end to end: one broker with a tiered topic, a 1,000-partition topic,
Kafka's 50-partition ``__consumer_offsets`` and two live consumer groups with lag.

* The console in headless Chromium: user topics, the tiering picture and the groups' lag
  (a classic group and a consumer-protocol one) on the first screen, internal topics folded, one row per topic (not per partition);
  producing moves the rate shown and the group's lag (screenshots before and after).
* The record browser API: records from the bucket and from local disk, by offset and by
  time, text and hex, within its bounds.
* ``/metrics``: ``promtool check metrics`` passes (skipped without promtool), and the
  kafka_exporter-named series carry what ``strata groups describe`` prints; the Grafana
  dashboard queries only series that exist.

Screenshots go to ``$STRATA_SCREENSHOT_DIR`` when set (else the test's tmp dir). The
Chromium test comes last: it produces more records, and local retention then moves on.
"""

from __future__ import annotations

import asyncio
import json
import os
import platform
import re
import subprocess
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer
from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import REPO_ROOT, BrokerFactory, BrokerProcess, require_tool
from tests.e2e import helpers
from tests.e2e.chromium import Page
from tests.service.cli.helpers import ok, strata

TIERED = "orders"
WIDE = "clicks"
GROUP = "billing"
MODERN = "audit"  # a consumer-protocol (KIP-848) group
TIERED_RECORDS = 3000
CONSUMED = 1800
T0 = (int(time.time()) - 3600) * 1000  # record timestamps: T0 + offset (ms); within retention


def _value(i: int) -> bytes:
    return f"order {i:05d} ".encode() + b"x" * 60


@pytest.fixture(scope="module")
def scene(module_start_broker: BrokerFactory) -> Iterator[dict[str, Any]]:
    """The broker, its topics and a live member of GROUP that committed CONSUMED records."""
    b = module_start_broker(sets={"log.retention.check.interval.ms": "300",
                                  "remote.log.manager.task.interval.ms": "200",
                                  "group.initial.rebalance.delay.ms": "0",
                                  "group.consumer.heartbeat.interval.ms": "500"})
    helpers.create_topic(b.bootstrap, TIERED, partitions=1,
                         config={"segment.bytes": "16384", "local.retention.bytes": "40000"})
    helpers.create_topic(b.bootstrap, WIDE, partitions=1000)
    producer = Producer({"bootstrap.servers": b.bootstrap, "batch.size": 4096, "linger.ms": 2})
    failures: list[Any] = []

    def delivered(err: Any, _msg: Any) -> None:
        if err is not None:
            failures.append(err)

    for i in range(TIERED_RECORDS):
        producer.produce(TIERED, key=f"k{i % 7}".encode(), value=_value(i), partition=0,
                         timestamp=T0 + i, on_delivery=delivered)
    for i in range(2000):
        producer.produce(WIDE, value=b"click %d" % i, partition=i % 1000)
    producer.produce(WIDE, value=b"\xff\xfe binary", key=b"\x00", partition=999)
    assert producer.flush(30) == 0 and not failures, failures
    # uploaded, and local retention has dropped the oldest local copies
    helpers.wait_until(lambda: _topic(b, TIERED)["remote_bytes"] > _topic(b, TIERED)["local_and_remote_bytes"] > 0,
                       "segments in the bucket only and in both places", timeout=30)
    members = [helpers.join_and_commit(b.bootstrap, GROUP, TIERED, CONSUMED),  # classic: the default
               helpers.join_and_commit(b.bootstrap, MODERN, TIERED, 100, **{"group.protocol": "consumer"})]
    try:
        yield {"broker": b}
    finally:
        for member in members:
            member.close()


def _get(b: BrokerProcess, path: str) -> Any:
    try:
        with urllib.request.urlopen(f"{b.admin_url}{path}", timeout=10) as resp:
            return json.loads(resp.read())
    except urllib.error.HTTPError as err:
        return {"status": err.code, **json.loads(err.read())}


def _topic(b: BrokerProcess, name: str) -> dict[str, Any]:
    return next(t for t in _get(b, f"/v1/topics?q={name}")["topics"] if t["name"] == name)


def _shots(tmp_path: Path) -> Path:
    out = Path(os.environ.get("STRATA_SCREENSHOT_DIR") or tmp_path)
    out.mkdir(parents=True, exist_ok=True)
    return out


def test_record_browser_reads_the_bucket_and_the_disk_by_offset_and_time(scene: dict[str, Any]) -> None:
    b: BrokerProcess = scene["broker"]
    part = _get(b, f"/v1/topics/{TIERED}/partitions")["partitions"][0]
    remote_only = part["local_log_start_offset"] - 1  # in the bucket, no longer on disk
    assert remote_only >= part["log_start_offset"] == 0
    base = f"/v1/topics/{TIERED}/partitions/0/records"

    got = _get(b, f"{base}?offset={remote_only - 2}&max_records=5")
    assert got["sources"][0] == "remote", got
    assert [r["offset"] for r in got["records"]] == list(range(remote_only - 2, remote_only + 3))
    assert [r["value"] for r in got["records"]] == [_value(i).decode() for i in range(remote_only - 2,
                                                                                        remote_only + 3)]
    assert got["next_offset"] == remote_only + 3 and got["records"][0]["key"] == f"k{(remote_only - 2) % 7}"

    local = part["local_log_start_offset"] + 10
    got = _get(b, f"{base}?timestamp={T0 + local}&max_records=3&encoding=hex")
    assert got["sources"] == ["local"] and got["from_offset"] == local, got
    assert [bytes.fromhex(r["value"]) for r in got["records"]] == [_value(i) for i in range(local, local + 3)]
    assert got["records"][0]["timestamp"] == T0 + local and got["records"][0]["value_format"] == "hex"

    got = _get(b, f"{base}?offset=0&max_records=500&preview_bytes=8")  # at most 500 records, 8 bytes each
    assert len(got["records"]) == 500 and got["records"][0]["value"] == "order 00"
    assert got["records"][0]["value_size"] == len(_value(0)) and got["bytes_read"] <= 1024 * 1024
    got = _get(b, f"{base}?offset=0&max_bytes=100")  # a batch is larger than that: nothing read
    assert got["records"] == [] and "larger than" in got["note"], got
    assert _get(b, f"{base}?max_records=501")["status"] == 400
    assert _get(b, f"{base}?offset=1&timestamp=1")["status"] == 400
    assert _get(b, f"/v1/topics/{TIERED}/partitions/1/records")["status"] == 404

    got = _get(b, f"/v1/topics/{WIDE}/partitions/999/records")  # the latest records by default
    binary = got["records"][-1]
    assert (binary["key"], binary["key_format"]) == ("00", "hex")
    assert bytes.fromhex(binary["value"]) == b"\xff\xfe binary" and binary["value_format"] == "hex"


def _series_names(text: str) -> set[str]:
    """Every name a query may use: families, with their counter and histogram suffixes."""
    names = set()
    for family in text_string_to_metric_families(text):
        names.add(family.name)
        names.update({"counter": [family.name + "_total"],
                      "histogram": [family.name + s for s in ("_bucket", "_sum", "_count")]}
                     .get(family.type, []))
    return names


def _samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def _metrics_text(b: BrokerProcess) -> str:
    with urllib.request.urlopen(f"{b.admin_url}/metrics", timeout=10) as resp:
        return str(resp.read().decode())


def test_metrics_pass_promtool_check_metrics(scene: dict[str, Any]) -> None:
    promtool = require_tool("promtool", package="prometheus")
    text = _metrics_text(scene["broker"])
    assert "kafka_consumergroup_lag_sum" in text and "process_open_fds" in text
    check = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True, text=True,
                           timeout=60, check=False)
    assert check.returncode == 0, check.stdout + check.stderr  # 3: lint problems, 1: errors


def test_kafka_exporter_series_carry_what_groups_describe_prints(scene: dict[str, Any]) -> None:
    b: BrokerProcess = scene["broker"]
    text = _metrics_text(b)
    m = _samples(text)
    for group, protocol in ((GROUP, "classic"), (MODERN, "consumer")):
        lines = ok(strata("groups", "describe", group, bootstrap=b.bootstrap)).stdout.splitlines()
        # "Group billing: state Stable, 1 member(s), assignor range, protocol classic"
        assert lines[0].split()[4] == "1" and lines[0].endswith(f"protocol {protocol}"), lines[0]
        header, *rows = [line.split() for line in lines[1:]]
        assert rows
        for row in rows:
            r = dict(zip(header, row))
            labels = (("consumergroup", group), ("partition", r["PARTITION"]), ("topic", r["TOPIC"]))
            assert m[("kafka_consumergroup_current_offset", labels)] == int(r["CURRENT-OFFSET"])
            assert m[("kafka_consumergroup_lag", labels)] == int(r["LAG"])
            tp = (("partition", r["PARTITION"]), ("topic", r["TOPIC"]))
            assert m[("kafka_topic_partition_current_offset", tp)] == int(r["LOG-END-OFFSET"])
        lag_sum = sum(int(dict(zip(header, row))["LAG"]) for row in rows)
        assert m[("kafka_consumergroup_lag_sum", (("consumergroup", group), ("topic", TIERED)))] == lag_sum
        assert m[("kafka_consumergroup_members", (("consumergroup", group),))] == 1
    assert m[("kafka_brokers", ())] == 1
    assert m[("kafka_topic_partitions", (("topic", WIDE),))] == 1000
    tp0 = (("partition", "0"), ("topic", TIERED))
    assert m[("kafka_topic_partition_oldest_offset", tp0)] == 0  # the bucket's start, not the disk's
    assert m[("kafka_topic_partition_leader", tp0)] == 1
    assert m[("kafka_topic_partition_in_sync_replica", tp0)] == m[("kafka_topic_partition_replicas", tp0)] == 1
    assert m[("kafka_topic_partition_under_replicated_partition", tp0)] == 0
    version = ok(strata("--version")).stdout.split()[1]
    assert m[("strata_build_info", (("python_version", platform.python_version()), ("version", version)))] == 1
    assert m[("process_resident_memory_bytes", ())] > 0 and m[("process_open_fds", ())] > 1000
    assert ("process_cpu_seconds_total", ()) in m
    # every member's first JoinGroup is MEMBER_ID_REQUIRED: counted, but not as an error
    join = (("api", "JoinGroup"), ("error", "MEMBER_ID_REQUIRED"))
    assert m[("strata_kafka_request_expected_errors_total", join)] >= 1
    assert ("strata_kafka_request_errors_total", join) not in m
    assert not any(name.endswith("_hit_ratio") for name, _ in m)  # counters, not since-start ratios
    assert ("strata_tiered_fetch_chunk_cache_hits_total", ()) in m

    # the shipped Grafana dashboard queries only series that exist
    dashboard = (REPO_ROOT / "deploy" / "grafana" / "strata.json").read_text()
    exprs = [t["expr"] for p in json.loads(dashboard)["panels"] for t in p.get("targets", [])]
    queried = {n for e in exprs for n in re.findall(r"\b(?:strata|kafka|process)_[a-z_]+\b", e)}
    assert len(queried) > 20 and not queried - _series_names(text), queried - _series_names(text)


# What the first screen shows, read from the DOM: only elements inside the viewport count.
_FIRST_SCREEN = """(() => {
  const seen = (el) => { const r = el.getBoundingClientRect();
    return r.width > 0 && r.height > 0 && r.top >= 0 && r.bottom <= innerHeight; };
  const row = (sel) => document.querySelector(sel);
  const topics = [...document.querySelectorAll('#topics tr.topic')].filter(seen).map((tr) => tr.dataset.topic);
  const tiered = row('tr.topic[data-topic="orders"]');
  const parts = tiered ? [...tiered.querySelectorAll('.picture i')].filter(seen)
    .map((i) => [i.className, Number(i.dataset.bytes)]) : [];
  const group = row('tr.group[data-group="billing"]');
  const modern = row('tr.group[data-group="audit"]');
  const wide = row('tr.topic[data-topic="clicks"]');
  return {topics, parts,
    groupLag: group && seen(group) ? group.querySelector('td.lag').textContent : null,
    groupMembers: group ? group.children[3].textContent : null,
    modern: modern && seen(modern) ? [...modern.children].slice(1, 6).map((td) => td.textContent) : null,
    wideCells: wide ? [...wide.children].map((td) => td.textContent) : null,
    internal: document.getElementById('internal-toggle').textContent,
    internalRows: document.querySelectorAll('tr[data-topic^="__"]').length,
    rows: document.querySelectorAll('tr').length,
    rateIn: document.getElementById('rate-in').textContent,
    bucket: document.getElementById('bucket').textContent,
    brokers: document.getElementById('brokers').textContent,
    updated: document.getElementById('updated').textContent};
})()"""


def test_console_first_screen_then_rates_move_in_headless_chromium(scene: dict[str, Any],
                                                                   tmp_path: Path) -> None:
    binary = require_tool("chromium", "chromium-browser", package="chromium")
    b: BrokerProcess = scene["broker"]
    api = _topic(b, TIERED)
    lag_before = _get(b, f"/v1/groups/{GROUP}")["lag"]
    assert lag_before == TIERED_RECORDS - CONSUMED
    shots = _shots(tmp_path)

    async def run() -> dict[str, Any]:
        async with Page(binary, tmp_path / "profile") as page:
            await page.goto(f"{b.admin_url}/")
            await page.wait_for("document.getElementById('updated').textContent.startsWith('updated')")
            first = await page.evaluate(_FIRST_SCREEN)
            await page.screenshot(shots / "console-1-first-screen.png")
            stop = threading.Event()
            thread = threading.Thread(target=_produce_until, args=(b.bootstrap, stop), daemon=True)
            thread.start()
            try:
                moved = await page.wait_for(
                    f"(() => {{ const s = {_FIRST_SCREEN}; return s.rateIn !== {json.dumps(first['rateIn'])}"
                    f" && s.rateIn !== '0 B/s' && s.groupLag !== {json.dumps(first['groupLag'])} ? s : null; }})()",
                    timeout_s=30)
                await page.screenshot(shots / "console-2-after-producing.png")
            finally:
                stop.set()
                thread.join()
            # detail on demand: the 1,000-partition topic opens one page of 50 partitions
            await page.evaluate("document.querySelector('tr.topic[data-topic=\"clicks\"]').click()")
            pager = await page.wait_for("(() => { const d = document.querySelector('tr.topic[data-topic=\"clicks\"]')"
                                        "._detail; return d && d.querySelectorAll('tr.partition').length"
                                        " && [d.querySelectorAll('tr.partition').length,"
                                        " d.querySelector('.pager').textContent]; })()")
            await page.evaluate(f"document.querySelector('tr.group[data-group=\"{GROUP}\"]').click()")
            lags = await page.wait_for("(() => [...document.querySelectorAll('tr.group-partition td.lag')]"
                                       ".map((td) => td.textContent))()")
            await page.screenshot(shots / "console-3-detail.png")
            return {"first": first, "moved": moved, "pager": pager, "lags": lags}

    seen = asyncio.run(run())
    first = seen["first"]
    assert first["updated"].startswith("updated"), first
    assert first["topics"] == [WIDE, TIERED], first  # user topics on the first screen, by name
    assert first["internalRows"] == 0 and first["internal"].endswith("1 internal topic"), first
    assert first["rows"] < 60, first  # one row per topic: no row per partition of 1,050
    assert first["wideCells"][1] == "1,000", first
    assert first["brokers"] == "1 broker" and first["bucket"].startswith("file:///"), first
    parts = dict(first["parts"])  # the tiering picture, as the admin API counts it
    assert parts["seg-remote"] == api["remote_bytes"] - api["local_and_remote_bytes"] > 0, (parts, api)
    assert parts["seg-both"] == api["local_and_remote_bytes"] > 0, (parts, api)
    assert parts["seg-active"] == api["active_segment_bytes"] > 0, (parts, api)
    assert first["groupLag"] == f"{lag_before:,}" and first["groupMembers"] == "1", first
    assert first["modern"] == ["consumer", "Stable", "1", "1", f"{TIERED_RECORDS - 100:,}"], first
    moved = seen["moved"]
    assert int(moved["groupLag"].replace(",", "")) > lag_before, moved
    assert seen["pager"] == [50, "1–50 of 1,000 next ›"], seen["pager"]
    assert sum(int(v.replace(",", "")) for v in seen["lags"]) >= lag_before, seen["lags"]
    for name in ("console-1-first-screen.png", "console-2-after-producing.png"):
        assert (shots / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def _produce_until(bootstrap: str, stop: threading.Event) -> None:
    """Records to the tiered topic (timestamps now) until stopped: the rate the console shows."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    deadline = time.monotonic() + 40
    while not stop.is_set() and time.monotonic() < deadline:
        for _ in range(50):
            producer.produce(TIERED, value=b"later " + b"y" * 200, partition=0)
        producer.poll(0)
        time.sleep(0.05)
    producer.flush(30)
