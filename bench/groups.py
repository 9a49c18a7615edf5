"""Consumer-group benchmark (issue 13): join time, group consume throughput, failover resume.

A 3-node cluster of `raftsink serve` processes (SinkProcessCluster, 127.0.0.1) and
confluent-kafka (librdkafka) consumers, each in its own process (`--member` mode of this file),
so a group of three can use both cores the way three real consumers would.

- join_s: 3 members subscribe at the same moment (each waits, warmed up, for a "go" line);
  from the earliest subscribe() call (FindCoordinator + the first JoinGroup follow at once) to
  the last member's assignment callback (SyncGroup answered: the group is Stable for all).
  With the server's default initial rebalance delay of 3 s (as Kafka's
  group.initial.rebalance.delay.ms). Target <= 3.5 s.
- group_consume_ratio: --records records of 100 B in 6 partitions, read in full by one
  consumer that assign()s all 6 partitions (no group), then by the 3-member group (from its
  first record to the last), then by the single consumer again; the ratio is the group's
  records/s over the mean of the two single runs (before and after: the machine drifts).
  Target >= 0.9.
- failover_resume_s: the 3-member group consumes a stream (an idempotent producer in this
  process, --stream-rate records/s, each value the time it was handed to the producer); the
  Raft leader is killed -9; the figure is the time from the kill to the first record handed
  to the producer after the kill reaching a member: election, produce retry, coordinator and
  fetch all working again. Target <= 2 s.

The last line is one JSON object with every figure (join_s, group_consume_ratio,
failover_resume_s, ...), the machine and the cluster's CPU seconds per phase.

    python bench/groups.py [--records 1000000] [--stream-rate 2000] [--quick]
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import signal
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from common import CpuMeter, machine, print_targets

PARTITIONS = 6
VALUE = b"x" * 100
JOIN_TARGET_S = 3.5
RATIO_TARGET = 0.9
RESUME_TARGET_S = 2.0


# ---------------------------------------------------------------------- member process


def member(args: argparse.Namespace) -> None:
    """One consumer; JSON lines on stdout: ready, subscribed{t}, assigned{t, parts},
    n{n, t, sent} per consume() batch (sent: the newest producer time in the batch, with
    --timed). Starts on a 'go' line on stdin; ends on SIGTERM or stdin closing."""
    from confluent_kafka import Consumer, TopicPartition

    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())

    def out(ev: str, **kw: object) -> None:
        sys.stdout.write(json.dumps({"ev": ev, **kw}) + "\n")
        sys.stdout.flush()

    c = Consumer(
        {
            "bootstrap.servers": args.brokers,
            "group.id": args.group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": True,
            "auto.commit.interval.ms": 1000,
            "fetch.wait.max.ms": 100,
            "session.timeout.ms": 10000,
            "heartbeat.interval.ms": 1000,
            "topic.metadata.refresh.interval.ms": 1000,
        }
    )
    out("ready")
    if sys.stdin.readline().strip() != "go":
        return
    t_sub = time.time()
    if args.assign:
        c.assign([TopicPartition(args.topic, p, 0) for p in range(PARTITIONS)])
    else:
        c.subscribe(
            [args.topic],
            on_assign=lambda _c, parts: out(
                "assigned", t=time.time(), parts=[tp.partition for tp in parts]
            ),
        )
    out("subscribed", t=t_sub)
    while not stop.is_set():
        msgs = c.consume(num_messages=1000, timeout=0.1)
        good = [m for m in msgs if m.error() is None]
        if not good:
            continue
        sent = max(float(m.value()) for m in good) if args.timed else 0.0
        out("n", n=len(good), t=time.time(), sent=sent)
    c.close()


# ---------------------------------------------------------------------- parent side


class Members:
    """Member processes started warm, released together, their lines collected."""

    def __init__(self, brokers: str, topic: str, group: str, n: int, **flags: bool) -> None:
        cmd = [sys.executable, os.path.abspath(__file__), "--member", "--brokers", brokers]
        cmd += ["--topic", topic, "--group", group]
        cmd += [f"--{k}" for k, v in flags.items() if v]
        self.procs = [
            subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
            for _ in range(n)
        ]
        self.lines: queue.Queue = queue.Queue()
        self.readers = [
            threading.Thread(target=self._read, args=(i, p), daemon=True)
            for i, p in enumerate(self.procs)
        ]
        for r in self.readers:
            r.start()
        self.events: list[tuple[int, dict]] = []
        self.total = 0
        self.wait(lambda: sum(1 for _, e in self.events if e["ev"] == "ready") == n, 60, "ready")

    def _read(self, i: int, p: subprocess.Popen) -> None:
        for line in p.stdout:
            self.lines.put((i, json.loads(line)))

    def pump(self, timeout: float = 0.05) -> None:
        try:
            i, e = self.lines.get(timeout=timeout)
        except queue.Empty:
            return
        self.events.append((i, e))
        if e["ev"] == "n":
            self.total += e["n"]
        while True:
            try:
                i, e = self.lines.get_nowait()
            except queue.Empty:
                return
            self.events.append((i, e))
            if e["ev"] == "n":
                self.total += e["n"]

    def wait(self, cond, timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while not cond():
            if time.monotonic() > deadline:
                raise TimeoutError(f"bench/groups: timed out waiting for {what}")
            if any(p.poll() not in (None, 0) for p in self.procs):
                raise RuntimeError(f"bench/groups: a member exited while waiting for {what}")
            self.pump()

    def go(self) -> None:
        for p in self.procs:
            p.stdin.write("go\n")
            p.stdin.flush()

    def of(self, ev: str) -> list[dict]:
        return [e for _, e in self.events if e["ev"] == ev]

    def close(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in self.procs:
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


def produce(brokers: str, topic: str, n: int) -> float:
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": brokers, "linger.ms": 20, "batch.num.messages": 10000})
    t0 = time.perf_counter()
    for i in range(n):
        while True:
            try:
                p.produce(topic, VALUE, partition=i % PARTITIONS)
                break
            except BufferError:
                p.poll(0.05)
    assert p.flush(300) == 0, "records left unsent"
    return n / (time.perf_counter() - t0)


def create_topic(brokers: str, topic: str) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": brokers})  # alive until the result is in
    fs = admin.create_topics([NewTopic(topic, PARTITIONS, replication_factor=3)])
    fs[topic].result(60)


def read_all(brokers: str, topic: str, group: str, n: int, members: int, pids) -> dict:
    """n records read by `members` consumers (1: assign(), no group); records/s from the first
    record to the last, and for a group the join time."""
    ms = Members(brokers, topic, group, members, assign=members == 1)
    try:
        with CpuMeter(pids) as cpu:
            ms.go()
            ms.wait(lambda: ms.total >= n, 600, f"{n} records")
        first = min(e["t"] for e in ms.of("n"))
        last = max(e["t"] for e in ms.of("n"))
        fig = {"records_per_s": round(n / max(last - first, 1e-6)), "cluster_cpu_s": cpu.cpu_s}
        if members > 1:
            subs = [e["t"] for e in ms.of("subscribed")]
            assigned = {}
            for i, e in ms.events:
                if e["ev"] == "assigned" and e["parts"] and i not in assigned:
                    assigned[i] = e["t"]
            fig["join_s"] = round(max(assigned.values()) - min(subs), 3)
            fig["members_assigned"] = len(assigned)
        return fig
    finally:
        ms.close()


def failover(cluster, brokers: str, rate: int) -> dict:
    import asyncio

    from confluent_kafka import Producer

    topic, group = "bench-failover", "bench-failover-g"
    create_topic(brokers, topic)
    ms = Members(brokers, topic, group, 3, timed=True)
    stop = threading.Event()
    sent = [0]

    def stream() -> None:
        p = Producer({"bootstrap.servers": brokers, "enable.idempotence": True, "linger.ms": 5})
        i = 0
        t0 = time.monotonic()
        while not stop.is_set():
            p.produce(topic, b"%.6f" % time.time(), partition=i % PARTITIONS)
            i += 1
            sent[0] = i
            p.poll(0)
            ahead = i / rate - (time.monotonic() - t0)
            if ahead > 0:
                stop.wait(ahead)
        p.flush(120)

    th = threading.Thread(target=stream, daemon=True)
    try:
        ms.go()
        ms.wait(lambda: len({i for i, e in ms.events if e["ev"] == "assigned"}) == 3, 60, "join")
        th.start()
        ms.wait(lambda: ms.total >= rate * 2, 60, "the stream flowing")
        leader = asyncio.run(cluster.wait_ready(timeout=30))
        kill_t = time.time()
        cluster.kill(leader)

        def resumed() -> bool:
            return any(e["ev"] == "n" and e["sent"] >= kill_t for _, e in ms.events)

        ms.wait(resumed, 120, "records produced after the kill")
        first = min(e["t"] for _, e in ms.events if e["ev"] == "n" and e["sent"] >= kill_t)
        new_leader = asyncio.run(cluster.wait_ready(timeout=60, exclude=leader))
        rebalanced = sum(1 for e in ms.of("assigned") if e["t"] > kill_t)
        return {
            "failover_resume_s": round(first - kill_t, 3),
            "killed_leader": leader,
            "new_leader": new_leader,
            "assignments_after_kill": rebalanced,
        }
    finally:
        stop.set()
        if th.is_alive():
            th.join(timeout=150)
        ms.close()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--member", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--assign", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--timed", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--brokers", help=argparse.SUPPRESS)
    ap.add_argument("--topic", help=argparse.SUPPRESS)
    ap.add_argument("--group", help=argparse.SUPPRESS)
    ap.add_argument("--records", type=int, default=1_000_000, help="records of 100 B to read")
    ap.add_argument("--stream-rate", type=int, default=2000, help="records/s in the failover")
    ap.add_argument("--quick", action="store_true", help="300,000 records")
    args = ap.parse_args()
    if args.member:
        member(args)
        return 0
    from sink.process_cluster import SinkProcessCluster

    n = 300_000 if args.quick else args.records
    print(f"bench/groups: {machine()}")
    fig: dict = {"machine": machine(), "records": n}
    with tempfile.TemporaryDirectory(prefix="bench-groups-") as tmp:
        cluster = SinkProcessCluster(tmp, n=3)
        try:
            import asyncio

            cluster.start()
            asyncio.run(cluster.wait_ready(timeout=60))
            pids = [node.proc.pid for node in cluster.nodes.values()]
            brokers = cluster.bootstrap_servers
            create_topic(brokers, "bench-groups")
            rate = produce(brokers, "bench-groups", n)
            print(f"produced {n} records of 100 B at {rate:,.0f}/s")
            asyncio.run(cluster.wait_settled(timeout=300))
            single1 = read_all(brokers, "bench-groups", "single-1", n, 1, pids)
            print(f"single assigned consumer: {single1['records_per_s']:,} records/s")
            group = read_all(brokers, "bench-groups", "bench-group", n, 3, pids)
            print(
                f"3-member group: {group['records_per_s']:,} records/s; "
                f"join (first JoinGroup -> all assigned): {group['join_s']:.3f} s"
            )
            single2 = read_all(brokers, "bench-groups", "single-2", n, 1, pids)
            print(f"single assigned consumer again: {single2['records_per_s']:,} records/s")
            single = (single1["records_per_s"] + single2["records_per_s"]) / 2
            fig.update(
                join_s=group["join_s"],
                group_records_per_s=group["records_per_s"],
                single_records_per_s=round(single),
                group_consume_ratio=round(group["records_per_s"] / single, 3),
                cluster_cpu_s={
                    "single_1": round(single1["cluster_cpu_s"], 2),
                    "group": round(group["cluster_cpu_s"], 2),
                    "single_2": round(single2["cluster_cpu_s"], 2),
                },
            )
            fo = failover(cluster, brokers, args.stream_rate)
            print(
                f"leader {fo['killed_leader']} killed -9: the group consumed again after "
                f"{fo['failover_resume_s']:.3f} s (new leader {fo['new_leader']}; "
                f"{fo['assignments_after_kill']} assignment(s) after the kill)"
            )
            fig.update(fo)
        finally:
            cluster.stop()
    print_targets(
        {
            f"join <= {JOIN_TARGET_S} s": fig["join_s"] <= JOIN_TARGET_S,
            f"group/single >= {RATIO_TARGET}": fig["group_consume_ratio"] >= RATIO_TARGET,
            f"failover resume <= {RESUME_TARGET_S} s": fig["failover_resume_s"] <= RESUME_TARGET_S,
        }
    )
    print(json.dumps(fig))
    return 0


if __name__ == "__main__":
    sys.exit(main())
