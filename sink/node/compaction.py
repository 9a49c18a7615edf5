"""How far a Raft log may compact: topic retention plus the retention section's entry caps.

One rule for every log that holds partition data (the one group's, and with partition
groups each data group's own log, sink/node/data_groups.py):

- the retention worker's limit (per-topic retention.ms / retention.bytes, pipelines'
  holds and their hard limits: sink/topics/worker.py) always applies;
- retention.max_entries compacts further, to that many entries of THIS log, but never
  past the retention floor: the first entry a registered pipeline has not committed
  (its machine's retention_floor_index, read from the same group's pipeline offsets);
- retention.hard_max_entries forces that many entries whatever a pipeline holds (its
  reader then sees data loss).

With partition groups the caps count each data group's log: a cap of 20 entries keeps
20 entries per partition, not 20 for the cluster.
"""

from __future__ import annotations


def compaction_limit(
    applied: int,
    worker_limit: int,
    floor: int | None,
    max_entries: int,
    hard_max_entries: int,
) -> int:
    """The highest log index that may be compacted (0: none). floor: the highest index a
    registered pipeline lets go (None: no pipeline holds anything)."""
    limit = worker_limit
    if max_entries:
        by_count = applied - max_entries
        if floor is not None:
            by_count = min(by_count, floor)
        limit = max(limit, by_count)
    if hard_max_entries:
        limit = max(limit, applied - hard_max_entries)
    return limit
