"""Idle Raft traffic of a partition-groups cluster as nodes are added (issue 16).

N real `raftsink serve` processes (partition groups on), one topic of --partitions
partitions (replication factor 3) written once by kcat, then --seconds of idle: per
node, the gRPC writes (transport `sent_batches`), Raft messages and coalesced beat rows
it sent per second, and the cluster's CPU (utime + stime from /proc) as % of one core
per node. Message counts hardly depend on the machine's load; CPU does, so the load
average is printed beside it.

Why: every node pair that shares a group exchanges a message per heartbeat round in
each direction, so idle messages grow with N x (N - 1), and at about 370 us of CPU per
gRPC message that fixed cost is what made CPU per GB rise with the node count
(`bench/scale.py`'s cpu_s_per_gb_7 against cpu_s_per_gb_3).

    python -m bench.idle_messages [--nodes 3,7] [--partitions 12] [--seconds 10]
        [--heartbeat-ticks N]

The last line is one JSON object: per node count, writes_per_s (cluster),
cpu_pct_per_node and the load average.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import tempfile
import time

from bench.common import cpu_seconds, loadavg, machine
from bench.kafka_load import kcat_throughput
from sink.process_cluster import SinkProcessCluster


def _counters(cluster: SinkProcessCluster) -> dict[int, tuple[int, int, int]]:
    out = {}
    for i in cluster.nodes:
        host = asyncio.run(cluster.status(i)).get("host") or {}
        t = host.get("transport") or {}
        out[i] = (
            t.get("sent_batches", 0),
            t.get("sent_messages", 0),
            host.get("beat_rows_sent", 0),
        )
    return out


def measure(nodes: int, partitions: int, seconds: float) -> dict:
    base = tempfile.mkdtemp(prefix="idle-msgs-")
    cluster = SinkProcessCluster(
        os.path.join(base, "rs"), nodes, default_partitions=partitions, partition_groups=True
    )
    cluster.start()
    try:
        asyncio.run(cluster.wait_ready(180))
        kcat_throughput(cluster.bootstrap_servers, "idle", 1024, 10_000, base)
        time.sleep(3)  # the topic's groups settle (elections, balancing) before the window
        pids = [n.proc.pid for n in cluster.nodes.values() if n.proc is not None]
        a, ca, t0 = _counters(cluster), cpu_seconds(pids), time.monotonic()
        time.sleep(seconds)
        b, cb, dt = _counters(cluster), cpu_seconds(pids), time.monotonic() - t0
        per = {i: [round((b[i][k] - a[i][k]) / dt, 1) for k in range(3)] for i in a}
        return {
            "nodes": nodes,
            "writes_per_s": round(sum(v[0] for v in per.values())),
            "cpu_pct_per_node": round((cb - ca) / dt * 100 / nodes, 2),
            "per_node_writes_msgs_rows_per_s": per,
            "load": loadavg(),
        }
    finally:
        cluster.stop()
        shutil.rmtree(base, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", default="3,7", help="node counts, comma-separated")
    ap.add_argument("--partitions", type=int, default=12)
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument(
        "--heartbeat-ticks",
        type=int,
        default=0,
        help="raft.heartbeat_ticks for the nodes (0: the default)",
    )
    args = ap.parse_args()
    if args.heartbeat_ticks:
        os.environ["RAFTSINK_RAFT_HEARTBEAT_TICKS"] = str(args.heartbeat_ticks)
    print(machine())
    result = {}
    for n in (int(x) for x in args.nodes.split(",")):
        r = measure(n, args.partitions, args.seconds)
        print(
            f"{n} nodes: {r['writes_per_s']} gRPC writes/s in the cluster, "
            f"{r['cpu_pct_per_node']} % of a core per node (load {r['load']})"
        )
        result[str(n)] = r
    print(json.dumps(result))


if __name__ == "__main__":
    main()
