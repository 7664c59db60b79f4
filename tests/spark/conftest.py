"""A real local Spark session (``local[2]``) with the strata source registered."""

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

    session = (
        SparkSession.builder.master("local[2]")
        .appName("strata-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    session.dataSource.register(StrataDataSource)
    try:
        yield session
    finally:
        session.stop()
