"""bench/produce.py's CPU phases: a cluster whose nodes run under bench/stage_profile.py,
the idle cluster's CPU rate, an open-loop phase's CPU (idle subtracted) per record and
per Produce request, the per-stage CPU table at a fixed rate, and --cpu-only (those
figures alone, for A/B of a change)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import tempfile
import time
from typing import Any

from bench.common import CpuMeter, machine
from bench.kafka_load import PARTITIONS, LoadProducer, open_loop, record_value
from bench.stage_profile import PROFILE_ENV, SAMPLE_ENV, stage_table
from raftlog.latency import LatencyHistogram
from sink.process_cluster import SinkProcessCluster


class ProfiledCluster(SinkProcessCluster):
    """Nodes run under bench/stage_profile.py (idle until its control file exists)."""

    def __init__(self, base_dir: str, control: str, **kw: Any) -> None:
        super().__init__(base_dir, node_wrapper="bench.stage_profile", **kw)
        self.control = control

    def env_for(self, node_id: int) -> dict[str, str] | None:
        root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        path = os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH", "")) if p)
        env = dict(os.environ, PYTHONPATH=path, **{PROFILE_ENV: self.control})
        if os.environ.get("BENCH_HOT_SPOTS"):
            env[SAMPLE_ENV] = "1"
        return env


def idle_cpu_rate(pids: list[int], seconds: float) -> float:
    """The idle cluster's CPU seconds per second (ticks, heartbeats, housekeeping)."""
    with CpuMeter(pids) as cpu:
        time.sleep(seconds)
    return cpu.cpu_s / cpu.wall_s


def _statuses(cluster: SinkProcessCluster) -> list[dict]:
    """Every live node's status (the nodes that answered)."""
    return [st for st in (asyncio.run(cluster.status(i)) for i in cluster.alive()) if st]


def _last_index(sts: list[dict]) -> int:
    """Every Raft log's last index, summed over the groups (the controller and, with
    partition groups, each data group: the highest any of its replicas reports), so
    that a difference counts the entries appended in between wherever they went."""
    last = {0: max(st["last_index"] for st in sts)}
    for st in sts:
        for g in (st.get("data_groups") or {}).get("groups", []):
            last[g["group"]] = max(last.get(g["group"], 0), g["last_index"])
    return sum(last.values())


def server_latency(sts: list[dict]) -> dict[str, Any]:
    """The nodes' Produce request latency (dispatch to response written) and disk round
    histograms, and their event loops' lags over 25/50/100 ms (stall_watch), each summed
    over the nodes' statuses (counts only grow)."""
    out: dict[str, Any] = {"produce": LatencyHistogram(), "disk_round": LatencyHistogram()}
    lags = dict.fromkeys(LAG_KEYS, 0)
    for st in sts:
        produce = (st.get("kafka_requests") or {}).get("Produce")
        if produce:
            out["produce"] = out["produce"].plus(LatencyHistogram.from_json(produce["histogram"]))
        disk = (st.get("host") or {}).get("disk_round_histogram")
        if disk:
            out["disk_round"] = out["disk_round"].plus(LatencyHistogram.from_json(disk))
        for k in LAG_KEYS:
            lags[k] += (st.get("stalls") or {}).get(k, 0)
    out["lags"] = lags
    return out


LAG_KEYS = ("loop_lags_over_25ms", "loop_lags_over_50ms", "loop_lags_over_100ms")


def measured_phase(
    cluster: SinkProcessCluster,
    prod: LoadProducer,
    idle_rate: float,
    topic: str,
    rate: float,
    seconds: float,
) -> dict:
    """Open-loop latency at `rate`, with the cluster's CPU (idle subtracted) per
    acknowledged record and per Produce request, and Raft entries per request."""
    pids = [n.proc.pid for n in cluster.nodes.values() if n.proc is not None]
    sts0 = _statuses(cluster)
    first, lat0 = _last_index(sts0), server_latency(sts0)
    with CpuMeter(pids) as cpu:
        r = open_loop(prod, topic, 100, rate, seconds)
    sts1 = _statuses(cluster)
    lat1 = server_latency(sts1)
    lat = {k: lat1[k].minus(lat0[k]) for k in ("produce", "disk_round")}
    for k in LAG_KEYS:  # times a node's event loop ran a 100 ms timer this late
        r[f"server_{k}"] = lat1["lags"][k] - lat0["lags"][k]
    r["entries"] = _last_index(sts1) - first
    # The server's share of the client's latency: each Produce request from its
    # dispatch on its leader to its response written (commit on a majority included;
    # the client's linger, its queues and the sockets are not), and the disk rounds.
    for name, q in (("p50", 0.5), ("p99", 0.99), ("p999", 0.999), ("max", 1.0)):
        # bucket upper bounds: at most sqrt(2) above the truth
        r[f"server_produce_{name}_ms"] = lat["produce"].quantile_ms(q)
        r[f"disk_round_{name}_ms"] = lat["disk_round"].quantile_ms(q)
    r["entries_per_request"] = r["entries"] / max(r["requests"], 1)
    if r["errors"]:
        raise RuntimeError(f"{r['errors']} delivery errors at {rate:.0f} records/s")
    net = cpu.cpu_s - idle_rate * cpu.wall_s
    r["cpu_s"] = cpu.cpu_s
    r["cpu_net_s"] = net
    r["cpu_us_per_record"] = net / max(r["acked"], 1) * 1e6
    r["cpu_us_per_request"] = net / max(r["requests"], 1) * 1e6
    r["records_per_request"] = r["acked"] / max(r["requests"], 1)
    print(
        f"  raftsink at {rate:>7.0f} records/s: p50 {r['p50_ms']:.2f} p99 {r['p99_ms']:.2f} "
        f"p99.9 {r['p999_ms']:.2f} ms; {r['acked']} acked in {r['requests']} Produce requests "
        f"({r['entries']} Raft entries); "
        f"3 nodes' CPU {cpu.cpu_s:.2f} s in {cpu.wall_s:.1f} s ({net:.2f} s above idle): "
        f"{r['cpu_us_per_record']:.0f} us/record, {r['cpu_us_per_request']:.0f} us/request\n"
        f"    server side: Produce p50 {r['server_produce_p50_ms']} p99 "
        f"{r['server_produce_p99_ms']} p99.9 {r['server_produce_p999_ms']} max "
        f"{r['server_produce_max_ms']} ms; disk rounds p50 {r['disk_round_p50_ms']} p99 "
        f"{r['disk_round_p99_ms']} p99.9 {r['disk_round_p999_ms']} max {r['disk_round_max_ms']} ms "
        f"(bucket upper bounds, within x1.41); event loops late by 25/50/100 ms or more: "
        f"{'/'.join(str(r['server_' + k]) for k in LAG_KEYS)} times\n"
        f"    client side (librdkafka, per 1 s window and broker, median / largest p99): "
        f"request round trip {r.get('client_rtt_p99_ms_median')} / "
        f"{r.get('client_rtt_p99_ms_max')} ms, queue wait {r.get('client_queue_p99_ms_median')} / "
        f"{r.get('client_queue_p99_ms_max')} ms"
    )
    return r


def server_figures(r: dict, suffix: str = "") -> dict[str, float]:
    """A measured phase's server-side latency keys for the JSON line."""
    qs = ("p50", "p99", "p999", "max")
    keys = [f"{k}_{q}_ms" for k in ("server_produce", "disk_round") for q in qs]
    keys += [k for k in r if k.startswith(("client_", "server_loop_lags"))]
    return {f"{k}{suffix}": r[k] for k in keys}


def _wait_files(paths: list[str], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    for path in paths:
        while not os.path.exists(path):
            if time.monotonic() > deadline:
                raise TimeoutError(f"{path} did not appear within {timeout} s")
            time.sleep(0.02)


def profile_phase(
    prod: LoadProducer,
    control: str,
    pids: dict[int, int],
    leader: int,
    topic: str,
    rate: float,
    seconds: float,
) -> dict[str, dict[str, float]]:
    """The per-stage CPU account at `rate` (bench/stage_profile.py switched on in
    every node for this phase only: its sampling costs CPU, so the measured phases
    run without it). Returns {"leader"|"follower": {stage: us per acked record}}."""
    prod.send(topic, record_value(0, 100))  # the topic exists before it is profiled
    prod.flush(30)
    for pid in pids.values():
        for suffix in ("json", "started"):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(f"{control}.{pid}.{suffix}")
    open(control, "w").close()
    _wait_files([f"{control}.{pid}.started" for pid in pids.values()], 10)
    try:
        r = open_loop(prod, topic, 100, rate, seconds)
    finally:
        os.unlink(control)
    _wait_files([f"{control}.{pid}.json" for pid in pids.values()], 10)
    reports = {}
    for nid, pid in pids.items():
        with open(f"{control}.{pid}.json") as f:
            reports[nid] = json.load(f)
    if os.environ.get("BENCH_HOT_SPOTS"):
        for nid in (leader, min(n for n in pids if n != leader)):
            print(f"  node {nid} loop hot spots (samples):")
            for where, n in list(reports[nid]["loop_hot_spots"].items())[:40]:
                print(f"    {n:>5} {where}")
    follower = min(n for n in pids if n != leader)
    acked = max(r["acked"], 1)
    out = {}
    for role, nid in (("leader", leader), ("follower", follower)):
        table = stage_table(reports[nid])
        out[role] = {k: v / acked * 1e6 for k, v in table.items()}
        out[role]["(process total)"] = reports[nid]["process_cpu_s"] / acked * 1e6
    stages = sorted(
        {s for t in out.values() for s in t if s != "(process total)"},
        key=lambda s: -(out["leader"].get(s, 0) + out["follower"].get(s, 0)),
    )
    print(
        f"  per-stage CPU at {rate:.0f} records/s ({seconds:.0f} s, {r['acked']} records, "
        f"{r['requests']} Produce requests; leader node {leader}, follower node {follower}; "
        "us of CPU per acknowledged record, stage clocks on):"
    )
    print(f"    {'stage':<56} {'leader':>8} {'follower':>8}")
    for s in stages:
        lead, fol = out["leader"].get(s, 0.0), out["follower"].get(s, 0.0)
        if lead >= 0.05 or fol >= 0.05:
            print(f"    {s:<56} {lead:>8.1f} {fol:>8.1f}")
    print(
        f"    {'(process total, profiler included)':<56} "
        f"{out['leader']['(process total)']:>8.1f} {out['follower']['(process total)']:>8.1f}"
    )
    return out


def main_cpu(lat_seconds: float, profile_seconds: float) -> int:
    """CPU per record at 1,000 records/s (idle subtracted) and the per-stage table only."""
    base = tempfile.mkdtemp(prefix="rs-bench-cpu-")
    print(f"machine: {machine()}")
    control = os.path.join(base, "stage-profile")
    cluster = ProfiledCluster(
        os.path.join(base, "raftsink"), control, default_partitions=PARTITIONS
    )
    cluster.start()
    fig: dict = {"mode": "cpu-only"}
    try:
        asyncio.run(cluster.wait_ready())
        by_node = {i: n.proc.pid for i, n in cluster.nodes.items() if n.proc is not None}
        pids = list(by_node.values())
        idle = idle_cpu_rate(pids, 10.0)
        fig["idle_cpu_pct"] = round(idle * 100, 1)
        prod = LoadProducer(cluster.bootstrap_servers)
        try:
            prod.send("bench-latency", record_value(0, 100))
            prod.flush(30)
            r = measured_phase(cluster, prod, idle, "bench-latency", 1000, lat_seconds)
            fig["cpu_us_per_record_1k"] = round(r["cpu_us_per_record"], 1)
            fig["cpu_us_per_request_1k"] = round(r["cpu_us_per_request"], 1)
            fig["records_per_request_1k"] = round(r["records_per_request"], 2)
            fig["entries_per_request_1k"] = round(r["entries_per_request"], 2)
            fig["p50_ms"], fig["p99_ms"] = round(r["p50_ms"], 2), round(r["p99_ms"], 2)
            fig["p999_ms"] = round(r["p999_ms"], 2)
            fig.update(server_figures(r))
            leader = asyncio.run(cluster.wait_ready())
            stages = profile_phase(
                prod, control, by_node, leader, "bench-profile", 1000, profile_seconds
            )
        finally:
            prod.close()
    finally:
        cluster.stop()
        shutil.rmtree(base, ignore_errors=True)
    fig["stages_us_per_record_1k"] = {
        role: {k: round(v, 1) for k, v in t.items() if v >= 0.05} for role, t in stages.items()
    }
    print(json.dumps(fig))
    return 0
