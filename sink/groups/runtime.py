"""GroupRuntime: the asyncio driver of one node's GroupCoordinator.

One object per node, active while the node is the ready Raft leader (its own-term
entry applied, so the applied groups include every committed generation). It owns:
- the coordinator's clock: ONE timer on the node's loop, re-armed to the
  coordinator's next deadline after every step (no task per request or member);
- parked requests: each request gets a token and a future the coordinator's Reply
  resolves;
- proposals: each Propose goes to the log through `propose` (which maps failures to
  coordinator errors); its outcome is fed back with coordinator.committed().
Leadership: on leader start/stop (the state machine's on_leader_change) and before
each request it checks who leads. Losing leadership unloads the coordinator (parked
requests answer NOT_COORDINATOR); becoming the ready leader loads the applied groups
(members get a fresh session timeout). Not leader: NOT_COORDINATOR; leader but not
ready: COORDINATOR_LOAD_IN_PROGRESS.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
from collections.abc import Awaitable, Callable, Iterable

from kio.schema.errors import ErrorCode

from sink.groups.coordinator import GroupCoordinator
from sink.groups.membership import NO_OFFSETS, GroupStatus, OffsetHolders
from sink.groups.messages import (
    DescribedGroup,
    Effect,
    HeartbeatRequest,
    JoinRequest,
    JoinResponse,
    LeaveResponse,
    ListedGroup,
    Propose,
    Reply,
    SyncRequest,
    SyncResponse,
)
from sink.groups.options import GroupOptions
from sink.groups.placement import coordinator_slot
from sink.groups.records import GroupRecord

log = logging.getLogger("sink.groups")


class GroupRuntime:
    def __init__(
        self,
        options: GroupOptions | None = None,
        *,
        propose: Callable[[bytes], Awaitable[ErrorCode]],
        is_leader: Callable[[], bool],
        ready_term: Callable[[], int | None],
        records: Callable[[], Iterable[GroupRecord]],
        slot_owner: Callable[[int], int],
        coordinator: GroupCoordinator | None = None,
        offset_holders: Callable[[], OffsetHolders] = lambda: NO_OFFSETS,
    ) -> None:
        """propose(data) -> ErrorCode.none once committed and applied, else the
        coordinator error to answer (NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE).
        ready_term() -> the Raft term while this node is the ready leader, else None.
        records() -> the applied groups. slot_owner(slot) -> node id hosting that
        coordinator slot (-1: unknown). offset_holders() -> the applied committed
        offsets (groups that only commit offsets are listed as Empty groups)."""
        self.core = coordinator or GroupCoordinator(options, offset_holders=offset_holders)
        self._propose = propose
        self._is_leader = is_leader
        self._ready_term = ready_term
        self._records = records
        self._slot_owner = slot_owner
        self._term: int | None = None
        self._tokens = itertools.count(1)
        self._parked: dict[int, asyncio.Future] = {}
        self._tasks: set[asyncio.Task] = set()
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at: float | None = None
        self.loads = 0
        """How many times the groups were loaded (each leadership)."""

    # ------------------------------------------------------------ leadership

    def on_leadership_change(self) -> None:
        """Called on leader start/stop (in apply, on the loop)."""
        with contextlib.suppress(RuntimeError):  # no running loop: a test applying by hand
            self._sync_leadership()

    def _sync_leadership(self) -> None:
        term = self._ready_term()
        if term != self._term and self.core.loaded:
            self._run(self.core.unload())
        self._term = None if not self.core.loaded else self._term
        if term is not None and not self.core.loaded:
            self.core.load(self._records(), self._now())
            self._term = term
            self.loads += 1
            log.info("groups.loaded term=%d groups=%d", term, len(self.core.groups))
            self._rearm()

    def _status(self) -> ErrorCode:
        self._sync_leadership()
        if not self._is_leader():
            return ErrorCode.not_coordinator
        if not self.core.loaded:
            return ErrorCode.coordinator_load_in_progress
        return ErrorCode.none

    def coordinator_id(self, group_id: str) -> int:
        """The node coordinating group_id: the owner of its slot (-1: none known)."""
        return self._slot_owner(coordinator_slot(group_id))

    # -------------------------------------------------------------- requests

    async def join(self, req: JoinRequest) -> JoinResponse:
        err = self._status()
        if err != ErrorCode.none:
            return JoinResponse(err, member_id=req.member_id)
        token, fut = self._park()
        self._run(self.core.join(self._now(), token, req))
        return await fut

    async def sync(self, req: SyncRequest) -> SyncResponse:
        err = self._status()
        if err != ErrorCode.none:
            return SyncResponse(err)
        token, fut = self._park()
        self._run(self.core.sync(self._now(), token, req))
        return await fut

    async def heartbeat(self, req: HeartbeatRequest) -> ErrorCode:
        err = self._status()
        if err != ErrorCode.none:
            return err
        token, fut = self._park()
        self._run(self.core.heartbeat(self._now(), token, req))
        return await fut

    async def leave(
        self, group_id: str, members: Iterable[tuple[str, str | None]]
    ) -> LeaveResponse:
        members = list(members)
        err = self._status()
        if err != ErrorCode.none:
            return LeaveResponse(err, tuple((m, i, err) for m, i in members))
        token, fut = self._park()
        self._run(self.core.leave(self._now(), token, group_id, members))
        return await fut

    async def delete(self, group_ids: Iterable[str]) -> list[tuple[str, ErrorCode]]:
        group_ids = list(group_ids)
        err = self._status()
        if err != ErrorCode.none:
            return [(g, err) for g in group_ids]
        token, fut = self._park()
        self._run(self.core.delete(self._now(), token, group_ids))
        return await fut

    def describe(self, group_ids: Iterable[str]) -> list[DescribedGroup]:
        err = self._status()
        if err != ErrorCode.none:
            return [DescribedGroup(g, err, "", "", "") for g in group_ids]
        return self.core.describe(group_ids)

    def list_groups(
        self, states: Iterable[str] = (), types: Iterable[str] = ()
    ) -> tuple[ErrorCode, list[ListedGroup]]:
        """A node that coordinates nothing answers an empty list (Kafka's brokers do;
        admin clients ask every broker)."""
        err = self._status()
        if err == ErrorCode.not_coordinator:
            return ErrorCode.none, []
        if err != ErrorCode.none:
            return err, []
        return self.core.list_groups(states, types)

    # ------------------------------------------------- for OffsetCommit/Delete

    def check_commit(
        self, group: str, generation: int, member_id: str, instance_id: str | None
    ) -> ErrorCode:
        """GroupMembership.check_commit: may OffsetCommit store this member's offsets?"""
        err = self._status()
        if err != ErrorCode.none:
            return err
        return self.core.check_commit(group, generation, member_id, instance_id)

    def is_empty(self, group: str) -> bool:
        return self.core.is_empty(group)

    def subscribed(self, group: str, topic: str) -> bool:
        return self.core.subscribed(group, topic)

    def status(self, group: str) -> GroupStatus | None:
        """GroupMembership.status (OffsetDelete, offset expiry): None for a group the
        coordinator does not know (it only commits offsets)."""
        if self.core.state_of(group) is None:
            return None
        return GroupStatus(
            empty=self.core.is_empty(group), subscribed=_SubscribedTopics(self.core, group)
        )

    # -------------------------------------------------------------- plumbing

    def _now(self) -> float:
        return asyncio.get_running_loop().time() * 1000.0

    def _park(self) -> tuple[int, asyncio.Future]:
        token = next(self._tokens)
        fut = asyncio.get_running_loop().create_future()
        self._parked[token] = fut
        return token, fut

    def _run(self, effects: list[Effect]) -> None:
        for e in effects:
            if isinstance(e, Reply):
                fut = self._parked.pop(e.token, None)
                if fut is not None and not fut.done():  # done: its client went away
                    fut.set_result(e.response)
            elif isinstance(e, Propose):
                task = asyncio.get_running_loop().create_task(self._commit(e))
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)
        self._rearm()

    async def _commit(self, p: Propose) -> None:
        try:
            err = await self._propose(p.data)
        except Exception as exc:  # never leave a parked request hanging on a bug
            log.error("groups.propose failed %r", exc, exc_info=exc)
            err = ErrorCode.unknown_server_error
        self._run(self.core.committed(self._now(), p.proposal, err))

    def _rearm(self) -> None:
        when = self.core.next_deadline()
        if when == self._timer_at:
            return
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._timer_at = when
        if when is not None:
            loop = asyncio.get_running_loop()
            self._timer = loop.call_at(when / 1000.0, self._on_timer)

    def _on_timer(self) -> None:
        self._timer = None
        self._timer_at = None
        self._run(self.core.tick(self._now()))

    def close(self) -> None:
        """Stop the timer and answer parked requests (the node is stopping)."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        for fut in self._parked.values():
            if not fut.done():
                fut.cancel()
        self._parked.clear()


class _SubscribedTopics:
    """`topic in view`: does a member of the group subscribe to topic (asked lazily)."""

    def __init__(self, core: GroupCoordinator, group: str) -> None:
        self._core = core
        self._group = group

    def __contains__(self, topic: object) -> bool:
        return isinstance(topic, str) and self._core.subscribed(self._group, topic)
