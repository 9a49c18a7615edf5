"""sink.kafka.stepping: a dispatch step run inline until it suspends, then resumed by
a task exactly where it stopped; and the invariant that makes the inline part safe."""

from __future__ import annotations

import asyncio
import contextvars
import pathlib
import re

import pytest

from sink.kafka.stepping import Done, Suspended, first_step, resume

VAR: contextvars.ContextVar[str] = contextvars.ContextVar("test_stepping", default="unset")


def test_a_step_that_does_not_wait_is_done_inline():
    async def step() -> str:
        return VAR.get()

    ctx = contextvars.copy_context()
    ctx.run(VAR.set, "conn")
    assert first_step(ctx, step()) == Done("conn", None)


def test_a_step_that_raises_is_done_with_its_error():
    async def step() -> None:
        raise ValueError("bad")

    out = first_step(contextvars.copy_context(), step())
    assert isinstance(out, Done) and isinstance(out.error, ValueError)


def test_a_suspended_step_resumes_in_a_task_in_the_same_context():
    async def body():
        fut = asyncio.get_running_loop().create_future()
        seen = []

        async def step() -> str:
            seen.append(asyncio.current_task())  # inline: the caller's (none in a callback)
            value = await fut
            await asyncio.sleep(0)  # a bare yield, as well
            seen.append(asyncio.current_task())
            return f"{value}-{VAR.get()}"

        ctx = contextvars.copy_context()
        ctx.run(VAR.set, "conn")
        out = first_step(ctx, step())
        assert isinstance(out, Suspended)
        task = asyncio.get_running_loop().create_task(resume(out), context=ctx)
        await asyncio.sleep(0)
        assert not task.done()
        fut.set_result("v")
        assert await task == "v-conn"
        assert seen == [asyncio.current_task(), task]

    asyncio.run(body())


def test_cancelling_the_task_cancels_the_step():
    async def body():
        cleaned = []

        async def step() -> None:
            try:
                await asyncio.sleep(3600)
            finally:
                cleaned.append(True)

        out = first_step(contextvars.copy_context(), step())
        assert isinstance(out, Suspended)
        task = asyncio.get_running_loop().create_task(resume(out))
        await asyncio.sleep(0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert cleaned == [True]

    asyncio.run(body())


def test_an_exception_after_resuming_is_the_tasks():
    async def body():
        fut = asyncio.get_running_loop().create_future()

        async def step() -> None:
            await fut
            raise KeyError("late")

        out = first_step(contextvars.copy_context(), step())
        assert isinstance(out, Suspended)
        task = asyncio.get_running_loop().create_task(resume(out))
        fut.set_result(None)
        with pytest.raises(KeyError):
            await task

    asyncio.run(body())


# What needs a current task; a dispatch step's inline part has none.
_NEEDS_TASK = re.compile(r"asyncio\.timeout\(|TaskGroup\(|asyncio\.current_task\(")
# Client-side code, never on a handler's path (the CLI's admin requests).
_CLIENT_ONLY = {"sink/kafka/admin.py", "sink/kafka/stepping.py"}  # stepping: its docs


def test_nothing_under_sink_needs_a_current_task():
    """sink.kafka.stepping's invariant: handlers (and what they call) may run before
    their first suspension with no current task, so nothing reachable from them may
    use asyncio.timeout, TaskGroup or current_task (asyncio.wait_for works)."""
    root = pathlib.Path(__file__).resolve().parents[3]
    found = []
    for path in sorted((root / "sink").rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        if rel in _CLIENT_ONLY:
            continue
        for i, line in enumerate(path.read_text().splitlines(), 1):
            if _NEEDS_TASK.search(line):
                found.append(f"{rel}:{i}: {line.strip()}")
    assert not found, "needs a current task (see sink.kafka.stepping):\n" + "\n".join(found)


class _Wrapped:
    """An awaitable that is not a coroutine (as bench/stage_profile wraps handlers)."""

    def __init__(self, coro) -> None:
        self.coro = coro

    def __await__(self):
        return (yield from self.coro.__await__())


def test_any_awaitable_is_stepped_and_resumed():
    async def body():
        fut = asyncio.get_running_loop().create_future()

        async def quick() -> int:
            return 1

        async def slow() -> int:
            return await fut + 1

        assert first_step(contextvars.copy_context(), _Wrapped(quick())) == Done(1, None)
        out = first_step(contextvars.copy_context(), _Wrapped(slow()))
        assert isinstance(out, Suspended)
        task = asyncio.get_running_loop().create_task(resume(out))
        fut.set_result(41)
        assert await task == 42

    asyncio.run(body())


def test_a_relay_to_the_leader_runs_inline_without_a_task():
    """forward_frame (Metadata's and InitProducerId's relay) may be reached before a
    dispatch step's first suspension: run from a plain loop callback, it must fail
    as a ForwardError (nobody listens), not as a RuntimeError for want of a task."""
    import socket

    from sink.kafka.forward import ForwardError, forward_frame

    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]

    async def body():
        loop = asyncio.get_running_loop()
        stepped = loop.create_future()
        ctx = contextvars.copy_context()
        loop.call_soon(
            lambda: stepped.set_result(
                first_step(ctx, forward_frame("127.0.0.1", port, b"x", timeout=5.0))
            )
        )
        out = await stepped
        if isinstance(out, Done):
            assert isinstance(out.error, ForwardError), out
            return
        with pytest.raises(ForwardError):
            await loop.create_task(resume(out), context=ctx)

    asyncio.run(body())
