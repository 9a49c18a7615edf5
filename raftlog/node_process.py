"""A standalone raftlog node process: real storage, real gRPC, a recording FSM.

For multi-process tests, the Raft benchmark and demos of the log alone (the
Kafka-facing server is `raftsink serve`). Besides the Raft transport it serves
a small JSON-over-gRPC control API:

    Status   {} -> node status + applied count, transport counters, Python thread names
    Propose  {"values": [hex, ...]} -> {"indexes": [...]}  (leader only)
    Load     {"size", "seconds", "concurrency"} or {"size", "seconds", "rate"}
             -> throughput and commit latency figures measured in this process
    Applied  {"start", "max"} -> [[index, hex], ...] as applied by the FSM
    Transfer {"to": id}

    python -m raftlog.node_process --id 1 --raft 127.0.0.1:7001 \\
        --control 127.0.0.1:7101 --peers 1=127.0.0.1:7001,2=...,3=... --data-dir DIR
"""

from __future__ import annotations

# isort: off
# First, before grpc is imported: gRPC core reads its settings once, at import.
import raftlog.grpc_env  # noqa: F401
# isort: on

import argparse
import asyncio
import dataclasses
import json
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Sequence
from typing import Any

import grpc

from raftlog.entry import LogEntry
from raftlog.runtime import NodeOptions, NotLeaderError, RaftError, RaftNode, StateMachine
from raftlog.runtime.gc_tuning import tune_gc_for_latency
from raftlog.transport import GrpcTransport

log = logging.getLogger("raftlog.node_process")

_CONTROL = "raftlog.Control"


class RecordingStateMachine(StateMachine):
    """Remembers every applied entry (index, data) in order; snapshot = that list."""

    def __init__(self) -> None:
        self.applied: list[tuple[int, bytes]] = []

    def on_apply(self, entries: Sequence[LogEntry]) -> list[int]:
        self.applied.extend((e.index, e.data) for e in entries)
        return [e.index for e in entries]

    def on_snapshot_save(self) -> bytes:
        return json.dumps([[i, d.hex()] for i, d in self.applied]).encode()

    def on_snapshot_load(self, data: bytes) -> None:
        self.applied = [(i, bytes.fromhex(h)) for i, h in json.loads(data)] if data else []


def _percentile(sorted_values: list[float], q: float) -> float:
    if not sorted_values:
        return 0.0
    k = min(len(sorted_values) - 1, max(0, round(q * (len(sorted_values) - 1))))
    return sorted_values[k]


class ControlService:
    def __init__(
        self, node: RaftNode, fsm: RecordingStateMachine, transport: GrpcTransport | None = None
    ) -> None:
        self.node = node
        self.fsm = fsm
        self.transport = transport

    async def status(self, req: dict) -> dict:
        st = self.node.status()
        st["applied_entries"] = len(self.fsm.applied)
        st["fatal"] = repr(self.node.fatal_error) if self.node.fatal_error else None
        if self.transport is not None:  # stream writes and messages (bench/raft.py --threads)
            st["transport"] = dataclasses.asdict(self.transport.stats)
        # Python threads by OS id: /proc names them all "python" (bench/raft.py --threads).
        st["threads"] = {str(t.native_id): t.name for t in threading.enumerate()}
        return st

    async def propose(self, req: dict) -> dict:
        values = [bytes.fromhex(v) for v in req["values"]]
        results = await self.node.apply_batch(values, timeout=req.get("timeout"))
        return {"indexes": [r.index for r in results]}

    async def applied(self, req: dict) -> dict:
        start, n = req.get("start", 0), req.get("max", 1 << 30)
        rows = self.fsm.applied[start : start + n]
        return {"rows": [[i, d.hex()] for i, d in rows], "total": len(self.fsm.applied)}

    async def transfer(self, req: dict) -> dict:
        await self.node.transfer_leader(int(req["to"]))
        return {}

    async def load(self, req: dict) -> dict:
        """Proposals from inside the leader: `concurrency` closed-loop proposers,
        or an open loop at `rate` entries/s measuring commit latency."""
        size, seconds = int(req["size"]), float(req["seconds"])
        payload = os.urandom(size)
        lat: list[float] = []
        kinds: dict[str, int] = {}
        errors = 0
        done = 0
        deadline = time.perf_counter() + seconds
        if "rate" in req:
            rate = float(req["rate"])
            tasks = []

            async def one() -> None:
                nonlocal done, errors
                t0 = time.perf_counter()
                try:
                    await self.node.apply(payload)
                    lat.append(time.perf_counter() - t0)
                    done += 1
                except RaftError:
                    errors += 1

            start = time.perf_counter()
            k = 0
            while time.perf_counter() < deadline:
                due = start + k / rate
                delay = due - time.perf_counter()
                if delay > 0:
                    await asyncio.sleep(delay)
                tasks.append(asyncio.create_task(one()))
                k += 1
            await asyncio.gather(*tasks)
        else:
            concurrency = int(req.get("concurrency", 64))
            batch = int(req.get("batch", 1))

            async def proposer() -> None:
                nonlocal done, errors
                while time.perf_counter() < deadline:
                    t0 = time.perf_counter()
                    try:
                        if batch == 1:
                            await self.node.apply(payload)
                        else:
                            await self.node.apply_batch([payload] * batch)
                        lat.append(time.perf_counter() - t0)
                        done += batch
                    except RaftError as exc:
                        errors += 1
                        kinds[type(exc).__name__] = kinds.get(type(exc).__name__, 0) + 1
                        await asyncio.sleep(0.01)

            start = time.perf_counter()
            await asyncio.gather(*(proposer() for _ in range(concurrency)))
        elapsed = time.perf_counter() - start
        lat.sort()
        return {
            "entries": done,
            "errors": errors,
            "error_kinds": kinds,
            "seconds": elapsed,
            "entries_per_s": done / elapsed,
            "mb_s": done * size / elapsed / (1 << 20),
            "p50_ms": _percentile(lat, 0.5) * 1000,
            "p99_ms": _percentile(lat, 0.99) * 1000,
        }

    def handler(self) -> grpc.GenericRpcHandler:
        def unary(fn):
            async def call(request: bytes, context: grpc.aio.ServicerContext) -> bytes:
                try:
                    out = await fn(json.loads(request or b"{}"))
                except NotLeaderError as exc:
                    out = {"error": "not_leader", "leader": exc.leader_id, "detail": str(exc)}
                except RaftError as exc:
                    out = {"error": type(exc).__name__, "detail": str(exc)}
                return json.dumps(out).encode()

            return grpc.unary_unary_rpc_method_handler(call)

        return grpc.method_handlers_generic_handler(
            _CONTROL,
            {
                "Status": unary(self.status),
                "Propose": unary(self.propose),
                "Applied": unary(self.applied),
                "Transfer": unary(self.transfer),
                "Load": unary(self.load),
            },
        )


async def control_call(address: str, method: str, req: dict, timeout: float = 30.0) -> dict:
    """Client side of the control API (used by tests and bench/raft.py)."""
    async with grpc.aio.insecure_channel(address) as ch:
        fn = ch.unary_unary(f"/{_CONTROL}/{method}")
        raw = await fn(json.dumps(req).encode(), timeout=timeout)
    return json.loads(raw)


def _parse_peers(text: str) -> dict[int, str]:
    peers = {}
    for part in text.split(","):
        node, _, addr = part.partition("=")
        if not node.strip().isdigit() or not addr:
            raise argparse.ArgumentTypeError(f"bad peer {part!r}: expected ID=HOST:PORT")
        peers[int(node)] = addr.strip()
    return peers


async def serve(args: argparse.Namespace) -> None:
    peers = _parse_peers(args.peers)
    fsm = RecordingStateMachine()
    transport = GrpcTransport(args.id, args.raft, {i: a for i, a in peers.items() if i != args.id})
    options = NodeOptions(
        tick_ms=args.tick_ms,
        election_ticks=args.election_ticks,
        snapshot_every_entries=args.snapshot_every,
    )
    node = RaftNode(args.id, args.data_dir, peers, fsm, transport, options)
    await node.start()
    await serve_control_until_signal(
        ControlService(node, fsm, transport).handler(),
        args.control,
        f"ready node={args.id} raft={args.raft} control={args.control}",
    )
    await node.stop()


async def serve_control_until_signal(handler: Any, address: str, ready_line: str) -> None:
    """Serve a test process's control API on address, print ready_line (what the
    launcher waits for), and return after SIGTERM/SIGINT with the API stopped."""
    control = grpc.aio.server()
    control.add_generic_rpc_handlers((handler,))
    if control.add_insecure_port(address) == 0:
        raise SystemExit(f"cannot listen on {address}")
    await control.start()
    tune_gc_for_latency()
    print(ready_line, flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    await control.stop(grace=0.5)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="run one raftlog node process")
    ap.add_argument("--id", type=int, required=True)
    ap.add_argument("--raft", required=True, help="HOST:PORT for Raft traffic")
    ap.add_argument("--control", required=True, help="HOST:PORT for the control API")
    ap.add_argument(
        "--peers", required=True, help="ID=HOST:PORT,... for every voter (this node too)"
    )
    ap.add_argument("--data-dir", required=True)
    ap.add_argument("--tick-ms", type=int, default=NodeOptions().tick_ms)
    ap.add_argument("--election-ticks", type=int, default=NodeOptions().election_ticks)
    ap.add_argument("--snapshot-every", type=int, default=0)
    ap.add_argument("--log-level", default="WARNING")
    args = ap.parse_args(argv)
    logging.basicConfig(
        level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s %(message)s"
    )
    profile_to = os.environ.get("RAFTLOG_PROFILE")
    if profile_to:  # developer aid: cProfile the whole process, written at exit
        import cProfile

        cProfile.runctx("asyncio.run(serve(args))", globals(), locals(), f"{profile_to}.{args.id}")
    else:
        asyncio.run(serve(args))
    return 0


if __name__ == "__main__":
    sys.exit(main())
