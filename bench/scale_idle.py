"""Idle cost of many Raft groups per process, with and without quiescence (issue 16).

3 real host processes (python -m raftlog.host_process) on 127.0.0.1, each hosting
a replica of every one of G idle groups (RF 3), G in {10, 100, 1000}, once with
quiescence on (the default) and once with --no-quiesce (every group heartbeats
every tick, coalesced per peer). After every group has a leader, a settle period
(--settle, default 15 s) lets idle groups quiesce; then each process's CPU
(utime + stime from /proc/<pid>/stat) is measured over --seconds (default 30):
CPU % of one core per node, Raft messages sent per second per peer and group
beat rows per second per node (from the host's counters).

The last line is one JSON object with idle_cpu_pct_per_node_{10,100,1000}_groups,
idle_msgs_per_s_per_peer (at the largest G) and the same with a _no_quiesce suffix.
Target (issue 16): idle_cpu_pct_per_node_1000_groups <= 10.

    python -m bench.scale_idle [--groups 10,100,1000] [--seconds 30] [--settle 15] [--quick]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import tempfile
import time

from bench.common import cpu_seconds, loadavg
from raftlog.process_cluster import RaftProcessCluster
from raftlog.runtime import NodeOptions


async def _statuses(c: RaftProcessCluster) -> dict[int, dict] | None:
    """Every node's Status, or None if one does not answer (yet). A Status of 1,000
    groups is a large JSON answer from a busy process: allow it 20 s."""
    out = {}
    for i in c.alive():
        try:
            out[i] = await c.call(i, "Status", timeout=20.0)
        except Exception:
            return None
    return out if len(out) == len(c.nodes) else None


def _all_led(sts: dict[int, dict], groups: int) -> bool:
    led = {g for st in sts.values() for g, s in st["by_group"].items() if s["role"] == "leader"}
    return len(led) == groups


async def idle_run(
    base: str,
    groups: int,
    quiesce: bool,
    seconds: float,
    settle: float,
    settle_max: float,
    election_ticks: int,
) -> dict:
    extra: tuple[str, ...] = ("--groups", str(groups), "--election-ticks", str(election_ticks))
    if not quiesce:
        extra += ("--no-quiesce",)
    load_before = loadavg()
    c = RaftProcessCluster(base, module="raftlog.host_process", extra_args=extra)
    t_start = time.monotonic()
    c.start()
    try:
        loop = asyncio.get_running_loop()
        # Opening 1,000 groups and electing them takes minutes on a loaded 2-core box;
        # a run that never settles (every group led) is measured anyway and says so.
        deadline = loop.time() + settle_max
        sts: dict[int, dict] | None = None
        settled = False
        while loop.time() < deadline:
            sts = await _statuses(c)
            if sts is not None and _all_led(sts, groups):
                settled = True
                break
            await asyncio.sleep(0.5)
        while sts is None:  # the processes serve Status only once every group is open
            assert loop.time() < deadline + 600, f"G={groups}: processes never answered"
            await asyncio.sleep(0.5)
            sts = await _statuses(c)
        led_s = time.monotonic() - t_start
        await asyncio.sleep(settle)  # idle groups quiesce here (nothing to wait for but time)
        sts0 = await _statuses(c)
        while sts0 is None:  # a slow answer: ask again (the window has not started)
            sts0 = await _statuses(c)
        pids = {i: nd.proc.pid for i, nd in c.nodes.items() if nd.proc is not None}
        cpu0 = {i: cpu_seconds([p]) for i, p in pids.items()}
        t0 = time.monotonic()
        await asyncio.sleep(seconds)  # the measured window
        wall = time.monotonic() - t0
        cpu1 = {i: cpu_seconds([p]) for i, p in pids.items()}
        sts1 = await _statuses(c)
        while sts1 is None:
            sts1 = await _statuses(c)
        pct = {i: 100 * (cpu1[i] - cpu0[i]) / wall for i in pids}
        peers = len(c.nodes) - 1

        def rate(key: str, i: int, per_peer: bool = False) -> float:
            d = (sts1[i][key] if key in sts1[i] else sts1[i]["transport"][key]) - (
                sts0[i][key] if key in sts0[i] else sts0[i]["transport"][key]
            )
            return d / wall / (peers if per_peer else 1)

        msgs = {i: rate("sent_messages", i, per_peer=True) for i in pids}
        rows = {i: rate("beat_rows_sent", i) for i in pids}
        quiesced = {i: sts1[i].get("quiesced_groups", 0) for i in pids}
        # What the groups that are not quiesced are doing (role, and term > 1: re-elected)
        awake: dict[int, dict[str, int]] = {}
        for i in pids:
            counts: dict[str, int] = {}
            for g in sts1[i]["by_group"].values():
                if not g.get("quiesced"):
                    k = f"{g['role']}{'' if g['term'] <= 1 else '+'}"
                    counts[k] = counts.get(k, 0) + 1
            awake[i] = counts
        return {
            "groups": groups,
            "quiesce": quiesce,
            "settled": settled,
            "election_ticks": election_ticks,
            "led_s": round(led_s, 1),
            "wall_s": round(wall, 1),
            "cpu_pct_per_node": {i: round(v, 2) for i, v in pct.items()},
            "cpu_pct_mean": round(sum(pct.values()) / len(pct), 2),
            "msgs_per_s_per_peer": {i: round(v, 1) for i, v in msgs.items()},
            "msgs_per_s_per_peer_mean": round(sum(msgs.values()) / len(msgs), 1),
            "beat_rows_per_s_per_node": {i: round(v, 1) for i, v in rows.items()},
            "quiesced_groups_per_node": quiesced,
            "awake_groups_per_node": awake,
            "liveness_wakes": {i: sts1[i].get("liveness_wakes", 0) for i in pids},
            "leaders_per_node": {i: st["leaders"] for i, st in sts1.items()},
            "peers_declared_down": {i: st.get("peers_declared_down", 0) for i, st in sts1.items()},
            "campaigns_deferred": {i: st.get("campaigns_deferred", 0) for i, st in sts1.items()},
            "loadavg_before": load_before,
            "loadavg_after": loadavg(),
        }
    finally:
        c.stop_all()
        shutil.rmtree(base, ignore_errors=True)


def _table(results: list[dict]) -> str:
    head = (
        f"{'G':>5} {'quiesce':>7} {'cpu%/node (mean)':>17} {'per node':>24} "
        f"{'msgs/s/peer':>11} {'rows/s/node':>11} {'quiesced/node':>15}"
    )
    lines = [head, "-" * len(head)]
    for r in results:
        per = " ".join(f"{v:.1f}" for v in r["cpu_pct_per_node"].values())
        rows = sum(r["beat_rows_per_s_per_node"].values()) / len(r["beat_rows_per_s_per_node"])
        q = "/".join(str(v) for v in r["quiesced_groups_per_node"].values())
        lines.append(
            f"{r['groups']:>5} {'on' if r['quiesce'] else 'off':>7} {r['cpu_pct_mean']:>17.2f} "
            f"{per:>24} {r['msgs_per_s_per_peer_mean']:>11.1f} {rows:>11.1f} {q:>15}"
        )
    return "\n".join(lines)


async def main_async(args: argparse.Namespace) -> dict:
    groups = [int(g) for g in args.groups.split(",")]
    results: list[dict] = []
    root = tempfile.mkdtemp(prefix="scale-idle-")
    try:
        for g in groups:
            for quiesce in [m == "on" for m in args.modes.split(",")]:
                t0 = time.monotonic()
                r = await idle_run(
                    os.path.join(root, f"g{g}-{int(quiesce)}"),
                    g,
                    quiesce,
                    args.seconds,
                    args.settle,
                    args.settle_max,
                    args.election_ticks,
                )
                print(
                    f"G={g} quiesce={'on' if quiesce else 'off'}: cpu%/node {r['cpu_pct_per_node']} "
                    f"msgs/s/peer {r['msgs_per_s_per_peer_mean']} "
                    f"quiesced {r['quiesced_groups_per_node']} awake {r['awake_groups_per_node']} "
                    f"liveness wakes {r['liveness_wakes']} settled={r['settled']} "
                    f"led after {r['led_s']} s ({time.monotonic() - t0:.0f} s) "
                    f"down {r['peers_declared_down']} deferred {r['campaigns_deferred']} "
                    f"load {r['loadavg_before']} -> {r['loadavg_after']}",
                    flush=True,
                )
                results.append(r)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print(_table(results))
    out: dict = {
        "nproc": os.cpu_count(),
        "loadavg_end": loadavg(),
        "election_ticks": args.election_ticks,
    }
    big = max(groups)
    for r in results:
        suffix = "" if r["quiesce"] else "_no_quiesce"
        out[f"idle_cpu_pct_per_node_{r['groups']}_groups{suffix}"] = r["cpu_pct_mean"]
        out[f"settled_{r['groups']}_groups{suffix}"] = r["settled"]
        out[f"idle_cpu_pct_per_node_max_{r['groups']}_groups{suffix}"] = round(
            max(r["cpu_pct_per_node"].values()), 2
        )
        if r["groups"] == big:
            out[f"idle_msgs_per_s_per_peer{suffix}"] = r["msgs_per_s_per_peer_mean"]
            out[f"idle_beat_rows_per_s_per_node{suffix}"] = round(
                sum(r["beat_rows_per_s_per_node"].values()) / len(r["beat_rows_per_s_per_node"]),
                1,
            )
    key = f"idle_cpu_pct_per_node_{big}_groups"
    if big == 1000 and key in out:
        out["target_idle_cpu_1000_groups_met"] = out[key] <= 10
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--groups", default="10,100,1000")
    ap.add_argument("--seconds", type=float, default=30.0, help="measured window per run")
    ap.add_argument("--settle", type=float, default=15.0, help="idle time before the window")
    ap.add_argument(
        "--settle-max",
        type=float,
        default=240.0,
        help="longest wait for every group to have a leader before measuring anyway",
    )
    ap.add_argument(
        "--election-ticks",
        type=int,
        default=NodeOptions().election_ticks,
        help="election timeout in 30 ms ticks; idle cost does not depend on it, but 1,000 "
        "groups starting at once on a loaded 2-core box only finish electing with a longer one",
    )
    ap.add_argument("--modes", default="on,off", help="quiescence on, off or both (on,off)")
    ap.add_argument("--quick", action="store_true", help="10 s windows, 10 s settle")
    args = ap.parse_args()
    if args.quick:
        args.seconds, args.settle = 10.0, 10.0
    out = asyncio.run(main_async(args))
    print(json.dumps(out, sort_keys=True))


if __name__ == "__main__":
    main()
