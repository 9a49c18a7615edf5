"""`raftsink members`: the live cluster configuration and its changes, over the read API.

    raftsink members list             [--json]
    raftsink members add N            --raft H:P --kafka H:P --read-api H:P
                                      (no addresses: a node of the peers setting, re-added)
    raftsink members remove N         (partition groups: drains N's data groups first)
    raftsink members undrain N        (partition groups: N takes new replicas again)
    raftsink members replace OLD      [--new-id NEW] --raft H:P --kafka H:P --read-api H:P
    raftsink members transfer-leader  [N]   (no N: the most caught-up voter)

The cluster is given by --nodes HOST:PORT,... (read API addresses) or --cluster FILE
(cluster.json of `raftsink local`). Any node answers; a change runs on the leader (the
node asked forwards it; this command follows the leader named in a not_leader reply).
Start a new node with `raftsink serve --node-join ...` before adding it.
With partition groups, `remove` (and `replace` with a new id) first moves every data
group off the node (replication factors kept, least loaded nodes first; refused with
"add a node first" when that is impossible), printing the progress, within --timeout;
run it again after a timeout or a crash to continue (docs/operations.md).
Exit status: 0 done, 1 refused or unreachable (the reason on stderr), 2 usage.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import Callable
from typing import Any

from sink.cli_connect import READ_API_CREDENTIALS, add_read_api_args, use_read_api_connection
from sink.readapi import ReadApiClient

HELP = "list, add, remove or replace cluster members; transfer leadership"
_HOPS = 4
"""How many leader hints to follow (a leader that removes itself hands over first)."""


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("members", help=HELP, description=__doc__.split("\n\n")[0])
    p.add_argument(
        "action", choices=("list", "add", "remove", "replace", "transfer-leader", "undrain")
    )
    p.add_argument("node", nargs="?", type=int, help="the node id the action names")
    p.add_argument("--nodes", help="read API addresses HOST:PORT,... of the cluster")
    p.add_argument("--cluster", help="cluster.json written by `raftsink local`")
    p.add_argument("--new-id", type=int, help="replace: the new node's id (default: the same)")
    p.add_argument("--raft", help="add/replace: the node's Raft address HOST:PORT")
    p.add_argument("--kafka", help="add/replace: the node's Kafka address HOST:PORT")
    p.add_argument("--read-api", help="add/replace: the node's read API address HOST:PORT")
    p.add_argument("--timeout", type=float, default=600.0, help="seconds (default 600)")
    p.add_argument("--json", action="store_true", help="print the raw JSON reply")
    add_read_api_args(p)
    p.set_defaults(func=run)


def node_addresses(args: argparse.Namespace) -> list[str]:
    if args.cluster:
        with open(args.cluster) as f:
            return [n["read_api"] for _, n in sorted(json.load(f)["nodes"].items())]
    if args.nodes:
        return [a.strip() for a in args.nodes.split(",") if a.strip()]
    raise ValueError("give --nodes HOST:PORT,... (read API addresses) or --cluster FILE")


def build_request(args: argparse.Namespace) -> dict[str, Any]:
    """The Members request for the command line; ValueError on bad usage."""
    op = {"transfer-leader": "transfer"}.get(args.action, args.action)
    req: dict[str, Any] = {"op": op, "timeout_s": args.timeout}
    if args.node is not None:
        if args.node < 1:
            raise ValueError(f"node id must be >= 1, got {args.node}")
        req["node"] = args.node
    elif op in ("add", "remove", "replace", "undrain"):
        raise ValueError(f"{args.action} needs a node id")
    if op in ("add", "replace"):
        keys = ("raft", "kafka", "read_api")
        given = [k for k in keys if getattr(args, k)]
        missing = [f"--{k.replace('_', '-')}" for k in keys if k not in given]
        if given and missing:  # none given: a node of the peers setting (addresses known)
            raise ValueError(f"{args.action} needs {', '.join(missing)}")
        if given:
            req.update(raft=args.raft, kafka=args.kafka, read_api=args.read_api)
    if args.new_id is not None:
        if op != "replace":
            raise ValueError("--new-id is for replace")
        req["new_node"] = args.new_id
    return req


LEADERLESS_RETRY_S = 30.0
"""How long a change waits for a leader when no node knows one (an election under way)."""


DRAINING = "draining"
"""sink.members.drain.DRAINING: a remove's drain is under way (call again)."""
DRAIN_POLL_S = 1.0


async def call(
    nodes: list[str],
    req: dict[str, Any],
    timeout: float,
    progress: Callable[[str], None] | None = None,
) -> tuple[dict, str, str]:
    """Run req at the leader: follow leader hints; while no node knows a leader (an
    election) retry for up to LEADERLESS_RETRY_S. A remove whose drain is under way
    (partition groups) is called again until done, for up to `timeout` seconds,
    `progress` told each round's message. Returns (result, code, error); code ""
    means done. Re-running a change that a leader change interrupted is safe: the
    operator resumes it (sink.members.operator), a drain continues where it stands."""
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    while True:
        out = await _call_leader(nodes, req, timeout)
        if out[1] != DRAINING:
            return out
        if progress is not None:
            progress(out[2].split("; call again")[0])
        if loop.time() > end:
            return (
                {},
                "timeout",
                f"{out[2].split('; call again')[0]}: not done within {timeout:g} s; the "
                "moves go on: run the command again to continue",
            )
        await asyncio.sleep(DRAIN_POLL_S)


async def _call_leader(
    nodes: list[str], req: dict[str, Any], timeout: float
) -> tuple[dict, str, str]:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + min(timeout, LEADERLESS_RETRY_S)
    while True:
        out = await _call_once(nodes, req, timeout)
        if out[1] not in ("not_leader", "unreachable") or loop.time() > deadline:
            return out
        await asyncio.sleep(0.2)


async def _call_once(
    nodes: list[str], req: dict[str, Any], timeout: float
) -> tuple[dict, str, str]:
    """One pass over the nodes, following leader hints (a node that is not the leader and
    knows none, e.g. a removed one, passes to the next)."""
    order = list(nodes)
    tried: set[str] = set()
    known: dict[int, str] = {}
    last = ("unreachable", f"no node answered at {', '.join(nodes)}")
    hops = 0
    fallback: dict | None = None
    while order and hops <= _HOPS:
        address = order.pop(0)
        if address in tried:
            continue
        tried.add(address)
        client = ReadApiClient(address, credentials=READ_API_CREDENTIALS.get())
        try:
            reply = await client.members(req, timeout=timeout + 30.0)
        except Exception as exc:
            details = getattr(exc, "details", None)
            last = ("unreachable", f"{address}: {details() if callable(details) else exc}")
            continue
        finally:
            await client.close()
        if not reply.code:
            result = json.loads(reply.json or "{}")
            if req["op"] == "list" and result.get("node") != result.get("leader") and order:
                # Not the leader's view (a removed node keeps its stale configuration):
                # keep it in case no leader answers, ask the others.
                fallback = result
                continue
            return result, "", ""
        last = (reply.code, reply.error)
        if reply.code != "not_leader":
            return {}, reply.code, reply.error
        if reply.leader_id:
            hops += 1
            if reply.leader_id not in known:
                known.update(await _addresses(nodes))
            leader = known.get(reply.leader_id)
            if leader:
                tried.discard(leader)  # the leader moved back: ask it again
                order.insert(0, leader)
    if fallback is not None:
        return fallback, "", ""
    return {}, *last


async def _addresses(nodes: list[str]) -> dict[int, str]:
    """node id -> read API address, from any node's list."""
    for address in nodes:
        client = ReadApiClient(address, credentials=READ_API_CREDENTIALS.get())
        try:
            reply = await client.members({"op": "list"}, timeout=5.0)
            members = json.loads(reply.json or "{}").get("members", {})
            return {
                int(i): m["addresses"]["read_api"] for i, m in members.items() if m["addresses"]
            }
        except Exception:
            continue
        finally:
            await client.close()
    return {}


def format_list(result: dict[str, Any]) -> str:
    lines = [
        f"leader {result.get('leader') or '-'}  term {result.get('term')}  "
        f"commit {result.get('commit')}"
        + (f"  in flight: {result['in_flight']}" if result.get("in_flight") else ""),
        f"{'node':>4} {'kind':<8} {'match':>9} {'lag':>7}  {'host':<8} raft / kafka / read_api",
    ]
    for nid, m in sorted(result.get("members", {}).items(), key=lambda kv: int(kv[0])):
        addr = m.get("addresses") or {}
        where = " / ".join(addr.get(k, "?") for k in ("raft", "kafka", "read_api")) or "?"
        # "-": not registered (one group, or not yet); "": registered without a label
        host = m.get("host", "-") or f"({nid})"
        lines.append(
            f"{nid:>4} {'voter' if m['voter'] else 'learner':<8} {m.get('match', '-'):>9} "
            f"{m.get('lag', '-'):>7}  {host:<8} {where}"
        )
    return "\n".join(lines)


def run_request(
    args: argparse.Namespace, command: str, build: Callable[[argparse.Namespace], dict[str, Any]]
) -> tuple[list[str], dict[str, Any], dict[str, Any]] | int:
    """Parse the cluster and the request, run it at the leader -> (nodes, request,
    result), or the exit status after saying why on stderr (2 usage, 1 refused)."""
    try:
        nodes = node_addresses(args)
        req = build(args)
        use_read_api_connection(args)  # TLS flags, or cluster.json's
    except (ValueError, OSError, KeyError) as exc:
        print(f"raftsink {command}: {exc}", file=sys.stderr)
        return 2

    said: list[str] = []

    def progress(message: str) -> None:  # each new state of a drain, once
        if not said or said[-1] != message:
            said.append(message)
            print(f"raftsink {command} {args.action}: {message}", file=sys.stderr, flush=True)

    result, code, error = asyncio.run(call(nodes, req, args.timeout, progress))
    if code:
        print(f"raftsink {command} {args.action}: refused ({code}): {error}", file=sys.stderr)
        return 1
    return nodes, req, result


def run(args: argparse.Namespace) -> int:
    done = run_request(args, "members", build_request)
    if isinstance(done, int):
        return done
    _, req, result = done
    if args.json:
        print(json.dumps(result, indent=2))
    elif req["op"] == "list":
        print(format_list(result))
    else:
        print(f"raftsink members {args.action}: done {json.dumps(result)}")
    return 0
