"""raftlog.host_process plus a LeaderBalanceDriver: a real process hosting groups 1..G
over one gRPC transport, balancing the leadership of the groups it leads by transfers.

Preferred orders are striped like sink.placement's placer: group g prefers node
((g - 1) % N) + 1, then the next ones in turn. Status answers host_process's fields plus
"balancer" (the driver's stats()).

    python -m tests.helpers.balance_host --id 1 --raft ... --control ... --peers ... \\
        --data-dir DIR --groups 12 --balance-interval 0.5 --return-delay 1
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys

from raftlog.host_process import HostControl
from raftlog.node_process import RecordingStateMachine, _parse_peers, serve_control_until_signal
from raftlog.runtime import HostOptions, NodeOptions, RaftHost
from raftlog.transport import GrpcTransport
from sink.node.balance_driver import LeaderBalanceDriver, RaftHostSource
from sink.placement import BalancerOptions


def striped(group: int, nodes: list[int]) -> tuple[int, ...]:
    k = (group - 1) % len(nodes)
    return tuple(nodes[k:] + nodes[:k])


class BalancedControl(HostControl):
    def __init__(self, host, fsms, driver: LeaderBalanceDriver) -> None:
        super().__init__(host, fsms)
        self.driver = driver

    async def status(self, req: dict) -> dict:
        st = await super().status(req)
        st["balancer"] = self.driver.stats()
        return st


async def serve(args: argparse.Namespace) -> None:
    peers = _parse_peers(args.peers)
    nodes = sorted(peers)
    transport = GrpcTransport(
        args.id, args.raft, {i: a for i, a in peers.items() if i != args.id}, groups=()
    )
    host = RaftHost(
        args.id, transport, data_dir=args.data_dir, options=HostOptions(tick_ms=args.tick_ms)
    )
    options = NodeOptions(tick_ms=args.tick_ms, election_ticks=args.election_ticks, quiesce_ticks=6)
    await host.start()
    fsms: dict[int, RecordingStateMachine] = {}
    for gid in range(1, args.groups + 1):
        fsms[gid] = RecordingStateMachine()
        await host.add_group(gid, peers, fsms[gid], options, seed=args.id * 1_000_003 + gid)
    driver = LeaderBalanceDriver(
        RaftHostSource(host, lambda g: striped(g, nodes)),
        BalancerOptions(
            enabled=not args.balance_off,
            interval_s=args.balance_interval,
            return_delay_s=args.return_delay,
            max_in_flight=args.max_in_flight,
            transfer_timeout_s=args.transfer_timeout,
        ),
    )
    driver.start()
    try:
        await serve_control_until_signal(
            BalancedControl(host, fsms, driver).handler(),
            args.control,
            f"ready node={args.id} groups={args.groups} control={args.control}",
        )
    finally:
        await driver.stop()
        await host.stop()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="a raftlog host process with a leader balancer")
    ap.add_argument("--id", type=int, required=True)
    ap.add_argument("--raft", required=True)
    ap.add_argument("--control", required=True)
    ap.add_argument("--peers", required=True)
    ap.add_argument("--data-dir", required=True)
    ap.add_argument("--groups", type=int, default=12)
    ap.add_argument("--tick-ms", type=int, default=NodeOptions().tick_ms)
    ap.add_argument("--election-ticks", type=int, default=NodeOptions().election_ticks)
    ap.add_argument("--balance-interval", type=float, default=0.5)
    ap.add_argument("--return-delay", type=float, default=1.0)
    ap.add_argument("--max-in-flight", type=int, default=4)
    ap.add_argument("--transfer-timeout", type=float, default=5.0)
    ap.add_argument("--balance-off", action="store_true")
    ap.add_argument("--log-level", default="WARNING")
    args = ap.parse_args(argv)
    logging.basicConfig(
        level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s %(message)s"
    )
    asyncio.run(serve(args))
    return 0


if __name__ == "__main__":
    sys.exit(main())
