"""The admin API's OpenAPI document: valid OpenAPI 3.0 (openapi-spec-validator), and it documents
every route the listener serves, with every method."""

from __future__ import annotations

import re
from typing import Any

from openapi_spec_validator import validate

from service.http.openapi import OPENAPI
from service.http.server import AdminHttpServer

_UNDOCUMENTED = {"/", "/static/{name}", "/metrics", "/v1/openapi.json"}  # not JSON API operations


def test_the_document_is_valid_openapi() -> None:
    validate(OPENAPI)  # raises OpenAPIValidationError, naming the offending part


def test_every_route_is_documented_with_its_methods() -> None:
    server = AdminHttpServer(broker=None, host="127.0.0.1", port=0, connections=lambda: 0)  # type: ignore[arg-type]
    app = server._app()
    served: dict[str, set[str]] = {}
    for route in app.router.routes():
        info: Any = route.resource.get_info() if route.resource is not None else {}
        path = info.get("path") or re.sub(r"\{(\w+)(:[^}]*)?\}", r"{\1}", info.get("formatter", ""))
        if route.method != "HEAD" and path not in _UNDOCUMENTED:
            served.setdefault(path, set()).add(route.method.lower())
    documented = {path: {m for m in ops if m != "parameters"} for path, ops in OPENAPI["paths"].items()}
    assert served == documented
