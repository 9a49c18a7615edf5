"""relay_to_controller: when a node relays a controller request (and when it answers
it itself), against a real TCP listener standing in for the controller's; and how
long a relay waits. The end-to-end case, librdkafka's admin client and a leader
change, is tests/integration/test_controller_relay.py."""

from __future__ import annotations

import asyncio
import struct
from datetime import timedelta
from types import SimpleNamespace

import sink.kafka.handlers.controller_relay as relay_module
from sink.kafka.handlers.controller_relay import (
    RELAY_MAX_S,
    RELAY_TIMEOUT_S,
    relay_timeout,
    relay_to_controller,
)

FRAME = b"\x00\x13\x00\x07\x00\x00\x00\x2a" + b"request body"
ANSWER = b"\x00\x00\x00\x2a" + b"the controller's answer"


class Controller:
    def __init__(self, leads: bool, endpoint: tuple[int, str, int] | None) -> None:
        self.node_id = 2
        self.leads = leads
        self.endpoint = endpoint
        self.caught_up = 0

    async def catch_up(self, timeout_s: float) -> None:
        self.caught_up += 1

    def is_leader(self) -> bool:
        return self.leads

    def forward_endpoint(self) -> tuple[int, str, int] | None:
        return self.endpoint

    def leader_id(self) -> int:
        return self.endpoint[0] if self.endpoint is not None else -1


async def _with_controller(run, answer: bool = True):
    """Run run(port, seen) with a listener on 127.0.0.1 that records each frame it
    reads in `seen` and answers ANSWER (or closes, answer False)."""
    seen: list[bytes] = []

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        (size,) = struct.unpack(">i", await reader.readexactly(4))
        seen.append(await reader.readexactly(size))
        if answer:
            writer.write(struct.pack(">i", len(ANSWER)) + ANSWER)
            await writer.drain()
        writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        return await run(port, seen)
    finally:
        server.close()
        await server.wait_closed()


def _ctx(controller: Controller) -> SimpleNamespace:
    return SimpleNamespace(controller=controller, relay_login=None, envelopes=lambda: False)


def _call(frame: bytes = FRAME) -> SimpleNamespace:
    return SimpleNamespace(frame=frame, req=object())


def test_a_follower_relays_the_frame_and_returns_the_answer_as_is():
    async def run(port, seen):
        ctx = _ctx(Controller(False, (1, "127.0.0.1", port)))
        out = await relay_to_controller(ctx, _call(), timeout=timedelta(seconds=1))
        read = _ctx(Controller(False, (1, "127.0.0.1", port)))
        await relay_to_controller(read, _call(), write=False)
        return out, seen, ctx.controller.caught_up, read.controller.caught_up

    out, seen, waited, read_waited = asyncio.run(_with_controller(run))
    assert out == ANSWER and seen == [FRAME, FRAME]
    # A relayed write is answered once this node applied it too; a read is not held.
    assert (waited, read_waited) == (1, 0)


def test_answered_here_without_a_relay(monkeypatch):
    """The controller itself, a client not allowed all of it, no controller known
    (after the election wait), a controller that is this node by another view, a
    request without its frame."""
    monkeypatch.setattr(relay_module, "ELECTION_WAIT_S", 0.05)

    async def run(port, seen):
        ep = (1, "127.0.0.1", port)
        cases = [
            (_ctx(Controller(True, ep)), _call(), True),
            (_ctx(Controller(False, ep)), _call(), False),
            (_ctx(Controller(False, None)), _call(), True),
            (_ctx(Controller(False, (2, "127.0.0.1", port))), _call(), True),
            (_ctx(Controller(False, ep)), _call(b""), True),
        ]
        outs = [await relay_to_controller(ctx, call, allowed=ok) for ctx, call, ok in cases]
        return outs, seen

    outs, seen = asyncio.run(_with_controller(run))
    assert outs == [None] * 5
    assert seen == []  # nothing reached the controller


def test_an_election_is_waited_out(monkeypatch):
    """No controller known: the relay waits until one is (then relays to it), or
    ELECTION_WAIT_S (then the handler answers NOT_CONTROLLER)."""
    monkeypatch.setattr(relay_module, "ELECTION_WAIT_S", 0.3)

    async def run(port, seen):
        electing = Controller(False, None)
        loop = asyncio.get_running_loop()
        loop.call_later(0.1, setattr, electing, "endpoint", (1, "127.0.0.1", port))
        relayed = await relay_to_controller(_ctx(electing), _call())
        t0 = loop.time()
        never = await relay_to_controller(_ctx(Controller(False, None)), _call())
        return relayed, never, loop.time() - t0, seen

    relayed, never, waited, seen = asyncio.run(_with_controller(run))
    assert relayed == ANSWER and seen == [FRAME]
    assert never is None and waited >= 0.3


def test_a_failed_relay_is_answered_here(caplog):
    """The controller closes without an answer: None (the handler answers
    NOT_CONTROLLER), and the failure is logged."""

    async def run(port, seen):
        ctx = _ctx(Controller(False, (1, "127.0.0.1", port)))
        return await relay_to_controller(ctx, _call()), seen

    out, seen = asyncio.run(_with_controller(run, answer=False))
    assert out is None and seen == [FRAME]
    assert any("kafka.forward" in r.getMessage() for r in caplog.records)


def test_relay_timeout_follows_the_requests_timeout():
    assert relay_timeout(None) == RELAY_TIMEOUT_S
    assert relay_timeout(timedelta(seconds=30)) == 32.0
    assert relay_timeout(30_000) == 32.0  # ms, as the older schemas give it
    assert relay_timeout(timedelta(0)) == RELAY_TIMEOUT_S  # never below the default
    assert relay_timeout(timedelta(hours=1)) == RELAY_MAX_S


def _closed_port() -> int:
    """A port nothing listens on (bound, then closed): connections are refused there,
    as at a killed controller's listener."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_an_unreachable_controller_is_retried_at_the_next_one(monkeypatch):
    """The controller this node names refuses connections (killed; this node names it
    until its election timeout): the frame was never sent, so the relay tries again
    and reaches the controller elected next. Still unreachable by ELECTION_WAIT_S:
    answered here (NOT_CONTROLLER), the failure logged."""
    monkeypatch.setattr(relay_module, "ELECTION_WAIT_S", 0.6)
    dead = _closed_port()

    async def run(port, seen):
        loop = asyncio.get_running_loop()
        lead = Controller(False, (3, "127.0.0.1", dead))
        loop.call_later(0.2, setattr, lead, "endpoint", (1, "127.0.0.1", port))
        moved = await relay_to_controller(_ctx(lead), _call(), timeout=timedelta(seconds=5))
        t0 = loop.time()
        stays = _ctx(Controller(False, (3, "127.0.0.1", dead)))
        never = await relay_to_controller(stays, _call(), timeout=timedelta(seconds=5))
        return moved, never, loop.time() - t0, seen

    moved, never, waited, seen = asyncio.run(_with_controller(run))
    assert moved == ANSWER and seen == [FRAME]  # sent once, to the live controller
    assert never is None and 0.6 <= waited < 3


def test_a_dead_controller_then_an_election_then_the_next_one(monkeypatch):
    """The controller refuses connections, then this node knows none (the election that
    follows), then the next is known: the relay waits through the leaderless moment too
    and reaches it (CI: NOT_CONTROLLER when the retry found no controller known)."""
    monkeypatch.setattr(relay_module, "ELECTION_WAIT_S", 3.0)
    monkeypatch.setattr(relay_module, "UNREACHABLE_RETRY_S", 0.1)
    dead = _closed_port()

    async def run(port, seen):
        loop = asyncio.get_running_loop()
        lead = Controller(False, (3, "127.0.0.1", dead))
        loop.call_later(0.05, setattr, lead, "endpoint", None)
        loop.call_later(0.6, setattr, lead, "endpoint", (1, "127.0.0.1", port))
        out = await relay_to_controller(_ctx(lead), _call(), timeout=timedelta(seconds=5))
        return out, seen

    out, seen = asyncio.run(_with_controller(run))
    assert out == ANSWER and seen == [FRAME]


def test_a_request_that_may_have_been_delivered_is_not_sent_again(monkeypatch):
    """The controller read the frame and closed without an answer: it may have applied
    it, so the relay does not send it again (even with time left) and answers here."""
    monkeypatch.setattr(relay_module, "ELECTION_WAIT_S", 2.0)

    async def run(port, seen):
        ctx = _ctx(Controller(False, (1, "127.0.0.1", port)))
        return await relay_to_controller(ctx, _call(), timeout=timedelta(seconds=5)), seen

    out, seen = asyncio.run(_with_controller(run, answer=False))
    assert out is None and seen == [FRAME]
