"""The streaming reader (DataSourceStreamReader + SupportsTriggerAvailableNow).

Spark runs one instance in the long-lived source runner process (initialOffset, latestOffset,
partitions, commit, ... on the same object, so fields persist within a run but not across a
restart), and unpickles another in executor workers for read() without calling __init__ there.
So __init__ stores options only; cluster clients are created lazily per process (cluster.py).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)

from connectors.spark import offsets as off
from connectors.spark.cluster import ReadCluster
from connectors.spark.fetch import read_range
from connectors.spark.options import SourceOptions
from connectors.spark.planning import OffsetRange, assign_replicas, plan_ranges
from connectors.spark.resolve import States, check_exists, initial_offsets, next_end, select
from connectors.spark.timestamps import resolve_times

log = logging.getLogger("connectors.spark")


def make_cluster(opts: SourceOptions) -> ReadCluster:
    return ReadCluster(opts.nodes, opts.request_timeout_s, opts.retry_timeout_s, opts.ssl)


class RaftsinkStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, options: SourceOptions) -> None:
        self.options = options
        self._cluster: ReadCluster | None = None
        self._initial: off.OffsetMap | None = None  # resolved once per run (called twice)
        self._target: off.OffsetMap | None = None  # Trigger.AvailableNow target
        self._latest: off.OffsetMap | None = None  # for reportLatestOffset
        self._states_seen: States | None = None  # the last Partitions answer (replicas)

    @property
    def cluster(self) -> ReadCluster:
        if self._cluster is None:
            self._cluster = make_cluster(self.options)
        return self._cluster

    def _states(self, linearizable: bool = False) -> States:
        states = self.cluster.partitions(
            self.options.subscription.topic_filter(), linearizable=linearizable
        )
        self._states_seen = states
        return states

    def initialOffset(self) -> dict:
        if self._initial is None:
            states = self._states()
            check_exists(self.options.subscription, states, self.options.nodes)
            starting = self.options.starting
            if self.options.starting_times is not None:  # resolved once, as startingOffsets
                starting = resolve_times(
                    self.options.starting_times,
                    select(self.options.subscription, states),
                    self.cluster.offsets_for_times,
                    ending=False,
                    strategy=self.options.timestamp_strategy,
                )
            self._initial = initial_offsets(starting, self.options.subscription, states)
        return off.to_json(self._initial)

    def getDefaultReadLimit(self) -> ReadLimit:
        n = self.options.max_offsets_per_trigger
        return ReadMaxRows(n) if n else ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        # Linearizable: the run drains everything acknowledged before it started.
        states = self._states(linearizable=True)
        self._target = {tp: st.high_watermark for tp, st in states.items()}

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        begin = off.from_json(start)
        unresolved = any(v < 0 for v in begin.values())
        states = self._states(linearizable=unresolved)
        max_rows = limit.max_rows if isinstance(limit, ReadMaxRows) else None
        end, self._latest = next_end(
            begin, self.options.subscription, states, self._target, max_rows
        )
        if unresolved:
            # Register the resolved starting point at once, so retention keeps it before the
            # first real batch has run (commit() only arrives one batch late).
            self.commit(off.to_json(end))
        return off.to_json(end)

    def reportLatestOffset(self) -> dict | None:
        return None if self._latest is None else off.to_json(self._latest)

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        ranges = plan_ranges(
            off.from_json(start),
            off.from_json(end),
            self.options.min_partitions,
            self.options.max_records_per_partition,
        )
        # Each range read on a replica of its partition (a follower first), as the last
        # Partitions answer names them: latestOffset asked just before, except for a batch
        # Spark replays from its checkpoint after a restart, which asks now. Without an
        # answer the ranges read through the node list, as before (the offsets, and so
        # the records, never depend on it).
        states = self._states_seen
        if states is None and ranges:
            try:
                states = self._states()
            except Exception as exc:
                log.warning("no replica placement for this batch (%s): reading via the nodes", exc)
        return assign_replicas(ranges, states) if states else ranges

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, OffsetRange)
        o = self.options
        yield from read_range(
            make_cluster(o), partition, o.fail_on_data_loss, o.include_headers, o.fetch_max_bytes
        )

    def commit(self, end: dict) -> None:
        """Report consumed offsets (retention keeps what the pipeline has not committed).

        Spark calls this one batch late and never for the last batch of a run, so the cluster
        always sees a conservative (older) position; that errs on the side of keeping data.
        Uses ReadApiClient.commit if the read API has it, else does nothing. Never raises: a
        missed report is repeated by the next one.
        """
        pid = self.options.pipeline_id
        if not pid:
            return
        try:
            offsets = {tp: o for tp, o in off.from_json(end).items() if o >= 0}
            if not self.cluster.commit(pid, offsets):
                log.debug("read API has no Commit RPC; offsets not reported")
        except Exception as exc:
            log.warning("could not report offsets of pipeline %s: %s", pid, exc)

    def stop(self) -> None:
        """Nothing to release: Spark never calls this (the runner is killed), see cluster.py."""
