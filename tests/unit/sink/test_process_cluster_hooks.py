"""SinkProcessCluster's public hooks (node_wrapper, peers_for, env_for) reach the node's
command line and environment; the old private hook names are refused, not ignored."""

from __future__ import annotations

import subprocess

import pytest

from sink.config import ConfigError
from sink.process_cluster import SinkProcessCluster


class FakePopen:
    """Records the launch instead of starting a process (unit test only)."""

    launches: list[tuple[list[str], dict | None]] = []

    def __init__(self, args, env=None, **kw) -> None:
        FakePopen.launches.append((args, env))

    def poll(self) -> int:
        return 0


def test_hooks_shape_the_node_launch(tmp_path, monkeypatch):
    class Routed(SinkProcessCluster):
        def peers_for(self, node_id: int) -> str:
            return f"routed-for-{node_id}"

        def env_for(self, node_id: int) -> dict[str, str]:
            return {"NODE": str(node_id)}

    monkeypatch.setattr(subprocess, "Popen", FakePopen)
    FakePopen.launches.clear()
    cluster = Routed(str(tmp_path), n=2, node_wrapper="some.wrapper")
    cluster.start()
    assert len(FakePopen.launches) == 2
    for node_id, (args, env) in enumerate(FakePopen.launches, start=1):
        assert args[1:4] == ["-m", "some.wrapper", "serve"]
        assert args[args.index("--peers") + 1] == f"routed-for-{node_id}"
        assert env == {"NODE": str(node_id)}


def test_default_launch_runs_the_raftsink_command(tmp_path, monkeypatch):
    monkeypatch.setattr(subprocess, "Popen", FakePopen)
    FakePopen.launches.clear()
    SinkProcessCluster(str(tmp_path), n=1).start()
    ((args, env),) = FakePopen.launches
    assert args[1:4] == ["-m", "sink.cli", "serve"] and env is None


@pytest.mark.parametrize("old", ["_node_env", "_node_peers", "node_module"])
def test_old_hook_names_are_refused(old):
    with pytest.raises(TypeError, match="hook is now"):
        type("Old", (SinkProcessCluster,), {old: lambda self, i: None})


def test_partition_groups_switch_reaches_every_node(tmp_path):
    on = SinkProcessCluster(str(tmp_path / "on"), n=2, partition_groups=True)
    off = SinkProcessCluster(str(tmp_path / "off"), n=2, partition_groups=False)
    assert all("--cluster-partition-groups" in on.command_for(i) for i in on.nodes)
    assert all("--no-cluster-partition-groups" in off.command_for(i) for i in off.nodes)
    assert on.partition_groups and not off.partition_groups


def test_partition_groups_default_follows_the_environment_as_a_node_would(tmp_path, monkeypatch):
    monkeypatch.delenv("RAFTSINK_CLUSTER_PARTITION_GROUPS", raising=False)
    assert SinkProcessCluster(str(tmp_path / "a"), n=1).partition_groups  # the default: on
    monkeypatch.setenv("RAFTSINK_CLUSTER_PARTITION_GROUPS", "false")
    c = SinkProcessCluster(str(tmp_path / "b"), n=1)
    assert not c.partition_groups and "--no-cluster-partition-groups" in c.command_for(1)
    monkeypatch.setenv("RAFTSINK_CLUSTER_PARTITION_GROUPS", "maybe")
    with pytest.raises(ConfigError, match=r"cluster\.partition_groups"):
        SinkProcessCluster(str(tmp_path / "c"), n=1)
