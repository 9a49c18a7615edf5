"""The DataSource Spark instantiates for format("raftsink")."""

from __future__ import annotations

from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceStreamReader
from pyspark.sql.types import StructType

from connectors.spark.batch import RaftsinkBatchReader
from connectors.spark.options import _bool, parse_options
from connectors.spark.schema import spark_schema
from connectors.spark.stream import RaftsinkStreamReader


class RaftsinkDataSource(DataSource):
    """Reads raftsink topics with the columns of Spark's Kafka source (see docs/spark.md)."""

    @classmethod
    def name(cls) -> str:
        return "raftsink"

    def schema(self) -> StructType:
        opts = {str(k).lower(): str(v) for k, v in self.options.items()}
        return spark_schema(_bool(opts, "includeHeaders", True))

    def reader(self, schema: StructType) -> DataSourceReader:
        return RaftsinkBatchReader(parse_options(self.options, streaming=False))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return RaftsinkStreamReader(parse_options(self.options, streaming=True))
