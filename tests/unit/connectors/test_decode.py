"""Arrow conversion of RecordBatch v2 bytes, with every codec, against Spark's own schema."""

import datetime as dt
import random

import pyarrow as pa
import pytest
from pyspark.sql.pandas.types import to_arrow_schema

from connectors.spark.decode import RangeDecoder, decode_range
from connectors.spark.schema import arrow_schema, spark_schema
from tests.unit.connectors.fakes import CODECS, Rec, build_batch

T0 = 1_700_000_000_123


def records(rng: random.Random, n: int) -> list[Rec]:
    out = []
    for i in range(n):
        key = None if rng.random() < 0.2 else f"k{i}".encode()
        value = None if rng.random() < 0.05 else rng.randbytes(rng.randint(0, 200))
        headers = []
        if rng.random() < 0.5:
            headers = [(f"h{j}", None if j == 2 else bytes([j])) for j in range(rng.randint(1, 3))]
        out.append(Rec(key, value, T0 + i, headers))
    return out


def test_arrow_schema_is_sparks():
    for h in (True, False):
        assert arrow_schema(h) == to_arrow_schema(spark_schema(h), timezone="UTC")
    assert [f.name for f in spark_schema()] == [
        "key",
        "value",
        "topic",
        "partition",
        "offset",
        "timestamp",
        "timestampType",
        "headers",
    ]


@pytest.mark.parametrize("codec", sorted(CODECS))
def test_decode_every_codec(codec):
    seed = random.randrange(1 << 30)
    print("seed", seed)
    rng = random.Random(seed)
    recs = records(rng, 300)
    batches, base = [], 1000
    for chunk in (recs[:100], recs[100:250], recs[250:]):
        batches.append(build_batch(base, chunk, CODECS[codec]))
        base += len(chunk)
    rb = decode_range(batches, "topic-x", 3, 1000, 1300)
    assert rb.schema == arrow_schema(True)
    rows = rb.to_pylist()
    assert len(rows) == 300
    for i, (row, rec) in enumerate(zip(rows, recs, strict=True)):
        assert row["offset"] == 1000 + i
        assert row["key"] == rec.key and row["value"] == rec.value
        assert row["topic"] == "topic-x" and row["partition"] == 3
        assert row["timestamp"] == dt.datetime.fromtimestamp(rec.timestamp / 1000, dt.UTC)
        assert row["timestampType"] == 0
        expect = [{"key": k, "value": v} for k, v in rec.headers] or None
        assert row["headers"] == expect


def test_subrange_and_chunked_flush():
    recs = [Rec(b"k", bytes([i]), T0, []) for i in range(50)]
    batches = [build_batch(0, recs[:20]), build_batch(20, recs[20:])]
    dec = RangeDecoder("t", 0, 15, 33, include_headers=False)
    dec.add(batches[0])
    assert dec.next_offset == 20 and not dec.done
    first = dec.flush()
    dec.add(batches[1])
    assert dec.done and dec.next_offset == 33
    second = dec.flush()
    assert first.schema == arrow_schema(False)
    offs = first.column("offset").to_pylist() + second.column("offset").to_pylist()
    assert offs == list(range(15, 33))
    assert dec.flush() is None
    dec.add(batches[0])  # nothing more is accepted once done
    assert dec.flush() is None


def test_batch_before_range_is_ignored():
    dec = RangeDecoder("t", 0, 100, 110)
    dec.add(build_batch(0, [Rec(b"k", b"v", T0)] * 10))
    assert dec.next_offset == 100 and dec.pending == 0


def test_no_headers_column_is_all_null_list():
    rb = decode_range([build_batch(0, [Rec(None, b"v", T0)] * 3)], "t", 0, 0, 3)
    assert rb.column("headers").null_count == 3
    assert rb.column("headers").type == arrow_schema().field("headers").type
    assert isinstance(rb, pa.RecordBatch)
