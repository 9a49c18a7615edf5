"""sink.node.layout: an existing data directory keeps the Raft layout it was created with
(cluster.partition_groups chooses the layout of new directories only)."""

from __future__ import annotations

import logging
import os

import pytest

from sink.config import load_config
from sink.node.layout import Layout, layout_on_disk, resolve_layout


def _config(data_dir: str, groups: bool):
    env = {
        "RAFTSINK_NODE_ID": "1",
        "RAFTSINK_NODE_DATA_DIR": data_dir,
        "RAFTSINK_NODE_PEERS": "1=127.0.0.1:1/127.0.0.1:2/127.0.0.1:3",
        "RAFTSINK_CLUSTER_PARTITION_GROUPS": str(groups).lower(),
    }
    return load_config(env=env)


@pytest.mark.parametrize("groups", [True, False])
def test_a_new_directory_takes_the_setting(tmp_path, groups, caplog):
    for d in (tmp_path / "absent", tmp_path):  # absent, and present but empty
        cfg = _config(str(d), groups)
        assert layout_on_disk(str(d)) is None
        with caplog.at_level(logging.WARNING, logger="sink.node"):
            assert resolve_layout(cfg) is cfg
    assert not caplog.records


@pytest.mark.parametrize(
    "made, setting, runs",
    [("log", True, False), ("groups", False, True), ("log", False, False), ("groups", True, True)],
)
def test_an_existing_directory_keeps_its_layout(tmp_path, made, setting, runs, caplog):
    os.makedirs(tmp_path / made)
    cfg = _config(str(tmp_path), setting)
    with caplog.at_level(logging.WARNING, logger="sink.node"):
        out = resolve_layout(cfg)
    assert out.cluster.partition_groups is runs
    assert out.node == cfg.node and out.cluster.leader_balance == cfg.cluster.leader_balance
    warned = [r.getMessage() for r in caplog.records]
    if setting is runs:
        assert out is cfg and not warned
    else:
        (msg,) = warned
        assert str(tmp_path) in msg and f"cluster.partition_groups={str(runs).lower()}" in msg
    want = Layout.GROUPS if made == "groups" else Layout.SINGLE
    assert layout_on_disk(str(tmp_path)) is want


def test_a_directory_with_both_layouts_is_refused(tmp_path):
    os.makedirs(tmp_path / "log")
    os.makedirs(tmp_path / "groups")
    with pytest.raises(RuntimeError, match="both a partition-groups layout"):
        resolve_layout(_config(str(tmp_path), True))
