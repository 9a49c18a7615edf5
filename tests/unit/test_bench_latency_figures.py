"""bench/produce.py's latency decomposition: librdkafka's per-window p99s (client side)
and the server-side keys of a measured phase."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("confluent_kafka")

from bench.kafka_load import LoadProducer
from bench.produce_cpu import server_figures


def _stats(*brokers: tuple[int, int, int, int]) -> str:
    """(nodeid, rtt count, rtt p99 us, int_latency p99 us) per broker."""
    return json.dumps(
        {
            "brokers": {
                f"b{i}": {
                    "nodeid": node,
                    "rtt": {"cnt": cnt, "p99": rtt},
                    "int_latency": {"p99": queue},
                }
                for i, (node, cnt, rtt, queue) in enumerate(brokers)
            }
        }
    )


def test_client_figures_take_windows_of_brokers_that_sent_requests():
    prod = LoadProducer("127.0.0.1:9")  # never connects: no record is sent
    try:
        assert prod.client_figures() == {}
        # the bootstrap broker (nodeid -1) and an idle broker (no rtt samples) are skipped
        prod._on_stats(
            _stats((-1, 5, 99_000, 99_000), (1, 0, 88_000, 88_000), (2, 7, 4_000, 6_000))
        )
        prod._on_stats(_stats((2, 3, 30_000, 2_000), (3, 9, 5_000, 40_000)))
        assert prod.client_figures() == {
            "client_rtt_p99_ms_median": 5.0,
            "client_rtt_p99_ms_max": 30.0,
            "client_queue_p99_ms_median": 6.0,
            "client_queue_p99_ms_max": 40.0,
        }
        prod.reset()
        assert prod.client_figures() == {}
    finally:
        prod.close()


def test_server_figures_carry_every_latency_key_with_the_phase_suffix():
    r = {
        f"{k}_{q}_ms": 1.0
        for k in ("server_produce", "disk_round")
        for q in ("p50", "p99", "p999", "max")
    }
    r.update({"server_loop_lags_over_25ms": 0, "client_rtt_p99_ms_max": 9.0, "p99_ms": 3.0})
    got = server_figures(r, "_at_50pct")
    assert "p99_ms_at_50pct" not in got  # the client's own keys are the caller's
    assert got["server_produce_max_ms_at_50pct"] == 1.0
    assert got["client_rtt_p99_ms_max_at_50pct"] == 9.0
    assert got["server_loop_lags_over_25ms_at_50pct"] == 0
    assert len(got) == 10
