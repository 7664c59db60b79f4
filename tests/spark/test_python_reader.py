"""The Spark source without the Strata jar: ``format("strata")`` is the Python source alone.

test_spark_source.py runs every test of what a reader does with both readers, in one
session that has the jar (``strata`` is the JVM source there, ``strata_python`` the Python
one). What only a session without the jar can show is that ``strata`` is then the Python
source and reads on its own. Spark fixes its classpath when the session starts, so that
read runs in a child pytest whose session leaves the jar out (``STRATA_SPARK_READER=python``),
on a bucket written by hand (tests/spark/test_txns.py): every codec, committed and aborted
transactions, no broker.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import REPO_ROOT
from tests.spark.test_txns import TOPIC, _history, _write_bucket

CHILD = "test_in_a_session_without_the_jar_strata_reads_with_the_python_reader"


def test_without_the_jar_strata_is_the_python_source() -> None:
    env = {**os.environ, "STRATA_SPARK_READER": "python"}
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"{__file__}::{CHILD}"],
        cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=300, check=False,
    )
    summary = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else done.stderr[-2000:]
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-2000:]
    assert re.fullmatch(r"1 passed in .*", summary), summary


@pytest.mark.skipif(os.environ.get("STRATA_SPARK_READER") != "python",
                    reason="run by the test above, in a child pytest whose Spark session has no jar")
def test_in_a_session_without_the_jar_strata_reads_with_the_python_reader(spark: Any, tmp_path: Path) -> None:
    from spark.jar import PROVIDER_CLASS

    assert not spark.sparkContext._jvm.org.apache.spark.util.Utils.classIsLoadable(PROVIDER_CLASS)
    log = _history()
    _write_bucket(tmp_path, log, cuts=[5, 12, 20])

    def read(**options: str) -> list[tuple[int, bytes, bytes]]:
        reader = spark.read.format("strata").option("object.store", tmp_path.as_uri()).option("subscribe", TOPIC)
        for k, v in options.items():
            reader = reader.option(k, v)
        return sorted((r.offset, bytes(r.key), bytes(r.value))
                      for r in reader.load().select("offset", "key", "value").collect())

    def records(offsets: list[int]) -> list[tuple[int, bytes, bytes]]:
        return [(o, b"k%d" % o, b"v%d" % o) for o in offsets]

    assert read(**{"kafka.isolation.level": "read_committed", "minPartitions": "7"}) == records(log.committed)
    assert read(includeHeaders="true") == records(log.data)  # read_uncommitted, through aiokafka's reader
    assert len(log.data) > len(log.committed)
