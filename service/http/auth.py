"""The HTTP listener's security: TLS, who is calling, and what each route may do.

* TLS (``http.ssl.enable``) with the Kafka listeners' ``ssl.keystore.*``; client
  certificates with ``http.ssl.client.auth`` (verified against ``ssl.truststore.*``).
* Authentication (``http.authentication.methods``): ``mtls`` takes the principal from
  the client certificate (``ssl.principal.mapping.rules``, as the SSL listeners do);
  ``basic`` checks ``Authorization: Basic`` against the users' SCRAM credentials, as
  SASL/PLAIN does (only over TLS: refused at start otherwise). A successful Basic check
  is remembered for a minute by a keyed hash of the pair, never the password.
  ``http.authentication.open.paths`` (default ``/v1/health``, ``/v1/ready``; add
  ``/metrics`` for a scraper) are answered to anyone. Others without a principal: 401.
* Authorization: with an authorizer, each route needs the Kafka operation it performs
  (:data:`ROUTE_OPERATIONS`), else 403. The topic and group lists answer, as Kafka's
  Metadata and ListGroups do, everything to a principal with DESCRIBE on the cluster
  and to others what they may DESCRIBE (the handler reads the filter from
  ``request[VISIBLE]``); the cluster's other views need DESCRIBE on the cluster.

Not thread-safe: a middleware on the broker's event loop (PBKDF2 runs on a thread).
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import hashlib
import hmac
import secrets
import ssl
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from service.http.common import VISIBLE, error_response
from service.security.acls import CLUSTER_NAME, AclOperation, ResourceType
from service.security.principal import KafkaPrincipal
from service.security.principal_mapping import NoRuleAppliesError, PrincipalMapper
from service.security.scram import ScramCredential
from service.security.tls import rfc2253_subject, tls_settings
from service.security.tls_reload import TlsSources

__all__ = ["ROUTE_OPERATIONS", "HttpSecurity", "http_security"]

Op, Res = AclOperation, ResourceType
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

#: (method, route) → (operation, resource type, where the name comes from: a match_info
#: key, "" for the cluster, or "body:name" for a JSON body's field)
ROUTE_OPERATIONS: dict[tuple[str, str], tuple[AclOperation, ResourceType, str]] = {
    ("GET", "/metrics"): (Op.DESCRIBE, Res.CLUSTER, ""),
    ("GET", "/v1/cluster"): (Op.DESCRIBE, Res.CLUSTER, ""),
    ("GET", "/v1/brokers"): (Op.DESCRIBE, Res.CLUSTER, ""),
    ("GET", "/v1/history"): (Op.DESCRIBE, Res.CLUSTER, ""),
    ("GET", "/v1/topics"): (Op.DESCRIBE, Res.TOPIC, "filter"),
    ("POST", "/v1/topics"): (Op.CREATE, Res.TOPIC, "body:name"),
    ("GET", "/v1/topics/{topic}"): (Op.DESCRIBE, Res.TOPIC, "topic"),
    ("DELETE", "/v1/topics/{topic}"): (Op.DELETE, Res.TOPIC, "topic"),
    ("PATCH", "/v1/topics/{topic}/configs"): (Op.ALTER_CONFIGS, Res.TOPIC, "topic"),
    ("GET", "/v1/topics/{topic}/partitions"): (Op.DESCRIBE, Res.TOPIC, "topic"),
    ("GET", "/v1/topics/{topic}/partitions/{partition}/records"): (Op.READ, Res.TOPIC, "topic"),
    ("GET", "/v1/groups"): (Op.DESCRIBE, Res.GROUP, "filter"),
    ("GET", "/v1/groups/{group}"): (Op.DESCRIBE, Res.GROUP, "group"),
}
_REMEMBER_S = 60.0


@dataclass
class HttpSecurity:
    """Everything the HTTP listener needs to know about security (built at start)."""

    ssl_context: ssl.SSLContext | None = None
    methods: frozenset[str] = frozenset()
    open_paths: frozenset[str] = frozenset({"/v1/health", "/v1/ready"})
    mapper: PrincipalMapper | None = None
    #: user → mechanism → credential
    credentials: Callable[[str], dict[str, ScramCredential]] | None = None
    authorizer: Any = None
    _key: bytes = field(default_factory=lambda: secrets.token_bytes(32))
    _remembered: dict[bytes, tuple[str, float]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if "basic" in self.methods and self.ssl_context is None:
            raise ValueError("http.authentication.methods=basic sends passwords: it needs http.ssl.enable=true")
        if "mtls" in self.methods and (self.ssl_context is None or self.ssl_context.verify_mode == ssl.CERT_NONE):
            raise ValueError("http.authentication.methods=mtls needs http.ssl.enable=true and "
                             "http.ssl.client.auth=requested or required")

    @web.middleware
    async def middleware(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        if not self.methods and self.authorizer is None:
            return await handler(request)
        if request.path in self.open_paths:
            return await handler(request)
        principal = await self._principal(request)
        if principal is None:
            return error_response(401, "SASL_AUTHENTICATION_FAILED",
                                  "authentication required (" + " or ".join(sorted(self.methods)) + ")",
                                  headers={"WWW-Authenticate": 'Basic realm="strata"'} if "basic" in self.methods
                                  else None)
        refusal = await self._refusal(request, principal)
        if refusal is not None:
            return error_response(403, refusal, f"{principal} is not authorized for {request.method} {request.path}")
        return await handler(request)

    async def _principal(self, request: web.Request) -> KafkaPrincipal | None:
        if not self.methods:
            return KafkaPrincipal.user("ANONYMOUS")
        if "mtls" in self.methods and request.transport is not None:
            cert = request.transport.get_extra_info("peercert")
            if cert:
                try:
                    return KafkaPrincipal.user((self.mapper or PrincipalMapper("DEFAULT")).name(rfc2253_subject(cert)))
                except NoRuleAppliesError:
                    return None
        header = request.headers.get("Authorization", "")
        if "basic" in self.methods and header[:6].lower() == "basic ":
            return await self._basic(header[6:].strip())
        return None

    async def _basic(self, encoded: str) -> KafkaPrincipal | None:
        try:
            user, sep, password = base64.b64decode(encoded, validate=True).decode().partition(":")
        except (binascii.Error, UnicodeDecodeError):
            return None
        if not sep or not user or self.credentials is None:
            return None
        tag = hmac.new(self._key, f"{user}\0{password}".encode(), hashlib.sha256).digest()
        known = self._remembered.get(tag)
        if known is not None and known[1] > time.monotonic():
            return KafkaPrincipal.user(known[0])
        stored = self.credentials(user)
        cheapest = min(stored.values(), key=lambda c: c.iterations, default=None)
        if cheapest is None or not await asyncio.to_thread(cheapest.check_password, password):
            return None
        if len(self._remembered) > 10_000:
            self._remembered.clear()
        self._remembered[tag] = (user, time.monotonic() + _REMEMBER_S)
        return KafkaPrincipal.user(user)

    async def _refusal(self, request: web.Request, principal: KafkaPrincipal) -> str | None:
        if self.authorizer is None:
            return None
        route = getattr(request.match_info.route.resource, "canonical", None)
        needed = ROUTE_OPERATIONS.get((request.method, route or ""))
        if needed is None:
            return None  # the console's page and files, the OpenAPI document: any authenticated caller
        op, rtype, source = needed
        if source == "filter":  # a list: all of it with DESCRIBE on the cluster, else what may be seen
            if not self._allowed(principal, request, Op.DESCRIBE, Res.CLUSTER, CLUSTER_NAME):
                request[VISIBLE] = lambda name: self._allowed(principal, request, op, rtype, name)
            return None
        if rtype == Res.CLUSTER:
            name = CLUSTER_NAME
        elif source.startswith("body:"):
            try:
                body = await request.json()
            except ValueError:
                return None  # the handler answers the malformed body
            name = str(body.get(source[5:], "")) if isinstance(body, dict) else ""
            if op == Op.CREATE and self._allowed(principal, request, Op.CREATE, Res.CLUSTER, CLUSTER_NAME):
                return None
        else:
            name = request.match_info.get(source, "")
        if self._allowed(principal, request, op, rtype, name):
            return None
        return {Res.TOPIC: "TOPIC_AUTHORIZATION_FAILED", Res.GROUP: "GROUP_AUTHORIZATION_FAILED"}.get(
            rtype, "CLUSTER_AUTHORIZATION_FAILED")

    def _allowed(self, principal: KafkaPrincipal, request: web.Request, op: AclOperation, rtype: ResourceType,
                 name: str) -> bool:
        host = request.remote or ""
        return bool(self.authorizer.authorize(principal, host, op, rtype, name))


def http_security(config: Any, authorizer: Any, credentials: Any, sources: TlsSources | None = None) -> HttpSecurity:
    """The HTTP listener's security from the broker's ``http.*`` and ``ssl.*`` configs
    (``ValueError`` for a combination that would send passwords in clear); its TLS
    context is one of ``sources``, following the certificate files."""
    context = None
    if config.get_bool("http.ssl.enable"):
        settings = tls_settings(config, config.get_str("http.ssl.client.auth"))
        context = (sources or TlsSources()).get("HTTP listener", settings, server=True).front
    methods = frozenset(m for m in config.get_str("http.authentication.methods").split(",") if m)
    open_paths = frozenset(p for p in config.get_str("http.authentication.open.paths").split(",") if p)
    return HttpSecurity(context, methods, open_paths, PrincipalMapper(config.get_str("ssl.principal.mapping.rules")),
                        credentials, authorizer)
