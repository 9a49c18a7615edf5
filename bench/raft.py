"""Raft benchmark: 3 raftlog node processes on 127.0.0.1, fsync on.

- Throughput (entries/s, MB/s) for 100 B, 1 KiB and 64 KiB entries with many
  concurrent proposers (closed loop, inside the leader process, as the Kafka
  front end will propose).
- p50/p99 commit latency at a fixed 1,000 entries/s (open loop, 1 KiB).
- Failover: time from kill -9 of the leader to the next committed entry.
- In the same run, PySyncObj as a 3-node cluster doing the same 1 KiB work
  (it does not fsync: say so next to the figures).

    python bench/raft.py [--quick]
    python bench/raft.py --threads [--rate 150] [--seconds 20] [--size 1024]

--threads: the replication path's CPU per entry, per thread, at a low fixed rate
(150 proposals/s is about the Produce request rate at 1,000 records/s): each
process's threads from /proc/<pid>/task/*/stat (the event-loop thread, the disk
writer, gRPC's threads), the idle cluster's rate per thread (measured just
before) subtracted, in us per committed entry for the leader and each follower,
with the transport's stream writes and messages per entry and the fsyncs per
entry. The proposals come from an open loop inside the leader (one task per
proposal: that task is in the leader's loop figure).

The last line of output is one JSON object with the figures.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from common import TICKS_PER_S, loadavg, machine, print_targets, task_times

from raftlog.process_cluster import RaftProcessCluster, free_ports

HERE = os.path.dirname(os.path.abspath(__file__))
SIZES = {"100b": 100, "1k": 1024, "64k": 65536}
CONCURRENCY = {"100b": 512, "1k": 512, "64k": 64}


async def raftlog_figures(base: str, seconds: float) -> dict:
    c = RaftProcessCluster(os.path.join(base, "raftlog"))
    c.start()
    out: dict = {}
    try:
        leader = await c.wait_leader()
        await c.call(leader, "Load", {"size": 1024, "seconds": 0.5, "concurrency": 64})  # warm-up
        for key, size in SIZES.items():
            r = await c.call(
                leader,
                "Load",
                {"size": size, "seconds": seconds, "concurrency": CONCURRENCY[key]},
                timeout=seconds + 60,
            )
            out[f"entries_per_s_{key}"] = round(r["entries_per_s"])
            out[f"mb_s_{key}"] = round(r["mb_s"], 1)
            out[f"p99_ms_saturated_{key}"] = round(r["p99_ms"], 1)
            print(
                f"  raftlog {size:>6} B: {r['entries_per_s']:>9.0f} entries/s {r['mb_s']:>7.1f} MB/s "
                f"(p50 {r['p50_ms']:.1f} ms, p99 {r['p99_ms']:.1f} ms at saturation, "
                f"{CONCURRENCY[key]} proposers)"
            )
        r = await c.call(
            leader, "Load", {"size": 1024, "seconds": seconds, "rate": 1000}, timeout=seconds + 60
        )
        out["p50_ms_at_1k"] = round(r["p50_ms"], 2)
        out["p99_ms_at_1k"] = round(r["p99_ms"], 2)
        print(
            f"  raftlog at 1,000 entries/s (1 KiB): p50 {r['p50_ms']:.2f} ms, p99 {r['p99_ms']:.2f} ms"
        )
        out["failover_s"] = round(await failover(c, leader), 3)
        print(
            f"  raftlog failover (kill -9 leader -> next commit): {out['failover_s'] * 1000:.0f} ms"
        )
    finally:
        c.stop_all()
    return out


async def failover(c: RaftProcessCluster, leader: int) -> float:
    """kill -9 the leader; time until some other node commits a new entry."""
    others = [i for i in c.nodes if i != leader]
    value = os.urandom(16).hex()
    t0 = time.perf_counter()
    c.kill(leader)
    while True:
        for i in others:
            try:
                r = await c.call(i, "Propose", {"values": [value], "timeout": 2}, timeout=3)
            except Exception:
                continue
            if "indexes" in r:
                return time.perf_counter() - t0
        await asyncio.sleep(0.005)
        if time.perf_counter() - t0 > 30:
            raise TimeoutError("no commit within 30 s of the leader's kill")


def _thread_kind(tid: int, pid: int, comm: str, py_names: dict[str, str]) -> str:
    """A thread's row in the per-thread table (threads of one kind summed)."""
    if tid == pid:
        return "loop thread (asyncio, Raft, gRPC aio)"
    name = py_names.get(str(tid))
    if name is None:
        return f"gRPC native: {comm}"
    if name.startswith("raftlog-disk"):
        return "disk writer (" + ("fsync pool" if "-sync" in name else "raftlog-disk") + ")"
    if "_poll_wrapper" in name:
        return "gRPC poller (_poll_wrapper)"
    return f"python: {name.split(' ')[0]}"


def _snapshot(c: RaftProcessCluster) -> dict[int, dict[int, tuple[str, int]]]:
    return {i: task_times(nd.proc.pid) for i, nd in c.nodes.items() if nd.proc is not None}


def _cpu_by_tid(a: dict[int, tuple[str, int]], b: dict[int, tuple[str, int]]) -> dict[int, float]:
    """CPU seconds per thread between two task_times snapshots (new threads from 0)."""
    return {tid: (t - a.get(tid, (c, 0))[1]) / TICKS_PER_S for tid, (c, t) in b.items()}


async def thread_figures(base: str, rate: float, seconds: float, size: int, idle_s: float) -> dict:
    """Per-thread CPU per entry of the replication path (see the module doc)."""
    c = RaftProcessCluster(os.path.join(base, "raftlog"))
    c.start()
    try:
        leader = await c.wait_leader()
        # Warm-up: connections, caches, the allocator.
        await c.call(leader, "Load", {"size": size, "seconds": 2.0, "rate": rate}, timeout=60)
        st0 = await c.statuses()
        pids = {i: nd.proc.pid for i, nd in c.nodes.items() if nd.proc is not None}
        load0 = loadavg()
        s0, t0 = _snapshot(c), time.perf_counter()
        await asyncio.sleep(idle_s)
        s1, t1 = _snapshot(c), time.perf_counter()
        r = await c.call(
            leader, "Load", {"size": size, "seconds": seconds, "rate": rate}, timeout=seconds + 60
        )
        s2, t2 = _snapshot(c), time.perf_counter()
        st1 = await c.statuses()
    finally:
        c.stop_all()
    entries = r["entries"]
    if not entries:  # e.g. a leader change under a loaded machine: no figure, say so
        raise SystemExit(f"no entry committed in the load phase: {r}")
    idle_wall, load_wall = t1 - t0, t2 - t1
    followers = sorted(i for i in pids if i != leader)
    cols = {leader: "leader", followers[0]: "follower A", followers[1]: "follower B"}
    table: dict[str, dict[str, float]] = {}
    for i, col in cols.items():
        names = st1[i].get("threads", {})
        idle = _cpu_by_tid(s0[i], s1[i])
        busy = _cpu_by_tid(s1[i], s2[i])
        for tid, cpu in busy.items():
            kind = _thread_kind(tid, pids[i], s2[i][tid][0], names)
            extra = cpu - idle.get(tid, 0.0) / idle_wall * load_wall
            row = table.setdefault(kind, dict.fromkeys(cols.values(), 0.0))
            row[col] += extra / entries * 1e6
    totals = {col: sum(row[col] for row in table.values()) for col in cols.values()}
    counts: dict[str, dict[str, float]] = {}
    for i, col in cols.items():
        a, b = st0[i], st1[i]
        ta, tb = a.get("transport", {}), b.get("transport", {})
        n = b["applied_entries"] - a["applied_entries"]
        counts[col] = {
            "stream_writes": (tb.get("sent_batches", 0) - ta.get("sent_batches", 0)) / n,
            "messages_sent": (tb.get("sent_messages", 0) - ta.get("sent_messages", 0)) / n,
            "messages_received": (tb.get("received_messages", 0) - ta.get("received_messages", 0))
            / n,
            "fsyncs": (b["disk"]["fsyncs"] - a["disk"]["fsyncs"]) / n,
            "disk_batches": (b["disk"]["batches"] - a["disk"]["batches"]) / n,
        }
    return {
        "rate": rate,
        "size": size,
        "seconds": round(load_wall, 2),
        "entries": entries,
        "errors": r["errors"],
        "p50_ms": round(r["p50_ms"], 2),
        "p99_ms": round(r["p99_ms"], 2),
        "loadavg_before": load0,
        "loadavg_after": loadavg(),
        "us_per_entry": {k: {c_: round(v, 1) for c_, v in row.items()} for k, row in table.items()},
        "total_us_per_entry": {k: round(v, 1) for k, v in totals.items()},
        "cluster_us_per_entry": round(sum(totals.values()), 1),
        "per_entry_counts": {
            k: {c_: round(v, 2) for c_, v in row.items()} for k, row in counts.items()
        },
    }


def print_thread_table(f: dict) -> None:
    cols = list(f["total_us_per_entry"])
    print(
        f"  {f['entries']} entries of {f['size']} B at {f['rate']:.0f}/s in {f['seconds']} s "
        f"(p50 {f['p50_ms']} ms, p99 {f['p99_ms']} ms); load average {f['loadavg_before']}"
    )
    print("  us of CPU per entry, idle subtracted:")
    print("  " + f"{'thread':<44}" + "".join(f"{c:>12}" for c in cols))
    rows = sorted(f["us_per_entry"].items(), key=lambda kv: -sum(kv[1].values()))
    for kind, row in rows:
        print("  " + f"{kind:<44}" + "".join(f"{row[c]:>12.1f}" for c in cols))
    print(
        "  "
        + f"{'process total':<44}"
        + "".join(f"{f['total_us_per_entry'][c]:>12.1f}" for c in cols)
    )
    print(f"  cluster: {f['cluster_us_per_entry']} us per entry")
    for k in ("stream_writes", "messages_sent", "messages_received", "fsyncs", "disk_batches"):
        print(
            "  "
            + f"{k + ' per entry':<44}"
            + "".join(f"{f['per_entry_counts'][c][k]:>12.2f}" for c in cols)
        )


def pysyncobj_figures(base: str, seconds: float, mode: str, arg: int) -> dict:
    ports = free_ports(3)
    addrs = [f"127.0.0.1:{p}" for p in ports]
    procs = []
    for k, addr in enumerate(addrs):
        d = os.path.join(base, f"pysyncobj-{mode}-{k}")
        os.makedirs(d, exist_ok=True)
        partners = ",".join(a for a in addrs if a != addr)
        procs.append(
            subprocess.Popen(
                [
                    sys.executable,
                    os.path.join(HERE, "pysyncobj_node.py"),
                    addr,
                    partners,
                    d,
                    "1024",
                    str(seconds),
                    mode,
                    str(arg),
                ],
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                text=True,
            )
        )
    result: dict = {}
    try:
        deadline = time.monotonic() + seconds + 90
        while not result and time.monotonic() < deadline:
            for p in procs:
                if p.poll() is not None and p.stdout is not None:
                    line = p.stdout.read().strip()
                    if line:
                        result = json.loads(line.splitlines()[-1])
            time.sleep(0.1)
    finally:
        for p in procs:
            p.kill()
            p.wait()
    return result


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="short run (< 60 s)")
    ap.add_argument("--threads", action="store_true", help="only the per-thread CPU per entry")
    ap.add_argument("--rate", type=float, default=150.0, help="--threads: proposals/s")
    ap.add_argument("--seconds", type=float, default=20.0, help="--threads: load phase")
    ap.add_argument("--size", type=int, default=1024, help="--threads: entry bytes")
    ap.add_argument("--idle", type=float, default=10.0, help="--threads: idle phase")
    args = ap.parse_args()
    if args.threads:
        base = tempfile.mkdtemp(prefix="rs-bench-raft-")
        print(f"machine: {machine()}")
        try:
            f = asyncio.run(thread_figures(base, args.rate, args.seconds, args.size, args.idle))
        finally:
            shutil.rmtree(base, ignore_errors=True)
        print_thread_table(f)
        print(json.dumps(f))
        return 0
    seconds = 3.0 if args.quick else 15.0
    base = tempfile.mkdtemp(prefix="rs-bench-raft-")
    print(f"machine: {machine()}")
    print(f"mode: {'quick' if args.quick else 'full'}; 3 node processes on 127.0.0.1, fsync on")
    figures: dict = {"mode": "quick" if args.quick else "full"}
    try:
        figures.update(asyncio.run(raftlog_figures(base, seconds)))
        py = pysyncobj_figures(base, seconds, "window", 1000)
        figures["pysyncobj_entries_per_s_1k"] = round(py.get("entries_per_s", 0))
        print(
            f"  PySyncObj 1 KiB (NO fsync, journal not flushed): {py.get('entries_per_s', 0):.0f} entries/s "
            f"(p99 {py.get('p99_ms', 0):.0f} ms at saturation)"
        )
        py = pysyncobj_figures(base, seconds, "rate", 1000)
        figures["pysyncobj_p99_ms_at_1k"] = round(py.get("p99_ms", 0), 2)
        print(
            f"  PySyncObj at 1,000 entries/s: p50 {py.get('p50_ms', 0):.2f} ms, p99 {py.get('p99_ms', 0):.2f} ms"
        )
        if figures["pysyncobj_entries_per_s_1k"]:
            figures["ratio_vs_pysyncobj_1k"] = round(
                figures["entries_per_s_1k"] / figures["pysyncobj_entries_per_s_1k"], 2
            )
        targets = {
            ">= 50k entries/s of 1 KiB": figures["entries_per_s_1k"] >= 50_000,
            ">= 3x PySyncObj": figures.get("ratio_vs_pysyncobj_1k", 0) >= 3,
            "p99 <= 5 ms at 1,000/s": figures["p99_ms_at_1k"] <= 5,
            "failover <= 1 s": figures["failover_s"] <= 1,
        }
        print_targets(targets)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    print(json.dumps(figures))
    return 0


if __name__ == "__main__":
    sys.exit(main())
