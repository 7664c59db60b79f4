"""A real local Spark session (``local[2]``) with the strata source registered.

By default the session loads the Strata jar, so ``format("strata")`` is the JVM source
(Python planning, JVM segment reads) and ``format("strata_python")`` the Python source
alone. ``STRATA_SPARK_READER=python`` leaves the jar out, so that ``strata`` is the
Python source (tests/spark/test_python_reader.py checks that in a child pytest).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest

from tests.conftest import REPO_ROOT


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    # Spark's Python workers are processes of their own: make the repo importable there
    path = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = str(REPO_ROOT) + (os.pathsep + path if path else "")
    from pyspark.sql import SparkSession

    from spark import StrataDataSource
    from spark.jar import strata_jar

    builder = SparkSession.builder
    if os.environ.get("STRATA_SPARK_READER", "jvm") == "jvm":
        builder = builder.config("spark.jars", strata_jar())
    session = (
        builder.master("local[2]")
        .appName("strata-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.sql.session.timeZone", "UTC")
        # The tests' reads are small: the JIT's first tier is enough for them, and the JVM
        # spends half the CPU at start (10 CPU-seconds instead of 20 on this machine).
        .config("spark.driver.extraJavaOptions", "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    session.dataSource.register(StrataDataSource)
    try:
        yield session
    finally:
        session.stop()
