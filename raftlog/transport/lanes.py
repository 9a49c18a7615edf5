"""The data lane of one peer link: one FIFO per Raft group, served round-robin.

Every group of a process shares one connection per peer. Appends and snapshot
chunks (the data lane) are large and bursty; with one shared FIFO a group
flooding appends pushed another group's appends behind tens of thousands of its
own messages, and once the lane was full dropped them outright.

Invariants:
- Order is kept within a group (each group has its own FIFO); groups take turns,
  one message each, so a group's next message leaves after at most one message
  of every other group with queued data.
- The lane as a whole holds at most `max_messages` messages and `max_bytes`
  bytes (an empty lane accepts any one message).
- When the lane is full, a message of group g is admitted by dropping the newest
  messages of the group holding the largest share (by the binding measure), and
  only while that group holds more than g would after admission: so each group
  with demand keeps at least about 1/n of the lane, and the flooding group loses
  its own newest appends (Raft resends them), never another group's.
"""

from __future__ import annotations

import collections
from collections.abc import Callable

from raftlog.core.messages import Message

Item = tuple[Message, int]  # (message, approximate bytes)


class FairDataLane:
    """Per-group FIFOs with a shared message and byte bound (see module doc)."""

    __slots__ = ("_queues", "_ring", "_sizes", "bytes", "count", "max_bytes", "max_messages")

    def __init__(self, max_messages: int, max_bytes: int) -> None:
        self.max_messages = max_messages
        self.max_bytes = max_bytes
        self.count = 0
        self.bytes = 0
        self._queues: dict[int, collections.deque[Item]] = {}
        self._sizes: dict[int, int] = {}  # queued bytes per group
        # Groups with queued messages, in serving order; a group is in the ring
        # exactly when it has a non-empty queue.
        self._ring: collections.deque[int] = collections.deque()

    def __len__(self) -> int:
        return self.count

    def _full(self, size: int) -> bool:
        return self.count >= self.max_messages or (
            self.count > 0 and self.bytes + size > self.max_bytes
        )

    def offer(self, m: Message, size: int, on_drop: Callable[[], None]) -> bool:
        """Queue m (size bytes); False if m itself was dropped. on_drop() runs once per
        message dropped, m or an evicted one."""
        g = m.group_id
        while self._full(size):
            if not self._evict_for(g, size):
                on_drop()
                return False
            on_drop()
        q = self._queues.get(g)
        if q is None:
            q = self._queues[g] = collections.deque()
            self._sizes[g] = 0
            self._ring.append(g)
        q.append((m, size))
        self._sizes[g] += size
        self.count += 1
        self.bytes += size
        return True

    def _evict_for(self, g: int, size: int) -> bool:
        """Drop the newest message of the largest other group, if it holds more than g
        would after admitting size bytes. False: nothing to evict (drop the newcomer)."""
        by_count = self.count >= self.max_messages
        queues, sizes = self._queues, self._sizes
        own_q = queues.get(g)
        # Fast path (a flooding group offering more): a group holding more than half
        # the lane is the largest, so nobody else is evicted for it; no scan needed.
        if by_count:
            own = (len(own_q) if own_q else 0) + 1
            if 2 * own > self.count:
                return False
            victim = max((v for v in queues if v != g), key=lambda v: len(queues[v]), default=None)
            if victim is None or len(queues[victim]) <= own:
                return False
        else:
            own = sizes.get(g, 0) + size
            if 2 * own >= self.bytes + size:
                return False
            victim = max((v for v in queues if v != g), key=sizes.__getitem__, default=None)
            if victim is None or sizes[victim] <= own:
                return False
        vq = queues[victim]
        _, n = vq.pop()  # the victim's newest: its older messages keep their order
        self._account(victim, n)
        if not vq:
            del queues[victim], sizes[victim]
            self._ring.remove(victim)
        return True

    def _account(self, g: int, n: int) -> None:
        self._sizes[g] -= n
        self.count -= 1
        self.bytes -= n

    def take(self, out: list[Message], cap: int, limit: int) -> None:
        """Append to out, round-robin over groups, until out holds cap messages or (once
        out is not empty) limit bytes were taken."""
        ring, queues = self._ring, self._queues
        size = 0
        while ring and len(out) < cap and (not out or size < limit):
            g = ring.popleft()
            q = queues[g]
            m, n = q.popleft()
            self._account(g, n)
            out.append(m)
            size += n
            if q:
                ring.append(g)
            else:
                del queues[g], self._sizes[g]

    def clear(self) -> int:
        """Drop everything; returns how many messages were queued."""
        n = self.count
        self._queues.clear()
        self._sizes.clear()
        self._ring.clear()
        self.count = self.bytes = 0
        return n
