"""Kafka RecordBatch v2 bytes -> pyarrow RecordBatch with exactly the source's Arrow schema.

Batches are parsed by aiokafka's compiled (Cython) DefaultRecordBatch, which decompresses
gzip / snappy / lz4 / zstd through cramjam. Records outside [start, end) are dropped (a fetch
returns whole batches, so the first may begin before `start` and the last may run past `end`).
"""

from __future__ import annotations

import gc
from collections.abc import Iterable
from itertools import pairwise
from operator import attrgetter

import numpy as np
import pyarrow as pa
from aiokafka.record.default_records import DefaultRecordBatch

from connectors.spark.schema import arrow_schema

_SCHEMAS = {True: arrow_schema(True), False: arrow_schema(False)}
_TS_TYPE = pa.timestamp("us", tz="UTC")
_KEY, _VALUE, _TIMESTAMP, _HEADERS, _OFFSET = (
    attrgetter(a) for a in ("key", "value", "timestamp", "headers", "offset")
)


class RangeDecoder:
    """Accumulates the records of one topic-partition range and emits Arrow batches.

    next_offset is the offset the next fetch must start at: everything below it (within the
    range) has been decoded. Offsets must arrive strictly increasing, which add() checks.
    """

    def __init__(
        self, topic: str, partition: int, start: int, end: int, include_headers: bool = True
    ) -> None:
        self.topic, self.partition = topic, partition
        self.start, self.end = start, end
        self.next_offset = start
        self.include_headers = include_headers
        self.schema = _SCHEMAS[include_headers]
        self._reset()

    def _reset(self) -> None:
        self.keys: list[bytes | None] = []
        self.values: list[bytes | None] = []
        # Offsets as runs: (first, count) for a dense run, (-1, [offsets]) for a gappy one;
        # dense runs (the normal case) become Arrow with numpy, no Python int per record.
        self.offset_runs: list[tuple[int, int | list[int]]] = []
        self.count = 0
        self.timestamps: list[int] = []
        self.ts_types: list[tuple[int, int]] = []  # (timestamp type, record count) runs
        self.headers: list[list[tuple[str, bytes | None]] | None] = []
        self.any_headers = False

    @property
    def pending(self) -> int:
        return self.count

    @property
    def done(self) -> bool:
        return self.next_offset >= self.end

    def add(self, data: bytes) -> None:
        """Decode one whole RecordBatch v2 and keep its records that fall in [next_offset, end)."""
        # Decoding allocates several objects per record, all acyclic; the cyclic GC passes this
        # triggers cost about half the decode time, so they wait until the batch is done.
        enabled = gc.isenabled()
        gc.disable()
        try:
            self._add(data)
        finally:
            if enabled:
                gc.enable()

    def _add(self, data: bytes) -> None:
        batch = DefaultRecordBatch(data)
        if batch.magic != 2:
            raise ValueError(f"unsupported record batch magic {batch.magic} (need v2)")
        last = batch.base_offset + batch.last_offset_delta
        if last < self.next_offset or self.done:
            return  # entirely before what we still need (or nothing left to read)
        if batch.is_control_batch:  # transaction markers: occupy offsets, carry no data
            self.next_offset = min(self.end, last + 1)
            return
        lo, hi = self.next_offset, self.end
        base = batch.base_offset
        recs = list(batch)  # the Cython iterator builds the records; the rest are C-level loops
        if len(recs) == last - base + 1:
            # Dense batch (the normal case: one offset per record): slice by offset arithmetic.
            a, b = max(0, lo - base), min(len(recs), hi - base)
            recs = recs[a:b]
            if recs:
                self.offset_runs.append((base + a, b - a))
        else:  # offsets with gaps (compacted upstream data): filter record by record
            recs = [r for r in recs if lo <= r.offset < hi]
            offs = list(map(_OFFSET, recs))
            if any(x >= y for x, y in pairwise(offs)):
                raise ValueError(f"offsets not increasing in {self.topic}/{self.partition}")
            if recs:
                self.offset_runs.append((-1, offs))
        if recs:
            self.count += len(recs)
            self.keys.extend(map(_KEY, recs))
            self.values.extend(map(_VALUE, recs))
            self.timestamps.extend(map(_TIMESTAMP, recs))
            if self.include_headers:
                if any(map(_HEADERS, recs)):
                    # Empty header lists become None: fewer GC-tracked objects held per record.
                    self.headers.extend([r.headers or None for r in recs])
                    self.any_headers = True
                else:
                    self.headers.extend([None] * len(recs))
            self.ts_types.append((batch.timestamp_type, len(recs)))
        # The batch covers offsets up to `last`; gaps inside it (compaction) hold no records.
        self.next_offset = min(hi, last + 1)

    def flush(self) -> pa.RecordBatch | None:
        """The pending records as one Arrow batch (None if there are none)."""
        n = self.count
        if n == 0:
            return None
        topic = pa.array([self.topic], pa.string()).take(np.zeros(n, np.int32))
        ts_types = np.repeat(
            np.array([t for t, _ in self.ts_types], np.int32),
            [c for _, c in self.ts_types],
        )
        offsets = np.concatenate(
            [
                np.arange(first, first + run, dtype=np.int64)
                if first >= 0
                else np.array(run, np.int64)
                for first, run in self.offset_runs
            ]
        )
        cols = [
            pa.array(self.keys, pa.binary()),
            pa.array(self.values, pa.binary()),
            topic,
            pa.array(np.full(n, self.partition, np.int32)),
            pa.array(offsets),
            pa.array(np.array(self.timestamps, np.int64) * 1000, _TS_TYPE),
            pa.array(ts_types),
        ]
        if self.include_headers:
            cols.append(_headers_array(self.headers, self.any_headers, self.schema))
        self._reset()
        return pa.RecordBatch.from_arrays(cols, schema=self.schema)


def _headers_array(
    headers: list[list[tuple[str, bytes | None]] | None], any_headers: bool, schema: pa.Schema
) -> pa.Array:
    """list<struct<key, value>>; null for a record without headers (as Spark's Kafka source)."""
    typ = schema.field("headers").type
    n = len(headers)
    if not any_headers:
        return pa.nulls(n, typ)
    offsets = [0]
    mask = []
    hkeys: list[str] = []
    hvals: list[bytes | None] = []
    for h in headers:
        if h:
            for k, v in h:
                hkeys.append(k)
                hvals.append(v)
        offsets.append(len(hkeys))
        mask.append(not h)
    struct_type = typ.value_type
    items = pa.StructArray.from_arrays(
        [pa.array(hkeys, pa.string()), pa.array(hvals, pa.binary())],
        fields=list(struct_type),
    )
    arr = pa.ListArray.from_arrays(
        pa.array(offsets, pa.int32()), items, type=typ, mask=pa.array(mask, pa.bool_())
    )
    return arr


def decode_range(
    batches: Iterable[bytes],
    topic: str,
    partition: int,
    start: int,
    end: int,
    include_headers: bool = True,
) -> pa.RecordBatch | None:
    """Convenience for tests and tools: decode batches into one Arrow batch."""
    dec = RangeDecoder(topic, partition, start, end, include_headers)
    for data in batches:
        dec.add(data)
    return dec.flush()
