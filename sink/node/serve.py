"""`raftsink serve`: run one SinkNode until SIGTERM/SIGINT or a fatal storage error."""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Coroutine
from typing import Any, TypeVar

from raftlog.runtime.gc_tuning import tune_gc_for_latency
from sink.config import SinkConfig
from sink.node.assemble import SinkNode

T = TypeVar("T")

FATAL_POLL_S = 0.5
"""How often serve() looks for a fatal storage error (the node records it; a
crash-stop within half a second is soon enough for an operator)."""


def run_on_event_loop(kind: str, main: Coroutine[Any, Any, T]) -> T:
    """Run main on the configured event loop ("uvloop" or "asyncio", node.event_loop)."""
    if kind == "uvloop":
        import uvloop

        return uvloop.run(main)
    return asyncio.run(main)


async def serve(config: SinkConfig, ready_line: bool = True) -> None:
    """Run a node until SIGTERM/SIGINT; prints one 'ready' line on stdout when serving."""
    node = SinkNode(config)
    await node.start()
    tune_gc_for_latency()
    if ready_line:
        print(
            f"ready node={config.node_id} kafka={config.me.kafka} read_api={config.me.read_api}",
            flush=True,
        )
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    fatal = asyncio.ensure_future(_watch_fatal(node))
    stopped = asyncio.ensure_future(stop.wait())
    await asyncio.wait([stopped, fatal], return_when=asyncio.FIRST_COMPLETED)
    for task in (stopped, fatal):
        task.cancel()
    await node.stop()
    if node.fatal_error is not None:
        raise SystemExit(f"node {config.node_id} stopped on a fatal error: {node.fatal_error!r}")


async def _watch_fatal(node: SinkNode) -> None:
    """A storage failure stops the node: exit loudly instead of serving half-dead."""
    while node.fatal_error is None:
        await asyncio.sleep(FATAL_POLL_S)
