"""The Spark source without the Strata jar: the Python reader alone.

The rest of tests/spark runs with the jar (the JVM reads segment slices). Spark
fixes its classpath when the session starts, so the same end-to-end tests run
here once more in a child pytest whose session leaves the jar out.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys

from tests.conftest import REPO_ROOT


def test_the_end_to_end_spark_tests_pass_with_the_python_reader_alone() -> None:
    env = {**os.environ, "STRATA_SPARK_READER": "python"}
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/spark/test_spark_source.py"],
        cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=540, check=False,
    )
    summary = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else done.stderr[-2000:]
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-2000:]
    passed = int(re.search(r"(\d+) passed", summary).group(1))
    skipped = re.search(r"(\d+) skipped", summary)
    assert passed >= 13, summary
    # only the JVM reader's own test and three of planning and the broker's part (read_committed)
    assert skipped is not None and int(skipped.group(1)) == 4, summary
