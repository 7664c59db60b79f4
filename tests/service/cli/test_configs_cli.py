"""`strata configs --add-config` reads values as kafka-configs.sh does (brackets keep commas)."""

from __future__ import annotations

import pytest

from service.cli.common import CliError
from service.cli.configs import parse_add_config


def test_add_config_splits_pairs_on_commas_outside_brackets() -> None:
    assert parse_add_config(" max.connections=5, max.connections.per.ip.overrides=[10.0.0.1:5,h:7],x=") == [
        ("max.connections", "5"), ("max.connections.per.ip.overrides", "10.0.0.1:5,h:7"), ("x", "")]
    for bad in ("novalue", "a=[1,2", "=3"):
        with pytest.raises(CliError):
            parse_add_config(bad)
