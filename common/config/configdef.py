"""How one config key is described, parsed and validated (Kafka's ``ConfigDef``).

A value is always carried as a string (that is how Kafka's wire protocol and
``server.properties`` carry it); :meth:`ConfigDef.normalize` parses it by type,
runs the validator and returns the canonical string (``" 42 "`` -> ``"42"``,
``"TRUE"`` -> ``"true"``, ``"delete, compact"`` -> ``"delete,compact"``).
Invalid values raise :class:`InvalidConfigValue` whose message is Kafka's:
``Invalid value abc for configuration segment.bytes: Not a number of type INT``.

Everything here is immutable and thread-safe.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import IntEnum
from typing import Literal

__all__ = [
    "ConfigDef",
    "ConfigKind",
    "ConfigType",
    "InvalidConfigValue",
    "ParsedValue",
    "Validator",
    "at_least",
    "between",
    "local_retention_problem",
    "parse_cpu_list",
]

ConfigKind = Literal["boolean", "int", "long", "double", "string", "list", "password"]
ParsedValue = bool | float | str | list[str]
Validator = Callable[[ParsedValue], str | None]
"""Returns why a parsed value is invalid (Kafka's wording), or None if it is valid."""

_INT_RANGE = (-(2**31), 2**31 - 1)
_LONG_RANGE = (-(2**63), 2**63 - 1)


class ConfigType(IntEnum):
    """Kafka's DescribeConfigs (v3+) ``config_type`` ids."""

    UNKNOWN = 0
    BOOLEAN = 1
    STRING = 2
    INT = 3
    SHORT = 4
    LONG = 5
    DOUBLE = 6
    LIST = 7
    CLASS = 8
    PASSWORD = 9


class InvalidConfigValue(ValueError):
    """A value (or key) that a :class:`ConfigDef` rejects; ``str()`` is Kafka's message."""


@dataclass(frozen=True, slots=True)
class ConfigDef:
    """One config key: its type, default, validation and documentation.

    ``default`` is the string form, or None for "no default" (Kafka's null).
    ``broker_synonym`` is, for a topic config, the broker config whose value is the
    topic's default (``segment.bytes`` <- ``log.segment.bytes``).
    """

    name: str
    type: ConfigKind
    default: str | None
    documentation: str
    validator: Validator | None = None
    valid_values: tuple[str, ...] = ()
    broker_synonym: str | None = None

    @property
    def config_type(self) -> ConfigType:
        return ConfigType[self.type.upper()]

    @property
    def sensitive(self) -> bool:
        return self.type == "password"

    def parse(self, value: str) -> ParsedValue:
        """The typed value; raises :class:`InvalidConfigValue`."""
        parsed = self._parse_type(value.strip())
        reason = self._check(parsed)
        if reason is not None:
            raise self._invalid(value, reason)
        return parsed

    def normalize(self, value: str) -> str:
        """The canonical string of a valid value; raises :class:`InvalidConfigValue`."""
        parsed = self.parse(value)
        if isinstance(parsed, bool):
            return "true" if parsed else "false"
        if isinstance(parsed, list):
            return ",".join(parsed)
        return str(parsed) if not isinstance(parsed, str) else parsed

    def _parse_type(self, text: str) -> ParsedValue:
        if self.type == "boolean":
            if text.lower() not in ("true", "false"):
                raise self._invalid(text, "Expected value to be either true or false")
            return text.lower() == "true"
        if self.type in ("int", "long"):
            lo, hi = _INT_RANGE if self.type == "int" else _LONG_RANGE
            try:
                number = int(text)
            except ValueError:
                number = None
            if number is None or not lo <= number <= hi:
                raise self._invalid(text, f"Not a number of type {self.type.upper()}")
            return number
        if self.type == "double":
            try:
                return float(text)
            except ValueError:
                raise self._invalid(text, "Not a number of type DOUBLE") from None
        if self.type == "list":
            return [item.strip() for item in text.split(",") if item.strip()]
        return text

    def _check(self, parsed: ParsedValue) -> str | None:
        if self.valid_values:
            items = parsed if isinstance(parsed, list) else [str(parsed)]
            if any(item not in self.valid_values for item in items):
                return "String must be one of: " + ", ".join(self.valid_values)
        return self.validator(parsed) if self.validator is not None else None

    def _invalid(self, value: str, reason: str) -> InvalidConfigValue:
        shown = "[hidden]" if self.sensitive else value
        return InvalidConfigValue(f"Invalid value {shown} for configuration {self.name}: {reason}")


def at_least(minimum: float) -> Validator:
    """Kafka's ``Range.atLeast``."""

    def check(value: ParsedValue) -> str | None:
        if isinstance(value, (int, float)) and value < minimum:
            return f"Value must be at least {minimum}"
        return None

    return check


def between(low: float, high: float) -> Validator:
    """Kafka's ``Range.between`` (both ends inclusive)."""

    def check(value: ParsedValue) -> str | None:
        if isinstance(value, (int, float)) and not low <= value <= high:
            return f"Value must be between {low} and {high}"
        return None

    return check


def parse_cpu_list(text: str) -> frozenset[int]:
    """CPUs of a Linux-style list ("1", "2-3", "0,2-5"); empty for ""; ValueError if malformed."""
    cpus: set[int] = set()
    for item in text.replace(" ", "").split(","):
        if not item:
            continue
        low, sep, high = item.partition("-")
        if not low.isdigit() or (sep and not high.isdigit()):
            raise ValueError(f"not a CPU list: {text!r} (expected e.g. 1 or 2-3 or 0,2-5)")
        first, last = int(low), int(high) if sep else int(low)
        if last < first:
            raise ValueError(f"not a CPU list: {text!r} ({item} runs backwards)")
        cpus.update(range(first, last + 1))
    return frozenset(cpus)


def local_retention_problem(local: int, total_key: str, total: int) -> str | None:
    """Why a local retention (time or bytes) cannot go with the whole log's ``total``
    (Kafka's wording), or None: -2 follows the total; -1 (forever) only if the total is."""
    if local == -2 or total == -1:
        return None
    if local == -1:
        return f"Value must not be -1 as {total_key} value is set as {total}."
    if local > total:
        return f"Value must not be more than {total_key} property value: {total}"
    return None
