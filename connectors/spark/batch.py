"""The batch reader (spark.read.format("raftsink")): fixed offsets, resolved at planning."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, InputPartition

from connectors.spark.fetch import read_range
from connectors.spark.options import SourceOptions
from connectors.spark.planning import OffsetRange, assign_replicas, plan_ranges
from connectors.spark.resolve import batch_range, check_exists, select
from connectors.spark.stream import make_cluster
from connectors.spark.timestamps import resolve_times


class RaftsinkBatchReader(DataSourceReader):
    def __init__(self, options: SourceOptions) -> None:
        self.options = options

    def partitions(self) -> Sequence[InputPartition]:
        o = self.options
        assert o.ending is not None
        # Linearizable: "latest" includes every write acknowledged before the query.
        cluster = make_cluster(o)
        states = cluster.partitions(o.subscription.topic_filter(), linearizable=True)
        check_exists(o.subscription, states, o.nodes)
        starting, ending = o.starting, o.ending
        selected = select(o.subscription, states)
        if o.starting_times is not None:
            starting = resolve_times(
                o.starting_times,
                selected,
                cluster.offsets_for_times,
                ending=False,
                strategy=o.timestamp_strategy,
            )
        if o.ending_times is not None:
            ending = resolve_times(o.ending_times, selected, cluster.offsets_for_times, ending=True)
        start, end = batch_range(starting, ending, o.subscription, states, o.fail_on_data_loss)
        ranges = plan_ranges(start, end, o.min_partitions, o.max_records_per_partition)
        # Each range read on a replica of its partition (a follower first).
        ranges = assign_replicas(ranges, states)
        # Spark wants at least one partition; an empty range reads nothing.
        return ranges or [OffsetRange("", 0, 0, 0)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, OffsetRange)
        if partition.size <= 0:
            return
        o = self.options
        yield from read_range(
            make_cluster(o), partition, o.fail_on_data_loss, o.include_headers, o.fetch_max_bytes
        )
