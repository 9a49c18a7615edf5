"""raftsink's PySpark data source (format "raftsink"); see docs/spark.md.

    from connectors.spark import register
    register(spark)
    df = (spark.readStream.format("raftsink")
          .option("raftsink.nodes", "127.0.0.1:7001,127.0.0.1:7002")
          .option("subscribe", "events").load())

The package must be importable in every Spark Python process (it is part of the installed
raftsink package; set PYSPARK_PYTHON to this interpreter, see docs/spark.md).
"""

from __future__ import annotations

from typing import Any

from connectors.spark.errors import (
    ClusterUnreachableError,
    DataLossError,
    InvalidOptionError,
    OffsetOutOfRangeError,
    RaftsinkSourceError,
    TopicNotFoundError,
)
from connectors.spark.session import local_session
from connectors.spark.source import RaftsinkDataSource

FORMAT = "raftsink"

__all__ = [
    "FORMAT",
    "ClusterUnreachableError",
    "DataLossError",
    "InvalidOptionError",
    "OffsetOutOfRangeError",
    "RaftsinkDataSource",
    "RaftsinkSourceError",
    "TopicNotFoundError",
    "local_session",
    "register",
]


def register(spark: Any) -> None:
    """Register format "raftsink" with a SparkSession (once per session)."""
    spark.dataSource.register(RaftsinkDataSource)
