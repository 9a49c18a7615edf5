"""The consumer-group client matrix (issue 13): real clients in a real group on a real cluster.

Every client of tests/helpers/group_members.CLIENTS (confluent-kafka eager and
cooperative-sticky, kafka-python, aiokafka, KafkaJS, kcat -G) runs as member processes of one
consumer group on a 6-partition topic of a 3-node cluster of `raftsink serve` processes.
Records are written by an idempotent confluent-kafka producer to explicit partitions, so the
test knows every (partition, offset) that exists. Members commit after each poll (kcat:
auto commit every 200 ms); the test reads the group's committed offsets from the coordinator
itself (OffsetFetch through a confluent-kafka consumer that never joins).

Scenarios, per client:
- exactly once + rebalance: 2 members read every record exactly once, each record by the
  member that owns its partition; a 3rd member joins, then the 1st leaves (LeaveGroup): after
  each change settles, new records are read exactly once by their partition's new owner; no
  record is ever read twice (membership changes only after everything read is committed);
- restart: a member is killed -9 and started again; the group evicts the dead member (session
  timeout), rebalances, and the members resume at the committed offsets: nothing of before is
  read again, everything after is read exactly once;
- static membership (not KafkaJS: it has none): a member with group.instance.id is killed -9
  and restarted with the same id within the session timeout: it gets its old partitions back
  and the other member sees no rebalance at all;
- failover: the Raft leader is killed -9 while the group consumes and commits a stream: every
  offset committed before the kill is at the new coordinator, no record is skipped, and a
  record is read twice only at or after its partition's last commit before the kill.

Deadlines are generous (a loaded 2-core machine); every wait is on a condition.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import threading
import time

import pytest

from sink.process_cluster import SinkProcessCluster
from tests.helpers.group_members import (
    CLIENTS,
    STATIC_CLIENTS,
    Member,
    owners,
    settled,
    start_member,
    wait_until,
)
from tests.helpers.kafka_wire import topic_ready_at

ck = pytest.importorskip("confluent_kafka")
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

PARTITIONS = 6
PER_PARTITION = 20  # records per partition per batch
SESSION_MS = 6000  # Kafka's group.min.session.timeout.ms: eviction of a killed member
STATIC_SESSION_MS = 45000  # long: the static member must come back before it expires
SETTLE_S = 90.0  # a join: initial delay 3 s + eviction 6 s + a loaded machine
READ_S = 90.0

_names = itertools.count()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c = SinkProcessCluster(str(tmp_path_factory.mktemp("groups")), n=3)
    try:
        c.start()
        asyncio.run(c.wait_ready(timeout=60))
        yield c
    finally:
        c.stop()


class Run:
    """One scenario's topic, group, producer and members; stops every member at the end."""

    def __init__(self, cluster: SinkProcessCluster, client: str, label: str) -> None:
        n = next(_names)
        self.cluster = cluster
        self.client = client
        self.brokers = cluster.bootstrap_servers
        self.topic = f"{label}-{client}-{n}"
        self.group = f"g-{self.topic}"
        self.members: list[Member] = []
        admin = AdminClient({"bootstrap.servers": self.brokers})
        fut = admin.create_topics([NewTopic(self.topic, PARTITIONS, replication_factor=3)])
        fut[self.topic].result(60)
        # kcat -G exits on UNKNOWN_TOPIC_OR_PARTITION from a node that has not applied the
        # creation yet: every member starts once every node knows the topic.
        ports = [int(p.kafka.rsplit(":", 1)[1]) for p in cluster.peers.values()]
        wait_until(
            lambda: all(topic_ready_at(port, self.topic, PARTITIONS) for port in ports),
            60.0,
            f"{self.topic} in every node's metadata",
        )
        self.producer = ck.Producer(
            {"bootstrap.servers": self.brokers, "enable.idempotence": True, "linger.ms": 5}
        )
        self.ends = {p: 0 for p in range(PARTITIONS)}  # next offset per partition
        self._lock = threading.Lock()

    # ------------------------------------------------------------------ members
    def start(
        self,
        name: str,
        instance_id: str = "",
        session_ms: int = SESSION_MS,
        env: dict[str, str] | None = None,
    ) -> Member:
        m = start_member(
            name,
            self.client,
            self.brokers,
            self.topic,
            self.group,
            instance_id=instance_id,
            session_ms=session_ms,
            env=env,
        )
        self.members.append(m)
        return m

    def live(self) -> list[Member]:
        return [m for m in self.members if m.running]

    def describe(self) -> str:
        return "\n  ".join(m.describe() for m in self.members)

    def wait_settled(self, members: list[Member]) -> dict[int, str]:
        wait_until(
            lambda: settled(members, PARTITIONS),
            SETTLE_S,
            lambda: f"the group to settle on {[m.name for m in members]}:\n  {self.describe()}",
        )
        return owners(members)

    def close(self) -> None:
        for m in self.members:
            if m.running:
                with contextlib.suppress(AssertionError):  # stop() killed it then
                    m.stop(timeout=30)

    # ------------------------------------------------------------------ records
    def produce(self, per_partition: int = PER_PARTITION) -> dict[int, range]:
        """per_partition records to every partition; returns the offsets they got."""
        got: dict[int, list[int]] = {p: [] for p in range(PARTITIONS)}
        errors: list = []

        def report(err, msg) -> None:
            if err is not None:
                errors.append(err)
            else:
                got[msg.partition()].append(msg.offset())

        for i in range(per_partition):
            for p in range(PARTITIONS):
                self.producer.produce(
                    self.topic, value=f"{p}-{i}".encode(), partition=p, on_delivery=report
                )
                self.producer.poll(0)
        assert self.producer.flush(60) == 0 and not errors, errors
        out = {}
        with self._lock:
            for p, offs in got.items():
                assert sorted(offs) == list(range(self.ends[p], self.ends[p] + per_partition))
                out[p] = range(self.ends[p], self.ends[p] + per_partition)
                self.ends[p] += per_partition
        return out

    def committed(self, timeout: float = 30.0) -> dict[int, int]:
        """The group's committed offsets, from the coordinator (OffsetFetch; never joins)."""
        c = ck.Consumer({"bootstrap.servers": self.brokers, "group.id": self.group})
        try:
            tps = c.committed(
                [ck.TopicPartition(self.topic, p) for p in range(PARTITIONS)], timeout=timeout
            )
        finally:
            c.close()
        return {tp.partition: tp.offset for tp in tps}

    def committed_or_empty(self) -> dict[int, int]:
        """Committed offsets, {} while the coordinator does not answer; partitions without a
        commit left out."""
        try:
            got = self.committed(timeout=5)
        except ck.KafkaException:
            return {}
        return {p: o for p, o in got.items() if o >= 0}

    def committed_retrying(self, timeout: float = 60.0) -> dict[int, int]:
        """Committed offsets from a coordinator that may still be loading (failover)."""
        deadline = time.monotonic() + timeout
        last: object = None
        while time.monotonic() < deadline:
            try:
                return self.committed(timeout=10)
            except ck.KafkaException as e:
                last = e
            time.sleep(0.2)
        raise AssertionError(f"no committed offsets within {timeout} s: {last}")

    def wait_committed(self, timeout: float = READ_S) -> None:
        """Until the group has committed everything produced so far."""
        last: dict = {}

        def done() -> bool:
            nonlocal last
            try:
                last = self.committed(timeout=10)
            except ck.KafkaException as e:
                last = {"error": str(e)}
                return False
            return last == self.ends

        wait_until(
            done,
            timeout,
            lambda: f"commits {last} == ends {self.ends}:\n  {self.describe()}",
            step=0.3,
        )

    def reads(self, members: list[Member] | None = None) -> dict[tuple[int, int], list[str]]:
        """(partition, offset) -> the members that read it, over the given members."""
        out: dict[tuple[int, int], list[str]] = {}
        for m in self.members if members is None else members:
            for p, o, _ in m.records():
                out.setdefault((p, o), []).append(m.name)
        return out

    def wait_read(self, batch: dict[int, range], timeout: float = READ_S) -> None:
        want = {(p, o) for p, r in batch.items() for o in r}
        wait_until(
            lambda: want <= self.reads().keys(),
            timeout,
            lambda: (
                f"{len(want - self.reads().keys())} of {len(want)} records unread:\n  "
                + self.describe()
            ),
        )

    def check_exactly_once(self, batch: dict[int, range], owner: dict[int, str]) -> None:
        """Every record of the batch read once, by its partition's owner."""
        reads = self.reads()
        for p, r in batch.items():
            for o in r:
                assert reads.get((p, o)) == [owner[p]], (
                    f"record {p}@{o} read by {reads.get((p, o))}, owner {owner[p]}"
                )


@pytest.fixture
def run_factory(cluster):
    runs: list[Run] = []

    def make(client: str, label: str) -> Run:
        r = Run(cluster, client, label)
        runs.append(r)
        return r

    yield make
    for r in runs:
        r.close()


def _no_duplicates(run: Run) -> None:
    dups = {k: v for k, v in run.reads().items() if len(v) > 1}
    assert not dups, f"read twice: {dict(itertools.islice(dups.items(), 10))}"


@pytest.mark.parametrize("client", CLIENTS)
def test_group_reads_exactly_once_through_join_and_leave(run_factory, client):
    run = run_factory(client, "eo")
    a, b = run.start("a"), run.start("b")
    owner = run.wait_settled([a, b])
    batch = run.produce()
    run.wait_read(batch)
    run.check_exactly_once(batch, owner)
    run.wait_committed()

    c = run.start("c")  # a member joins: 3 members share the 6 partitions
    owner = run.wait_settled([a, b, c])
    assert set(owner.values()) == {"a", "b", "c"}
    batch = run.produce()
    run.wait_read(batch)
    run.check_exactly_once(batch, owner)
    run.wait_committed()

    a.stop()  # a member leaves (LeaveGroup): b and c take its partitions
    owner = run.wait_settled([b, c])
    batch = run.produce()
    run.wait_read(batch)
    run.check_exactly_once(batch, owner)
    run.wait_committed()
    _no_duplicates(run)
    for m in run.members:
        assert not m.errors(), m.describe()


@pytest.mark.parametrize("client", CLIENTS)
def test_member_restart_resumes_at_committed_offsets(run_factory, client):
    run = run_factory(client, "rs")
    a, b = run.start("a"), run.start("b")
    run.wait_settled([a, b])
    first = run.produce()
    run.wait_read(first)
    run.wait_committed()

    a.kill()  # no LeaveGroup, no last commit: the group must evict it (session timeout)
    restart_t = time.monotonic()
    a2 = run.start("a2")
    owner = run.wait_settled([a2, b])
    second = run.produce()
    run.wait_read(second)
    run.check_exactly_once(second, owner)
    # Nothing before the commits is read again: the members resumed at the committed offsets.
    again = [
        (p, o, m.name)
        for m in (a2, b)
        for p, o, t in m.records()
        if t > restart_t and o < first[p].stop
    ]
    assert not again, f"re-read after the restart: {again[:10]}"
    run.wait_committed()


@pytest.mark.parametrize("client", STATIC_CLIENTS)
def test_static_member_restart_without_rebalance(run_factory, client):
    run = run_factory(client, "st")
    a = run.start("a", instance_id="static-a", session_ms=STATIC_SESSION_MS)
    b = run.start("b", instance_id="static-b", session_ms=STATIC_SESSION_MS)
    owner = run.wait_settled([a, b])
    first = run.produce()
    run.wait_read(first)
    run.check_exactly_once(first, owner)
    run.wait_committed()

    # Restart each member in turn (one of them leads the group: a restarted static leader
    # must not cause a rebalance either; Kafka >= 2.4 answers it with the old leader id).
    members = {"a": a, "b": b}
    for name, other in (("a", "b"), ("b", "a")):
        old = members[name]
        parts, other_history = old.assignment, members[other].assignments()
        old.kill()  # static: the coordinator keeps its place for the session timeout
        new = run.start(f"{name}2", instance_id=f"static-{name}", session_ms=STATIC_SESSION_MS)
        wait_until(
            lambda new=new: new.assignment,
            SETTLE_S,
            lambda new=new: f"{new.name}'s assignment:\n  {run.describe()}",
        )
        assert new.assignment == parts, (new.name, new.assignment, parts)
        members[name] = new
        owner = {**owner, **{p: new.name for p in parts}}
        batch = run.produce()
        run.wait_read(batch)
        run.check_exactly_once(batch, owner)
        # No rebalance: the other member never saw its assignment change.
        assert members[other].assignments() == other_history, (
            f"{other} saw a rebalance when {name} restarted: "
            f"{members[other].assignments()} (before: {other_history})"
        )
        run.wait_committed()


class StreamProducer:
    """Produces to every partition in a loop (idempotent: no duplicate through a failover)
    until stopped; remembers the end offset per partition from the delivery reports."""

    def __init__(self, run: Run, rate_per_s: int = 300) -> None:
        self.run = run
        self.rate = rate_per_s
        self.stop_ev = threading.Event()
        self.errors: list = []
        self.unflushed = -1
        self.thread = threading.Thread(target=self._loop, daemon=True)
        self.thread.start()

    def _loop(self) -> None:
        p = ck.Producer(
            {
                "bootstrap.servers": self.run.brokers,
                "enable.idempotence": True,
                "linger.ms": 5,
                "message.timeout.ms": 120000,
            }
        )
        ends = self.run.ends

        def report(err, msg) -> None:
            if err is not None:
                self.errors.append(err)
            else:
                off = msg.offset()
                if off is None or off < 0:
                    return  # librdkafka's implicit ack: a later record of it has an offset
                with self.run._lock:
                    ends[msg.partition()] = max(ends[msg.partition()], off + 1)

        i = 0
        while not self.stop_ev.is_set():
            for part in range(PARTITIONS):
                p.produce(
                    self.run.topic, value=f"s{i}".encode(), partition=part, on_delivery=report
                )
            i += 1
            p.poll(0)
            self.stop_ev.wait(PARTITIONS / self.rate)
        self.unflushed = p.flush(120)

    def stop(self) -> None:
        self.stop_ev.set()
        self.thread.join(timeout=150)
        assert not self.thread.is_alive(), "the producer did not flush"
        assert not self.errors, self.errors[:5]
        assert self.unflushed == 0, f"{self.unflushed} records not delivered"


# KafkaJS 2.2.4 and a group coordinator that stays dead (docs/kafka.md,
# "KafkaJS and a dead coordinator"): a generation's heartbeats and commits go to the
# coordinator's node id found at JoinGroup, and KafkaJS looks the coordinator up again only
# on an error answered BY that node (NOT_COORDINATOR, REBALANCE_IN_PROGRESS,
# ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID), a stale-metadata Fetch error, or when its
# consumer restarts after its retrier gave up. A node killed -9 answers nothing, so no
# answer of the live nodes (Metadata, FindCoordinator, Fetch) can move it: against Kafka
# it is the same. Its way back is the restart, so the failover members keep KafkaJS's
# default retry count (5); with 50 (the other scenarios' members, where a restart would
# re-read uncommitted records) each commitOffsets alone retries for ~47 s and the
# consumer's retrier would give up only after ~40 minutes.
FAILOVER_ENV = {"kafkajs": {"KAFKAJS_MEMBER_RETRIES": "5"}}


@pytest.mark.parametrize("client", CLIENTS)
def test_leader_kill_while_group_consumes_and_commits(run_factory, cluster, client):
    run = run_factory(client, "fo")
    env = FAILOVER_ENV.get(client)
    a, b = run.start("a", env=env), run.start("b", env=env)
    run.wait_settled([a, b])
    stream = StreamProducer(run)
    killed = 0
    try:
        # Consuming and committing for a while before the kill.
        wait_until(
            lambda: (
                len(run.committed_or_empty()) == PARTITIONS
                and min(run.committed_or_empty().values()) >= 20
            ),
            READ_S,
            lambda: f"commits on every partition:\n  {run.describe()}",
            step=0.3,
        )
        before = _commits_before(run)
        leader = asyncio.run(cluster.wait_ready(timeout=60))
        cluster.kill(leader)
        killed = leader
        kill_t = time.monotonic()
        new_leader = asyncio.run(cluster.wait_ready(timeout=60, exclude=leader))
        print(
            f"killed leader {leader}; new leader {new_leader} after {time.monotonic() - kill_t:.2f} s"
        )
        # Every offset committed before the kill is at the new coordinator.
        after = run.committed_retrying()
        for p, o in before.items():
            assert after[p] >= o, f"partition {p}: committed {o} before the kill, {after[p]} after"
        # The group goes on consuming and committing the stream.
        mark = dict(run.ends)
        wait_until(
            lambda: (
                all(v >= mark[p] for p, v in run.committed_or_empty().items())
                and len(run.committed_or_empty()) == PARTITIONS
            ),
            READ_S,
            lambda: f"commits past {mark} after the failover:\n  {run.describe()}",
            step=0.3,
        )
        print(f"committing past the kill's ends {time.monotonic() - kill_t:.1f} s after the kill")
        print(f"members:\n  {run.describe()}")
    finally:
        try:
            stream.stop()
        finally:
            if killed:  # back for the next test (a follower now), whatever failed here
                cluster.start(killed)
    everything = {p: range(0, run.ends[p]) for p in range(PARTITIONS)}
    run.wait_read(everything)  # no record skipped
    reads = run.reads()
    for (p, o), who in reads.items():
        if len(who) > 1:
            assert o >= before[p], (
                f"{p}@{o} read by {who}, below the commit {before[p]} before the kill"
            )
    run.wait_committed()
    asyncio.run(cluster.wait_ready(timeout=60))


def _commits_before(run: Run) -> dict[int, int]:
    """The highest offset per partition a member reported committed (acknowledged) so far;
    kcat reports none, so for it the coordinator's own answer stands in."""
    out: dict[int, int] = {}
    for m in run.members:
        for p, o, _ in m.commits():
            out[p] = max(out.get(p, 0), o)
    if not out:
        out = run.committed_or_empty()
    return {p: out.get(p, 0) for p in range(PARTITIONS)}
