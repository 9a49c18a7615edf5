"""Garbage-collector settings for long-running node processes.

Measured on a 3-node sink: gen-2 collections paused every node for 13-40 ms,
which showed up as 20-80 ms spikes in produce latency. After start-up, almost
every object (modules, schemas, grpc and kio tables) lives for the whole
process, so it is frozen out of the collector's scans, and the young
generation is collected less often.
"""

from __future__ import annotations

import gc


def tune_gc_for_latency(threshold0: int = 50_000) -> None:
    """Call once the node has started: collect, freeze survivors, raise gen-0 threshold."""
    gc.collect()
    gc.freeze()
    _, t1, t2 = gc.get_threshold()
    gc.set_threshold(threshold0, t1, t2)
