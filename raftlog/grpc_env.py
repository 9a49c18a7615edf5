"""gRPC core's settings for a process that carries Raft over gRPC (issue 17).

gRPC core reads its configuration variables (GRPC_EXPERIMENTS, ...) from the
environment once, when `grpc` is first imported; setting them later changes
nothing. So this module must not import grpc, and a process entry point
imports it (or calls `apply()`) before anything imports grpc. Importing it
applies the defaults; `apply()` is the same, for entry points that import
grpc lazily (`raftsink serve` could call it first thing in its command).

What it sets, and why (measured in docs/performance.md, "The replication path,
per thread"): grpc 1.85 runs client and server connections on its EventEngine,
whose own `event_engine` threads read and write the sockets and hand every
completion to the poller thread (`_poll_wrapper`), which hands it to the event
loop: at Raft's low-load message rate (one small message per entry per
direction) each message costs those thread wake-ups. With the EventEngine
client, listener and endpoints switched off, gRPC uses its older iomgr
endpoints (epoll1), polled by the poller thread itself: one thread hop fewer
per message. The protocol on the wire is the same HTTP/2 gRPC.

An explicit setting wins (os.environ.setdefault): `GRPC_EXPERIMENTS=` (empty)
keeps gRPC's own defaults.
"""

from __future__ import annotations

import os
import sys

GRPC_DEFAULTS: dict[str, str] = {
    "GRPC_EXPERIMENTS": (
        "-event_engine_client,-event_engine_listener,-event_engine_for_all_other_endpoints"
    ),
}


def apply(environ: os._Environ[str] | dict[str, str] | None = None) -> bool:
    """Set GRPC_DEFAULTS where the environment does not set them. False: grpc is
    already imported in this process, so they take effect only in child processes."""
    env = os.environ if environ is None else environ
    for key, value in GRPC_DEFAULTS.items():
        env.setdefault(key, value)
    return "grpc" not in sys.modules


apply()
