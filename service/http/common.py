"""What every route of the HTTP listener shares: the JSON error, and bounded input parsing.

Every value taken from a request (body, path, query) is checked here before use:
type, range, length. A bad one is an :class:`ApiError` (400) naming the parameter.
"""

from __future__ import annotations

import json
from typing import Any

from aiohttp import web

__all__ = [
    "VISIBLE",
    "ApiError",
    "body_int",
    "error_response",
    "json_body",
    "path_int",
    "query_bool",
    "query_int",
    "query_list",
    "string_map",
]

#: the request key of a list route's filter, ``name -> bool``, set by the HTTP security
#: middleware for a principal without DESCRIBE on the cluster (absent: all is visible)
VISIBLE = "strata.visible"


class ApiError(Exception):
    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status, self.code, self.message = status, code, message


def error_response(status: int, code: str, message: str, headers: dict[str, str] | None = None) -> web.Response:
    return web.json_response({"error_code": code, "message": message}, status=status, headers=headers)


def _bad(message: str) -> ApiError:
    return ApiError(400, "INVALID_REQUEST", message)


async def json_body(request: web.Request) -> dict[str, Any]:
    try:
        body = await request.json(loads=json.loads)
    except (ValueError, UnicodeDecodeError) as exc:
        raise _bad(f"the body is not JSON: {exc}") from None
    if not isinstance(body, dict):
        raise _bad("the body must be a JSON object")
    return body


def string_map(value: Any, what: str) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
        raise _bad(f"{what} must be an object of string values")
    return dict(value)


def body_int(value: Any, what: str, default: int) -> int:
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int):
        raise _bad(f"{what} must be an integer")
    return value


def _int(text: str, what: str, lo: int, hi: int) -> int:
    try:
        value = int(text)
    except ValueError:
        raise _bad(f"{what} must be an integer, got {text[:40]!r}") from None
    if not lo <= value <= hi:
        raise _bad(f"{what} must be between {lo} and {hi}, got {value}")
    return value


def path_int(request: web.Request, name: str, lo: int = 0, hi: int = 2**31 - 1) -> int:
    return _int(request.match_info[name], name, lo, hi)


def query_int(request: web.Request, name: str, default: int | None, lo: int = 0,
              hi: int = 2**63 - 1) -> int | None:
    text = request.query.get(name)
    if text is None or text == "":
        return default
    return _int(text, name, lo, hi)


def query_bool(request: web.Request, name: str, default: bool) -> bool:
    text = request.query.get(name)
    if text is None or text == "":
        return default
    if text.lower() in ("true", "1", "yes"):
        return True
    if text.lower() in ("false", "0", "no"):
        return False
    raise _bad(f"{name} must be true or false, got {text[:40]!r}")


def query_list(request: web.Request, name: str, limit: int) -> list[str]:
    values = request.query.getall(name, [])
    if len(values) > limit:
        raise _bad(f"at most {limit} {name} parameters per request")
    return list(values)
