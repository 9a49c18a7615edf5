"""One request/answer exchange checked the way the conformance harness checks
every answer, and the table of error codes Kafka gives.

`Checker.exchange` sends one request frame and checks: an answer comes (or the
connection closes, when Kafka itself would close); it carries the request's
correlation id; it decodes strictly with the version's response schema with
nothing left over; its error codes are the expected ones; an ApiVersions on the
same connection still answers. Every failed check becomes one line in
`Checker.failures`, so that one test run lists every defect.

Where a request goes is what a real client would do (`Routes`): a request naming a
partition (Produce, Fetch, ListOffsets, ...) goes to that partition's leader as
Metadata names it, and once more to the leader Metadata names after an answer with
NOT_LEADER_OR_FOLLOWER; every other role-dependent request (the group APIs,
CreateTopics) goes to the controller, the Raft leader of group 0. With one Raft group
the two are the same node; with partition groups (`cluster.partition_groups`) they
differ, and a node that does not lead the partition rightly answers
NOT_LEADER_OR_FOLLOWER.
"""

from __future__ import annotations

import asyncio
import dataclasses
import struct
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kio.schema.errors import ErrorCode

from sink.kafka.protocol import request_schema
from tests.helpers.kafka_harness import (
    PROBE_CORR,
    Closed,
    Conn,
    Harness,
    advertised,
    call,
    log_sizes,
    new_problems,
    probe,
)
from tests.helpers.kafka_schema import WireError, decode_response
from tests.helpers.kafka_values import Context, valid_request
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
# group APIs NOT_COORDINATOR (the coordinator is the leader); CreateTopics is relayed
# to the controller (as a KRaft broker forwards it), so any node creates; Metadata, FindCoordinator, ApiVersions and InitProducerId
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
    19: (Expect.of(NONE), Expect.of(NONE)),
    22: (Expect.of(NONE), Expect.of(NONE)),
}


# APIs answered by the leader of the partition they name (Kafka clients send them there,
# found by Metadata); the role-dependent rest is the controller's (group 0's leader).
PARTITION_APIS = frozenset({0, 1, 2, 21, 23, 61})


def metadata_partition(port: int, topic: str, partition: int) -> tuple[int, tuple[int, ...]]:
    """(leader, replicas) of the partition as the node at `port` answers Metadata (its
    highest version); (-1, ()) when the answer does not list it."""
    hi = advertised(port)[3][1]
    req = valid_request(request_schema(3, hi), Context(topic=topic))
    c = Conn(port)
    try:
        _, resp = call(c, req, 5)
    finally:
        c.close()
    for t in resp.topics:
        if t.name == topic and int(t.error_code) == 0:
            for p in t.partitions:
                if p.partition_index == partition:
                    return int(p.leader_id), tuple(int(r) for r in p.replica_nodes)
    return -1, ()


async def raft_partition_leader(harness: Harness, topic: str, partition: int) -> int:
    """The partition's leader from the nodes' own Raft state, independent of Metadata."""
    return (await _raft_partition_leader(harness, topic, partition))[0]


async def _raft_partition_leader(harness: Harness, topic: str, partition: int) -> tuple[int, bool]:
    """(leader, partition groups on): with partition groups, the replica whose read-API
    Status says it leads the partition's data group at the highest term (-1: none
    does); with one group (no `data_groups` in Status), the Raft leader."""
    best, term, grouped = -1, -1, False
    for node in harness.cluster.alive():
        st = await harness.cluster.status(node)
        if st is None:
            continue
        rows = (st.get("data_groups") or {}).get("groups")
        if rows is None:
            continue
        grouped = True
        for row in rows:
            mine = row["topic"] == topic and row["partition"] == partition
            if mine and row["role"] == "leader" and row["term"] > term:
                best, term = node, row["term"]
    return (best, True) if grouped else (harness.leader, False)


@dataclass
class Routes:
    """Where each request goes, as a Kafka client decides it: partition requests to the
    leader Metadata names for (topic, partition), the rest to the controller."""

    harness: Harness
    topic: str
    partition: int = 0
    leader: int = -1
    """The partition's leader as Metadata named it at the last refresh."""
    refreshes: int = 0

    def refresh(self) -> int:
        """Read Metadata again (the controller first, then the other nodes) -> the
        partition's leader (the previous one when no node names one)."""
        self.refreshes += 1
        for node in self.harness.nodes:
            try:
                lead, _ = metadata_partition(self.harness.port(node), self.topic, self.partition)
            except (OSError, WireError, AssertionError):
                continue
            if lead >= 0:
                self.leader = lead
                return lead
        return self.leader

    def node_for(self, api_key: int) -> int:
        return self.leader if api_key in PARTITION_APIS else self.harness.leader

    def expect(self, api_key: int, node: int) -> Expect | None:
        """SUCCESS's answer for `node`: the leader's where it is the one this API needs."""
        entry = SUCCESS.get(api_key)
        if entry is None:
            return None
        return entry[0] if node == self.node_for(api_key) else entry[1]

    def settle(self, timeout: float = 60.0) -> int:
        """Wait until Metadata's leader of the partition is the one the Raft groups report
        and, with partition groups, its preferred replica (placement's first): where the
        creation hand-off and the leader balancer leave it, so it stays for the tests.
        Raises AssertionError after timeout."""
        deadline = time.monotonic() + timeout
        while True:
            lead = self.refresh()
            replicas: tuple[int, ...] = ()
            if lead >= 0:
                port = self.harness.port(lead)
                _, replicas = metadata_partition(port, self.topic, self.partition)
            truth, grouped = asyncio.run(
                _raft_partition_leader(self.harness, self.topic, self.partition)
            )
            if lead >= 0 and lead == truth and (not grouped or replicas[:1] == (lead,)):
                return lead
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"{self.topic}/{self.partition}: Metadata leader {lead}, Raft leader "
                    f"{truth}, replicas {replicas} did not settle within {timeout} s"
                )
            time.sleep(0.2)  # polling a condition under a deadline


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
    routes: Routes | None = None
    failures: list[str] = field(default_factory=list)
    exchanges: int = 0
    retries: int = 0  # partition requests sent again after NOT_LEADER_OR_FOLLOWER
    _conns: dict[int, Conn] = field(default_factory=dict)
    _corr: int = 100
    _api: int = -1  # the API of the exchange under way (labels a failure's node)

    def assert_clean(self, check_leader: bool = True) -> None:
        """Fail with every finding of this test, one per line (check_leader:
        first ask the cluster whether its leader moved, which would void the
        role-based expectations)."""
        print(f"{self.exchanges} exchanges, {self.retries} retries, {len(self.failures)} failures")
        if self.failures and check_leader:
            was = self.harness.leader
            now = asyncio.run(self.harness.cluster.wait_ready(60))
            if now != was:  # the role-based expectations no longer hold
                self.failures.insert(0, f"NOTE: the leader changed from {was} to {now}")
            r = self.routes
            if r is not None:
                truth = asyncio.run(raft_partition_leader(self.harness, r.topic, r.partition))
                if truth != r.leader:  # the partition requests' expectations neither
                    self.failures.insert(
                        0,
                        f"NOTE: {r.topic}/{r.partition}'s leader is {truth}, "
                        f"Metadata said {r.leader} when last asked",
                    )
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
        if self.routes is not None and self._api in PARTITION_APIS:
            role = "partition leader" if node == self.routes.leader else "not partition leader"
        else:
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
        self._api = api_key
        before = log_sizes(self.harness.cluster)
        try:
            return self._exchange(node, api_key, version, payload, corr, what, expect, closes)
        finally:
            for i, text in new_problems(self.harness.cluster, before).items():
                lines = text.strip().splitlines()
                hits = [ln for ln in lines if not ln.startswith(" ") and "Error" in ln]
                tail = (hits or lines)[-1][:300]
                self.fail(node, what, f"node {i} logged an internal error/traceback: {tail}")

    def exchange_routed(
        self,
        api_key: int,
        version: int,
        encode: Callable[[int], bytes],
        what: str,
        expect: Callable[[int], Expect | None],
    ) -> Any:
        """One request where a Kafka client sends it (Routes.node_for), checked as
        exchange() checks it; encode(correlation id) -> the frame, expect(node) -> what
        that node must answer. A partition request answered NOT_LEADER_OR_FOLLOWER is
        sent once more after Metadata is read again, if Metadata now names another
        leader: only the second answer counts then (the leader moved; a client follows
        it). Without routes: the controller, as before."""
        node = self.routes.node_for(api_key) if self.routes is not None else self.harness.leader
        corr = self.next_corr()
        saved, self.failures = self.failures, []
        try:
            body = self.exchange(node, api_key, version, encode(corr), corr, what, expect(node))
            moved = (
                self.routes is not None
                and api_key in PARTITION_APIS
                and body is not None
                and NOT_LEADER_OR_FOLLOWER in error_codes(body)
                and self.routes.refresh() != node
            )
            if moved:
                assert self.routes is not None
                self.retries += 1
                self.failures = []
                node = self.routes.leader
                corr = self.next_corr()
                body = self.exchange(
                    node, api_key, version, encode(corr), corr, f"{what} (retried)", expect(node)
                )
            return body
        finally:
            saved.extend(self.failures)
            self.failures = saved

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
