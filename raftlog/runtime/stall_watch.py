"""Stalls of a node process: garbage-collector pauses and event-loop lag.

Every Raft message, Kafka request and disk completion of a node runs on one event
loop, so anything that holds the loop (a gen-2 collection, a long callback, a CPU
starved by other processes) shows up as latency of everything at once. These
counters say which it was, and when, without a profiler:

- gc: collections and the time they took, per generation (`gc.callbacks`; a
  collection runs on whichever thread allocated, and holds the GIL throughout);
- loop lag: a timer due every `period_s` measures how late it fired. Lateness
  beyond a few ms means the loop was busy or the process was not scheduled;
  counted in buckets (`LAG_BUCKETS_S`) so a scraper can difference them.

Counters only grow (Prometheus counters; a scraper takes deltas per interval).
One watch per process (`install`): the collector is process-wide.
"""

from __future__ import annotations

import asyncio
import gc
import time
from typing import Any

LAG_BUCKETS_S = (0.025, 0.05, 0.1, 0.25, 0.5, 1.0)
"""Loop lag at or above each bound is counted in its own counter (cumulative, like
Prometheus histogram buckets read from the top)."""

GC_SLOW_S = 0.05
"""A collection at least this long also counts in gc_pauses_over_50ms."""


class StallWatch:
    """GC pause and loop-lag counters of this process (see the module doc)."""

    def __init__(self, period_s: float = 0.1) -> None:
        if period_s <= 0:
            raise ValueError("StallWatch period_s must be positive")
        self.period_s = period_s
        self.gc_collections = [0, 0, 0]
        self.gc_seconds = [0.0, 0.0, 0.0]
        self.gc_slow = 0
        self.gc_max_s = 0.0
        self.lag_over = [0] * len(LAG_BUCKETS_S)
        self.lag_max_s = 0.0
        self.lag_seconds = 0.0
        """Sum of lateness beyond the period (seconds the loop was late in all)."""
        self._gc_started = 0.0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._handle: asyncio.TimerHandle | None = None
        self._due = 0.0

    # ------------------------------------------------------------- gc

    def _on_gc(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._gc_started = time.perf_counter()
            return
        took = time.perf_counter() - self._gc_started
        gen = info.get("generation", 2)
        self.gc_collections[gen] += 1
        self.gc_seconds[gen] += took
        if took >= GC_SLOW_S:
            self.gc_slow += 1
        self.gc_max_s = max(self.gc_max_s, took)

    # ------------------------------------------------------------- loop lag

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        """Watch gc and this loop until stop()."""
        if self._loop is not None:
            return
        self._loop = loop
        gc.callbacks.append(self._on_gc)
        self._due = loop.time() + self.period_s
        self._handle = loop.call_at(self._due, self._tick)

    def _tick(self) -> None:
        loop = self._loop
        if loop is None:
            return
        now = loop.time()
        late = now - self._due
        if late > 0:
            self.lag_seconds += late
            self.lag_max_s = max(self.lag_max_s, late)
            for i, bound in enumerate(LAG_BUCKETS_S):
                if late < bound:
                    break
                self.lag_over[i] += 1
        # Due again one period from now (not from the missed due time: a long stall
        # is one late tick, not a burst of catch-up ticks).
        self._due = now + self.period_s
        self._handle = loop.call_at(self._due, self._tick)

    def stop(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
        if self._loop is not None:
            self._loop = None
            if self._on_gc in gc.callbacks:
                gc.callbacks.remove(self._on_gc)

    # ------------------------------------------------------------- reading

    def counters(self) -> dict[str, float]:
        """Metric name -> value (all counters, growing since start)."""
        out: dict[str, float] = {}
        for gen in range(3):
            out[f"gc_collections_gen{gen}"] = self.gc_collections[gen]
            out[f"gc_pause_seconds_gen{gen}"] = round(self.gc_seconds[gen], 6)
        out["gc_pauses_over_50ms"] = self.gc_slow
        out["loop_lag_seconds"] = round(self.lag_seconds, 6)
        for bound, n in zip(LAG_BUCKETS_S, self.lag_over, strict=True):
            out[f"loop_lags_over_{int(bound * 1000)}ms"] = n
        return out

    def status(self) -> dict[str, Any]:
        """counters() plus the largest pause and lag seen (for `raftsink status`)."""
        return {
            **self.counters(),
            "gc_pause_max_s": round(self.gc_max_s, 6),
            "loop_lag_max_s": round(self.lag_max_s, 6),
        }


_WATCH: StallWatch | None = None


def install(loop: asyncio.AbstractEventLoop, period_s: float = 0.1) -> StallWatch:
    """The process's watch, started on loop (idempotent: one per process)."""
    global _WATCH
    if _WATCH is None:
        _WATCH = StallWatch(period_s)
    _WATCH.start(loop)
    return _WATCH


def installed() -> StallWatch | None:
    """The process's watch if install() ran (None in tests and tools)."""
    return _WATCH
