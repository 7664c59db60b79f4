"""Spark data source for Strata (``spark.read.format("strata")``).

Not built yet: it arrives with the Spark backfill issue and will read the
bucket layout documented in ``docs/object-layout.md``. Nothing here pretends to
work; importing ``StrataDataSource`` fails until then.
"""

__all__: list[str] = []
