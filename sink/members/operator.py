"""MembershipOperator: the operator's membership changes, run on the Raft leader.

Every change is a sequence of single-server Raft configuration changes (raftlog's
membership.py: consecutive configurations differ by at most one voter, so any two
majorities intersect), plus "M" entries carrying addresses (sink.state.members):

    add N       M set N -> add_learner N -> wait until N caught up -> add_voter N
    remove N    (N leads: transfer leadership first) -> remove_node N -> M forget N
    replace O N remove O -> add N (N may equal O: same id, new storage or address)
    transfer T  leadership to T, or with no T to the most caught-up voter

Removing first when replacing keeps a dead node's vote out of the quorum while the new
one catches up (3 voters with 1 dead -> 2 voters, both alive -> 3).

Invariants the operator keeps on top of the core's (which refuses a configuration
entry while the previous one is uncommitted):
- one operator change at a time on this leader: a second is refused with BUSY naming
  the change in flight (an add waits for catch-up, which the core cannot see); the
  same change again (the CLI moved on to another node when the one forwarding its
  call died, or the operator re-ran it) joins the one in flight and gets its outcome;
  if the first caller goes away (its call cancelled, which stops the change), a
  joiner gets OUTCOME_UNKNOWN and re-runs it;
- never remove the last voter; never name a node that is not a member (remove,
  transfer, replace's old node) or add one that already is.
The state is the leader's: if leadership moves mid-change, the steps already
committed stay, and the operator re-runs the command at the new leader (every step
is idempotent to re-run: an existing learner is promoted, a gone node is gone).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from raftlog.runtime import (
    BusyError,
    LeaderChangedError,
    NotLeaderError,
    ProposalTimeoutError,
    RaftError,
)
from sink.state.members import (
    MemberAddress,
    check_address,
    encode_forget_member,
    encode_set_member,
)

# Error codes of MembershipError (also the read API's Members reply "code").
UNKNOWN_NODE = "unknown_node"
ALREADY_MEMBER = "already_member"
LAST_VOTER = "last_voter"
BUSY = "busy"
NOT_LEADER = "not_leader"
INVALID = "invalid"
TIMEOUT = "timeout"
OUTCOME_UNKNOWN = "outcome_unknown"


class MembershipError(Exception):
    """A refused or failed membership operation; `code` is one of the constants above."""

    def __init__(self, code: str, message: str, leader_id: int = 0) -> None:
        super().__init__(message)
        self.code = code
        self.leader_id = leader_id


@dataclass(frozen=True, slots=True)
class CatchUp:
    """When a learner counts as caught up: it reached a commit index the leader had
    `round_s` earlier or less (under load the leader moves on while it catches up)."""

    poll_s: float = 0.05
    round_s: float = 1.0


class MembershipOperator:
    """Validated membership changes over a RaftNode (`node`) and the sink state
    machine's MemberTable (`fsm.members`). Only the leader changes anything."""

    def __init__(
        self,
        node: Any,
        fsm: Any,
        initial: dict[int, MemberAddress],
        catch_up: CatchUp | None = None,
    ) -> None:
        """initial: the `peers` setting's addresses (the initial configuration)."""
        self.node = node
        self.fsm = fsm
        self.initial = dict(initial)
        self.catch_up = catch_up or CatchUp()
        self._in_flight: _Change | None = None

    # ------------------------------------------------------------- reading

    def address_of(self, node_id: int) -> MemberAddress | None:
        """The log's address for node_id, else the `peers` setting's."""
        return self.fsm.members.get(node_id) or self.initial.get(node_id)

    def describe(self) -> dict[str, Any]:
        """The live configuration as this node knows it (any node answers)."""
        m = self.node.membership()
        st = self.node.status()
        followers = st.get("followers", {})
        commit = st["commit"]
        members = {}
        for nid in sorted(set(m["voters"]) | set(m["learners"])):
            addr = self.address_of(nid)
            entry: dict[str, Any] = {
                "voter": nid in m["voters"],
                "addresses": addr._asdict() if addr else None,
            }
            if nid in self.fsm.members.hosts:  # registered (partition groups)
                entry["host"] = self.fsm.members.hosts[nid]
            if nid == self.node.id:
                entry["match"] = st["durable_index"]
            elif nid in followers:
                entry["match"] = followers[nid]["match"]
            if "match" in entry and self.node.is_leader():
                entry["lag"] = max(0, commit - entry["match"])
            members[str(nid)] = entry
        return {
            "node": self.node.id,
            "leader": self.node.leader_id,
            "term": st["term"],
            "commit": commit,
            "voters": m["voters"],
            "learners": m["learners"],
            "members": members,
            "in_flight": self._in_flight.what if self._in_flight else None,
        }

    # ------------------------------------------------------------- changes

    async def add(self, node_id: int, addr: MemberAddress | None, timeout: float) -> dict[str, Any]:
        """Add node_id as a learner, then promote it to voter once caught up. addr None:
        a node of the `peers` setting re-added (each node keeps its own view of it)."""
        self._check_id(node_id)
        self._known(node_id, addr)

        async def body() -> dict[str, Any]:
            if node_id in self.node.membership()["voters"]:
                raise MembershipError(ALREADY_MEMBER, f"node {node_id} is already a voter")
            return await self._add(node_id, addr, timeout)

        return await self._exclusive(f"add {node_id}", (addr,), body, timeout)

    def check_removable(self, node_id: int) -> bool:
        """The refusals of remove(node_id) before anything is done (a drain comes
        first with partition groups): not the leader, a change in flight, the last
        voter. -> whether node_id is a member (an unknown node is refused by remove
        itself, after a drain that found nothing on it)."""
        self._check_id(node_id)
        self._require_leader()
        if self._in_flight is not None and self._in_flight.what != f"remove {node_id}":
            raise self._busy()
        m = self.node.membership()
        if m["voters"] == [node_id]:
            raise MembershipError(LAST_VOTER, f"node {node_id} is the last voter")
        return node_id in set(m["voters"]) | set(m["learners"])

    async def remove(self, node_id: int, timeout: float) -> dict[str, Any]:
        """Remove a voter or learner (never the last voter)."""
        self._check_id(node_id)
        return await self._exclusive(
            f"remove {node_id}", (), lambda: self._remove(node_id, timeout), timeout
        )

    async def replace(
        self, old_id: int, new_id: int, addr: MemberAddress | None, timeout: float
    ) -> dict[str, Any]:
        """Replace member old_id (dead or alive) with new_id at addr (new_id may be old_id;
        addr None: new_id's addresses from the `peers` setting)."""
        self._check_id(old_id)
        self._check_id(new_id)
        self._known(new_id, addr)

        async def body() -> dict[str, Any]:
            m = self.node.membership()
            now = set(m["voters"]) | set(m["learners"])
            # Re-run of a replace that a leader change interrupted: the new node's
            # address is in the log (written first) or it is a learner already.
            resumed = new_id != old_id and (
                new_id in m["learners"]
                or (addr is not None and self.fsm.members.get(new_id) == addr)
            )
            if new_id != old_id and new_id in m["voters"]:
                raise MembershipError(ALREADY_MEMBER, f"node {new_id} is already a member")
            if new_id != old_id and new_id in now and not resumed:
                raise MembershipError(ALREADY_MEMBER, f"node {new_id} is already a member")
            if old_id not in now and not resumed:
                raise MembershipError(UNKNOWN_NODE, f"node {old_id} is not a member")
            t0 = time.monotonic()
            if addr is not None and new_id != old_id:
                await self._set_address(new_id, addr, timeout)
            if old_id in now:
                await self._remove(old_id, timeout)
            out = await self._add(new_id, addr, timeout)
            out["op"] = "replace"
            out["replaced"] = old_id
            out["seconds"] = round(time.monotonic() - t0, 3)
            return out

        return await self._exclusive(f"replace {old_id} with {new_id}", (addr,), body, timeout)

    async def transfer(self, target: int | None, timeout: float) -> dict[str, Any]:
        """Hand leadership to target, or (None) to the most caught-up other voter."""
        self._require_leader()
        if self._in_flight is not None:
            raise self._busy()
        return await self._transfer(target, timeout)

    # ------------------------------------------------------------- steps

    async def _add(
        self, node_id: int, addr: MemberAddress | None, timeout: float
    ) -> dict[str, Any]:
        t0 = time.monotonic()
        deadline = t0 + timeout
        if addr is None:  # a `peers` node: no "M" entry, every node keeps its own view
            addr = self.address_of(node_id)
            assert addr is not None  # _known checked it
        else:
            await self._set_address(node_id, addr, timeout)
        if node_id not in self.node.membership()["learners"]:
            await self._step(self.node.add_learner(node_id, addr.raft, timeout=timeout))
        learner_s = time.monotonic() - t0
        await self._wait_caught_up(node_id, deadline)
        caught_up_s = time.monotonic() - t0
        await self._step(self.node.add_voter(node_id, addr.raft, timeout=timeout))
        return {
            "op": "add",
            "node": node_id,
            "learner_s": round(learner_s, 3),
            "caught_up_s": round(caught_up_s, 3),
            "seconds": round(time.monotonic() - t0, 3),
        }

    async def _set_address(self, node_id: int, addr: MemberAddress, timeout: float) -> None:
        """An "M" entry with node_id's addresses, unless the log has these already."""
        if self.fsm.members.get(node_id) != addr:
            await self._step(self.node.apply(encode_set_member(node_id, addr), timeout=timeout))

    async def _remove(self, node_id: int, timeout: float) -> dict[str, Any]:
        m = self.node.membership()
        if node_id not in set(m["voters"]) | set(m["learners"]):
            raise MembershipError(UNKNOWN_NODE, f"node {node_id} is not a member")
        if m["voters"] == [node_id]:
            raise MembershipError(LAST_VOTER, f"node {node_id} is the last voter")
        if node_id == self.node.id:
            # The leader never removes itself: it hands over and the caller retries at
            # the new leader (the read API forwards), which removes this node.
            others = [v for v in m["voters"] if v != node_id]
            await self._transfer(None, timeout, among=others)
            raise MembershipError(
                NOT_LEADER, "leadership moved away to remove this node", self.node.leader_id
            )
        t0 = time.monotonic()
        await self._step(self.node.remove_node(node_id, timeout=timeout))
        await self._step(self.node.apply(encode_forget_member(node_id), timeout=timeout))
        return {"op": "remove", "node": node_id, "seconds": round(time.monotonic() - t0, 3)}

    async def _transfer(
        self, target: int | None, timeout: float, among: list[int] | None = None
    ) -> dict[str, Any]:
        m = self.node.membership()
        me = self.node.id
        if target is None:
            target = self.most_caught_up(among)
            if target is None:
                raise MembershipError(INVALID, "no other voter to hand leadership to")
        elif target not in m["voters"]:
            kind = "a learner" if target in m["learners"] else "not a member"
            raise MembershipError(UNKNOWN_NODE, f"node {target} is {kind}; name a voter")
        t0 = time.monotonic()
        if target != me:
            await self._step(self.node.transfer_leader(target, timeout=timeout))
        return {"op": "transfer", "node": target, "seconds": round(time.monotonic() - t0, 3)}

    def most_caught_up(self, among: list[int] | None = None) -> int | None:
        """The other voter with the highest match index (lowest id on a tie); None if
        there is none. Only the leader knows its followers' match indexes."""
        voters = among if among is not None else self.node.membership()["voters"]
        followers = self.node.status().get("followers", {})
        best = [(-followers[v]["match"], v) for v in voters if v != self.node.id and v in followers]
        return min(best)[1] if best else None

    async def _wait_caught_up(self, node_id: int, deadline: float) -> None:
        """Until node_id reached a commit index the leader had at most round_s ago."""
        cu = self.catch_up
        while True:
            target, started = self.node.commit_index, time.monotonic()
            while self._match(node_id) < target:
                if time.monotonic() > deadline:
                    raise MembershipError(
                        TIMEOUT,
                        f"node {node_id} did not catch up in time (match "
                        f"{self._match(node_id)}, leader commit {self.node.commit_index}); "
                        "it stays a learner: re-run the command to promote it",
                    )
                self._require_leader()
                await asyncio.sleep(cu.poll_s)
            if time.monotonic() - started <= cu.round_s:
                return

    def _match(self, node_id: int) -> int:
        return self.node.status().get("followers", {}).get(node_id, {}).get("match", 0)

    # ------------------------------------------------------------- guards

    def _known(self, node_id: int, addr: MemberAddress | None) -> None:
        if addr is not None:
            _valid(addr)
        elif self.address_of(node_id) is None:
            raise MembershipError(
                INVALID,
                f"node {node_id} is not in the peers setting: give its raft, kafka and "
                "read_api addresses",
            )

    def _check_id(self, node_id: int) -> None:
        if not isinstance(node_id, int) or isinstance(node_id, bool) or node_id < 1:
            raise MembershipError(INVALID, f"node id must be an integer >= 1, got {node_id!r}")

    def _require_leader(self) -> None:
        if not self.node.is_leader():
            lead = self.node.leader_id
            raise MembershipError(NOT_LEADER, f"node {self.node.id} is not the leader", lead)

    def _busy(self) -> MembershipError:
        assert self._in_flight is not None
        return MembershipError(BUSY, f"a membership change is in flight: {self._in_flight.what}")

    async def _exclusive(
        self,
        what: str,
        args: tuple,
        body: Callable[[], Awaitable[dict[str, Any]]],
        timeout: float,
    ) -> dict[str, Any]:
        """Run body as the one change in flight, or join the same change in flight
        (equal `what` and args) and return its outcome; any other is BUSY."""
        self._require_leader()
        current = self._in_flight
        if current is not None:
            if (current.what, current.args) != (what, args):
                raise self._busy()
            return await current.join(timeout)
        change = self._in_flight = _Change(what, args)
        try:
            out = await body()
        except BaseException as exc:
            change.finish(exc)
            raise
        finally:
            self._in_flight = None
        change.finish(out)
        return out

    async def _step(self, aw: Any) -> Any:
        """One Raft step; runtime errors become MembershipErrors with a clear code."""
        try:
            return await aw
        except NotLeaderError as exc:
            raise MembershipError(NOT_LEADER, str(exc), exc.leader_id) from None
        except BusyError as exc:
            raise MembershipError(BUSY, str(exc)) from None
        except ValueError as exc:
            raise MembershipError(INVALID, str(exc)) from None
        except (LeaderChangedError, ProposalTimeoutError) as exc:
            raise MembershipError(
                OUTCOME_UNKNOWN,
                f"{type(exc).__name__}: {exc}; the step may still take effect: see "
                "`raftsink members list`, then run the command again if needed",
            ) from None
        except (RaftError, TimeoutError) as exc:
            raise MembershipError(TIMEOUT, f"{type(exc).__name__}: {exc}") from None


class _Change:
    """The change in flight: what it is, and its outcome for callers that join it."""

    def __init__(self, what: str, args: tuple) -> None:
        self.what, self.args = what, args
        self._outcome: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()

    def finish(self, outcome: dict[str, Any] | BaseException) -> None:
        """Its first caller's result or error; a cancelled first caller (its client
        went away, which stops the change) leaves the outcome unknown to joiners."""
        if isinstance(outcome, asyncio.CancelledError):
            outcome = MembershipError(
                OUTCOME_UNKNOWN,
                f"{self.what} was stopped (its first caller went away); the steps done "
                "stay: see `raftsink members list`, then run the command again",
            )
        if isinstance(outcome, BaseException):
            self._outcome.set_exception(outcome)
            self._outcome.exception()  # retrieved: no joiner need be waiting
        else:
            self._outcome.set_result(outcome)

    async def join(self, timeout: float) -> dict[str, Any]:
        done, _ = await asyncio.wait({self._outcome}, timeout=timeout)
        if not done:
            raise MembershipError(
                TIMEOUT,
                f"{self.what} (in flight, joined) did not finish within {timeout:g} s; "
                "it goes on: run the command again to wait for it",
            )
        return self._outcome.result()


def _valid(addr: MemberAddress) -> bool:
    try:
        check_address(addr)
    except ValueError as exc:
        raise MembershipError(INVALID, str(exc)) from None
    return True
