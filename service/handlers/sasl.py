"""SASL: SaslHandshake (17, v0-v1), SaslAuthenticate (36, v0-v2), and the SCRAM credential
store: DescribeUserScramCredentials (50), AlterUserScramCredentials (51).

Kafka's state machine, per connection (:class:`~service.security.session.Session`):
SaslHandshake names a mechanism of the listener's ``sasl.enabled.mechanisms``
(``UNSUPPORTED_SASL_MECHANISM`` and the connection closes otherwise); with v1 the
tokens then come in SaslAuthenticate requests, with v0 as bare size-prefixed frames
(:func:`raw_token`). A failed authentication answers ``SASL_AUTHENTICATION_FAILED``
with Kafka's message, and the connection closes once the answer is out and
``connection.failed.authentication.delay.ms`` has passed. Success makes the
principal ``User:<name>``; ``connections.max.reauth.ms`` > 0 gives the session that
lifetime (SaslAuthenticate v1+ ``session_lifetime_ms``; the client re-authenticates
with a new handshake, as the same principal, or the connection closes, KIP-368).

Only the user name, the mechanism and the client's address are logged; never a token.
AlterUserScramCredentials is a controller write (forwarded to the active controller);
DescribeUserScramCredentials is answered from this broker's metadata.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from common.errors import ErrorCode
from common.protocol.codec import FrameError, build, response_module
from service.handlers.context import RequestContext
from service.security.acls import CLUSTER_NAME, AclOperation, ResourceType
from service.security.credentials import (
    SECTION,
    Deletion,
    Upsertion,
    alter_credentials,
    user_credentials,
)
from service.security.principal import KafkaPrincipal
from service.security.sasl import SaslFailure, new_exchange
from service.security.scram import MECHANISMS, ScramCredential

__all__ = [
    "credential_lookup",
    "handle_alter_user_scram_credentials",
    "handle_describe_user_scram_credentials",
    "handle_sasl_authenticate",
    "handle_sasl_handshake",
    "raw_token",
]

log = logging.getLogger("strata.security")


def credential_lookup(ctx_broker: Any) -> Any:
    """user → mechanism → credential, read from the broker's newest metadata."""

    def lookup(user: str) -> dict[str, ScramCredential]:
        return user_credentials(ctx_broker.controller.metadata.section(SECTION), user)

    return lookup


def handle_sasl_handshake(ctx: RequestContext, request: Any) -> Any:
    mod = response_module(17, ctx.version)
    assert ctx.connection is not None
    session = ctx.connection.session
    offered = list(session.listener.sasl_mechanisms)
    if not session.listener.protocol.uses_sasl or session.exchange is not None:
        ctx.broker.metrics_error("SaslHandshake", ErrorCode.illegal_sasl_state)
        if session.exchange is not None:
            session.close_after_s = 0.0
        return build(mod.SaslHandshakeResponse, error_code=ErrorCode.illegal_sasl_state, mechanisms=tuple(offered))
    mechanism = str(request.mechanism)
    if mechanism not in offered:
        log.info("connection %s: unsupported SASL mechanism %r (enabled: %s)", ctx.connection.peer,
                 mechanism[:64], ",".join(offered))
        ctx.broker.metrics_error("SaslHandshake", ErrorCode.unsupported_sasl_mechanism)
        session.close_after_s = 0.0
        return build(mod.SaslHandshakeResponse, error_code=ErrorCode.unsupported_sasl_mechanism,
                     mechanisms=tuple(offered))
    session.mechanism = mechanism
    session.raw_tokens = ctx.version == 0
    session.exchange = new_exchange(mechanism, credential_lookup(ctx.broker))
    return build(mod.SaslHandshakeResponse, error_code=ErrorCode.none, mechanisms=tuple(offered))


async def handle_sasl_authenticate(ctx: RequestContext, request: Any) -> Any:
    mod = response_module(36, ctx.version)
    assert ctx.connection is not None
    session = ctx.connection.session
    if session.exchange is None or session.raw_tokens:
        # as Kafka's KafkaApis: on a connection that is not authenticating (a PLAINTEXT
        # listener, or authentication already done) the answer is an error, nothing more
        ctx.broker.metrics_error("SaslAuthenticate", ErrorCode.illegal_sasl_state)
        return build(mod.SaslAuthenticateResponse, error_code=ErrorCode.illegal_sasl_state,
                     error_message="SaslAuthenticate request received after successful authentication "
                     "or without a SaslHandshake", auth_bytes=b"", session_lifetime=0)
    try:
        answer = await _step(ctx.broker, ctx.connection, bytes(request.auth_bytes))
    except SaslFailure as exc:
        ctx.broker.metrics_error("SaslAuthenticate", ErrorCode.sasl_authentication_failed)
        return build(mod.SaslAuthenticateResponse, error_code=ErrorCode.sasl_authentication_failed,
                     error_message=str(exc), auth_bytes=b"", session_lifetime=0)
    lifetime = session.listener.max_reauth_ms if session.authenticated and session.exchange is None else 0
    return build(mod.SaslAuthenticateResponse, error_code=ErrorCode.none, error_message=None,
                 auth_bytes=answer, session_lifetime=lifetime)


async def raw_token(ctx_broker: Any, conn: Any, frame: bytes | memoryview) -> bytes:
    """A bare SASL token after SaslHandshake v0: the answer as a bare size-prefixed frame;
    a failure closes the connection (there is no error field to carry it)."""
    try:
        answer = await _step(ctx_broker, conn, bytes(frame))
    except SaslFailure as exc:
        raise FrameError(f"SASL authentication failed: {exc}") from None
    return len(answer).to_bytes(4, "big") + answer


async def _step(broker: Any, conn: Any, token: bytes) -> bytes:
    """One token of the exchange; on completion the session is authenticated."""
    session = conn.session
    exchange = session.exchange
    try:
        answer: bytes = await exchange.evaluate(token)
    except SaslFailure as exc:
        _failed(conn, exc)
        raise
    if not exchange.complete:
        return answer
    principal = KafkaPrincipal.user(exchange.username)
    if session.authenticated and session.principal != principal and session.listener.protocol.uses_sasl \
            and session.expires_at is not None:
        failure = SaslFailure("Cannot change principals during re-authentication")
        _failed(conn, failure)
        raise failure
    session.principal, session.authenticated = principal, True
    session.exchange, session.mechanism, session.raw_tokens = None, None, False
    reauth_ms = session.listener.max_reauth_ms
    session.expires_at = time.monotonic() + reauth_ms / 1000 if reauth_ms > 0 else None
    log.debug("connection %s authenticated as %s", conn.peer, principal)
    return answer


def _failed(conn: Any, exc: SaslFailure) -> None:
    session = conn.session
    user = getattr(session.exchange, "username", None)
    log.info("connection %s: SASL %s authentication failed for user %r: %s", conn.peer,
             session.mechanism, user, exc)
    session.exchange = None
    session.close_after_s = session.listener.failed_authentication_delay_s


# --------------------------------------------------------------------------- the credential store


def handle_describe_user_scram_credentials(ctx: RequestContext, request: Any) -> Any:
    mod = response_module(50, ctx.version)
    section = ctx.broker.controller.metadata.section(SECTION) or {}
    wanted = None if request.users is None else [u.name for u in request.users]
    names = sorted(section) if not wanted else list(dict.fromkeys(wanted))
    duplicates = {n for n in names if wanted and wanted.count(n) > 1}
    results = []
    for name in names:
        if name in duplicates:
            code, message, infos = ErrorCode.duplicate_resource, f"Cannot describe user {name} twice", ()
        elif name not in section:
            code, message, infos = (ErrorCode.resource_not_found,
                                    f"Attempt to describe a user credential that does not exist: {name}", ())
        else:
            code, message = ErrorCode.none, None
            infos = tuple(
                build(mod.CredentialInfo, mechanism=MECHANISMS[mech][0], iterations=int(data["iterations"]))
                for mech, data in sorted(section[name].items())
            )
        results.append(build(mod.DescribeUserScramCredentialsResult, user=name, error_code=code,
                             error_message=message, credential_infos=infos))
    return build(mod.DescribeUserScramCredentialsResponse, throttle_time=0, error_code=ErrorCode.none,
                 error_message=None, results=tuple(results))


async def handle_alter_user_scram_credentials(ctx: RequestContext, request: Any) -> Any:
    mod = response_module(51, ctx.version)
    deletions = [Deletion(d.name, int(d.mechanism)) for d in request.deletions]
    upsertions = [Upsertion(u.name, int(u.mechanism), int(u.iterations), bytes(u.salt), bytes(u.salted_password))
                  for u in request.upsertions]
    results: dict[str, tuple[ErrorCode, str | None]]
    if not ctx.allowed(AclOperation.ALTER, ResourceType.CLUSTER, CLUSTER_NAME):
        ctx.broker.metrics_error("AlterUserScramCredentials", ErrorCode.cluster_authorization_failed)
        denied = (ErrorCode.cluster_authorization_failed, "Not authorized to ALTER the cluster")
        results = dict.fromkeys([d.name for d in deletions] + [u.name for u in upsertions], denied)
    else:
        results = await alter_scram_credentials(ctx.broker, deletions, upsertions)
    return build(mod.AlterUserScramCredentialsResponse, throttle_time=0, results=tuple(
        build(mod.AlterUserScramCredentialsResult, user=user, error_code=code, error_message=message)
        for user, (code, message) in results.items()))


async def alter_scram_credentials(
    broker: Any, deletions: list[Deletion], upsertions: list[Upsertion]
) -> dict[str, tuple[ErrorCode, str | None]]:
    """Run the change on this broker's controller (the router forwarded the request here
    if this broker is not the active controller)."""
    controller = broker.active_controller()
    return await asyncio.to_thread(
        controller.alter_section, SECTION, lambda current: alter_credentials(current, deletions, upsertions)
    )
