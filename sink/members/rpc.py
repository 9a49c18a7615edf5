"""The read API's Members call: JSON requests onto the MembershipOperator.

    {"op": "list"}
    {"op": "add", "node": N, "raft": H:P, "kafka": H:P, "read_api": H:P}
                                         (no addresses: a node of the peers setting)
    {"op": "remove", "node": N}          (partition groups: drains N first; answered
                                         with code "draining" and the progress until no
                                         data group has N: call again, sink/members/drain.py)
    {"op": "undrain", "node": N}         (clear an abandoned drain's mark)
    {"op": "replace", "node": OLD, "new_node": NEW, "raft": ..., "kafka": ..., "read_api": ...}
    {"op": "transfer", "node": N}        (no "node": the most caught-up voter)
    {"op": "retire"}                     (sent by the leader to a node it removed)
    {"op": "move", "topic": T, "partition": P, "replicas": [N, ...]}
                                         (partition groups: move a partition's data group)
    {"op": "rebalance"}                  (partition groups: start the moves that even out
                                         replica counts, sink.placement.plan_rebalance)
    {"op": "moves"}                      (the moves not finished yet, as the controller's
                                         leader knows them after a ReadIndex)
    {"op": "move_done", "group": G, "target": [N, ...]}
                                         (sent by a group's leader once its voters are
                                         the target: sink/node/replica_moves.py)
    {"op": "host", "node": N, "host": LABEL}
                                         (partition groups: sent by node N to register
                                         its node.host: sink/node/host_labels.py)

"timeout_s" (default 600) bounds a change. Bad input is answered with code "invalid"
and a message naming the field; a change on a follower is forwarded to the leader once
(the caller, e.g. `raftsink members`, follows leader_id after that).
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from sink.members.drain import Drainer, progress_error
from sink.members.operator import INVALID, NOT_LEADER, MembershipError, MembershipOperator
from sink.readapi import read_api_pb2 as pb
from sink.readapi.client import ReadApiClient
from sink.state.members import MemberAddress, check_host_label

log = logging.getLogger("sink.members")

OPS = (
    "list",
    "add",
    "remove",
    "replace",
    "transfer",
    "retire",
    "move",
    "moves",
    "move_done",
    "undrain",
    "rebalance",
    "host",
)
MOVE_OPS = ("move", "moves", "move_done", "rebalance")
DEFAULT_TIMEOUT_S = 600.0
MAX_TIMEOUT_S = 24 * 3600.0


def parse_request(text: str) -> dict[str, Any]:
    """The request as a dict with checked fields; MembershipError(INVALID) otherwise."""
    try:
        req = json.loads(text or "{}")
    except json.JSONDecodeError as exc:
        raise MembershipError(INVALID, f"request is not JSON: {exc}") from None
    if not isinstance(req, dict):
        raise MembershipError(INVALID, "request must be a JSON object")
    op = req.get("op", "list")
    if op not in OPS:
        raise MembershipError(INVALID, f"unknown op {op!r}; one of {', '.join(OPS)}")
    for key in ("node", "new_node"):
        if req.get(key) is not None:
            _check_int(req[key], key, 1)
    if op in ("add", "remove", "replace", "undrain") and req.get("node") is None:
        raise MembershipError(INVALID, f"{op} needs a node id")
    if op == "move":
        if not isinstance(req.get("topic"), str) or not req["topic"]:
            raise MembershipError(INVALID, "move needs a topic name")
        _check_int(req.get("partition"), "partition", 0)
        _check_nodes(req.get("replicas"), "replicas")
    if op == "host":
        _check_int(req.get("node"), "node", 1)
        try:
            check_host_label(req.get("host"))
        except ValueError as exc:
            raise MembershipError(INVALID, f"host: {exc}") from None
    if op == "move_done":
        _check_int(req.get("group"), "group", 1)
        _check_nodes(req.get("target"), "target")
    t = req.get("timeout_s", DEFAULT_TIMEOUT_S)
    if not isinstance(t, (int, float)) or isinstance(t, bool) or not 0 < t <= MAX_TIMEOUT_S:
        raise MembershipError(INVALID, f"timeout_s must be in (0, {MAX_TIMEOUT_S:g}], got {t!r}")
    req["op"], req["timeout_s"] = op, float(t)
    return req


def _check_int(v: Any, key: str, least: int) -> None:
    if not isinstance(v, int) or isinstance(v, bool) or v < least:
        raise MembershipError(INVALID, f"{key} must be an integer >= {least}, got {v!r}")


def _check_nodes(v: Any, key: str) -> None:
    if not isinstance(v, list) or not v:
        raise MembershipError(INVALID, f"{key} must be a non-empty list of node ids")
    for n in v:
        _check_int(n, f"each of {key}", 1)


def _address(req: dict[str, Any]) -> MemberAddress | None:
    """The request's addresses; None if it gives none (a node of the peers setting)."""
    missing = [k for k in MemberAddress._fields if not req.get(k)]
    if len(missing) == len(MemberAddress._fields):
        return None
    if missing:
        raise MembershipError(INVALID, f"{req['op']} needs addresses: {', '.join(missing)}")
    return MemberAddress(req["raft"], req["kafka"], req["read_api"])


class MembersEndpoint:
    """One Members call: run it here on the leader, or forward it there once."""

    def __init__(
        self,
        operator: MembershipOperator,
        read_api_of: Callable[[int], str | None],
        retire: Callable[[str], Awaitable[None]] | None = None,
        client_credentials: Callable[[], Any] | None = None,
        moves: Any = None,
        drainer: Drainer | None = None,
    ) -> None:
        """client_credentials: this node's gRPC channel credentials for the read API of
        another node (TLS, sink.security.tls); None: plaintext. moves: the replica
        moves' controller side (sink.node.replica_moves.MoveOps; None: one group, no
        moves). drainer: partition groups' drains (None: one group, nothing to drain)."""
        self.moves = moves
        self.drainer = drainer
        self.client_credentials = client_credentials
        self.operator = operator
        self.read_api_of = read_api_of
        self.retire = retire
        self._bg: asyncio.Future | None = None  # the retirement, once started

    def _client(self, address: str) -> ReadApiClient:
        creds = self.client_credentials() if self.client_credentials else None
        return ReadApiClient(address, credentials=creds)

    async def call(self, text: str, forwarded: bool) -> pb.MembersReply:
        op = self.operator
        try:
            req = parse_request(text)
            leader = op.node.leader_id
            if req["op"] == "list" and not forwarded and leader and leader != op.node.id:
                # The leader's view has every member's match index and lag.
                reply = await self._forward(text, leader)
                if reply is not None and not reply.code:
                    return reply
            result = await self._run(req)
        except MembershipError as exc:
            leader = exc.leader_id or op.node.leader_id
            if exc.code == NOT_LEADER and not forwarded and leader and leader != op.node.id:
                forwarded_reply = await self._forward(text, leader)
                if forwarded_reply is not None:
                    return forwarded_reply
            return pb.MembersReply(code=exc.code, error=str(exc), leader_id=leader)
        return pb.MembersReply(json=json.dumps(result), leader_id=op.node.leader_id)

    async def _run(self, req: dict[str, Any]) -> dict[str, Any]:
        op, kind, timeout = self.operator, req["op"], req["timeout_s"]
        if kind == "list":
            return op.describe()
        if kind in MOVE_OPS:
            return await self._run_move(req)
        if kind == "host":
            if self.moves is None:
                raise MembershipError(INVALID, "host: partition groups are off (one group)")
            return await self.moves.register_host(req["node"], req["host"], timeout)
        if kind == "retire":
            if self.retire is not None:
                self._bg = asyncio.ensure_future(self.retire("the leader removed this node"))
            return {"op": "retire", "node": op.node.id}
        if kind == "add":
            return await op.add(req["node"], _address(req), timeout)
        if kind == "transfer":
            return await op.transfer(req.get("node"), timeout)
        if kind == "undrain":
            if self.drainer is None:
                raise MembershipError(INVALID, "undrain: partition groups are off (one group)")
            return await self.drainer.undrain(req["node"], timeout)
        if kind == "remove":
            if self.drainer is not None and op.check_removable(req["node"]):
                await self._drain(req["node"], timeout, mark=True)
            gone = op.address_of(req["node"])
            out = await op.remove(req["node"], timeout)
            await self._tell_removed(req["node"], gone)
            return out
        new = req.get("new_node") or req["node"]
        if self.drainer is not None and new != req["node"]:
            return await self._replace_and_drain(req, new, timeout)
        gone = op.address_of(req["node"])
        out = await op.replace(req["node"], new, _address(req), timeout)
        if new != req["node"]:
            await self._tell_removed(req["node"], gone)
        return out

    async def _drain(self, node: int, timeout: float, mark: bool) -> None:
        """One drain round; DRAINING (call again) until no data group has node."""
        assert self.drainer is not None
        progress = await self.drainer.round(node, timeout, mark=mark)
        if not progress["done"]:
            raise progress_error(progress)

    async def _replace_and_drain(
        self, req: dict[str, Any], new: int, timeout: float
    ) -> dict[str, Any]:
        """Partition groups: replace old with new in the controller (as without
        groups: remove first), then drain old's data groups (onto new, the least
        loaded). A re-run after the controller part (old gone, new a voter) only
        continues the drain. Refused up front if the drain could not keep the
        replication factors even with new."""
        assert self.drainer is not None
        op, old = self.operator, req["node"]
        m = op.node.membership()
        out: dict[str, Any] = {"op": "replace", "node": new, "replaced": old}
        if old in set(m["voters"]) | set(m["learners"]) or new not in m["voters"]:
            self.drainer.check(old, also=new)
            gone = op.address_of(old)
            out = await op.replace(old, new, _address(req), timeout)
            await self._tell_removed(old, gone)
        await self._drain(old, timeout, mark=False)
        return out

    async def _run_move(self, req: dict[str, Any]) -> dict[str, Any]:
        moves, kind = self.moves, req["op"]
        if moves is None:
            raise MembershipError(INVALID, f"{kind}: partition groups are off (one group)")
        if kind == "moves":
            return {"op": "moves", "moves": await moves.pending_now(req["timeout_s"])}
        if kind == "rebalance":
            return await moves.rebalance(req["timeout_s"])
        if kind == "move":
            return await moves.start(
                req["topic"], req["partition"], req["replicas"], req["timeout_s"]
            )
        return await moves.done(req["group"], req["target"], req["timeout_s"])

    async def _tell_removed(self, node_id: int, addr: MemberAddress | None) -> None:
        """Best effort: a removed node may not learn it from its log (the leader stops
        replicating to it); tell it to retire its Kafka listeners. A dead one cannot hear."""
        if addr is None:
            return
        client = self._client(addr.read_api)
        try:
            await client.members({"op": "retire"}, forwarded=True, timeout=2.0)
        except Exception as exc:
            log.info("sink.members node %d not told to retire: %r", node_id, exc)
        finally:
            await client.close()

    async def _forward(self, text: str, leader: int) -> pb.MembersReply | None:
        address = self.read_api_of(leader)
        if address is None:
            return None
        client = self._client(address)
        req = json.loads(text or "{}")
        try:
            wait = float(req.get("timeout_s", DEFAULT_TIMEOUT_S)) + 30.0
            return await client.members(req, forwarded=True, timeout=wait)
        except Exception as exc:
            log.info("sink.members forward to node %d failed: %r", leader, exc)
            return None
        finally:
            await client.close()
