"""The leader's view of one follower: match/next index, flow state, inflight window.

Invariants (while the owning node is leader of one term):
  * match < next; match only grows (a follower acknowledges only durable entries
    and, within a term, never loses a matching entry it acknowledged).
  * PROBE: at most one AppendEntries outstanding (`probe_sent`); next backs off
    on each rejection until the logs match.
  * REPLICATE: next is optimistic (last sent + 1); appends are pipelined and
    bounded by `Inflights` in count and in bytes.
  * SNAPSHOT: no appends; InstallSnapshot chunks are sent one at a time until
    the follower acknowledges the snapshot index.
"""

from __future__ import annotations

import enum
from collections import deque
from dataclasses import dataclass, field


class ProgressState(enum.Enum):
    PROBE = "probe"
    REPLICATE = "replicate"
    SNAPSHOT = "snapshot"


class Inflights:
    """Sliding window of in-flight appends, each identified by its last index.

    Full when either `max_count` messages or `max_bytes` payload bytes are
    outstanding. Freed by acknowledgements (any index >= a message's last index).
    """

    __slots__ = ("_q", "bytes", "max_bytes", "max_count")

    def __init__(self, max_count: int, max_bytes: int) -> None:
        self.max_count = max_count
        self.max_bytes = max_bytes
        self._q: deque[tuple[int, int]] = deque()
        self.bytes = 0

    def add(self, last_index: int, nbytes: int) -> None:
        self._q.append((last_index, nbytes))
        self.bytes += nbytes

    def free_le(self, index: int) -> None:
        q = self._q
        while q and q[0][0] <= index:
            self.bytes -= q.popleft()[1]

    def free_first(self) -> None:
        if self._q:
            self.bytes -= self._q.popleft()[1]

    def reset(self) -> None:
        self._q.clear()
        self.bytes = 0

    def full(self) -> bool:
        return len(self._q) >= self.max_count or self.bytes >= self.max_bytes

    def __len__(self) -> int:
        return len(self._q)


@dataclass(slots=True)
class Progress:
    match: int
    next: int
    inflights: Inflights
    is_learner: bool = False
    state: ProgressState = ProgressState.PROBE
    probe_sent: bool = False
    """PROBE only: an append is outstanding; wait for its answer (or a heartbeat answer)."""
    recent_active: bool = False
    """Heard from since the last CheckQuorum round."""
    answered: bool = False
    """Heard from since the leader's last heartbeat round (RaftConfig.beats_yield_to_appends)."""
    appended_commit: int = -1
    """The commit index the newest AppendEntries sent to this follower since the
    leader's last heartbeat round told it (min of the leader's commit and the append's
    last index, what the follower commits on it); -1: none since that round
    (RaftConfig.beats_yield_to_appends)."""
    pending_snapshot: int = 0
    """SNAPSHOT only: index of the snapshot being sent."""
    snap_offset: int = 0
    """SNAPSHOT only: byte offset of the next chunk to send."""
    snap_term: int = field(default=0)
    incarnation: int = 0
    """The follower's storage incarnation this progress describes (0: not heard yet).
    Invariant: match was acknowledged by that incarnation; a new one resets it."""

    def become_probe(self) -> None:
        """Back to one-at-a-time appends from match + 1 (or after a sent snapshot)."""
        if self.state is ProgressState.SNAPSHOT:
            self.next = max(self.match + 1, self.pending_snapshot + 1)
        else:
            self.next = self.match + 1
        self.state = ProgressState.PROBE
        self.probe_sent = False
        self.pending_snapshot = 0
        self.inflights.reset()

    def become_replicate(self) -> None:
        self.state = ProgressState.REPLICATE
        self.next = self.match + 1
        self.probe_sent = False
        self.inflights.reset()

    def become_snapshot(self, index: int, term: int) -> None:
        self.state = ProgressState.SNAPSHOT
        self.pending_snapshot = index
        self.snap_term = term
        self.snap_offset = 0
        self.probe_sent = False
        self.inflights.reset()

    def maybe_update(self, index: int) -> bool:
        """Record an acknowledgement up to `index`; True if match grew."""
        updated = False
        if self.match < index:
            self.match = index
            updated = True
            self.probe_sent = False
        self.next = max(self.next, index + 1)
        return updated

    def maybe_decr_to(self, rejected: int, hint: int) -> bool:
        """Handle a rejection of the append whose prev_index was `rejected`.

        Returns False for a stale rejection (one that does not concern the
        current `next`). Otherwise next backs off to min(rejected, hint + 1),
        never below match + 1.
        """
        if self.state is ProgressState.REPLICATE:
            if rejected <= self.match:
                return False
            self.next = self.match + 1
            return True
        if self.next - 1 != rejected:
            return False
        self.next = max(min(rejected, hint + 1), self.match + 1)
        self.probe_sent = False
        return True

    def is_paused(self) -> bool:
        if self.state is ProgressState.PROBE:
            return self.probe_sent
        if self.state is ProgressState.REPLICATE:
            return self.inflights.full()
        return True

    def sent_entries(self, last_index: int | None, nbytes: int) -> None:
        """Bookkeeping after sending an append whose last entry is `last_index`."""
        if self.state is ProgressState.REPLICATE:
            if last_index is not None:
                self.next = last_index + 1
                self.inflights.add(last_index, nbytes)
        elif self.state is ProgressState.PROBE:
            self.probe_sent = True
