"""`raftsink serve`: run one SinkNode until SIGTERM/SIGINT or a fatal storage error.

SIGHUP reloads the TLS certificate, key and CA files (sink.security.tls).
SIGTERM/SIGINT stop gracefully: a leader first hands leadership to its most caught-up
voter (node.shutdown_handoff_ms), the Kafka listeners answer what their connections
already sent and close them (node.shutdown_drain_ms), then listeners, read API and Raft
stop in turn.

A node whose log turns out damaged while it runs (a read finds a bad CRC, a missing
frame) and can be repaired (storage.on_corruption "repair", node identity, another
voter) stops its work and raises RepairRestart: the CLI runs the same command again
in this process (exec), and the restart's recovery keeps the intact prefix and
fetches the rest from the leader as a replacement (raftlog/storage/repair.py).

A node whose storage fails otherwise (ENOSPC or EIO from a segment write, an fdatasync
or LMDB's mdb_txn_commit; corruption it may not repair) stops itself: one CRITICAL line
`raftsink.node_stopped` naming the data directory and the errno, then exit code
EXIT_STORAGE_FAILURE. Never a
half-alive node: the disk queue refuses all further writes after a failure (a failed
fsync is never retried as if the data were durable), so the only way on is a restart,
whose recovery decides what is on disk. The other nodes go on while a majority is healthy.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import io
import logging
import os
import signal
from collections.abc import Coroutine
from typing import Any, TypeVar

from raftlog.runtime import stall_watch
from raftlog.runtime.gc_tuning import tune_gc_for_latency
from raftlog.storage.errors import CorruptLogError
from raftlog.storage.identity import IdentityError
from raftlog.storage.repair import why_not_repairable
from sink.config import SinkConfig
from sink.node.assemble import SinkNode

T = TypeVar("T")

log = logging.getLogger("sink.node")

EXIT_STORAGE_FAILURE = 3
"""Exit code of a node that stopped itself because its storage failed (documented in
docs/operations.md; `raftsink local` reports it)."""

EXIT_CONFIG = 2
"""Exit code of a node refused at start-up: a configuration error, or a data directory
of another cluster or node (raftlog.storage.identity.IdentityError)."""

EXIT_STOP_INCOMPLETE = 4
"""Exit code of a node whose graceful stop (SIGTERM/SIGINT) did not finish within
STOP_GRACEFUL_S: it exits anyway, like a crash (everything acknowledged is durable),
after logging where the stop was stuck (`raftsink.stop_incomplete`)."""

_DISK_ERRNOS = (errno.ENOSPC, errno.EIO, errno.EDQUOT, errno.EROFS)

FATAL_POLL_S = 0.5
"""How often serve() looks for a fatal storage error (the node records it; a
crash-stop within half a second is soon enough for an operator)."""


class RepairRestart(Exception):
    """The node stopped because a read found its log damaged, and a restart repairs it
    (sink.cli re-executes `raftsink serve`; the marker written by the read tells
    recovery where the damage starts)."""


def repair_refused(config: SinkConfig) -> str:
    """Why damaged storage stops this node instead of being repaired ("" if it is not)."""
    if config.storage.on_corruption != "repair":
        return "storage.on_corruption is 'stop'"
    return why_not_repairable(config.node_options().identity, len(config.peers))


STOP_AFTER_FAILED_START_S = 10.0
"""Longest wait for what a failed start had started to stop before the node exits."""

STOP_AFTER_FATAL_S = 10.0
"""Longest wait for a node whose storage failed to stop its parts before it exits
anyway: a step stuck on the failed disk (an fsync a dying disk never answers) must not
keep a crash-stopped node half alive, holding its ports."""

STOP_GRACEFUL_S = 20.0
"""Longest wait for a node's parts to stop after SIGTERM/SIGINT (after the leadership
hand-off, node.shutdown_handoff_ms): within the 30 s a supervisor (Kubernetes'
terminationGracePeriodSeconds, systemd's TimeoutStopSec defaults) allows before SIGKILL,
so a stuck step is logged with its stack instead of vanishing in a SIGKILL."""


async def stop_within(node: Any, node_id: int, seconds: float, after: str) -> bool:
    """Stop node's parts, at most `seconds` -> whether they all stopped. If not, one
    ERROR line `raftsink.stop_incomplete` with the stuck coroutine's stack (the node
    exits anyway: what it acknowledged is durable, so this is a crash at worst)."""
    task = asyncio.ensure_future(node.stop())
    done, _ = await asyncio.wait({task}, timeout=seconds)
    if task in done:
        if task.exception() is None:
            return True
        why = repr(task.exception())
    else:
        stack = io.StringIO()
        task.print_stack(limit=30, file=stack)
        task.cancel()
        why = f"still running; stuck at:\n{stack.getvalue()}"
    log.error(
        "raftsink.stop_incomplete node=%d: stopping %s did not finish within %.0f s; "
        "exiting anyway: %s",
        node_id,
        after,
        seconds,
        why,
    )
    return False


def run_on_event_loop(kind: str, main: Coroutine[Any, Any, T]) -> T:
    """Run main on the configured event loop ("uvloop" or "asyncio", node.event_loop)."""
    if kind == "uvloop":
        import uvloop

        return uvloop.run(main)
    return asyncio.run(main)


async def serve(config: SinkConfig, ready_line: bool = True) -> None:
    """Run a node until SIGTERM/SIGINT; prints one 'ready' line on stdout when serving."""
    node = SinkNode(config)
    try:
        await node.start()
    except (IdentityError, CorruptLogError, Exception) as exc:
        # Whatever started (listeners, gRPC servers, the transport) is stopped before
        # the loop closes: a server left running is torn down by its finalizer on a
        # closed loop ("Exception ignored in Server.__del__"), noise after the one
        # line that says why the node stopped. Bounded: a half-started node must exit.
        with contextlib.suppress(Exception):
            await asyncio.wait_for(node.stop(), STOP_AFTER_FAILED_START_S)
        if isinstance(exc, IdentityError):
            log.critical("raftsink.identity_refused node=%d: %s", config.node_id, exc)
            raise SystemExit(EXIT_CONFIG) from None
        if isinstance(exc, CorruptLogError):
            if exc.marked and not repair_refused(config):
                # found by a read during start (e.g. a membership entry): restart to repair
                _repair_restart(config, exc)
            _stop_on_corruption(config, exc)
        if storage_errno(exc) is None:
            raise
        _stop_loudly(config, exc)
    tune_gc_for_latency()
    stall_watch.install(asyncio.get_running_loop())
    if ready_line:
        print(
            f"ready node={config.node_id} kafka={config.me.kafka} read_api={config.me.read_api}",
            flush=True,
        )
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    # SIGHUP: rotated TLS certificates (new connections use them; no restart).
    loop.add_signal_handler(signal.SIGHUP, node.reload_tls)
    fatal = asyncio.ensure_future(_watch_fatal(node))
    stopped = asyncio.ensure_future(stop.wait())
    await asyncio.wait([stopped, fatal], return_when=asyncio.FIRST_COMPLETED)
    for task in (stopped, fatal):
        task.cancel()
    if node.fatal_error is None:
        # Graceful: a leader hands over before it stops accepting work, so produce
        # stalls for one TimeoutNow round instead of an election timeout.
        await node.hand_off_leadership(config.node.shutdown_handoff_ms / 1000)
        await node.drain_clients(config.node.shutdown_drain_ms / 1000)
        if not await stop_within(node, config.node_id, STOP_GRACEFUL_S, "on a signal"):
            raise SystemExit(EXIT_STOP_INCOMPLETE)
    else:
        await stop_within(node, config.node_id, STOP_AFTER_FATAL_S, "after the storage failure")
    if node.fatal_error is not None:
        corrupt = _corruption_in(node.fatal_error)
        if corrupt is not None and corrupt.marked and not repair_refused(config):
            _repair_restart(config, corrupt)
        _stop_loudly(config, node.fatal_error)


def _repair_restart(config: SinkConfig, corrupt: CorruptLogError) -> None:
    log.error(
        "raftsink.repair_restart node=%d dir=%s: %s. This node restarts itself to repair its "
        "log: it keeps the intact prefix and fetches the rest from the leader, voting again "
        "once re-admitted",
        config.node_id,
        config.data_dir,
        corrupt,
    )
    raise RepairRestart(str(corrupt))


async def _watch_fatal(node: SinkNode) -> None:
    """A storage failure stops the node: exit loudly instead of serving half-dead."""
    while node.fatal_error is None:
        await asyncio.sleep(FATAL_POLL_S)


def storage_errno(exc: BaseException) -> int | None:
    """The disk errno (ENOSPC, EIO, EDQUOT, EROFS) behind exc or its causes, else None.
    LMDB's errors carry no errno attribute, only strerror's text
    ("mdb_txn_commit: No space left on device")."""
    seen: set[int] = set()
    cur: BaseException | None = exc
    while cur is not None and id(cur) not in seen:
        seen.add(id(cur))
        if isinstance(cur, OSError) and cur.errno in _DISK_ERRNOS:
            return cur.errno
        text = str(cur)
        for code in _DISK_ERRNOS:
            if os.strerror(code) in text:
                return code
        cur = cur.__cause__ or cur.__context__
    return None


def _stop_on_corruption(config: SinkConfig, exc: CorruptLogError) -> None:
    """Acknowledged data in the middle of this node's log is damaged: never skip it.
    The cluster still has it on a majority, so the fix is to let the node come back
    as a replacement (docs/operations.md, "Replacing a disk")."""
    log.critical(
        "raftsink.node_stopped node=%d dir=%s: %s. This node stopped itself (exit code %d) "
        "instead of repairing its log because %s, and never serves or votes with a damaged "
        "log. `raftsink verify` shows the damage and what a repair would keep. With other "
        "healthy voters: start it with storage.on_corruption=repair (the default) to repair "
        "it from its peers, or move %s away and start the node empty: it rejoins as a "
        "replacement under a new incarnation, catches up from the leader and votes again "
        "once admitted. Without them (a single node, a majority damaged), the cluster "
        "cannot vouch for the lost entries: restore from a backup.",
        config.node_id,
        config.data_dir,
        exc,
        EXIT_STORAGE_FAILURE,
        repair_refused(config) or "the damage could not be repaired",
        config.data_dir,
    )
    raise SystemExit(EXIT_STORAGE_FAILURE)


def _corruption_in(exc: BaseException) -> CorruptLogError | None:
    seen: set[int] = set()
    cur: BaseException | None = exc
    while cur is not None and id(cur) not in seen:
        seen.add(id(cur))
        if isinstance(cur, CorruptLogError):
            return cur
        cur = cur.__cause__ or cur.__context__
    return None


def _stop_loudly(config: SinkConfig, exc: BaseException) -> None:
    corrupt = _corruption_in(exc)
    if corrupt is not None:
        _stop_on_corruption(config, corrupt)
    code = storage_errno(exc)
    what = f"errno={errno.errorcode[code]} ({os.strerror(code)})" if code else "errno=none"
    log.critical(
        "raftsink.node_stopped node=%d dir=%s %s error=%r: this node stopped itself "
        "(exit code %d); the cluster goes on while a majority is healthy. Fix the disk "
        "(free space, replace it), then restart the node: recovery keeps what is durable",
        config.node_id,
        config.data_dir,
        what,
        exc,
        EXIT_STORAGE_FAILURE,
    )
    raise SystemExit(EXIT_STORAGE_FAILURE)
