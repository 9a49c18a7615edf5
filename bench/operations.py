"""Cluster operations benchmark (issue 12): replacement, rolling restart, graceful hand-off.

Three real `raftsink serve` processes on 127.0.0.1 (sink.process_cluster), real fsync,
confluent-kafka clients. Parts:
- replace: fill the log with --log-gb GiB (64 KiB records, acks=all), kill -9 a
  follower, start a new empty node (--node-join) and `members replace` the dead one
  with it. replace_1gb_s: from the command to the new node being a voter (remove the
  dead voter, add the new one as a learner, catch it up, promote it). Figures are for
  the --log-gb given (the key keeps its name; the JSON says log_gb).
- rolling restart: a steady idempotent produce load (--rate records/s of 100 B,
  acks=all) for --baseline-s without operations, then while every node is restarted in
  turn (SIGTERM, restart, wait until caught up). Figures: acknowledged records/s and p99
  latency of both windows, their ratio (target >= 0.7), failed or duplicated records
  after reading everything back (target 0), the longest gap between acknowledgements.
- hand-off: --handoffs times, SIGTERM the leader under the same load; graceful_handoff_s
  is the median time from the signal to the acknowledgement of the first record produced
  after it (target <= 0.5 s); every run is printed.

    python bench/operations.py [--log-gb 1] [--rate 2000] [--baseline-s 20] [--handoffs 3]

The last line is one JSON object with replace_1gb_s, rolling_restart_failed_records,
rolling_restart_throughput_ratio, graceful_handoff_s and the figures behind them.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from common import machine, percentile, print_targets
from confluent_kafka import Producer

from sink.cli_members import call
from sink.process_cluster import SinkProcessCluster
from tests.helpers.steady_load import SteadyProducer, check_exactly_once

GiB = 1 << 30
TOPIC = "ops-bench"
FILL_TOPIC = "ops-fill"
PARTITIONS = 2


def status(c: SinkProcessCluster, i: int) -> dict | None:
    return asyncio.run(c.status(i))


def leader_of(c: SinkProcessCluster) -> int:
    for i in c.alive():
        st = status(c, i)
        if st and st["role"] == "leader":
            return i
    return 0


def wait_until(cond, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.05)


def wait_caught_up(c: SinkProcessCluster, i: int, timeout: float = 600.0) -> None:
    def goal() -> int:
        lead = leader_of(c)
        st = status(c, lead) if lead else None
        return st["commit"] if st else 1 << 62

    target = goal()
    wait_until(lambda: (status(c, i) or {}).get("applied", 0) >= target, timeout, f"node {i}")


def members(c: SinkProcessCluster, req: dict, timeout: float = 3600.0) -> dict:
    nodes = [c.peers[i].read_api for i in c.alive()]
    result, code, error = asyncio.run(call(nodes, {"timeout_s": timeout, **req}, timeout))
    if code:
        raise RuntimeError(f"{req['op']} refused ({code}): {error}")
    return result


def fill(c: SinkProcessCluster, nbytes: int) -> float:
    """Produce nbytes of 64 KiB records (acks=all); returns MB/s."""
    p = Producer(
        {
            "bootstrap.servers": c.bootstrap_servers,
            "acks": "all",
            "linger.ms": 5,
            "batch.size": 1 << 20,
            "queue.buffering.max.kbytes": 256 * 1024,
        }
    )
    value = os.urandom(64 * 1024)
    failed: list[str] = []
    t0 = time.monotonic()
    sent = 0
    while sent < nbytes:
        try:
            p.produce(
                FILL_TOPIC,
                value=value,
                partition=(sent // len(value)) % PARTITIONS,
                on_delivery=lambda err, _m: failed.append(str(err)) if err else None,
            )
            sent += len(value)
        except BufferError:
            p.poll(0.05)
        p.poll(0)
    if p.flush(600):
        raise RuntimeError("fill: records still in flight after 600 s")
    if failed:
        raise RuntimeError(f"fill: {len(failed)} failed, first {failed[0]}")
    return sent / (time.monotonic() - t0) / 1e6


def measure_replace(base: str, log_gb: float) -> dict:
    c = SinkProcessCluster(os.path.join(base, "replace"), default_partitions=PARTITIONS)
    c.start()
    try:
        asyncio.run(c.wait_ready(timeout=120))
        fill_mb_s = fill(c, int(log_gb * GiB))
        asyncio.run(c.wait_settled(timeout=900))
        lead = leader_of(c)
        dead = next(i for i in (1, 2, 3) if i != lead)
        c.kill(dead)
        peer = c.add_node()
        c.start(peer.id)
        t0 = time.monotonic()
        out = members(
            c,
            {
                "op": "replace",
                "node": dead,
                "new_node": peer.id,
                "raft": peer.raft,
                "kafka": peer.kafka,
                "read_api": peer.read_api,
            },
        )
        took = time.monotonic() - t0
        print(f"replace: log {log_gb} GiB (filled at {fill_mb_s:.1f} MB/s): {out}", flush=True)
        return {
            "replace_1gb_s": round(took, 2),
            "replace_caught_up_s": out.get("caught_up_s"),
            "log_gb": log_gb,
            "fill_mb_s": round(fill_mb_s, 1),
        }
    finally:
        c.stop()


def window(result, start: float, end: float) -> tuple[float, float]:
    """(acknowledged records/s, p99 latency ms) of [start, end]."""
    n = result.acked_between(start, end)
    lat = result.latencies_between(start, end)
    return n / max(end - start, 1e-9), percentile(lat, 0.99) * 1000


def measure_rolling_and_handoff(base: str, rate: int, baseline_s: float, handoffs: int) -> dict:
    c = SinkProcessCluster(os.path.join(base, "rolling"), default_partitions=PARTITIONS)
    c.start()
    try:
        asyncio.run(c.wait_ready(timeout=120))
        load = SteadyProducer(c.bootstrap_servers, TOPIC, PARTITIONS, rate=rate).start()
        load.wait_acked(rate, 120)  # warm: topic created, connections up
        b0 = time.monotonic()
        time.sleep(baseline_s)  # the baseline window: the load alone (a benchmark, not a test)
        b1 = r0 = time.monotonic()
        for i in sorted(c.alive()):
            c.terminate(i)
            c.start(i)
            wait_caught_up(c, i)
        r1 = time.monotonic()
        base_tput, base_p99 = window(load.result, b0, b1)
        roll_tput, roll_p99 = window(load.result, r0, r1)
        stall = load.result.longest_gap(r0, r1)
        print(
            f"rolling restart: {r1 - r0:.1f} s; baseline {base_tput:.0f} rec/s p99 "
            f"{base_p99:.1f} ms; during {roll_tput:.0f} rec/s p99 {roll_p99:.1f} ms; "
            f"longest ack gap {stall:.3f} s",
            flush=True,
        )
        times: list[float] = []
        gaps: list[float] = []
        for _ in range(handoffs):
            lead = leader_of(c)
            t0 = time.monotonic()
            c.nodes[lead].proc.send_signal(15)
            wait_until(lambda t=t0: load.result.first_ack_of_sent_after(t) is not None, 60, "ack")
            handoff = load.result.first_ack_of_sent_after(t0) - t0
            times.append(handoff)
            c.terminate(lead)
            t1 = time.monotonic()
            c.start(lead)
            wait_caught_up(c, lead)
            gap = load.result.longest_gap(t0 - 1.0, t1 + 1.0)
            gaps.append(gap)
            print(
                f"hand-off from node {lead}: first ack of a record produced after SIGTERM "
                f"{handoff:.3f} s; longest ack gap around it {gap:.3f} s",
                flush=True,
            )
        result = load.stop()
        bootstrap = ",".join(c.peers[i].kafka for i in c.alive())
        read = check_exactly_once(bootstrap, TOPIC, result)
        failed = len(result.failed) + (result.sent - read)
        return {
            "rolling_restart_failed_records": failed,
            "rolling_restart_throughput_ratio": round(roll_tput / max(base_tput, 1e-9), 3),
            "rolling_restart_p99_ms": round(roll_p99, 1),
            "baseline_p99_ms": round(base_p99, 1),
            "rolling_restart_longest_ack_gap_s": round(stall, 3),
            "rolling_restart_s": round(r1 - r0, 1),
            "graceful_handoff_s": round(statistics.median(times), 3) if times else None,
            "graceful_handoff_runs_s": [round(t, 3) for t in times],
            "graceful_handoff_ack_gap_s": [round(g, 3) for g in gaps],
            "rate": rate,
            "records_read_back": read,
        }
    finally:
        c.stop()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--log-gb", type=float, default=1.0, help="log size for the replacement")
    ap.add_argument("--rate", type=int, default=2000, help="steady load, records/s")
    ap.add_argument("--baseline-s", type=float, default=20.0)
    ap.add_argument("--handoffs", type=int, default=3)
    args = ap.parse_args()
    print(f"machine: {machine()}; load average {os.getloadavg()[0]:.1f}", flush=True)
    with tempfile.TemporaryDirectory(prefix="ops-bench-") as tmp:
        out = measure_replace(tmp, args.log_gb)
        out.update(measure_rolling_and_handoff(tmp, args.rate, args.baseline_s, args.handoffs))
    print_targets(
        {
            "0 failed records": out["rolling_restart_failed_records"] == 0,
            "throughput ratio >= 0.7": out["rolling_restart_throughput_ratio"] >= 0.7,
            "hand-off <= 0.5 s": (out["graceful_handoff_s"] or 99) <= 0.5,
        }
    )
    print(json.dumps(out))


if __name__ == "__main__":
    main()
