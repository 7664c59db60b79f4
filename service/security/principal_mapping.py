"""``ssl.principal.mapping.rules``: a client certificate's subject → a principal name.

Kafka's ``SslPrincipalMapper``: a comma-separated list of rules tried in order,
the first that applies wins::

    RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/,
    RULE:^CN=(.*?),OU=(.*?),O=(.*?),L=(.*?),ST=(.*?),C=(.*?)$/$1@$2/L,
    DEFAULT

``RULE:pattern/replacement/[L|U]`` applies when ``pattern`` matches the whole
distinguished name (RFC 2253, as ``X500Principal.getName()`` gives it:
``CN=alice,OU=eng,O=Acme,C=US``); the name is the replacement (``$1`` a group),
lower- or upper-cased by the flag. ``DEFAULT`` is the distinguished name itself.
When no rule applies the client is refused (Kafka: "No rules apply to ...").

Immutable after parsing; thread-safe.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["NoRuleAppliesError", "PrincipalMapper"]

_RULE = re.compile(
    r"\s*(?:(DEFAULT)|RULE:((?:\\.|[^\\/])*)/((?:\\.|[^\\/])*)/([LU]?)(.*?)|(.*?))\s*(?:,\s*|$)"
)
_JAVA_GROUP = re.compile(r"\\(.)|\$(\d+)")


class NoRuleAppliesError(ValueError):
    """No mapping rule applies to a distinguished name."""


@dataclass(frozen=True, slots=True)
class _Rule:
    pattern: re.Pattern[str] | None  # None: DEFAULT
    replacement: str = ""
    case: str = ""

    def apply(self, dn: str) -> str | None:
        if self.pattern is None:
            return dn
        match = self.pattern.fullmatch(dn)
        if match is None:
            return None
        name = match.expand(self.replacement)
        return name.lower() if self.case == "L" else name.upper() if self.case == "U" else name


def _python_replacement(java: str) -> str:
    """A Java ``Matcher.replaceAll`` replacement (``$1``, ``\\x``) as ``re.expand``'s."""

    def one(m: re.Match[str]) -> str:
        if m.group(1) is not None:
            return m.group(1).replace("\\", "\\\\")
        return f"\\g<{m.group(2)}>"

    return _JAVA_GROUP.sub(one, java)


class PrincipalMapper:
    """The parsed rules; ``ValueError`` on a malformed rule (at broker start)."""

    def __init__(self, rules: str) -> None:
        self.rules_text = rules
        self._rules: list[_Rule] = []
        text = rules.strip() or "DEFAULT"
        pos = 0
        while pos < len(text):
            match = _RULE.match(text, pos)
            if match is None or match.end() == pos:
                raise ValueError(f"ssl.principal.mapping.rules: cannot parse {text[pos:]!r}")
            pos = match.end()
            if match.group(1):
                self._rules.append(_Rule(None))
            elif match.group(2) is not None:
                if match.group(5):
                    raise ValueError(f"ssl.principal.mapping.rules: invalid rule flags {match.group(5)!r}")
                try:
                    pattern = re.compile(match.group(2))
                except re.error as exc:
                    raise ValueError(f"ssl.principal.mapping.rules: bad pattern {match.group(2)!r}: {exc}") from None
                self._rules.append(_Rule(pattern, _python_replacement(match.group(3)), match.group(4)))
            elif match.group(6):
                raise ValueError(f"ssl.principal.mapping.rules: invalid rule: {match.group(6)!r}")

    def name(self, distinguished_name: str) -> str:
        """The principal name of ``distinguished_name``; ``NoRuleAppliesError`` if none applies."""
        for rule in self._rules:
            result = rule.apply(distinguished_name)
            if result is not None:
                return result
        raise NoRuleAppliesError(
            f"No rules apply to {distinguished_name}, rules {self.rules_text}"
        )
