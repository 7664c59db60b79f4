"""``strata up``'s configs: ``--config FILE`` (Kafka's ``server.properties``), ``--set
KEY=VALUE``, and the security flags for the common case, each a broker config:

==============================  ==================================================
``--listeners SPEC``            ``listeners`` (``PLAINTEXT://h:p,SASL_SSL://h:p``)
``--advertised-listeners SPEC`` ``advertised.listeners``
``--ssl-cert FILE``             ``ssl.certificate.location`` (Strata's; the file is followed)
``--ssl-key FILE``              ``ssl.key.location``
``--ssl-ca FILE``               ``ssl.truststore.location``
``--ssl-client-auth MODE``      ``ssl.client.auth``
``--sasl-mechanisms LIST``      ``sasl.enabled.mechanisms``
``--acls``                      ``authorizer.class.name`` = Kafka's StandardAuthorizer
``--super-users LIST``          ``super.users`` (``User:admin;User:broker``)
==============================  ==================================================

Precedence: ``--config`` < the flags < ``--set``. Secrets (``ssl.key.password``,
``sasl.jaas.config``) belong in the ``--config`` file, not on a command line that
``ps`` shows. Pure functions over argparse results.
"""

from __future__ import annotations

import argparse
import os
import re
from pathlib import Path

__all__ = ["UP_DEFAULTS", "add_security_options", "parse_properties", "parse_sets", "shift_ports",
           "up_configs"]

#: What ``strata up`` turns on unless told otherwise: tiered storage for every topic.
UP_DEFAULTS = {
    "remote.log.storage.system.enable": "true",
    "log.remote.storage.enable": "true",
}

STANDARD_AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"


def parse_sets(pairs: list[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"--set takes KEY=VALUE, got {pair!r}")
        out[key.strip()] = value.strip()
    return out


def parse_properties(text: str) -> dict[str, str]:
    """Java properties: ``key=value`` or ``key: value`` lines, ``#``/``!`` comments, a
    trailing backslash continues a line (Kafka's ``server.properties``)."""
    out: dict[str, str] = {}
    logical = ""
    for raw in text.splitlines():
        line = raw.strip() if not logical else raw.lstrip()
        if not logical and (not line or line[0] in "#!"):
            continue
        if line.endswith("\\") and not line.endswith("\\\\"):
            logical += line[:-1]
            continue
        logical += line
        match = re.match(r"([^=:\s]+)\s*[=:\s]\s*(.*)$", logical)
        if match is None:
            raise ValueError(f"cannot read the property line {logical.split('=')[0][:40]!r}...")
        out[match.group(1)] = match.group(2).strip()
        logical = ""
    return out


def add_security_options(up: argparse.ArgumentParser) -> None:
    group = up.add_argument_group("listeners and security (Kafka's configs; see docs/operations.md)")
    group.add_argument("--config", default=None, metavar="FILE",
                       help="broker configs in Kafka's server.properties format (secrets go here)")
    group.add_argument("--listeners", default=None, metavar="SPEC",
                       help="listeners, e.g. PLAINTEXT://127.0.0.1:9092,SASL_SSL://127.0.0.1:9093")
    group.add_argument("--advertised-listeners", default=None, metavar="SPEC",
                       help="advertised.listeners (default: the listeners)")
    group.add_argument("--ssl-cert", default=None, metavar="FILE",
                       help="PEM certificate chain of the TLS listeners")
    group.add_argument("--ssl-key", default=None, metavar="FILE", help="PEM private key of --ssl-cert")
    group.add_argument("--ssl-ca", default=None, metavar="FILE",
                       help="PEM CA certificates client certificates (and peers) are verified with")
    group.add_argument("--ssl-client-auth", default=None, choices=("none", "requested", "required"),
                       help="client certificates on SSL listeners (default none)")
    group.add_argument("--sasl-mechanisms", default=None, metavar="LIST",
                       help="SASL mechanisms, from PLAIN,SCRAM-SHA-256,SCRAM-SHA-512 (default all)")
    group.add_argument("--acls", action="store_true",
                       help="authorize requests by ACLs (Kafka's StandardAuthorizer)")
    group.add_argument("--super-users", default=None, metavar="LIST",
                       help="principals allowed everything, e.g. 'User:admin;User:broker'")


def up_configs(args: argparse.Namespace) -> dict[str, str]:
    """The broker configs of ``args`` (``ValueError``/``OSError`` naming the bad one)."""
    out: dict[str, str] = {}
    if args.config:
        out.update(parse_properties(Path(args.config).read_text()))
    flags = {
        "listeners": args.listeners,
        "advertised.listeners": args.advertised_listeners,
        "ssl.truststore.location": args.ssl_ca,
        "ssl.client.auth": args.ssl_client_auth,
        "sasl.enabled.mechanisms": args.sasl_mechanisms,
        "super.users": args.super_users,
        "authorizer.class.name": STANDARD_AUTHORIZER if args.acls else None,
    }
    out.update({k: v for k, v in flags.items() if v is not None})
    if bool(args.ssl_cert) != bool(args.ssl_key):
        raise ValueError("--ssl-cert and --ssl-key go together")
    if args.ssl_cert:
        for key, path in (("ssl.certificate.location", args.ssl_cert), ("ssl.key.location", args.ssl_key)):
            Path(path).read_bytes()  # readable now, or OSError naming it
            out[key] = os.path.abspath(path)  # not resolved: a Kubernetes secret's symlinks are followed at each look
    out.update(parse_sets(args.set))
    return out


def shift_ports(spec: str, offset: int) -> str:
    """``NAME://host:port,...`` with every non-zero port moved by ``offset`` (broker K of
    ``strata up --brokers N`` takes the listeners' ports plus K-1)."""
    def one(m: re.Match[str]) -> str:
        port = int(m.group(2))
        return f"{m.group(1)}:{port + offset if port else 0}"

    return re.sub(r"(://[^,]*?):(\d+)(?=,|$)", one, spec.strip())
