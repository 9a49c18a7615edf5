"""The composition root: one function assembles a raftsink node from its configuration.

SinkNode            storage, Raft group, state machine, service, Kafka listener(s),
                    read API and metrics from a SinkConfig; start() / stop()
serve               run a SinkNode until SIGTERM/SIGINT (`raftsink serve`)
run_on_event_loop   uvloop or asyncio, as node.event_loop says
DiskWatch           what the node does below its free-space reserve (produce refused,
                    leadership handed off, appends refused below half of it)
EXIT_STORAGE_FAILURE  exit code of a node that stopped itself on a storage failure
"""

from sink.node.assemble import SinkNode
from sink.node.disk_watch import DiskWatch
from sink.node.serve import EXIT_STORAGE_FAILURE, run_on_event_loop, serve, storage_errno

__all__ = [
    "EXIT_STORAGE_FAILURE",
    "DiskWatch",
    "SinkNode",
    "run_on_event_loop",
    "serve",
    "storage_errno",
]
