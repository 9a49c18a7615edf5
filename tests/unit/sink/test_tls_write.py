"""The Kafka listener's TLS write path (sink.kafka.conn_responses.tls_runs): a response's
parts regrouped into about one TLS record each, the bytes unchanged."""

from __future__ import annotations

import os
import random

from sink.kafka.conn_responses import TLS_RECORD, tls_runs


def test_small_parts_are_joined_and_large_ones_passed_as_they_are():
    big = memoryview(b"B" * (TLS_RECORD + 5))
    parts = [b"\0\0\0\x10", b"h" * 100, big, b"t" * 10, b"u" * 10]
    out = tls_runs(parts)
    assert out == [b"\0\0\0\x10" + b"h" * 100, big, b"t" * 10 + b"u" * 10]
    assert out[1] is big  # no copy of a record-sized part
    assert tls_runs([b"x"]) == [b"x"] and tls_runs([]) == []


def test_runs_keep_every_byte_in_order_and_stay_near_one_record():
    seed = int.from_bytes(os.urandom(4), "big")
    print(f"seed {seed}")
    rnd = random.Random(seed)
    for _ in range(300):
        parts = [
            rnd.randbytes(rnd.choice((0, 4, 60, 1100, 9000, TLS_RECORD, 70_000)))
            for _ in range(rnd.randint(0, 40))
        ]
        out = tls_runs(parts)
        assert b"".join(out) == b"".join(parts), seed
        small_runs = [len(p) for p in out if not any(p is q for q in parts)]
        # A joined run stops once it reaches a record's size: at most a record plus
        # one small part.
        assert all(n < 2 * TLS_RECORD for n in small_runs), seed
        assert len(out) <= len(parts), seed
