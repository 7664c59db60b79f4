"""A broker's start survives the bucket failing its metadata reads for a moment (stop 68).

A restarted broker of the diskless kill test exited with "cannot start broker 1: cannot read
cluster metadata ...: timed out": moto, loaded, timed out one read of the metadata log, the
read a broker makes between being unfenced and serving. The poll that follows reads it again
anyway; that read, and the reads while a registration waits for its revision, are now tried
again instead of ending the start."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import pytest

from common.config import BrokerConfig
from common.errors import KafkaStorageError
from controller.metadata_view import MetadataView
from controller.registrations import Endpoint
from remote_tier.filesystem import FileSystemObjectStore
from service.broker import Broker
from service.cli.main import UP_DEFAULTS
from service.cluster.lifecycle import BrokerLifecycle
from service.handlers.router import api_table
from tests.remote_tier.flaky import FlakyObjectStore


def test_metadata_reads_failing_as_the_broker_is_unfenced_do_not_end_its_start(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    failing = threading.Event()
    store = FlakyObjectStore(FileSystemObjectStore(tmp_path / "bucket"),
                             fail_key=lambda _op, key: failing.is_set() and "metadata" in key)
    real_wait = BrokerLifecycle.wait_unfenced
    failed_reads: list[str] = []
    real_refresh = MetadataView.refresh

    async def unfenced_then_the_bucket_fails(self: BrokerLifecycle, timeout_s: float) -> bool:
        answer = await real_wait(self, timeout_s)
        failing.set()  # the reads after this fail for 0.5 s
        threading.Timer(0.5, failing.clear).start()
        return answer

    def refresh(view: MetadataView) -> bool:
        try:
            return real_refresh(view)
        except KafkaStorageError as exc:
            failed_reads.append(str(exc))
            raise

    monkeypatch.setattr(BrokerLifecycle, "wait_unfenced", unfenced_then_the_bucket_fails)
    monkeypatch.setattr(MetadataView, "refresh", refresh)

    async def body() -> None:
        broker = Broker(data_dir=tmp_path / "data", config=BrokerConfig(dict(UP_DEFAULTS)),
                        advertised_listeners=(Endpoint("PLAINTEXT", "127.0.0.1", 9092),), object_store=store)
        versions = {spec.key: spec.max_version for spec in api_table().values()}
        await broker.start(versions, 10.0)
        try:
            assert failed_reads, "the bucket failed no read during the start: the test tests nothing"
            while failing.is_set():
                await asyncio.sleep(0.05)
            await broker.create_topic("after", num_partitions=1)  # it serves, the metadata read again
            assert "after" in broker.controller.metadata.topics
        finally:
            await broker.stop()
            broker.close()

    asyncio.run(body())
