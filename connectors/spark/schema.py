"""The source's schema: the columns of Spark's own Kafka source, as Spark and as Arrow types.

read() hands Spark pyarrow RecordBatches, which Spark accepts only if their schema equals
`to_arrow_schema(schema, timezone="UTC")` exactly, so the Arrow schema is derived from the
Spark one with Spark's own converter instead of being written twice.
"""

from __future__ import annotations

import pyarrow as pa
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

HEADER_TYPE = StructType([StructField("key", StringType()), StructField("value", BinaryType())])

_BASE_FIELDS = [
    StructField("key", BinaryType()),
    StructField("value", BinaryType()),
    StructField("topic", StringType()),
    StructField("partition", IntegerType()),
    StructField("offset", LongType()),
    StructField("timestamp", TimestampType()),
    StructField("timestampType", IntegerType()),
]
_HEADERS_FIELD = StructField("headers", ArrayType(HEADER_TYPE))


def spark_schema(include_headers: bool = True) -> StructType:
    """The Spark schema of the source (Kafka-source column names, types and order)."""
    return StructType(_BASE_FIELDS + ([_HEADERS_FIELD] if include_headers else []))


def arrow_schema(include_headers: bool = True) -> pa.Schema:
    """The exact Arrow schema Spark expects from read() for spark_schema(include_headers)."""
    return to_arrow_schema(spark_schema(include_headers), timezone="UTC")
