"""`strata perf produce|consume`: Kafka's kafka-producer-perf-test and kafka-consumer-perf-test.

Both drive librdkafka through confluent-kafka against any Kafka-protocol broker
(``--bootstrap-server``, as the other client commands), print what Kafka's two
tools print, and mean the same by it; ``docs/perf.md`` has the details.

- :mod:`service.cli.perf.produce`: ``perf produce``, records/s, MB/s, latency
  percentiles, and ``--print-metrics``;
- :mod:`service.cli.perf.consume`: ``perf consume``, Kafka's CSV-like row;
- :mod:`service.cli.perf.stats`: the measuring parts (latency histogram, pacing,
  librdkafka statistics mapped to Kafka's producer metrics), no I/O.

This module wires the ``perf`` command; :mod:`service.cli.perf.common` holds
what both clients share.

Failures follow the client commands: a broker that cannot be reached, an
unknown topic or failed deliveries are one line on stderr and exit code 1
(every wait is bounded: TCP probe, metadata, ``message.timeout.ms``,
:data:`~service.cli.perf.common.BROKER_LOST_S`); a bad flag, a malformed or
unknown property is argparse's usage error and exit code 2.
"""

from __future__ import annotations

import argparse
from typing import Any

from service.cli.common import bootstrap_parent, needs_subcommand
from service.cli.perf import consume, produce

__all__ = ["register"]


def register(subparsers: argparse._SubParsersAction[Any]) -> None:
    """Add ``perf produce`` and ``perf consume`` to the ``strata`` CLI."""
    common = bootstrap_parent()
    perf = subparsers.add_parser(
        "perf", help="measure produce or consume throughput and latency "
        "(kafka-producer-perf-test, kafka-consumer-perf-test)")
    cmds = perf.add_subparsers(dest="perf_command", metavar="COMMAND")
    perf.set_defaults(func=needs_subcommand(perf))
    produce.register(cmds, common)
    consume.register(cmds, common)
