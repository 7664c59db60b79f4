"""What a handler is given: the request header, the broker, and the connection it came on."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from service.protocol import RequestHeader

if TYPE_CHECKING:
    from service.broker import Broker
    from service.server import Connection

__all__ = ["Handler", "RequestContext"]


@dataclass(frozen=True, slots=True)
class RequestContext:
    header: RequestHeader
    broker: Broker
    connection: Connection | None

    @property
    def version(self) -> int:
        return self.header.api_version


Handler = Callable[[RequestContext, Any], Any]
