"""RaftGroup's read surface: what applications read of a group (term, commit and
applied index, committed entries, membership, identity, status).

Split out of group.py (the Ready pipeline). A mixin of RaftGroup: the fields it uses
are RaftGroup's. `core` (the RawNode) and `queue` (the DiskQueue) are internal:
their invariants hold only on the group's own loops, and their shapes change with
the runtime; these methods are the stable view of them.
"""

from __future__ import annotations

from collections.abc import Sequence

from raftlog.core import Role
from raftlog.entry import LogEntry
from raftlog.storage import LogRangeError


class GroupReadSurface:
    """term / commit_index / applied_index / first_index / read_committed / membership /
    identity_status / is_leader / status."""

    # What applications read of a node. `core` (the RawNode) and `queue` (the
    # DiskQueue) are internal: their invariants hold only on the node's own
    # loops, and their shapes change with the runtime.

    @property
    def term(self) -> int:
        """This node's current Raft term (0 before start). Only rises; sink uses it
        as the Kafka leader epoch."""
        core_ = getattr(self, "core", None)
        return core_.term if core_ is not None else self._last_hs.term

    @property
    def commit_index(self) -> int:
        """Highest log index this node knows to be committed (a follower learns it
        from the leader, so it may lag the leader's). Invariant:
        applied <= commit_index <= last log index."""
        core_ = getattr(self, "core", None)
        return core_.log.committed if core_ is not None else self._last_hs.commit

    @property
    def applied_index(self) -> int:
        """Highest index handed to the state machine's on_apply (same as `applied`)."""
        return self.applied

    def first_index(self) -> int:
        """First index the application may still read (entries before it were compacted
        into a snapshot). Valid after start().

        The log is cut only at a kept snapshot (see Compaction.store), so entries the last
        snapshot released (below snapshot_keep_entries and the compaction limit) may still
        be on disk, below the cut point a rebuilt follower needs; they are not offered: this
        index follows the release, as it did when the cut was exact. After a restart it
        starts from the cut (no release yet), so it may be a little lower until the next
        snapshot: the same entries, readable again, never different ones."""
        return max(self.queue.first_index(), self._compaction.released + 1)

    def read_committed(self, start: int, max_count: int, max_bytes: int) -> list[LogEntry]:
        """Committed entries from `start` on: at most max_count entries and, past the
        first, about max_bytes payload bytes. Never returns an entry above
        max(commit_index, applied) (an applied entry was committed, even while a
        restarted node has not relearned the commit index), so what it returns
        can no longer change. Raises raftlog.storage.LogRangeError when start is
        below first_index() (compacted) or above that bound. Valid after start();
        call it on the node's loop."""
        committed = max(self.commit_index, self.applied)
        if start > committed:
            raise LogRangeError(f"entry {start} is above the commit index {committed}")
        return self.queue.read(start, min(max_count, committed - start + 1), max_bytes)

    def membership(self) -> dict[str, list[int]]:
        """Current configuration: {"voters": [...], "learners": [...]} (node ids); both
        empty while the group is still opening (a host lists it before its core exists)."""
        core_ = getattr(self, "core", None)
        if core_ is None:
            return {"voters": [], "learners": []}
        m = core_.membership
        return {"voters": sorted(m.voters), "learners": sorted(m.learners)}

    def peers_down(self) -> frozenset[int]:
        """The nodes this node's host declares down now (RaftHost.peers_down: node
        liveness, silent for the silence limit or their stream broken); never this
        node. A view of this process only. Empty with quiescence off."""
        return self.host.peers_down()

    def in_sync_voters(self, voters: Sequence[int] | None = None) -> tuple[int, ...]:
        """The voters this node counts in sync (sorted; Kafka's ISR): every voter but
        those the host declares down (RaftHost.peers_down: silent for the node-liveness
        limit, or its stream broken). This node itself is always in. Time-based like
        Kafka's replica.lag.time.max.ms, never by match index: a follower a few entries
        behind under load is in sync, a dead one drops out after the silence limit
        (seconds) and returns with its first message. Node liveness, not the group's
        own acknowledgements, so a quiesced group (no heartbeats) keeps its live
        voters. Empty while the group is still opening. voters: membership()'s, when the
        caller read them already (a Produce's role per partition)."""
        if voters is None:
            voters = self.membership()["voters"]
        down = self.host.peers_down()
        if not down:
            return tuple(voters)
        return tuple(v for v in voters if v == self.id or v not in down)

    def incarnations(self) -> dict[int, int]:
        """The storage incarnations the current configuration records, by node id
        (empty while opening, with identity off, or before founding)."""
        core_ = getattr(self, "core", None)
        return {} if core_ is None else core_.membership.incarnation_map()

    def identity_status(self) -> dict:
        """This node's storage identity in the group: its incarnation, the one the
        membership records for it, and whether it may vote now (`raftsink status`)."""
        c = self.core
        ident = self.identity
        st: dict = {
            "incarnation": c.cfg.incarnation,
            "recorded": c.membership.incarnation_of(self.id),
            "may_vote": c.may_vote,
            "replacement": c.is_replacement(),
            "voter": self.id in c.membership.voters,
            "members": {str(k): v for k, v in sorted(c.membership.incarnations)},
            "pending": sorted(c.membership.pending),
        }
        if ident is not None:
            st.update(cluster_id=ident.cluster_id, legacy=ident.legacy, why=ident.reason)
        return st

    def is_leader(self) -> bool:
        """This node is the leader of its group now (it may be deposed without
        knowing yet; a read needing linearizability goes through read_index)."""
        return self.role is Role.LEADER

    def leads_current(self) -> bool:
        """Leader, and this process's ticks are current: no stall since its last tick as
        long as a follower's shortest election timeout less one heartbeat interval, so
        no other leader can have been elected since the followers last heard from it
        (RaftHost.ticks_current). What a read that reports the group's high watermark
        needs besides is_leader()."""
        o = self.options
        lease_s = (o.election_ticks - o.heartbeat_ticks) * o.tick_ms / 1000
        return self.role is Role.LEADER and self.host.ticks_current(lease_s)

    def status(self) -> dict:
        c = self.core
        st = {
            "id": self.id,
            "group": self.group_id,
            "role": self.role.value,
            "term": c.term,
            "leader": self.leader_id,
            "commit": c.log.committed,
            "applied": self.applied,
            "last_index": self.queue.last_index(),
            "durable_index": self.queue.durable_index,
            "first_index": self.queue.first_index(),
            "pending_proposals": self._pending_count,
            "readies": self.stats.readies,
            "inline_readies": self.stats.inline_readies,
        }
        st["membership"] = self.membership()
        st["identity"] = self.identity_status()
        qs, ss = self.queue.stats, self.queue.store.stats
        st["disk"] = {
            "batches": qs.batches,
            "fsyncs": ss.syncs,
            "busy_seconds": round(qs.write_seconds, 3),
            "appended_entries": ss.appended_entries,
            # the rounds of this log's writer (shared by the host's groups, if hosted)
            "round_ms": self.queue.writer_stats.round_seconds.summary_ms(),
        }
        if self.role is Role.LEADER:
            st["followers"] = {
                pid: {"match": pr.match, "next": pr.next, "state": pr.state.name.lower()}
                for pid, pr in c.progress.items()
                if pid != self.id
            }
        return st
