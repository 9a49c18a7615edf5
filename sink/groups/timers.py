"""When each group next needs the coordinator's clock: a heap of (time, seq, group id).

Invariant: a group is pushed again only for a time earlier than the one it is queued
for (Group.heap_at), so the heap holds at most a few entries per group; an entry whose
time is no longer its group's heap_at (or whose group is gone) is stale and skipped.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Iterator, Mapping

from sink.groups.group import Group


class GroupTimers:
    def __init__(self) -> None:
        self._heap: list[tuple[float, int, str]] = []
        self._seq = itertools.count()

    def clear(self) -> None:
        self._heap = []

    def schedule(self, group: Group) -> None:
        """Queue group for its next deadline (the caller checks it is a current group)."""
        nd = group.next_deadline()
        if nd is not None and (group.heap_at is None or nd < group.heap_at):
            group.heap_at = nd
            heapq.heappush(self._heap, (nd, next(self._seq), group.group_id))

    def next_deadline(self, groups: Mapping[str, Group]) -> float | None:
        """When something is next due (None: nothing scheduled); stale entries go."""
        while self._heap:
            when, _, gid = self._heap[0]
            g = groups.get(gid)
            if g is not None and g.heap_at == when:
                return when
            heapq.heappop(self._heap)  # stale entry
        return None

    def due(self, now: float, groups: Mapping[str, Group]) -> Iterator[Group]:
        """The groups due at `now`, each taken off the heap (heap_at None) as it is
        yielded. Lazy: what the caller schedules meanwhile, if due, comes too."""
        while self._heap and self._heap[0][0] <= now:
            when, _, gid = heapq.heappop(self._heap)
            g = groups.get(gid)
            if g is None or g.heap_at != when:
                continue
            g.heap_at = None
            yield g
