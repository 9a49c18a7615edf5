"""Which Raft layout a data directory holds, and which one a node starts with.

A node runs one of two layouts (docs/partition-groups.md, "The switch"):
  partition groups  data_dir/groups/<id>/   (group 0 the controller, one group per partition)
  one group         data_dir/log, data_dir/snapshots   (every partition in one Raft log)
`cluster.partition_groups` chooses the layout of a NEW data directory only. An existing
directory keeps the layout it was created with, whatever the setting says: starting the
other layout over it would serve an empty cluster beside the real one (acknowledged
records unreachable), and the two cannot be converted in place. A mismatch is logged
once at WARNING with what to set to silence it; it never stops the node, so upgrading a
one-group cluster to a release whose default is partition groups keeps it running.
"""

from __future__ import annotations

import dataclasses
import enum
import logging
import os

from sink.config import SinkConfig

log = logging.getLogger("sink.node")


class Layout(enum.Enum):
    GROUPS = "partition groups"
    SINGLE = "one group"


def layout_on_disk(data_dir: str) -> Layout | None:
    """The layout `data_dir` holds, or None for a new (absent or empty of Raft state)
    directory. A directory holding both is refused: it was not made by raftsink."""
    groups = os.path.isdir(os.path.join(data_dir, "groups"))
    single = os.path.isdir(os.path.join(data_dir, "log"))
    if groups and single:
        raise RuntimeError(
            f"data directory {data_dir} holds both a partition-groups layout (groups/) and "
            "a one-group layout (log/): refusing to guess which is the cluster's; move one "
            "of them away"
        )
    if groups:
        return Layout.GROUPS
    if single:
        return Layout.SINGLE
    return None


def resolve_layout(config: SinkConfig) -> SinkConfig:
    """`config` with cluster.partition_groups set to what the data directory holds (the
    setting itself for a new directory)."""
    wanted = Layout.GROUPS if config.cluster.partition_groups else Layout.SINGLE
    found = layout_on_disk(config.data_dir)
    if found is None or found is wanted:
        return config
    log.warning(
        "sink.layout data_dir=%s holds a %s cluster; cluster.partition_groups=%s applies "
        "to new data directories only, so this node keeps running %s (set "
        "cluster.partition_groups=%s to silence this)",
        config.data_dir,
        found.value,
        str(config.cluster.partition_groups).lower(),
        found.value,
        str(found is Layout.GROUPS).lower(),
    )
    cluster = dataclasses.replace(config.cluster, partition_groups=found is Layout.GROUPS)
    return dataclasses.replace(config, cluster=cluster)
