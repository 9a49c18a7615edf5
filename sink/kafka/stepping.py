"""Running a handler's dispatch step without a task when it does not wait.

A Kafka handler's `handle(ctx, call)` is a coroutine whose await is the dispatch
step (sink.kafka.handlers.api). Most steps never suspend (ApiVersions, Metadata of
known topics, Produce: it proposes and returns a future of the commit), so the
connection (sink.kafka.conn_dispatch) runs the step's first stretch inline, in the
protocol callback that parsed the request: no task, no loop wake-up. Only a step
that really waits (a topic to create, a relay to the leader, a SCRAM lookup) is
handed to a task, which resumes it exactly where it stopped (resume()).

Invariant: code a dispatch step runs before its first suspension has no current
task (asyncio.current_task() is None there). Nothing on those paths may need one
(asyncio.timeout(), TaskGroup): use asyncio.wait_for (tests/unit/sink/
test_kafka_stepping.py checks sink/ for them).
"""

from __future__ import annotations

import contextvars
import types
from collections.abc import Awaitable, Generator
from typing import Any, NamedTuple


class Done(NamedTuple):
    """The step finished inline: its result, or the exception it raised."""

    result: Any
    error: Exception | None


class Suspended(NamedTuple):
    """The step waits on `yielded` (what its coroutine gave the event loop)."""

    coro: Any
    """The step's coroutine (or its awaitable's iterator): send/throw/close."""
    yielded: Any


def first_step(ctx: contextvars.Context, step: Awaitable[Any]) -> Done | Suspended:
    """Run step (a coroutine, or any awaitable: a profiler may wrap handlers) in ctx
    until it returns, raises or suspends."""
    coro: Any = step if isinstance(step, types.CoroutineType) else step.__await__()
    try:
        yielded = ctx.run(coro.send, None)
    except StopIteration as stop:
        return Done(stop.value, None)
    except Exception as exc:
        return Done(None, exc)
    return Suspended(coro, yielded)


@types.coroutine
def _drive(coro: Any, yielded: Any) -> Generator[Any, Any, Any]:
    # What `await coro` does, starting after coro's first suspension: hand what it
    # yielded to the task (a future it blocks on, or None for a bare yield), pass
    # back what the task sends or throws (its cancellation included).
    while True:
        try:
            sent = yield yielded
        except GeneratorExit:
            coro.close()
            raise
        except BaseException as exc:
            try:
                yielded = coro.throw(exc)
            except StopIteration as stop:
                return stop.value
        else:
            try:
                yielded = coro.send(sent)
            except StopIteration as stop:
                return stop.value


async def resume(suspended: Suspended) -> Any:
    """The rest of a suspended step, to run as a task (its result is the step's)."""
    return await _drive(suspended.coro, suspended.yielded)
