"""`raftsink local --nodes N --processes-per-host K`: the launcher gives nodes 1..K host
h1, K+1..2K h2, ... (node.host), records them in cluster.json and prints every node;
without K no label is passed (every node its own host). Processes are not started: a
fake Popen records the launches (unit test)."""

from __future__ import annotations

import json
import pathlib
import subprocess

import pytest

from sink.cli import build_parser, local_node_lines
from sink.process_cluster import SinkProcessCluster


class FakePopen:
    launches: list[list[str]] = []
    pid = 4242

    def __init__(self, args, env=None, **kw) -> None:
        FakePopen.launches.append(args)

    def poll(self) -> int | None:
        return None


def _hosts(launches: list[list[str]]) -> dict[int, str | None]:
    out = {}
    for args in launches:
        node = int(args[args.index("--node-id") + 1])
        out[node] = args[args.index("--node-host") + 1] if "--node-host" in args else None
    return out


def test_processes_per_host_labels_nodes_by_emulated_host(tmp_path, monkeypatch):
    monkeypatch.setattr(subprocess, "Popen", FakePopen)
    FakePopen.launches.clear()
    cluster = SinkProcessCluster(str(tmp_path), n=5, processes_per_host=2)
    cluster.start()
    assert _hosts(FakePopen.launches) == {1: "h1", 2: "h1", 3: "h2", 4: "h2", 5: "h3"}
    data = json.loads(pathlib.Path(cluster.write_cluster_file()).read_text())
    assert {i: n["host"] for i, n in data["nodes"].items()} == {
        "1": "h1",
        "2": "h1",
        "3": "h2",
        "4": "h2",
        "5": "h3",
    }
    lines = local_node_lines(cluster)
    assert len(lines) == 5 and lines[4].startswith("  node 5: host h3 pid 4242 kafka 127.0.0.1:")


def test_without_processes_per_host_every_node_is_its_own_host(tmp_path, monkeypatch):
    monkeypatch.setattr(subprocess, "Popen", FakePopen)
    FakePopen.launches.clear()
    cluster = SinkProcessCluster(str(tmp_path), n=4)
    cluster.start()
    assert _hosts(FakePopen.launches) == dict.fromkeys((1, 2, 3, 4))
    assert [cluster.host_of(i) for i in (1, 2, 3, 4)] == ["1", "2", "3", "4"]


def test_the_local_command_takes_nodes_and_processes_per_host():
    args = build_parser().parse_args(["local", "--nodes", "6", "--processes-per-host", "3"])
    assert (args.nodes, args.processes_per_host) == (6, 3)
    assert build_parser().parse_args(["local"]).processes_per_host is None
    with pytest.raises(ValueError, match="processes_per_host must be >= 1"):
        SinkProcessCluster("/tmp/unused-raftsink", n=3, processes_per_host=0)


def test_the_node_accepts_the_host_flag():
    from sink.config import flag_overrides, load_config

    argv = ["serve", "--node-id", "1", "--data-dir", "/d", "--peers", "1=a:1/a:2/a:3"]
    overrides, sources = flag_overrides(build_parser().parse_args([*argv, "--node-host", "h1"]))
    assert load_config(None, env={}, overrides=overrides, override_sources=sources).host == "h1"
