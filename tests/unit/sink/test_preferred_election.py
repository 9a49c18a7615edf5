"""sink.node.preferred_election on fakes: who answers, and every refusal with its reason."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

from kio.schema.errors import ErrorCode

from sink.node.preferred_election import PreferredElections


class FakeGroup:
    def __init__(self, leads: bool, voters: list[int], transfer_error: Exception | None = None):
        self.leads = leads
        self.voters = voters
        self.transfer_error = transfer_error
        self.transfers: list[int] = []

    def is_leader(self) -> bool:
        return self.leads

    def membership(self) -> dict:
        return {"voters": self.voters, "learners": []}

    async def transfer_leader(self, target: int, timeout: float) -> None:
        self.transfers.append(target)
        if self.transfer_error is not None:
            raise self.transfer_error


class FakeGroups:
    def __init__(self, replicas: tuple[int, ...] | None, group: FakeGroup | None):
        self.placement = None if replicas is None else SimpleNamespace(replicas=replicas)
        self.hosted = None if group is None else SimpleNamespace(group=group)

    def lookup(self, topic: str, partition: int):
        return self.placement, self.hosted


def elect(groups: FakeGroups, down: frozenset[int] = frozenset(), node_id: int = 1):
    e = PreferredElections(groups, lambda: down, node_id)
    return asyncio.run(e.elect("t", 0, 1.0)), e


def test_unknown_partition_and_not_led_here():
    assert elect(FakeGroups(None, None))[0] == (ErrorCode.unknown_topic_or_partition, None)
    assert elect(FakeGroups((2, 1, 3), None))[0] is None  # no replica here
    assert elect(FakeGroups((2, 1, 3), FakeGroup(False, [1, 2, 3])))[0] is None  # a follower


def test_the_preferred_replica_leads_already():
    assert elect(FakeGroups((1, 2, 3), FakeGroup(True, [1, 2, 3])))[0] == (
        ErrorCode.election_not_needed,
        None,
    )


def test_refusals_say_why_and_leave_the_leader():
    code, why = elect(FakeGroups((2, 1, 3), FakeGroup(True, [1, 3])))[0]
    assert code == ErrorCode.preferred_leader_not_available and "not a voter" in why
    g = FakeGroup(True, [1, 2, 3])
    code, why = elect(FakeGroups((2, 1, 3), g), down=frozenset({2}))[0]
    assert code == ErrorCode.preferred_leader_not_available and "down" in why
    assert g.transfers == []
    g = FakeGroup(True, [1, 2, 3], transfer_error=TimeoutError("no answer"))
    (code, why), e = elect(FakeGroups((2, 1, 3), g))
    assert code == ErrorCode.preferred_leader_not_available and "did not finish" in why
    assert (g.transfers, e.started, e.succeeded) == ([2], 1, 0)


def test_a_transfer_to_the_preferred_replica():
    g = FakeGroup(True, [1, 2, 3])
    (code, why), e = elect(FakeGroups((2, 1, 3), g))
    assert (code, why, g.transfers, e.succeeded) == (ErrorCode.none, None, [2], 1)
    assert e.preferred_replica("t", 0) == 2
    assert PreferredElections(FakeGroups(None, None), frozenset, 1).preferred_replica("t", 0) == -1
