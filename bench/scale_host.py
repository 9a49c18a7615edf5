"""Many Raft groups per process (RaftHost): idle cost and the shared fsync round.

Part of issue 16's bench/scale.py to come. Two measurements:

(idle) 3 host processes (python -m raftlog.host_process) on 127.0.0.1, each hosting
    every one of G idle groups (RF 3), G in {10, 100, 1000}; heartbeats either one
    message per group (--no-coalesce, "before") or coalesced per peer ("after").
    Once every group has a leader (settle), each process's CPU (utime + stime from
    /proc/<pid>/stat) is measured over --seconds: CPU % of one core per node, and
    Raft messages sent per second per peer.
(fsync, the research note's c5) storage only, in this process: G in {1, 4, 16, 64}
    active groups each appending 8 KiB per round, for --fsync-seconds:
      host     the real DiskWriter + LogEnvironment (one write per group file, one
               fsync round over the files, on its 16 sync threads); host1: 1 sync thread
      perfile  raw os.pwrite + fdatasync per file, serially
      pool4    raw, the per-file fdatasyncs on a pool of 4 threads (pool16: 16)
      journal  raw, one shared file: one write of every group's 8 KiB, one fdatasync
    rounds/s and MB/s; the choice rule: per-file if >= 0.7 x journal at G = 16.

Every phase prints wall time and CPU time (/proc). The last line is one JSON object.

    python bench/scale_host.py [--groups 10,100,1000] [--seconds 60] [--quick]
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import json
import os
import shutil
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from common import machine

from raftlog.entry import EntryType, LogEntry
from raftlog.process_cluster import RaftProcessCluster
from raftlog.storage import DiskQueue, DiskWriter, LogEnvironment

_TICK = os.sysconf("SC_CLK_TCK")
ROUND_BYTES = 8 * 1024


def proc_cpu_s(pid: int | str = "self") -> float:
    """utime + stime of a process, in seconds, from /proc/<pid>/stat."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _TICK


def loadavg() -> str:
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


# --------------------------------------------------------------------- idle


async def _all_led(c: RaftProcessCluster, groups: int) -> tuple[bool, dict]:
    sts = {}
    for i in c.alive():
        st = await c.status(i)
        if st is None:
            return False, {}
        sts[i] = st
    led = set()
    for st in sts.values():
        led.update(g for g, s in st["by_group"].items() if s["role"] == "leader")
    return len(sts) == 3 and len(led) == groups, sts


async def idle_run(
    base: str, groups: int, coalesce: bool, seconds: float, settle: float, tick_ms: int
) -> dict:
    extra = ("--groups", str(groups), "--tick-ms", str(tick_ms))
    extra += () if coalesce else ("--no-coalesce",)
    c = RaftProcessCluster(base, module="raftlog.host_process", extra_args=extra)
    t_start = time.monotonic()
    c.start()
    try:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + settle
        sts: dict = {}
        ok = False
        while loop.time() < deadline:
            ok, sts = await _all_led(c, groups)
            if ok:
                break
            await asyncio.sleep(0.5)
        settle_s = time.monotonic() - t_start
        pids = {i: nd.proc.pid for i, nd in c.nodes.items()}
        cpu0 = {i: proc_cpu_s(p) for i, p in pids.items()}
        sent0 = {i: st["transport"]["sent_messages"] for i, st in sts.items()}
        t0 = time.monotonic()
        await asyncio.sleep(seconds)  # the measured window: nothing to wait for but time
        wall = time.monotonic() - t0
        cpu1 = {i: proc_cpu_s(p) for i, p in pids.items()}
        sts1 = {}
        for i in c.alive():
            st = await c.status(i)
            if st is not None:
                sts1[i] = st
        pct = {i: 100 * (cpu1[i] - cpu0[i]) / wall for i in pids}
        msgs = {
            i: (sts1[i]["transport"]["sent_messages"] - sent0.get(i, 0)) / wall / 2
            for i in sts1
            if i in sent0
        }
        leaders = {i: st["leaders"] for i, st in sts1.items()}
        return {
            "groups": groups,
            "tick_ms": tick_ms,
            "coalesce": coalesce,
            "settled": ok,
            "settle_s": round(settle_s, 1),
            "wall_s": round(wall, 1),
            "cpu_pct_per_node": {i: round(v, 1) for i, v in pct.items()},
            "cpu_pct_mean": round(sum(pct.values()) / len(pct), 1),
            "msgs_per_s_per_peer": {i: round(v) for i, v in msgs.items()},
            "leaders_per_node": leaders,
        }
    finally:
        c.stop_all()
        shutil.rmtree(base, ignore_errors=True)


# -------------------------------------------------------------------- fsync


async def host_fsync(root: str, groups: int, seconds: float, sync_threads: int) -> dict:
    env = LogEnvironment.open(root)
    w = DiskWriter(sync_threads=sync_threads)
    queues = [DiskQueue(env.open_log(g), writer=w) for g in range(1, groups + 1)]
    data = os.urandom(ROUND_BYTES)
    n = 0
    t0 = time.monotonic()
    c0 = proc_cpu_s()
    while time.monotonic() - t0 < seconds:
        n += 1
        await asyncio.gather(*(q.append([LogEntry(n, 1, EntryType.DATA, data)]) for q in queues))
    wall = time.monotonic() - t0
    cpu = proc_cpu_s() - c0
    rounds = w.stats.rounds
    for q in queues:
        await q.close()
    await w.close()
    env.close()
    return _fsync_figures("host", groups, n, wall, cpu, writer_rounds=rounds)


def _fsync_figures(design: str, groups: int, rounds: int, wall: float, cpu: float, **kw) -> dict:
    return {
        "design": design,
        "groups": groups,
        "rounds_per_s": round(rounds / wall, 1),
        "mb_s": round(rounds * groups * ROUND_BYTES / wall / (1 << 20), 2),
        "wall_s": round(wall, 2),
        "cpu_s": round(cpu, 2),
        **kw,
    }


def raw_fsync(root: str, design: str, groups: int, seconds: float) -> dict:
    os.makedirs(root, exist_ok=True)
    nfiles = 1 if design == "journal" else groups
    fds = [
        os.open(os.path.join(root, f"f{k}"), os.O_WRONLY | os.O_CREAT, 0o644) for k in range(nfiles)
    ]
    data = os.urandom(ROUND_BYTES)
    threads = int(design[4:]) if design.startswith("pool") else 0
    pool = concurrent.futures.ThreadPoolExecutor(threads) if threads else None
    offs = [0] * nfiles
    n = 0
    t0 = time.monotonic()
    c0 = proc_cpu_s()
    try:
        while time.monotonic() - t0 < seconds:
            n += 1
            if design == "journal":
                buf = data * groups
                os.pwrite(fds[0], buf, offs[0])
                offs[0] += len(buf)
                os.fdatasync(fds[0])
                continue
            for k, fd in enumerate(fds):
                os.pwrite(fd, data, offs[k])
                offs[k] += len(data)
            if pool is None:
                for fd in fds:
                    os.fdatasync(fd)
            else:
                list(pool.map(os.fdatasync, fds))
    finally:
        if pool is not None:
            pool.shutdown()
        for fd in fds:
            os.close(fd)
    return _fsync_figures(design, groups, n, time.monotonic() - t0, proc_cpu_s() - c0)


async def fsync_phase(base: str, sizes: list[int], seconds: float) -> list[dict]:
    out = []
    for g in sizes:
        for design in ("host1", "host", "perfile", "pool4", "pool16", "journal"):
            root = os.path.join(base, f"fs-{design}-{g}")
            if design.startswith("host"):
                r = await host_fsync(root, g, seconds, 1 if design == "host1" else 16)
                r["design"] = design
            else:
                r = raw_fsync(root, design, g, seconds)
            shutil.rmtree(root, ignore_errors=True)
            print(
                f"  fsync {design:8s} G={g:3d}: {r['rounds_per_s']:8.1f} rounds/s "
                f"{r['mb_s']:7.2f} MB/s  wall {r['wall_s']} s cpu {r['cpu_s']} s",
                flush=True,
            )
            out.append(r)
    return out


# --------------------------------------------------------------------- main


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--groups", default="10,100,1000", help="idle group counts")
    ap.add_argument("--seconds", type=float, default=60.0, help="idle measuring window")
    ap.add_argument("--settle", type=float, default=120.0, help="max wait for every leader")
    ap.add_argument("--tick-ms", type=int, default=30, help="tick of the idle runs")
    ap.add_argument(
        "--slow-tick-1000",
        type=int,
        default=150,
        help="also run 1000 groups at this tick (0: no); Redpanda beats every 150 ms",
    )
    ap.add_argument("--fsync-groups", default="1,4,16,64")
    ap.add_argument("--fsync-seconds", type=float, default=5.0)
    ap.add_argument("--skip-idle", action="store_true")
    ap.add_argument("--skip-fsync", action="store_true")
    ap.add_argument("--quick", action="store_true", help="10,100 groups; 10 s windows")
    args = ap.parse_args()
    if args.quick:
        args.groups, args.seconds, args.fsync_seconds = "10,100", 10.0, 2.0
    print(f"machine: {machine()}; load average {loadavg()}", flush=True)
    base = tempfile.mkdtemp(prefix="scale_host_")
    t_all, c_all = time.monotonic(), proc_cpu_s()
    figures: dict = {"nproc": os.cpu_count(), "loadavg_start": loadavg()}
    try:
        if not args.skip_idle:
            idle = []
            plan = [(int(x), args.tick_ms) for x in args.groups.split(",")]
            if args.slow_tick_1000 and "1000" in args.groups.split(","):
                plan.append((1000, args.slow_tick_1000))
            for g, tick in plan:
                for coalesce in (False, True):
                    r = await idle_run(
                        os.path.join(base, f"idle-{g}-{tick}-{coalesce}"),
                        g,
                        coalesce,
                        args.seconds,
                        args.settle,
                        tick,
                    )
                    print(
                        f"  idle G={g:4d} tick {tick} ms "
                        f"{'coalesced' if coalesce else 'per-group'}: "
                        f"cpu % per node {r['cpu_pct_per_node']} (mean {r['cpu_pct_mean']}), "
                        f"msgs/s per peer {r['msgs_per_s_per_peer']}, leaders {r['leaders_per_node']}"
                        f", settled {r['settled']} in {r['settle_s']} s, window {r['wall_s']} s",
                        flush=True,
                    )
                    idle.append(r)
                    key = ("after" if coalesce else "before") + (
                        "" if tick == args.tick_ms else f"_tick{tick}"
                    )
                    figures[f"idle_cpu_pct_per_node_{g}_groups_{key}"] = r["cpu_pct_mean"]
                    figures[f"idle_settled_{g}_groups_{key}"] = r["settled"]
            figures["idle"] = idle
        if not args.skip_fsync:
            fs = await fsync_phase(
                base, [int(x) for x in args.fsync_groups.split(",")], args.fsync_seconds
            )
            for r in fs:
                figures[f"fsync_mb_s_{r['design']}_{r['groups']}"] = r["mb_s"]
            j16 = figures.get("fsync_mb_s_journal_16")
            h16 = figures.get("fsync_mb_s_host_16")
            if j16 and h16:
                figures["perfile_vs_journal_16"] = round(h16 / j16, 2)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    figures["loadavg_end"] = loadavg()
    figures["wall_s"] = round(time.monotonic() - t_all, 1)
    figures["bench_process_cpu_s"] = round(proc_cpu_s() - c_all, 1)
    print(
        f"total wall {figures['wall_s']} s; this process's CPU {figures['bench_process_cpu_s']} s"
    )
    print(json.dumps(figures))


if __name__ == "__main__":
    asyncio.run(main())
