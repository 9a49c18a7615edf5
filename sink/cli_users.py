"""`raftsink users`: SASL users of a running cluster, over Kafka's own admin APIs
(DescribeUserScramCredentials / AlterUserScramCredentials; sink.kafka.admin_users).

    raftsink users list   [--user U]
    raftsink users create NAME [--mechanism M] [--iterations N]    (refused if NAME exists)
    raftsink users alter  NAME [--mechanism M] [--iterations N]    (new password)
    raftsink users delete NAME [--mechanism M]

The new user's password: --password-file FILE, else RAFTSINK_USER_PASSWORD, else
read from standard input (one line). It is salted and iterated here; only the
derived credential leaves this process. Without --mechanism, both SCRAM-SHA-256
and SCRAM-SHA-512 are set (PLAIN logins check either) or deleted.

Connection flags (sink.cli_connect, shared by the admin commands): --bootstrap-servers
HOST:PORT,... or --cluster FILE; --sasl-user U (password in RAFTSINK_SASL_PASSWORD or
--sasl-password-file FILE), --sasl-mechanism; --tls, --tls-ca-file, --tls-cert-file,
--tls-key-file.
Exit status: 0 done, 1 the cluster refused or could not be reached, 2 usage.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys

from sink.cli_connect import add_kafka_args, read_first_line, use_kafka_connection
from sink.kafka.admin import AdminError
from sink.kafka.admin_users import alter_users, describe_users, upsertion
from sink.kafka.protocol.errors import ErrorCode
from sink.security.scram import DEFAULT_ITERATIONS, MECHANISMS

HELP = "list, create, alter or delete SASL users (SCRAM credentials, through the log)"


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("users", help=HELP, description=__doc__.split("\n\n")[0])
    p.add_argument("action", choices=("list", "create", "alter", "delete"))
    p.add_argument("name", nargs="?", help="the user (create / alter / delete)")
    p.add_argument("--user", help="list: only this user")
    p.add_argument("--mechanism", choices=sorted(MECHANISMS), help="one SCRAM mechanism only")
    p.add_argument("--iterations", type=int, default=DEFAULT_ITERATIONS)
    p.add_argument("--password-file", help="file holding the new password (first line)")
    add_kafka_args(p)
    p.add_argument("--json", action="store_true", help="list: raw JSON")
    p.set_defaults(func=run)


def _new_password(args: argparse.Namespace) -> str:
    if args.password_file:
        password = read_first_line(args.password_file)
    elif os.environ.get("RAFTSINK_USER_PASSWORD"):
        password = os.environ["RAFTSINK_USER_PASSWORD"]
    else:
        password = sys.stdin.readline().rstrip("\r\n")
    if not password:
        raise ValueError("empty password")
    return password


def run(args: argparse.Namespace) -> int:
    mechs = [args.mechanism] if args.mechanism else sorted(MECHANISMS)
    try:
        bootstrap = use_kafka_connection(args)
        login = None  # the command's login is the connection's (sink.cli_connect)
        if args.action != "list" and not args.name:
            raise ValueError(f"{args.action} needs the user's NAME")
        password = _new_password(args) if args.action in ("create", "alter") else ""
    except (ValueError, OSError) as exc:
        print(f"raftsink users: {exc}", file=sys.stderr)
        return 2
    try:
        if args.action == "list":
            found = asyncio.run(describe_users(bootstrap, [args.user] if args.user else (), login))
            return _print_list(found, args.json)
        if args.action == "delete":
            if args.mechanism is None:  # every mechanism the user has
                found = asyncio.run(describe_users(bootstrap, [args.name], login))
                mechs = [m for _, code, _, ms in found if code == ErrorCode.none for m, _ in ms]
                if not mechs:
                    print(f"raftsink users: {args.name}: no such user", file=sys.stderr)
                    return 1
            results = asyncio.run(
                alter_users(bootstrap, [(args.name, m) for m in mechs], (), login)
            )
        else:
            if args.action == "create":
                found = asyncio.run(describe_users(bootstrap, [args.name], login))
                if any(code == ErrorCode.none for _, code, _, _ in found):
                    print(f"raftsink users: {args.name}: exists (use alter)", file=sys.stderr)
                    return 1
            ups = [upsertion(args.name, m, password, args.iterations) for m in mechs]
            results = asyncio.run(alter_users(bootstrap, (), ups, login))
    except AdminError as exc:
        print(f"raftsink users: {exc}", file=sys.stderr)
        return 1
    for user, code, message in results:
        if code != ErrorCode.none:
            print(f"raftsink users: {user}: {code.name.upper()}: {message or ''}", file=sys.stderr)
            return 1
    verb = {"create": "created", "alter": "altered", "delete": "deleted"}[args.action]
    print(f"{args.name}: {verb} ({', '.join(mechs)})")
    return 0


def _print_list(found: list, as_json: bool) -> int:
    if as_json:
        rows = [
            {"user": u, "error": code.name, "credentials": dict(ms)} for u, code, _, ms in found
        ]
        print(json.dumps(rows, indent=2))
        return 0
    if not found:
        print("no users")
    for user, code, message, mechs in found:
        if code != ErrorCode.none:
            print(f"{user}: {code.name.upper()}: {message or ''}")
            continue
        print(f"{user}: " + ", ".join(f"{m} (iterations {i})" for m, i in mechs))
    return 0
