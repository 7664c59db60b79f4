from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from local_tier.dirlock import LOCK_FILE, DataDirError, DataDirInUseError, DataDirLock


def test_the_lock_is_exclusive_until_released(tmp_path: Path) -> None:
    data_dir = tmp_path / "new" / "data"
    lock = DataDirLock.acquire(data_dir)  # creates the directory
    assert (data_dir / LOCK_FILE).read_text() == f"{os.getpid()}\n"
    with pytest.raises(DataDirInUseError, match=f"process {os.getpid()} holds its lock"):
        DataDirLock.acquire(data_dir)
    lock.release()
    with DataDirLock.acquire(data_dir) as again:
        assert again.held
    assert not again.held


def test_a_lock_held_by_another_process_names_it_and_dies_with_it(tmp_path: Path) -> None:
    holder = subprocess.Popen(
        [sys.executable, "-c", (
            "import time; from pathlib import Path; from local_tier.dirlock import DataDirLock; "
            f"lock = DataDirLock.acquire(Path({str(tmp_path)!r})); print('held', flush=True); "
            "time.sleep(60)"
        )],
        stdout=subprocess.PIPE, text=True, cwd=Path(__file__).resolve().parents[2],
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        with pytest.raises(DataDirInUseError, match=f"process {holder.pid} holds its lock"):
            DataDirLock.acquire(tmp_path)
    finally:
        holder.kill()
        holder.communicate()
    DataDirLock.acquire(tmp_path).release()  # the kernel dropped it with the process


def test_a_data_dir_that_is_a_file_says_so(tmp_path: Path) -> None:
    (tmp_path / "data").write_text("")
    with pytest.raises(DataDirError, match=f"cannot use the data directory {tmp_path / 'data'}"):
        DataDirLock.acquire(tmp_path / "data")
