"""raftsink -> Parquet, exactly once: the pipeline to copy.

    python examples/spark_pipeline.py 127.0.0.1:7101,127.0.0.1:7102,127.0.0.1:7103 events /tmp/out

The addresses are the nodes' read API addresses (`raftsink status`), not the Kafka ports.
Restart it any time on the same output: the checkpoint resumes where it stopped.
Read the result with spark.read.parquet(out) (that honours out/_spark_metadata).
"""

import os
import sys

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)  # Spark's workers need this venv

from pyspark.sql import SparkSession

from connectors.spark import register

nodes, topics, out = sys.argv[1], sys.argv[2], sys.argv[3]
spark = SparkSession.builder.appName("raftsink-pipeline").getOrCreate()
register(spark)  # format "raftsink"

events = (
    spark.readStream.format("raftsink")
    .option("raftsink.nodes", nodes)
    .option("subscribe", topics)
    .option("startingOffsets", "earliest")
    .option("maxOffsetsPerTrigger", "200000")
    .load()
    .selectExpr("CAST(key AS STRING) AS key", "value", "topic", "partition", "offset", "timestamp")
)
query = (
    events.writeStream.format("parquet")
    .option("path", out)
    .option("checkpointLocation", out + "/_checkpoint")
    .trigger(processingTime="1 second")
    .start()
)
query.awaitTermination()
