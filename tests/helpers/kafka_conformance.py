"""One request/answer exchange checked the way the conformance harness checks
every answer, and the table of error codes Kafka gives.

`Checker.exchange` sends one request frame and checks: an answer comes (or the
connection closes, when Kafka itself would close); it carries the request's
correlation id; it decodes strictly with the version's response schema with
nothing left over; its error codes are the expected ones; an ApiVersions on the
same connection still answers. Every failed check becomes one line in
`Checker.failures`, so that one test run lists every defect.
"""

from __future__ import annotations

import asyncio
import dataclasses
import struct
from dataclasses import dataclass, field
from typing import Any

from kio.schema.errors import ErrorCode

from tests.helpers.kafka_harness import (
    PROBE_CORR,
    Closed,
    Conn,
    Harness,
    log_sizes,
    new_problems,
    probe,
)
from tests.helpers.kafka_schema import WireError, decode_response
from tests.helpers.kafka_wire import API_NAMES

# Error codes, by name, for the tables below.
NONE = 0
OFFSET_OUT_OF_RANGE = 1
CORRUPT_MESSAGE = 2
UNKNOWN_TOPIC_OR_PARTITION = 3
NOT_LEADER_OR_FOLLOWER = 6
NOT_COORDINATOR = 16
INVALID_TOPIC_EXCEPTION = 17
INVALID_REQUIRED_ACKS = 21
UNSUPPORTED_VERSION = 35
TOPIC_ALREADY_EXISTS = 36
INVALID_PARTITIONS = 37
INVALID_REPLICATION_FACTOR = 38
NOT_CONTROLLER = 41
INVALID_REQUEST = 42
UNKNOWN_TOPIC_ID = 100


@dataclass(frozen=True)
class Expect:
    """Error codes an answer may carry; `required` must be among them when set."""

    allowed: frozenset[int]
    required: int | None = None

    @staticmethod
    def of(*codes: int, required: int | None = None) -> Expect:
        return Expect(frozenset(codes), required)

    @staticmethod
    def error(code: int, *also: int) -> Expect:
        """`code` must be in the answer; other levels of it may say NONE (Fetch's
        top-level error_code stays 0 when a partition has an error)."""
        return Expect(frozenset((NONE, code, *also)), code)


# What Kafka answers to the valid request (an existing topic, partition 0), on the
# leader and on a follower. Followers: partition APIs NOT_LEADER_OR_FOLLOWER, the
# group APIs NOT_COORDINATOR (the coordinator is the leader), CreateTopics
# NOT_CONTROLLER; Metadata, FindCoordinator, ApiVersions and InitProducerId
# without a transactional id are answered by any broker. An API missing here
# still gets every other check.
# raftsink's one documented difference: followers serve Fetch from their applied
# data (docs/kafka.md "Leadership, visibility"), as Kafka does with KIP-392
# follower fetching, so a follower may answer Fetch with NONE.
SUCCESS: dict[int, tuple[Expect, Expect]] = {
    0: (Expect.of(NONE), Expect.error(NOT_LEADER_OR_FOLLOWER)),
    1: (Expect.of(NONE), Expect.of(NONE, NOT_LEADER_OR_FOLLOWER)),
    2: (Expect.of(NONE), Expect.error(NOT_LEADER_OR_FOLLOWER)),
    3: (Expect.of(NONE), Expect.of(NONE)),
    8: (Expect.of(NONE), Expect.error(NOT_COORDINATOR)),
    9: (Expect.of(NONE), Expect.error(NOT_COORDINATOR)),
    10: (Expect.of(NONE), Expect.of(NONE)),
    18: (Expect.of(NONE), Expect.of(NONE)),
    19: (Expect.of(NONE), Expect.error(NOT_CONTROLLER)),
    22: (Expect.of(NONE), Expect.of(NONE)),
}


def error_codes(value: Any) -> set[int]:
    """Every error code in a decoded answer, at any depth."""
    out: set[int] = set()
    if isinstance(value, ErrorCode):
        out.add(int(value.value))
    elif isinstance(value, tuple):
        for v in value:
            out |= error_codes(v)
    elif dataclasses.is_dataclass(value):
        for f in dataclasses.fields(value):
            out |= error_codes(getattr(value, f.name))
    return out


def describe(api_key: int, version: int) -> str:
    return f"{API_NAMES.get(api_key, f'api{api_key}')} v{version}"


@dataclass(repr=False)
class Checker:
    harness: Harness
    failures: list[str] = field(default_factory=list)
    exchanges: int = 0
    _conns: dict[int, Conn] = field(default_factory=dict)
    _corr: int = 100

    def assert_clean(self, check_leader: bool = True) -> None:
        """Fail with every finding of this test, one per line (check_leader:
        first ask the cluster whether its leader moved, which would void the
        role-based expectations)."""
        print(f"{self.exchanges} exchanges, {len(self.failures)} failures")
        if self.failures and check_leader:
            was = self.harness.leader
            now = asyncio.run(self.harness.cluster.wait_ready(60))
            if now != was:  # the role-based expectations no longer hold
                self.failures.insert(0, f"NOTE: the leader changed from {was} to {now}")
        assert not self.failures, f"{len(self.failures)} conformance failures:\n" + "\n".join(
            self.failures
        )

    def conn(self, node: int) -> Conn:
        c = self._conns.get(node)
        if c is None:
            c = self._conns[node] = Conn(self.harness.port(node))
        return c

    def drop(self, node: int) -> None:
        c = self._conns.pop(node, None)
        if c is not None:
            c.close()

    def close(self) -> None:
        for node in list(self._conns):
            self.drop(node)

    def next_corr(self) -> int:
        self._corr += 1
        return self._corr

    def fail(self, node: int, what: str, msg: str) -> None:
        role = "leader" if node == self.harness.leader else "follower"
        self.failures.append(f"{what} [{role} {node}]: {msg}")

    def node_alive(self, node: int, what: str) -> bool:
        """The node answers ApiVersions on a new connection (a failure otherwise)."""
        try:
            c = Conn(self.harness.port(node))
            try:
                probe(c, PROBE_CORR)
            finally:
                c.close()
            return True
        except (OSError, WireError, AssertionError) as e:
            exits = self.harness.cluster.exited()
            self.fail(node, what, f"node does not answer ApiVersions ({e!r}); exited: {exits}")
            self.harness.restart_dead()
            return False

    def exchange(
        self,
        node: int,
        api_key: int,
        version: int,
        payload: bytes,
        corr: int,
        what: str,
        expect: Expect | None = None,
        closes: bool = False,
    ) -> Any:
        """Send one frame (`payload` = the size-prefixed request) and check the answer.

        closes: Kafka closes the connection here (an oversize frame, an unsupported
        version): the check is then that it does, and that the node still answers."""
        self.exchanges += 1
        before = log_sizes(self.harness.cluster)
        try:
            return self._exchange(node, api_key, version, payload, corr, what, expect, closes)
        finally:
            for i, text in new_problems(self.harness.cluster, before).items():
                lines = text.strip().splitlines()
                hits = [ln for ln in lines if not ln.startswith(" ") and "Error" in ln]
                tail = (hits or lines)[-1][:300]
                self.fail(node, what, f"node {i} logged an internal error/traceback: {tail}")

    def _exchange(
        self,
        node: int,
        api_key: int,
        version: int,
        payload: bytes,
        corr: int,
        what: str,
        expect: Expect | None,
        closes: bool,
    ) -> Any:
        c = self.conn(node)
        try:
            c.send(payload)
            if closes:
                if not c.is_closed():
                    self.fail(node, what, "connection left open where Kafka closes it")
                self.drop(node)
                self.node_alive(node, what)
                return None
            answer = c.recv_frame()
        except (Closed, OSError, TimeoutError, WireError) as e:
            self.drop(node)
            if closes and isinstance(e, (Closed, BrokenPipeError, ConnectionResetError)):
                # The node closed while the frame was still being written (it refuses an
                # oversize frame on its length alone): that is the closure expected here.
                self.node_alive(node, what)
                return None
            if self.node_alive(node, what):
                self.fail(node, what, f"no answer: {e!r} (connection closed)")
            return None
        got_corr = struct.unpack_from(">i", answer)[0] if len(answer) >= 4 else None
        if got_corr != corr:
            self.fail(node, what, f"correlation id {got_corr}, sent {corr}")
        body = None
        try:
            _hdr, body = decode_response(api_key, version, answer)
        except Exception as e:  # any decode failure is a finding
            self.fail(node, what, f"answer does not decode strictly: {e!r}")
        if body is not None and expect is not None:
            codes = error_codes(body)
            extra = codes - expect.allowed
            if extra:
                self.fail(
                    node,
                    what,
                    f"error codes {sorted(codes)}, expected only {sorted(expect.allowed)}",
                )
            elif expect.required is not None and expect.required not in codes:
                self.fail(node, what, f"error codes {sorted(codes)}, expected {expect.required}")
        try:
            probe(c, PROBE_CORR + corr % 0xFFFF)
        except (Closed, OSError, TimeoutError, WireError, AssertionError) as e:
            self.drop(node)
            self.fail(node, what, f"connection unusable after the answer: {e!r}")
            self.node_alive(node, what)
        return body
