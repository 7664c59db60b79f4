"""bench/wire_latency.py against a real Strata broker (CI has no Kafka): a short run ends
cleanly, checks every answer's error code and offset, and reports each interval's
percentiles from the kernel's receive timestamps."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def test_a_short_strata_run_reports_both_intervals(tmp_path: Path) -> None:
    out = tmp_path / "wire.json"
    proc = subprocess.run(
        [sys.executable, str(REPO / "bench" / "wire_latency.py"), "--strata-only", "--count", "50", "--rounds", "1",
         "--warm", "20", "--work-dir", str(tmp_path), "--json", str(out)],
        capture_output=True, text=True, timeout=180, cwd=REPO)
    assert proc.returncode == 0, proc.stderr[-2000:]
    result = json.loads(out.read_text())
    (run,) = result["runs"]["strata"]
    for interval in ("fetch_us", "produce_us"):
        p50, p90, p99 = (run[f"{interval}_{q}"] for q in ("p50", "p90", "p99"))
        assert 0 < p50 <= p90 <= p99 < 1_000_000, run  # microseconds, from the produce's send
    # the broker answers the fetch a produce wakes before the produce (tests/e2e/test_long_poll.py)
    assert run["fetch_us_p50"] < run["produce_us_p50"], run
    assert "| Strata |" in proc.stdout
