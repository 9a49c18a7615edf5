"""Issue 16's scale benchmark: partition groups against one group, CPU per GB as node
processes are added, the idle cost of many groups, and a projection to bigger machines.

One run, on 127.0.0.1 (`raftsink serve` processes, sink.process_cluster):
(1) a 3-node cluster, a topic of 12 partitions; kcat (librdkafka, idempotent, acks=all)
    writes N records of 1 KiB (after an unmeasured warm-up of 10,000 that creates the
    topic and elects its leaders): throughput, and each node's CPU (/proc utime +
    stime). Once with `cluster.partition_groups` on and once off (one group).
    JSON: groups_vs_single_ratio (on / off records/s), busiest_node_cpu_share (the
    busiest node's share of the cluster's CPU, on), and the same for the one-group run
    (busiest_node_cpu_share_single). Every run also reports kcat's own CPU (the client
    shares the machine's cores: near 2 cores in all, the machine bounded the run) and the
    elections in its measured phase (term changes over all groups; a run with any paused
    some group's writes): JSON `client_cpu_s` and `elections`, per run.
(2) idle cost: bench/scale_idle.py's measurement (its idle_run, imported: 3 host
    processes, G idle groups, quiescence on): idle_cpu_pct_per_node_1000_groups.
(3) CPU-seconds per GB ingested (all node processes' CPU / bytes acknowledged) with 3, 5
    and 7 node processes, the same workload: cpu_s_per_gb_{3,5,7}; with partition groups
    the replication factor stays 3 so this should stay flat (target: 7 <= 1.1 x 3); with
    one group every node replicates everything and it grows with the nodes. Also
    cpu_s_per_gb_above_idle_{3,5,7}: the same less each cluster's idle CPU rate (3 s
    measured after the warm-up) over the produce phase, which separates the fixed cost
    per node process (ticks, the controller group, leaders-table polls) from the cost
    per record; printed beside the target, never in its place.
(4) a projection of throughput on N machines of K cores from the measured CPU per record
    (printed as a Markdown table, `--table-only` reprints it from a JSON line; the
    assumptions are printed with it and in docs/partition-groups.md).
(5) (1) with each node process capped at half a core (cgroup v2 cpu.max, else v1
    cpu.cfs_quota_us; root only; skipped with a message where neither can be set):
    ratio_cpu_quota (on / off records/s under the cap), which shows what spreading
    leaders gives where cores outnumber node processes' needs.

Parts (1), (3) and (5) run in rounds (`--repeats`, default 3; `--quick` 1): each round
starts every cluster of those parts once, the runs a ratio compares next to each other,
and each figure is the median over the rounds of its per-round value, every round's
value kept beside it (`*_rounds`). One cluster run on two shared cores can be slowed by
a minute of other work (session 31: the one run of a 7-node cluster that ingested at
73,506 records/s against 81,000-97,000 in the others); a median of runs minutes apart is
the steady figure, and every run is still printed.

A 2-core machine shared with other work never shows a speedup: read the CPU-normalised
figures; the load average is printed with every phase and in the JSON.

    python -m bench.scale [--quick] [--records N] [--repeats R] [--idle-groups 1000] [--no-idle]
    python -m bench.scale --table-only '<the JSON line>'
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import shutil
import statistics
import sys
import tempfile
import time

from bench.common import CpuQuota, CpuQuotaUnavailable, cpu_seconds, loadavg, machine
from bench.kafka_load import kcat_paced, kcat_throughput, total_records_any_replica
from sink.process_cluster import SinkProcessCluster

PARTITIONS = 12
SIZE = 1024
GB = 1e9
TOPIC = "scale"
QUOTA_CORES = 0.5
WARMUP_RECORDS = 10_000
"""Written before each measured run, unmeasured (topic creation, first elections)."""
PACED_RATE = 40_000
"""Part (3) also measures every cluster at this many 1 KiB records a second offered (kcat
fed on a schedule: bench.kafka_load.kcat_paced), below the slowest cluster's maximum
here (about 69,000): CPU per GB at one load, beside the figure at each cluster's own
maximum, where a cluster of more processes on two shared cores runs slower. At this
rate kcat's 5 ms linger batches about 17 records per partition (40,000 a second over 12
partitions for 5 ms; about a megabyte at the maximum), so it weighs the per-request and
per-message costs; a cluster that cannot keep up shows it in its acknowledged rate."""
PACED_S = 8.0
IDLE_S = 3.0
"""Idle CPU measured this long after the warm-up, before the produce phase."""


def partition_groups_flag() -> tuple[str | None, str]:
    """The flag that turns cluster.partition_groups on, or None and why not."""
    from sink.config.table import OPTIONS

    for o in OPTIONS:
        if o.key == "cluster.partition_groups":
            return o.flag, ""
    return None, (
        "cluster.partition_groups does not exist in this build (sink/config/schema.py): "
        "the node still runs one Raft group for every partition, so there is no "
        "partition-groups run to compare; the one-group figures are measured"
    )


def run_cluster(
    base: str, nodes: int, groups: bool, records: int, quota: bool, paced: bool = False
) -> dict:
    """One cluster, one kcat workload; per-node CPU over the produce phase. paced: then
    PACED_RATE records/s for PACED_S (part (3)'s figure at one rate)."""
    c = SinkProcessCluster(base, nodes, default_partitions=PARTITIONS, partition_groups=groups)
    c.start()
    cap = None
    try:
        asyncio.run(c.wait_ready(180))
        pids = {i: n.proc.pid for i, n in c.nodes.items() if n.proc is not None}
        if quota:
            cap = CpuQuota(list(pids.values()), QUOTA_CORES, "raftsink-scale")
        # Warm-up, not measured: creates the topic (with partition groups: placement,
        # 12 first elections, hand-offs to the preferred replicas) and the producer id.
        # Measured, that start-up time would dominate a short run and say nothing about
        # the steady state being compared.
        t0 = time.perf_counter()
        kcat_throughput(c.bootstrap_servers, TOPIC, SIZE, WARMUP_RECORDS, base)
        warmup_s = time.perf_counter() - t0
        # The idle rate (ticks, the controller group, leaders-table polls: a fixed cost
        # per node process), to report CPU per GB above it beside the total.
        i0, t_idle = cpu_seconds(list(pids.values())), time.perf_counter()
        time.sleep(IDLE_S)
        idle_rate = (cpu_seconds(list(pids.values())) - i0) / (time.perf_counter() - t_idle)
        terms0 = asyncio.run(group_terms(c))
        before = {i: cpu_seconds([p]) for i, p in pids.items()}
        load0 = loadavg()
        client0 = children_cpu_seconds()
        r = kcat_throughput(c.bootstrap_servers, TOPIC, SIZE, records, base)
        client_cpu = children_cpu_seconds() - client0
        after = {i: cpu_seconds([p]) for i, p in pids.items()}
        terms1 = asyncio.run(group_terms(c))
        acked = r["records"] + WARMUP_RECORDS
        if paced:
            p0 = cpu_seconds(list(pids.values()))
            pr = kcat_paced(c.bootstrap_servers, TOPIC, SIZE, PACED_RATE, PACED_S)
            paced_cpu = cpu_seconds(list(pids.values())) - p0
            acked += pr["records"]
        read_apis = [p.read_api for p in c.peers.values()]
        stored = asyncio.run(total_records_any_replica(read_apis, TOPIC))
        if stored != acked:
            raise RuntimeError(f"{acked} records acknowledged but {stored} stored")
    finally:
        if cap is not None:
            cap.release()
        c.stop()
        shutil.rmtree(base, ignore_errors=True)
    cpu = {i: after[i] - before[i] for i in pids}
    total = sum(cpu.values())
    out = {
        "nodes": nodes,
        "partition_groups": groups,
        "quota_cores": QUOTA_CORES if quota else None,
        "quota_kind": cap.kind if cap is not None else None,
        "records": r["records"],
        "seconds": round(r["seconds"], 2),
        "records_per_s": round(r["records_per_s"], 1),
        "mb_s": round(r["mb_s"], 2),
        "cpu_s_per_node": {i: round(v, 2) for i, v in cpu.items()},
        "cpu_s_total": round(total, 2),
        "busiest_node_cpu_share": round(max(cpu.values()) / total, 3) if total else None,
        "cpu_us_per_record": round(total / r["records"] * 1e6, 1),
        "busiest_cpu_us_per_record": round(max(cpu.values()) / r["records"] * 1e6, 1),
        "cpu_s_per_gb": round(total / (r["records"] * SIZE / GB), 1),
        "idle_cpu_pct_cluster": round(idle_rate * 100, 1),
        "cpu_s_per_gb_above_idle": round(
            (total - idle_rate * r["seconds"]) / (r["records"] * SIZE / GB), 1
        ),
        "loadavg": f"{load0} -> {loadavg()}",
        "warmup_s": round(warmup_s, 2),
        "client_cpu_s": round(client_cpu, 2),
        "elections": elections(terms0, terms1),
    }
    if paced:
        out["paced_records_per_s"] = round(pr["records_per_s"], 1)
        out["paced_latest_chunk_s"] = pr["latest_chunk_s"]
        out["cpu_s_per_gb_paced"] = round(paced_cpu / (pr["records"] * SIZE / GB), 1)
        out["paced_cpu_pct"] = round(paced_cpu / pr["seconds"] * 100, 1)
    print(
        f"  {nodes} nodes, groups {'on' if groups else 'off'}"
        f"{f', capped at {QUOTA_CORES} core each ({cap.kind})' if cap else ''}: "
        f"{out['records_per_s']:.0f} records/s, CPU s per node {out['cpu_s_per_node']}, "
        f"busiest share {out['busiest_node_cpu_share']}, {out['cpu_s_per_gb']} CPU s/GB "
        f"({out['cpu_s_per_gb_above_idle']} above the idle {out['idle_cpu_pct_cluster']} %), "
        f"kcat {out['client_cpu_s']} CPU s, {out['elections']} election(s) "
        f"(load {out['loadavg']})"
        + (
            f"; at {PACED_RATE} records/s: {out['cpu_s_per_gb_paced']} CPU s/GB "
            f"({out['paced_cpu_pct']} % of a core, {out['paced_records_per_s']:.0f} acked/s)"
            if paced
            else ""
        ),
        flush=True,
    )
    return out


def note_run(fig: dict, label: str, out: dict) -> None:
    """Each run's elections and kcat CPU in the JSON (keyed by nodes and mode)."""
    fig.setdefault("elections", {})[label] = out["elections"]
    fig.setdefault("client_cpu_s", {})[label] = out["client_cpu_s"]


def children_cpu_seconds() -> float:
    """CPU seconds of this process's waited-for children (kcat: the client's share of
    the machine; the node processes are waited for only when the cluster stops)."""
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


async def group_terms(c: SinkProcessCluster) -> dict[int, int]:
    """Each Raft group's highest term any node reports (0: the controller, or the one
    group; data groups by id)."""
    terms: dict[int, int] = {}
    for i in c.alive():
        st = await c.status(i)
        if not st:
            continue
        rows = [(0, st.get("term", 0))]
        rows += [(g["group"], g["term"]) for g in st.get("data_groups", {}).get("groups", [])]
        for gid, term in rows:
            terms[gid] = max(terms.get(gid, 0), term)
    return terms


def elections(before: dict[int, int], after: dict[int, int]) -> int:
    """Term changes over the measured phase, all groups: each is an election (or a
    leadership transfer) that paused that group's writes; a run with any is read with
    that in mind, never compared silently."""
    return sum(max(0, t - before.get(gid, t)) for gid, t in after.items())


def projection_table(cpu_us_per_record: float, busiest_us_per_record: float) -> str:
    """Markdown: records/s of 1 KiB on N machines of K cores (see ASSUMPTIONS)."""
    util = 0.7
    head = "| machines x cores | one group | partition groups (projected) |\n|---|---|---|"
    rows = []
    single = util * 1e6 / busiest_us_per_record
    for n in (3, 5, 7, 9):
        for k in (1, 2, 4, 8):
            groups = util * n * k * 1e6 / cpu_us_per_record
            rows.append(f"| {n} x {k} | {single:,.0f} | {groups:,.0f} |")
    return "\n".join([head, *rows])


ASSUMPTIONS = """Assumptions of the projection (read with its inputs, measured on this machine):
- one node process per core (raftsink local --processes-per-host K; Python uses one core
  per process), each at most 70 % busy (headroom for bursts, compaction, failover);
- partition groups: the cluster's CPU per record is the 3-node run's with partition
  groups on (a leader and two followers per record, replication factor 3), it stays the same per record as nodes are
  added (part 3 checks it), and leaders and replicas are spread evenly (the balancer's
  bound ceil(G/N) + 1 leaders per node; a topic needs at least as many partitions as
  node processes);
- one group: the leader carries the most work; its CPU per record bounds the cluster,
  whatever the machines and cores;
- not modelled: network and disk bandwidth (each record crosses the network and reaches
  a disk 3 times: at 9 machines x 8 cores about 0.4 GB/s per machine, within a 10 GbE
  link and one NVMe disk), fsync latency (the measured rate here was bounded by it and
  by the client, not by the leader's CPU), the clients' CPU, memory per process."""


async def idle_1000(groups: int, quick: bool) -> dict:
    from bench.scale_idle import idle_run

    base = tempfile.mkdtemp(prefix="scale-idle-")
    try:
        return await idle_run(
            os.path.join(base, "idle"),
            groups,
            quiesce=True,
            seconds=10.0 if quick else 30.0,
            settle=10.0 if quick else 15.0,
            settle_max=240.0,
            election_ticks=30,
        )
    finally:
        shutil.rmtree(base, ignore_errors=True)


def run_round(
    base: str, k: int, flag: str | None, records: int, nodes: list[int], fig: dict
) -> dict:
    """One round of parts (1), (5) and (3), each cluster once: the runs a figure compares
    follow each other (on beside off, capped on beside capped off, the node counts one
    after another, in reverse order every other round), so a slow minute of the shared
    machine moves both sides of a ratio rather than one."""
    out: dict = {}
    print("(1) 3 nodes, 12 partitions, partition groups off / on:", flush=True)
    out["off"] = run_cluster(
        os.path.join(base, "off"), 3, False, records, quota=False, paced=not flag
    )
    note_run(fig, f"r{k}_3_off", out["off"])
    if flag:
        out["on"] = run_cluster(os.path.join(base, "on"), 3, True, records, False, paced=True)
        note_run(fig, f"r{k}_3_on", out["on"])
    print(f"(5) the same, each node process capped at {QUOTA_CORES} core:", flush=True)
    try:
        out["off_q"] = run_cluster(os.path.join(base, "off-q"), 3, False, records, quota=True)
        note_run(fig, f"r{k}_3_off_quota", out["off_q"])
        if flag:
            out["on_q"] = run_cluster(os.path.join(base, "on-q"), 3, True, records, quota=True)
            note_run(fig, f"r{k}_3_on_quota", out["on_q"])
    except CpuQuotaUnavailable as exc:
        print(f"  skipped: no CPU quota can be set here: {exc}", flush=True)
        out["quota_why"] = f"no CPU quota can be set here: {exc}"
    print("(3) CPU-seconds per GB ingested by node count:", flush=True)
    # The 3-node point is part (1)'s run of the same mode (groups on where they exist).
    out["n"] = {3: out.get("on") or out["off"]}
    order = [n for n in nodes if n != 3]
    for n in order if k % 2 == 0 else reversed(order):
        out["n"][n] = run_cluster(
            os.path.join(base, f"n{n}"), n, bool(flag), records, False, paced=True
        )
        note_run(fig, f"r{k}_{n}", out["n"][n])
    return out


def _median(values: list[float]) -> float:
    return round(statistics.median(values), 3)


def summarise_rounds(fig: dict, rounds: list[dict], nodes: list[int], groups: bool) -> None:
    """Each figure: the median over the rounds of its per-round value (a ratio per round
    compares two runs minutes apart, not one early and one late); every round's value
    is kept beside it in the JSON (`*_rounds`) and each run's line was printed."""
    off = [r["off"] for r in rounds]
    on = [r["on"] for r in rounds if "on" in r]
    fig["rounds"] = len(rounds)
    fig["records_per_s_single"] = _median([r["records_per_s"] for r in off])
    fig["busiest_node_cpu_share_single"] = _median([r["busiest_node_cpu_share"] for r in off])
    fig["busiest_cpu_us_per_record_3"] = _median([r["busiest_cpu_us_per_record"] for r in off])
    if on:
        ratios = [r["on"]["records_per_s"] / r["off"]["records_per_s"] for r in rounds]
        fig["groups_vs_single_ratio_rounds"] = [round(x, 3) for x in ratios]
        fig["groups_vs_single_ratio"] = _median(ratios)
        fig["records_per_s_groups"] = _median([r["records_per_s"] for r in on])
        shares = [r["busiest_node_cpu_share"] for r in on]
        fig["busiest_node_cpu_share_rounds"] = shares
        fig["busiest_node_cpu_share"] = _median(shares)
    else:
        fig["groups_vs_single_ratio"] = fig["records_per_s_groups"] = None
        fig["busiest_node_cpu_share"] = None
    skipped = [r["quota_why"] for r in rounds if "quota_why" in r]
    if skipped:
        fig["ratio_cpu_quota"] = None
        fig["ratio_cpu_quota_why"] = skipped[0]
    else:
        fig["quota_kind"] = rounds[0]["off_q"]["quota_kind"]
        fig["records_per_s_single_quota"] = _median([r["off_q"]["records_per_s"] for r in rounds])
        if on:
            q = [r["on_q"]["records_per_s"] / r["off_q"]["records_per_s"] for r in rounds]
            fig["ratio_cpu_quota_rounds"] = [round(x, 3) for x in q]
            fig["ratio_cpu_quota"] = _median(q)
        else:
            fig["ratio_cpu_quota"] = None
    for n in nodes:
        per = [r["n"][n] for r in rounds]
        fig[f"cpu_s_per_gb_{n}_rounds"] = [r["cpu_s_per_gb"] for r in per]
        fig[f"cpu_s_per_gb_{n}"] = _median([r["cpu_s_per_gb"] for r in per])
        fig[f"cpu_s_per_gb_above_idle_{n}"] = _median([r["cpu_s_per_gb_above_idle"] for r in per])
        if all("cpu_s_per_gb_paced" in r for r in per):
            paced = [r["cpu_s_per_gb_paced"] for r in per]
            fig[f"cpu_s_per_gb_{n}_at_{PACED_RATE}_rounds"] = paced
            fig[f"cpu_s_per_gb_{n}_at_{PACED_RATE}"] = _median(paced)
    fig["cpu_s_per_gb_partition_groups"] = groups
    fig["cpu_us_per_record_3"] = _median([r["n"][3]["cpu_us_per_record"] for r in rounds])
    if len(rounds) > 1:
        print(
            "medians over the rounds: "
            + json.dumps(
                {
                    k: fig[k]
                    for k in ("groups_vs_single_ratio", "ratio_cpu_quota", "busiest_node_cpu_share")
                    if fig.get(k) is not None
                }
                | {f"cpu_s_per_gb_{n}": fig[f"cpu_s_per_gb_{n}"] for n in nodes}
            ),
            flush=True,
        )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="200,000 records per run, short idle")
    ap.add_argument("--records", type=int, default=500_000, help="1 KiB records per run")
    ap.add_argument("--idle-groups", type=int, default=1000)
    ap.add_argument("--no-idle", action="store_true", help="skip part (2)")
    ap.add_argument("--nodes", default="3,5,7", help="node counts of part (3)")
    ap.add_argument(
        "--repeats",
        type=int,
        default=None,
        help="rounds of parts (1), (3) and (5); each figure is the median over the rounds "
        "(default 3, --quick 1)",
    )
    ap.add_argument("--table-only", metavar="JSON", help="print part (4) from a JSON line")
    args = ap.parse_args()
    if args.table_only:
        fig = json.loads(args.table_only)
        print(projection_table(fig["cpu_us_per_record_3"], fig["busiest_cpu_us_per_record_3"]))
        print(ASSUMPTIONS)
        return 0
    records = 200_000 if args.quick else args.records
    if args.repeats is None:
        args.repeats = 1 if args.quick else 3
    if args.repeats < 1:
        ap.error("--repeats must be at least 1")
    nodes = sorted({3, *(int(x) for x in args.nodes.split(","))})
    records -= records % 10_000  # kcat_throughput writes whole 10,000-line chunks
    print(machine(), f"load {loadavg()}", flush=True)
    flag, why = partition_groups_flag()
    fig: dict = {"nproc": os.cpu_count(), "records_per_run": records, "record_bytes": SIZE}
    if flag is None:
        print(f"partition groups: not measured: {why}", flush=True)
        fig["groups_on_why"] = why
    root = tempfile.mkdtemp(prefix="scale-")
    rounds: list[dict] = []
    try:
        for k in range(args.repeats):
            print(f"round {k + 1} of {args.repeats}:", flush=True)
            rounds.append(run_round(os.path.join(root, f"r{k}"), k, flag, records, nodes, fig))
    finally:
        shutil.rmtree(root, ignore_errors=True)
    summarise_rounds(fig, rounds, nodes, bool(flag))
    # (2) idle cost of many groups (bench/scale_idle.py's measurement).
    if not args.no_idle:
        print(f"(2) idle: {args.idle_groups} groups on 3 host processes, quiescence on:")
        r = asyncio.run(idle_1000(args.idle_groups, args.quick))
        key = f"idle_cpu_pct_per_node_{args.idle_groups}_groups"
        # Only a settled run (every group led, so idle groups could quiesce) measures the
        # idle cost; an unsettled one measured elections: kept apart, never the figure.
        fig[key] = r["cpu_pct_mean"] if r["settled"] else None
        if not r["settled"]:
            fig[f"{key}_unsettled"] = r["cpu_pct_mean"]
        fig[f"idle_settled_{args.idle_groups}_groups"] = r["settled"]
        fig["idle_election_ticks"] = r["election_ticks"]
        print(
            f"  cpu % per node {r['cpu_pct_per_node']} (mean {r['cpu_pct_mean']}), every "
            f"group led: {r['settled']} (after {r['led_s']} s), quiesced "
            f"{r['quiesced_groups_per_node']}",
            flush=True,
        )
    else:
        fig["idle_cpu_pct_per_node_1000_groups"] = None
    # (4) the projection.
    print("(4) projected 1 KiB records/s:")
    print(projection_table(fig["cpu_us_per_record_3"], fig["busiest_cpu_us_per_record_3"]))
    print(ASSUMPTIONS)
    targets = {
        "groups_vs_single_ratio >= 1.0": fig["groups_vs_single_ratio"],
        "ratio_cpu_quota >= 1.5": fig.get("ratio_cpu_quota"),
        "busiest_node_cpu_share <= 0.40": fig["busiest_node_cpu_share"],
        "cpu_s_per_gb_7 <= 1.1 x cpu_s_per_gb_3": (
            round(fig["cpu_s_per_gb_7"] / fig["cpu_s_per_gb_3"], 3)
            if "cpu_s_per_gb_7" in fig and "cpu_s_per_gb_3" in fig
            else None
        ),
        "idle_cpu_pct_per_node_1000_groups <= 10": fig.get("idle_cpu_pct_per_node_1000_groups"),
    }
    print("targets (figure; null: not measured): " + json.dumps(targets))
    if "cpu_s_per_gb_above_idle_7" in fig and fig.get("cpu_s_per_gb_above_idle_3"):
        ratio = fig["cpu_s_per_gb_above_idle_7"] / fig["cpu_s_per_gb_above_idle_3"]
        print(f"beside it: CPU per GB above idle, 7 / 3 node processes: {ratio:.3f}")
    at = f"_at_{PACED_RATE}"
    if f"cpu_s_per_gb_7{at}" in fig and fig.get(f"cpu_s_per_gb_3{at}"):
        ratio = fig[f"cpu_s_per_gb_7{at}"] / fig[f"cpu_s_per_gb_3{at}"]
        print(f"beside it: CPU per GB at {PACED_RATE} records/s, 7 / 3 node processes: {ratio:.3f}")
    fig["loadavg_end"] = loadavg()
    print(json.dumps(fig, sort_keys=True), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
