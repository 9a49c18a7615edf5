"""Node identity in the runtime: incarnations from storage, status, refusals."""

from __future__ import annotations

import asyncio
import dataclasses
import os
import shutil

import pytest

from raftlog.runtime import HostOptions, NodeOptions, RaftHost
from raftlog.storage.identity import IdentityError
from raftlog.transport import LocalNetwork
from tests.helpers.raft_inprocess import FAST, InProcessRaftCluster, RecordingFSM, wait_until


def run(coro):
    return asyncio.run(coro)


# 500 ms election timeout (as test_host.py and test_repair_runtime.py): a loaded machine
# stalls event loops for 100 ms and more, and a leader change under apply() raised
# NotLeaderError here (seen twice in one session)
STEADY = dataclasses.replace(FAST, election_ticks=50)


def test_bad_cluster_ids_are_refused_by_name():
    for bad in ("has space", "x" * 65, "a/b"):
        with pytest.raises(ValueError, match=r"NodeOptions\.cluster_id"):
            NodeOptions(cluster_id=bad)
    NodeOptions(cluster_id="prod-eu_1.a")


def test_status_shows_incarnations_and_a_wiped_node_is_readmitted(tmp_path):
    async def main():
        c = InProcessRaftCluster(str(tmp_path), options=STEADY)
        await c.start()
        leader = await c.leader()
        await asyncio.gather(*(leader.apply(b"a%d" % i) for i in range(20)))

        def all_vote() -> bool:
            sts = [n.status()["identity"] for n in c.nodes.values()]
            return all(s["may_vote"] and s["recorded"] == s["incarnation"] for s in sts)

        await wait_until(all_vote, what="every node admitted")
        incs = {i: n.status()["identity"]["incarnation"] for i, n in c.nodes.items()}
        assert len(set(incs.values())) == 3 and 0 not in incs.values()
        victim = next(i for i in c.nodes if i != leader.id)
        await c.stop_node(victim)
        shutil.rmtree(os.path.join(str(tmp_path), f"n{victim}"))
        node = await c.start_node(victim)
        st = node.status()["identity"]
        assert st["incarnation"] != incs[victim] and not st["may_vote"]
        await leader.apply(b"after")
        await wait_until(
            lambda: (
                node.status()["identity"]["may_vote"]
                and any(d == b"after" for _, d in c.fsms[victim].applied)
            ),
            what="the wiped node re-admitted and caught up",
        )
        assert leader.membership()["voters"] == [1, 2, 3]
        assert [d for _, d in c.fsms[victim].applied if d.startswith(b"a") and d != b"after"] == [
            b"a%d" % i for i in range(20)
        ]
        # restarting it (not wiped) keeps its new incarnation
        new_inc = node.status()["identity"]["incarnation"]
        await c.stop_node(victim)
        again = await c.start_node(victim)
        assert again.status()["identity"]["incarnation"] == new_inc
        await c.stop()

    run(main())


def test_a_data_directory_of_another_cluster_is_refused(tmp_path):
    async def main():
        opts = dataclasses.replace(FAST, cluster_id="alpha")
        c = InProcessRaftCluster(str(tmp_path), n=1, options=opts)
        await c.start()
        await c.stop()
        c2 = InProcessRaftCluster(
            str(tmp_path), n=1, options=dataclasses.replace(FAST, cluster_id="beta")
        )
        with pytest.raises(IdentityError, match="belongs to cluster 'alpha', not 'beta'"):
            await c2.start()
        for n in c2.nodes.values():
            await n.stop()

    run(main())


def test_groups_of_one_host_share_the_host_incarnation(tmp_path):
    async def main():
        net = LocalNetwork()
        peers = {1: "local:1"}
        host = RaftHost(
            1, net.transport(1, groups=()), str(tmp_path), HostOptions(tick_ms=FAST.tick_ms)
        )
        await host.start()
        groups = [await host.add_group(g, peers, RecordingFSM(), FAST) for g in (1, 2, 3)]
        incs = {g.status()["identity"]["incarnation"] for g in groups}
        assert len(incs) == 1
        await host.remove_group(2, delete=True)
        g2 = await host.add_group(2, peers, RecordingFSM(), FAST)
        assert g2.status()["identity"]["incarnation"] not in incs  # recreated: a fresh one
        await host.stop()

    run(main())
