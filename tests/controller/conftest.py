"""Controllers over a real FileSystemObjectStore in a temp dir."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path

import pytest

from controller import BrokerConfig, Controller, ObjectStoreMetadataStore
from remote_tier import FileSystemObjectStore

MakeController = Callable[..., Controller]


@pytest.fixture
def object_store(tmp_path: Path) -> FileSystemObjectStore:
    return FileSystemObjectStore(tmp_path / "bucket")


@pytest.fixture
def make_controller(object_store: FileSystemObjectStore) -> MakeController:
    """A new Controller on the shared store, with the given broker overrides."""

    def make(overrides: Mapping[str, str] | None = None) -> Controller:
        return Controller(ObjectStoreMetadataStore(object_store), BrokerConfig(overrides))

    return make


@pytest.fixture
def controller(make_controller: MakeController) -> Controller:
    return make_controller()
