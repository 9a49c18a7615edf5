"""A deterministic driver for the sans-I/O GroupCoordinator: a manual clock, tokens,
replies collected by token, and proposals that the test commits (or fails) by hand
or automatically (the log as a list, applied to a real GroupStore)."""

from __future__ import annotations

import itertools

from kio.schema.errors import ErrorCode

from sink.groups import GroupCoordinator, GroupOptions
from sink.groups.messages import (
    HeartbeatRequest,
    JoinRequest,
    JoinResponse,
    Propose,
    Reply,
    SyncRequest,
    SyncResponse,
)
from sink.groups.records import DELETE_GROUPS, GROUP_GENERATION
from sink.state.groups import GroupStore

RANGE = ("range", b"\x00\x00\x00\x00\x00\x01\x00\x01t\xff\xff\xff\xff")


class Harness:
    def __init__(self, options: GroupOptions | None = None, *, auto_commit: bool = True) -> None:
        ids = itertools.count(1)
        self.core = GroupCoordinator(
            options or GroupOptions(initial_rebalance_delay_ms=0),
            new_member_id=lambda client: f"{client or 'member'}-{next(ids)}",
        )
        self.core.load([], 0.0)
        self.now = 0.0
        self.tokens = itertools.count(1)
        self.replies: dict[int, object] = {}
        self.pending: list[Propose] = []
        self.log: list[bytes] = []
        self.store = GroupStore()
        self.auto_commit = auto_commit
        self._committing = False

    # -------------------------------------------------------------- effects

    def _run(self, effects) -> None:
        for e in effects:
            if isinstance(e, Reply):
                assert e.token not in self.replies, f"token {e.token} answered twice"
                self.replies[e.token] = e.response
            else:
                self.pending.append(e)
        if self.auto_commit and not self._committing:
            self.commit_all()

    def commit_all(self, error: ErrorCode = ErrorCode.none) -> None:
        self._committing = True
        try:
            self._commit_all(error)
        finally:
            self._committing = False

    def _commit_all(self, error: ErrorCode) -> None:
        while self.pending:
            p = self.pending.pop(0)
            if error == ErrorCode.none:
                self.log.append(p.data)
                if p.data[0] == GROUP_GENERATION:
                    self.store.apply_generation(p.data)
                elif p.data[0] == DELETE_GROUPS:
                    self.store.apply_delete(p.data)
            self._run(self.core.committed(self.now, p.proposal, error))

    def advance(self, ms: float) -> None:
        """Move the clock, firing every deadline on the way in order."""
        end = self.now + ms
        while True:
            nd = self.core.next_deadline()
            if nd is None or nd > end:
                break
            self.now = max(self.now, nd)
            self._run(self.core.tick(self.now))
        self.now = end

    # ------------------------------------------------------------- requests

    def join(
        self,
        group: str = "g",
        member: str = "",
        *,
        protocols=(RANGE,),
        ptype: str = "consumer",
        session: int = 10_000,
        rebalance: int = 30_000,
        instance: str | None = None,
        client: str = "c",
        v4: bool = True,
    ) -> int:
        token = next(self.tokens)
        req = JoinRequest(
            group, member, instance, ptype, tuple(protocols), session, rebalance, client, "/h", v4
        )
        self._run(self.core.join(self.now, token, req))
        return token

    def join_id(self, group: str = "g", **kw) -> tuple[str, int]:
        """Two-step join: MEMBER_ID_REQUIRED, then join with the id (token parked)."""
        t = self.join(group, **kw)
        r = self.replies[t]
        assert isinstance(r, JoinResponse) and r.error == ErrorCode.member_id_required, r
        return r.member_id, self.join(group, r.member_id, **kw)

    def sync(self, group: str, member: str, generation: int, assignments=(), instance=None) -> int:
        token = next(self.tokens)
        req = SyncRequest(group, generation, member, instance, None, None, tuple(assignments))
        self._run(self.core.sync(self.now, token, req))
        return token

    def heartbeat(self, group: str, member: str, generation: int, instance=None) -> ErrorCode:
        token = next(self.tokens)
        req = HeartbeatRequest(group, generation, member, instance)
        self._run(self.core.heartbeat(self.now, token, req))
        return self.replies[token]

    def leave(self, group: str, *members) -> object:
        token = next(self.tokens)
        self._run(self.core.leave(self.now, token, group, members))
        return self.replies[token]

    def reply(self, token: int):
        return self.replies.get(token)

    def join_reply(self, token: int) -> JoinResponse:
        r = self.replies[token]
        assert isinstance(r, JoinResponse)
        return r

    def sync_reply(self, token: int) -> SyncResponse:
        r = self.replies[token]
        assert isinstance(r, SyncResponse)
        return r

    def stable_group(self, n: int, group: str = "g", **kw) -> tuple[list[str], int]:
        """n members joined and synced (leader assigns b"a-<member>"): (ids, generation)."""
        ids, tokens = [], []
        for _ in range(n):
            mid, t = self.join_id(group, **kw)
            ids.append(mid)
            tokens.append(t)
        self.advance(0)
        if any(self.reply(t) is None for t in tokens):
            self.advance(kw.get("rebalance", 30_000))
        replies = [self.join_reply(t) for t in tokens]
        gen = replies[0].generation_id
        leader = replies[0].leader
        assert all(r.error == ErrorCode.none and r.generation_id == gen for r in replies)
        syncs = [
            self.sync(
                group, mid, gen, [(m, b"a-" + m.encode()) for m in ids] if mid == leader else ()
            )
            for mid in ids
        ]
        for mid, t in zip(ids, syncs, strict=True):
            assert self.sync_reply(t).assignment == b"a-" + mid.encode()
        assert self.core.state_of(group) == "Stable"
        return ids, gen
