"""One handler per Kafka API, registered in one routing table.

The ApiVersions answer is derived from :func:`api_table`, so the broker can
never advertise an API or a version it does not implement. Version ranges are
what librdkafka, kafka-python and aiokafka negotiate, limited to versions kio
has schemas for and this broker implements.
"""

from __future__ import annotations

from service.handlers.context import RequestContext
from service.handlers.router import ApiSpec, Router, api_table

__all__ = ["ApiSpec", "RequestContext", "Router", "api_table"]
