"""A broker that cannot read the cluster metadata says so once per spell and then every
``BLIND_LOG_EVERY_S``, not at every heartbeat (stop 68: a blind broker heartbeats about ten
times a second and logged each one), and says when it reads the metadata again."""

from __future__ import annotations

import asyncio
import logging
import uuid
from pathlib import Path
from typing import Any

import pytest

from controller.membership import HeartbeatReply
from service.cluster import lifecycle
from service.cluster.identity import NodeIdentity
from service.cluster.lifecycle import BrokerLifecycle

BLIND = "has not read the cluster metadata"


class _Controller:
    """Answers every heartbeat: caught up, unfenced."""

    async def call(self, _api: int, _fields: Any, *, local: Any, answer: Any, timeout_s: float) -> HeartbeatReply:
        return HeartbeatReply(True, False, False)


def test_a_blind_spell_is_logged_at_its_start_every_few_seconds_and_at_its_end(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    age = [0.0]
    now = [1000.0]
    monkeypatch.setattr(lifecycle.time, "monotonic", lambda: now[0])
    broker = BrokerLifecycle(
        node_id=2, cluster_id="c", incarnation_id=uuid.uuid4(), listeners=(), rack=None,
        identity=NodeIdentity(2), data_dir=tmp_path, client=_Controller(), local=None,  # type: ignore[arg-type]
        metadata_revision=lambda: 5, heartbeat_interval_ms=500, session_timeout_ms=9000,
        metadata_age_s=lambda: age[0],
    )

    async def beats(seconds: float, every_s: float = 0.1) -> None:
        for _ in range(round(seconds / every_s)):
            await broker.heartbeat()
            now[0] += every_s
            age[0] += every_s

    caplog.set_level(logging.INFO, logger="strata.cluster.lifecycle")
    asyncio.run(beats(5.0))  # reading the metadata: nothing said
    assert BLIND not in caplog.text
    age[0] = 6.1  # two thirds of the session without a read, then 12 s more of heartbeats
    asyncio.run(beats(12.0))
    assert caplog.text.count(BLIND) == 3  # at 6.1 s, 11.1 s and 16.1 s
    assert not broker.may_lead()
    age[0] = 0.0
    asyncio.run(beats(1.0))
    assert caplog.text.count("broker 2 reads the cluster metadata again") == 1
    assert caplog.text.count(BLIND) == 3
