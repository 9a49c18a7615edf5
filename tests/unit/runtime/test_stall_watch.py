"""raftlog.runtime.stall_watch: a blocked loop and a collection are counted."""

from __future__ import annotations

import asyncio
import gc
import time

import pytest

from raftlog.runtime.stall_watch import LAG_BUCKETS_S, StallWatch


def test_a_blocked_loop_counts_as_one_late_tick_in_its_buckets():
    watch = StallWatch(period_s=0.01)

    async def body() -> None:
        watch.start(asyncio.get_running_loop())
        deadline = time.monotonic() + 5
        while watch.lag_max_s == 0 and time.monotonic() < deadline:
            await asyncio.sleep(0.01)  # a first tick (maybe a little late)
        before = watch.counters()
        time.sleep(0.3)  # the loop held: the tick due meanwhile fires ~0.3 s late
        deadline = time.monotonic() + 5
        while watch.lag_max_s < 0.25 and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        after = watch.counters()
        watch.stop()
        assert watch.lag_max_s >= 0.25
        assert after["loop_lags_over_250ms"] - before["loop_lags_over_250ms"] == 1
        assert after["loop_lags_over_100ms"] >= after["loop_lags_over_250ms"]
        assert after["loop_lags_over_1000ms"] == 0
        assert after["loop_lag_seconds"] - before["loop_lag_seconds"] >= 0.25

    asyncio.run(body())
    assert watch._on_gc not in gc.callbacks  # stop() unhooked it


def test_collections_are_counted_per_generation_with_their_time():
    watch = StallWatch()

    async def body() -> None:
        watch.start(asyncio.get_running_loop())
        gc.collect(0)
        gc.collect(2)
        watch.stop()

    asyncio.run(body())
    c = watch.counters()
    assert c["gc_collections_gen0"] >= 1 and c["gc_collections_gen2"] >= 1
    assert c["gc_pause_seconds_gen2"] > 0
    assert watch.status()["gc_pause_max_s"] > 0
    assert set(c) >= {f"loop_lags_over_{int(b * 1000)}ms" for b in LAG_BUCKETS_S}


def test_bad_period_is_refused():
    with pytest.raises(ValueError, match="period_s"):
        StallWatch(period_s=0)
