"""UserService: SASL users as a node serves them. Credentials are read from the
applied state (sink.state.users.UserTable: every node agrees, so a client
authenticates anywhere), changed through the log on the leader only, and the
bootstrap users (sasl.bootstrap_users) written once by whichever node leads first.

Bootstrap invariant: the leader proposes a "bootstrap" op for every configured
user the applied table has never bootstrapped, each time it becomes the ready
leader; the state machine applies such an op only once per pair, so repeating it
(every leader does) changes nothing, and a user altered or deleted later stays so.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from sink.security.scram import MECHANISMS, ScramCredential, make_credential
from sink.security.user_ops import Op, encode_alter_users, upsert_op

if TYPE_CHECKING:  # only typed against: sink.security imports nothing of sink.state
    from sink.state.users import UserTable

log = logging.getLogger("sink.security")

_BOOTSTRAP_POLL_S = 0.1
"""How often a new leader looks whether it is ready to write (applied its term's entry)."""


class UserService:
    def __init__(
        self,
        table: Callable[[], UserTable],
        apply_entry: Callable[[bytes], Awaitable[Any]],
        *,
        is_leader: Callable[[], bool],
        leader_ready: Callable[[], bool],
        bootstrap: list[tuple[str, str]] = (),  # type: ignore[assignment]
        iterations: int = 8192,
    ) -> None:
        """apply_entry(data) -> the applied entry (raises the runtime's errors)."""
        self._table = table
        self._apply_entry = apply_entry
        self._is_leader = is_leader
        self._leader_ready = leader_ready
        # Derived once, at start-up: the passwords are not kept.
        self._bootstrap_ops: list[tuple[tuple[str, str], Op]] = [
            ((name, mech), upsert_op(name, mech, make_credential(mech, password, iterations), True))
            for name, password in bootstrap
            for mech in MECHANISMS
        ]
        self._task: asyncio.Task | None = None

    # ---------------------------------------------------------- read side

    def credential(self, user: str, mechanism: str) -> ScramCredential | None:
        return self._table().credential(user, mechanism)

    def describe_users(self) -> list[tuple[str, list[tuple[str, int]]]]:
        return self._table().describe()

    # --------------------------------------------------------- write side

    async def alter_users(
        self, ops: list[dict]
    ) -> list[tuple[str, ErrorCode, str | None]] | ErrorCode:
        if not self._is_leader():
            return ErrorCode.not_controller
        try:
            entry = await self._apply_entry(encode_alter_users(ops))
        except Exception as exc:  # the write's outcome: the client retries on the leader
            log.warning("sink.users write failed: %r", exc)
            return (
                ErrorCode.not_controller if not self._is_leader() else ErrorCode.request_timed_out
            )
        result = entry.result
        if result is None:
            return ErrorCode.invalid_request
        return [(u, ErrorCode(c), m) for u, c, m in result]

    # ------------------------------------------------------------ bootstrap

    def on_leadership_change(self) -> None:
        """fsm.on_leader_change callback: a new leader writes the missing bootstrap users."""
        if not self._bootstrap_ops or not self._is_leader():
            return
        if self._task is None or self._task.done():
            try:
                loop = asyncio.get_running_loop()
            except RuntimeError:  # no loop (a unit test's apply): nothing to write
                return
            self._task = loop.create_task(self._bootstrap())

    async def _bootstrap(self) -> None:
        while self._is_leader() and not self._leader_ready():
            await asyncio.sleep(_BOOTSTRAP_POLL_S)
        if not self._is_leader():
            return
        done = self._table().bootstrapped
        ops = [op for key, op in self._bootstrap_ops if key not in done]
        if not ops:
            return
        result = await self.alter_users(ops)
        if isinstance(result, list):
            log.warning("sink.users bootstrap users written: %s", sorted({u for u, _, _ in result}))
        else:
            log.warning("sink.users bootstrap write failed (%s); the next leader retries", result)

    def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
