"""Linearizable reads (ReadIndex, thesis 6.4): a read is released at the commit index
it was requested at once a quorum confirmed, by a heartbeat round, that this node
was still the leader; on a follower, through the leader.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from raftlog.core.config import RawNotLeaderError
from raftlog.core.messages import ReadIndex, ReadIndexResponse
from raftlog.core.quorum import has_quorum
from raftlog.core.ready import ReadState, Role


@dataclass(slots=True)
class PendingRead:
    """A leader's read waiting for a quorum's confirmation (acks: the voters whose
    heartbeat answer with context >= seq arrived)."""

    seq: int
    index: int
    src: int
    context: bytes
    acks: set[int] = field(default_factory=set)


class Reads:
    """The ReadIndex part of `RawNode` (a part of it: every field is RawNode's, set in its
    `__init__`; this class holds no state of its own)."""

    def read_index(self, context: bytes) -> None:
        """Request a linearizable read. The answer arrives as a `ReadState` with
        this context in a later Ready (here or, on a follower, via the leader)."""
        self._unquiesce()
        if self.role is Role.LEADER:
            self._leader_read(self.id, context)
        elif self.lead:
            self._send(ReadIndex(src=self.id, dst=self.lead, term=0, context=context))
        else:
            raise RawNotLeaderError(0)

    def _leader_read(self, src: int, context: bytes) -> None:
        if self.log.term_at(self.log.committed) != self.term:
            # the commit index is only known current once an entry of this term commits
            self._reads_waiting.append((src, context))
            return
        self._read_seq += 1
        self._reads.append(PendingRead(self._read_seq, self.log.committed, src, context, {self.id}))
        self._release_reads()
        if self._reads:
            self._bcast_heartbeat()

    def _release_reads(self) -> bool:
        """Release the leading reads a quorum confirmed; True if any released."""
        released = False
        voters = self.membership.voters
        while self._reads and has_quorum(voters, self._reads[0].acks):
            r = self._reads.popleft()
            released = True
            if r.src == self.id:
                self._read_states.append(ReadState(r.index, r.context))
            else:
                self._send(
                    ReadIndexResponse(
                        src=self.id, dst=r.src, term=self.term, index=r.index, context=r.context
                    )
                )
        return released
