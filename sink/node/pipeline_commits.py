"""PipelineCommits: the read API's Commit when partitions live in data groups.

A pipeline's committed offsets hold back retention, and retention of a partition runs
in its data group (DataGroupMachine's PartitionData), so a commit must land in the data
group of every partition it names, not in the controller (whose machine hosts no
partition data and ignores it). With `cluster.partition_groups` off nothing here runs:
the read API proposes the name-based COMMIT to the one group, as before.

One Commit request:

  1. plan_commit splits its rows by where each can be proposed:
     - an unknown topic/partition (no placement)       -> error 3, never retried here;
     - a group this node leads and whose machine serves the partition
                                                       -> proposed here, one
       PIPELINE_COMMIT entry (by topic id) per group;
     - any other group                                 -> forwarded to its leader (one
       request per leader node, marked forwarded), or error 6 when no leader is known
       or the request was itself forwarded (a forward is never forwarded again: two
       nodes with stale views cannot bounce a request between them);
  2. the proposals and forwards run concurrently; the reply is sent only when every
     one has answered (committed, failed or timed out);
  3. the reply lists one PartitionCommitError per row not committed (3 unknown, 6 not
     the leader / unreachable, 7 timed out) and carries the first one's code in
     error_code, so a caller that checks only error_code retries (a re-commit is
     harmless: offsets only move forward, per partition, at apply).

Invariants: every row of the request is either committed (in some group's log, applied
there) or named in exactly one error row; partitions counts, per group reached, the
partitions the pipeline covers in that group (the groups' machines' answer).
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import grpc

from raftlog.runtime import RaftError
from sink.readapi import read_api_pb2 as pb
from sink.readapi.wire import ERR_NOT_LEADER, ERR_REQUEST_TIMED_OUT, ERR_UNKNOWN_TOPIC_OR_PARTITION
from sink.state import data_commands as dcmd

Row = tuple[str, int, int]
"""(topic, partition, next offset the pipeline will read)."""

MAX_ERRORS_IN_TEXT = 5
"""Error rows spelled out in CommitReply.error (all are in CommitReply.errors)."""


class LocalCommit(NamedTuple):
    """Rows of one data group this node leads, by topic id for its PIPELINE_COMMIT."""

    group: Any  # RaftGroup (apply)
    rows: list[Row]
    ids: list[tuple[uuid.UUID, int, int]]


@dataclass(slots=True)
class CommitPlan:
    local: dict[int, LocalCommit] = field(default_factory=dict)  # group id -> rows
    remote: dict[int, list[Row]] = field(default_factory=dict)  # leader node -> rows
    errors: list[pb.PartitionCommitError] = field(default_factory=list)


def _error(row: Row, code: int, text: str) -> pb.PartitionCommitError:
    return pb.PartitionCommitError(topic=row[0], partition=row[1], error_code=code, error=text)


def plan_commit(
    rows: Sequence[Row],
    lookup: Callable[[str, int], tuple[Any, Any]],
    leader_of: Callable[[str, int], int],
    me: int,
    forwarded: bool,
) -> CommitPlan:
    """Split rows by group (pure: no I/O). lookup(topic, partition) -> (placement or
    None, HostedGroup here or None) as DataGroups.lookup; leader_of(topic, partition) ->
    the leader this node knows (-1: none), as PartitionRouting.role(...).leader."""
    plan = CommitPlan()
    for row in rows:
        topic, partition, offset = row
        g, h = lookup(topic, partition)
        if g is None:
            plan.errors.append(
                _error(
                    row,
                    ERR_UNKNOWN_TOPIC_OR_PARTITION,
                    f"unknown topic or partition {topic}/{partition}",
                )
            )
            continue
        if h is not None and h.group.is_leader():
            if not h.serves():  # its SERVE is not applied yet: nothing to hold back
                plan.errors.append(
                    _error(
                        row,
                        ERR_NOT_LEADER,
                        f"group {g.group} does not serve {topic}/{partition} yet",
                    )
                )
                continue
            local = plan.local.get(g.group)
            if local is None:
                local = plan.local[g.group] = LocalCommit(h.group, [], [])
            local.rows.append(row)
            local.ids.append((h.topic_id, partition, offset))
            continue
        leader = leader_of(topic, partition)
        if leader < 0 or leader == me:
            text = f"no leader of group {g.group} ({topic}/{partition}) known here"
            plan.errors.append(_error(row, ERR_NOT_LEADER, text))
        elif forwarded:
            text = (
                f"node {me} does not lead group {g.group} ({topic}/{partition}) after a "
                f"forward (leader: {leader})"
            )
            plan.errors.append(_error(row, ERR_NOT_LEADER, text))
        else:
            plan.remote.setdefault(leader, []).append(row)
    return plan


class PipelineCommits:
    """Commit with partition groups: propose where this node leads, forward the rest."""

    def __init__(
        self,
        groups: Any,
        leader_of: Callable[[str, int], int],
        node_id: int,
        read_api_of: Callable[[int], str | None],
        client: Callable[[str], Any],
        timeout_s: float = 10.0,
    ) -> None:
        """groups: DataGroups (lookup); leader_of: the known leader of a partition's group;
        read_api_of(node) -> its read-API address; client(address) -> a ReadApiClient
        (closed after each forward). timeout_s bounds each proposal; a forward waits a
        little longer, so the leader's own timeout answers first."""
        self.groups = groups
        self.leader_of = leader_of
        self.node_id = node_id
        self.read_api_of = read_api_of
        self.client = client
        self.timeout_s = timeout_s
        self.proposed = 0  # PIPELINE_COMMIT entries proposed here
        self.forwarded = 0  # requests forwarded to another node

    async def commit(self, pipeline: str, rows: Sequence[Row], forwarded: bool) -> pb.CommitReply:
        plan = plan_commit(rows, self.groups.lookup, self.leader_of, self.node_id, forwarded)
        jobs = [self._propose(pipeline, c) for c in plan.local.values()]
        jobs += [self._forward(pipeline, node, r) for node, r in plan.remote.items()]
        covered = 0
        errors = list(plan.errors)
        for count, errs in await asyncio.gather(*jobs):
            covered += count
            errors.extend(errs)
        return reply_of(len(rows), covered, errors)

    async def _propose(
        self, pipeline: str, c: LocalCommit
    ) -> tuple[int, list[pb.PartitionCommitError]]:
        self.proposed += 1
        data = dcmd.encode_pipeline_commit(pipeline, c.ids)
        try:
            res = await c.group.apply(data, timeout=self.timeout_s)
        except TimeoutError as exc:  # ProposalTimeoutError too: the outcome is unknown
            return 0, [_error(r, ERR_REQUEST_TIMED_OUT, f"commit timed out: {exc}") for r in c.rows]
        except RaftError as exc:
            text = f"{type(exc).__name__}: {exc}"
            return 0, [_error(r, ERR_NOT_LEADER, text) for r in c.rows]
        return int(res.result or 0), []

    async def _forward(
        self, pipeline: str, node: int, rows: list[Row]
    ) -> tuple[int, list[pb.PartitionCommitError]]:
        address = self.read_api_of(node)
        if not address:
            text = f"leader {node} has no known read-API address"
            return 0, [_error(r, ERR_NOT_LEADER, text) for r in rows]
        self.forwarded += 1
        req = pb.CommitRequest(
            pipeline=pipeline,
            offsets=[pb.PartitionOffset(topic=t, partition=p, offset=o) for t, p, o in rows],
        )
        client = self.client(address)
        try:
            reply = await client.commit_request(req, forwarded=True, timeout=self.timeout_s + 2)
        except grpc.aio.AioRpcError as exc:
            code = (
                ERR_REQUEST_TIMED_OUT
                if exc.code() == grpc.StatusCode.DEADLINE_EXCEEDED
                else ERR_NOT_LEADER
            )
            text = f"leader {node} unreachable: {exc.code().name} {exc.details()}"
            return 0, [_error(r, code, text) for r in rows]
        finally:
            await client.close()
        if reply.error_code and not reply.errors:
            # A whole-request refusal (a node without groups, an old node): every row.
            text = f"leader {node}: {reply.error}"
            return reply.partitions, [_error(r, reply.error_code, text) for r in rows]
        return reply.partitions, list(reply.errors)


def reply_of(requested: int, covered: int, errors: list[pb.PartitionCommitError]) -> pb.CommitReply:
    """The Commit answer: error_code is the first error row's (0: all committed)."""
    if not errors:
        return pb.CommitReply(partitions=covered)
    shown = "; ".join(f"{e.topic}/{e.partition}: {e.error}" for e in errors[:MAX_ERRORS_IN_TEXT])
    more = len(errors) - MAX_ERRORS_IN_TEXT
    text = f"{len(errors)} of {requested} partition(s) not committed: {shown}"
    if more > 0:
        text += f"; and {more} more"
    return pb.CommitReply(
        error_code=errors[0].error_code, error=text, partitions=covered, errors=errors
    )
