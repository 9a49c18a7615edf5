"""RaftNode: the single-group API, a RaftHost hosting exactly one RaftGroup.

Kept so applications with one group (raftsink's sink today, the standalone
node process, the tests) need not know about hosts. Its data directory keeps
the single-group layout (data_dir/log, data_dir/snapshots); it owns its host,
so start() starts the transport and stop() closes it, as before.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from raftlog.runtime.group import NodeStats, RaftGroup
from raftlog.runtime.host import RaftHost
from raftlog.runtime.options import HostOptions, NodeOptions
from raftlog.runtime.state_machine import StateMachine

__all__ = ["NodeStats", "RaftNode"]


class RaftNode(RaftGroup):
    """One node of one Raft group, persisted under data_dir.

    peers: node id -> Raft transport address for every voter (this node too);
    used for the initial configuration (when the log has none) and as leader
    address hints in NotLeaderError. transport: a GrpcTransport or
    LocalTransport, started by start() and closed by stop().

    One group never quiesces (its options' quiesce_ticks is taken as 0): quiescence
    saves the heartbeats of many idle groups per process; for one group it would
    only put node liveness between a dead leader and the next election.
    """

    def __init__(
        self,
        node_id: int,
        data_dir: str,
        peers: dict[int, str],
        fsm: StateMachine,
        transport: Any,
        options: NodeOptions | None = None,
        group_id: int = 0,
        seed: int | None = None,
        join: bool = False,
        compaction_limit: Callable[[], int | None] | None = None,
        coalesce_heartbeats: bool = True,
    ) -> None:
        opts = options or NodeOptions()
        host = RaftHost(
            node_id,
            transport,
            options=HostOptions(
                tick_ms=opts.tick_ms,
                housekeeping_s=min(0.1, opts.proposal_timeout_s / 4),
                coalesce_heartbeats=coalesce_heartbeats,
                beat_ticks=opts.heartbeat_ticks,
                storage=opts.storage,
            ),
        )
        super().__init__(
            host,
            group_id,
            peers,
            fsm,
            options=replace(opts, quiesce_ticks=0),
            seed=seed,
            join=join,
            compaction_limit=compaction_limit,
            log_dir=os.path.join(data_dir, "log"),
            snapshot_dir=os.path.join(data_dir, "snapshots"),
        )
        self.data_dir = data_dir

    async def start(self) -> None:
        """Open storage, recover (snapshot + log), start the transport and the loops."""
        await self.host.start()
        await self.host.start_group(self)

    async def stop(self) -> None:
        """Stop the loops, fail pending calls, close transport and storage."""
        await self.host.stop()
