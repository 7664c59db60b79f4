"""A descriptor bound of two, owned by the test's thread (it plays the event loop)."""

from __future__ import annotations

from types import ModuleType

import pytest

from local_tier.descriptors import DescriptorTable


def bound_of_two(monkeypatch: pytest.MonkeyPatch, module: ModuleType, name: str) -> DescriptorTable:
    """``module.name`` (``OPEN_INDEXES``, ``OPEN_SEGMENTS``) replaced by a table of limit 2."""
    table = DescriptorTable(limit=2)
    table.bind()
    monkeypatch.setattr(module, name, table)
    return table
