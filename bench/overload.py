"""Overload benchmark (issue 21): a node degrades and recovers by itself.

Parts, each printing its figures; the last line is one JSON object with every key:
- memory flood (this file): one `raftsink serve` process with a request memory
  budget of --budget-mb; 300 connections announce 90 MiB Produce frames and send
  their bodies (never the last byte) for --seconds, reconnecting when the node cuts
  them (frame read timeout); an ordinary confluent-kafka producer (acks=all, one
  record every 50 ms) on its own connection throughout. Figures: the node's peak
  VmRSS (flood_rss_mb) against budget_mb (target: <= budget + 150 MB), its RSS
  before the flood, the producer's p50/p99/max ack latency, the node's CPU seconds
  (utime+stime from /proc/<pid>/stat) and the wall time.
- disk: bench/overload_disk.py's measure_disk_resume() -> {"disk_resume_s": ...}
- quotas: bench/overload_quota.py's measure_noisy_neighbour() ->
  {"noisy_neighbour_p99_ratio_with_quota": ..., "noisy_neighbour_p99_ratio_without_quota": ...}
  (each skipped, saying so, when its module is missing).

    python bench/overload.py [--seconds 20] [--budget-mb 256] [--runs 1]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from common import machine, percentile, print_targets

from sink.process_cluster import SinkProcessCluster
from tests.helpers.overload import AckProbe, RssSampler, run_in_process, vm_rss_bytes

MiB = 1 << 20
BASELINE_TARGET_MB = 150
FRAME_MB = 90
CONNECTIONS = 300


def cpu_seconds(pid: int) -> float:
    """utime + stime of pid, from /proc/<pid>/stat."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def measure_memory_flood(seconds: float, budget_mb: int) -> dict:
    with tempfile.TemporaryDirectory(prefix="bench-overload-") as tmp:
        c = SinkProcessCluster(
            tmp,
            n=1,
            extra_args=[
                "--tick-ms",
                "20",
                "--kafka-max-frame-bytes",
                str(100 * MiB),
                "--kafka-request-memory-bytes",
                str(budget_mb * MiB),
                "--kafka-frame-read-timeout-s",
                "3",
            ],
        )
        c.start()
        try:
            asyncio.run(c.wait_ready(timeout=60))
            pid = c.nodes[1].proc.pid
            probe = AckProbe(c.bootstrap_servers, "bench-flood").start()
            probe.wait_acks(5, timeout_s=30)
            before = vm_rss_bytes(pid)
            host, port = c.peers[1].kafka.rsplit(":", 1)
            cpu0, t0 = cpu_seconds(pid), time.monotonic()
            acks0 = len(probe.latencies)
            with RssSampler(pid) as rss:
                flood = run_in_process(
                    "flood",
                    host,
                    int(port),
                    connections=CONNECTIONS,
                    frame_bytes=FRAME_MB * MiB,
                    duration_s=seconds,
                    pause_s=0.02,
                )
            wall, cpu = time.monotonic() - t0, cpu_seconds(pid) - cpu0
            probe.stop()
            lat = probe.latencies[acks0:]
            st = asyncio.run(c.status(1, timeout=5.0)) or {}
            k = st.get("kafka", {})
            return {
                "flood_rss_mb": round(rss.max_bytes / MiB, 1),
                "budget_mb": budget_mb,
                "rss_before_flood_mb": round(before / MiB, 1),
                "flood_sent_mb": round(flood.bytes_sent / MiB),
                "flood_connections": flood.connections,
                "flood_frame_timeouts": k.get("frame_timeouts"),
                "request_memory_high_water_mb": round(
                    k.get("request_memory_high_water_bytes", 0) / MiB, 1
                ),
                "probe_acks": len(lat),
                "probe_errors": len(probe.errors),
                "probe_p50_ms": round(percentile(lat, 0.5) * 1000, 1),
                "probe_p99_ms": round(percentile(lat, 0.99) * 1000, 1),
                "probe_max_ms": round(max(lat, default=0) * 1000, 1),
                "flood_wall_s": round(wall, 2),
                "flood_node_cpu_s": round(cpu, 2),
            }
        finally:
            c.stop()


def other_parts() -> dict:
    out: dict = {}
    try:
        from overload_disk import measure_disk_resume
    except ImportError:
        print("disk part skipped: module missing (bench/overload_disk.py)")
    else:
        out.update(measure_disk_resume())
    try:
        from overload_quota import measure_noisy_neighbour
    except ImportError:
        print("quota part skipped: module missing (bench/overload_quota.py)")
    else:
        out.update(measure_noisy_neighbour())
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=20.0, help="flood duration")
    ap.add_argument("--budget-mb", type=int, default=256, help="the node's request budget")
    ap.add_argument("--runs", type=int, default=1, help="memory-flood runs (each reported)")
    args = ap.parse_args()
    print(machine())
    runs = []
    for i in range(args.runs):
        r = measure_memory_flood(args.seconds, args.budget_mb)
        runs.append(r)
        print(f"memory flood run {i + 1}: {json.dumps(r)}", flush=True)
    result = dict(max(runs, key=lambda r: r["flood_rss_mb"]))  # the worst run
    result["flood_rss_mb_runs"] = [r["flood_rss_mb"] for r in runs]
    result.update(other_parts())
    targets = {
        "flood RSS <= budget + 150 MB": result["flood_rss_mb"]
        <= result["budget_mb"] + BASELINE_TARGET_MB,
    }
    if "noisy_neighbour_p99_ratio_with_quota" in result:
        targets["p99 ratio <= 2 with quotas"] = result["noisy_neighbour_p99_ratio_with_quota"] <= 2
    if "disk_resume_s" in result:
        targets["disk resume <= 5 s"] = result["disk_resume_s"] <= 5
    print_targets(targets)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
