"""Headless Chromium driven over the DevTools protocol, for the console tests.

Debian's ``chromium`` with ``--remote-debugging-port=0``; the port is read from
the ``DevToolsActivePort`` file Chromium writes in its profile directory, and the
page is driven through its websocket (aiohttp's client): navigate, evaluate
JavaScript in the page, take screenshots. No browser download, no Node.
"""

from __future__ import annotations

import asyncio
import base64
import json
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any, Self

import aiohttp

__all__ = ["Page", "chromium_binary"]


def chromium_binary() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


class Page:
    """One page of a headless Chromium this object starts and stops."""

    def __init__(self, binary: str, profile: Path, width: int = 1280, height: int = 900) -> None:
        self._binary = binary
        self._profile = profile
        self._size = (width, height)
        self._proc: subprocess.Popen[bytes] | None = None
        self._http: aiohttp.ClientSession | None = None
        self._ws: aiohttp.ClientWebSocketResponse | None = None
        self._next_id = 0

    async def __aenter__(self) -> Self:
        self._profile.mkdir(parents=True, exist_ok=True)
        port_file = self._profile / "DevToolsActivePort"
        port_file.unlink(missing_ok=True)
        self._proc = subprocess.Popen(  # noqa: ASYNC220 - started once, not awaited
            [self._binary, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
             "--hide-scrollbars", f"--window-size={self._size[0]},{self._size[1]}",
             "--remote-debugging-port=0", "--remote-debugging-address=127.0.0.1",
             f"--user-data-dir={self._profile}", "about:blank"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            start_new_session=True)
        deadline = time.monotonic() + 60
        while not (port_file.exists() and port_file.read_text().strip()):
            if self._proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"chromium did not start (exit code {self._proc.poll()})")
            await asyncio.sleep(0.1)
        port = int(port_file.read_text().split()[0])
        self._http = aiohttp.ClientSession()
        async with self._http.get(f"http://127.0.0.1:{port}/json/list") as resp:
            targets = await resp.json(content_type=None)
        page = next(t for t in targets if t.get("type") == "page")
        self._ws = await self._http.ws_connect(page["webSocketDebuggerUrl"], max_msg_size=0)
        await self.send("Page.enable")
        await self.send("Emulation.setDeviceMetricsOverride",
                        {"width": self._size[0], "height": self._size[1], "deviceScaleFactor": 1,
                         "mobile": False})
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._ws is not None:
            await self._ws.close()
        if self._http is not None:
            await self._http.close()
        if self._proc is not None:
            self._proc.kill()
            self._proc.wait()

    async def send(self, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        assert self._ws is not None
        self._next_id += 1
        ident = self._next_id
        await self._ws.send_str(json.dumps({"id": ident, "method": method, "params": params or {}}))
        while True:
            msg = await asyncio.wait_for(self._ws.receive(), timeout=60)
            if msg.type != aiohttp.WSMsgType.TEXT:
                raise RuntimeError(f"DevTools connection ended: {msg.type}")
            body = json.loads(msg.data)
            if body.get("id") == ident:
                if "error" in body:
                    raise RuntimeError(f"{method}: {body['error']}")
                return dict(body.get("result", {}))

    async def goto(self, url: str) -> None:
        await self.send("Page.navigate", {"url": url})

    async def evaluate(self, expression: str) -> Any:
        """The JSON value of ``expression`` in the page (promises awaited)."""
        result = await self.send("Runtime.evaluate", {"expression": expression, "returnByValue": True,
                                                       "awaitPromise": True})
        if "exceptionDetails" in result:
            raise RuntimeError(f"{expression[:80]}: {result['exceptionDetails']}")
        return result["result"].get("value")

    async def wait_for(self, expression: str, timeout_s: float = 30) -> Any:
        """Poll ``expression`` until it is truthy; returns its value."""
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                value = await self.evaluate(expression)
            except RuntimeError as exc:  # the page is still loading
                value, failure = None, exc
            else:
                failure = None
            if value:
                return value
            if time.monotonic() > deadline:
                raise AssertionError(f"not true within {timeout_s} s: {expression} ({failure})")
            await asyncio.sleep(0.2)

    async def screenshot(self, path: Path) -> bytes:
        data = base64.b64decode((await self.send("Page.captureScreenshot", {"format": "png"}))["data"])
        path.write_bytes(data)
        return data
