"""One campaign: cluster + proxy, workload, nemesis, final reads, checkers, report.

run_campaign(seed, seconds, out_dir, ...) -> report dict (also written to
out_dir/report.json, summary.txt, plot.png, history.jsonl.gz; node logs and
data stay in out_dir/cluster unless keep_data=False).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import Any

from confluent_kafka import Producer

from chaos import checkers, report
from chaos.fault_cluster import ChaosCluster
from chaos.history import History
from chaos.nemesis import (
    Nemesis,
    ScheduleOptions,
    check_kinds,
    default_kinds,
    make_schedule,
    schedule_json,
)
from chaos.workload import (
    READER_PROCESS,
    Control,
    KafkaConsumerWorker,
    KafkaHwWatcher,
    ProducerWorker,
    final_read_node,
    hw_watcher,
    read_api_reader,
    replica_map,
)
from sink.cli_connect import READ_API_CREDENTIALS

log = logging.getLogger("chaos")


@dataclass
class CampaignOptions:
    seed: int
    seconds: float = 120.0
    nemeses: tuple[str, ...] = ()
    """Fault kinds; empty: every kind the cluster supports (default_kinds)."""
    topic: str = "chaos"
    partitions: int = 4
    producers: int = 3
    rate: float = 100.0  # records/s per producer
    kafka_consumers: int = 2
    read_api_readers: int = 2
    fault_min_s: float = 3.0
    fault_max_s: float = 8.0
    gap_min_s: float = 2.0
    gap_max_s: float = 5.0
    warmup_s: float = 5.0
    cooldown_s: float = 3.0
    drain_timeout_s: float = 90.0
    schedule_grace_s: float = 0.0
    """How long the workload may run past `seconds` so that the nemesis finishes the faults
    of its schedule (0: stop at `seconds`, whatever is left). Faults that wait for a node to
    be admitted again (wipe, corrupt, replace) take 10-30 s on a loaded machine instead of
    their scheduled few seconds, so the schedule runs late; with a grace, the kinds and
    counts injected depend on the seed only, not on the machine's load."""
    extra_node_args: list[str] = field(default_factory=list)
    secure: bool = False
    """TLS everywhere, SASL_SSL (SCRAM-SHA-512) clients, authorization on with ACLs for the
    workload's principal (chaos/secure.py)."""
    nodes: int = 3
    partition_groups: bool = True
    """A Raft group per partition plus the controller (docs/partition-groups.md; off: one
    Raft group, the layout `--no-partition-groups` asks for): the
    topic's replication factor is min(3, nodes); readers read each partition from a node
    hosting it; "the leader" of a fault is the node leading the most data groups."""

    def schedule_options(self) -> ScheduleOptions:
        return ScheduleOptions(
            duration_s=self.seconds,
            kinds=tuple(self.nemeses),
            warmup_s=self.warmup_s,
            cooldown_s=self.cooldown_s,
            fault_min_s=self.fault_min_s,
            fault_max_s=self.fault_max_s,
            gap_min_s=self.gap_min_s,
            gap_max_s=self.gap_max_s,
            nodes=self.nodes,
            partition_groups=self.partition_groups,
        )


def run_campaign(
    seed: int,
    out_dir: str,
    seconds: float | None = None,
    minutes: float | None = None,
    nemeses: list[str] | tuple[str, ...] | None = None,
    keep_data: bool = True,
    **options: Any,
) -> dict[str, Any]:
    """Run one campaign; returns the report (see report.py). The CLI entry point."""
    if seconds is None:
        seconds = 60.0 * (minutes if minutes is not None else 2.0)
    opts = CampaignOptions(seed=seed, seconds=seconds, nemeses=tuple(nemeses or ()), **options)
    if not opts.nemeses:
        opts.nemeses = default_kinds(opts.partition_groups)
    if opts.nodes < 3:
        raise ValueError(f"the campaign needs at least 3 nodes, got {opts.nodes}")
    check_kinds(opts.nemeses, opts.partition_groups)  # before starting anything
    os.makedirs(out_dir, exist_ok=True)
    result = asyncio.run(_campaign(opts, out_dir))
    if not keep_data:
        for i in range(1, opts.nodes + 1):
            shutil.rmtree(os.path.join(out_dir, "cluster", f"node{i}"), ignore_errors=True)
    return result


async def _wait_topic(cluster: ChaosCluster, topic: str, partitions: int) -> None:
    """Until every node lists the topic (with partition groups: and every partition has a
    leader some node reports), so the workload starts on a usable topic."""
    if cluster.security is not None:  # the workload may create and use the topic
        nodes = [p.kafka for p in cluster.peers.values()]
        await asyncio.to_thread(
            cluster.security.grant_workload, cluster.bootstrap_servers, nodes, topic, 60
        )
    producer = Producer({"bootstrap.servers": cluster.bootstrap_servers, **cluster.kafka_conf})
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        with contextlib.suppress(Exception):
            await asyncio.to_thread(producer.list_topics, topic, 5)  # auto-creates it
        ok = 0
        led: set[int] = set()
        for i in cluster.peers:
            client = cluster.client(i)
            try:
                reply = await client.partitions([topic], timeout=2)
                ok += len(reply.partitions) == partitions
                led |= {pi.partition for pi in reply.partitions if pi.leader_id > 0}
            except Exception:
                pass
            finally:
                await client.close()
        if ok == len(cluster.peers) and (not cluster.partition_groups or len(led) == partitions):
            return
        await asyncio.sleep(0.2)
    raise TimeoutError(f"topic {topic} was not created on every node")


def reader_outcomes(ops: list, readers: list[str], ends: dict | None) -> dict[str, bool]:
    """Whether each live reader read to the final ends. A reader that never reported (its
    thread died, or it hung) counts as not caught up: silence is not success. Without final
    ends (no linearizable high watermark) nobody was asked to catch up."""
    out = {op["process"]: op["type"] == "ok" for op in ops if op["f"] == "caught_up"}
    if ends:
        for proc in readers:
            out.setdefault(proc, False)
    return out


async def _final_ends(cluster: ChaosCluster, clients, topic: str) -> dict[int, int] | None:
    """The committed high watermarks: a linearizable Partitions on the leader."""
    if cluster.partition_groups:
        return await _final_ends_groups(clients, topic)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        for _i, client in clients.items():
            try:
                reply = await client.partitions([topic], linearizable=True, timeout=3)
            except Exception:
                continue
            if reply.partitions:
                return {pi.partition: pi.high_watermark for pi in reply.partitions}
        await asyncio.sleep(0.3)
    return None


async def _final_ends_groups(clients, topic: str) -> dict[int, int] | None:
    """With partition groups: each partition's high watermark from a linearizable
    Partitions of its own leader (a node answers -1 for a partition it does not host, so
    no single node's reply has every partition on more nodes than replicas)."""
    deadline = time.monotonic() + 60
    ends: dict[int, int] = {}
    count = None
    while time.monotonic() < deadline:
        for i, client in clients.items():
            try:
                reply = await client.partitions([topic], linearizable=True, timeout=3)
            except Exception:
                continue
            count = len(reply.partitions)
            for pi in reply.partitions:
                if pi.leader_id == i and pi.high_watermark >= 0:
                    ends[pi.partition] = pi.high_watermark
        if count and len(ends) == count:
            return ends
        await asyncio.sleep(0.3)
    return None


async def _campaign(opts: CampaignOptions, out_dir: str) -> dict[str, Any]:
    schedule = make_schedule(opts.seed, opts.schedule_options())
    base = os.path.join(out_dir, "cluster")
    if os.path.exists(base):
        shutil.rmtree(base)
    cluster = ChaosCluster(
        base,
        n=opts.nodes,
        default_partitions=opts.partitions,
        extra_args=opts.extra_node_args,
        secure=opts.secure,
        partition_groups=opts.partition_groups,
    )
    # The membership nemesis calls the read API as `raftsink members` does: with the
    # cluster's client certificate on a secure cluster (tasks copy this context).
    READ_API_CREDENTIALS.set(cluster.read_api_credentials)
    crashes: list[dict[str, Any]] = []
    notes: list[str] = []
    cluster.start()
    try:
        await cluster.wait_ready(timeout=60)
        await _wait_topic(cluster, opts.topic, opts.partitions)
        history = History()
        ctl = Control()
        clients = {i: cluster.client(i) for i in cluster.peers}
        # partition -> the nodes hosting it (every node without partition groups); the
        # move nemesis changes it: readers may meet a node that just left (a failed read,
        # retried elsewhere), and the final reads ask again (below)
        hosts = await replica_map(clients, opts.topic, opts.partitions, cluster.partition_groups)
        bootstrap = cluster.bootstrap_servers
        kconf = cluster.kafka_conf

        producers = [
            ProducerWorker(
                k,
                bootstrap,
                opts.topic,
                opts.partitions,
                opts.rate,
                opts.seed,
                history,
                ctl,
                kafka_conf=kconf,
            )
            for k in range(opts.producers)
        ]
        consumers = [
            KafkaConsumerWorker(
                k, bootstrap, opts.topic, opts.partitions, history, ctl, kafka_conf=kconf
            )
            for k in range(opts.kafka_consumers)
        ]
        kafka_hw = KafkaHwWatcher(bootstrap, opts.topic, opts.partitions, history, kconf)
        for t in (*producers, *consumers, kafka_hw):
            t.start()
        reader_results: dict[str, Any] = {}
        worker_crashes: dict[str, str] = {}
        reader_procs = [READER_PROCESS.format(k) for k in range(opts.read_api_readers)]
        readers = [
            asyncio.create_task(
                read_api_reader(
                    k,
                    clients,
                    opts.topic,
                    opts.partitions,
                    history,
                    ctl,
                    opts.seed,
                    reader_results,
                    hosts,
                )
            )
            for k in range(opts.read_api_readers)
        ]
        watch_stop = asyncio.Event()
        hw_errors: Counter[str] = Counter()
        watcher = asyncio.create_task(
            hw_watcher(cluster, clients, opts.topic, history, watch_stop, hw_errors)
        )

        async def monitor() -> None:
            """A node that exits on its own is a finding: record it, restart it."""
            while not watch_stop.is_set():
                for i, code in cluster.exited().items():
                    if i in cluster.damaged and cluster.repair_if_stopped(i):
                        # the corrupt nemesis' node stopped loudly as it must: repaired
                        history.record("info", "repair", "monitor", node=i, value=code)
                        log.warning("node %d stopped on damaged storage; repaired", i)
                        continue
                    tail = cluster.log_tail(i, 3000)
                    crashes.append({"node": i, "code": code, "time": history.now(), "log": tail})
                    history.record("info", "crash", "monitor", node=i, value=code)
                    log.error("node %d exited with %s; restarting", i, code)
                    cluster.start(i)
                await asyncio.sleep(0.5)

        mon = asyncio.create_task(monitor())
        nemesis = Nemesis(cluster, history, schedule)
        nem_stop = asyncio.Event()
        nem_task = asyncio.create_task(nemesis.run(nem_stop))
        await asyncio.wait([nem_task], timeout=max(0.0, opts.seconds - history.now()))
        if not nem_task.done() and opts.schedule_grace_s > 0:
            late = history.now()
            end = opts.seconds + opts.schedule_grace_s
            await asyncio.wait([nem_task], timeout=max(0.0, end - history.now()))
            notes.append(
                f"the nemesis ran {history.now() - late:.1f} s past the {opts.seconds:.0f} s "
                f"duration to finish its schedule (grace {opts.schedule_grace_s:.0f} s"
                f"{'' if nem_task.done() else ', not enough: the rest was dropped'})"
            )
        nem_stop.set()
        await nem_task
        # The schedule may end early (it leaves a cool-down): run to the full duration.
        await asyncio.sleep(max(0.0, opts.seconds - history.now()))
        workload_end = history.now()

        # ---- heal, stop producing, find the committed ends, drain, read everything
        await asyncio.to_thread(cluster.heal_all)
        try:
            await cluster.wait_ready(timeout=90)
        except (TimeoutError, RuntimeError) as exc:
            notes.append(f"cluster not ready after healing: {exc}")
        ctl.stop_producing.set()
        for t in producers:
            await asyncio.to_thread(t.join, 150)
        history.record("info", "phase", "campaign", value="producers stopped")
        final_kafka: KafkaConsumerWorker | None = None
        ends = await _final_ends(cluster, clients, opts.topic)
        if ends is None:
            notes.append("no linearizable high watermark after healing: final reads skipped")
            ctl.hard_stop.set()
            ends = {}
        else:
            ctl.drain_deadline = time.monotonic() + opts.drain_timeout_s
            ctl.ends = ends
            if cluster.partition_groups:  # where the partitions are now (moves)
                hosts.update(await replica_map(clients, opts.topic, opts.partitions, True))
            final_kafka = KafkaConsumerWorker(
                0,
                bootstrap,
                opts.topic,
                opts.partitions,
                history,
                ctl,
                process="final-kafka",
                as_final=True,
                kafka_conf=kconf,
            )
            final_kafka.start()
            await asyncio.gather(
                *(
                    final_read_node(
                        i,
                        clients[i],
                        opts.topic,
                        {p: e for p, e in ends.items() if i in hosts[p]},
                        history,
                        opts.drain_timeout_s,
                    )
                    for i in sorted(clients)
                    if any(i in hosts[p] for p in ends)
                )
            )
            await asyncio.to_thread(final_kafka.join, opts.drain_timeout_s + 10)
        for t in consumers:
            await asyncio.to_thread(t.join, opts.drain_timeout_s + 10)
        ctl.hard_stop.set()
        for proc, r in zip(
            reader_procs, await asyncio.gather(*readers, return_exceptions=True), strict=True
        ):
            if isinstance(r, Exception):
                worker_crashes[proc] = f"{type(r).__name__}: {r}"
        watch_stop.set()
        kafka_hw.stop.set()
        await asyncio.to_thread(kafka_hw.join, 10)
        await watcher
        await mon
        for c in clients.values():
            await c.close()
    finally:
        cluster.stop()

    ops = history.snapshot()
    history.save(os.path.join(out_dir, "history.jsonl.gz"))
    anomalies = checkers.check_all(ops)
    stats = checkers.stats(ops)
    caught_up = reader_outcomes(ops, [t.proc for t in consumers] + reader_procs, ends)
    workers = [*producers, *consumers, kafka_hw]
    if final_kafka is not None:
        workers.append(final_kafka)
    worker_crashes.update({t.proc: t.crash for t in workers if t.crash})
    finals = {
        op["process"]: op.get("complete", False)
        for op in ops
        if op["f"] == "final_read" and op["type"] == "ok"
    }
    final_read_why = {
        op["process"]: op["why"]
        for op in ops
        if op["f"] == "final_read" and op["type"] == "ok" and op.get("why")
    }
    client_errors = {t.proc: dict(t.errors) for t in producers}
    client_errors.update({t.proc: dict(t.errors) for t in consumers})
    client_errors["kafka-hw"] = dict(kafka_hw.errors)
    client_errors["hw-read-api"] = dict(hw_errors)
    for name, r in reader_results.items():
        client_errors[name] = r["errors"]
    data = report.build(
        seed=opts.seed,
        options={k: v for k, v in asdict(opts).items()},
        schedule=schedule_json(schedule),
        faults=nemesis.done,
        fault_counts=nemesis.counts,
        anomalies=anomalies,
        stats=stats,
        ends=ends,
        caught_up=caught_up,
        final_reads=finals,
        final_read_why=final_read_why,
        crashes=crashes,
        worker_crashes=worker_crashes,
        fatal_producer_errors={t.proc: t.fatal for t in producers if t.fatal},
        unflushed={t.proc: t.unflushed for t in producers},
        client_errors=client_errors,
        notes=notes,
        workload_end=workload_end,
    )
    report.write(out_dir, data, ops)
    return data
