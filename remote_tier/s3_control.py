"""Retries of the control plane's small S3 requests: :func:`control_call`.

The control client of :class:`~remote_tier.s3.S3ObjectStore` has botocore's own retries
off. A request that heard nothing within the control timeout, or lost its connection, is
sent again at once, on a new connection: a stalled connection says nothing about the
store's load, and botocore's backoff (up to a second before the first retry) would eat
the time a controller lease allows a renewal. Throttling and 5xx answers are retried
after a short jittered backoff, as botocore would. Conditional writes are safe to retry:
every caller recognizes its own write when a retry finds the key taken.

Thread-safe (no state); blocking.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from typing import TypeVar

import botocore.exceptions
import urllib3.exceptions

__all__ = ["control_call"]

_T = TypeVar("_T")

#: the request went out and nothing usable came back: send it again at once
_STALLED = (
    botocore.exceptions.ReadTimeoutError,
    botocore.exceptions.ConnectTimeoutError,
    botocore.exceptions.ConnectionClosedError,
    botocore.exceptions.EndpointConnectionError,
    botocore.exceptions.ResponseStreamingError,
    urllib3.exceptions.ProtocolError,
    urllib3.exceptions.ReadTimeoutError,
)
#: S3's answers that mean "later", beside any 5xx
_THROTTLED = frozenset({"SlowDown", "Throttling", "ThrottlingException", "RequestTimeout", "RequestLimitExceeded"})


def control_call(call: Callable[[], _T], attempts: int) -> _T:
    """``call()``, sent again (at most ``attempts`` times in all) when it stalled, lost its
    connection, or was throttled; the last error is raised."""
    for attempt in range(1, attempts + 1):
        try:
            return call()
        except _STALLED:
            if attempt >= attempts:
                raise
        except botocore.exceptions.ClientError as err:
            status = int(err.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0) or 0)
            code = str(err.response.get("Error", {}).get("Code", ""))
            if attempt >= attempts or not (status >= 500 or code in _THROTTLED):
                raise
            time.sleep(random.uniform(0, min(1.0, 0.05 * 2**attempt)))  # full jitter
    raise AssertionError("unreachable")
