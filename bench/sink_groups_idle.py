"""Idle cost of a raftsink cluster with partition groups, quiescence off and on (issue 16).

3 `raftsink serve` processes with cluster.partition_groups on; T topics of P partitions
(RF 3: every node hosts every group), as a module-scoped test cluster accumulates them
(test_client_windows.py's full run: about 47 topics of 3 partitions, 140 data groups).
Once every group has a leader and serves, a settle period, then each process's CPU
(utime + stime from /proc) over --seconds: % of one core per node. Quiescence is
raft.quiesce_ticks (0 = off, the default; 6 = the tested value).

    python -m bench.sink_groups_idle [--topics 47] [--partitions 3] [--seconds 20]
        [--settle 10] [--quiesce 0,6]

The last line is one JSON object: idle_cpu_pct_per_node_q{ticks} and the time every
group took to lead (led_s_q{ticks}) per quiescence setting.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import tempfile
import time

from bench.common import cpu_seconds, loadavg
from sink.process_cluster import SinkProcessCluster


async def _rows(c: SinkProcessCluster) -> list[dict] | None:
    rows: list[dict] = []
    for i in c.alive():
        st = await c.status(i, timeout=10.0)
        if st is None or "data_groups" not in st:
            return None
        rows += st["data_groups"]["groups"]
    return rows


def _all_led(rows: list[dict], groups: int) -> bool:
    led = {r["group"] for r in rows if r["role"] == "leader" and r["serving"]}
    return len(led) >= groups


def _create(admin, topic) -> None:
    """Create one topic; a controller election meanwhile (NOT_CONTROLLER) is retried, as
    Kafka's admin clients do; TOPIC_ALREADY_EXISTS after a retry means it was created."""
    from confluent_kafka import KafkaError, KafkaException

    deadline = time.monotonic() + 120
    retried = False
    while True:
        try:
            admin.create_topics([topic])[topic.topic].result(60)
            return
        except KafkaException as exc:
            code = exc.args[0].code()
            if retried and code == KafkaError.TOPIC_ALREADY_EXISTS:
                return
            if code != KafkaError.NOT_CONTROLLER or time.monotonic() > deadline:
                raise
            retried = True
            time.sleep(0.5)


async def idle_run(topics: int, partitions: int, quiesce: int, seconds: float, settle: float):
    from confluent_kafka.admin import AdminClient, NewTopic

    base = tempfile.mkdtemp(prefix="sink-groups-idle-")
    c = SinkProcessCluster(
        base, 3, partition_groups=True, extra_args=["--raft-quiesce-ticks", str(quiesce)]
    )
    try:
        c.start()
        await c.wait_ready(timeout=60)
        admin = AdminClient({"bootstrap.servers": c.bootstrap_servers})
        t0 = time.monotonic()
        for t in range(topics):  # one at a time, as tests create them
            _create(admin, NewTopic(f"idle-{t}", partitions, 3))
        groups = topics * partitions
        deadline = time.monotonic() + 300
        while True:
            rows = await _rows(c)
            if rows is not None and _all_led(rows, groups):
                break
            if time.monotonic() > deadline:
                raise TimeoutError(f"{groups} groups not all led after 300 s")
            await asyncio.sleep(0.5)
        led_s = time.monotonic() - t0
        await asyncio.sleep(settle)
        pids = [n.proc.pid for n in c.nodes.values() if n.proc is not None]
        terms0 = {(r["group"], r["term"]) for r in await _rows(c) or []}
        cpu0, w0 = cpu_seconds(pids), time.monotonic()
        await asyncio.sleep(seconds)
        cpu1, w1 = cpu_seconds(pids), time.monotonic()
        rows = await _rows(c) or []
        elections = len({(r["group"], r["term"]) for r in rows} - terms0)
        return {
            "groups": groups,
            "quiesce_ticks": quiesce,
            "led_s": round(led_s, 1),
            "idle_cpu_pct_per_node": round(100 * (cpu1 - cpu0) / (w1 - w0) / len(pids), 2),
            "term_changes_while_idle": elections,
            "load": loadavg(),
        }
    except BaseException:
        print(f"failed; node logs kept in {base}", flush=True)
        base = ""
        raise
    finally:
        c.stop()
        if base:
            shutil.rmtree(base, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--topics", type=int, default=47)
    ap.add_argument("--partitions", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--settle", type=float, default=10.0)
    ap.add_argument("--quiesce", default="0,6", help="raft.quiesce_ticks values to run")
    a = ap.parse_args()
    out: dict[str, object] = {}
    for q in (int(x) for x in a.quiesce.split(",")):
        r = asyncio.run(idle_run(a.topics, a.partitions, q, a.seconds, a.settle))
        print(json.dumps(r), flush=True)
        out[f"idle_cpu_pct_per_node_q{q}"] = r["idle_cpu_pct_per_node"]
        out[f"led_s_q{q}"] = r["led_s"]
        out[f"term_changes_while_idle_q{q}"] = r["term_changes_while_idle"]
    print(json.dumps(out))


if __name__ == "__main__":
    main()
