"""The version of Strata this process runs (``strata --version``, ``strata_build_info``)."""

from __future__ import annotations

import platform
from importlib import metadata

__all__ = ["python_version", "strata_version"]


def strata_version() -> str:
    """The installed distribution's version; ``0+unknown`` when run from a bare checkout."""
    try:
        return metadata.version("strata")
    except metadata.PackageNotFoundError:
        return "0+unknown"


def python_version() -> str:
    return platform.python_version()
