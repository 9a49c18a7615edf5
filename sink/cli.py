"""The `raftsink` command line.

raftsink serve   run one node (config from --config FILE, RAFTSINK_* variables, flags)
raftsink local   an N-node cluster (default 3) on 127.0.0.1 as subprocesses; prints the
                 bootstrap servers and every node (--processes-per-host K: K node processes
                 per emulated host h1, h2, ...; --secure: TLS everywhere with throw-away
                 certificates; --authorization: ACL checks on, SASL with a printed super
                 user; docs/security.md)
raftsink status  role, term, commit/applied index, lag and partitions of every node
raftsink verify  read-only integrity check of a stopped node's storage
raftsink quotas  list / set / delete client quotas (sink/cli_quotas.py)
raftsink members list / add / remove / replace members, transfer-leader (sink/cli_members.py)
raftsink partitions move a partition's replicas, list moves (partition groups; sink/cli_partitions.py)
raftsink users   list / create / alter / delete SASL users (sink/cli_users.py)
raftsink acl     add / remove / list ACLs (sink/cli_acl.py)
raftsink demo    the main job on the embedded default (a tool: demos/, entry point)
raftsink chaos   the fault campaign (a tool: chaos/, entry point)
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import logging
import os
import shutil
import signal
import sys
import tempfile
import time
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sink.process_cluster import SinkProcessCluster

LOCAL_POLL_S = 0.5
"""How often `raftsink local` looks for node processes that exited."""


def _cmd_serve(args: argparse.Namespace) -> int:
    # gRPC reads its settings once, at its first import: before sink.node imports it.
    from raftlog import grpc_env

    grpc_env.apply()
    from sink.config import ConfigError, flag_overrides, load_config
    from sink.node import run_on_event_loop, serve
    from sink.node.serve import EXIT_STOP_INCOMPLETE, EXIT_STORAGE_FAILURE, RepairRestart

    overrides, sources = flag_overrides(args)
    try:
        config = load_config(args.config, overrides=overrides, override_sources=sources)
    except ConfigError as exc:
        print(f"raftsink serve: configuration error: {exc}", file=sys.stderr)
        return 2
    _setup_logging(config.log_level)
    try:
        run_on_event_loop(config.event_loop, serve(config))
    except OSError as exc:
        print(f"raftsink serve: {exc}", file=sys.stderr)
        return 1
    except RepairRestart:
        _restart_for_repair()
    except SystemExit as exc:
        if exc.code not in (EXIT_STORAGE_FAILURE, EXIT_STOP_INCOMPLETE):
            raise
        # A crash-stop: what could be stopped was, and what is durable is on disk. A
        # worker thread still blocked (on the failed disk, in the stuck step) would hold
        # the interpreter's exit (it joins them) and keep the process alive, its ports
        # bound.
        logging.shutdown()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(exc.code)
    return 0


REPAIR_RESTARTS_ENV = "RAFTSINK_REPAIR_RESTARTS"
MAX_REPAIR_RESTARTS = 5
"""A node re-executes itself at most this many times in a row to repair its log (each
repair cuts the damage away, so a second one means new damage: a failing disk)."""


def _restart_for_repair() -> None:
    """Run this same `raftsink serve` again in this process (same pid, arguments and
    environment): its recovery repairs the log (sink.node.serve.RepairRestart)."""
    from sink.node.serve import EXIT_STORAGE_FAILURE

    done = int(os.environ.get(REPAIR_RESTARTS_ENV, "0") or 0)
    if done >= MAX_REPAIR_RESTARTS:
        print(
            f"raftsink serve: {done} repairs in a row; the disk keeps damaging the log: "
            "replace it (docs/operations.md, 'Replacing a disk')",
            file=sys.stderr,
        )
        raise SystemExit(EXIT_STORAGE_FAILURE)
    env = dict(os.environ, **{REPAIR_RESTARTS_ENV: str(done + 1)})
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(sys.executable, [sys.executable, *sys.orig_argv[1:]], env)


MAKE_CERTS = os.path.join(os.path.dirname(os.path.dirname(__file__)), "scripts", "make-certs.sh")
"""The throw-away CA script of the source tree (`raftsink local --secure` runs it)."""


def _local_certs(base: str, n: int) -> str | None:
    """scripts/make-certs.sh into base/certs: CA, node1..n and client pairs; None if the
    script or openssl is missing (the message says what to do)."""
    import subprocess

    if not os.path.exists(MAKE_CERTS) or shutil.which("openssl") is None:
        print(
            f"raftsink local --secure: needs openssl and {MAKE_CERTS} (the source tree's "
            "scripts/); see docs/security.md to make certificates by hand",
            file=sys.stderr,
        )
        return None
    certs = os.path.join(base, "certs")
    names = [f"node{i}" for i in range(1, n + 1)] + ["client"]
    r = subprocess.run(["bash", MAKE_CERTS, certs, *names], capture_output=True, text=True)
    if r.returncode:
        print(f"raftsink local --secure: make-certs.sh failed: {r.stderr}", file=sys.stderr)
        return None
    return certs


LOCAL_SUPER_USER = "admin"
"""`raftsink local --authorization`'s super user (SASL SCRAM, password made per cluster)."""


def _local_authorization(base: str) -> tuple[list[str], str]:
    """Node flags for `raftsink local --authorization`: SASL on (the only way a local
    client gets a principal other than User:ANONYMOUS without client certificates), one
    bootstrap user `admin` with a fresh random password, `User:admin` the super user, ACL
    checks on. The password is kept in base/admin.password (0600) for `raftsink acl
    --sasl-password-file`. Returns (flags, password file)."""
    import secrets

    password = secrets.token_urlsafe(12)
    path = os.path.join(base, "admin.password")
    users = os.path.join(base, "bootstrap-users.txt")
    for file, text in ((path, password), (users, f"{LOCAL_SUPER_USER}:{password}")):
        fd = os.open(file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(text + "\n")
    flags = ["--sasl-enabled", "--sasl-bootstrap-users-file", users]
    flags += ["--authorization-super-users", f"User:{LOCAL_SUPER_USER}"]
    return flags, path


def _cmd_status(args: argparse.Namespace) -> int:
    from sink.cli_status import cmd_status

    return cmd_status(args)


def _cmd_local(args: argparse.Namespace) -> int:
    from sink.process_cluster import SinkProcessCluster

    if args.nodes < 1 or (args.processes_per_host is not None and args.processes_per_host < 1):
        print("raftsink local: --nodes and --processes-per-host must be >= 1", file=sys.stderr)
        return 2

    own = args.data_dir is None
    base = args.data_dir or tempfile.mkdtemp(prefix="raftsink-local-")
    certs = _local_certs(base, args.nodes) if args.secure else None
    if args.secure and certs is None:
        return 1
    credentials = None
    extra: list[str] = []
    if certs is not None:
        from sink.readapi.client import tls_credentials

        ca, cert, key = (os.path.join(certs, f) for f in ("ca.pem", "client.pem", "client.key"))
        credentials = tls_credentials(ca, cert, key)
        extra = ["--tls-ca-file", ca, "--tls-kafka", "--tls-kafka-client-auth", "required"]
        extra += ["--tls-read-api", "--tls-raft"]
    password_file = ""
    if args.authorization:
        os.makedirs(base, exist_ok=True)
        flags, password_file = _local_authorization(base)
        extra += flags
    cluster = SinkProcessCluster(
        base,
        n=args.nodes,
        default_partitions=args.partitions,
        extra_args=extra,
        read_api_credentials=credentials,
        processes_per_host=args.processes_per_host,
        authorization=args.authorization,
        partition_groups=args.partition_groups,
    )
    if certs is not None:
        for i, node in cluster.nodes.items():
            node.extra_args += ["--tls-cert-file", os.path.join(certs, f"node{i}.pem")]
            node.extra_args += ["--tls-key-file", os.path.join(certs, f"node{i}.key")]
    stop = {"flag": False}

    def on_signal(signum: int, frame: object) -> None:
        stop["flag"] = True

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    cluster.start()
    try:
        leader = asyncio.run(cluster.wait_ready())
    except (TimeoutError, RuntimeError) as exc:
        print(f"raftsink local: cluster did not start: {exc}", file=sys.stderr)
        cluster.stop()
        return 1
    path = cluster.write_cluster_file()
    if certs is not None:
        _add_tls_to_cluster_file(path, certs)
        print(
            "raftsink local: TLS everywhere; clients: security.protocol=ssl "
            f"ssl.ca.location={certs}/ca.pem ssl.certificate.location={certs}/client.pem "
            f"ssl.key.location={certs}/client.key",
            file=sys.stderr,
            flush=True,
        )
    if password_file:
        with open(password_file) as f:
            password = f.read().strip()
        protocol = "sasl_ssl" if certs is not None else "sasl_plaintext"
        print(
            f"raftsink local: authorization ON (ACL checks); super user User:{LOCAL_SUPER_USER}"
            f" (password in {password_file}); clients: security.protocol={protocol} "
            f"sasl.mechanism=SCRAM-SHA-512 sasl.username={LOCAL_SUPER_USER} "
            f"sasl.password={password}",
            file=sys.stderr,
            flush=True,
        )
    print(cluster.bootstrap_servers, flush=True)
    print(
        f"raftsink local: {args.nodes} nodes up (leader: node {leader}); data in {base}; "
        f"cluster file {path}; Ctrl-C stops",
        file=sys.stderr,
        flush=True,
    )
    for line in local_node_lines(cluster):
        print(line, file=sys.stderr, flush=True)
    reported: set[int] = set()
    while not stop["flag"]:
        # Poll: a child's exit interrupts nothing (SIGCHLD is ignored by default).
        time.sleep(LOCAL_POLL_S)
        for i, code in sorted(cluster.exited().items()):
            if i not in reported:
                reported.add(i)
                print(cluster.describe_exit(i, code), file=sys.stderr, flush=True)
        if len(reported) == args.nodes:
            print("raftsink local: every node exited", file=sys.stderr)
            break
    print("raftsink local: stopping", file=sys.stderr)
    cluster.stop()
    if own and not args.keep:
        shutil.rmtree(base, ignore_errors=True)
    return 0


def local_node_lines(cluster: SinkProcessCluster) -> list[str]:
    """One line per node: id, host label, pid and addresses."""
    lines = []
    for i, node in cluster.nodes.items():
        p = node.peer
        pid = node.proc.pid if node.proc is not None else "-"
        lines.append(
            f"  node {i}: host {cluster.host_of(i)} pid {pid} kafka {p.kafka} "
            f"raft {p.raft} read_api {p.read_api}"
        )
    return lines


def _add_tls_to_cluster_file(path: str, certs: str) -> None:
    """cluster.json gains the client's TLS files (`raftsink status --cluster` uses them)."""
    with open(path) as f:
        data = json.load(f)
    data["tls"] = {
        "ca": os.path.join(certs, "ca.pem"),
        "cert": os.path.join(certs, "client.pem"),
        "key": os.path.join(certs, "client.key"),
    }
    with open(path, "w") as f:
        json.dump(data, f, indent=2)


def _verify_snapshots(directory: str, report: Any) -> None:
    """The snapshot files beside the log (read-only): damaged ones are problems, and
    the report says what the next start does about them (raftlog/runtime/group_storage.py)."""
    from raftlog.runtime import check_snapshot_files

    intact, damaged = check_snapshot_files(directory)
    if intact:
        report.notes.append(f"snapshots: {len(intact)} intact (entries {intact[0]}..{intact[-1]})")
    if not damaged:
        return
    for path, _index, why in damaged:
        report.problems.append(f"snapshot {path} is damaged: {why}")
    base = report.first_index - 1
    if base > 0 and base not in intact:
        report.notes.append(
            f"the base snapshot (entry {base}, which the log was compacted to) is damaged: the "
            "next start sets this node's whole storage aside (<name>.damaged-<time>) and "
            "rebuilds it from the leader under a new incarnation (a replacement: no vote "
            "until re-admitted). With storage.on_corruption=stop, node identity off or a "
            "single-node cluster it stops at start instead (exit code 3)"
        )
    else:
        report.notes.append(
            "the damaged snapshots are not the log's base: the next start sets them aside "
            "(.damaged) and rebuilds the state from the newest intact snapshot and the log; "
            "nothing is lost"
        )


def _cmd_verify(args: argparse.Namespace) -> int:
    from raftlog.storage import DataDirLockedError, schedule_repair, verify_data_dir

    def progress(msg: str) -> None:
        if not args.quiet:
            print(msg, file=sys.stderr)

    # A node's data dir holds the log under log/; accept either.
    target = args.data_dir
    if os.path.isdir(os.path.join(target, "log", "segments")):
        target = os.path.join(target, "log")
    try:
        report = verify_data_dir(target, progress=progress)
        _verify_snapshots(
            os.path.join(os.path.dirname(os.path.abspath(target)), "snapshots"), report
        )
        print(report.to_text())
        if args.repair and report.repair_plan() is not None:
            at = schedule_repair(target, report)
            print(
                f"repair scheduled: the next start repairs from entry {at} "
                "(storage.on_corruption=repair; with 'stop' it stops and says so)"
            )
        elif args.repair:
            print("repair: nothing damaged to schedule")
    except DataDirLockedError as exc:
        print(f"raftsink verify: {exc}", file=sys.stderr)
        return 2
    return 0 if report.ok else 1


COMMAND_GROUP = "raftsink.commands"
"""Entry-point group of the tools' commands (`raftsink demo`, `raftsink chaos`). Each entry
names a module (or object) with HELP: str, add_arguments(parser) and run(args) -> int; the
tools live outside this package (demos/, chaos/), so sink never imports them. Their modules
must be light: every `raftsink` invocation loads them to build the parser."""


def missing_extra(command: str, extra: str, modules: tuple[str, ...], hint: str = "") -> str | None:
    """For a tool command: None when every module of its extra imports here, else the one
    message that names the missing modules and the extra to install (said before any work)."""
    missing = [m for m in modules if not _importable(m)]
    if not missing:
        return None
    return (
        f"raftsink {command} needs the '{extra}' extra (missing: {', '.join(missing)}); "
        f"install it with: pip install 'raftsink[{extra}]'{hint}"
    )


def _importable(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a broken parent package counts as missing
        return False


def _add_tool_commands(sub: argparse._SubParsersAction) -> None:
    from importlib.metadata import entry_points

    for ep in sorted(entry_points(group=COMMAND_GROUP), key=lambda e: e.name):
        try:
            command = ep.load()
        except Exception as exc:  # a broken tool must not take `raftsink serve` down
            print(f"raftsink: command {ep.name!r} unavailable: {exc}", file=sys.stderr)
            continue
        p = sub.add_parser(ep.name, help=command.HELP, description=command.HELP)
        command.add_arguments(p)
        p.set_defaults(func=command.run)


def _setup_logging(level: str) -> None:
    logging.basicConfig(
        level=level.upper(),
        format="%(asctime)s %(levelname)s %(name)s %(message)s",
        stream=sys.stderr,
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="raftsink", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser(
        "serve",
        help="run one node",
        description="Run one raftsink node. Settings: TOML file < RAFTSINK_* < flags "
        "(docs/operations.md lists them all).",
    )
    p.add_argument("--config", help="TOML file with any of the settings below")
    from sink.config import add_config_arguments

    add_config_arguments(p)
    p.set_defaults(func=_cmd_serve)

    p = sub.add_parser("local", help="run a local cluster (3 nodes by default) until Ctrl-C")
    p.add_argument(
        "--data-dir", default=None, help="where to keep data (default: a temp dir, removed)"
    )
    p.add_argument("--nodes", type=int, default=3, help="number of nodes (default 3)")
    p.add_argument(
        "--processes-per-host",
        type=int,
        default=None,
        metavar="K",
        help="K node processes per emulated host: nodes 1..K are host h1, K+1..2K h2, ... "
        "(node.host); placement keeps a group's replicas on different hosts "
        "(default: every node its own host)",
    )
    p.add_argument(
        "--partition-groups",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="a Raft group per partition plus the controller (cluster.partition_groups; "
        "docs/partition-groups.md); --no-partition-groups: one Raft group for everything "
        "(default: on, or RAFTSINK_CLUSTER_PARTITION_GROUPS)",
    )
    p.add_argument("--partitions", type=int, default=1, help="partitions of auto-created topics")
    p.add_argument("--keep", action="store_true", help="keep the temporary data dir")
    p.add_argument(
        "--secure",
        action="store_true",
        help="TLS on the Kafka listeners (client certificates), the read API and between "
        "nodes, with a throw-away CA in DATA_DIR/certs (scripts/make-certs.sh)",
    )
    p.add_argument(
        "--authorization",
        action="store_true",
        help="ACL checks on (as `raftsink serve`), SASL SCRAM on the Kafka listeners, and a "
        "super user `admin` whose password is printed and kept in DATA_DIR/admin.password",
    )
    p.set_defaults(func=_cmd_local)

    p = sub.add_parser("status", help="show every node's Raft and partition state")
    p.add_argument("--cluster", help="cluster.json written by `raftsink local`")
    p.add_argument("--nodes", help="read API addresses HOST:PORT,...")
    p.add_argument("--json", action="store_true", help="raw JSON")
    from sink.cli_connect import add_read_api_args

    add_read_api_args(p)
    p.set_defaults(func=_cmd_status)

    p = sub.add_parser(
        "verify", help="check a data directory's segments and index (read-only unless --repair)"
    )
    p.add_argument("data_dir", help="a node's data directory (or its log/ directory)")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress output")
    p.add_argument(
        "--repair",
        action="store_true",
        help="when damage is found, make the node's next start repair it (keeps the intact "
        "prefix, fetches the rest from the peers); changes nothing else",
    )
    p.set_defaults(func=_cmd_verify)

    from sink.cli_acl import add_parser as add_acl_parser
    from sink.cli_members import add_parser as add_members_parser
    from sink.cli_partitions import add_parser as add_partitions_parser
    from sink.cli_quotas import add_parser as add_quotas_parser
    from sink.cli_users import add_parser as add_users_parser

    add_quotas_parser(sub)
    add_members_parser(sub)
    add_partitions_parser(sub)
    add_users_parser(sub)
    add_acl_parser(sub)

    _add_tool_commands(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command not in ("serve",):
        _setup_logging(os.environ.get("RAFTSINK_LOG_LEVEL", "WARNING"))
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
