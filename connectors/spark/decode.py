"""Kafka RecordBatch v2 bytes -> pyarrow RecordBatch with exactly the source's Arrow schema.

Two decoders give the same rows:
- the compiled one (connectors/spark/_v2records.c, built at install): records go straight into
  Arrow buffers, no Python object per record (~20 ns a record);
- aiokafka's Cython DefaultRecordBatch, used where the C module was not built (no compiler, as
  in the slim node image) or when asked for (`native=False`): ~330 ns a record.
Python parses each batch's 61-byte header, skips control batches and decompresses (gzip / snappy
/ lz4 / zstd through aiokafka's codecs, i.e. cramjam) for both. Records outside [start, end)
are dropped (a fetch returns whole batches, so the first may begin before `start` and the last
may run past `end`).
"""

from __future__ import annotations

import gc
import struct
from collections.abc import Iterable
from itertools import pairwise
from operator import attrgetter
from typing import NamedTuple

import numpy as np
import pyarrow as pa
from aiokafka.codec import gzip_decode, lz4_decode, snappy_decode, zstd_decode
from aiokafka.record.default_records import DefaultRecordBatch

from connectors.spark.schema import arrow_schema

try:
    from connectors.spark._v2records import Accumulator as _Accumulator
except ImportError:  # not built: the aiokafka decoder serves (same rows, slower)
    _Accumulator = None

NATIVE_AVAILABLE = _Accumulator is not None

_SCHEMAS = {True: arrow_schema(True), False: arrow_schema(False)}
_TS_TYPE = pa.timestamp("us", tz="UTC")
_KEY, _VALUE, _TIMESTAMP, _HEADERS, _OFFSET = (
    attrgetter(a) for a in ("key", "value", "timestamp", "headers", "offset")
)

# RecordBatch v2 header: baseOffset, batchLength, partitionLeaderEpoch, magic, crc, attributes,
# lastOffsetDelta, firstTimestamp, maxTimestamp, producerId, producerEpoch, baseSequence,
# recordCount.
_HEADER = struct.Struct(">qiibIhiqqqhii")
_CODEC_MASK, _LOG_APPEND_TIME, _CONTROL = 0x07, 0x08, 0x20
_DECOMPRESS = {1: gzip_decode, 2: snappy_decode, 3: lz4_decode, 4: zstd_decode}


class _Batch(NamedTuple):
    """One RecordBatch v2 as the record decoders see it (header fields already parsed)."""

    data: bytes | memoryview  # the whole batch
    records: bytes | memoryview  # its records section, decompressed
    count: int
    base: int
    first_ts: int
    max_ts: int
    ts_type: int  # 0 CreateTime, 1 LogAppendTime (every record then has max_ts)


class RangeDecoder:
    """Accumulates the records of one topic-partition range and emits Arrow batches.

    next_offset is the offset the next fetch must start at: everything below it (within the
    range) has been decoded. Offsets must arrive strictly increasing, which add() checks.
    add() of a malformed batch raises ValueError and keeps none of its records.
    """

    def __init__(
        self,
        topic: str,
        partition: int,
        start: int,
        end: int,
        include_headers: bool = True,
        native: bool | None = None,
    ) -> None:
        if native and not NATIVE_AVAILABLE:
            raise RuntimeError("connectors.spark._v2records is not built (no C compiler?)")
        self.topic, self.partition = topic, partition
        self.start, self.end = start, end
        self.next_offset = start
        self.include_headers = include_headers
        self.schema = _SCHEMAS[include_headers]
        self.native = NATIVE_AVAILABLE if native is None else native
        self._records = (
            _NativeRecords(include_headers) if self.native else _ObjectRecords(include_headers)
        )
        self._ts_types: list[tuple[int, int]] = []  # (timestamp type, record count) runs

    @property
    def pending(self) -> int:
        return self._records.rows

    @property
    def pending_bytes(self) -> int:
        """Key, value and header bytes pending (callers flush before Arrow's 2 GiB limit)."""
        return self._records.nbytes

    @property
    def done(self) -> bool:
        return self.next_offset >= self.end

    def add(self, data: bytes | memoryview) -> None:
        """Decode one whole RecordBatch v2 and keep its records that fall in [next_offset, end)."""
        if len(data) < _HEADER.size:
            raise ValueError(f"corrupt record batch: {len(data)} bytes, shorter than its header")
        (base, length, _, magic, _, attrs, last_delta, first_ts, max_ts, *_, count) = (
            _HEADER.unpack_from(data)
        )
        if magic != 2:
            raise ValueError(f"unsupported record batch magic {magic} (need v2)")
        if length + 12 != len(data):
            raise ValueError(
                f"corrupt record batch at offset {base}: batchLength {length} does not match"
                f" its {len(data)} bytes"
            )
        last = base + last_delta
        if last < self.next_offset or self.done:
            return  # entirely before what we still need (or nothing left to read)
        if attrs & _CONTROL:  # transaction markers: occupy offsets, carry no data
            self.next_offset = min(self.end, last + 1)
            return
        records = memoryview(data)[_HEADER.size :]
        codec = attrs & _CODEC_MASK
        if codec:
            if codec not in _DECOMPRESS:
                raise ValueError(f"record batch at offset {base}: unknown codec {codec}")
            records = _DECOMPRESS[codec](records.tobytes())
        ts_type = 1 if attrs & _LOG_APPEND_TIME else 0
        batch = _Batch(data, records, count, base, first_ts, max_ts, ts_type)
        kept = self._records.add(batch, self.next_offset, self.end)
        if kept:
            self._ts_types.append((ts_type, kept))
        # The batch covers offsets up to `last`; gaps inside it (compaction) hold no records.
        self.next_offset = min(self.end, last + 1)

    def flush(self) -> pa.RecordBatch | None:
        """The pending records as one Arrow batch (None if there are none)."""
        n = self._records.rows
        if n == 0:
            return None
        key, value, offset, timestamp, headers = self._records.take(self.schema)
        topic = pa.array([self.topic], pa.string()).take(np.zeros(n, np.int32))
        ts_types = np.repeat(
            np.array([t for t, _ in self._ts_types], np.int32),
            [c for _, c in self._ts_types],
        )
        self._ts_types = []
        cols = [
            key,
            value,
            topic,
            pa.array(np.full(n, self.partition, np.int32)),
            offset,
            timestamp,
            pa.array(ts_types),
        ]
        if self.include_headers:
            cols.append(headers)
        return pa.RecordBatch.from_arrays(cols, schema=self.schema)


class _NativeRecords:
    """Records kept by the compiled decoder, as Arrow buffers until take()."""

    def __init__(self, include_headers: bool) -> None:
        self._acc = _Accumulator(include_headers)

    @property
    def rows(self) -> int:
        return self._acc.rows

    @property
    def nbytes(self) -> int:
        return self._acc.nbytes

    def add(self, batch: _Batch, lo: int, hi: int) -> int:
        """Keep the batch's records with offsets in [lo, hi); returns how many were kept."""
        return self._acc.add(
            batch.records,
            batch.count,
            batch.base,
            batch.first_ts,
            batch.max_ts,
            batch.ts_type == 1,
            lo,
            hi,
        )

    def take(self, schema: pa.Schema) -> list[pa.Array]:
        n, offsets, timestamps, keys, values, headers = self._acc.take()
        cols = [
            _binary_array(pa.binary(), n, keys),
            _binary_array(pa.binary(), n, values),
            pa.Array.from_buffers(pa.int64(), n, [None, pa.py_buffer(offsets)]),
            pa.Array.from_buffers(_TS_TYPE, n, [None, pa.py_buffer(timestamps)]),
        ]
        cols.append(None if headers is None else _native_headers(n, headers, schema))
        return cols


def _binary_array(typ: pa.DataType, n: int, col: tuple) -> pa.Array:
    valid, offsets, data, nulls = col
    return pa.Array.from_buffers(
        typ,
        n,
        [pa.py_buffer(valid) if nulls else None, pa.py_buffer(offsets), pa.py_buffer(data)],
        null_count=nulls,
    )


def _native_headers(n: int, headers: tuple, schema: pa.Schema) -> pa.Array:
    """list<struct<key: string, value: binary>>; null for a record without headers."""
    typ = schema.field("headers").type
    lvalid, loffsets, lnulls, hkeys, hvalues, count = headers
    if lnulls == n:
        return pa.nulls(n, typ)
    keys = _binary_array(pa.string(), count, hkeys)
    # Kafka header keys are strings on the wire; bytes that are not UTF-8 would reach Spark
    # as a broken string column, so they fail here with the batch's error path instead.
    try:
        keys.validate(full=True)
    except pa.ArrowInvalid as exc:
        raise ValueError(f"corrupt record header: key is not UTF-8 ({exc})") from exc
    items = pa.StructArray.from_arrays(
        [keys, _binary_array(pa.binary(), count, hvalues)], fields=list(typ.value_type)
    )
    return pa.Array.from_buffers(
        typ,
        n,
        [pa.py_buffer(lvalid) if lnulls else None, pa.py_buffer(loffsets)],
        null_count=lnulls,
        children=[items],
    )


class _ObjectRecords:
    """Records kept through aiokafka's Cython record objects (the fallback decoder)."""

    def __init__(self, include_headers: bool) -> None:
        self.include_headers = include_headers
        self._reset()

    def _reset(self) -> None:
        self.keys: list[bytes | None] = []
        self.values: list[bytes | None] = []
        # Offsets as runs: (first, count) for a dense run, (-1, [offsets]) for a gappy one;
        # dense runs (the normal case) become Arrow with numpy, no Python int per record.
        self.offset_runs: list[tuple[int, int | list[int]]] = []
        self.rows = 0
        self.nbytes = 0
        self.timestamps: list[int] = []
        self.headers: list[list[tuple[str, bytes | None]] | None] = []
        self.any_headers = False

    def add(self, batch: _Batch, lo: int, hi: int) -> int:
        """Keep the batch's records with offsets in [lo, hi); returns how many were kept."""
        # Decoding allocates several objects per record, all acyclic; the cyclic GC passes this
        # triggers cost about half the decode time, so they wait until the batch is done.
        enabled = gc.isenabled()
        gc.disable()
        try:
            recs = list(DefaultRecordBatch(batch.data))
        except Exception as exc:  # aiokafka's CorruptRecordException and friends
            raise ValueError(f"corrupt record batch at offset {batch.base}: {exc}") from exc
        finally:
            if enabled:
                gc.enable()
        base, count = batch.base, batch.count
        if len(recs) == count and recs and recs[-1].offset - base == count - 1:
            # Dense batch (the normal case: one offset per record): slice by offset arithmetic.
            a = max(0, lo - base)
            b = max(a, min(len(recs), hi - base))  # a batch may start past hi
            recs = recs[a:b]
            if recs:
                self.offset_runs.append((base + a, b - a))
        else:  # offsets with gaps (compacted upstream data): filter record by record
            recs = [r for r in recs if lo <= r.offset < hi]
            offs = list(map(_OFFSET, recs))
            if any(x >= y for x, y in pairwise(offs)):
                raise ValueError(f"offsets not increasing in the batch at offset {base}")
            if recs:
                self.offset_runs.append((-1, offs))
        if not recs:
            return 0
        self.rows += len(recs)
        keys, values = list(map(_KEY, recs)), list(map(_VALUE, recs))
        self.nbytes += sum(len(k) for k in keys if k) + sum(len(v) for v in values if v)
        self.keys += keys
        self.values += values
        self.timestamps.extend(map(_TIMESTAMP, recs))
        if self.include_headers:
            if any(map(_HEADERS, recs)):
                # Empty header lists become None: fewer GC-tracked objects held per record.
                self.headers.extend([r.headers or None for r in recs])
                self.any_headers = True
            else:
                self.headers.extend([None] * len(recs))
        return len(recs)

    def take(self, schema: pa.Schema) -> list[pa.Array]:
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
            pa.array(offsets),
            pa.array(np.array(self.timestamps, np.int64) * 1000, _TS_TYPE),
            _object_headers(self.headers, self.any_headers, schema)
            if self.include_headers
            else None,
        ]
        self._reset()
        return cols


def _object_headers(
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
    items = pa.StructArray.from_arrays(
        [pa.array(hkeys, pa.string()), pa.array(hvals, pa.binary())],
        fields=list(typ.value_type),
    )
    return pa.ListArray.from_arrays(
        pa.array(offsets, pa.int32()), items, type=typ, mask=pa.array(mask, pa.bool_())
    )


def decode_range(
    batches: Iterable[bytes],
    topic: str,
    partition: int,
    start: int,
    end: int,
    include_headers: bool = True,
    native: bool | None = None,
) -> pa.RecordBatch | None:
    """Convenience for tests and tools: decode batches into one Arrow batch."""
    dec = RangeDecoder(topic, partition, start, end, include_headers, native)
    for data in batches:
        dec.add(data)
    return dec.flush()
