"""Cluster membership: voters and learners, single-server changes.

A membership change is a CONFIG entry carrying the *whole* new membership
(`Membership.encode`). As in the Raft thesis (4.1, single-server changes) a node
uses the newest configuration in its log as soon as the entry is appended,
committed or not; if the entry is truncated away the node falls back to the
previous one. Safety then requires that consecutive configurations differ by at
most one voter (any two majorities of C_old and C_new intersect) and that the
leader proposes a change only when the previous one is committed and it has
committed an entry of its own term (the fix from the thesis errata).

Joint consensus is not implemented.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import NamedTuple


class Membership(NamedTuple):
    voters: frozenset[int]
    learners: frozenset[int] = frozenset()

    @classmethod
    def of(cls, voters: Iterable[int], learners: Iterable[int] = ()) -> Membership:
        v = frozenset(voters)
        ls = frozenset(learners) - v
        return cls(v, ls)

    def members(self) -> frozenset[int]:
        return self.voters | self.learners

    def encode(self) -> bytes:
        """Stable text form: b"v=1,2,3;l=4"."""
        v = ",".join(str(x) for x in sorted(self.voters))
        ls = ",".join(str(x) for x in sorted(self.learners))
        return f"v={v};l={ls}".encode()

    @classmethod
    def decode(cls, data: bytes) -> Membership:
        if not data:
            return EMPTY
        parts = dict(p.split("=", 1) for p in data.decode().split(";"))

        def ids(s: str) -> frozenset[int]:
            return frozenset(int(x) for x in s.split(",") if x)

        return cls.of(ids(parts.get("v", "")), ids(parts.get("l", "")))

    # single-server changes -------------------------------------------------
    def add_learner(self, node: int) -> Membership:
        if node in self.voters:
            raise ValueError(f"{node} is already a voter")
        return Membership.of(self.voters, self.learners | {node})

    def add_voter(self, node: int) -> Membership:
        """Add a new voter or promote a learner."""
        return Membership.of(self.voters | {node}, self.learners - {node})

    def remove(self, node: int) -> Membership:
        return Membership.of(self.voters - {node}, self.learners - {node})


EMPTY = Membership(frozenset(), frozenset())


def is_single_step(old: Membership, new: Membership) -> bool:
    """True if `new` differs from `old` by at most one voter (added or removed).

    Learner-only differences are always allowed: learners never count.
    """
    if not new.voters:
        return False
    return len(old.voters ^ new.voters) <= 1
