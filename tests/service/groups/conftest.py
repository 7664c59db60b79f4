"""Fixtures of the consumer-protocol tests: a fake clock, an in-memory offsets log, and a
topics image holding ``orders`` (6 partitions)."""

from __future__ import annotations

import pytest

from tests.service.groups.test_consumer_protocol import FakeTopics
from tests.service.groups.test_coordinator import FakeTimer, MemoryLog


@pytest.fixture
def timer() -> FakeTimer:
    return FakeTimer()


@pytest.fixture
def log_() -> MemoryLog:
    return MemoryLog()


@pytest.fixture
def topics() -> FakeTopics:
    t = FakeTopics()
    t.add("orders", 6)
    return t
