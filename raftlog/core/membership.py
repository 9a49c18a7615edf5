"""Cluster membership: voters and learners, single-server changes, node incarnations.

A membership change is a CONFIG entry carrying the *whole* new membership
(`Membership.encode`). As in the Raft thesis (4.1, single-server changes) a node
uses the newest configuration in its log as soon as the entry is appended,
committed or not; if the entry is truncated away the node falls back to the
previous one. Safety then requires that consecutive configurations differ by at
most one voter (any two majorities of C_old and C_new intersect) and that the
leader proposes a change only when the previous one is committed and it has
committed an entry of its own term (the fix from the thesis errata).

Incarnations (docs/raft-core.md, "Node identity"): each member may carry the
incarnation of the storage the cluster knows it by (0: not recorded, e.g. the
initial configuration from the `peers` setting, or a configuration written
before incarnations existed). A node whose storage has another incarnation than
the recorded one is a *replacement*: it grants no vote, never campaigns and
counts toward no quorum. `pending` lists learners the leader promotes back to
voters once they have caught up (a replaced voter's new storage).
Changing only incarnations or `pending` never changes a quorum, so it is always
a single step.

Joint consensus is not implemented.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import NamedTuple


class Membership(NamedTuple):
    voters: frozenset[int]
    learners: frozenset[int] = frozenset()
    incarnations: frozenset[tuple[int, int]] = frozenset()
    """(node id, incarnation) pairs of members whose incarnation is recorded."""
    pending: frozenset[int] = frozenset()
    """Learners to promote to voters once caught up (replacements of voters)."""

    @classmethod
    def of(
        cls,
        voters: Iterable[int],
        learners: Iterable[int] = (),
        incarnations: Mapping[int, int] | None = None,
        pending: Iterable[int] = (),
    ) -> Membership:
        v = frozenset(voters)
        ls = frozenset(learners) - v
        members = v | ls
        incs = frozenset((n, i) for n, i in (incarnations or {}).items() if i and n in members)
        return cls(v, ls, incs, frozenset(pending) & ls)

    def members(self) -> frozenset[int]:
        return self.voters | self.learners

    def incarnation_map(self) -> dict[int, int]:
        return dict(self.incarnations)

    def incarnation_of(self, node: int) -> int:
        """The recorded incarnation of `node` (0: none recorded)."""
        for n, i in self.incarnations:
            if n == node:
                return i
        return 0

    def sealed(self) -> bool:
        """Some member's incarnation is recorded: the cluster has been founded
        (see node_state.RawNode.may_vote)."""
        return bool(self.incarnations)

    def encode(self) -> bytes:
        """Stable text form: b"v=1@7,2,3;l=4;p=4" (id@incarnation when recorded).

        Without incarnations or pending learners it is the old form b"v=1,2,3;l=4",
        so configurations written before incarnations existed decode unchanged."""
        incs = self.incarnation_map()

        def ids(s: Iterable[int]) -> str:
            return ",".join(f"{x}@{incs[x]}" if x in incs else str(x) for x in sorted(s))

        out = f"v={ids(self.voters)};l={ids(self.learners)}"
        if self.pending:
            out += ";p=" + ",".join(str(x) for x in sorted(self.pending))
        return out.encode()

    @classmethod
    def decode(cls, data: bytes) -> Membership:
        if not data:
            return EMPTY
        parts = dict(p.split("=", 1) for p in data.decode().split(";"))
        incs: dict[int, int] = {}

        def ids(s: str) -> list[int]:
            out = []
            for x in s.split(","):
                if not x:
                    continue
                node, _, inc = x.partition("@")
                out.append(int(node))
                if inc:
                    incs[int(node)] = int(inc)
            return out

        voters = ids(parts.get("v", ""))
        learners = ids(parts.get("l", ""))
        pending = ids(parts.get("p", ""))
        return cls.of(voters, learners, incs, pending)

    # single-server changes -------------------------------------------------
    def add_learner(self, node: int) -> Membership:
        if node in self.voters:
            raise ValueError(f"{node} is already a voter")
        return Membership.of(
            self.voters, self.learners | {node}, self.incarnation_map(), self.pending
        )

    def add_voter(self, node: int) -> Membership:
        """Add a new voter or promote a learner."""
        return Membership.of(
            self.voters | {node},
            self.learners - {node},
            self.incarnation_map(),
            self.pending - {node},
        )

    def remove(self, node: int) -> Membership:
        incs = self.incarnation_map()
        incs.pop(node, None)
        return Membership.of(
            self.voters - {node}, self.learners - {node}, incs, self.pending - {node}
        )

    def with_incarnations(self, incarnations: Mapping[int, int]) -> Membership:
        """The same members with these incarnations recorded (others kept)."""
        incs = self.incarnation_map()
        incs.update(incarnations)
        return Membership.of(self.voters, self.learners, incs, self.pending)

    def replace(self, node: int, incarnation: int) -> Membership:
        """`node` came back with new storage: a learner with its new incarnation,
        promoted to voter once caught up if it was a voter."""
        incs = self.incarnation_map()
        incs[node] = incarnation
        was_voter = node in self.voters
        pending = self.pending | {node} if was_voter else self.pending
        return Membership.of(self.voters - {node}, self.learners | {node}, incs, pending)


EMPTY = Membership(frozenset(), frozenset())


def is_single_step(old: Membership, new: Membership) -> bool:
    """True if `new` differs from `old` by at most one voter (added or removed).

    Learner-only and incarnation-only differences are always allowed: learners
    never count, and incarnations do not change any quorum's members.
    """
    if not new.voters:
        return False
    return len(old.voters ^ new.voters) <= 1
