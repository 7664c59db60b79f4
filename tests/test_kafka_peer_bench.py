"""bench/kafka_peer.py without Kafka: its arguments, and its report on a made-up result.

CI has no Kafka broker, so the benchmark's runs are not exercised here; what is checked is
what a full run would be judged by: the medians, the Strata/Kafka ratios, the table rows and
that the section lands between its markers without touching the rest of the file.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "bench"
sys.path.insert(0, str(BENCH))

import kafka_peer  # noqa: E402
import kafka_peer_report  # noqa: E402


def _run(system: str, rate: float, cpu: float, client_cpu: float = 0.2, seconds: float = 1.0) -> dict:
    return {"system": system, "records": int(rate * seconds), "bytes": int(rate * seconds) * 100,
            "seconds": seconds, "records_per_s": rate, "mb_per_s": rate * 100 / 1e6,
            "server_cpu_seconds": cpu, "server_cpu_s_per_gb": cpu / (rate * seconds * 100 / 1e9),
            "client_cpu_seconds": client_cpu, "rss_mib": 90.0 if system == "strata" else 450.0,
            "command": f"kcat -b {system}"}


def _latency(system: str, p99: float) -> dict:
    return {"system": system, "rate_achieved": 5000.0, "p50_ms": p99 / 4, "p99_ms": p99, "p999_ms": p99 * 2,
            "max_ms": p99 * 3, "server_cpu_seconds": 0.5, "command_producer": "python bench/latency.py produce"}


def _data() -> dict:
    return {
        "command": "nice python bench/kafka_peer.py --quick", "mode": "quick", "date": "2026-11-28T00:00:00+00:00",
        "total_seconds": 120.0, "work_dir": "/tmp/strata-bench-kafka-peer-x",
        "machine": {"nproc": 2, "cpu_model": "test CPU", "memory_gib": 8, "kernel": "6", "python": "3.11",
                    "confluent_kafka": {"confluent_kafka": "2", "librdkafka": "2"}, "kcat": "1.7.1",
                    "kcat_librdkafka": "2.0.2", "data_dir_filesystem": {"type": "ext4"}},
        "config": {"repeats": 3}, "notes": [],
        "servers": {"strata-one-broker": ["python -m service up --data-dir /tmp/strata-bench-kafka-peer-x/s"]},
        "rows": {
            "1 partition, 100 B, kcat: produce": {"workload": "single", "runs": {
                "strata": [_run("strata", 900_000, 0.3), _run("strata", 1_000_000, 0.3),
                           _run("strata", 800_000, 0.3)],
                "kafka": [_run("kafka", 400_000, 1.5), _run("kafka", 500_000, 1.0, client_cpu=0.95),
                          _run("kafka", 300_000, 1.2)]}},
            "latency 5000 rec/s, linger 0 ms": {"workload": "latency", "runs": {
                "strata": [_latency("strata", 4.0), _latency("strata", 6.0), _latency("strata", 5.0)],
                "kafka": [_latency("kafka", 10.0), _latency("kafka", 8.0), _latency("kafka", 12.0)]}},
        },
    }


def test_quick_is_the_development_mode_and_only_picks_workloads() -> None:
    args = kafka_peer.parse_args(["--quick", "--only", "single,rf3"])
    assert args.quick and args.only == ["single", "rf3"]
    assert kafka_peer.parse_args([]).only == list(kafka_peer.WORKLOADS)
    assert kafka_peer.QUICK["repeats"] == 1 and kafka_peer.FULL["repeats"] >= 3


def test_an_unknown_workload_is_refused_by_name(capsys) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(SystemExit) as exc:
        kafka_peer.parse_args(["--only", "single,bogus"])
    assert exc.value.code == 2
    assert "bogus" in capsys.readouterr().err


def test_medians_and_ratios_are_strata_over_kafka() -> None:
    data = _data()
    kafka_peer_report.summarise(data)
    row = data["rows"]["1 partition, 100 B, kcat: produce"]
    assert row["median"]["strata"]["records_per_s"] == 900_000
    assert row["median"]["kafka"]["records_per_s"] == 400_000
    assert row["ratio"] == pytest.approx(900_000 / 400_000)
    # 0.3 s per 0.09 GB against 1.5 s per 0.04 GB
    assert row["cpu_per_gb_ratio"] == pytest.approx((0.3 / 0.09) / (1.5 / 0.04))
    lat = data["rows"]["latency 5000 rec/s, linger 0 ms"]
    assert lat["p99_ratio"] == pytest.approx(5.0 / 10.0)


def test_what_limited_a_run_is_read_from_cpu_busy() -> None:
    assert kafka_peer_report.bound_by(_run("kafka", 1, 0.2, client_cpu=0.95), 2) == "client"
    assert kafka_peer_report.bound_by({**_run("kafka", 1, 0.2, client_cpu=0.95), "client_processes": 20}, 2) == "waiting"
    assert kafka_peer_report.bound_by(_run("strata", 1, 0.9, client_cpu=0.9), 2) == "all cores"
    assert kafka_peer_report.bound_by(_run("strata", 1, 0.9, client_cpu=0.1), 2) == "broker"


def test_the_section_goes_between_its_markers_and_leaves_the_rest(tmp_path: Path) -> None:
    md = tmp_path / "benchmarks.md"
    md.write_text("# Strata benchmarks\n\n<!-- peers:start -->\nNATS\n<!-- peers:end -->\n\n"
                  "<!-- kafka-peer:start -->\nold\n<!-- kafka-peer:end -->\n\ntail\n")
    data = _data()
    kafka_peer_report.summarise(data)
    kafka_peer_report.write_report(data, md)
    text = md.read_text()
    assert "<!-- peers:start -->\nNATS\n<!-- peers:end -->" in text and text.endswith("tail\n")
    assert "old" not in text and text.count("<!-- kafka-peer:start -->") == 1
    assert "| 1 partition, 100 B, kcat: produce | 900,000 | 400,000 | **2.25** |" in text
    assert "| 5000 rec/s, linger 0 ms |" in text and "**0.50**" in text
    assert "$WORK/s" in text and "/tmp/strata-bench-kafka-peer-x" not in text
    assert (tmp_path / "benchmarks-kafka-peer.json").exists()


def test_a_consume_row_of_several_passes_sums_their_time_and_records() -> None:
    reads = iter([{"seconds": 0.2, "client_cpu_seconds": 0.1, "command": "kcat -C"},
                  {"seconds": 0.3, "client_cpu_seconds": 0.2, "command": "kcat -C"},
                  {"seconds": 0.25, "client_cpu_seconds": 0.15, "command": "kcat -C"}])
    row = kafka_peer.read_passes(lambda: next(reads), 1000, 100, 3)
    assert row["records"] == 3000 and row["bytes"] == 300_000 and row["passes"] == 3
    assert row["seconds"] == pytest.approx(0.75) and row["client_cpu_seconds"] == pytest.approx(0.45)
    assert row["pass_seconds"] == [0.2, 0.3, 0.25] and row["command"] == "kcat -C"


def test_freed_pages_are_held_for_the_run_and_the_setting_put_back(tmp_path: Path) -> None:
    import guest_memory

    parameter = tmp_path / "min_free_ms"
    parameter.write_text("0\n")
    with guest_memory.freed_pages_kept(60_000, parameter) as kept:
        assert parameter.read_text() == "60000"
        assert kept == {"parameter": str(parameter), "was": "0", "held_ms": 60_000}
    assert parameter.read_text() == "0"
    with pytest.raises(RuntimeError), guest_memory.freed_pages_kept(60_000, parameter):
        raise RuntimeError("a run that fails")
    assert parameter.read_text() == "0"
    with guest_memory.freed_pages_kept(60_000, tmp_path / "absent") as kept:
        assert "no free page reporting setting here" in kept["unchanged"]
    data = {**_data(), "memory": {"freed_pages": {"parameter": str(parameter), "was": "0", "held_ms": 60_000},
                                  "prewarm": {"gib": 8}}}
    header = " ".join(kafka_peer_report._header(data))
    assert "freed pages stayed in the guest for 60 s" in header and "8 GiB were written and deleted" in header


def _more_rows(data: dict) -> dict:
    """A client-bound row Strata loses (left out of the throughput target) and a load whose p99 misses."""
    data["rows"]["1 partition, 100 B, confluent-kafka: produce"] = {"workload": "single", "runs": {
        "strata": [_run("strata", 700_000, 0.2, client_cpu=0.95)] * 3,
        "kafka": [_run("kafka", 800_000, 0.2, client_cpu=0.95)] * 3}}
    data["rows"]["1 partition, 1 KiB, kcat: consume"] = {"workload": "single", "runs": {
        "strata": [_run("strata", 950_000, 0.1)] * 3, "kafka": [_run("kafka", 1_000_000, 0.1)] * 3}}
    data["rows"]["latency 1000 rec/s, linger 0 ms"] = {"workload": "latency", "runs": {
        "strata": [_latency("strata", 1.2)] * 3, "kafka": [_latency("kafka", 1.0)] * 3}}
    return data


def test_each_target_is_judged_by_its_worst_row() -> None:
    data = _more_rows(_data())
    kafka_peer_report.summarise(data)
    got = {t["id"]: t for t in kafka_peer_report.targets(data)}
    # the confluent-kafka produce is a client's pace on both sides: not a throughput row
    assert got["throughput"]["rows"] == 2 and got["throughput"]["rows_met"] == 1
    assert got["throughput"]["worst"] == "1 partition, 1 KiB, kcat: consume" and not got["throughput"]["met"]
    assert got["throughput"]["measured"] == pytest.approx(0.95)
    # CPU per GB counts every row: 0.2 s for 0.07 GB against 0.2 s for 0.08 GB is the worst
    assert got["cpu_per_gb"]["rows"] == 3 and got["cpu_per_gb"]["measured"] == pytest.approx(0.08 / 0.07)
    assert got["cpu_per_gb"]["worst"] == "1 partition, 100 B, confluent-kafka: produce"
    assert got["p99"]["measured"] == pytest.approx(1.2) and got["p99"]["rows_met"] == 1
    assert got["p99"]["worst"] == "latency 1000 rec/s, linger 0 ms" and not got["p99"]["met"]
    text = kafka_peer_report.render(data)
    assert "| 1.20×: latency 1000 rec/s, linger 0 ms | 1 of 2 | **NO** |" in text


def test_the_suite_summary_carries_the_kafka_targets(monkeypatch, capsys, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    import kafka_peer_systems
    import run_all

    data = _more_rows(_data())
    kafka_peer_report.summarise(data)
    rows = run_all.kafka_peer_rows(data)
    assert [r["id"] for r in rows] == ["throughput", "cpu_per_gb", "p99"]
    assert rows[0]["required_text"] == "≥ 1× Kafka's" and rows[0]["ratio_text"] == "0.95×" and not rows[0]["met"]
    assert "1 of 2 rows meet it" in rows[0]["measured_text"]
    # with no Kafka build, the suite says what to do before it runs anything
    monkeypatch.setattr(kafka_peer_systems, "KAFKA_HOME", tmp_path / "no-kafka")
    monkeypatch.setattr(sys, "argv", ["run_all.py", "--out", str(tmp_path / "b.md"), "--skip", "peers"])
    assert run_all.main() == 2
    assert not (tmp_path / "b.md").exists()
    said = capsys.readouterr().out
    assert f"KAFKA_HOME={tmp_path / 'no-kafka'}" in said and "--skip kafka-peer" in said
    # and the JetStream peer's server, checked as early
    import peers

    monkeypatch.setattr(peers, "NATS_SERVER", str(tmp_path / "no-nats-server"))
    assert run_all.peers_missing({"foundation", "peers"}) == (
        "nats-server not found: apt-get install nats-server; or leave that part out with --skip peers")
    assert run_all.peers_missing({"foundation"}) is None


def test_a_reused_run_is_judged_against_the_goal_of_today() -> None:
    import foundation
    import run_all

    old = {"id": "consume_16384_vs_sendfile", "name": "Consume 16 KiB records vs plain sendfile", "unit": "ratio",
           "required": 0.50, "measured": 0.60, "met": True}
    now = run_all._judged(old, foundation.TARGETS)
    assert now["required"] == foundation.TARGETS["consume_16384_vs_sendfile"][2] == 0.80 and not now["met"]
    assert run_all._judged({**old, "measured": 1.23}, foundation.TARGETS)["met"]
    lat = {"id": "latency_p99_ms", "unit": "ms (at most)", "required": 5.0, "measured": 3.3, "met": True}
    assert run_all._judged(lat, foundation.TARGETS)["met"]
