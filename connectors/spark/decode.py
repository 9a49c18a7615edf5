"""Kafka RecordBatch v2 bytes -> pyarrow RecordBatch with exactly the source's Arrow schema.

Batches are parsed by aiokafka's compiled (Cython) DefaultRecordBatch, which decompresses
gzip / snappy / lz4 / zstd through cramjam. Records outside [start, end) are dropped (a fetch
returns whole batches, so the first may begin before `start` and the last may run past `end`).
"""

from __future__ import annotations

import gc
from collections.abc import Iterable

import pyarrow as pa
import pyarrow.compute as pc
from aiokafka.record.default_records import DefaultRecordBatch

from connectors.spark.schema import arrow_schema

_SCHEMAS = {True: arrow_schema(True), False: arrow_schema(False)}
_TS_TYPE = pa.timestamp("us", tz="UTC")


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
        self.offsets: list[int] = []
        self.timestamps: list[int] = []
        self.ts_types: list[tuple[int, int]] = []  # (timestamp type, record count) runs
        self.headers: list[list[tuple[str, bytes | None]] | None] = []
        self.any_headers = False

    @property
    def pending(self) -> int:
        return len(self.offsets)

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
            self.offsets.extend(range(base + a, base + b))
        else:  # offsets with gaps (compacted upstream data): filter record by record
            recs = [r for r in recs if lo <= r.offset < hi]
            self.offsets.extend([r.offset for r in recs])
            if any(
                x >= y
                for x, y in zip(
                    self.offsets[-len(recs) :], self.offsets[-len(recs) + 1 :], strict=False
                )
            ):
                raise ValueError(f"offsets not increasing in {self.topic}/{self.partition}")
        if recs:
            self.keys.extend([r.key for r in recs])
            self.values.extend([r.value for r in recs])
            self.timestamps.extend([r.timestamp for r in recs])
            if self.include_headers:
                # Empty header lists become None: fewer GC-tracked objects held per record.
                hs = [r.headers or None for r in recs]
                self.headers.extend(hs)
                if not self.any_headers and any(hs):
                    self.any_headers = True
            self.ts_types.append((batch.timestamp_type, len(recs)))
        # The batch covers offsets up to `last`; gaps inside it (compaction) hold no records.
        self.next_offset = min(hi, last + 1)

    def flush(self) -> pa.RecordBatch | None:
        """The pending records as one Arrow batch (None if there are none)."""
        n = len(self.offsets)
        if n == 0:
            return None
        topic = pa.array([self.topic], pa.string()).take(pa.array([0] * n, pa.int32()))
        ts_types: list[int] = []
        for t, count in self.ts_types:
            ts_types.extend([t] * count)
        cols = [
            pa.array(self.keys, pa.binary()),
            pa.array(self.values, pa.binary()),
            topic,
            pa.array([self.partition] * n, pa.int32()),
            pa.array(self.offsets, pa.int64()),
            pc.multiply(pa.array(self.timestamps, pa.int64()), 1000).cast(_TS_TYPE),
            pa.array(ts_types, pa.int32()),
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
