"""The composition root: one function assembles a raftsink node from its configuration.

SinkNode            storage, Raft group, state machine, service, Kafka listener(s),
                    read API and metrics from a SinkConfig; start() / stop()
serve               run a SinkNode until SIGTERM/SIGINT (`raftsink serve`)
run_on_event_loop   uvloop or asyncio, as node.event_loop says
"""

from sink.node.assemble import SinkNode
from sink.node.serve import run_on_event_loop, serve

__all__ = ["SinkNode", "run_on_event_loop", "serve"]
