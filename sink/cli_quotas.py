"""`raftsink quotas`: client quotas of a running cluster, over Kafka's own admin APIs
(DescribeClientQuotas / AlterClientQuotas, sent with sink.kafka.admin).

    raftsink quotas list   [--client-id C | --client-id-default] [--user U | --user-default]
    raftsink quotas set    ENTITY --add-config producer_byte_rate=1048576,consumer_byte_rate=...
    raftsink quotas delete ENTITY --delete-config producer_byte_rate[,...]

ENTITY is --client-id C / --client-id-default, optionally with --user U / --user-default
(User:ANONYMOUS for clients without authentication). Connection flags (sink.cli_connect):
--bootstrap-servers HOST:PORT,... or --cluster FILE, --sasl-user ..., --tls ....
Exit status: 0 done, 1 the cluster refused or could not be reached, 2 usage.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys

from sink.cli_connect import add_kafka_args, use_kafka_connection
from sink.kafka.admin import AdminError, alter_client_quotas, describe_client_quotas
from sink.kafka.protocol.errors import ErrorCode
from sink.quotas import CLIENT_ID, USER, entity_text

HELP = "list, set or delete client quotas (produce/fetch byte rates, request time)"


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("quotas", help=HELP, description=__doc__.split("\n\n")[0])
    p.add_argument("action", choices=("list", "set", "delete"))
    add_kafka_args(p)
    who = p.add_mutually_exclusive_group()
    who.add_argument("--client-id", help="the client id")
    who.add_argument("--client-id-default", action="store_true", help="every client id's default")
    user = p.add_mutually_exclusive_group()
    user.add_argument("--user", help="the user (ANONYMOUS until authentication exists)")
    user.add_argument("--user-default", action="store_true", help="every user's default")
    p.add_argument("--add-config", help="KEY=VALUE,... to set (set)")
    p.add_argument("--delete-config", help="KEY,... to remove (delete)")
    p.add_argument("--validate-only", action="store_true", help="check, change nothing")
    p.add_argument("--json", action="store_true", help="list: raw JSON")
    p.set_defaults(func=run)


def _entity(args: argparse.Namespace) -> list[tuple[str, str | None]]:
    pairs: list[tuple[str, str | None]] = []
    if args.user is not None or args.user_default:
        pairs.append((USER, args.user))
    if args.client_id is not None or args.client_id_default:
        pairs.append((CLIENT_ID, args.client_id))
    return pairs


def _ops(args: argparse.Namespace) -> list[tuple[str, float, bool]]:
    if args.action == "set":
        if not args.add_config:
            raise ValueError("set needs --add-config KEY=VALUE,...")
        ops = []
        for item in args.add_config.split(","):
            key, sep, value = item.partition("=")
            if not sep:
                raise ValueError(f"--add-config: {item!r} is not KEY=VALUE")
            try:
                ops.append((key.strip(), float(value), False))
            except ValueError:
                raise ValueError(
                    f"--add-config: {key.strip()}: {value!r} is not a number"
                ) from None
        return ops
    if not args.delete_config:
        raise ValueError("delete needs --delete-config KEY,...")
    return [(key.strip(), 0.0, True) for key in args.delete_config.split(",")]


def run(args: argparse.Namespace) -> int:
    try:
        bootstrap = use_kafka_connection(args)
        entity = _entity(args)
        if args.action != "list":
            if not entity:
                raise ValueError(
                    "name the entity: --client-id C / --client-id-default [--user ...]"
                )
            ops = _ops(args)
    except (ValueError, OSError) as exc:
        print(f"raftsink quotas: {exc}", file=sys.stderr)
        return 2
    try:
        if args.action == "list":
            components = [(t, 1 if n is None else 0, n) for t, n in entity]
            found = asyncio.run(describe_client_quotas(bootstrap, components, strict=False))
            return _print_list(found, args.json)
        results = asyncio.run(
            alter_client_quotas(bootstrap, [(entity, ops)], validate_only=args.validate_only)
        )
    except AdminError as exc:
        print(f"raftsink quotas: {exc}", file=sys.stderr)
        return 1
    code, message = results[0]
    what = entity_text(tuple(entity))
    if code != ErrorCode.none:
        print(f"raftsink quotas: {what}: {code.name.upper()}: {message or ''}", file=sys.stderr)
        return 1
    verb = "valid" if args.validate_only else ("set" if args.action == "set" else "deleted")
    print(f"{what}: {verb}")
    return 0


def _print_list(found: list, as_json: bool) -> int:
    if as_json:
        rows = [{"entity": dict(entity), "quotas": values} for entity, values in found]
        print(json.dumps(rows, indent=2))
        return 0
    if not found:
        print("no client quotas (every client is unlimited)")
    for entity, values in found:
        quotas = ", ".join(f"{k}={v:g}" for k, v in sorted(values.items()))
        print(f"{entity_text(tuple(entity))}: {quotas}")
    return 0
