"""AclService: the ACL bindings as a node serves them. Read from the applied state
(sink.state.acls.AclTable: every node agrees), changed through the log on the
leader only (a follower's CreateAcls / DeleteAcls handler relays to the leader)."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

from kio.schema.errors import ErrorCode

from sink.security.acl import AclBinding, AclFilter
from sink.security.acl_ops import Op, encode_alter_acls
from sink.security.authorizer import BindingSource

log = logging.getLogger("sink.security")


class AclService:
    def __init__(
        self,
        table: Callable[[], BindingSource],
        apply_entry: Callable[[bytes], Awaitable[Any]],
        *,
        is_leader: Callable[[], bool],
    ) -> None:
        """apply_entry(data) -> the applied entry (raises the runtime's errors)."""
        self._table = table
        self._apply_entry = apply_entry
        self._is_leader = is_leader

    def describe(self, f: AclFilter) -> list[AclBinding]:
        return [b for b in self._table().bindings() if f.matches(b)]

    async def alter_acls(self, ops: list[Op]) -> list[Any] | ErrorCode:
        """sink.security.acl_ops ops through the log -> per op its answer
        (sink.state.acls), or one error for all (NOT_CONTROLLER off the leader, a
        failed write)."""
        if not self._is_leader():
            return ErrorCode.not_controller
        try:
            entry = await self._apply_entry(encode_alter_acls(ops))
        except Exception as exc:  # the write's outcome is unknown: the client retries
            log.warning("sink.acls write failed: %r", exc)
            return (
                ErrorCode.not_controller if not self._is_leader() else ErrorCode.request_timed_out
            )
        result = entry.result
        if result is None:
            return ErrorCode.invalid_request
        return list(result)
