"""Cost of serving old clients: MessageSet v0/v1 <-> RecordBatch v2 per request.

Ingest (Produce v0-2): decode_message_set + to_batch_v2 + parse_batches of one
partition's message set (100 records of 100 B, uncompressed and gzip/snappy/lz4
wrappers). Fetch v0-3: down_convert of the stored batch to magic 1 messages. Each
case runs for ~1 s; wall time and process CPU time (from /proc/self/stat) per
operation, and the records/s that makes.

    python bench/legacy_codec.py [--seconds S] [--runs N]

Last line: one JSON object with every run.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import zlib

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from common import machine

from sink.kafka.protocol.codecs import compress
from sink.kafka.protocol.messageset import (
    LegacyRecord,
    decode_message_set,
    down_convert,
    encode_message,
    to_batch_v2,
)
from sink.kafka.protocol.records import parse_batches

RECORDS = 100
VALUE = 100
_TICK = os.sysconf("SC_CLK_TCK")


def cpu_s() -> float:
    """utime + stime of this process, from /proc/self/stat."""
    with open("/proc/self/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _TICK


def message_set(codec: int) -> bytes:
    inner = b"".join(
        encode_message(1, LegacyRecord(i, 1_700_000_000_000 + i, b"k%d" % i, b"v" * VALUE))
        for i in range(RECORDS)
    )
    if codec == 0:
        return inner
    wrapper = LegacyRecord(RECORDS - 1, 1_700_000_000_000, None, compress(codec, inner))
    msg = bytearray(encode_message(1, wrapper))
    msg[17] = codec  # attributes: the codec (encode_message writes uncompressed messages)
    msg[12:16] = zlib.crc32(bytes(msg[16:])).to_bytes(4, "big")
    return bytes(msg)


def timed(fn, seconds: float) -> tuple[float, float, int]:
    n = 0
    w0, c0 = time.perf_counter(), cpu_s()
    while time.perf_counter() - w0 < seconds:
        fn()
        n += 1
    return (time.perf_counter() - w0) / n, (cpu_s() - c0) / n, n


def run(seconds: float) -> dict[str, dict[str, float]]:
    out = {}
    for name, codec in (("none", 0), ("gzip", 1), ("snappy", 2), ("lz4", 3)):
        data = message_set(codec)

        def ingest(data: bytes = data) -> None:
            parse_batches(to_batch_v2(decode_message_set(data), 1))

        wall, cpu, n = timed(ingest, seconds)
        out[f"produce {name}"] = {"wall_us": wall * 1e6, "cpu_us": cpu * 1e6, "ops": n}
        batch = to_batch_v2(decode_message_set(data), 1)

        def fetch(batch: bytes = batch) -> None:
            down_convert([(0, batch)], 1, 0, 1 << 20, first_whole=True)

        wall, cpu, n = timed(fetch, seconds)
        out[f"fetch {name}"] = {"wall_us": wall * 1e6, "cpu_us": cpu * 1e6, "ops": n}
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=1.0)
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    print(machine())
    print(f"{RECORDS} records of {VALUE} B per partition's message set / stored batch")
    runs = []
    for r in range(args.runs):
        res = run(args.seconds)
        runs.append(res)
        for case, v in res.items():
            print(
                f"run {r + 1} {case:12s} wall {v['wall_us']:8.1f} us  cpu {v['cpu_us']:8.1f} us"
                f"  ({RECORDS / (v['wall_us'] / 1e6) / 1e3:7.0f} k records/s wall)"
            )
    print(json.dumps({"records": RECORDS, "value_bytes": VALUE, "runs": runs}))


if __name__ == "__main__":
    main()
