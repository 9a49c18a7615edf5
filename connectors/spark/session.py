"""A local SparkSession set up for this project's small machines, source registered."""

from __future__ import annotations

import os
import sys
from typing import Any


def local_session(app_name: str, cores: int = 2, progress_bars: bool = False) -> Any:
    """local[cores,4] session (4 attempts per task) with the raftsink source registered.

    Spark's Python workers must run this interpreter (the one with raftsink and
    pyarrow installed), so PYSPARK_PYTHON is set unless the caller set it.
    """
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    from connectors.spark import register

    spark = (
        # local[N,F]: F attempts per task (plain local[N] fails the query at a task's first
        # failure, e.g. a Python worker slow to start); a retried task re-reads the same
        # offset range, so the sinks still see every record once.
        SparkSession.builder.master(f"local[{cores},4]")
        .appName(app_name)
        .config("spark.python.authenticate.socketTimeout", "60s")
        .config("spark.sql.shuffle.partitions", str(cores))
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", str(progress_bars).lower())
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    return spark
