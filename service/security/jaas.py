"""The username and password of Kafka's ``sasl.jaas.config`` line::

    org.apache.kafka.common.security.scram.ScramLoginModule required
        username="broker" password="secret";

(``PlainLoginModule`` alike). Only ``username`` and ``password`` are read; values are
double-quoted with ``\\"`` and ``\\\\`` escapes, or bare words. Errors never repeat the
text (it holds the password). Pure functions; thread-safe.
"""

from __future__ import annotations

import re

__all__ = ["parse_jaas_credentials"]

_OPTION = re.compile(r'(\w+)\s*=\s*(?:"((?:\\.|[^"\\])*)"|([^\s;"]+))')


def parse_jaas_credentials(text: str) -> tuple[str, str]:
    """``(username, password)``; ``ValueError`` (without the secret) when either is missing."""
    options = {}
    for match in _OPTION.finditer(text):
        value = match.group(2)
        if value is not None:
            value = re.sub(r"\\(.)", r"\1", value)
        else:
            value = match.group(3)
        options[match.group(1)] = value
    if not text.strip().rstrip().endswith(";"):
        raise ValueError("sasl.jaas.config must end with ';' (Kafka's JAAS syntax)")
    username, password = options.get("username"), options.get("password")
    if not username or password is None:
        raise ValueError("sasl.jaas.config needs username=\"...\" and password=\"...\"")
    return username, password
