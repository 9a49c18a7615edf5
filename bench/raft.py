"""Raft benchmark: 3 raftlog node processes on 127.0.0.1, fsync on.

- Throughput (entries/s, MB/s) for 100 B, 1 KiB and 64 KiB entries with many
  concurrent proposers (closed loop, inside the leader process, as the Kafka
  front end will propose).
- p50/p99 commit latency at a fixed 1,000 entries/s (open loop, 1 KiB).
- Failover: time from kill -9 of the leader to the next committed entry.
- In the same run, PySyncObj as a 3-node cluster doing the same 1 KiB work
  (it does not fsync: say so next to the figures).

    python bench/raft.py [--quick]

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

from common import machine, print_targets

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
    args = ap.parse_args()
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
