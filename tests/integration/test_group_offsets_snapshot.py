"""Committed group offsets and leader-epoch rows through real Raft snapshots: a follower
that was down while the leader compacted its log catches up by InstallSnapshot plus the
log after it, and then holds exactly the leader's tables (the state rebuilt from a
snapshot equals the state built live, on real nodes with real storage)."""

from __future__ import annotations

import dataclasses
import os
import random

from sink.config import RetentionSection, SinkConfig
from sink.kafka.protocol.errors import ErrorCode
from sink.kafka.protocol.records import parse_batches
from tests.helpers.sink_cluster import FAST, SinkCluster
from tests.unit.sink.batches import make_batch


class CompactingCluster(SinkCluster):
    """Snapshots every 20 entries, log compacted down to 10 entries."""

    def config(self, i: int) -> SinkConfig:
        cfg = super().config(i)
        return dataclasses.replace(
            cfg, retention=RetentionSection(snapshot_every_entries=20, max_entries=10)
        )


async def _produce(svc, part: int, batch: bytes):
    return await svc.produce("t", part, batch, parse_batches(batch))


def test_follower_rebuilt_from_a_snapshot_holds_the_leaders_offsets(tmp_path):
    seed = int(os.environ.get("RAFTSINK_OFFSETS_SEED", random.randrange(2**32)))
    print(f"seed={seed}")
    rng = random.Random(seed)
    c = CompactingCluster(
        str(tmp_path), options=dataclasses.replace(FAST, snapshot_every_entries=20)
    )
    c.start()
    try:
        leader = c.leader_id()
        svc = c.nodes[leader].service
        res = c.call(svc.create_topic("t", 3))
        assert res.error == ErrorCode.none
        lagging = next(i for i in c.ids if i != leader)
        c.call(c.stop_node(lagging))
        for n in range(150):
            group = f"g{rng.randrange(8)}"
            items = [
                ("t", p, rng.randrange(10_000), rng.randrange(-1, 5), f"m{n}", -1, -1)
                for p in rng.sample(range(3), rng.randint(1, 3))
            ]
            codes = c.call(svc.offsets.commit_offsets(group, items))
            assert codes == [ErrorCode.none] * len(items), codes
            if n % 10 == 0:
                part = rng.randrange(3)
                batch = make_batch([b"r"] * rng.randint(1, 5))
                assert c.call(_produce(svc, part, batch)).error == 0
            if n % 25 == 0:
                assert c.call(svc.offsets.delete_offsets(group, [("t", 0)])) == ErrorCode.none
        lead_node = c.nodes[leader].node
        c.wait_for(lambda: lead_node.first_index() > 20, 30, "log compaction on the leader")
        c.call(c.start_node(lagging))
        follower = c.nodes[lagging]
        c.wait_for(
            lambda: follower.node.applied >= lead_node.applied, 60, "the follower to catch up"
        )
        assert follower.node.stats.snapshots_installed >= 1  # it was rebuilt from a snapshot
        lead_fsm, fol_fsm = c.nodes[leader].fsm, follower.fsm
        assert c.run(lambda: fol_fsm.group_offsets == lead_fsm.group_offsets)
        assert c.run(lambda: fol_fsm.epochs == lead_fsm.epochs)
        assert c.run(lambda: len(lead_fsm.group_offsets)) > 0
    finally:
        c.stop()
