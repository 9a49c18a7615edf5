"""SinkService.leader_hint: where a leaderless node points Kafka clients."""

from types import SimpleNamespace

import pytest

from sink.service import SinkService

BROKERS = {1: ("h", 1), 2: ("h", 2), 3: ("h", 3)}


def service(me: int, leader: int, last: int) -> SinkService:
    node = SimpleNamespace(leader_id=leader, last_leader_id=last)
    return SinkService(node, None, node_id=me, brokers=BROKERS, cluster_id="c")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("me", "leader", "last", "hint"),
    [
        (1, 2, 2, 2),  # a leader is known: that one
        (1, 0, 2, 2),  # leaderless: the last leader known
        (2, 0, 2, 1),  # leaderless and the last leader was this node: another node
        (3, 0, 3, 1),
        (1, 0, 0, -1),  # no leader ever known
        (1, 0, 9, -1),  # a leader outside the broker map (removed member)
    ],
)
def test_leader_hint(me, leader, last, hint):
    assert service(me, leader, last).leader_hint() == hint
