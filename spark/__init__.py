"""Spark data source for Strata: ``spark.read.format("strata")`` and ``readStream``.

    from spark import StrataDataSource
    spark.dataSource.register(StrataDataSource)
    df = (spark.read.format("strata")
          .option("object.store", "s3://bucket/prefix").option("s3.endpoint", "http://minio:9000")
          .option("subscribe", "orders").load())

History comes straight from the bucket (the layout of ``docs/object-layout.md``),
no broker in the path; with ``kafka.bootstrap.servers`` the part not tiered yet
comes from the broker. Options and schema are those of Spark's Kafka source; see
``docs/spark.md``.
"""

from spark.options import StrataSourceError
from spark.source import StrataDataSource

__all__ = ["StrataDataSource", "StrataSourceError"]
