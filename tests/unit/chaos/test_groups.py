"""The campaign on partition groups and on more than 3 nodes, without processes: which node
"the leader" is (the one leading the most data groups), the kinds refused with groups and
why, the proxy links of 5 nodes, stall-majority's size."""

from __future__ import annotations

import argparse
import asyncio

import pytest

from chaos.command import add_arguments, run
from chaos.fault_cluster import ChaosCluster, link
from chaos.history import History
from chaos.nemesis import (
    KINDS,
    Fault,
    Nemesis,
    ScheduleOptions,
    check_kinds,
    default_kinds,
    make_schedule,
    pick_leader,
)


def _st(role: str = "follower", term: int = 3, leading: int | None = None) -> dict:
    st: dict = {"role": role, "term": term}
    if leading is not None:
        st["data_groups"] = {"leading": leading}
    return st


def test_groups_leader_is_the_node_leading_most_data_groups():
    sts = {1: _st("leader", 5, 1), 2: _st(leading=3), 3: _st(leading=0)}
    assert pick_leader(sts, partition_groups=True) == 2
    # without groups the controller's leader, whatever the data groups say
    assert pick_leader(sts, partition_groups=False) == 1


def test_groups_leader_ties_go_to_the_controller_leader_then_the_lowest_id():
    tie = {1: _st(leading=2), 2: _st(leading=2), 3: _st("leader", 4, 2)}
    assert pick_leader(tie, partition_groups=True) == 3
    tie[3] = _st(leading=2)
    assert pick_leader(tie, partition_groups=True) == 1
    assert pick_leader({1: _st(leading=0), 2: _st("leader", 2, 0)}, True) == 0
    assert pick_leader({}, True) == 0


def test_one_group_leader_is_the_highest_term_leader():
    # a deposed leader that has not heard yet still says "leader" with an older term
    sts = {1: _st("leader", 4), 2: _st("leader", 6), 3: _st()}
    assert pick_leader(sts, partition_groups=False) == 2


def test_membership_runs_with_groups_and_move_only_there():
    assert "membership" in default_kinds(True)
    assert default_kinds(False) == tuple(k for k in KINDS if k != "move")
    assert "move" in default_kinds(True)
    check_kinds(default_kinds(True), True)
    check_kinds(("kill", "membership"), True)
    with pytest.raises(ValueError, match="not supported on one group"):
        check_kinds(("kill", "move"), False)
    with pytest.raises(ValueError, match="unknown nemesis"):
        check_kinds(("meteor",), False)
    opts = ScheduleOptions(duration_s=60, kinds=("membership",), partition_groups=True)
    assert {f.kind for f in make_schedule(1, opts)} == {"membership"}


def test_run_campaign_refuses_before_starting_anything(tmp_path):
    from chaos import run_campaign

    with pytest.raises(ValueError, match="move"):
        run_campaign(1, str(tmp_path / "out"), seconds=5, nemeses=["move"], partition_groups=False)
    with pytest.raises(ValueError, match="at least 3 nodes"):
        run_campaign(1, str(tmp_path / "out"), seconds=5, nodes=2)
    assert not (tmp_path / "out").exists()


def test_cli_refuses_move_without_groups(capsys):
    p = argparse.ArgumentParser()
    add_arguments(p)
    args = p.parse_args(["--nemesis", "kill,move", "--seconds", "5", "--no-partition-groups"])
    assert run(args) == 2
    assert "needs --partition-groups" in capsys.readouterr().err
    args = p.parse_args(["--nodes", "5"])  # partition groups are the default, as in serve
    assert args.nodes == 5 and args.partition_groups and args.nemesis is None
    assert p.parse_args(["--partition-groups"]).partition_groups


def test_schedule_on_five_nodes_targets_every_node():
    opts = ScheduleOptions(
        duration_s=600, nodes=5, kinds=default_kinds(True), partition_groups=True
    )
    sched = make_schedule(11, opts)
    assert all(sorted(f.order) == [1, 2, 3, 4, 5] for f in sched)
    targets = {f.target for f in sched if f.target != "leader"}
    assert targets == {"1", "2", "3", "4", "5"}, targets
    assert "membership" in {f.kind for f in sched}


def test_five_nodes_get_a_proxy_link_per_ordered_pair(tmp_path):
    c = ChaosCluster(str(tmp_path), n=5, partition_groups=True)
    pairs = {link(i, j) for i in range(1, 6) for j in range(1, 6) if i != j}
    assert set(c.link_ports) == pairs and len(set(c.link_ports.values())) == 20
    view = c.peers_for(4)
    for j in (1, 2, 3, 5):
        assert f"127.0.0.1:{c.link_ports[link(4, j)]}" in view
    assert c.peers[4].raft in view  # its own entry is real
    assert "--cluster-partition-groups" in c.command_for(1)
    assert c.partition_groups
    one = ChaosCluster(str(tmp_path / "b"), partition_groups=False)
    assert "--no-cluster-partition-groups" in one.command_for(1) and not one.partition_groups


class _FakeCluster:
    """What Nemesis.inject touches for a disk fault."""

    partition_groups = True
    paused: set[int] = set()

    def __init__(self) -> None:
        self.stalls: list[int] = []
        self.cleared: list[int] = []

    def alive(self) -> list[int]:
        return [1, 2, 3, 4, 5]

    async def status(self, i: int, timeout: float = 1.0) -> dict:
        return _st(leading=4 if i == 3 else 1)

    def stall_disk(self, i: int, mode: str = "stall") -> None:
        self.stalls.append(i)

    def clear_disk(self, i: int) -> None:
        self.cleared.append(i)


@pytest.mark.parametrize("nodes, stalled", [(3, 2), (5, 3)])
def test_stall_majority_stalls_a_majority(nodes, stalled):
    c = _FakeCluster()
    c.alive = lambda: list(range(1, nodes + 1))  # type: ignore[method-assign]
    order = list(range(nodes, 0, -1))
    f = Fault("disk", 0.0, 0.0, "leader", "stall-majority", order)
    nem = Nemesis(c, History(), [f])  # type: ignore[arg-type]
    asyncio.run(nem.inject(f))
    assert len(c.stalls) == stalled and len(set(c.stalls)) == stalled, c.stalls
    assert c.stalls[0] == 3, "the target: the node leading the most data groups"
    assert sorted(c.cleared) == sorted(c.stalls)


def test_corrupt_window_end_skips_verify_with_groups(tmp_path):
    """`raftsink verify` cannot read the groups layout (one LMDB index shared by every
    group): the node is neither killed nor restarted, and stays `damaged` so that the
    monitor repairs it if it stops on the damage later."""
    c = ChaosCluster(str(tmp_path), partition_groups=True)
    c.damaged.add(2)
    assert c.verify_and_repair(2).startswith("verify not run")
    assert c.damaged == {2} and c.gen[2] == 0


def test_admitted_waits_for_every_data_group_of_the_node():
    from chaos.nemesis import admitted

    ident = {"may_vote": True, "recorded": 7, "incarnation": 7}
    assert admitted({"identity": ident})  # one group: the controller's identity only
    assert not admitted({"identity": {**ident, "recorded": 6}})
    assert not admitted(None)
    rows = [{"group": 1, "may_vote": True}, {"group": 2, "may_vote": False}]
    assert not admitted({"identity": ident, "data_groups": {"groups": rows}})
    rows[1]["may_vote"] = True
    assert admitted({"identity": ident, "data_groups": {"groups": rows}})
