"""Majority arithmetic over a voter set.

Only voters count; learners never appear here. The committed index of a voter
set is the largest index a majority has durably acknowledged: sort the match
indexes descending and take the (n // 2)-th (JoyQueue: the median position).
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable, Mapping


class VoteResult(enum.Enum):
    PENDING = "pending"
    WON = "won"
    LOST = "lost"


def quorum_size(n_voters: int) -> int:
    return n_voters // 2 + 1


def committed_index(voters: Iterable[int], match_of: Callable[[int], int]) -> int:
    """Largest index acknowledged by a majority of `voters` (0 for no voters)."""
    matches = sorted((match_of(v) for v in voters), reverse=True)
    if not matches:
        return 0
    return matches[quorum_size(len(matches)) - 1]


def vote_result(voters: Iterable[int], votes: Mapping[int, bool]) -> VoteResult:
    """WON once a majority granted, LOST once a majority can no longer grant."""
    voters = list(voters)
    granted = rejected = 0
    for v in voters:
        got = votes.get(v)
        if got is True:
            granted += 1
        elif got is False:
            rejected += 1
    q = quorum_size(len(voters))
    if granted >= q:
        return VoteResult.WON
    if len(voters) - rejected < q:
        return VoteResult.LOST
    return VoteResult.PENDING


def has_quorum(voters: Iterable[int], acks: Iterable[int]) -> bool:
    voters = set(voters)
    return len(voters & set(acks)) >= quorum_size(len(voters))
