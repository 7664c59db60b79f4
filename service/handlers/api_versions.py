"""ApiVersions (key 18): derived from the routing table."""

from __future__ import annotations

from typing import Any

from service.handlers.router import RequestContext, api_table
from service.protocol import build, response_module

__all__ = ["handle_api_versions"]


def handle_api_versions(ctx: RequestContext, request: Any) -> Any:
    mod = response_module(18, ctx.version)
    keys = tuple(
        build(mod.ApiVersion, api_key=s.key, min_version=s.min_version, max_version=s.max_version)
        for s in sorted(api_table().values(), key=lambda s: s.key)
    )
    return build(mod.ApiVersionsResponse, error_code=0, api_keys=keys, throttle_time=0)
