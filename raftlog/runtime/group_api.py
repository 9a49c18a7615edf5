"""RaftGroup's client API: proposals, linearizable reads, leadership transfer, membership.

Split out of group.py (the Ready pipeline). Proposals only queue here (braft's
ApplyQueue): the group's raft loop proposes everything queued in one batch, and
the apply loop completes the futures, parked by index, with the term they were
proposed in. A mixin of RaftGroup: the fields it uses are RaftGroup's.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from dataclasses import dataclass

from raftlog import core
from raftlog.core import Role
from raftlog.runtime.errors import (
    BusyError,
    LeaderChangedError,
    NotLeaderError,
    ProposalTimeoutError,
)
from raftlog.runtime.state_machine import ApplyResult


@dataclass(slots=True)
class Waiter:
    """A proposal's (or read's) future, the term it was proposed in, its deadline."""

    term: int
    future: asyncio.Future
    deadline: float


class GroupClientMixin:
    """apply / propose / apply_batch / read_index / transfer_leader / membership changes."""

    async def apply(self, data: bytes, timeout: float | None = None) -> ApplyResult:
        """Replicate data and apply it; returns once committed and applied here.

        NotLeaderError (with a leader hint) or BusyError: nothing was proposed.
        LeaderChangedError / ProposalTimeoutError: the outcome is unknown.
        """
        fut = self._enqueue_proposals((data,), timeout)[0]
        return await fut

    def propose(self, data: bytes, timeout: float | None = None) -> asyncio.Future:
        """Queue data now (in call order) and return the future of its ApplyResult.

        The synchronous form of apply(): raises NotLeaderError / BusyError at
        once (nothing proposed); the future fails with LeaderChangedError or
        ProposalTimeoutError (outcome unknown). Calls on one event loop are
        proposed in the order they were made.
        """
        return self._enqueue_proposals((data,), timeout)[0]

    async def apply_batch(
        self, datas: Sequence[bytes], timeout: float | None = None
    ) -> list[ApplyResult]:
        """As apply(), for several entries proposed together (consecutive indexes)."""
        futs = self._enqueue_proposals(datas, timeout)
        return list(await asyncio.gather(*futs))

    def _enqueue_proposals(
        self, datas: Sequence[bytes], timeout: float | None
    ) -> list[asyncio.Future]:
        """braft's ApplyQueue: proposals made while the raft loop runs are
        proposed together in its next iteration, one batch, one broadcast."""
        self._check_running()
        if self.role is not Role.LEADER:
            raise NotLeaderError(self.leader_id, self.peers.get(self.leader_id))
        if self._pending_count + len(datas) > self.options.max_pending_proposals:
            raise BusyError(f"{self._pending_count} proposals pending; retry later")
        deadline = time.monotonic() + (timeout or self.options.proposal_timeout_s)
        futs = []
        create = self._loop.create_future
        for data in datas:
            fut = create()
            self._proposals.append((data, fut, deadline))
            futs.append(fut)
        self._pending_count += len(datas)
        self._wake.set()
        return futs

    def _propose_queued(self) -> None:
        batch, self._proposals = self._proposals, []
        try:
            placed = self.core.propose_batch([d for d, _, _ in batch])
        except core.RawNotLeaderError as exc:
            err: Exception = NotLeaderError(exc.leader, self.peers.get(exc.leader))
        except core.ProposalDroppedError as exc:
            err = LeaderChangedError(f"proposal refused: {exc}")
        else:
            for (index, term), (_, fut, deadline) in zip(placed, batch, strict=True):
                self._park(index, Waiter(term, fut, deadline))
            self.stats.proposals += len(placed)
            return
        self._pending_count -= len(batch)
        for _, fut, _ in batch:
            if not fut.done():
                fut.set_exception(err)

    async def read_index(self, timeout: float | None = None) -> int:
        """A linearizable read point: returns once this node applied up to an
        index that includes every write committed before the call."""
        self._check_running()
        self._read_seq += 1
        ctx = f"{self.id}:{self._read_seq}".encode()
        fut = self._loop.create_future()
        deadline = time.monotonic() + (timeout or self.options.proposal_timeout_s)
        self._reads[ctx] = Waiter(0, fut, deadline)
        try:
            self.core.read_index(ctx)  # wakes a quiesced group: a real heartbeat round
        except core.RawNotLeaderError as exc:
            del self._reads[ctx]
            raise NotLeaderError(exc.leader, self.peers.get(exc.leader)) from None
        finally:
            self._sync_quiesced()
        self._wake.set()
        index = await fut
        if self.applied < index:
            done = self._loop.create_future()
            self._applied_waiters.append((index, done))
            await asyncio.wait_for(done, timeout=max(0.0, deadline - time.monotonic()))
        return index

    async def transfer_leader(self, target: int, timeout: float | None = None) -> None:
        """Hand leadership to target; returns once target leads."""
        self._check_running()
        try:
            self.core.transfer_leader(target)
        except core.RawNotLeaderError as exc:
            raise NotLeaderError(exc.leader, self.peers.get(exc.leader)) from None
        finally:
            self._sync_quiesced()
        self._wake.set()
        deadline = time.monotonic() + (timeout or self.options.proposal_timeout_s)
        while self.leader_id != target:
            if time.monotonic() > deadline:
                raise ProposalTimeoutError(f"leadership did not move to {target}")
            await asyncio.sleep(self.options.tick_ms / 1000)

    async def add_learner(self, node_id: int, address: str, timeout: float | None = None) -> int:
        """Add a non-voting member that replicates the log; returns the config entry's index."""
        return await self._change_membership("add_learner", node_id, address, timeout)

    async def add_voter(self, node_id: int, address: str, timeout: float | None = None) -> int:
        """Add a voter (or promote a learner); one change at a time."""
        return await self._change_membership("add_voter", node_id, address, timeout)

    async def remove_node(self, node_id: int, timeout: float | None = None) -> int:
        """Remove a voter or learner; one change at a time."""
        return await self._change_membership("remove_node", node_id, None, timeout)

    async def _change_membership(
        self, op: str, node_id: int, address: str | None, timeout: float | None
    ) -> int:
        self._check_running()
        if address is not None:
            self.peers[node_id] = address
            self.transport.add_peer(node_id, address)
        deadline = time.monotonic() + (timeout or self.options.proposal_timeout_s)
        while True:
            try:
                index, term = getattr(self.core, op)(node_id)
                break
            except core.RawNotLeaderError as exc:
                self._sync_quiesced()
                raise NotLeaderError(exc.leader, self.peers.get(exc.leader)) from None
            except core.ProposalDroppedError as exc:
                # The leader's own identity changes (recording a learner's
                # incarnation, re-admitting a replacement) and a learner still
                # catching up are waited out; an operator's change in flight is not.
                waitable = isinstance(exc, core.NotYetAdmissibleError) or (
                    self.core.auto_change_in_flight()
                )
                if not waitable or time.monotonic() > deadline:
                    raise BusyError(f"membership change refused now: {exc}") from None
            self._sync_quiesced()
            await asyncio.sleep(self.options.tick_ms / 1000)
            self._check_running()
        self._sync_quiesced()
        fut = self._loop.create_future()
        self._park(index, Waiter(term, fut, deadline))
        self._pending_count += 1
        self._wake.set()
        await fut
        return index

    def _park(self, index: int, waiter: Waiter) -> None:
        """Wait for index to be applied. A waiter still parked at index is from an
        earlier term of this node's leadership (kept through a step-down, see
        RaftGroup._on_step_down): the new entry at its index means a later leader
        truncated it, so its outcome is known now: not applied."""
        old = self._waiters.get(index)
        if old is not None:
            self._pending_count -= 1
            if not old.future.done():
                old.future.set_exception(
                    LeaderChangedError(f"entry {index} was replaced by a later leader")
                )
        self._waiters[index] = waiter
