"""Node identity in the core: which storage may vote, whose acknowledgements count,
and the membership changes a leader makes for identities (docs/raft-core.md, "Node
identity").

Disks forget: a node that lost its storage comes back with a new incarnation. With
an incarnation configured, a node votes only while the membership records its own
incarnation (or, before the cluster is founded, after the founding check), and a
leader counts a member's acknowledgements, votes and read acks only from the
incarnation the membership records. The leader records incarnations through the
log (founding, rolling upgrade), turns a member answering from new storage into a
learner (a replacement) and promotes it once it holds everything committed.
"""

from __future__ import annotations

from raftlog.core.membership import Membership
from raftlog.core.messages import (
    IDENTITY_LEGACY,
    IDENTITY_SEALED,
    Message,
)
from raftlog.core.progress import ProgressState
from raftlog.core.ready import Role


class IdentityRules:
    """The identity rules of `RawNode` (a part of it: every field is RawNode's, set in its
    `__init__`; this class holds no state of its own)."""

    def is_replacement(self, m: Membership | None = None) -> bool:
        """The membership knows this node by another storage (or, once founded,
        does not know this new storage at all): it is a replacement until the
        leader records its incarnation through the log."""
        inc = self.cfg.incarnation
        if not inc:
            return False
        m = m if m is not None else self.membership
        recorded = m.incarnation_of(self.id)
        if recorded:
            return recorded != inc
        return m.sealed() and not self.cfg.legacy

    @property
    def may_vote(self) -> bool:
        """May grant votes and count its own: a voter whose storage the membership
        vouches for. A storage the membership does not record yet votes only if it
        predates incarnations (`legacy`) or the cluster is being founded: every
        other voter's newest message says its membership is not sealed either
        (so no configuration recording incarnations, and so no data, exists on
        any of them). A wiped node hears a sealed peer and never votes until
        admitted."""
        if self.id not in self.membership.voters:
            return False
        if not self.cfg.incarnation:
            return True
        if self.is_replacement():
            return False
        if self.membership.incarnation_of(self.id) or self.cfg.legacy:
            return True
        for v in self.membership.voters:
            if v == self.id:
                continue
            seen = self.peer_identity.get(v)
            if seen is None or seen[1] & IDENTITY_SEALED:
                return False
        return True

    def counts(self, node: int, incarnation: int) -> bool:
        """A message or acknowledgement of `node` from storage `incarnation` counts
        toward quorums: the membership records no incarnation for it, or this one."""
        recorded = self.membership.incarnation_of(node)
        return not recorded or recorded == incarnation

    def _counts_progress(self, node: int) -> bool:
        if node == self.id:
            return True
        pr = self.progress.get(node)
        return pr is not None and self.counts(node, pr.incarnation)

    def _note_identity(self, m: Message) -> None:
        # The term it was said in, as far as this node can tell: a pre-vote carries
        # its sender's next term (never more than ours counts: a leader acts on what
        # was said in its own term), a forwarded ReadIndex none. Every message still
        # updates the identity (it is what the progress below counts acks by).
        self._identity_term[m.src] = min(m.term, self.term) if m.term else self.term
        self.peer_identity[m.src] = (m.incarnation, m.identity)
        pr = self.progress.get(m.src) if self.role is Role.LEADER else None
        if pr is not None and pr.incarnation != m.incarnation:
            if pr.incarnation:
                # another storage answers for this id: what the old one acknowledged
                # is not on this one; probe it from scratch
                new = self._new_progress(m.src, self.log.last_index() + 1)
                new.recent_active = pr.recent_active
                self.progress[m.src] = pr = new
            pr.incarnation = m.incarnation

    def identity_change(self) -> Membership | None:
        """The membership change the leader makes next for node identities, if any:
        record incarnations not recorded yet (founding, rolling upgrade), turn a
        member that answers from new storage into a learner with its new
        incarnation (a replacement, `Membership.replace`), and promote such a
        learner back to voter once it holds everything committed."""
        m = self.membership
        record: dict[int, int] = {}
        if not m.incarnation_of(self.id):
            record[self.id] = self.cfg.incarnation
        for pid in sorted(m.members()):
            seen = self.peer_identity.get(pid)
            if pid == self.id or seen is None or not seen[0]:
                continue
            if self._identity_term.get(pid, 0) < self.term:
                # not heard in this term: what it said before may be an older storage
                # than the one recorded (sim seed 3873: a leader "replaced" an admitted
                # node by the incarnation it had before it lost its disk)
                continue
            inc, flags = seen
            recorded = m.incarnation_of(pid)
            if recorded == inc:
                pr = self.progress.get(pid)
                # caught up: it streams appends and holds the (committed) configuration
                # that made it a learner, so everything up to its replacement; waiting
                # for match >= commit could starve under steady load (pipelined
                # appends keep match just below commit)
                if (
                    pid in m.pending
                    and pr is not None
                    and pr.incarnation == inc
                    and pr.state is ProgressState.REPLICATE
                    and pr.match >= self._config_history[-1][0]
                ):
                    return m.add_voter(pid)
            elif recorded == 0 and flags & IDENTITY_LEGACY:
                record[pid] = inc
            else:
                return m.replace(pid, inc)
        return m.with_incarnations(record) if record else None

    def _maybe_admit(self) -> None:
        if self.lead_transferee or self.pending_conf_index > self.log.committed:
            return
        if self.log.term_at(self.log.committed) != self.term:
            return
        change = self.identity_change()
        if change is not None and change != self.membership:
            self.auto_conf_index = self.propose_membership(change)[0]

    def auto_change_in_flight(self) -> bool:
        """The uncommitted membership change is one the leader made for identities
        (an operator's change then waits for it instead of being refused)."""
        pending = self.pending_conf_index
        return pending > self.log.committed and pending == self.auto_conf_index

    def _founding_seal(self) -> Membership | None:
        """The configuration recording the incarnations a new leader knows, when its
        membership records none yet (cluster founding or a rolling upgrade).
        A peer that did not say it is legacy is recorded only when this leader is
        new itself (founding: nothing was committed before); in an upgraded
        cluster such a peer may be a wiped node and is left to the replacement path."""
        if not self.cfg.incarnation or self.membership.sealed():
            return None
        incs = {self.id: self.cfg.incarnation}
        for pid in self.membership.members():
            seen = self.peer_identity.get(pid)
            if pid == self.id or seen is None or not seen[0]:
                continue
            if seen[1] & IDENTITY_LEGACY or not self.cfg.legacy:
                incs[pid] = seen[0]
        return self.membership.with_incarnations(incs)
