"""bench/produce_floor.py, the floor under issue 17's CPU target, measures what it says:
every request is answered, each answer only once the leader and a follower hold it."""

from __future__ import annotations

import os

from bench.produce_floor import floor


def test_floor_answers_every_request_after_a_majority_has_it(tmp_path):
    r = floor(100.0, 1.0, 5.4, "inline", base=str(tmp_path), keep=True)
    assert r["requests"] == 100
    assert r["cpu_us_per_request"] > 0
    assert 0 < r["p50_ms"] <= r["p99_ms"] <= r["p999_ms"]
    # warm-up (1 s at the same rate) + the measured second, each request once per file
    expected = 200 * r["request_bytes"]
    (d,) = [p for p in tmp_path.iterdir() if p.name.startswith("produce-floor-")]
    sizes = {name: os.path.getsize(d / name) for name in ("l", "f1", "f2")}
    assert sizes["l"] == expected, sizes
    assert max(sizes["f1"], sizes["f2"]) == expected, sizes
