"""A standalone raftlog host process: many Raft groups in one process (RaftHost).

Like node_process, for multi-process tests and bench/scale_host.py: real
storage (one LogEnvironment), real gRPC (one transport), one recording FSM per
group. Groups 1..N are created (or reopened) at start. JSON control API:

    Status   {} -> host counters, CPU seconds, and per group role/term/leader/commit/applied
    Propose  {"group", "values": [hex, ...]} -> {"indexes": [...]}  (the group's leader only)
    Applied  {"group", "start", "max"} -> {"rows": [[index, hex], ...], "total"}

    python -m raftlog.host_process --id 1 --raft 127.0.0.1:7001 --control 127.0.0.1:7101 \\
        --peers 1=127.0.0.1:7001,2=...,3=... --data-dir DIR --groups 16
"""

from __future__ import annotations

# isort: off
# First, before grpc is imported: gRPC core reads its settings once, at import.
import raftlog.grpc_env  # noqa: F401
# isort: on

import argparse
import asyncio
import json
import logging
import os
import sys

import grpc

from raftlog.node_process import RecordingStateMachine, _parse_peers, serve_control_until_signal
from raftlog.runtime import (
    HostOptions,
    NodeOptions,
    NotLeaderError,
    RaftError,
    RaftGroup,
    RaftHost,
)
from raftlog.transport import GrpcTransport

log = logging.getLogger("raftlog.host_process")

_CONTROL = "raftlog.Control"


class HostControl:
    def __init__(self, host: RaftHost, fsms: dict[int, RecordingStateMachine]) -> None:
        self.host = host
        self.fsms = fsms

    def _group(self, req: dict) -> RaftGroup:
        gid = req.get("group")
        group = self.host.groups.get(gid) if isinstance(gid, int) else None
        if group is None:
            raise KeyError(f"no group {gid!r} here")
        return group

    async def status(self, req: dict) -> dict:
        st = self.host.status()
        t = os.times()
        st["cpu_s"] = t.user + t.system
        st["transport"] = {
            "sent_messages": self.host.transport.stats.sent_messages,
            "received_messages": self.host.transport.stats.received_messages,
            "unknown_group_messages": self.host.transport.stats.unknown_group_messages,
        }
        st["by_group"] = {
            str(gid): {
                "role": g.role.value,
                "term": g.term,
                "leader": g.leader_id,
                "commit": g.commit_index,
                "quiesced": g.quiesced,
                "applied_entries": len(self.fsms[gid].applied),
                "fatal": repr(g.fatal_error) if g.fatal_error else None,
            }
            for gid, g in self.host.groups.items()
        }
        return st

    async def propose(self, req: dict) -> dict:
        values = [bytes.fromhex(v) for v in req["values"]]
        results = await self._group(req).apply_batch(values, timeout=req.get("timeout"))
        return {"indexes": [r.index for r in results]}

    async def applied(self, req: dict) -> dict:
        fsm = self.fsms[self._group(req).group_id]
        start, n = req.get("start", 0), req.get("max", 1 << 30)
        rows = fsm.applied[start : start + n]
        return {"rows": [[i, d.hex()] for i, d in rows], "total": len(fsm.applied)}

    def handler(self) -> grpc.GenericRpcHandler:
        def unary(fn):
            async def call(request: bytes, context: grpc.aio.ServicerContext) -> bytes:
                try:
                    out = await fn(json.loads(request or b"{}"))
                except NotLeaderError as exc:
                    out = {"error": "not_leader", "leader": exc.leader_id, "detail": str(exc)}
                except RaftError as exc:
                    out = {"error": type(exc).__name__, "detail": str(exc)}
                except (KeyError, ValueError, TypeError) as exc:  # bad request: answer, not crash
                    out = {"error": "bad_request", "detail": str(exc)}
                return json.dumps(out).encode()

            return grpc.unary_unary_rpc_method_handler(call)

        return grpc.method_handlers_generic_handler(
            _CONTROL,
            {
                "Status": unary(self.status),
                "Propose": unary(self.propose),
                "Applied": unary(self.applied),
            },
        )


async def serve(args: argparse.Namespace) -> None:
    peers = _parse_peers(args.peers)
    transport = GrpcTransport(
        args.id, args.raft, {i: a for i, a in peers.items() if i != args.id}, groups=()
    )
    host = RaftHost(
        args.id,
        transport,
        data_dir=args.data_dir,
        options=HostOptions(
            tick_ms=args.tick_ms,
            coalesce_heartbeats=not args.no_coalesce,
            quiesce=not args.no_quiesce,
            beat_ticks=args.heartbeat_ticks,
        ),
    )
    options = NodeOptions(
        tick_ms=args.tick_ms,
        election_ticks=args.election_ticks,
        heartbeat_ticks=args.heartbeat_ticks,
        quiesce_ticks=args.quiesce_ticks,
    )
    await host.start()
    fsms: dict[int, RecordingStateMachine] = {}
    for gid in range(1, args.groups + 1):
        fsms[gid] = RecordingStateMachine()
        await host.add_group(gid, peers, fsms[gid], options, seed=args.id * 1_000_003 + gid)
    await serve_control_until_signal(
        HostControl(host, fsms).handler(),
        args.control,
        f"ready node={args.id} groups={args.groups} control={args.control}",
    )
    await host.stop()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="run one raftlog host process (many groups)")
    ap.add_argument("--id", type=int, required=True)
    ap.add_argument("--raft", required=True, help="HOST:PORT for Raft traffic")
    ap.add_argument("--control", required=True, help="HOST:PORT for the control API")
    ap.add_argument("--peers", required=True, help="ID=HOST:PORT,... (this node too)")
    ap.add_argument("--data-dir", required=True)
    ap.add_argument("--groups", type=int, default=16, help="host groups 1..N")
    ap.add_argument("--tick-ms", type=int, default=NodeOptions().tick_ms)
    ap.add_argument("--election-ticks", type=int, default=NodeOptions().election_ticks)
    ap.add_argument("--heartbeat-ticks", type=int, default=NodeOptions().heartbeat_ticks)
    ap.add_argument("--no-coalesce", action="store_true", help="one heartbeat message per group")
    ap.add_argument(
        "--quiesce-ticks",
        type=int,
        default=6,
        help="idle ticks before a group quiesces (0: never; default 6, the tested value "
        "of NodeOptions.quiesce_ticks)",
    )
    ap.add_argument(
        "--no-quiesce", action="store_true", help="no quiescence, no node liveness (as before)"
    )
    ap.add_argument("--log-level", default="WARNING")
    args = ap.parse_args(argv)
    if args.groups < 1:
        ap.error("--groups must be at least 1")
    logging.basicConfig(
        level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s %(message)s"
    )
    asyncio.run(serve(args))
    return 0


if __name__ == "__main__":
    sys.exit(main())
