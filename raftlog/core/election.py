"""Elections in the core: campaigns (PreVote first, thesis 9.6), the vote rules and
the tally (Raft paper, Figure 2; election safety: at most one vote per term, the vote
durable before the grant is sent; leader completeness: votes only for logs at least
as up to date).
"""

from __future__ import annotations

from raftlog.core.messages import (
    Message,
    MsgType,
    RequestVote,
    RequestVoteResponse,
)
from raftlog.core.quorum import VoteResult, vote_result
from raftlog.core.ready import Role


class Elections:
    """The election part of `RawNode` (a part of it: every field is RawNode's, set in its
    `__init__`; this class holds no state of its own)."""

    @property
    def promotable(self) -> bool:
        """May campaign: a voter in the current configuration that is not a known
        replacement (before founding it may ask; voters check). A voter removed by
        a configuration that is not committed yet may still campaign (and lead
        until the removal commits): it may hold the only up-to-date log of the
        remaining voters' majority (thesis 4.2.2)."""
        if self.id in self.membership.voters:
            return not self.is_replacement()
        old = self.membership_at(self.log.committed)
        return self.id in old.voters and not self.is_replacement(old)

    def campaign(self, transfer: bool = False) -> None:
        """Start an election: a PreVote round first (if enabled) unless `transfer`
        (TimeoutNow), which also bypasses the voters' leader lease."""
        self._unquiesce()
        self._campaign(pre=self.cfg.pre_vote and not transfer, transfer=transfer)

    def _campaign(self, pre: bool, transfer: bool) -> None:
        if not self.promotable or self.role is Role.LEADER:
            return
        if pre:
            self._become_pre_candidate()
            vote_term = self.term + 1
        else:
            self._become_candidate()
            vote_term = self.term
        self.votes[self.id] = self.may_vote
        if self._tally() is not VoteResult.PENDING:
            return
        last_index, last_term = self.log.last_index(), self.log.last_term()
        for v in sorted(self.membership.voters):
            if v == self.id:
                continue
            self._send(
                RequestVote(
                    src=self.id,
                    dst=v,
                    term=vote_term,
                    last_index=last_index,
                    last_term=last_term,
                    pre_vote=pre,
                    transfer=transfer,
                    voter_incarnation=self.membership.incarnation_of(v),
                    candidate_admitted=bool(self.cfg.incarnation)
                    and self.membership.incarnation_of(self.id) == self.cfg.incarnation,
                )
            )

    def _tally(self) -> VoteResult:
        res = vote_result(self.membership.voters, self.votes)
        if res is VoteResult.WON:
            if self.role is Role.PRE_CANDIDATE:
                self._campaign(pre=False, transfer=False)
            else:
                self._become_leader()
        elif res is VoteResult.LOST:
            self._become_follower(self.term, 0)
        return res

    def _handle_vote(self, m: RequestVote) -> None:
        if self.cfg.incarnation and m.voter_incarnation == self.cfg.incarnation:
            refuse = False  # the candidate's (up-to-date) membership admitted this storage
        elif self.id in self.membership.voters:
            refuse = not self.may_vote
        else:
            refuse = self.is_replacement()
        # (a node outside its own configuration votes as in plain Raft: the
        # candidate counts its grant only from the incarnation it records)
        unknown_storage = (
            m.incarnation
            and not self.counts(m.src, m.incarnation)
            # The candidate's own membership admitted its storage and this one has not
            # caught up with that admission: a grant still needs the candidate's log at
            # least as up to date as this one (below), so its membership is the newer
            # one. Refusing could stall the cluster for good: the most up-to-date
            # candidate, known here by its old storage, could never win (sim seed 1698).
            and not m.candidate_admitted
        )
        if refuse or unknown_storage:
            # a node that cannot vouch for its vote record grants nothing, and a
            # candidate on storage the membership does not know gets nothing
            # (at term 0 there is no term to answer with: the candidate times out)
            if self.term:
                self._send(
                    RequestVoteResponse(
                        src=self.id, dst=m.src, term=self.term, granted=False, pre_vote=m.pre_vote
                    )
                )
            return
        can_vote = (
            self.vote == m.src
            or (self.vote == 0 and self.lead == 0)
            or (m.pre_vote and m.term > self.term)
        )
        if can_vote and self.log.is_up_to_date(m.last_index, m.last_term):
            self._send(
                RequestVoteResponse(
                    src=self.id, dst=m.src, term=m.term, granted=True, pre_vote=m.pre_vote
                )
            )
            if not m.pre_vote:
                self.election_elapsed = 0
                self.vote = m.src
        else:
            self._send(
                RequestVoteResponse(
                    src=self.id, dst=m.src, term=self.term, granted=False, pre_vote=m.pre_vote
                )
            )

    def _step_candidate(self, m: Message) -> None:
        t = m.type
        if t in (MsgType.APPEND, MsgType.HEARTBEAT, MsgType.SNAPSHOT):
            self._become_follower(m.term, m.src)
            self._step_follower(m)
        elif t is MsgType.VOTE_RESP:
            assert isinstance(m, RequestVoteResponse)
            if m.pre_vote != (self.role is Role.PRE_CANDIDATE):
                return
            if m.src in self.membership.voters:
                granted = m.granted and (not m.incarnation or self.counts(m.src, m.incarnation))
                self.votes.setdefault(m.src, granted)
                self._tally()

    def campaign_due(self) -> bool:
        """The next tick() starts a (pre-)campaign: the runtime may hold that tick
        back to spread the elections of many groups (a follower's slower clock
        only delays its election and keeps its vote lease longer)."""
        return (
            not self.quiesced
            and self.role is not Role.LEADER
            and self.election_elapsed + 1 >= self.randomized_timeout
            and self.promotable
        )

    def postpone_election(self, ticks: int) -> None:
        """Campaign `ticks` later than the randomized timeout says (the runtime's
        call for a fresh group's replicas that should not campaign first). Only
        delays: a node without a leader is not in a lease, whatever its clock."""
        if self.role is not Role.LEADER and ticks > 0:
            self.election_elapsed -= ticks
