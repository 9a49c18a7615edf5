"""`raftsink acl`: ACLs of a running cluster, over Kafka's own admin APIs (CreateAcls /
DescribeAcls / DeleteAcls; sink.kafka.admin_acls), with kafka-acls.sh's flags.

    raftsink acl add    --allow-principal User:alice --operation READ --topic orders
    raftsink acl add    --deny-principal User:bob --operation WRITE --topic logs- \\
                        --resource-pattern-type PREFIXED
    raftsink acl add    --allow-principal User:app --operation READ --group app-
                        --resource-pattern-type PREFIXED
    raftsink acl add    --allow-principal User:ops --operation ALTER --cluster
    raftsink acl list   [--topic T | --group G | --cluster] [--principal P]
    raftsink acl remove --topic orders [--allow-principal P] [--operation OP]

add: every combination of the principals (--allow-principal / --deny-principal,
repeatable), hosts (--allow-host / --deny-host, default *), operations (--operation,
repeatable, default ALL) and resources (--topic, --group, --transactional-id,
repeatable; --cluster) becomes one binding; --resource-pattern-type LITERAL (default)
or PREFIXED; a topic or group named * is every one. list / remove take the same
resource and principal flags as a filter; their pattern type defaults to ANY (MATCH:
every binding that applies to the named resource, wildcard and prefixes included).
remove without principal or operation removes every binding of the resource.

Connection flags (sink.cli_connect): --bootstrap-servers HOST:PORT,... or --cluster-file
FILE (cluster.json of `raftsink local`); --sasl-user U (password in
RAFTSINK_SASL_PASSWORD or --sasl-password-file), --sasl-mechanism; --tls,
--tls-ca-file, --tls-cert-file, --tls-key-file. The user needs ALTER on the cluster
(add, remove) or DESCRIBE (list), or to be a super user.
Exit status: 0 done, 1 the cluster refused or could not be reached, 2 usage.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import sys

from sink.cli_connect import add_kafka_args, use_kafka_connection
from sink.kafka.admin import AdminError
from sink.kafka.admin_acls import create_acls, delete_acls, describe_acls
from sink.kafka.protocol.errors import ErrorCode
from sink.security.acl import (
    CLUSTER_NAME,
    AclBinding,
    AclError,
    AclFilter,
    Operation,
    PatternType,
    Permission,
    ResourceType,
)

HELP = "add, remove or list ACLs (principal x resource x operation, through the log)"
_OPS = [o.name for o in Operation if o not in (Operation.UNKNOWN, Operation.ANY)]


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("acl", help=HELP, description=__doc__.split("\n\n")[0])
    p.add_argument("action", choices=("add", "remove", "list"))
    p.add_argument("--allow-principal", action="append", default=[], metavar="P")
    p.add_argument("--deny-principal", action="append", default=[], metavar="P")
    p.add_argument("--allow-host", action="append", default=[], metavar="H")
    p.add_argument("--deny-host", action="append", default=[], metavar="H")
    p.add_argument("--principal", help="list: only this principal's bindings")
    p.add_argument("--operation", action="append", default=[], type=str.upper, choices=_OPS)
    p.add_argument("--topic", action="append", default=[])
    p.add_argument("--group", action="append", default=[])
    p.add_argument("--transactional-id", action="append", default=[])
    p.add_argument("--cluster", action="store_true", dest="cluster_resource", help="the cluster")
    p.add_argument(
        "--resource-pattern-type",
        type=str.upper,
        choices=("LITERAL", "PREFIXED", "ANY", "MATCH"),
        help="add: LITERAL (default) or PREFIXED; list/remove: also ANY (default) or MATCH",
    )
    p.add_argument("--json", action="store_true", help="list: raw JSON")
    add_kafka_args(p, cluster_file_flag="--cluster-file")
    p.set_defaults(func=run)


def _resources(args: argparse.Namespace) -> list[tuple[ResourceType, str]]:
    out = [(ResourceType.TOPIC, t) for t in args.topic]
    out += [(ResourceType.GROUP, g) for g in args.group]
    out += [(ResourceType.TRANSACTIONAL_ID, t) for t in args.transactional_id]
    if args.cluster_resource:
        out.append((ResourceType.CLUSTER, CLUSTER_NAME))
    return out


def _entries(args: argparse.Namespace) -> list[tuple[str, Permission, str]]:
    """(principal, permission, host) of every principal flag x its hosts."""
    out = []
    for principals, hosts, perm in (
        (args.allow_principal, args.allow_host, Permission.ALLOW),
        (args.deny_principal, args.deny_host, Permission.DENY),
    ):
        for principal, host in itertools.product(principals, hosts or ["*"]):
            out.append((principal, perm, host))
    return out


def bindings_to_add(args: argparse.Namespace) -> list[AclBinding]:
    pattern = PatternType[args.resource_pattern_type or "LITERAL"]
    if pattern not in (PatternType.LITERAL, PatternType.PREFIXED):
        raise ValueError("add: --resource-pattern-type must be LITERAL or PREFIXED")
    resources, entries = _resources(args), _entries(args)
    if not resources:
        raise ValueError("add: name a resource (--topic, --group, --transactional-id, --cluster)")
    if not entries:
        raise ValueError("add: give --allow-principal or --deny-principal")
    ops = [Operation[o] for o in args.operation] or [Operation.ALL]
    out = []
    for (rtype, name), (principal, perm, host), op in itertools.product(resources, entries, ops):
        b = AclBinding(rtype, name, pattern, principal, host, op, perm)
        b.validate()
        out.append(b)
    return out


def filters_of(args: argparse.Namespace, need_resource: bool) -> list[AclFilter]:
    """list / remove: one filter per resource x principal x operation given."""
    pattern = PatternType[args.resource_pattern_type or "ANY"]
    resources: list[tuple[ResourceType, str | None]] = list(_resources(args))
    if not resources:
        if need_resource:
            raise ValueError("remove: name a resource (--topic, --group, --cluster, ...)")
        resources = [(ResourceType.ANY, None)]
    who: list[tuple[str | None, Permission, str | None]] = [
        (p, perm, h if h != "*" or args.allow_host or args.deny_host else None)
        for p, perm, h in _entries(args)
    ]
    if args.principal:
        who.append((args.principal, Permission.ANY, None))
    if not who:
        who = [(None, Permission.ANY, None)]
    ops = [Operation[o] for o in args.operation] or [Operation.ANY]
    return [
        AclFilter(rtype, name, pattern, principal, host, op, perm)
        for (rtype, name), (principal, perm, host), op in itertools.product(resources, who, ops)
    ]


def describe(b: AclBinding) -> str:
    return (
        f"(principal={b.principal}, host={b.host}, operation={b.operation.name}, "
        f"permissionType={b.permission.name})"
    )


def _print(bindings: list[AclBinding], as_json: bool) -> None:
    if as_json:
        rows = [
            {
                "resource_type": b.resource_type.name,
                "name": b.name,
                "pattern_type": b.pattern_type.name,
                "principal": b.principal,
                "host": b.host,
                "operation": b.operation.name,
                "permission": b.permission.name,
            }
            for b in bindings
        ]
        print(json.dumps(rows, indent=2))
        return
    if not bindings:
        print("no ACLs")
    by_resource: dict[tuple, list[AclBinding]] = {}
    for b in bindings:
        by_resource.setdefault((b.resource_type, b.name, b.pattern_type), []).append(b)
    for (rtype, name, pattern), bs in by_resource.items():
        print(
            f"Current ACLs for resource `ResourcePattern(resourceType={rtype.name}, "
            f"name={name}, patternType={pattern.name})`:"
        )
        for b in bs:
            print(f"\t{describe(b)}")


def run(args: argparse.Namespace) -> int:
    try:
        bootstrap = use_kafka_connection(args)
        if args.action == "add":
            todo: list = bindings_to_add(args)
        else:
            todo = filters_of(args, need_resource=args.action == "remove")
    except (ValueError, KeyError, OSError, AclError) as exc:
        print(f"raftsink acl: {exc}", file=sys.stderr)
        return 2
    try:
        if args.action == "add":
            results = asyncio.run(create_acls(bootstrap, todo))
            failed = [
                (b, c, m) for b, (c, m) in zip(todo, results, strict=True) if c != ErrorCode.none
            ]
            for b, code, msg in failed:
                print(
                    f"raftsink acl: {describe(b)}: {code.name.upper()}: {msg or ''}",
                    file=sys.stderr,
                )
            if failed:
                return 1
            print(f"added {len(todo)} ACL(s)")
            _print(todo, False)
            return 0
        if args.action == "remove":
            removed = asyncio.run(delete_acls(bootstrap, todo))
            bad = [(c, m) for c, m, _ in removed if c != ErrorCode.none]
            for code, msg in bad:
                print(f"raftsink acl: {code.name.upper()}: {msg or ''}", file=sys.stderr)
            gone = [b for _, _, bs in removed for b in bs]
            print(f"removed {len(gone)} ACL(s)")
            _print(gone, False)
            return 1 if bad else 0
        found: list[AclBinding] = []
        for f in todo:
            found += [b for b in asyncio.run(describe_acls(bootstrap, f)) if b not in found]
        _print(found, args.json)
        return 0
    except AdminError as exc:
        print(f"raftsink acl: {exc}", file=sys.stderr)
        return 1
