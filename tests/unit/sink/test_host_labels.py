"""sink/node/host_labels.py: what placement sees of the voters' host labels, the wait
for registrations after a start, and the announcer's retries (a fake Members call).
The real-process behaviour: tests/integration/test_host_placement.py."""

from __future__ import annotations

import asyncio
import json
from types import SimpleNamespace

import pytest

from sink.members.operator import INVALID, MembershipError
from sink.members.rpc import parse_request
from sink.node.host_labels import HostAnnouncer, labels_settled, unregistered, voter_hosts


@pytest.mark.parametrize(
    ("registered", "my_label", "expected"),
    [
        # nobody labelled: every voter its own host, registered or not
        ({}, "", {1: None, 2: None, 3: None}),
        ({2: ""}, "", {1: None, 2: None, 3: None}),
        # labels in use: an unregistered voter is left out (never guessed as its own host)
        ({}, "h1", {1: "h1"}),
        ({2: "h1"}, "", {1: None, 2: "h1"}),
        ({2: "h1", 3: "h2"}, "h1", {1: "h1", 2: "h1", 3: "h2"}),
        # every voter registered: an empty label is its own host
        ({2: "h1", 3: ""}, "h1", {1: "h1", 2: "h1", 3: None}),
        # this node's own label is its configuration's, whatever it registered before
        ({1: "old", 2: "h1", 3: "h2"}, "h9", {1: "h9", 2: "h1", 3: "h2"}),
    ],
)
def test_voter_hosts(registered, my_label, expected):
    assert voter_hosts([1, 2, 3], registered, 1, my_label) == expected
    assert unregistered([1, 2, 3], registered, 1, my_label) == sorted({1, 2, 3} - set(expected))


def test_labels_settled_waits_for_the_registrations_and_is_bounded():
    async def body():
        registered: dict[int, str] = {}

        def missing() -> list[int]:
            return unregistered([1, 2, 3], registered, 1, "h1")

        loop = asyncio.get_running_loop()
        loop.call_later(0.05, registered.update, {2: "h1"})
        loop.call_later(0.1, registered.update, {3: "h2"})
        assert await labels_settled(missing, 10.0, poll_s=0.01) == []
        registered.pop(3)
        assert await labels_settled(missing, 0.05, poll_s=0.01) == [3]

    asyncio.run(body())


def test_announcer_retries_until_registered_and_sends_a_valid_request():
    async def body():
        registered: dict[int, str] = {}
        sent = []

        async def members_call(text: str):
            req = parse_request(text)  # what the read API's Members call accepts
            sent.append(req)
            if len(sent) == 1:
                raise ConnectionError("no controller leader yet")
            if len(sent) == 2:
                return SimpleNamespace(code="not_leader", error="no leader")
            registered[req["node"]] = req["host"]
            return SimpleNamespace(code="", error="")

        a = HostAnnouncer(4, "h2", lambda: registered, members_call)
        assert not await a.announce() and not await a.announce()
        assert await a.announce() and registered == {4: "h2"} and a.failures == 2
        assert sent[-1]["op"] == "host" and sent[-1]["node"] == 4

    asyncio.run(body())


@pytest.mark.parametrize(
    ("req", "says"),
    [
        ({"op": "host", "host": "h1"}, "node"),
        ({"op": "host", "node": 2, "host": "a b"}, "host label"),
        ({"op": "host", "node": 2}, "host label"),
    ],
)
def test_bad_host_registrations_are_refused(req, says):
    with pytest.raises(MembershipError, match=says) as err:
        parse_request(json.dumps(req))
    assert err.value.code == INVALID
