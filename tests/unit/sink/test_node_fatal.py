"""SinkNode.fatal_error: what serve() watches to stop a node whose storage failed.

With partition groups a node's RaftHost runs the controller (group 0, SinkNode.node)
and its data groups on one disk and one LMDB index. A data group whose disk queue hit
ENOSPC is dead for good (the queue refuses every later write), so the node must stop
as it does when the controller's storage fails: never a half-alive node. The groups
are faked here (only their fatal_error is read); the real disk is
tests/integration/test_disk_enospc.py, run with RAFTSINK_CLUSTER_PARTITION_GROUPS=true.
"""

from __future__ import annotations

import asyncio
import errno
import importlib
from types import SimpleNamespace

import pytest

from sink.config import load_config
from sink.node import storage_errno
from sink.node.assemble import SinkNode
from tests.unit.test_config import BASE

serve_mod = importlib.import_module("sink.node.serve")  # sink.node.serve is also a function


def _node(groups: dict[int, BaseException | None]) -> SinkNode:
    node = SinkNode(load_config(None, env={}, overrides=BASE))
    fakes = {gid: SimpleNamespace(fatal_error=exc) for gid, exc in groups.items()}
    node.node = fakes[0]  # the controller is group 0 of the host
    node.host = SimpleNamespace(groups=fakes)
    return node


def test_a_data_groups_storage_failure_stops_the_node():
    enospc = OSError(errno.ENOSPC, "No space left on device")
    node = _node({0: None, 3: None, 7: enospc})
    assert node.fatal_error is enospc
    assert storage_errno(node.fatal_error) == errno.ENOSPC  # the log line names the errno
    node.host.groups.clear()  # RaftHost.stop() forgets its groups: serve() asks after it
    assert node.fatal_error is enospc


def test_the_controllers_failure_comes_first_and_healthy_groups_are_none():
    controller = OSError(errno.EIO, "Input/output error")
    assert _node({0: controller, 3: OSError(errno.ENOSPC, "full")}).fatal_error is controller
    assert _node({0: None, 3: None}).fatal_error is None


def test_one_group_node_without_a_host():
    node = SinkNode(load_config(None, env={}, overrides=BASE))
    assert node.fatal_error is None  # not started
    failed = OSError(errno.ENOSPC, "full")
    node.node = SimpleNamespace(fatal_error=failed)
    assert node.fatal_error is failed


class _StuckOnStop:
    """A node whose disk failed and whose stop() never returns (an fsync a dying disk
    does not answer)."""

    def __init__(self, config) -> None:
        self.fatal_error: BaseException | None = None

    async def start(self) -> None:
        self.fatal_error = OSError(errno.EIO, "Input/output error")

    def reload_tls(self) -> None:
        pass

    async def stop(self) -> None:
        await asyncio.Event().wait()


def test_a_node_whose_stop_hangs_after_a_storage_failure_still_exits(monkeypatch, caplog):
    monkeypatch.setattr(serve_mod, "SinkNode", _StuckOnStop)
    monkeypatch.setattr(serve_mod, "FATAL_POLL_S", 0.01)
    monkeypatch.setattr(serve_mod, "STOP_AFTER_FATAL_S", 0.05)
    config = load_config(None, env={}, overrides=BASE)
    with pytest.raises(SystemExit) as exited:
        asyncio.run(serve_mod.serve(config, ready_line=False))
    assert exited.value.code == serve_mod.EXIT_STORAGE_FAILURE
    said = caplog.text
    assert "raftsink.stop_incomplete" in said and "raftsink.node_stopped" in said
    assert "errno=EIO" in said


class _StuckOnGracefulStop(_StuckOnStop):
    """A healthy node whose stop() never returns: SIGTERM must still end it."""

    async def start(self) -> None:
        pass

    async def hand_off_leadership(self, seconds: float) -> int:
        return 0

    async def drain_clients(self, seconds: float) -> None:
        pass

    async def stop(self) -> None:
        await self._stuck_here()

    async def _stuck_here(self) -> None:
        await asyncio.Event().wait()


def test_a_graceful_stop_that_hangs_exits_with_the_stuck_step_logged(monkeypatch, caplog):
    import os
    import signal

    monkeypatch.setattr(serve_mod, "SinkNode", _StuckOnGracefulStop)
    monkeypatch.setattr(serve_mod, "STOP_GRACEFUL_S", 0.05)
    config = load_config(None, env={}, overrides=BASE)

    async def run() -> None:
        loop = asyncio.get_running_loop()
        loop.call_later(0.05, os.kill, os.getpid(), signal.SIGTERM)
        await serve_mod.serve(config, ready_line=False)

    with pytest.raises(SystemExit) as exited:
        asyncio.run(run())
    assert exited.value.code == serve_mod.EXIT_STOP_INCOMPLETE
    said = caplog.text
    assert "raftsink.stop_incomplete" in said and "on a signal" in said
    assert "_stuck_here" in said  # where it was stuck, for the bug report


def test_a_graceful_stop_that_finishes_exits_cleanly(monkeypatch):
    import os
    import signal

    stopped: list[bool] = []

    class _Quick(_StuckOnGracefulStop):
        async def stop(self) -> None:
            stopped.append(True)

    monkeypatch.setattr(serve_mod, "SinkNode", _Quick)
    config = load_config(None, env={}, overrides=BASE)

    async def run() -> None:
        asyncio.get_running_loop().call_later(0.05, os.kill, os.getpid(), signal.SIGTERM)
        await serve_mod.serve(config, ready_line=False)

    asyncio.run(run())
    assert stopped == [True]
