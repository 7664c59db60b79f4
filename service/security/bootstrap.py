"""The first users of a fresh cluster: who may authenticate before anyone could create
a user over the wire.

Two sources, both created only when the user has no SCRAM credential yet (never
overwritten), by the active controller at its broker's start, with SCRAM-SHA-256
and SCRAM-SHA-512 credentials at 4096 iterations:

* ``STRATA_BOOTSTRAP_USER=NAME:PASSWORD`` in the environment of ``strata up``
  (Redpanda's ``RP_BOOTSTRAP_USER``), typically the first administrator, made a
  super user with ``super.users=User:NAME``. Leave it out of later starts: a user
  deleted while it is set comes back at the next start.
* the inter-broker user of ``sasl.jaas.config`` when brokers talk SASL to each
  other (what ``kafka-storage format --add-scram`` does for Kafka): the brokers
  must authenticate to each other before anything else can happen.

The password never leaves this process except salted (docs/adr/0021-security-in-the-cluster-metadata.md).
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Mapping, Sequence
from typing import Any

from service.security.credentials import SECTION
from service.security.scram import MECHANISMS, MIN_ITERATIONS, make_credential
from service.security.setup import InterBrokerSecurity

__all__ = ["ENV_BOOTSTRAP_USER", "bootstrap_users", "ensure_bootstrap_users"]

log = logging.getLogger("strata.security")
ENV_BOOTSTRAP_USER = "STRATA_BOOTSTRAP_USER"


def bootstrap_users(inter_broker: InterBrokerSecurity,
                    environ: Mapping[str, str] = os.environ) -> list[tuple[str, str]]:
    """``(user, password)`` pairs to make sure of; ``ValueError`` for a malformed variable."""
    users: list[tuple[str, str]] = []
    if inter_broker.sasl_mechanism and inter_broker.username and inter_broker.password is not None:
        users.append((inter_broker.username, inter_broker.password))
    spec = environ.get(ENV_BOOTSTRAP_USER)
    if spec:
        name, sep, password = spec.partition(":")
        if not sep or not name or not password:
            raise ValueError(f"{ENV_BOOTSTRAP_USER} must be NAME:PASSWORD")
        users.append((name, password))
    return users


async def ensure_bootstrap_users(broker: Any, users: Sequence[tuple[str, str]]) -> list[str]:
    """Create the credentials of ``users`` that have none, if this broker is the active
    controller; the names created."""
    if not users or not broker.is_active_controller():
        return []

    def change(current: Any) -> tuple[dict[str, Any], list[str]]:
        section = dict(current or {})
        created = []
        for name, password in users:
            if name not in section:
                section[name] = {m: make_credential(m, password, MIN_ITERATIONS).to_json() for m in MECHANISMS}
                created.append(name)
        return section, created

    created: list[str] = await asyncio.to_thread(broker.active_controller().alter_section, SECTION, change)
    if created:
        log.info("created the SCRAM credentials of bootstrap user(s) %s", ", ".join(created))
    return created
