"""A local SparkSession set up for this project's small machines, source registered."""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
from typing import Any

LOG4J2 = """\
# raftsink: Spark's driver JVM (set by connectors.spark.session; setLogLevel("ERROR")
# follows once the session is up). WARN as the root level: Spark sets an interactive
# driver's (PySpark's) console to WARN and says so in two lines unless the root level
# is WARN already.
rootLogger.level = warn
rootLogger.appenderRef.stderr.ref = console
logger.native.name = org.apache.hadoop.util.NativeCodeLoader
logger.native.level = error
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{yy/MM/dd HH:mm:ss} %p %c{1}: %m%n%ex
"""
"""The driver JVM's log4j2 configuration. Without one Spark starts on its default
profile and says so (four lines: the profile, the default level and how to change it,
and Hadoop's native-library warning) before setLogLevel can quiet it. The JVM's own
"Using incubator modules" line is not log4j's and stays."""


def _log4j2_file() -> str | None:
    """LOG4J2 in a file the driver JVM can read (written once per content); None where
    the temp directory takes no file of that name (another user's, say): Spark's own
    defaults then, notes and all."""
    path = os.path.join(tempfile.gettempdir(), "raftsink-spark-log4j2.properties")
    try:
        with open(path) as f:
            if f.read() == LOG4J2:
                return path
    except OSError:
        pass
    tmp = f"{path}.{os.getpid()}"
    try:
        with open(tmp, "w") as f:
            f.write(LOG4J2)
        os.replace(tmp, path)
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        return None
    return path


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

    builder = (
        # local[N,F]: F attempts per task (plain local[N] fails the query at a task's first
        # failure, e.g. a Python worker slow to start); a retried task re-reads the same
        # offset range, so the sinks still see every record once.
        SparkSession.builder.master(f"local[{cores},4]")
        .appName(app_name)
        .config("spark.python.authenticate.socketTimeout", "60s")
        .config("spark.sql.shuffle.partitions", str(cores))
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", str(progress_bars).lower())
    )
    log4j2 = _log4j2_file()
    if log4j2 is not None:
        builder = builder.config(
            "spark.driver.extraJavaOptions", f"-Dlog4j2.configurationFile={log4j2}"
        )
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    return spark
