"""`raftsink status`: every node's Raft and partition state, read over the read API.

One line per node (the controller group's role, term, commit/applied, lag, identity and
membership, the partitions it serves); with partition groups, one line per partition
(its data group, leader, term, and every replica's lag behind the leader's commit,
merged from the nodes' own rows); then one line per node that has something to say
(a replacement storage, Kafka overload figures, client quotas, a disk below reserve).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from typing import Any


def cmd_status(args: argparse.Namespace) -> int:
    from sink.cli_connect import use_read_api_connection
    from sink.readapi import ReadApiClient

    credentials = use_read_api_connection(args)  # TLS flags, or cluster.json's
    if args.cluster:
        with open(args.cluster) as f:
            data = json.load(f)
        nodes = {int(i): n["read_api"] for i, n in data["nodes"].items()}
    elif args.nodes:
        nodes = dict(enumerate(args.nodes.split(","), start=1))
    else:
        print("raftsink status: give --cluster FILE or --nodes HOST:PORT,...", file=sys.stderr)
        return 2

    async def gather() -> dict:
        out = {}
        for i, addr in nodes.items():
            client = ReadApiClient(addr, credentials=credentials)
            try:
                out[i] = await client.status(timeout=3.0)
            except Exception as exc:
                details = getattr(exc, "details", None)
                out[i] = {"error": details() if callable(details) else str(exc)}
            finally:
                await client.close()
        return out

    sts = asyncio.run(gather())
    if args.json:
        print(json.dumps(sts, indent=2))
        return 0
    commit = max((st.get("commit", 0) for st in sts.values() if "error" not in st), default=0)
    kinds = member_kinds(sts)
    print(
        f"{'node':>4} {'role':<13} {'term':>5} {'leader':>6} {'commit':>8} {'applied':>8} {'lag':>6}"
        f"  {'incarnation':<16} {'member':<8} {'vote':<4}  partitions"
    )
    for i, st in sorted(sts.items()):
        if "error" in st:
            print(f"{i:>4} {'unreachable':<13} {kinds.get(i, '-'):<8} {st['error']}")
            continue
        parts = ", ".join(f"{k}:{v}" for k, v in sorted(st.get("partitions", {}).items())) or "-"
        inc, member, vote = _identity_columns(i, st)
        print(
            f"{i:>4} {st['role']:<13} {st['term']:>5} {st['leader']:>6} {st['commit']:>8} "
            f"{st['applied']:>8} {commit - st['applied']:>6}  {inc:<16} {kinds.get(i, member):<8} {vote:<4}  {parts}"
        )
    for line in partition_group_lines(sts):
        print(line)
    for i, st in sorted(sts.items()):
        line = _replacement_line(i, st.get("identity"))
        if line:
            print(line)
    for i, st in sorted(sts.items()):
        if "kafka" in st:
            print(_kafka_status_line(i, st["kafka"]))
        if st.get("quotas", {}).get("entities"):
            print(_quota_status_line(i, st["quotas"]))
        line = _disk_line(i, st.get("disk_guard"))
        if line:
            print(line)
        line = latency_line(i, st)
        if line:
            print(line)
    return 0 if all("error" not in st for st in sts.values()) else 1


def _identity_columns(node: int, st: dict) -> tuple[str, str, str]:
    """(incarnation in hex, voter/learner/outside, may it vote now: yes/no)."""
    ident = st.get("identity")
    if not ident:
        return "-", "-", "-"
    ms = st.get("membership", {})
    member = (
        "voter"
        if node in ms.get("voters", [])
        else "learner"
        if node in ms.get("learners", [])
        else "outside"
    )
    return f"{ident['incarnation']:016x}", member, "yes" if ident.get("may_vote") else "no"


def _replacement_line(node: int, ident: dict | None) -> str | None:
    """One line for a node whose storage the cluster does not vouch for (None: fine)."""
    if not ident or not ident.get("replacement"):
        return None
    recorded = ident.get("recorded") or 0
    known = f"knows it as {recorded:016x}" if recorded else "does not know its storage"
    return (
        f"node {node}: REPLACEMENT: storage {ident['incarnation']:016x} "
        f"({ident.get('why', 'new storage')}); the cluster {known}; it votes again once the "
        "leader has caught it up and admitted it (automatic while a leader is up)"
    )


def member_kinds(sts: dict) -> dict[int, str]:
    """node id -> "voter" / "learner" / "removed", from the configuration of the node
    with the highest term and commit index (the leader's, when it answered)."""
    live = [st for st in sts.values() if "error" not in st and "membership" in st]
    if not live:
        return {}
    best = max(live, key=lambda st: (st["role"] == "leader", st["term"], st["commit"]))
    m = best["membership"]
    out = {v: "voter" for v in m.get("voters", [])}
    out.update({v: "learner" for v in m.get("learners", [])})
    for i in sts:
        out.setdefault(i, "removed")
    return out


def _disk_line(node: int, guard: dict | None) -> str | None:
    """One line for a node below its disk reserve (None: nothing to say)."""
    if not guard or guard.get("level", "ok") == "ok":
        return None
    vols = [v for v in guard.get("volumes", []) if v.get("level") != "ok"]
    where = ", ".join(
        f"{v['path']} free {v['free_bytes'] / 1e6:.1f} MB < reserve {v['reserve_bytes'] / 1e6:.1f} MB"
        for v in vols
    )
    effect = "produce refused (KAFKA_STORAGE_ERROR)"
    if guard["level"] == "appends_refused":
        effect += ", not appending replicated entries"
    return (
        f"node {node}: DISK BELOW RESERVE: {where}: {effect}; free space there "
        "(retention, delete files, grow the volume); writes resume by themselves"
    )


LATENCY_APIS = ("Produce", "Fetch")
"""The Kafka APIs `raftsink status` shows latency of (every API is in --json and /metrics)."""


def latency_line(node: int, st: dict) -> str | None:
    """Since the node started: p50 / p99 of its Produce and Fetch requests (dispatch to
    response written; a Fetch's includes its long-poll wait) and of its disk rounds."""
    parts = []
    for api in LATENCY_APIS:
        h = (st.get("kafka_requests") or {}).get(api) or {}
        if h.get("count"):
            parts.append(f"{api} p50 {h['p50_ms']:g} / p99 {h['p99_ms']:g} ms ({h['count']})")
    d = (st.get("host") or {}).get("disk_round_ms") or {}
    if d.get("count"):
        parts.append(f"disk rounds p50 {d['p50_ms']:g} / p99 {d['p99_ms']:g} ms ({d['count']})")
    return f"{node:>4} latency since start: " + "; ".join(parts) if parts else None


def _quota_status_line(node: int, q: dict) -> str:
    """One line per node where client quotas are configured: the most throttled clients."""
    top = sorted(q.get("throttled_ms", {}).items(), key=lambda kv: -kv[1])[:3]
    who = ", ".join(f"{name} {ms} ms" for name, ms in top) or "none"
    return f"{node:>4} quotas: {q['entities']} entities configured; throttled so far: {who}"


def _kafka_status_line(node: int, k: dict) -> str:
    """One line of `raftsink status` per node: memory budgets in use, refused connections."""
    mib = 1 << 20
    refused = {
        name.removeprefix("refused_connections_"): int(v)
        for name, v in k.items()
        if name.startswith("refused_connections_") and v
    }
    why = ", ".join(f"{r}={n}" for r, n in sorted(refused.items()))
    return (
        f"{node:>4} kafka: {int(k.get('connections', 0))} connections; request memory "
        f"{k.get('request_memory_used_bytes', 0) / mib:.1f}/"
        f"{k.get('request_memory_limit_bytes', 0) / mib:.0f} MiB"
        f" ({int(k.get('request_memory_waiting', 0))} waiting); fetch memory "
        f"{k.get('fetch_memory_used_bytes', 0) / mib:.1f}/"
        f"{k.get('fetch_memory_limit_bytes', 0) / mib:.0f} MiB; refused connections "
        f"{int(k.get('rejected_connections', 0))}" + (f" ({why})" if why else "")
    )


def partition_group_lines(sts: dict[int, dict[str, Any]]) -> list[str]:
    """With partition groups: one line per partition, merged from every node's hosted
    groups (`data_groups.groups`). The leader is the replica that says it leads at the
    highest term; each replica's lag is the leader's commit index minus what the
    replica applied ("?": its node did not answer or does not host it yet, "down"
    when unreachable). Empty without partition groups."""
    rows: dict[int, dict[int, dict[str, Any]]] = {}
    for node, st in sts.items():
        for row in (st.get("data_groups") or {}).get("groups", []):
            rows.setdefault(row["group"], {})[node] = row
    if not rows:
        return []
    out = [
        f"partition groups ({len(rows)}): replica lag = leader's commit - replica's applied",
        f"{'topic':<24} {'part':>4} {'group':>6} {'leader':>6} {'term':>5} {'commit':>8}  replicas",
    ]

    def order(item: tuple[int, dict[int, dict[str, Any]]]) -> tuple[str, int, int]:
        any_row = next(iter(item[1].values()))
        return (any_row["topic"] or "", any_row["partition"], item[0])

    for gid, by_node in sorted(rows.items(), key=order):
        any_row = next(iter(by_node.values()))
        leaders = [r for r in by_node.values() if r["role"] == "leader"]
        lead = max(leaders, key=lambda r: r["term"]) if leaders else None
        term = lead["term"] if lead else max(r["term"] for r in by_node.values())
        commit = lead["commit"] if lead else max(r["commit"] for r in by_node.values())
        cells = []
        for n in any_row["replicas"]:
            r = by_node.get(n)
            if r is None:
                cells.append(f"{n}:{'down' if 'error' in sts.get(n, {'error': 1}) else '?'}")
            else:
                mark = "*" if lead is not None and r is lead else ""
                cells.append(f"{n}{mark}:{max(0, commit - r['applied'])}")
        leader = str(lead["leader"]) if lead else "none"
        topic = any_row["topic"] or "(deleted)"
        out.append(
            f"{topic:<24} {any_row['partition']:>4} {gid:>6} {leader:>6} {term:>5} "
            f"{commit:>8}  {' '.join(cells)}"
        )
    return out
