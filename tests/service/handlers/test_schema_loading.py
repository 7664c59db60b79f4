"""The first request of an API version loads its codecs on a worker thread, not on the loop
(importing kio's generated modules held the event loop 50-200 ms on a busy machine)."""

from __future__ import annotations

import asyncio
import struct
import threading

import pytest

from common.protocol import codec
from service.handlers import router as router_module
from service.handlers.router import Router

INIT_PRODUCER_ID = 22


def _frame(api_key: int, version: int) -> bytes:
    return struct.pack(">hhi", api_key, version, 7) + b"\xff\xff" + b"\0" * 8


def test_the_first_request_of_a_version_loads_its_codecs_once_on_a_worker_thread(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(router_module, "_SCHEMAS_READY", set())
    codec._request_reader.cache_clear()
    codec._response_writer.cache_clear()
    loads: list[tuple[int, int, bool, int]] = []

    def load(api_key: int, version: int, request: bool = True) -> None:
        loads.append((api_key, version, request, threading.get_ident()))
        codec.load_schemas(api_key, version, request)

    monkeypatch.setattr(router_module, "load_schemas", load)
    router = Router(None)  # type: ignore[arg-type] - prepare reads no broker state

    async def run() -> int:
        first = router.prepare(_frame(INIT_PRODUCER_ID, 3))
        second = router.prepare(_frame(INIT_PRODUCER_ID, 3))  # while the first loads: the same load
        assert first is not None and second is not None
        await asyncio.gather(first, second)
        assert router.prepare(_frame(INIT_PRODUCER_ID, 3)) is None  # loaded: dispatched at once
        assert router.prepare(_frame(999, 0)) is None  # unknown API: dispatch refuses it
        assert router.prepare(_frame(INIT_PRODUCER_ID, 99)) is None  # unsupported version: same
        return threading.get_ident()

    loop_thread = asyncio.run(run())
    assert [(k, v, r) for k, v, r, _ in loads] == [(INIT_PRODUCER_ID, 3, True)]
    assert loads[0][3] != loop_thread
    assert codec._request_reader.cache_info().currsize == 1  # what the dispatch will use, built
    assert codec._response_writer.cache_info().currsize == 1


def test_a_produce_request_loads_only_its_response_codec(monkeypatch: pytest.MonkeyPatch) -> None:
    """Produce requests have a hand-written decoder: only the response side is loaded."""
    monkeypatch.setattr(router_module, "_SCHEMAS_READY", set())
    calls: list[tuple[int, int, bool]] = []
    monkeypatch.setattr(router_module, "load_schemas", lambda k, v, request=True: calls.append((k, v, request)))

    async def run() -> None:
        ready = Router(None).prepare(_frame(0, 9))  # type: ignore[arg-type]
        assert ready is not None
        await ready

    asyncio.run(run())
    assert calls == [(0, 9, False)]
