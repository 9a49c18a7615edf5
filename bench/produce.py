"""Produce benchmark: Kafka clients into a 3-node raftsink cluster (fsync on)
against NATS JetStream (3 nodes, replicas=3, file storage) in the same run.

raftsink (docs/performance.md explains every figure):
- throughput: kcat (librdkafka, idempotent, acks=all) writes N records of 100 B and
  1 KiB over several partitions: records/s and MB/s from start to the last delivery;
- then, once every node has caught up, one idempotent acks=all confluent-kafka
  producer with the client's defaults (linger.ms 5, its batching; the same settings
  in every phase) at 1,000 records/s of 100 B, open loop (send times scheduled in
  advance, latency from the scheduled time: no coordinated omission): p50/p99/p99.9,
  and the 3 nodes' CPU from /proc (utime+stime), the idle cluster's CPU over the same
  time subtracted, per acknowledged record and per Produce request;
- the same producer's closed-loop maximum, then open loop at 25/50/75% of it;
- a per-stage CPU table of the leader and a follower at 1,000/s (the nodes run under
  bench/stage_profile.py, switched on for that phase only);
- the floor (bench/produce_floor.py): the 1,000/s phase's request rate and records per
  request through three bare Python processes (TCP, an fdatasync on each, an answer
  once a majority has it; no Raft, Kafka or gRPC): the least CPU per record any
  Python design of this path pays here, beside issue 17's target.
JetStream: nats-py publish_async with a window of 4,000, then 1,000 msgs/s open loop.
NOTE: nats-server 2.9 does not fsync per message (acks once a quorum has it in the
page cache).

    python bench/produce.py [--quick] [--no-jetstream]
    python bench/produce.py --cpu-only      # CPU per record at 1,000/s + stage table
    python bench/produce.py --tls [--quick]

BENCH_HOT_SPOTS=1 also samples the nodes' stacks and prints hot lines (biased
towards where the loop thread hands over the GIL: read the stage table for CPU).

--tls: the same raftsink workload (kcat 1 KiB throughput, confluent-kafka at 1,000
records/s) against a plaintext cluster, a cluster with TLS on the Kafka listener only
(tls-kafka, client certificates), and a SASL_SSL cluster (tls: the Kafka listener
SASL_SSL with SCRAM-SHA-512, mutual TLS between nodes and on the read API; throw-away
certificates from scripts/make-certs.sh) in the same run; no JetStream (the latency
phase is the open-loop one above, default linger). For the kcat phase it prints each
process's CPU per record split by thread (loop, gRPC event_engine, other Python
threads) and the client's, and the load average before and after. JSON:
tls_throughput_ratio_1k (SASL_SSL / plaintext records/s), tls_p99_ratio (SASL_SSL /
plaintext p99), tls_kafka_throughput_ratio_1k, cpu_split_us. The plaintext and SASL_SSL
clusters run side by side and their 1,000/s latency rounds alternate (3 x 10 s each
with --quick, 5 x 20 s without); each p99 pools its rounds' samples
(tls_p99_ratio_rounds: per round).

Where the code is: bench/kafka_load.py (kcat, the confluent-kafka load producer, the
records stored), bench/jetstream.py (the JetStream peer), bench/produce_cpu.py (the CPU
and per-stage phases, --cpu-only), bench/produce_tls.py (--tls); this file keeps the
default run and the command line.

Needs the Debian packages kcat and nats-server (installed here if missing, as
root) and the pip package nats-py (dev extras). Last line: one JSON object.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import sys
import tempfile
import time

# `python bench/produce.py` puts bench/ first on the path, not the repository: add it
# so the bench.* modules (and sink, raftlog from a checkout) import either way.
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench.common import CpuMeter, machine, print_targets
from bench.jetstream import jetstream
from bench.kafka_load import (
    KCAT_WARMUP,
    PARTITIONS,
    LoadProducer,
    closed_loop_max,
    ensure_debian_packages,
    kcat_throughput,
    record_value,
    total_records,
)
from bench.produce_cpu import (
    ProfiledCluster,
    idle_cpu_rate,
    main_cpu,
    measured_phase,
    profile_phase,
    server_figures,
)
from bench.produce_floor import floor
from bench.produce_tls import main_tls


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="short run (< 2 min)")
    ap.add_argument(
        "--tls", action="store_true", help="plaintext against TLS everywhere, same workload"
    )
    ap.add_argument(
        "--no-jetstream", action="store_true", help="raftsink only (for quick A/B of a change)"
    )
    ap.add_argument(
        "--cpu-only",
        action="store_true",
        help="only CPU per record at 1,000/s and the per-stage table (A/B of a change)",
    )
    args = ap.parse_args()
    if args.cpu_only:
        return main_cpu(20.0, float(os.environ.get("BENCH_PROFILE_S", "10")))
    if args.tls:
        return main_tls(args.quick)
    ensure_debian_packages("kcat", *(() if args.no_jetstream else ("nats-server",)))
    counts = {100: 300_000, 1024: 100_000} if args.quick else {100: 3_000_000, 1024: 1_000_000}
    lat_seconds = 8.0 if args.quick else 20.0
    load_seconds = 5.0 if args.quick else 10.0
    idle_seconds = 5.0 if args.quick else 10.0
    nats_seconds = 3.0 if args.quick else 10.0
    base = tempfile.mkdtemp(prefix="rs-bench-produce-")
    print(f"machine: {machine()}")
    print(
        f"mode: {'quick' if args.quick else 'full'}; raftsink: 3 processes, fsync on, {PARTITIONS} partitions"
    )
    fig: dict = {"mode": "quick" if args.quick else "full"}
    control = os.path.join(base, "stage-profile")
    cluster = ProfiledCluster(
        os.path.join(base, "raftsink"), control, default_partitions=PARTITIONS
    )
    cluster.start()
    stages: dict = {}
    try:
        leader = asyncio.run(cluster.wait_ready())
        by_node = {i: n.proc.pid for i, n in cluster.nodes.items() if n.proc is not None}
        pids = list(by_node.values())
        for size, count in counts.items():
            topic = f"bench-{size}"
            # The topic exists, with its leaders elected, before the clock starts: created
            # by the measured run's first record (auto-creation: placement, a group per
            # partition, first elections, hand-offs; about a second), the run measured it.
            kcat_throughput(cluster.bootstrap_servers, topic, size, KCAT_WARMUP, base)
            asyncio.run(cluster.wait_settled())
            with CpuMeter(pids) as cpu:
                r = kcat_throughput(cluster.bootstrap_servers, topic, size, count, base)
            stored = asyncio.run(total_records(cluster.peers[1].read_api, topic)) - KCAT_WARMUP
            key = "100b" if size == 100 else "1k"
            fig[f"records_per_s_{key}"] = round(r["records_per_s"])
            fig[f"mb_s_{key}"] = round(r["mb_s"], 1)
            fig[f"cluster_cpu_us_per_record_{key}"] = round(cpu.cpu_s / r["records"] * 1e6, 2)
            print(
                f"  raftsink {size:>5} B: {r['records_per_s']:>10.0f} records/s {r['mb_s']:>7.1f} MB/s "
                f"(kcat, {r['records']} records in {r['seconds']:.1f} s; {stored} stored); "
                f"3 nodes' CPU {cpu.cpu_s:.1f} s in {cpu.wall_s:.1f} s wall, "
                f"{cpu.cpu_s / r['records'] * 1e6:.2f} us/record"
            )
            if stored != r["records"]:
                raise RuntimeError(f"{r['records']} records delivered but {stored} stored")
        t0 = time.monotonic()
        index = asyncio.run(cluster.wait_settled())
        print(f"  (every node applied entry {index}; settled in {time.monotonic() - t0:.1f} s)")
        idle = idle_cpu_rate(pids, idle_seconds)
        fig["idle_cpu_pct"] = round(idle * 100, 1)
        print(f"  idle cluster: {idle * 100:.1f}% of a core for 3 nodes ({idle_seconds:.0f} s)")
        prod = LoadProducer(cluster.bootstrap_servers)
        try:
            # warm-up: the idempotent PID handshake
            prod.send("bench-latency", record_value(0, 100))
            prod.flush(30)
            one_k = measured_phase(cluster, prod, idle, "bench-latency", 1000, lat_seconds)
            fig["cpu_us_per_record_1k"] = round(one_k["cpu_us_per_record"], 1)
            fig["cpu_us_per_request_1k"] = round(one_k["cpu_us_per_request"], 1)
            fig["records_per_request_1k"] = round(one_k["records_per_request"], 2)
            fig["entries_per_request_1k"] = round(one_k["entries_per_request"], 2)
            fig["requests_per_s_1k"] = round(one_k["requests"] / lat_seconds, 1)
            fig["p50_ms"] = round(one_k["p50_ms"], 2)
            fig["p99_ms"] = round(one_k["p99_ms"], 2)
            fig["p999_ms"] = round(one_k["p999_ms"], 2)
            fig.update(server_figures(one_k))
            # The load phases' topics exist before they are measured: a topic created by
            # the first record of a phase (auto-creation: placement, a group per
            # partition, first elections, hand-offs) held that phase's first second of
            # records, and its p99 measured the creation (about 900 ms at 25 % of max).
            for topic in ("bench-max", "bench-load"):
                prod.send(topic, record_value(0, 100))
            prod.flush(30)
            max_rate = closed_loop_max(prod, "bench-max", 100, load_seconds)
            fig["max_records_per_s_100b"] = round(max_rate)
            print(f"  raftsink max (this producer, closed loop, 100 B): {max_rate:.0f} records/s")
            for pct in (25, 50, 75):
                asyncio.run(cluster.wait_settled())
                r = measured_phase(
                    cluster, prod, idle, "bench-load", max_rate * pct / 100, load_seconds
                )
                fig[f"p50_ms_at_{pct}pct"] = round(r["p50_ms"], 2)
                fig[f"p99_ms_at_{pct}pct"] = round(r["p99_ms"], 2)
                fig[f"p999_ms_at_{pct}pct"] = round(r["p999_ms"], 2)
                if pct == 50:
                    fig.update(server_figures(r, "_at_50pct"))
                    fig["cpu_us_per_record_50pct"] = round(r["cpu_us_per_record"], 1)
                    fig["cpu_us_per_request_50pct"] = round(r["cpu_us_per_request"], 1)
            asyncio.run(cluster.wait_settled())
            leader = asyncio.run(cluster.wait_ready())  # it may have moved since
            stages = profile_phase(
                prod, control, by_node, leader, "bench-profile", 1000, load_seconds
            )
        finally:
            prod.close()
    finally:
        cluster.stop()
    fig["stages_us_per_record_1k"] = {
        role: {k: round(v, 1) for k, v in t.items() if v >= 0.05} for role, t in stages.items()
    }
    # The floor under the CPU target, in the same run: the same request rate and records per
    # request through three bare Python processes (TCP, fdatasync, a majority; nothing else).
    low = floor(
        fig["requests_per_s_1k"], load_seconds, fig["records_per_request_1k"], "inline", base
    )
    fig["floor_cpu_us_per_record_1k"] = low["cpu_us_per_record"]
    fig["floor_cpu_us_per_request_1k"] = low["cpu_us_per_request"]
    fig["floor_system_us_per_request_1k"] = low["system_us_per_request"]
    fig["floor_p99_ms"] = low["p99_ms"]
    print(
        f"  floor (bench/produce_floor.py: 3 bare Python processes, TCP, fdatasync, a majority; "
        f"{low['rate']:.0f} requests/s of {low['records_per_request']} records): "
        f"{low['cpu_us_per_record']} us of CPU per record, {low['cpu_us_per_request']} per request "
        f"({low['system_us_per_request']} in the kernel), p99 {low['p99_ms']} ms"
    )
    if not args.no_jetstream:
        jetstream(fig, base, nats_seconds, lat_seconds)
    shutil.rmtree(base, ignore_errors=True)
    if fig.get("jetstream_records_per_s_100b"):
        fig["ratio_vs_jetstream_100b"] = round(
            fig["records_per_s_100b"] / fig["jetstream_records_per_s_100b"], 1
        )
    if fig.get("jetstream_p99_ms"):
        fig["p99_ratio_vs_jetstream"] = round(fig["p99_ms"] / fig["jetstream_p99_ms"], 2)
    if fig.get("jetstream_mb_s_1k"):
        fig["mb_s_ratio_vs_jetstream_1k"] = round(fig["mb_s_1k"] / fig["jetstream_mb_s_1k"], 1)
    targets = {
        "cpu_us_per_record_1k <= 120": fig["cpu_us_per_record_1k"] <= 120,
        "p99 <= 2x JetStream's": fig.get("p99_ratio_vs_jetstream", 99) <= 2,
        "1 KiB MB/s >= 6x JetStream's": fig.get("mb_s_ratio_vs_jetstream_1k", 0) >= 6,
        "p99 at 50% of max <= 25 ms": fig["p99_ms_at_50pct"] <= 25,
        ">= 500k records/s of 100 B": fig["records_per_s_100b"] >= 500_000,
    }
    print_targets(targets)
    print(json.dumps(fig))
    return 0


if __name__ == "__main__":
    sys.exit(main())
