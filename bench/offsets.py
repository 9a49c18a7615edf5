"""Committed offsets through the Raft log: OffsetCommit latency and rate, and how long a
committed offset is unreadable across a leader kill.

3 `raftsink serve` processes on 127.0.0.1 (real gRPC, real fsync). Phase 1: W
confluent-kafka consumers, each its own group, commit 3 partitions synchronously in a
loop for D seconds (one OffsetCommit in flight per client, as a consumer's commit()):
commits/s and latency percentiles. Phase 2: kill -9 the leader, and time until a fresh
consumer reads the last committed offsets back from the new coordinator.

    python -m bench.offsets [--workers 4] [--seconds 10] [--rounds 1]

Each round runs twice, A/B in the same run: commits batched into shared log entries
(offsets.commit_batch_bytes 1 MiB, the default) and one entry per request (0). Prints
the machine, then one JSON line per run: commits_per_s, commit_p50_ms, commit_p99_ms,
failover_committed_readable_s.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
import threading
import time

from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from bench.common import machine, percentile
from sink.process_cluster import SinkProcessCluster

TOPIC = "bench-offsets"


def _consumer(bootstrap: str, group: str) -> Consumer:
    return Consumer(
        {"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False}
    )


def _committer(bootstrap: str, group: str, until: float, lat: list[float]) -> None:
    c = _consumer(bootstrap, group)
    n = 0
    try:
        while time.monotonic() < until:
            n += 1
            tps = [TopicPartition(TOPIC, p, n) for p in range(3)]
            t0 = time.perf_counter()
            c.commit(offsets=tps, asynchronous=False)
            lat.append(time.perf_counter() - t0)
    finally:
        c.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--rounds", type=int, default=1, help="A/B rounds (batched, unbatched)")
    args = ap.parse_args()
    print(machine(), flush=True)
    for _ in range(args.rounds):
        for batch_bytes in (1 << 20, 0):
            run(args, batch_bytes)


def run(args: argparse.Namespace, batch_bytes: int) -> None:
    with tempfile.TemporaryDirectory(prefix="offsets-bench-") as base:
        extra = ["--offsets-commit-batch-bytes", str(batch_bytes)]
        cluster = SinkProcessCluster(base, default_partitions=3, extra_args=extra)
        cluster.start()
        try:
            leader = asyncio.run(cluster.wait_ready())
            boot = cluster.bootstrap_servers
            admin = AdminClient({"bootstrap.servers": boot})
            admin.create_topics([NewTopic(TOPIC, 3, 3)])[TOPIC].result(60)
            lats: list[list[float]] = [[] for _ in range(args.workers)]
            until = time.monotonic() + args.seconds
            threads = [
                threading.Thread(target=_committer, args=(boot, f"bench-g{i}", until, lats[i]))
                for i in range(args.workers)
            ]
            start = time.monotonic()
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            wall = time.monotonic() - start
            all_lat = [x for xs in lats for x in xs]
            # Phase 2: the last commit of bench-g0, read back across a leader kill.
            want = len(lats[0])
            cluster.kill(leader)
            killed = time.monotonic()
            readable_s = -1.0
            while time.monotonic() - killed < 60:
                c = _consumer(boot, "bench-g0")
                try:
                    got = c.committed([TopicPartition(TOPIC, 0)], timeout=2)
                    if got[0].offset == want:
                        readable_s = time.monotonic() - killed
                        break
                except Exception:
                    pass
                finally:
                    c.close()
            print(
                json.dumps(
                    {
                        "workers": args.workers,
                        "commit_batch_bytes": batch_bytes,
                        "commits": len(all_lat),
                        "commits_per_s": round(len(all_lat) / wall, 1),
                        "commit_p50_ms": round(percentile(all_lat, 0.5) * 1000, 2),
                        "commit_p99_ms": round(percentile(all_lat, 0.99) * 1000, 2),
                        "failover_committed_readable_s": round(readable_s, 2),
                    }
                ),
                flush=True,
            )
        finally:
            cluster.stop()


if __name__ == "__main__":
    main()
